"""Reporting training progress: metrics, progress and early exits."""

from __future__ import annotations

import datetime
import enum
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det_hub import nonfinite
from det_hub.core._distributed import DistributedContext
from det_hub.core._http import MasterSession
from det_hub.core._metric_sender import MetricSender

if TYPE_CHECKING:
    from det_hub.core._tensorboard import EventWriter

logger = logging.getLogger("det_hub.core")

TRAINING = "training"
VALIDATION = "validation"


class EarlyExitReason(str, enum.Enum):
    """Why a trial stops before the searcher asked it to."""

    INVALID_HP = "INVALID_HP"
    USER_REQUESTED_STOP = "USER_REQUESTED_STOP"
    ERRORED = "ERRORED"


def to_jsonable(value: Any, name: str) -> Any:
    """``value`` as plain JSON data: numpy and torch scalars become Python numbers.

    Args:
        value: A metric value (number, bool, str, None, or lists and dicts of them).
        name: The metric's name, for error messages.

    NaN and infinite floats are kept (a diverging loss is a result worth seeing); they are
    sent to the master as the strings of :mod:`det_hub.nonfinite`.

    Raises:
        TypeError: The value cannot be represented as JSON.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v, f"{name}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, f"{name}[{i}]") for i, v in enumerate(value)]
    item = getattr(value, "item", None)
    if callable(item):
        # numpy scalars and 0-d arrays, one-element torch tensors: duck-typed so that neither
        # library has to be imported here.
        try:
            scalar = item()
        except (ValueError, RuntimeError) as exc:
            raise TypeError(f"metric {name!r} is not a scalar: {exc}") from exc
        if isinstance(scalar, (bool, int, float)):
            return to_jsonable(scalar, name)
    raise TypeError(f"metric {name!r} has a value of type {type(value).__name__}, not JSON data")


def _check_metrics(metrics: Mapping[str, Any], what: str) -> dict[str, Any]:
    if not isinstance(metrics, Mapping):
        raise TypeError(
            f"{what} must be a dict of metric name to value, not {type(metrics).__name__}"
        )
    return {str(k): to_jsonable(v, str(k)) for k, v in metrics.items()}


def _check_steps(steps_completed: Any) -> int:
    if isinstance(steps_completed, bool) or not isinstance(steps_completed, int):
        item = getattr(steps_completed, "item", None)
        steps_completed = item() if callable(item) else steps_completed
    if (
        isinstance(steps_completed, bool)
        or not isinstance(steps_completed, int)
        or steps_completed < 0
    ):
        raise ValueError(f"steps_completed must be an int >= 0, not {steps_completed!r}")
    return steps_completed


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class TrainContext:
    """Reports metrics, progress and early exits of a trial.

    Metric rows are queued and posted by a background thread. Validation metrics are
    delivered before the report returns, as in Determined, because the searcher acts on them:
    the master's answer says whether it stopped the trial, which
    ``core_context.preempt.should_preempt()`` reflects from then on. Outside a cluster rows go
    to the ``det_hub.core`` logger. Only the chief reports; calls on other ranks are ignored.

    Given a ``tensorboard_dir``, the chief also writes every reported metric that is a number
    there as a TensorBoard scalar tagged ``<group>/<name>`` (``training/loss``) at
    ``steps_completed``. The event file is created on the first report. A failure to write it
    is logged once and ends event writing for this trial; it never fails training.
    """

    def __init__(
        self,
        *,
        distributed: DistributedContext,
        session: MasterSession | None = None,
        trial_id: int | None = None,
        sender: MetricSender | None = None,
        tensorboard_dir: Path | None = None,
    ) -> None:
        self._dist = distributed
        self._session = session
        self._trial_id = trial_id
        self._sender = sender
        self._warned_worker = False
        self._tensorboard_dir = tensorboard_dir
        self._events: EventWriter | None = None

    def _write_events(self, group: str, steps: int, metrics: Mapping[str, Any]) -> None:
        if self._tensorboard_dir is None:
            return
        try:
            if self._events is None:
                from det_hub.core._tensorboard import EventWriter

                self._events = EventWriter(self._tensorboard_dir)
            self._events.add_scalars(steps, {f"{group}/{k}": v for k, v in metrics.items()})
        except OSError as exc:
            self._stop_events(exc)

    def _stop_events(self, exc: OSError) -> None:
        logger.warning(
            "cannot write TensorBoard events to %s, no more will be written: %s",
            self._tensorboard_dir,
            exc,
        )
        self._tensorboard_dir = None
        events, self._events = self._events, None
        if events is not None:
            try:
                events.close()
            except OSError:
                pass  # the same failure, already reported

    def _skip_on_worker(self, what: str) -> bool:
        if self._dist.is_chief:
            return False
        if not self._warned_worker:
            logger.warning("%s called on rank %d: only the chief reports", what, self._dist.rank)
            self._warned_worker = True
        return True

    def report_training_metrics(
        self,
        steps_completed: int,
        metrics: Mapping[str, Any],
        batch_metrics: list[Mapping[str, Any]] | None = None,
    ) -> None:
        """Report training metrics (the ``training`` group).

        Args:
            steps_completed: Batches trained so far, the x axis of the metric.
            metrics: Metric name to value; numpy/torch scalars are accepted.
            batch_metrics: Per-batch metrics; checked, but not sent (the API has no place for
                them yet).

        Raises:
            ValueError: ``steps_completed`` is not an int >= 0.
        """
        if batch_metrics is not None:
            for i, batch in enumerate(batch_metrics):
                _check_metrics(batch, f"batch_metrics[{i}]")
        self.report_metrics(TRAINING, steps_completed, metrics)

    def report_validation_metrics(self, steps_completed: int, metrics: Mapping[str, Any]) -> None:
        """Report validation metrics (the ``validation`` group); they reach the master before
        this returns (with the metrics reported before them).

        The searcher acts on them as the master takes them in, and may stop the trial (ASHA
        at a rung). The master answers with its decision, so ``should_preempt()`` right after
        this call reflects it: Determined's loop stops at the rung, not batches later::

            core_context.train.report_validation_metrics(steps_completed=step, metrics=m)
            if core_context.preempt.should_preempt():
                return

        Raises:
            ValueError: ``steps_completed`` is not an int >= 0.
            MasterError: The master refused the metrics or stayed unreachable past the
                context's ``retry_deadline``.
        """
        self.report_metrics(VALIDATION, steps_completed, metrics)

    def report_metrics(self, group: str, steps_completed: int, metrics: Mapping[str, Any]) -> None:
        """Report metrics of any group (``training``, ``validation`` or a name of your own);
        ``validation`` metrics are delivered before it returns, as
        :meth:`report_validation_metrics` says.

        Raises:
            ValueError: ``group`` is empty, or ``steps_completed`` is not an int >= 0.
            MasterError: Validation metrics were refused, or could not be delivered.
        """
        if not isinstance(group, str) or not group:
            raise ValueError(f"group must be a non-empty string, not {group!r}")
        steps = _check_steps(steps_completed)
        clean = _check_metrics(metrics, "metrics")
        if self._skip_on_worker("report_metrics"):
            return
        self._write_events(group, steps, clean)
        if self._sender is None:
            logger.info("%s metrics at step %d: %s", group, steps, clean)
            return
        row = {"steps_completed": steps, "metrics": nonfinite.encode(clean),
               "report_time": _now()}
        self._sender.put(group, row, urgent=group == VALIDATION)
        if group == VALIDATION:
            # Synchronous, as Determined's: the caller's next should_preempt() must see what
            # the searcher decided on these metrics.
            self._sender.flush()

    def report_progress(self, progress: float) -> None:
        """Report the trial's progress, a fraction from 0 to 1 (sent in the background, at
        most once per metric batch interval: the latest update in that time is the one sent).

        Raises:
            ValueError: ``progress`` is outside [0, 1].
        """
        value = float(progress)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"progress must be between 0 and 1, not {progress!r}")
        if self._skip_on_worker("report_progress"):
            return
        if self._sender is None:
            logger.info("progress: %.1f%%", value * 100)
            return
        self._sender.set_progress(value)

    def report_early_exit(self, reason: EarlyExitReason | str) -> None:
        """Tell the master the trial stops early, and why.

        Args:
            reason: An :class:`EarlyExitReason` (or its name).
        """
        why = EarlyExitReason(reason)
        if self._skip_on_worker("report_early_exit"):
            return
        if self._session is None:
            logger.info("early exit: %s", why.value)
            return
        # Metrics reported before the exit should be stored before the master acts on it.
        self.flush()
        self._session.post(
            f"/trials/{self._trial_id}/early_exit", {"reason": why.value}, retry=True
        )

    def get_experiment_best_validation(self) -> float | None:
        """The best searcher-metric value any trial of this experiment has reported so far,
        or ``None`` before the first validation (and outside a cluster)."""
        if self._session is None:
            return None
        self.flush()
        body = self._session.get(f"/trials/{self._trial_id}/experiment_best_validation")
        value = body.get("best_validation")
        return None if value is None else float(value)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every metric reported so far has reached the master (and the
        TensorBoard event file)."""
        if self._events is not None:
            try:
                self._events.flush()
            except OSError as exc:
                self._stop_events(exc)
        if self._sender is not None:
            self._sender.flush(timeout)

    def close(self) -> None:
        """Send what is still queued, close the event file and stop the background threads."""
        events, self._events = self._events, None
        if events is not None:
            try:
                events.close()
            except OSError as exc:
                self._stop_events(exc)
        self._tensorboard_dir = None  # a late report must not start a second file
        if self._sender is not None:
            self._sender.close()
