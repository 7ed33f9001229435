"""The metrics a run of batches returned (a training period, a validation pass), kept as
they came until the run is reported.

Reading a CUDA tensor's value waits for every kernel queued before it, so reading each batch's
loss as it comes would stall the GPU's pipeline once a batch. :class:`BatchMetrics` keeps the
tensors instead and reads them all at once when the run is reported, with one transfer per
device and dtype.

It keeps them column by column (one list per metric name), since a report wants each metric's
values together: its mean, its floats for the trial's callbacks. Adding a batch is then a few
list appends per metric, which matters where batches take a couple of milliseconds of the
host's time (a small model on a GPU, bound by kernel launches).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


class _Column:
    """One metric's values: the index of the batch each came from, the value (a tensor until read, else
    a float), and for a tensor kept without a copy the version it had then."""

    __slots__ = ("indices", "values", "versions")

    def __init__(self) -> None:
        self.indices: list[int] = []
        self.values: list[Any] = []
        self.versions: list[int | None] = []


class BatchMetrics:
    """The metrics of a run of batches, added one batch at a time with :meth:`add`.

    The output of an autograd operation (a loss: it has a ``grad_fn`` and is not a view) is a
    fresh tensor nobody else holds, so it is kept as it is, with no device work per batch (a
    copy is one kernel launch per batch and metric). Any other tensor (an accumulator the
    trial updates in place, a view of a larger tensor, a metric computed under ``no_grad``)
    is copied, so that later changes do not reach earlier batches and no large storage is held
    for the run. A kept tensor changed in place before the run is read is refused by name.

    Args:
        where: What returned the metrics, for errors (``"train_batch()"``).
    """

    def __init__(self, where: str) -> None:
        self._where = where
        self._columns: dict[str, _Column] = {}
        self._read: dict[str, list[float]] | None = None
        self.batches = 0

    def __len__(self) -> int:
        return self.batches

    def add(self, output: Any) -> None:
        """Add one batch's output: a dict of metric name to scalar, or a loss tensor.

        Raises:
            TypeError: ``output`` is neither, or a metric is a tensor of several values or
                not a number.
        """
        if type(output) is not dict:
            if isinstance(output, torch.Tensor):
                output = {"loss": output}
            elif not isinstance(output, Mapping):
                raise TypeError(
                    f"{self._where} must return a dict of metrics or a loss tensor, not {output!r}")
        index = self.batches
        columns = self._columns
        for key, value in output.items():
            name = key if type(key) is str else str(key)
            column = columns.get(name)
            if column is None:
                column = columns[name] = _Column()
            column.indices.append(index)
            if isinstance(value, torch.Tensor):
                if value.numel() != 1:
                    raise TypeError(
                        f"metric {name!r} is a tensor of {value.numel()} values, not a scalar")
                if value.grad_fn is not None and value._base is None:
                    column.values.append(value.detach())
                    column.versions.append(value._version)
                else:
                    column.values.append(value.detach().clone())
                    column.versions.append(None)
            else:
                column.values.append(scalar(name, value))
                column.versions.append(None)
        self.batches += 1
        self._read = None

    def columns(self) -> dict[str, tuple[list[int], list[float]]]:
        """Each metric's batches (their indices in the run) and values, as floats.

        Raises:
            RuntimeError: A kept tensor (see the class) was changed in place after its batch
                returned it, so that batch's value is lost.
        """
        floats = self._floats()
        return {name: (self._columns[name].indices, values) for name, values in floats.items()}

    def means(self) -> dict[str, float]:
        """Each metric's mean over the batches that returned it."""
        return {name: sum(values) / len(values) for name, values in self._floats().items()}

    def rows(self) -> list[dict[str, float]]:
        """The run batch by batch: each batch's metrics as floats, as it returned them."""
        rows: list[dict[str, float]] = [{} for _ in range(self.batches)]
        for name, (indices, values) in self.columns().items():
            for i, value in zip(indices, values, strict=True):
                rows[i][name] = value
        return rows

    def _floats(self) -> dict[str, list[float]]:
        if self._read is not None:
            return self._read
        out: dict[str, list[float]] = {}
        # (device, dtype) -> [(name, positions in the column, their values in one tensor)]
        groups: dict[tuple[torch.device, torch.dtype], list[tuple[str, list[int], torch.Tensor]]]
        groups = {}
        for name, column in self._columns.items():
            values: list[Any] = list(column.values)  # tensors until read below
            out[name] = values
            positions = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
            if not positions:
                continue
            for i in positions:
                version = column.versions[i]
                if version is not None and values[i]._version != version:
                    raise RuntimeError(
                        f"the metric {name!r} was changed in place after the batch returned "
                        "it, so that batch's value is lost; return a tensor that is not "
                        f"updated later (e.g. {name}.detach().clone())")
            tensors: list[torch.Tensor] = [values[i] for i in positions]
            kinds = {(t.device, t.dtype) for t in tensors}
            if len(kinds) == 1:
                flat = torch.stack([t.reshape(()) if t.dim() else t for t in tensors])
                groups.setdefault(kinds.pop(), []).append((name, positions, flat))
                continue
            for i, t in zip(positions, tensors, strict=True):
                groups.setdefault((t.device, t.dtype), []).append((name, [i], t.reshape(1)))
        for parts in groups.values():
            numbers = torch.cat([flat for _, _, flat in parts]).tolist()
            k = 0
            for name, positions, _ in parts:
                read = out[name]
                for i in positions:
                    read[i] = float(numbers[k])
                    k += 1
        self._read = out
        return out


def scalar(name: str, value: Any) -> float:
    """``value`` (a number, or anything with ``item()``: a numpy or torch scalar) as a float.

    Raises:
        TypeError: A tensor of several values, or a value that is no number.
    """
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise TypeError(f"metric {name!r} is a tensor of {value.numel()} values, not a scalar")
        return float(value.detach().item())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        item = getattr(value, "item", None)
        if callable(item):
            return float(item())
        raise TypeError(f"metric {name!r} has a value of type {type(value).__name__}")
    return float(value)
