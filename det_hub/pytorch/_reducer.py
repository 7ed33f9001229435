"""Reducing per-batch metrics to one value: built-in reducers and the base of custom ones."""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping, Sequence
from typing import Any


class Reducer(enum.Enum):
    """How per-batch validation metrics become one value.

    ``AVG`` is weighted by each batch's length (``PyTorchTrial.get_batch_length``), so a short
    last batch counts for what it holds.
    """

    AVG = "AVG"
    SUM = "SUM"
    MAX = "MAX"
    MIN = "MIN"


class MetricReducer(abc.ABC):
    """A custom reducer, for metrics that are not a plain reduction of per-batch values.

    Register one with :meth:`PyTorchTrialContext.wrap_reducer`, feed it from ``train_batch``
    or ``evaluate_batch`` (with methods of your own), and det_hub calls :meth:`reset` before
    each period, :meth:`per_slot_reduce` on every rank at its end, and
    :meth:`cross_slot_reduce` with every rank's answer on the chief.
    """

    @abc.abstractmethod
    def reset(self) -> None:
        """Forget what was accumulated."""

    @abc.abstractmethod
    def per_slot_reduce(self) -> Any:
        """This rank's partial result; must be picklable."""

    @abc.abstractmethod
    def cross_slot_reduce(self, per_slot_metrics: Sequence[Any]) -> Any:
        """The final metric value (a number, or a dict of them) from every rank's partial result."""


def reduce_values(reducer: Reducer, values: Sequence[float], weights: Sequence[float]) -> float:
    """Reduce per-batch ``values`` with ``reducer``; ``weights`` count only for ``AVG``.

    Raises:
        ValueError: No values.
    """
    if not values:
        raise ValueError("no values to reduce")
    if reducer is Reducer.SUM:
        return float(sum(values))
    if reducer is Reducer.MAX:
        return float(max(values))
    if reducer is Reducer.MIN:
        return float(min(values))
    total = float(sum(weights))
    if total <= 0:
        return float(sum(values) / len(values))
    return float(sum(v * w for v, w in zip(values, weights, strict=True)) / total)


def reducer_for(reducers: Reducer | Mapping[str, Reducer], name: str) -> Reducer:
    """The reducer of metric ``name``: the one reducer, or its entry in a dict (AVG if absent).

    Raises:
        TypeError: ``reducers`` is neither a :class:`Reducer` nor a dict of them.
    """
    if isinstance(reducers, Reducer):
        return reducers
    if isinstance(reducers, Mapping):
        found = reducers.get(name, Reducer.AVG)
        if not isinstance(found, Reducer):
            raise TypeError(f"evaluation_reducer()[{name!r}] must be a Reducer, not {found!r}")
        return found
    raise TypeError(
        f"evaluation_reducer() must return a Reducer or a dict of them, not {reducers!r}"
    )
