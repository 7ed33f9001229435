"""The searcher's requests to a trial: train to a length, report a metric, repeat."""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from det_hub import nonfinite
from det_hub.core._distributed import DistributedContext
from det_hub.core._http import MasterSession
from det_hub.core._train import TrainContext

logger = logging.getLogger("det_hub.core")


class SearcherMode(enum.Enum):
    """Who asks the master for operations: the chief, broadcasting to every rank, or only it."""

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"


class Unit(enum.Enum):
    """The unit of the config's lengths (``searcher.max_length``), as Determined names them."""

    EPOCHS = "EPOCHS"
    RECORDS = "RECORDS"
    BATCHES = "BATCHES"


def parse_searcher_units(config: Mapping[str, Any]) -> Unit | None:
    """The unit of an experiment config's ``searcher.max_length`` (``{"batches": 100}`` is
    ``Unit.BATCHES``); None when the length is a bare number, absent or not understood, as
    with Determined's current configs, whose lengths come from ``Trainer.fit``."""
    searcher = config.get("searcher")
    length = searcher.get("max_length") if isinstance(searcher, Mapping) else None
    if isinstance(length, Mapping) and len(length) == 1:
        [key] = length
        return {"batches": Unit.BATCHES, "epochs": Unit.EPOCHS,
                "records": Unit.RECORDS}.get(str(key))
    return None


class SearcherOperation:
    """One request of the searcher: train until ``length`` (in the config's unit), then report.

    Attributes:
        length: The total length to have trained when the operation is done (not an increment).
        validate_at: Shorter lengths where a validation lets the searcher decide early (ASHA's
            rungs); validating there is optional, and PyTorchTrial's Trainer does.
    """

    def __init__(
        self,
        context: SearcherContext,
        length: int,
        *,
        is_chief: bool,
        validate_at: tuple[int, ...] = (),
    ) -> None:
        self._context = context
        self.length = length
        self.validate_at = validate_at
        self._is_chief = is_chief
        self._completed = False

    @property
    def completed(self) -> bool:
        """Whether :meth:`report_completed` was called."""
        return self._completed

    def report_progress(self, length: float) -> None:
        """Report how far towards :attr:`length` training has got (chief only)."""
        if not self._is_chief:
            raise RuntimeError("report_progress() may only be called on the chief")
        if self._completed:
            raise RuntimeError("report_progress() after report_completed()")
        self._context._report_progress(self, float(length))

    def report_completed(self, searcher_metric: Any) -> None:
        """Tell the searcher the operation is done, with the value of its metric (chief only).

        Metrics reported before are delivered to the master first.

        A NaN or an infinity is a value like any other, as in Determined (a diverging loss is
        a normal event): the searcher counts a NaN as the worst result of its rung.

        Raises:
            ValueError: The metric is not a number.
        """
        if not self._is_chief:
            raise RuntimeError("report_completed() may only be called on the chief")
        if self._completed:
            raise RuntimeError("report_completed() called twice for one operation")
        item = getattr(searcher_metric, "item", None)
        try:
            value = float(item() if callable(item) else searcher_metric)
        except (TypeError, ValueError):
            raise ValueError(f"searcher_metric is {searcher_metric!r}; it must be a number") \
                from None
        self._context._report_completed(self, value)
        self._completed = True

    def __repr__(self) -> str:
        return f"SearcherOperation(length={self.length}, completed={self._completed})"


class SearcherContext:
    """Gives the trial its searcher operations.

    Inside a cluster the chief asks the master (``GET /trials/{id}/searcher/operation``) until
    the searcher wants no more; outside one there is a single operation whose length comes from
    ``DET_HUB_LOCAL_MAX_LENGTH`` (1 when unset, as Determined's local mode).
    """

    def __init__(
        self,
        *,
        distributed: DistributedContext,
        train: TrainContext,
        session: MasterSession | None = None,
        trial_id: int | None = None,
        local_length: int = 1,
        units: Unit | None = None,
    ) -> None:
        self._dist = distributed
        self._train = train
        self._session = session
        self._trial_id = trial_id
        self._local_length = local_length
        self._units = units

    def get_configured_units(self) -> Unit | None:
        """The unit the experiment config gives its lengths in (:func:`parse_searcher_units`);
        None when the config has none, or outside a cluster."""
        return self._units

    def operations(
        self,
        searcher_mode: SearcherMode = SearcherMode.WorkersAskChief,
        auto_ack: bool = True,
    ) -> Iterator[SearcherOperation]:
        """Yield the operations to work on, one after another.

        Call ``op.report_completed(metric)`` on the chief before asking for the next one. In
        ``WorkersAskChief`` mode every rank iterates, getting the chief's operations.

        Args:
            searcher_mode: See :class:`SearcherMode`.
            auto_ack: Accepted for compatibility with Determined; has no effect.

        Raises:
            RuntimeError: An operation was not completed on the chief before the next one was
                asked for.
        """
        del auto_ack
        mode = SearcherMode(searcher_mode)
        if mode is SearcherMode.ChiefOnly and not self._dist.is_chief:
            raise RuntimeError("operations() is only for the chief in SearcherMode.ChiefOnly")
        share = mode is SearcherMode.WorkersAskChief and self._dist.size > 1
        while True:
            nxt = self._next_operation() if self._dist.is_chief else None
            if share:
                nxt = self._dist.broadcast(nxt)
            if nxt is None:
                return
            length, validate_at = nxt
            op = SearcherOperation(
                self, length, is_chief=self._dist.is_chief, validate_at=validate_at)
            yield op
            if self._dist.is_chief and not op.completed:
                raise RuntimeError(
                    f"{op!r} was not completed: call op.report_completed(metric) before "
                    "asking for the next operation"
                )
            if self._session is None:
                return

    def _next_operation(self) -> tuple[int, tuple[int, ...]] | None:
        if self._session is None:
            return None if self._local_length is None else (int(self._local_length), ())
        body = self._session.get(f"/trials/{self._trial_id}/searcher/operation")
        op = body.get("operation")
        if body.get("completed") or not op:
            return None
        return int(op["length"]), tuple(int(n) for n in op.get("validate_at") or ())

    def _report_progress(self, op: SearcherOperation, length: float) -> None:
        fraction = min(max(length / op.length, 0.0), 1.0) if op.length > 0 else 1.0
        self._train.report_progress(fraction)

    def _report_completed(self, op: SearcherOperation, metric: float) -> None:
        if self._session is None:
            logger.info("searcher operation of length %d completed: metric %s", op.length, metric)
            return
        # The searcher may compare this trial's validations; they must be stored first.
        self._train.flush()
        self._session.post(
            f"/trials/{self._trial_id}/searcher/completed_operation",
            {"length": op.length, "searcher_metric": nonfinite.encode(metric)},
            retry=True,
        )
