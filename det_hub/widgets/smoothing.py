"""Exponential moving average smoothing of a metric curve, as TensorBoard's slider does."""

from __future__ import annotations

from collections.abc import Sequence


def ema(values: Sequence[float], weight: float) -> list[float]:
    """The debiased exponential moving average of ``values``.

    Args:
        values: the curve, in step order.
        weight: 0 (no smoothing) up to, not including, 1 (heaviest).

    The average starts at zero and is divided by ``1 - weight ** n``, so the first points are
    not pulled towards zero.
    """
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"weight must be in [0, 1), got {weight}")
    if weight == 0.0:
        return list(values)
    out: list[float] = []
    acc, debias = 0.0, 1.0
    for v in values:
        acc = acc * weight + (1.0 - weight) * v
        debias *= weight
        out.append(acc / (1.0 - debias))
    return out
