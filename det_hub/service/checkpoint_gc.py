"""Deleting checkpoints: one by hand, or an experiment's by its retention policy (GC).

Which checkpoints a policy lets go is the pure :func:`det_hub.storage.gc.checkpoints_to_delete`;
this module adds what it cannot see, and does the deleting. It is the one place the master
deletes checkpoints, when a trial ends as on demand, so both keep the same two rules:

* a checkpoint a model version names is never deleted;
* the latest checkpoint of a trial that can still run (it is not in a terminal state) is kept,
  as the trial resumes from it.

A checkpoint is first marked DELETED in the store, which refuses to mark a registered one
(:meth:`det_hub.store.Store.claim_checkpoints_for_deletion`), and only then are its files
removed: a registration racing a deletion can never end with a model version naming files
that are gone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from det_hub.defaults import RETENTION_DEFAULTS
from det_hub.states import CheckpointState, TrialState
from det_hub.storage import build_storage
from det_hub.storage.gc import CheckpointRecord, checkpoints_to_delete

if TYPE_CHECKING:
    from det_hub.store import Checkpoint, Experiment, Store, Trial

log = logging.getLogger("det_hub.checkpoint_gc")

@dataclasses.dataclass(frozen=True)
class RetentionPolicy:
    """How many checkpoints an experiment keeps (``checkpoint_storage``'s retention settings,
    defaults :data:`det_hub.defaults.RETENTION_DEFAULTS`)."""

    save_experiment_best: int = RETENTION_DEFAULTS["save_experiment_best"]
    save_trial_best: int = RETENTION_DEFAULTS["save_trial_best"]
    save_trial_latest: int = RETENTION_DEFAULTS["save_trial_latest"]

    @classmethod
    def of(cls, storage_config: Mapping[str, Any] | None) -> RetentionPolicy:
        """The policy a ``checkpoint_storage`` section sets, defaults for what it leaves out."""
        section = storage_config or {}
        return cls(**{k: int(section.get(k, v)) for k, v in RETENTION_DEFAULTS.items()})

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Collection:
    """What one GC pass over an experiment decided, and did.

    Attributes:
        doomed: The checkpoints the policy lets go, by uuid; deleted unless it was a dry run.
        registered: Uuids the policy would have let go but that a model version keeps.
        deleted: Uuids actually deleted by this pass (empty for a dry run).
    """

    doomed: list[Checkpoint]
    registered: list[str]
    deleted: list[str]


class CheckpointGC:
    """Deletes checkpoints for the master; holds no state but the store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def collect(self, experiment: Experiment, trials: Iterable[Trial],
                      policy: RetentionPolicy | None = None, *,
                      dry_run: bool = False) -> Collection:
        """Apply a retention policy to an experiment's COMPLETED checkpoints.

        Args:
            experiment: The experiment; its searcher metric ranks the checkpoints.
            trials: Its trials, as they are now (the live objects of a running experiment),
                so that those that can still run keep their latest checkpoint.
            policy: The policy to apply; the experiment config's by default.
            dry_run: Decide only; delete nothing.
        """
        policy = policy or RetentionPolicy.of(experiment.config.get("checkpoint_storage"))
        ckpts = await self.store.list_checkpoints(
            experiment_id=experiment.id, states=[CheckpointState.COMPLETED.value])
        if not ckpts:
            return Collection([], [], [])
        values: dict[tuple[int, int], float] = {}
        for tid in {c.trial_id for c in ckpts}:
            for m in await self.store.get_metrics(tid, group="validation"):
                v = m.metrics.get(experiment.searcher_metric)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    values[(tid, m.steps_completed)] = float(v)
        doomed = checkpoints_to_delete(
            [CheckpointRecord(uuid=c.uuid, trial_id=c.trial_id,
                              steps_completed=c.steps_completed,
                              searcher_metric=values.get((c.trial_id, c.steps_completed)))
             for c in ckpts],
            save_experiment_best=policy.save_experiment_best,
            save_trial_best=policy.save_trial_best,
            save_trial_latest=policy.save_trial_latest,
            smaller_is_better=experiment.smaller_is_better)
        # A trial that can still run needs its latest checkpoint to resume from; and the
        # policy sees checkpoints at equal steps as ties, while a trial's latest is the one
        # it reported last.
        keep_latest = policy.save_trial_latest > 0
        doomed -= {t.latest_checkpoint for t in trials
                   if t.latest_checkpoint and (keep_latest or not TrialState(t.state).terminal)}
        registered = await self.store.registered_versions(doomed)
        doomed -= set(registered)
        chosen = sorted((c for c in ckpts if c.uuid in doomed), key=lambda c: c.uuid)
        if dry_run or not chosen:
            return Collection(chosen, sorted(registered), [])
        deleted = await self.delete(chosen)
        if deleted:
            log.info("experiment %d: checkpoint GC deleted %d checkpoint(s)", experiment.id,
                     len(deleted))
        return Collection(chosen, sorted(registered), deleted)

    async def delete(self, checkpoints: Iterable[Checkpoint]) -> list[str]:
        """Mark these checkpoints DELETED and remove their files, skipping any that a model
        version names or that are not COMPLETED (any more); returns the uuids deleted.

        Files are removed through the storage each checkpoint was written to. A failure
        there is logged, and the checkpoint stays DELETED: it is gone for the master either
        way, and its files are what is left to clean by hand.
        """
        by_uuid = {c.uuid: c for c in checkpoints}
        claimed = await self.store.claim_checkpoints_for_deletion(by_uuid)
        for uuid in claimed:
            try:
                storage = build_storage(by_uuid[uuid].storage)
                await asyncio.to_thread(storage.delete, uuid)
            # Whatever the storage raises (an OSError, botocore's own errors for S3): the
            # other checkpoints are still deleted.
            except Exception as e:  # noqa: BLE001
                log.warning("checkpoint %s is marked DELETED but its files were not removed: "
                            "%s", uuid, e)
        return claimed


__all__ = ["RETENTION_DEFAULTS", "CheckpointGC", "Collection", "RetentionPolicy"]
