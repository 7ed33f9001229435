"""``Trainer``: runs a :class:`PyTorchTrial`'s training loop against the Core API."""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.utils.data

from det_hub.config import Length, LengthUnit
from det_hub.core import EarlyExitReason, SearcherOperation
from det_hub.pytorch._batch_metrics import BatchMetrics, scalar
from det_hub.pytorch._callback import PyTorchCallback
from det_hub.pytorch._checkpoint_state import (
    DETERMINED_VERSION,
    apply_state,
    build_load_data,
    build_state,
    capture_rng_state,
    load_state,
    restore_rng_state,
    save_load_data,
    save_state,
)
from det_hub.pytorch._context import PyTorchTrialContext
from det_hub.pytorch._data import DataLoader
from det_hub.pytorch._lr_scheduler import LRScheduler
from det_hub.pytorch._reducer import reduce_values, reducer_for
from det_hub.pytorch._trial import PyTorchTrial
from det_hub.pytorch._units import Batch, TrainUnit

logger = logging.getLogger("det_hub.pytorch")

CHECKPOINT_POLICIES = ("best", "all", "none")
PeriodLike = TrainUnit | Length | int | None
#: Searchers that decide each trial's length as they go (from ``searcher.max_time`` with
#: ``time_metric``, or the older ``max_length``); the Trainer follows their operations. Every
#: other searcher trains each trial to the length given to ``fit()``.
ADAPTIVE_SEARCHERS = ("adaptive_asha", "async_halving")


class _Outcome(enum.Enum):
    DONE = "done"
    PREEMPTED = "preempted"
    STOPPED = "stopped"


class _Asked:
    """The length a :meth:`Trainer.fit` call resolved, in batches, and where it came from."""

    def __init__(self, batches: int | None, source: str) -> None:
        self.batches = batches
        self.source = source


def _format_metrics(metrics: Mapping[str, Any]) -> str:
    """``loss=0.1234 accuracy=0.98`` for the trial log; progress counters left out."""
    skip = ("batches", "records", "epochs")
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in metrics.items() if k not in skip)


def _mean_weighted(parts: list[tuple[dict[str, float], int]]) -> dict[str, float]:
    """Per-metric mean of (averages, count) pairs, weighted by count."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for averages, count in parts:
        for key, value in averages.items():
            sums[key] = sums.get(key, 0.0) + value * count
            counts[key] = counts.get(key, 0) + count
    return {key: sums[key] / counts[key] for key in sums if counts[key] > 0}


class _TrainingBatches:
    """This rank's training batches from batch ``skip`` on, forever, and the epoch length."""

    def __init__(self, loader: Any, context: PyTorchTrialContext, skip: int) -> None:
        dist = context.distributed
        seed = context.get_trial_seed()
        if isinstance(loader, DataLoader) and not loader.is_iterable:
            sampler = loader.batch_sampler(True, skip, dist.size, dist.rank, seed)
            self.epoch_len = sampler.batches_per_epoch
            torch_loader = loader.get_data_loader(True, skip, dist.size, dist.rank, seed)
            self._iter: Iterator[Any] = iter(torch_loader)
            return
        if isinstance(loader, DataLoader):
            loader = loader.get_data_loader(seed=seed)
        try:
            self.epoch_len = len(loader)
        except TypeError:
            raise TypeError(
                "the training data loader has no len(); det_hub needs the epoch length"
            ) from None
        if self.epoch_len < 1:
            raise ValueError("the training data loader yields no batches")
        self._iter = self._replay(loader, skip)

    def _replay(self, loader: Any, skip: int) -> Iterator[Any]:
        # A loader det_hub cannot index: resuming reads and drops the batches already trained.
        index = 0
        while True:
            before = index
            for batch in loader:
                if index >= skip:
                    yield batch
                index += 1
            if index == before:
                return  # an empty pass (a one-shot iterable): the data has run out

    def __next__(self) -> Any:
        return next(self._iter)


class Trainer:
    """Trains a :class:`PyTorchTrial`: batches, validations, checkpoints, searcher reports.

    Args:
        trial: The trial, built with ``context``.
        context: The trial's context, from :func:`det_hub.pytorch.init`.
    """

    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext) -> None:
        self._trial = trial
        self._context = context
        self._core = context.core
        self._dist = context.distributed
        self._callbacks: dict[str, PyTorchCallback] = {}
        self._batches = 0
        self._records = 0
        self._pending_records = 0
        self._best: float | None = None
        self._last_validation: tuple[int, dict[str, Any]] | None = None
        self._last_checkpoint_step: int | None = None
        self._last_checkpoint_uuid: str | None = None
        # Tensors until the period is reported (see BatchMetrics).
        self._period_metrics = BatchMetrics("train_batch()")
        self._epoch_len = 1
        self._global_batch = 0
        self._searcher_metric: str | None = None
        self._smaller_is_better = True
        self._policy = "best"
        self._validation_loader: Any = None

    @property
    def batches_trained(self) -> int:
        """Global batches trained so far."""
        return self._batches

    @property
    def last_checkpoint(self) -> str | None:
        """The storage id of the newest checkpoint this trainer wrote (chief only)."""
        return self._last_checkpoint_uuid

    # --- lengths -----------------------------------------------------------------------
    def _records_per_epoch(self) -> int:
        config = self._context.parsed_config()
        return config.records_per_epoch if config is not None else 0

    def _to_batches(self, length: PeriodLike, what: str) -> int | None:
        if length is None:
            return None
        if isinstance(length, bool):
            raise TypeError(f"{what} must be a Batch, an Epoch, a Record or a config length")
        if isinstance(length, int):
            length = Batch(length)
        if isinstance(length, TrainUnit):
            return length.to_batches(self._epoch_len, self._global_batch)
        if isinstance(length, Length):
            return self._config_length_to_batches(length.unit, length.value)
        raise TypeError(
            f"{what} must be a Batch, an Epoch, a Record or a config length, not {length!r}"
        )

    def _config_length_to_batches(self, unit: LengthUnit, value: int) -> int:
        """A length in the config's units as global batches.

        Batches are batches. Records are divided by the global batch size, rounding up.
        Epochs use ``records_per_epoch`` when the config sets it, else the training loader's
        epoch.
        """
        if unit is LengthUnit.BATCHES:
            return value
        if unit is LengthUnit.EPOCHS and not self._records_per_epoch():
            return value * self._epoch_len
        return Length(unit=unit, value=value).to_batches(
            self._records_per_epoch(), self._global_batch
        )

    def _searcher_unit(self) -> LengthUnit:
        config = self._context.parsed_config()
        if config is None:
            return LengthUnit.BATCHES
        unit = config.searcher.length_unit
        if isinstance(unit, LengthUnit):
            return unit
        # 0.38 configs count lengths in a time metric; the Trainer reports batches, records
        # and epochs, so those names are units and anything else counts batches.
        try:
            return LengthUnit(unit) if unit else LengthUnit.BATCHES
        except ValueError:
            return LengthUnit.BATCHES

    # --- the public entry point --------------------------------------------------------
    def fit(
        self,
        checkpoint_period: PeriodLike = None,
        validation_period: PeriodLike = None,
        max_length: PeriodLike = None,
        reporting_period: PeriodLike = None,
        checkpoint_policy: str | None = None,
        latest_checkpoint: str | None = None,
        step_zero_validation: bool | None = None,
        test_mode: bool = False,
    ) -> None:
        """Train until the searcher (or ``max_length``) is satisfied, or until preempted.

        Settings left None come from the experiment config where it has them
        (``min_checkpoint_period``, ``min_validation_period``, ``checkpoint_policy``,
        ``perform_initial_validation``).

        Args:
            checkpoint_period: Checkpoint every this many batches or epochs.
            validation_period: Validate every this many batches or epochs.
            max_length: How long to train (``Batch``, ``Epoch`` or ``Record``). Inside a
                cluster it is the length of each trial for every searcher but the adaptive
                ones (``adaptive_asha``, ``async_halving``), whose operations the Trainer
                follows instead. None: the config's deprecated ``searcher.max_length``.
            reporting_period: Report averaged training metrics this often (default
                ``Batch(100)``; at least every ``scheduling_unit`` batches).
            checkpoint_policy: After a validation, checkpoint when it is the ``"best"`` so far,
                after ``"all"``, or ``"none"``.
            latest_checkpoint: Resume from this checkpoint (default: the trial's latest).
            step_zero_validation: Validate before training.
            test_mode: Train one batch, validate and checkpoint, and report nothing to the
                searcher: a quick check that the trial runs.

        Raises:
            ValueError: No length to train to, a bad policy, or the searcher metric is missing
                from the validation metrics.
            RuntimeError: Training ended short of the length asked for, with neither a stop
                requested nor an early exit reported.
        """
        config = self._context.parsed_config()
        self._policy = checkpoint_policy or (config.checkpoint_policy if config else "best")
        if self._policy not in CHECKPOINT_POLICIES:
            raise ValueError(
                f"checkpoint_policy must be one of {', '.join(CHECKPOINT_POLICIES)}: "
                f"{self._policy!r}"
            )
        if config is not None:
            self._searcher_metric = config.searcher.metric
            self._smaller_is_better = config.searcher.smaller_is_better
        if step_zero_validation is None:
            step_zero_validation = bool(config and config.perform_initial_validation)
        scheduling_unit = config.scheduling_unit if config is not None else 100
        try:
            self._global_batch = self._context.get_global_batch_size()
        except ValueError:
            self._global_batch = 0

        self._callbacks = dict(self._trial.build_callbacks())
        training_loader = self._trial.build_training_data_loader()
        if latest_checkpoint is None:
            latest_checkpoint = self._context.get_latest_checkpoint()
        if latest_checkpoint is not None:
            self._load(latest_checkpoint)
        batches = _TrainingBatches(training_loader, self._context, self._batches)
        self._epoch_len = batches.epoch_len
        if self._global_batch == 0:
            # No global_batch_size hyperparameter: count what the loader gives.
            self._global_batch = self._batch_size_of(training_loader) * self._dist.size

        validation_every = self._to_batches(
            validation_period
            if validation_period is not None
            else (config.min_validation_period if config else None),
            "validation_period",
        )
        checkpoint_every = self._to_batches(
            checkpoint_period
            if checkpoint_period is not None
            else (config.min_checkpoint_period if config else None),
            "checkpoint_period",
        )
        report_every = self._to_batches(reporting_period or Batch(100), "reporting_period")
        assert report_every is not None
        report_every = min(report_every, scheduling_unit)

        for cb in self._callbacks.values():
            cb.on_trial_startup(self._batches, latest_checkpoint)
        try:
            for model in self._context.models:
                model.train()
            for cb in self._callbacks.values():
                cb.on_training_start()
            loop = _Loop(
                self, batches, validation_every, checkpoint_every, report_every, scheduling_unit
            )
            if test_mode:
                loop.train_to(self._batches + 1, None, check_signals=False)
                self._validate()
                self._checkpoint()
                return
            if step_zero_validation and self._batches == 0 and self._last_validation is None:
                self._validate()
            if self._core.info is not None and self._adaptive_searcher() is not None:
                outcome, asked = self._follow_searcher(loop, max_length)
            else:
                asked = self._resolve_length(max_length)
                assert asked.batches is not None
                if self._core.info is not None:
                    loop.progress_total = asked.batches
                outcome = loop.train_to(asked.batches, None)
                if outcome is _Outcome.DONE:
                    self._ensure_validation()
            if outcome is _Outcome.STOPPED:
                self._checkpoint()
                self._core.train.report_early_exit(EarlyExitReason.USER_REQUESTED_STOP)
                return
            self._checkpoint()
            if outcome is _Outcome.DONE:
                self._check_trained(asked)
        finally:
            for cb in self._callbacks.values():
                cb.on_trial_shutdown()

    def _adaptive_searcher(self) -> str | None:
        """The searcher's name when it is one whose operations decide the length, else None."""
        config = self._context.parsed_config()
        if config is not None and config.searcher.name in ADAPTIVE_SEARCHERS:
            return config.searcher.name
        return None

    def _resolve_length(self, max_length: PeriodLike) -> _Asked:
        """How many batches to train: ``fit``'s length, else the deprecated
        ``searcher.max_length``; a disagreement between the two is reported, and ``fit``'s
        length wins."""
        config = self._context.parsed_config()
        legacy = config.searcher.max_length if config is not None else None
        if max_length is None and legacy is None:
            if self._core.info is None:
                raise ValueError(
                    "outside a cluster fit() needs max_length (e.g. Epoch(1) or Batch(100)), "
                    "or an experiment config with searcher.max_length"
                )
            name = config.searcher.name if config is not None else "single"
            raise ValueError(
                f"no training length: pass one to Trainer.fit(max_length=...), e.g. "
                f"pytorch.Epoch(1) or pytorch.Batch(100); the {name} searcher has no "
                "searcher.max_length (deprecated) to fall back on"
            )
        if max_length is None:
            assert legacy is not None
            batches = self._to_batches(legacy, "searcher.max_length")
            assert batches is not None
            logger.warning(
                "searcher.max_length is deprecated: pass the training length to "
                "Trainer.fit(max_length=...) instead; training to searcher.max_length "
                "(%s = %d batches)", legacy, batches,
            )
            return _Asked(batches, f"searcher.max_length ({legacy})")
        batches = self._to_batches(max_length, "max_length")
        assert batches is not None
        if legacy is not None:
            legacy_batches = self._to_batches(legacy, "searcher.max_length")
            if legacy_batches != batches:
                logger.warning(
                    "fit(max_length=%r) asks for %d batches but searcher.max_length (%s) for "
                    "%d; training to fit's %d batches (searcher.max_length is deprecated)",
                    max_length, batches, legacy, legacy_batches, batches,
                )
        return _Asked(batches, f"fit(max_length={max_length!r})")

    def _check_trained(self, asked: _Asked) -> None:
        """Raise unless training reached the length it was asked for: a run that trained
        less, with no stop requested and no early exit reported, must not end as a success."""
        if asked.batches is None:
            if self._batches == 0:
                raise RuntimeError(
                    f"{asked.source} gave this trial no length to train, and it trained 0 "
                    "batches; set searcher.max_time with time_metric (or max_length)"
                )
            return
        if self._batches < asked.batches:
            raise RuntimeError(
                f"training ended after {self._batches} batches, short of the "
                f"{asked.batches} batches asked for by {asked.source}"
            )

    def _follow_searcher(self, loop: _Loop, max_length: PeriodLike) -> tuple[_Outcome, _Asked]:
        name = self._adaptive_searcher() or "adaptive"
        if max_length is not None:
            logger.warning(
                "fit(max_length=%r) is not used: the %s searcher decides how long each trial "
                "trains (searcher.max_time with time_metric, or max_length)", max_length, name,
            )
        asked = _Asked(None, f"the {name} searcher")
        unit = self._searcher_unit()
        for op in self._core.searcher.operations():
            target = self._config_length_to_batches(unit, op.length)
            asked.batches = max(asked.batches or 0, target)
            # Validating at the searcher's rungs on the way lets ASHA stop a trial early.
            for length in op.validate_at:
                rung = self._config_length_to_batches(unit, length)
                if self._batches < rung < target:
                    outcome = loop.train_to(rung, op, op_target=target)
                    if outcome is not _Outcome.DONE:
                        return outcome, asked
                    self._ensure_validation()
                    # The searcher may stop the trial on this rung's result: the report returned
                    # with the master's answer, so act on it here rather than a scheduling unit
                    # on.
                    signalled = loop.signals()
                    if signalled is not None:
                        return signalled, asked
            outcome = loop.train_to(target, op)
            if outcome is not _Outcome.DONE:
                return outcome, asked
            metrics = self._ensure_validation()
            if self._dist.is_chief:
                op.report_completed(self._metric_value(metrics, required=True))
        if asked.batches is None and self._batches == 0 and loop.signals() is not None:
            # Stopped by the master (a pause, a kill, the searcher) before any operation.
            return _Outcome.PREEMPTED, asked
        return _Outcome.DONE, asked

    @staticmethod
    def _batch_size_of(loader: Any) -> int:
        size = getattr(loader, "batch_size", None)
        return int(size) if isinstance(size, int) and size > 0 else 1

    # --- metrics -----------------------------------------------------------------------
    def _progress_metrics(self) -> dict[str, Any]:
        epochs = self._batches / self._epoch_len
        return {
            "batches": self._batches,
            "records": self._records,
            "epochs": int(epochs) if epochs == int(epochs) else epochs,
        }

    def _sync_records(self) -> None:
        pending, self._pending_records = self._pending_records, 0
        if self._dist.size > 1:
            self._records += sum(self._dist.allgather(pending))
        else:
            self._records += pending

    def _report_training(self) -> None:
        period, self._period_metrics = self._period_metrics, BatchMetrics("train_batch()")
        local = period.means()
        pending, self._pending_records = self._pending_records, 0
        reducers = self._context._reducers_for(training=True)
        partials = [r.reducer.per_slot_reduce() for r in reducers]
        if self._dist.size > 1:
            gathered = self._dist.allgather((local, len(period), pending, partials))
            averages = _mean_weighted([(g[0], g[1]) for g in gathered])
            self._records += sum(g[2] for g in gathered)
            per_reducer = [[g[3][i] for g in gathered] for i in range(len(reducers))]
        else:
            averages = local
            self._records += pending
            per_reducer = [[p] for p in partials]
        for wrapped, parts in zip(reducers, per_reducer, strict=True):
            _merge_reduced(averages, wrapped.name, wrapped.reducer.cross_slot_reduce(parts))
            wrapped.reducer.reset()
        averages.update(self._progress_metrics())
        self._core.train.report_training_metrics(self._batches, averages)
        if self._dist.is_chief:
            logger.info("trained %d batches: %s", self._batches, _format_metrics(averages))
        if self._callbacks:
            batch_metrics = period.rows()
            for cb in self._callbacks.values():
                cb.on_training_workload_end(averages, batch_metrics)

    def _metric_value(self, metrics: Mapping[str, Any], *, required: bool) -> float | None:
        name = self._searcher_metric
        if name is None:
            return None
        if name not in metrics:
            if not required and self._core.info is None:
                return None
            raise ValueError(
                f"the searcher metric {name!r} is not among the validation metrics "
                f"({', '.join(sorted(metrics)) or 'none'}); report it from evaluate_batch() "
                "or evaluate_full_dataset(), or change searcher.metric"
            )
        return float(metrics[name])

    # --- validation --------------------------------------------------------------------
    def _ensure_validation(self) -> dict[str, Any]:
        if self._last_validation is not None and self._last_validation[0] == self._batches:
            return self._last_validation[1]
        return self._validate()

    def _uses_full_dataset(self) -> bool:
        trial_type = type(self._trial)
        own_batch = trial_type.evaluate_batch is not PyTorchTrial.evaluate_batch
        own_full = trial_type.evaluate_full_dataset is not PyTorchTrial.evaluate_full_dataset
        if not own_batch and not own_full:
            raise NotImplementedError(
                f"{trial_type.__name__} implements neither evaluate_batch() nor "
                "evaluate_full_dataset()"
            )
        return own_full and not own_batch

    def _validation_torch_loader(self, sharded: bool) -> Any:
        if self._validation_loader is None:
            self._validation_loader = self._trial.build_validation_data_loader()
        loader = self._validation_loader
        if not isinstance(loader, DataLoader):
            return loader
        seed = self._context.get_trial_seed()
        if sharded and not loader.is_iterable:
            return loader.get_data_loader(False, 0, self._dist.size, self._dist.rank, seed)
        return loader.get_data_loader(seed=seed)

    def _validate(self) -> dict[str, Any]:
        self._sync_records()
        # Validation must not change training's randomness: the trajectory then does not
        # depend on how often (or whether, after a resume) validation ran.
        rng = capture_rng_state()
        for cb in self._callbacks.values():
            cb.on_validation_start()
        for model in self._context.models:
            model.eval()
        try:
            with torch.no_grad():
                metrics = (
                    self._evaluate_full() if self._uses_full_dataset() else self._evaluate_batches()
                )
        finally:
            for model in self._context.models:
                model.train()
            restore_rng_state(rng)
        metrics.update(self._progress_metrics())
        self._core.train.report_validation_metrics(self._batches, metrics)
        if self._dist.is_chief:
            logger.info("validation at batch %d: %s", self._batches, _format_metrics(metrics))
        self._last_validation = (self._batches, metrics)
        for cb in self._callbacks.values():
            cb.on_validation_end(metrics)
        value = self._metric_value(metrics, required=self._policy == "best")
        is_best = value is not None and (
            self._best is None
            or (value < self._best if self._smaller_is_better else value > self._best)
        )
        if is_best:
            self._best = value
        if self._policy == "all" or (self._policy == "best" and is_best):
            self._checkpoint()
        return metrics

    def _evaluate_full(self) -> dict[str, Any]:
        metrics: dict[str, Any] | None = None
        if self._dist.is_chief:
            loader = self._validation_torch_loader(sharded=False)
            raw = self._trial.evaluate_full_dataset(loader)
            if not isinstance(raw, Mapping):
                raise TypeError(f"evaluate_full_dataset() must return a dict, not {raw!r}")
            metrics = {str(k): scalar(str(k), v) for k, v in raw.items()}
        if self._dist.size > 1:
            metrics = self._dist.broadcast(metrics)
        assert metrics is not None
        return metrics

    def _evaluate_batches(self) -> dict[str, Any]:
        loader = self._validation_torch_loader(sharded=True)
        takes_index = len(inspect.signature(self._trial.evaluate_batch).parameters) >= 2
        values: dict[str, list[float]] = {}
        weights: dict[str, list[float]] = {}
        reducers = self._context._reducers_for(training=False)
        for wrapped in reducers:
            wrapped.reducer.reset()
        deferred = BatchMetrics("evaluate_batch()")
        lengths: list[float] = []
        for batch_idx, batch in enumerate(loader):
            batch = self._context.to_device(batch)
            if takes_index:
                out = self._trial.evaluate_batch(batch, batch_idx)
            else:
                out = self._trial.evaluate_batch(batch)  # type: ignore[call-arg]
            deferred.add(out)
            lengths.append(float(self._trial.get_batch_length(batch)))
        # One device read for the whole pass rather than a sync after every batch.
        for key, (indices, floats) in deferred.columns().items():
            values[key] = floats
            weights[key] = [lengths[i] for i in indices]
        partials = [r.reducer.per_slot_reduce() for r in reducers]
        if self._dist.size > 1:
            gathered = self._dist.allgather((values, weights, partials))
            values, weights = {}, {}
            for vals, wts, _ in gathered:
                for key in vals:
                    values.setdefault(key, []).extend(vals[key])
                    weights.setdefault(key, []).extend(wts[key])
            per_reducer = [[g[2][i] for g in gathered] for i in range(len(reducers))]
        else:
            per_reducer = [[p] for p in partials]
        spec = self._trial.evaluation_reducer()
        metrics: dict[str, Any] = {
            key: reduce_values(reducer_for(spec, key), values[key], weights[key]) for key in values
        }
        for wrapped, parts in zip(reducers, per_reducer, strict=True):
            _merge_reduced(metrics, wrapped.name, wrapped.reducer.cross_slot_reduce(parts))
        return metrics

    # --- checkpoints -------------------------------------------------------------------
    def _trainer_state(self) -> dict[str, Any]:
        return {
            "trial_id": self._context.get_trial_id(),
            "batches_trained": self._batches,
            "records_trained": self._records,
            "epoch_len": self._epoch_len,
            "best_searcher_metric": self._best,
            "last_validation": self._last_validation,
            "trial_seed": self._context.get_trial_seed(),
            "world_size": self._dist.size,
            # The sampler's position is a pure function of the seed and the batch index.
            "sampler": {"seed": self._context.get_trial_seed(), "skip": self._batches},
        }

    def _checkpoint(self) -> None:
        if self._last_checkpoint_step == self._batches:
            return
        self._sync_records()
        rng = capture_rng_state()
        rng_states = self._dist.allgather(rng) if self._dist.size > 1 else [rng]
        if self._dist.is_chief:
            state = build_state(self._context, self._callbacks, rng_states, self._trainer_state())
            metadata = {
                "steps_completed": self._batches,
                "determined_version": DETERMINED_VERSION,
                "framework": f"torch-{torch.__version__}",
                "format": "pickle",
                "trial_id": self._context.get_trial_id(),
                "experiment_id": self._context.get_experiment_id(),
            }
            # What load_trial_from_checkpoint_path() needs to rebuild the trial without the
            # master: its class, hyperparameters and experiment config.
            load_data = build_load_data(
                type(self._trial),
                self._context.get_hparams(),
                self._context.get_experiment_config(),
            )
            with self._core.checkpoint.store_path(metadata) as (path, storage_id):
                save_state(path, state)
                save_load_data(path, load_data)
                for cb in self._callbacks.values():
                    cb.on_checkpoint_write_end(str(path))
            self._last_checkpoint_uuid = storage_id
            logger.info("checkpoint %s at batch %d", storage_id, self._batches)
        self._last_checkpoint_step = self._batches

    def _load(self, storage_id: str) -> None:
        with self._core.checkpoint.restore_path(storage_id) as path:
            state = load_state(path)
        for cb in self._callbacks.values():
            cb.on_checkpoint_load_start(state)
        trainer_state = state.get("trainer_state", {})
        source_trial = trainer_state.get("trial_id")
        mine = self._context.get_trial_id()
        if source_trial and mine and source_trial != mine:
            # A warm start (searcher.source_trial_id / source_checkpoint_uuid): the weights,
            # optimizer and schedules carry over; this trial's own position, data order and
            # randomness start afresh, as they do in Determined.
            apply_state(self._context, self._callbacks, state, warm_start=True)
            logger.info("warm-started from checkpoint %s of trial %s", storage_id, source_trial)
            return
        apply_state(self._context, self._callbacks, state)
        self._batches = int(trainer_state.get("batches_trained", 0))
        self._records = int(trainer_state.get("records_trained", 0))
        self._best = trainer_state.get("best_searcher_metric")
        last = trainer_state.get("last_validation")
        self._last_validation = (int(last[0]), dict(last[1])) if last else None
        self._last_checkpoint_step = self._batches
        self._last_checkpoint_uuid = storage_id
        logger.info("resumed from checkpoint %s at batch %d", storage_id, self._batches)


def _merge_reduced(metrics: dict[str, Any], name: str | None, reduced: Any) -> None:
    if name is None:
        if not isinstance(reduced, Mapping):
            raise TypeError(
                "a MetricReducer wrapped without a name must return a dict from "
                f"cross_slot_reduce(), not {reduced!r}"
            )
        metrics.update({str(k): v for k, v in reduced.items()})
    else:
        metrics[name] = reduced


class _Loop:
    """The batch loop of one :meth:`Trainer.fit` call."""

    def __init__(
        self,
        trainer: Trainer,
        batches: _TrainingBatches,
        validation_every: int | None,
        checkpoint_every: int | None,
        report_every: int,
        scheduling_unit: int,
    ) -> None:
        self._t = trainer
        self._batches = batches
        self._validation_every = validation_every
        self._checkpoint_every = checkpoint_every
        self._report_every = report_every
        self._scheduling_unit = scheduling_unit
        #: Report progress as batches done out of this many when training without a searcher
        #: operation (a length from ``fit`` inside a cluster).
        self.progress_total: int | None = None

    def train_to(
        self,
        target: int,
        op: SearcherOperation | None,
        *,
        check_signals: bool = True,
        op_target: int | None = None,
    ) -> _Outcome:
        """Train until ``target`` batches; ``op_target`` is where ``op`` ends, when later."""
        t = self._t
        ctx = t._context
        epoch_len = t._epoch_len
        while t._batches < target:
            batch_idx = t._batches
            epoch_idx = batch_idx // epoch_len
            ctx._set_position(batch_idx, epoch_len)
            if batch_idx % epoch_len == 0:
                for cb in t._callbacks.values():
                    cb.on_training_epoch_start(epoch_idx)
            try:
                raw = next(self._batches)
            except StopIteration:
                if t._period_metrics and t._dist.size == 1:
                    # What was trained is shown; with several ranks the others may not be at
                    # this point, so no collective call is made here.
                    t._report_training()
                raise RuntimeError(
                    f"the training data ran out after {t._batches} batches, short of the "
                    f"{target} batches asked for"
                ) from None
            batch = ctx.to_device(raw)
            out = t._trial.train_batch(batch, epoch_idx, batch_idx)
            if ctx._stepped_scalers:
                ctx._update_scalers()
            t._period_metrics.add(out)
            t._pending_records += t._trial.get_batch_length(batch)
            t._batches += 1
            done = t._batches
            for sched in ctx.lr_schedulers:
                if (
                    sched.step_mode is LRScheduler.StepMode.STEP_EVERY_BATCH
                    and done % sched.frequency == 0
                ):
                    sched.step()
            if done % epoch_len == 0:
                for sched in ctx.lr_schedulers:
                    if (
                        sched.step_mode is LRScheduler.StepMode.STEP_EVERY_EPOCH
                        and (epoch_idx + 1) % sched.frequency == 0
                    ):
                        sched.step()
                for cb in t._callbacks.values():
                    cb.on_training_epoch_end(epoch_idx)
            if done % self._report_every == 0 or done == target:
                t._report_training()
            if self._validation_every and done % self._validation_every == 0:
                t._ensure_validation()
            if self._checkpoint_every and done % self._checkpoint_every == 0:
                t._checkpoint()
            if check_signals and (done % self._scheduling_unit == 0 or done == target):
                end = op_target or target
                if op is not None and t._dist.is_chief and end > 0:
                    op.report_progress(min(done / end, 1.0) * op.length)
                elif op is None and self.progress_total and t._dist.is_chief:
                    t._core.train.report_progress(min(done / self.progress_total, 1.0))
                outcome = self.signals()
                if outcome is not None:
                    return outcome
        if t._period_metrics:
            t._report_training()
        return _Outcome.DONE

    def signals(self) -> _Outcome | None:
        """PREEMPTED (once checkpointed) when the master asks the trial to stop, STOPPED when
        the training code does, else None. Every rank calls it at the same point."""
        t = self._t
        if t._core.preempt.should_preempt():
            t._checkpoint()
            return _Outcome.PREEMPTED
        if self._stop_requested():
            return _Outcome.STOPPED
        return None

    def _stop_requested(self) -> bool:
        t = self._t
        mine = t._context.get_stop_requested()
        if t._dist.size > 1:
            return any(t._dist.allgather(mine))
        return mine
