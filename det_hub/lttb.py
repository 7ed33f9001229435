"""Largest-Triangle-Three-Buckets: pick the points of a curve that keep its shape.

LTTB (Steinarsson, 2013) keeps the first and the last point and, from each of ``threshold - 2``
equal buckets in between, the point that spans the largest triangle with the point kept from
the previous bucket and the mean of the next bucket. Peaks and dips survive, unlike with
every-k-th thinning, so a chart of a million steps drawn from a thousand points looks the same.

Written here because the packages that ship it need numpy or a compiled extension, which
neither the master nor the notebook widgets otherwise depend on; the loop is small and runs over
plain sequences. Pure: the standard library only, so that the store (which thins the points a
chart asks for) and the widgets (which thin what they draw) share it without importing each
other.
"""

from __future__ import annotations

from collections.abc import Sequence


def lttb_indices(xs: Sequence[float], ys: Sequence[float], threshold: int) -> list[int]:
    """The indices of the points LTTB keeps, ascending.

    Args:
        xs: the x values (steps), ascending.
        ys: the y values, as many as ``xs``.
        threshold: how many points to keep; every index is returned when there are no more
            points than this. ``1`` keeps the first point and ``2`` the first and the last.

    Returns:
        Exactly ``min(threshold, len(xs))`` indices, always including ``0`` and
        ``len(xs) - 1`` when ``threshold >= 2``.

    Raises:
        ValueError: ``threshold`` is below 1, or ``xs`` and ``ys`` differ in length.
    """
    n = len(xs)
    if len(ys) != n:
        raise ValueError(f"xs and ys differ in length: {n} and {len(ys)}")
    if threshold < 1:
        raise ValueError(f"threshold must be >= 1, got {threshold}")
    if threshold >= n:
        return list(range(n))
    if threshold == 1:
        return [0]
    if threshold == 2:
        return [0, n - 1]

    every = (n - 2) / (threshold - 2)
    kept = [0]
    a = 0
    for i in range(threshold - 2):
        # The next bucket's mean is the triangle's third corner (the last point for the last).
        start = int((i + 1) * every) + 1
        end = min(int((i + 2) * every) + 1, n)
        if start >= end:
            start, end = n - 1, n
        count = end - start
        avg_x = sum(xs[start:end]) / count
        avg_y = sum(ys[start:end]) / count

        lo = int(i * every) + 1
        hi = int((i + 1) * every) + 1
        ax, ay = xs[a], ys[a]
        # Twice the triangle's area, without the constant factor; the cross product expanded
        # so that the loop does two multiplications per point.
        dx, dy = ax - avg_x, avg_y - ay
        best, best_area = lo, -1.0
        for j in range(lo, hi):
            area = abs(dx * (ys[j] - ay) + (xs[j] - ax) * dy)
            if area > best_area:
                best, best_area = j, area
        kept.append(best)
        a = best
    kept.append(n - 1)
    return kept


__all__ = ["lttb_indices"]
