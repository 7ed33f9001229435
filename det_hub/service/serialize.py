"""Rows to the JSON shapes of docs/rest-api.md."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from det_hub.states import TaskState, TaskType, shown_trial_state

if TYPE_CHECKING:
    from det_hub.store.models import (
        Checkpoint,
        Experiment,
        Model,
        ModelVersion,
        RolledBackMetric,
        Task,
        Trial,
        TrialSourceInfo,
        User,
    )
    from det_hub.store.packing import MetricRow


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.isoformat().replace("+00:00", "Z")


def user_json(user: User) -> dict[str, Any]:
    return {"id": user.id, "username": user.username, "admin": user.admin,
            "active": user.active, "created_at": iso(user.created_at),
            "agent_user_group": None if user.agent_uid is None or user.agent_gid is None else {
                "agent_uid": user.agent_uid, "agent_gid": user.agent_gid,
                "agent_user": user.agent_user, "agent_group": user.agent_group}}


def experiment_json(e: Experiment, owner: str, num_trials: int,
                    best_searcher_metric: float | None = None, *,
                    state: str | None = None) -> dict[str, Any]:
    """An experiment as lists and its own endpoint show it; ``best_searcher_metric`` is the
    best value of the searcher metric any of its trials reported (None before any), and
    ``state`` the state shown (:func:`det_hub.states.shown_experiment_state`; the stored one
    when not given)."""
    return {
        "id": e.id, "name": e.name, "description": e.description, "owner": owner,
        "state": state or e.state, "archived": e.archived, "progress": e.progress,
        "created_at": iso(e.created_at), "ended_at": iso(e.ended_at), "config": e.config,
        "searcher_metric": e.searcher_metric, "smaller_is_better": e.smaller_is_better,
        "best_searcher_metric": best_searcher_metric, "num_trials": num_trials, "resource_pool": e.resource_pool, "priority": e.priority,
        "weight": e.weight, "job_id": f"exp-{e.id}",
        "seed": e.seed, "labels": e.labels or [], "forked_from": e.parent_id,
    }


def trial_json(t: Trial) -> dict[str, Any]:
    return {
        "id": t.id, "experiment_id": t.experiment_id, "request_id": t.request_id,
        "state": shown_trial_state(t.state, t.run_state), "run_state": t.run_state, "hparams": t.hparams, "seed": t.seed,
        "restarts": t.restarts, "run_id": t.run_id, "created_at": iso(t.created_at), "ended_at": iso(t.ended_at),
        "steps_completed": t.steps_completed, "progress": t.progress,
        "latest_checkpoint": t.latest_checkpoint, "best_validation": t.best_validation,
        "latest_validation": t.latest_validation,
        "searcher_metric_value": t.searcher_metric_value,
    }


def metric_json(r: MetricRow) -> dict[str, Any]:
    """One reported row of a trial's metrics, as every metrics endpoint lists it."""
    return {"id": r.id, "trial_id": r.trial_id, "group": r.group,
            "steps_completed": r.steps_completed, "report_time": iso(r.report_time),
            "metrics": r.metrics}


def rolled_back_metric_json(r: RolledBackMetric) -> dict[str, Any]:
    """A metric row a later run of its trial rolled back, with the runs involved."""
    return {"id": r.id, "trial_id": r.trial_id, "group": r.group,
            "steps_completed": r.steps_completed, "report_time": iso(r.report_time),
            "metrics": r.metrics, "trial_run": r.trial_run,
            "rolled_back_by_run": r.rolled_back_by_run, "rolled_back_at": iso(r.rolled_back_at)}


def trial_source_json(link: TrialSourceInfo, model_name: str | None = None,
                      model_version: int | None = None) -> dict[str, Any]:
    """A trial's link to a checkpoint it used; ``model_name`` and ``model_version`` name
    the model version it was linked through (None for a plain checkpoint link)."""
    return {"trial_id": link.trial_id, "checkpoint_uuid": link.checkpoint_uuid,
            "model_name": model_name, "model_version": model_version,
            "created_at": iso(link.created_at)}


def checkpoint_json(c: Checkpoint, training: dict[str, Any] | None = None) -> dict[str, Any]:
    """A checkpoint; ``training`` (see ``CheckpointManager.training``) where one is asked
    for alone, as it costs a few queries."""
    body = {
        "uuid": c.uuid, "trial_id": c.trial_id, "experiment_id": c.experiment_id,
        "allocation_id": c.allocation_id, "state": c.state,
        "steps_completed": c.steps_completed, "report_time": iso(c.report_time),
        "resources": c.resources, "metadata": c.meta, "size": c.size, "storage": c.storage,
    }
    if training is not None:
        body["training"] = training
    return body


def task_json(t: Task, owner: str, *, with_secret: bool = False) -> dict[str, Any]:
    """A command, notebook, shell or TensorBoard. ``with_secret`` (for its owner and admins)
    adds what lets one use a proxied task: the URL path with its access token, or a shell's
    private key."""
    kind = TaskType(t.type)
    body = {
        "id": t.id, "type": t.type, "description": t.description, "owner": owner,
        "state": t.state, "entrypoint": t.config.get("entrypoint"),
        "resource_pool": t.resource_pool, "priority": t.priority,
        "slots": (t.config.get("resources") or {}).get("slots", 1),
        "job_id": f"{kind.job_prefix}{t.id}", "created_at": iso(t.created_at),
        "ended_at": iso(t.ended_at), "exit_code": t.exit_code, "exit_reason": t.exit_reason,
        "config": t.config,
    }
    if kind.proxied:
        body["proxy_path"] = f"/proxy/{t.id}/"
        body["ready"] = t.state == TaskState.RUNNING.value and bool(t.proxy_address)
        details = t.details or {}
        if kind is TaskType.TENSORBOARD:
            body["experiment_ids"] = details.get("experiment_ids", [])
        if kind is TaskType.SHELL:
            body["public_key"] = details.get("public_key")
            if with_secret:
                body["private_key"] = t.secret
        elif with_secret and t.secret:
            page = "lab" if kind is TaskType.NOTEBOOK else ""
            body["url"] = f"/proxy/{t.id}/{page}?token={t.secret}"
    return body


def model_json(m: Model, owner: str, num_versions: int) -> dict[str, Any]:
    return {
        "id": m.id, "name": m.name, "description": m.description, "labels": m.labels or [],
        "notes": m.notes, "metadata": m.meta or {}, "owner": owner,
        "creation_time": iso(m.creation_time), "last_updated_time": iso(m.last_updated_time),
        "archived": m.archived, "num_versions": num_versions,
    }


def model_version_json(v: ModelVersion, model_name: str, owner: str,
                       checkpoint: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "id": v.id, "model_id": v.model_id, "model_name": model_name, "version": v.version,
        "checkpoint_uuid": v.checkpoint_uuid, "checkpoint": checkpoint, "name": v.name,
        "comment": v.comment, "notes": v.notes, "labels": v.labels or [],
        "metadata": v.meta or {}, "owner": owner, "creation_time": iso(v.creation_time),
        "last_updated_time": iso(v.last_updated_time),
    }
