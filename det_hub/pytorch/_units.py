"""Training lengths for :meth:`Trainer.fit`: ``Batch(n)``, ``Epoch(n)`` and ``Record(n)``."""

from __future__ import annotations


class TrainUnit:
    """A length of training counted in some unit.

    Args:
        value: How many units, at least 1.
    """

    def __init__(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{type(self).__name__} needs an integer >= 1, not {value!r}")
        self.value = value

    def to_batches(self, batches_per_epoch: int, global_batch_size: int | None = None) -> int:
        """This length in batches, given how many batches make an epoch and how many records
        make a global batch."""
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.value == self.value

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.value))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value})"


class Batch(TrainUnit):
    """A length in batches (global batches: one optimizer step of every rank)."""

    def to_batches(self, batches_per_epoch: int, global_batch_size: int | None = None) -> int:
        return self.value


class Epoch(TrainUnit):
    """A length in epochs of the training data loader."""

    def to_batches(self, batches_per_epoch: int, global_batch_size: int | None = None) -> int:
        if batches_per_epoch < 1:
            raise ValueError("an epoch length needs a training data loader of at least 1 batch")
        return self.value * batches_per_epoch


class Record(TrainUnit):
    """A length in records (samples), counted across every rank.

    As the config's ``{records: N}``, it is trained as global batches rounded up, so that at
    least this many records are trained.
    """

    def to_batches(self, batches_per_epoch: int, global_batch_size: int | None = None) -> int:
        if not global_batch_size or global_batch_size < 1:
            raise ValueError("a length in records needs a global batch size of at least 1")
        return -(-self.value // global_batch_size)
