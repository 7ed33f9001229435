"""Checkpoints: what training code reports, what users read and delete, and the retention policy
(checkpoint GC) applied when a trial ends and on demand.

The deleting itself is :class:`~det_hub.service.checkpoint_gc.CheckpointGC`'s; this manager
checks who asks and what may go: a checkpoint a model version names, or the latest of a trial
that can still resume from it, stays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from det_hub.defaults import RETENTION_DEFAULTS
from det_hub.service import wire
from det_hub.service.bus import EventBus, TrialsEnded
from det_hub.service.checkpoint_gc import CheckpointGC, RetentionPolicy
from det_hub.service.errors import BadRequest, Conflict, Forbidden, NotFound
from det_hub.service.serialize import checkpoint_json
from det_hub.states import CheckpointState, TrialState, shown_trial_state
from det_hub.store import Store, StoreConflict

if TYPE_CHECKING:
    from det_hub.service.auth import Principal
    from det_hub.service.experiments import ExperimentManager
    from det_hub.store import Checkpoint, MetricRow



class CheckpointManager:
    """Checkpoints and their deletion (see the module's docstring).

    Args:
        store: The master's store.
        experiments: The checkpoints' experiments and trials, and who may change them.
        gc: Deletes checkpoints' files.
        bus: Tells of trials' ends, when the experiment's retention policy is applied.
    """

    def __init__(self, store: Store, experiments: ExperimentManager, gc: CheckpointGC,
                 bus: EventBus) -> None:
        self.store = store
        self.experiments = experiments
        self.gc = gc
        bus.subscribe(TrialsEnded, self._on_trials_end)

    async def report(self, who: Principal,
                     report: wire.CheckpointReport) -> tuple[Checkpoint, bool]:
        """Record a checkpoint training code wrote (``COMPLETED``, or ``ACTIVE`` while it is
        being written); a completed one becomes its trial's latest. Without
        ``steps_completed`` its metadata's is taken, else 0. The uuid is the report's key:
        the same report again (a retry whose answer was lost) changes nothing.

        Returns:
            The checkpoint as stored, and whether this report was a repeat.

        Raises:
            BadRequest: The metadata's ``steps_completed`` is not a whole number >= 0.
            Conflict: The uuid is taken by another checkpoint (another trial's, or one in
                another state or at another step)."""
        uuid, state = report.uuid, report.state
        trial = await self.experiments.get_trial(who, report.trial_id, write=True)
        resources = report.resources or {}
        metadata = report.metadata or {}
        steps = report.steps_completed
        if steps is None:
            steps = metadata.get("steps_completed", 0)
            if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
                raise BadRequest("metadata.steps_completed: must be an integer >= 0")
        exp = await self.experiments.get(trial.experiment_id)
        try:
            ckpt = await self.store.add_checkpoint(
                uuid=uuid, trial_id=trial.id, experiment_id=trial.experiment_id,
                allocation_id=who.allocation.id if who.allocation else None, state=state,
                steps_completed=steps, resources=resources, metadata=metadata,
                storage=exp.config.get("checkpoint_storage") or {})
        except StoreConflict:
            stored = await self.store.get_checkpoint(uuid)
            if stored is None or (stored.trial_id, stored.state, stored.steps_completed) != (
                    trial.id, state, steps):
                raise Conflict(f"checkpoint {uuid} already exists") from None
            ckpt, repeat = stored, True
        else:
            repeat = False
        if state == CheckpointState.COMPLETED.value and trial.latest_checkpoint != uuid:
            await self.store.update_trial(trial.id, latest_checkpoint=uuid)
            trial.latest_checkpoint = uuid
        return ckpt, repeat

    async def get(self, who: Principal, uuid: str) -> Checkpoint:
        """A checkpoint (training code: only its own experiment's).

        Raises:
            NotFound: No such checkpoint.
            Forbidden: Training code asking for another experiment's."""
        ckpt = await self.store.get_checkpoint(uuid)
        if ckpt is None:
            raise NotFound(f"checkpoint {uuid} not found")
        if who.allocation is not None and ckpt.experiment_id != who.allocation.spec.experiment_id:
            raise Forbidden("training code may read only its own experiment's checkpoints")
        return ckpt

    async def of_experiment(self, experiment_id: int) -> list[Checkpoint]:
        """An experiment's checkpoints, newest first.

        Raises:
            NotFound: No such experiment.
        """
        await self.experiments.get(experiment_id)
        return await self.store.list_checkpoints(experiment_id=experiment_id)

    async def training(self, ckpt: Checkpoint) -> dict[str, Any]:
        """What a checkpoint was trained from, so that a model version built on it can be
        reproduced: the experiment's config and searcher metric, the trial's hparams and
        seed, the validation metrics reported at the checkpoint's step (None when none
        were), and where the model definition (the experiment's context) is fetched."""
        exp = await self.experiments.get(ckpt.experiment_id)
        trial = await self.store.get_trial(ckpt.trial_id)
        validation = await self.store.metrics_at(ckpt.trial_id, "validation",
                                                 ckpt.steps_completed)
        return {
            "experiment_config": exp.config,
            "searcher_metric": exp.searcher_metric,
            "hparams": trial.hparams if trial is not None else {},
            "trial_seed": trial.seed if trial is not None else None,
            "validation_metrics": validation.metrics if validation is not None else None,
            "model_definition": f"/api/v1/experiments/{exp.id}/context",
        }

    async def delete(self, who: Principal, uuid: str) -> Checkpoint:
        """Delete a checkpoint's files and mark it DELETED (its experiment's owner or an
        admin).

        Raises:
            NotFound: No such checkpoint.
            Forbidden: The caller may not change its experiment.
            Conflict: A model version names it; it is the latest checkpoint of a trial that
                can still run (and resume from it); or it is not COMPLETED.
        """
        ckpt = await self.get(who, uuid)
        exp = await self.experiments.get(ckpt.experiment_id)
        if not who.may_change(exp.owner_id):
            raise Forbidden(f"only the owner of experiment {exp.id} or an admin can delete "
                            "its checkpoints")
        registered = await self.registered_message(uuid)
        if registered:
            raise Conflict(registered)
        if ckpt.state != CheckpointState.COMPLETED.value:
            raise Conflict(f"checkpoint {uuid} is {ckpt.state}; only a COMPLETED checkpoint "
                           "can be deleted")
        trial = await self.experiments.get_trial(who, ckpt.trial_id)
        if trial.latest_checkpoint == uuid and not TrialState(trial.state).terminal:
            raise Conflict(f"checkpoint {uuid} is the latest of trial {trial.id}, which is "
                           f"{shown_trial_state(trial.state, trial.run_state)} and would resume "
                           "from it; delete it once the trial has ended")
        if not await self.gc.delete([ckpt]):
            # Registered or deleted since the checks above.
            raise Conflict(await self.registered_message(uuid)
                           or f"checkpoint {uuid} was deleted meanwhile")
        return await self.get(who, uuid)

    async def collect(self, who: Principal, experiment_id: int,
                      changes: wire.CheckpointGCPolicy) -> dict[str, Any]:
        """Set an experiment's retention policy and apply it now (``dry_run``: only say what
        it would delete, and change nothing). Settings ``changes`` leaves out keep their
        value.

        Returns:
            ``{"dry_run", "policy", "uuids" (deleted, or to delete), "checkpoints" (those
            checkpoints as they were), "registered" (let go by the policy but kept by a model
            version)}``.

        Raises:
            Forbidden, NotFound: As for the experiment's other changes.
        """
        await self.experiments.owned(who, experiment_id)
        row = await self.experiments.get(experiment_id)
        dry_run = changes.dry_run
        given = {k: v for k, v in changes.given().items() if k in RETENTION_DEFAULTS}
        storage_cfg = dict(row.config.get("checkpoint_storage") or {})
        current = RetentionPolicy.of(storage_cfg).as_dict()
        policy = RetentionPolicy(**{**current, **given})
        if not dry_run and policy.as_dict() != current:
            config = {**row.config, "checkpoint_storage": {**storage_cfg, **policy.as_dict()}}
            # Trials that end from now on are collected by the new policy.
            row = await self.experiments.update(experiment_id, config=config)
        trials = await self.experiments.trials(experiment_id)
        result = await self.gc.collect(row, trials, policy, dry_run=dry_run)
        return {"dry_run": dry_run, "policy": policy.as_dict(),
                "uuids": [c.uuid for c in result.doomed] if dry_run else result.deleted,
                "checkpoints": [checkpoint_json(c) for c in result.doomed
                                if dry_run or c.uuid in result.deleted],
                "registered": result.registered}

    async def metrics(self, who: Principal, uuid: str,
                                 group: str | None = None) -> list[MetricRow]:
        """The metrics (of one group, or all) of every trial that reported using this
        checkpoint, directly or through a model version: trial by trial, each ascending.

        Raises:
            NotFound: No such checkpoint.
        """
        ckpt = await self.get(who, uuid)
        return await self.store.checkpoint_metrics(ckpt.uuid, group=group)

    async def registered_message(self, uuid: str) -> str | None:
        """Why a checkpoint cannot be deleted, naming the versions that keep it; None when
        no version names it."""
        versions = (await self.store.registered_versions([uuid])).get(uuid)
        if not versions:
            return None
        named = ", ".join(f"model {m!r} version {v}" for m, v in versions)
        return (f"checkpoint {uuid} is registered as {named}; delete "
                f"{'that version' if len(versions) == 1 else 'those versions'} first")

    async def _on_trials_end(self, event: TrialsEnded) -> None:
        """Apply the experiment's checkpoint GC policy once trials have ended (one pass for
        all that ended together). An experiment none of whose trials has completed a
        checkpoint (each completed one becomes its trial's latest) has none to collect: a
        search of short trials that never checkpoint is not read at every trial's end."""
        if any(t.latest_checkpoint for t in event.run.trials.values()):
            await self.gc.collect(event.run.row, event.run.trials.values())
