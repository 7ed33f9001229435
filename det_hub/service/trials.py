"""Trials as training code reports on them (metrics, progress, searcher operations, what they
used) and as users read them (metrics, logs).

Who may see or report for a trial is :meth:`ExperimentManager.get_trial`'s to decide; a report
goes to the trial's live :class:`~det_hub.service.experiment.ExperimentRun`, which acts on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from det_hub import nonfinite
from det_hub.service import wire
from det_hub.service.bus import EventBus, MetricsRolledBack
from det_hub.service.errors import Conflict, Forbidden, NotFound
from det_hub.service.experiment import (
    validation_fields,
    validation_length,
)
from det_hub.service.pubsub import MetricEvents
from det_hub.service.reports import pack_report
from det_hub.service.serialize import trial_source_json
from det_hub.states import TrialState
from det_hub.store import NotFound as StoreNotFound
from det_hub.store import Store, StoreConflict

if TYPE_CHECKING:
    from collections.abc import Iterable

    from det_hub.service.auth import Principal
    from det_hub.service.cluster import Cluster
    from det_hub.service.experiments import ExperimentManager
    from det_hub.service.registry import ModelRegistry
    from det_hub.store import LogRow, MetricRow, Trial
    from det_hub.store.metric_writes import StoredNotice
    from det_hub.store.models import RolledBackMetric
    from det_hub.store.packing import MetricColumns


class TrialManager:
    """Trials' reports and reads (see the module's docstring).

    Args:
        store: The master's store.
        cluster: Whether a trial's allocation is still open.
        experiments: The trials' experiments and their live runs.
        registry: The model versions a trial may report it used.
        metric_events: Told of every batch of metric rows once it is stored.
    """

    def __init__(self, store: Store, cluster: Cluster, experiments: ExperimentManager,
                 registry: ModelRegistry, metric_events: MetricEvents, bus: EventBus) -> None:
        self.store = store
        self.cluster = cluster
        self.experiments = experiments
        self.registry = registry
        self.metric_events = metric_events
        #: The channel every stored batch is announced on (PostgreSQL, while ingest workers
        #: store batches too; see :mod:`det_hub.service.ingest`). While set, the live streams
        #: hear of batches only from the announcements (:meth:`on_stored`), the master's own
        #: too, so that they get every trial's rows in the order they were committed.
        self.announce: str | None = None
        bus.subscribe(MetricsRolledBack, self._on_rolled_back)

    async def _on_rolled_back(self, event: MetricsRolledBack) -> None:
        """A trial's rows past a step were rolled back: the live streams drop them too."""
        self.metric_events.publish_rollback(event.experiment_id, {
            "trial_id": event.trial_id, "run_id": event.run_id,
            "steps_completed": event.steps_completed})

    async def metrics(self, who: Principal, trial_id: int, *, group: str | None = None,
                      max_points: int | None = None, after: int | None = None,
                      metric: str | None = None) -> list[MetricRow]:
        """A trial's metric rows, ascending, as :meth:`Store.get_metrics` reads them
        (optionally one group, downsampled, after a step).

        Raises:
            NotFound: No such trial.
            Forbidden: Training code asking for another trial's.
        """
        await self.experiments.get_trial(who, trial_id)
        return await self.store.get_metrics(trial_id, group=group, max_points=max_points,
                                            after=after, metric=metric)

    async def metric_columns(self, who: Principal, trial_id: int, *, group: str | None = None,
                             names: list[str] | None = None,
                             after: int | None = None) -> dict[str, MetricColumns]:
        """A trial's metrics as columns, by group (:meth:`Store.get_metric_columns`).

        Raises:
            NotFound: No such trial.
            Forbidden: Training code asking for another trial's.
        """
        await self.experiments.get_trial(who, trial_id)
        return await self.store.get_metric_columns(trial_id, group=group, names=names,
                                                   after=after)

    async def rolled_back_metrics(self, who: Principal,
                                  trial_id: int) -> list[RolledBackMetric]:
        """The rows of a trial that a later run of it rolled back (reported past the
        checkpoint that run started from), oldest first: they count nowhere else.

        Raises:
            NotFound: No such trial.
            Forbidden: Training code asking for another trial's.
        """
        await self.experiments.get_trial(who, trial_id)
        return await self.store.rolled_back_metrics(trial_id)

    async def chart_metrics(self, trials: Iterable[Trial],
                            max_points: int) -> dict[int, list[MetricRow]]:
        """The downsampled metrics of trials the caller has read already (an experiment's,
        for its charts), by trial id: as :meth:`metrics` with ``max_points``, without looking
        each trial up again."""
        return {t.id: await self.store.get_metrics(t.id, max_points=max_points)
                for t in trials}

    async def metrics_after(self, experiment_id: int, after_id: int,
                            limit: int) -> list[MetricRow]:
        """The metric rows of an experiment's trials stored after row ``after_id``, by id
        (what a stream of its metrics resumes from)."""
        return await self.store.experiment_metrics_after(experiment_id, after_id, limit)

    async def logs(self, trial_id: int, *, after_id: int = 0, limit: int) -> list[LogRow]:
        """A trial's log lines after line ``after_id``, oldest first, at most ``limit``."""
        return await self.store.get_logs(trial_id, after_id=after_id, limit=limit)

    async def ended(self, who: Principal, trial_id: int) -> bool:
        """Whether a trial has ended and its last log line is stored.

        Raises:
            NotFound: No such trial.
        """
        trial = await self.experiments.get_trial(who, trial_id)
        open_allocation = self.cluster.allocations.of_trial(trial_id)
        return TrialState(trial.state).terminal and open_allocation is None

    async def report_metrics(self, who: Principal, trial_id: int,
                             batch: wire.MetricBatch | wire.MetricColumns) -> tuple[int, bool]:
        """Store a batch of a trial's metric rows of one group and act on them (progress, best
        validation, searcher events). The batch's ``key``, unique within the trial, makes the
        report idempotent: a batch whose key was stored before changes nothing.

        Returns:
            The number of rows the batch stored, and whether it was a repeat.
        """
        trial = await self.experiments.get_trial(who, trial_id, write=True)
        if TrialState(trial.state).terminal:
            raise Conflict(f"trial {trial_id} is {trial.state}; it takes no more metrics")
        group = batch.group
        pack = pack_report(batch)
        if not len(pack):
            return 0, False
        last = max(pack.steps)
        advanced = last > (trial.steps_completed or 0)
        fields: dict[str, Any] = {}
        clean: list[dict[str, Any]] = []
        if group == "validation":
            # Validations are few, and the searcher reads them as numbers.
            clean = [{"steps_completed": step, "metrics": nonfinite.decode(metrics)}
                     for step, metrics in zip(pack.steps, pack.all_metrics(), strict=True)]
            row = await self.experiments.get(trial.experiment_id)
            fields = validation_fields(clean, row.searcher_metric, row.smaller_is_better,
                                       trial.searcher_metric_value)
        # The trial's best and latest validation are written with the batch, not after it.
        stored = await self.store.insert_pack(trial_id, group, pack, key=batch.key,
                                              steps_completed=last if advanced else None,
                                              notify=self.announce, trial_fields=fields)
        if isinstance(stored, int):
            return stored, True
        if self.announce is None and self.metric_events.subscribers(trial.experiment_id):
            self.metric_events.publish(trial.experiment_id, stored.rows())
        count = len(stored)
        if advanced and last > (trial.steps_completed or 0):
            trial.steps_completed = last
        for k, v in fields.items():
            setattr(trial, k, v)
        run = self.experiments.runs.get(trial.experiment_id)
        if run is not None and advanced:
            await run.update_progress(later=True)
        if group == "validation" and run is not None:
            # Every validation with the searcher metric is a searcher event, as in Determined
            # 0.38: ASHA can stop a trial at any rung it passes, not only at operation ends.
            for r in sorted(clean, key=lambda r: r["steps_completed"]):
                value = r["metrics"].get(run.row.searcher_metric)
                length = validation_length(run.length_unit, r["steps_completed"], r["metrics"])
                if length is not None and isinstance(value, (int, float)) \
                        and not isinstance(value, bool):
                    await run.on_validation(trial, length, float(value))
        return count, False

    async def on_stored(self, notices: list[StoredNotice]) -> None:
        """Act on batches announced as stored (see :attr:`announce`), in the order they were
        committed: hand their rows to the live streams, and for a batch an ingest worker
        stored, raise its trial's ``steps_completed`` and its experiment's progress (the
        master's own reports did that as they stored them)."""
        by_experiment: dict[int, list[StoredNotice]] = {}
        advanced: set[int] = set()
        for notice in notices:
            trial = await self.experiments.find_trial(notice.trial_id)
            if trial is None:
                continue  # deleted since
            by_experiment.setdefault(trial.experiment_id, []).append(notice)
            if notice.last_step > (trial.steps_completed or 0) \
                    and not TrialState(trial.state).terminal:
                trial.steps_completed = notice.last_step
                advanced.add(trial.experiment_id)
        wanted = [n for eid, ns in by_experiment.items()
                  if self.metric_events.subscribers(eid) for n in ns]
        if wanted:
            # By id: a trial reports one batch at a time, so its rows' ids grow in the order
            # its batches were committed, which is all a stream needs (see events.py).
            rows = await self.store.chunk_rows(n.chunk_id for n in wanted)
            for eid, ns in by_experiment.items():
                trial_ids = {n.trial_id for n in ns}
                self.metric_events.publish(eid, [r for r in rows if r.trial_id in trial_ids])
        for eid in advanced:
            run = self.experiments.runs.get(eid)
            if run is not None:
                await run.update_progress()

    async def resync(self) -> None:
        """Announcements may have been lost (the connection they arrive on broke): every live
        stream resumes from the store, and live trials take their ``steps_completed`` from
        it."""
        self.metric_events.lost()
        for eid, run in list(self.experiments.runs.items()):
            for stored in await self.store.list_trials(eid):
                trial = run.trials.get(stored.id)
                if trial is not None and (stored.steps_completed or 0) > (
                        trial.steps_completed or 0):
                    trial.steps_completed = stored.steps_completed
            await run.update_progress()

    async def report_progress(self, who: Principal, trial_id: int, progress: float) -> None:
        """Training code's progress through its trial, 0 to 1 (as ``wire.TrialProgress``
        checks it).

        Raises:
            Conflict: The experiment has finished."""
        trial = await self.experiments.get_trial(who, trial_id, write=True)
        await self.experiments.run_for(trial).on_progress(trial, progress)

    async def report_early_exit(self, who: Principal, trial_id: int, reason: str) -> None:
        """Training code says its trial stops early, for one of Determined's
        ``EarlyExitReason`` values (as ``wire.TrialEarlyExit`` checks it)."""
        trial = await self.experiments.get_trial(who, trial_id, write=True)
        await self.experiments.run_for(trial).on_early_exit(trial, reason)

    async def best_validation(self, who: Principal, trial_id: int) -> float | None:
        """The best searcher-metric value among the trial's experiment's trials."""
        trial = await self.experiments.get_trial(who, trial_id)
        exp = await self.experiments.get(trial.experiment_id)
        trials = await self.experiments.trials(exp.id)
        values = [t.searcher_metric_value for t in trials if t.searcher_metric_value is not None]
        if not values:
            return None
        return min(values) if exp.smaller_is_better else max(values)

    async def searcher_operation(self, who: Principal, trial_id: int) -> dict[str, Any]:
        """The trial's current searcher operation (how far to train), or that the searcher is
        done with it."""
        trial = await self.experiments.get_trial(who, trial_id)
        run = self.experiments.runs.get(trial.experiment_id)
        if run is None:
            return {"operation": None, "completed": True}
        return run.operation(trial)

    async def complete_operation(self, who: Principal, trial_id: int, length: int,
                                 metric: float) -> None:
        """Training code finished the searcher operation of ``length`` with this metric: a
        searcher event, as a validation is."""
        trial = await self.experiments.get_trial(who, trial_id, write=True)
        await self.experiments.run_for(trial).on_validation(trial, length, metric)

    async def report_source(self, who: Principal, trial_id: int,
                            link: wire.TrialSourceLink) -> dict[str, Any]:
        """Link a trial to the checkpoint it used, or to a model version and its checkpoint
        (``core_context.experimental.report_task_using_checkpoint`` and
        ``report_task_using_model_version``), so that the metrics the trial reports are found
        from them. Reporting a link again changes nothing.

        Args:
            link: The checkpoint, and optionally the model version (name and number).

        Returns:
            The link, as :func:`~det_hub.service.serialize.trial_source_json` shows it.

        Raises:
            Forbidden: Neither the trial's own training code, nor its experiment's owner, a
                user with the manage scope or an admin.
            NotFound: No such trial, checkpoint, model or model version.
            Conflict: The model version is another checkpoint.
        """
        trial = await self.experiments.get_trial(who, trial_id)
        if who.allocation is None:
            exp = await self.experiments.get(trial.experiment_id)
            if not who.may_change(exp.owner_id):
                raise Forbidden(f"only trial {trial_id}'s training code, its owner or an admin "
                                "can report what it used")
        uuid, name, number = link.checkpoint_uuid.lower(), link.model_name, link.model_version
        if await self.store.get_checkpoint(uuid) is None:
            raise NotFound(f"checkpoint {uuid} not found")
        version_id = None
        if name is not None and number is not None:
            _, version = await self.registry.get_version(name, number)
            if version.checkpoint_uuid != uuid:
                raise Conflict(f"model {name!r} version {number} is checkpoint "
                               f"{version.checkpoint_uuid}, not {uuid}")
            version_id = version.id
        try:
            stored = await self.store.add_trial_source(
                trial_id=trial.id, checkpoint_uuid=uuid, model_version_id=version_id)
        except StoreNotFound:
            # Deleted since it was read above.
            raise NotFound(f"checkpoint {uuid} or model {name!r} version {number} was "
                           "deleted meanwhile") from None
        except StoreConflict as e:
            raise Conflict(str(e)) from None
        return trial_source_json(stored, name, number)
