"""The wire schema (det_hub/service/wire) against everything that speaks it.

* What the master sends: every object ``service/serialize.py`` builds, for rows of every kind,
  validates against its answer model with unknown fields forbidden; and every answer of a
  real master, endpoint by endpoint, validates against what the handler declares, both
  through the model and through the published ``openapi.json``.
* What the SDK reads: each answer model's fields are read by its ``det_hub.client`` class.
* What the panel reads: each interface of ``labextension/src/api/types.ts`` that mirrors an
  answer model has its fields, optional where the model may leave them out.
* The request models agree with the managers that check bodies themselves, and read bodies
  into the API's errors.
* ``openapi.json`` is OpenAPI 3.0: bodies and answers refer to component schemas, which are
  valid JSON schemas.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import enum
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from det_hub import nonfinite
from det_hub.client import _objects as sdk
from det_hub.client import _registry as sdk_registry
from det_hub.client import _webhooks as sdk_webhooks
from det_hub.defaults import RETENTION_DEFAULTS
from det_hub.searcher import EXIT_REASONS
from det_hub.service import registry, serialize, webhooks, wire
from det_hub.service.errors import BadRequest
from det_hub.service.handlers import api_routes
from det_hub.service.handlers.base import APIHandler
from det_hub.service.openapi import dereference, openapi_document, openapi_path
from det_hub.states import TaskType
from det_hub.store import models as orm
from det_hub.store.packing import MetricRow
from det_hub.testing import MasterProcess

REPO = Path(__file__).resolve().parents[2]
NOW = dt.datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=dt.timezone.utc)
UUID = "0f3c1a2b-5d6e-4f70-8a9b-0c1d2e3f4a5b"


def as_sent(obj: Any) -> Any:
    """``obj`` as it goes over the wire: NaN and infinities as Determined's strings."""
    return json.loads(nonfinite.dumps(obj))


# --- what serialize.py builds, from rows of every kind ---------------------------------------


def _user(**fields: Any) -> orm.User:
    return orm.User(**{"id": 1, "username": "alice", "admin": False, "active": True,
                       "created_at": NOW, "agent_uid": None, "agent_gid": None,
                       "agent_user": None, "agent_group": None, **fields})


def _experiment(**fields: Any) -> orm.Experiment:
    return orm.Experiment(**{
        "id": 3, "name": "mnist", "description": "", "owner_id": 1, "state": "ACTIVE",
        "archived": False, "progress": None, "config": {"searcher": {"name": "single"}},
        "searcher_metric": "loss", "smaller_is_better": True, "resource_pool": "default",
        "priority": 42, "weight": 1.0, "seed": 7, "created_at": NOW, "ended_at": None,
        "labels": None, "parent_id": None, **fields})


def _trial(**fields: Any) -> orm.Trial:
    return orm.Trial(**{
        "id": 7, "experiment_id": 3, "request_id": "0f3c", "state": "ACTIVE",
        "run_state": None, "hparams": {"lr": 0.1}, "seed": 123, "restarts": 0, "run_id": 1,
        "created_at": NOW, "ended_at": None, "steps_completed": 0, "progress": None,
        "latest_checkpoint": None, "best_validation": None, "latest_validation": None,
        "searcher_metric_value": None, **fields})


def _checkpoint(**fields: Any) -> orm.Checkpoint:
    return orm.Checkpoint(**{
        "uuid": UUID, "trial_id": 7, "experiment_id": 3, "allocation_id": "7.0",
        "state": "COMPLETED", "steps_completed": 500, "report_time": NOW,
        "resources": {"model.pt": 1234}, "meta": {"steps_completed": 500}, "size": 1234,
        "storage": {"type": "shared_fs", "host_path": "/ckpt", "storage_path": None},
        **fields})


def _task(kind: TaskType, **fields: Any) -> orm.Task:
    return orm.Task(**{
        "id": 5, "type": kind.value, "owner_id": 1, "state": "RUNNING", "description": "x",
        "config": {"entrypoint": ["python3", "prep.py"], "resources": {"slots": 2}},
        "resource_pool": "default", "priority": 42, "created_at": NOW, "ended_at": None,
        "exit_code": None, "exit_reason": None, "details": None, "secret": None,
        "proxy_address": None, **fields})


def _model(**fields: Any) -> orm.Model:
    return orm.Model(**{"id": 1, "name": "mnist-cnn", "description": "", "labels": None,
                        "notes": "", "meta": None, "owner_id": 1, "creation_time": NOW,
                        "last_updated_time": NOW, "archived": False, **fields})


def _version(**fields: Any) -> orm.ModelVersion:
    return orm.ModelVersion(**{"id": 4, "model_id": 1, "version": 2, "checkpoint_uuid": UUID,
                               "name": "", "comment": "", "notes": "", "labels": ["a"],
                               "meta": {"k": 1}, "owner_id": 1, "creation_time": NOW,
                               "last_updated_time": NOW, **fields})


NAN_METRICS = {"loss": float("nan"), "up": float("inf"), "down": -float("inf"), "acc": 0.5,
               "note": "text", "flag": True, "none": None, "curve": [1, 2]}
VALIDATION = {"steps_completed": 400, "metrics": NAN_METRICS}
PLACEMENT = {"agent_id": "gpu-host", "agent_type": "docker", "address": "10.0.0.2",
             "slot_ids": [0, 1], "docker": {"docker_host": "tcp://10.0.0.2:2376"},
             "gpus": ["GPU-0f3c", "GPU-1a2b"], "cpus": [],
             "environment": {"CUDA_VISIBLE_DEVICES": "0,1"}}


def _task_json(kind: TaskType, secret: bool, **fields: Any) -> dict[str, Any]:
    details = {"experiment_ids": [3]} if kind is TaskType.TENSORBOARD else (
        {"public_key": "ssh-ed25519 AAAA"} if kind is TaskType.SHELL else None)
    body = serialize.task_json(_task(kind, details=details, secret="s3cret", proxy_address="h:1",
                                     **fields), "alice", with_secret=secret)
    if kind.reserves_only and secret:
        body["placement"] = PLACEMENT  # what Master.placement gives a running hub server
    return body


SENT: list[tuple[type[BaseModel], Callable[[], Any]]] = [
    (wire.User, lambda: serialize.user_json(_user())),
    (wire.User, lambda: serialize.user_json(_user(agent_uid=1001, agent_gid=1001,
                                                  agent_user="alice"))),
    (wire.Experiment, lambda: serialize.experiment_json(_experiment(), "alice", 0)),
    (wire.Experiment, lambda: serialize.experiment_json(
        _experiment(state="COMPLETED", progress=1.0, ended_at=NOW, labels=["x"], parent_id=2),
        "alice", 4, float("nan"), state="COMPLETED")),
    (wire.Experiment, lambda: serialize.experiment_json(_experiment(), "alice", 1, 0.25,
                                                        state="RUNNING")),
    (wire.Trial, lambda: serialize.trial_json(_trial())),
    (wire.Trial, lambda: serialize.trial_json(_trial(
        state="ACTIVE", run_state="WAITING", progress=0.5, steps_completed=400,
        latest_checkpoint=UUID, best_validation=VALIDATION, latest_validation=VALIDATION,
        searcher_metric_value=float("-inf")))),
    (wire.Trial, lambda: serialize.trial_json(_trial(state="COMPLETED", ended_at=NOW))),
    (wire.MetricRow, lambda: serialize.metric_json(MetricRow(
        id=1, trial_id=7, group="validation", steps_completed=5, report_time=NOW,
        metrics=NAN_METRICS, trial_run=1))),
    (wire.TrialSourceInfo, lambda: serialize.trial_source_json(orm.TrialSourceInfo(
        trial_id=7, checkpoint_uuid=UUID, model_version_id=None, created_at=NOW))),
    (wire.TrialSourceInfo, lambda: serialize.trial_source_json(orm.TrialSourceInfo(
        trial_id=7, checkpoint_uuid=UUID, model_version_id=4, created_at=NOW), "m", 2)),
    (wire.Checkpoint, lambda: serialize.checkpoint_json(_checkpoint())),
    (wire.Checkpoint, lambda: serialize.checkpoint_json(_checkpoint(
        allocation_id=None, state="DELETED"), training={
            "experiment_config": {}, "searcher_metric": "loss", "hparams": {},
            "trial_seed": None, "validation_metrics": NAN_METRICS,
            "model_definition": "/api/v1/experiments/3/context"})),
    *[(wire.Task, lambda kind=kind, secret=secret: _task_json(kind, secret))
      for kind in TaskType for secret in (False, True)],
    (wire.Task, lambda: serialize.task_json(_task(
        TaskType.COMMAND, state="TERMINATED", ended_at=NOW, exit_code=0,
        exit_reason="exited with code 0", config={"entrypoint": "python3 prep.py"}), "alice")),
    (wire.Task, lambda: serialize.task_json(_task(TaskType.SHELL, secret=None), "a",
                                            with_secret=True)),
    (wire.Model, lambda: serialize.model_json(_model(), "alice", 0)),
    (wire.Model, lambda: serialize.model_json(_model(labels=["v"], meta={"f": "torch"},
                                                     archived=True), "alice", 2)),
    (wire.ModelVersion, lambda: serialize.model_version_json(
        _version(), "mnist-cnn", "alice", serialize.checkpoint_json(_checkpoint()))),
    (wire.ModelVersion, lambda: serialize.model_version_json(
        _version(labels=None, meta=None), "mnist-cnn", "alice", None)),
    (wire.Webhook, lambda: webhooks.webhook_json(orm.Webhook(
        id=1, name="ops", url="https://hooks.example.test/x", webhook_type="SLACK",
        mode="WORKSPACE", created_at=NOW, triggers=[
            orm.WebhookTrigger(id=1, trigger_type="EXPERIMENT_STATE_CHANGE",
                               condition={"state": "COMPLETED"}),
            orm.WebhookTrigger(id=2, trigger_type="CUSTOM", condition={})]))),
]


@pytest.mark.parametrize(("model", "build"), SENT,
                         ids=[f"{m.__name__}-{i}" for i, (m, _) in enumerate(SENT)])
def test_what_serialize_builds_is_its_answer_model(
        model: type[BaseModel], build: Callable[[], Any]) -> None:
    sent = as_sent(build())
    assert model.model_validate(sent).model_dump(mode="json", exclude_unset=True) == sent


def test_an_unknown_or_missing_field_fails_the_answer_model() -> None:
    sent = as_sent(serialize.trial_json(_trial()))
    with pytest.raises(ValueError, match="extra"):
        wire.Trial.model_validate({**sent, "colour": "red"})
    with pytest.raises(ValueError, match="request_id"):
        wire.Trial.model_validate({k: v for k, v in sent.items() if k != "request_id"})
    with pytest.raises(ValueError, match="steps_completed"):
        wire.Trial.model_validate({**sent, "steps_completed": "400"})


# --- what a real master answers, endpoint by endpoint ----------------------------------------


def _route(path: str) -> tuple[type[APIHandler], dict[str, Any]]:
    for route in api_routes:
        if re.fullmatch(route[0], path):
            return route[1], route[2] if len(route) > 2 else {}
    raise AssertionError(f"no route for {path}")


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _json_schema(schema: Any) -> Any:
    """An OpenAPI 3.0 schema (dereferenced) as a JSON schema: ``nullable`` as a null
    branch."""
    if isinstance(schema, list):
        return [_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _json_schema(v) for k, v in schema.items() if k != "nullable"}
    if schema.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


class Answers:
    """Calls a real master and holds each answer to what its handler declares: the model (or
    ``{key: model}``) in the handler's ``answers``, and the same in ``openapi.json``."""

    def __init__(self, master: MasterProcess) -> None:
        self.master = master
        self.document = master.get("/openapi.json")
        self.checked: set[tuple[str, str]] = set()

    def __call__(self, method: str, path: str, status: int = 200, **kwargs: Any) -> Any:
        import jsonschema

        r = self.master.api(method.upper(), path, **kwargs)
        assert r.status_code == status, (method, path, r.text,
                                         self.master.log_path.read_text()[-4000:])
        bare = path.split("?")[0]
        handler, arguments = _route(bare)
        answer = handler.answers[method]
        if isinstance(answer, wire.Lines):
            lines = [json.loads(line) for line in r.text.splitlines()]
            for line in lines:
                answer.model.model_validate(line)
            return lines
        body = r.json()
        if isinstance(answer, tuple):
            key, inner = answer
            key = key.format(**arguments)
            assert list(body) == [key], (path, list(body))
            TypeAdapter(inner).validate_python(body[key])
        else:
            answer.model_validate(body)
        template = openapi_path(next(r[0] for r in api_routes if re.fullmatch(r[0], bare)))
        operation = self.document["paths"][template][method]
        declared = operation["responses"][str(status)]["content"]["application/json"]["schema"]
        jsonschema.Draft4Validator(_json_schema(dereference(self.document, declared))).validate(
            body)
        self.checked.add((method, template))
        return body


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    return module_master


@pytest.mark.slow
def test_every_answer_of_a_real_master_is_what_its_handler_declares(
        master: MasterProcess, kept_checkpoints: Callable[..., int],
        steps_experiment: Callable[..., dict[str, Any]]) -> None:
    answered = Answers(master)
    answered("get", "/health")
    answered("get", "/me")
    eid = kept_checkpoints(master)
    answered("get", "/experiments")
    answered("get", f"/experiments/{eid}")
    [trial] = answered("get", f"/experiments/{eid}/trials")["trials"]
    tid = trial["id"]
    assert trial["best_validation"] is not None
    answered("get", f"/trials/{tid}")
    answered("get", f"/trials/{tid}/metrics")
    answered("get", f"/trials/{tid}/metrics?max_points=2&metric=validation_loss")
    assert answered("get", f"/trials/{tid}/metrics/rolled_back") == {"metrics": []}
    assert answered("get", f"/trials/{tid}/logs")
    answered("get", f"/experiments/{eid}/searcher")
    answered("get", f"/experiments/{eid}/searcher_state")
    answered("get", f"/experiments/{eid}/hyperparameter-importance")
    assert answered("get", f"/experiments/{eid}/search-view") == {"search": None}
    answered("get", f"/trials/{tid}/searcher/operation")
    answered("get", f"/trials/{tid}/experiment_best_validation")
    checkpoints = answered("get", f"/experiments/{eid}/checkpoints")["checkpoints"]
    uuid = checkpoints[0]["uuid"]
    assert "training" in answered("get", f"/checkpoints/{uuid}")["checkpoint"]
    answered("post", f"/experiments/{eid}/gc", json={"dry_run": True})

    answered("post", "/models", 201, json={"name": "wire", "labels": ["x"]})
    answered("get", "/models")
    answered("get", "/models/wire")
    answered("post", "/models/wire/versions", 201, json={"checkpoint_uuid": uuid})
    answered("get", "/models/wire/versions")
    answered("get", "/models/wire/versions/1")
    answered("post", f"/trials/{tid}/source_info", json={
        "checkpoint_uuid": uuid, "model_name": "wire", "model_version": 1})
    answered("get", f"/checkpoints/{uuid}/metrics")
    answered("get", "/models/wire/versions/1/metrics")

    # A running experiment: its job, its operation, and what training code reports.
    running = master.create_ok(steps_experiment(10_000, 0.05, name="running"))
    try:
        rid = master.wait(lambda: [t for t in master.trials(running)
                                   if t["run_state"] == "RUNNING"])[0]["id"]
        assert answered("get", "/jobs")["jobs"]
        answered("get", f"/jobs/exp-{running}")
        answered("patch", f"/jobs/exp-{running}", json={"priority": 40})
        answered("get", f"/trials/{rid}/searcher/operation")
        stored = answered("post", f"/trials/{rid}/metrics", json={
            "group": "wire", "key": "wire:1", "metrics": [
                {"steps_completed": 1, "metrics": {"loss": "NaN", "acc": "Infinity"}},
                {"steps_completed": 2, "metrics": {"loss": 0.5}, "report_time": None}]})
        assert stored == {"count": 2, "repeat": False}
        answered("post", f"/trials/{rid}/progress", json={"progress": 0.5})
        answered("get", "/agents")
        agent_id = answered("get", "/agents")["agents"][0]["id"]
        answered("get", f"/agents/{agent_id}")
        answered("get", "/resource_pools")
        answered("get", f"/experiments/{running}")
    finally:
        answered("post", f"/experiments/{running}/kill")
    master.wait_state(running)

    answered("post", "/users", 201, json={"username": "wire-bob"})
    answered("get", "/users")
    answered("patch", "/users/wire-bob", json={"agent_user_group": {
        "agent_uid": 1001, "agent_gid": 1001}})
    answered("post", "/webhooks", 201, json={"url": "http://127.0.0.1:9/x", "triggers": [
        {"trigger_type": "CUSTOM", "condition": {}}]})
    answered("get", "/webhooks")
    answered("get", "/webhooks/signing_key")
    command = answered("post", "/commands", 201, json={"config": "entrypoint: sleep 30"})
    answered("get", "/commands")
    answered("post", f"/commands/{command['command']['id']}/kill")

    # Bad bodies are read through the models: the error names the field.
    r = master.api("POST", f"/trials/{tid}/metrics", json={
        "group": "training", "metrics": [{"steps_completed": 1, "metrics": {}},
                                         {"steps_completed": -1, "metrics": {}}]})
    assert r.status_code == 400 and r.json() == {
        "error": "metrics[1].steps_completed: must be >= 0",
        "details": [{"path": "metrics[1].steps_completed", "message": "must be >= 0"}]}
    r = master.api("POST", f"/trials/{tid}/searcher/completed_operation",
                   json={"length": 3, "searcher_metric": "nan"})
    assert r.status_code == 400 and r.json()["error"].startswith("searcher_metric: ")
    assert len(answered.checked) >= 40


# --- what the SDK reads ----------------------------------------------------------------------


def _time(info: FieldInfo | None) -> bool:
    extra = info.json_schema_extra if info is not None else None
    return isinstance(extra, dict) and extra.get("format") == "date-time"


def sample(annotation: Any, variant: int, info: FieldInfo | None = None) -> Any:
    """A value of ``annotation``, one of two (``variant`` 0 or 1) that differ everywhere."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *metadata = get_args(annotation)
        found = next((m for m in metadata if isinstance(m, FieldInfo)), info)
        return sample(inner, variant, found)
    if _is_model(annotation):
        return {name: sample(f.annotation, variant, f)
                for name, f in annotation.model_fields.items()}
    if origin is Literal:
        return get_args(annotation)[variant]
    if origin is Union or (origin is not None and type(None) in get_args(annotation)):
        return sample(next(a for a in get_args(annotation) if a is not type(None)), variant,
                      info)
    if origin is list:
        return [sample(get_args(annotation)[0], variant)]
    if origin is dict:
        return {f"key{variant}": sample(get_args(annotation)[1], variant)}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return list(annotation)[variant].value
    if annotation is bool:
        return variant == 0
    if annotation is int:
        return 3 + variant
    if annotation is float:
        return 0.25 + variant
    if annotation is str:
        return f"2026-11-2{variant}T10:00:00Z" if _time(info) else f"text{variant}"
    return {"any": variant}


#: Each answer model and the SDK class that reads it.
SDK_CLASSES: dict[type[BaseModel], Callable[[dict[str, Any]], Any]] = {
    wire.AgentUserGroup: sdk.AgentUserGroup.from_json,
    wire.User: sdk.User.from_json,
    wire.NewUser: sdk.NewUser.from_json,
    wire.Experiment: sdk.Experiment.from_json,
    wire.Trial: sdk.Trial.from_json,
    wire.MetricRow: sdk.MetricReport.from_json,
    wire.Checkpoint: sdk.Checkpoint.from_json,
    wire.Slot: sdk.Slot.from_json,
    wire.Agent: sdk.Agent.from_json,
    wire.ResourcePool: sdk.ResourcePool.from_json,
    wire.Job: sdk.Job.from_json,
    wire.Task: sdk.Task.from_json,
    wire.Model: sdk_registry.Model.from_json,
    wire.ModelVersion: sdk_registry.ModelVersion.from_json,
    wire.CheckpointGCResult: sdk_registry.CheckpointGCResult.from_json,
    wire.Webhook: sdk_webhooks.Webhook.from_json,
}
#: Fields the SDK reads elsewhere, and where.
SDK_ELSEWHERE = {
    (wire.ModelVersion, "checkpoint_uuid"): "the uuid of its checkpoint",
}


@pytest.mark.parametrize("model", list(SDK_CLASSES), ids=lambda m: m.__name__)
def test_the_sdk_reads_every_field_of_each_answer(model: type[BaseModel]) -> None:
    read = SDK_CLASSES[model]
    base = sample(model, 0)
    model.model_validate(base)  # a real answer
    for name, info in model.model_fields.items():
        if (model, name) in SDK_ELSEWHERE:
            continue
        other = {**base, name: sample(info.annotation, 1, info)}
        first, second = read(copy.deepcopy(base)), read(other)
        assert hasattr(first, name), f"{type(first).__name__} has no attribute {name!r}"
        assert getattr(first, name) != getattr(second, name), (
            f"{type(first).__name__}.from_json does not read {name!r}")


def test_the_sdk_reads_webhook_triggers_whole() -> None:
    trigger = sample(wire.WebhookTrigger, 0)
    [read] = sdk_webhooks.Webhook.from_json({**sample(wire.Webhook, 0),
                                              "triggers": [trigger]}).triggers
    assert dataclasses.asdict(read) == trigger


# --- what the panel reads --------------------------------------------------------------------

TYPES_TS = REPO / "labextension" / "src" / "api" / "types.ts"
#: Each interface of types.ts and the answer model it mirrors.
PANEL_INTERFACES: dict[str, type[BaseModel]] = {
    "IUser": wire.User,
    "IAgentUserGroup": wire.AgentUserGroup,
    "IExperiment": wire.Experiment,
    "IValidation": wire.Validation,
    "ITrial": wire.Trial,
    "ICheckpoint": wire.Checkpoint,
    "ICheckpointTraining": wire.CheckpointTraining,
    "IMetricRow": wire.MetricRow,
    "ISlot": wire.Slot,
    "IAgent": wire.Agent,
    "IResourcePool": wire.ResourcePool,
    "IJob": wire.Job,
    "IClusterAllocation": wire.ClusterAllocation,
    "IClusterState": wire.ClusterState,
    "ILogLine": wire.TrialLogLine,
    "IStreamState": wire.ExperimentStreamState,
    "IStreamTrial": wire.TrialStreamState,
    "IRolledBack": wire.StreamRollback,
    "IRung": wire.Rung,
    "IRungResult": wire.RungResult,
    "IBracket": wire.Bracket,
    "IRungTable": wire.RungTable,
    "ISearcherView": wire.SearcherView,
    "ISearchView": wire.SearchView,
    "ISearchScatter": wire.SearchScatter,
    "IHyperparameterImportance": wire.HyperparameterImportance,
    "IParameterImportance": wire.ParameterImportance,
    "IModel": wire.Model,
    "IModelVersion": wire.ModelVersion,
}
#: Interfaces that are no answer of the master's.
PANEL_OWN = {"IDetHubConfig": "the server extension's config"}


def typescript_interfaces(source: str) -> dict[str, dict[str, bool]]:
    """``{interface: {field: optional}}`` of every ``export interface`` in TypeScript source
    (top-level fields only; comments ignored)."""
    source = re.sub(r"/\*.*?\*/|//[^\n]*", "", source, flags=re.DOTALL)
    out: dict[str, dict[str, bool]] = {}
    for m in re.finditer(r"export interface (\w+)[^{]*\{", source):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(source[i], 0)
            i += 1
        body, fields, level, start = source[m.end():i - 1].replace("=>", "  "), {}, 0, 0
        for j, c in enumerate(body + ";"):
            level += {"{": 1, "(": 1, "[": 1, "<": 1, "}": -1, ")": -1, "]": -1, ">": -1}.get(c, 0)
            if c == ";" and level == 0:
                member = re.match(r"\s*(?:readonly\s+)?(\w+)(\?)?\s*:", body[start:j])
                if member:
                    fields[member.group(1)] = bool(member.group(2))
                start = j + 1
        out[m.group(1)] = fields
    return out


def test_typescript_interfaces_are_read_with_their_optional_fields() -> None:
    parsed = typescript_interfaces("export interface IA {\n  /** doc; with a semicolon */\n"
                                   "  a: number;\n  b?: { c: string; d: number }[] | null;\n"
                                   "  e: (x: number) => void;\n}\n")
    assert parsed == {"IA": {"a": False, "b": True, "e": False}}


def test_the_panel_types_have_every_field_of_the_answers() -> None:
    interfaces = typescript_interfaces(TYPES_TS.read_text())
    unknown = set(interfaces) - set(PANEL_INTERFACES) - set(PANEL_OWN)
    assert not unknown, f"types.ts interfaces that mirror no answer model: {sorted(unknown)}"
    problems = []
    for name, model in PANEL_INTERFACES.items():
        fields = interfaces.get(name)
        if fields is None:
            problems.append(f"{name}: missing from types.ts ({model.__name__})")
            continue
        for field in model.model_fields.keys() - fields.keys():
            problems.append(f"{name}.{field}: missing ({model.__name__} has it)")
        for field in fields.keys() - model.model_fields.keys():
            problems.append(f"{name}.{field}: not a field of {model.__name__}")
        for field, info in model.model_fields.items():
            if field in fields and not info.is_required() and not fields[field]:
                problems.append(f"{name}.{field}: must be optional ({model.__name__} may "
                                "leave it out)")
    assert not problems, "\n".join(problems)


# --- request bodies --------------------------------------------------------------------------


def test_the_request_models_agree_with_the_managers_that_check_bodies() -> None:
    assert set(wire.CheckpointGCPolicy.model_fields) == {"dry_run", *RETENTION_DEFAULTS}
    assert get_args(wire.TrialEarlyExit.model_fields["reason"].annotation) == EXIT_REASONS
    assert list(wire.ModelCreate.model_fields) == list(registry._MODEL_FIELDS)
    assert set(wire.ModelChanges.model_fields) == {*registry._MODEL_FIELDS,
                                                   *registry._METADATA_CHANGES}
    assert set(wire.VersionCreate.model_fields) == {"checkpoint_uuid", *registry._VERSION_FIELDS}
    assert set(wire.VersionChanges.model_fields) == {*registry._VERSION_FIELDS,
                                                     *registry._METADATA_CHANGES}
    with pytest.raises(BadRequest) as refused:
        webhooks.parse_webhook({"url": "http://127.0.0.1:1/", "triggers": [
            {"trigger_type": "CUSTOM"}], "colour": 1})
    assert refused.value.details[0]["message"] == (
        "unknown field; one of " + ", ".join(sorted(wire.WebhookCreate.model_fields)))
    assert get_args(wire.WebhookCreate.model_fields["webhook_type"].annotation) == \
        webhooks.WEBHOOK_TYPES
    assert get_args(wire.WebhookCreate.model_fields["mode"].annotation) == webhooks.MODES
    assert get_args(wire.WebhookTriggerSpec.model_fields["trigger_type"].annotation) == \
        webhooks.TRIGGER_TYPES
    for levels in (wire.CustomAlert.model_fields["level"].annotation,
                   wire.Alert.model_fields["level"].annotation):
        assert get_args(levels) == webhooks.ALERT_LEVELS
    alert = webhooks.parse_alert({"title": "t", "description": "d", "level": "warn"})
    assert set(wire.CustomAlert.model_fields) == set(dataclasses.asdict(alert))


@pytest.mark.parametrize(("model", "body", "error", "paths"), [
    (wire.MetricBatch, {"group": "", "metrics": [{"steps_completed": 1.5, "metrics": []}, 3]},
     "group: must be a name such as 'training' or 'validation'",
     ["group", "metrics[0].steps_completed", "metrics[0].metrics", "metrics[1]"]),
    (wire.MetricBatch, {"group": "training", "metrics": [], "key": "a b"},
     "key: must be 1 to 128 letters, digits or ':._-'", ["key"]),
    (wire.MetricColumns, {"group": "training", "steps": [1, -2, True],
                          "metrics": {"loss": [1.0, 2.0, 3.0]}},
     "steps: must be a list of whole numbers >= 0, one per row", ["steps"]),
    (wire.MetricColumns, {"group": "training", "steps": [1, 2], "metrics": {"loss": [1.0]}},
     "metrics.loss: 1 values for 2 steps; give one value per step", [""]),
    (wire.MetricColumns, {"group": "training", "steps": [1, 2], "metrics": {"loss": [1, 2]},
                          "report_times": [1.5]},
     "report_times: 1 times for 2 steps; give one time per step", [""]),
    (wire.MetricColumns, {"group": "training", "metrics": {"loss": [1.0]}},
     "steps: must be a list of whole numbers >= 0, one per row", ["steps"]),
    (wire.JobChanges, {"priority": 5, "ahead_of": "exp-1"},
     "priority: cannot be given with ahead_of, which gives the job the priority of the job it "
     "moves ahead of", ["priority"]),
    (wire.JobChanges, {}, "nothing to change: give priority, weight or ahead_of", [""]),
    (wire.JobChanges, {"priority": 0}, "priority: must be between 1 and 99", ["priority"]),
    (wire.UserChanges, {"agent_user_group": {"agent_uid": 1, "agent_gid": 1, "shell": "sh"}},
     "agent_user_group.shell: unknown field; one of agent_uid, agent_gid, agent_user, "
     "agent_group", ["agent_user_group.shell"]),
    (wire.UserChanges, {"agent_user_group": 7}, "agent_user_group: must be an object or null",
     ["agent_user_group"]),
    (wire.CheckpointGCPolicy, {"save_trial_best": -1, "keep": 1}, "invalid checkpoint GC policy",
     ["save_trial_best", "keep"]),
    (wire.TrialSourceLink, {"checkpoint_uuid": UUID, "model_name": "m"},
     "model_name and model_version: give both to name a model version, or neither to name "
     "only a checkpoint", [""]),
    (wire.CompletedOperation, {"length": True, "searcher_metric": "nan"},
     "length: must be an integer >= 0", ["length", "searcher_metric"]),
    (wire.TaskCreate, {"experiment_ids": [1, "x"]},
     "experiment_ids: must be a list of experiment ids", ["experiment_ids"]),
])
def test_a_bad_body_is_refused_naming_each_field(model: type[wire.RequestModel], body: Any,
                                                 error: str, paths: list[str]) -> None:
    with pytest.raises(BadRequest) as refused:
        wire.parse(model, body)
    assert refused.value.status_code == 400
    assert refused.value.message == error
    assert [d["path"] for d in refused.value.details] == paths
    assert all(d["message"] for d in refused.value.details)


def test_a_good_body_gives_what_was_sent() -> None:
    rows = [{"steps_completed": 0, "metrics": {"loss": "NaN", "x": [1]}},
            {"steps_completed": 1, "metrics": {}, "report_time": "2026-11-22T10:00:00Z"}]
    batch = wire.parse(wire.MetricBatch, {"group": "training", "metrics": rows, "key": "r:1"})
    assert batch.metrics == rows and all(type(r) is dict for r in batch.metrics)
    assert wire.parse(wire.CheckpointGCPolicy, {"dry_run": True}).given() == {"dry_run": True}
    changes = wire.parse(wire.UserChanges, {"agent_user_group": None})
    assert changes.given() == {"agent_user_group": None}
    assert wire.parse(wire.TrialProgress, {"progress": 1}).progress == 1.0


# --- openapi.json ----------------------------------------------------------------------------

#: JSON Schema keywords OpenAPI 3.0's schema objects do not have.
NOT_OPENAPI_30 = {"$defs", "$schema", "const", "prefixItems", "examples", "unevaluatedProperties",
                  "dependentRequired", "dependentSchemas", "$anchor", "contentEncoding"}


def _walk(value: Any) -> Any:
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def _names_a_model(answer: Any) -> bool:
    """Whether a handler's ``answers`` entry is a model, or lists one."""
    inner = answer[1] if isinstance(answer, tuple) else answer
    return isinstance(inner, wire.Lines) or _is_model(inner) or any(
        _is_model(a) for a in get_args(inner))


def test_openapi_bodies_and_answers_refer_to_valid_component_schemas() -> None:
    import jsonschema

    document = openapi_document(api_routes)
    components = document["components"]["schemas"]
    bodies = 0
    for route in api_routes:
        handler = route[1]
        for method, op in document["paths"][openapi_path(route[0])].items():
            path = route[0]
            if method in handler.body:
                schema = op["requestBody"]["content"]["application/json"]["schema"]
                models = get_args(handler.body[method]) or (handler.body[method],)
                refs = [{"$ref": f"#/components/schemas/{m.__name__}"} for m in models]
                assert schema == (refs[0] if len(refs) == 1 else {"anyOf": refs}), (method, path)
                bodies += 1
            oks = [s for s in op["responses"] if s.startswith("2")]
            assert oks, (method, path)
            if _names_a_model(handler.answers.get(method)):
                for ok in oks:  # 201, and 200 for a repeat of a keyed report
                    [content] = op["responses"][ok]["content"].values()
                    assert any("$ref" in s for s in _walk(content["schema"])), (method, path)
    assert bodies >= 20
    for node in _walk(document):
        if "$ref" in node:
            assert node["$ref"].removeprefix("#/components/schemas/") in components, node
            assert set(node) == {"$ref"}, node  # 3.0 ignores keywords beside a $ref
    for name, schema in components.items():
        jsonschema.Draft4Validator.check_schema(schema)
        for node in _walk(schema):
            assert not NOT_OPENAPI_30 & set(node), (name, node)
            assert not isinstance(node.get("type"), list) and node.get("type") != "null", (
                name, node)


def test_openapi_describes_nullable_and_nonfinite_fields() -> None:
    document = openapi_document(api_routes)
    trial = document["components"]["schemas"]["Trial"]["properties"]
    assert trial["ended_at"] == {"type": "string", "format": "date-time", "nullable": True}
    metric = trial["searcher_metric_value"]
    assert metric["nullable"] is True
    assert {"type": "string", "enum": ["NaN", "Infinity", "-Infinity"]} in metric["anyOf"]
    link = dereference(document, document["paths"]["/api/v1/users/{username}"]["patch"][
        "requestBody"]["content"]["application/json"]["schema"])["properties"][
        "agent_user_group"]
    assert link["nullable"] is True and link["required"] == ["agent_uid", "agent_gid"]
