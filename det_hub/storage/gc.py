"""Which checkpoints an experiment's ``checkpoint_storage`` retention settings let go.

Determined's rule: keep the experiment's ``save_experiment_best`` best checkpoints (by the
searcher metric of the validation they were taken at), each trial's ``save_trial_best`` best,
and each trial's ``save_trial_latest`` latest; every other COMPLETED checkpoint is deleted.

This is a pure function over plain records. The caller decides *when* to apply it, and must
keep what the policy cannot see: a trial that is not in a terminal state may still resume
from its latest checkpoint, so the service either runs GC for a trial only once it is terminal
or passes ``save_trial_latest >= 1`` while it runs.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

COMPLETED = "COMPLETED"


@dataclass(frozen=True)
class CheckpointRecord:
    """What the GC policy needs to know about one checkpoint.

    Attributes:
        uuid: The checkpoint's id (unique).
        trial_id: The trial that wrote it.
        steps_completed: The trial's step count when it was written.
        searcher_metric: The searcher metric of the validation at that step, or None when the
            checkpoint has no validation (it can then only be kept as one of the latest).
        state: Only ``COMPLETED`` checkpoints are considered; others are never deleted here.
    """

    uuid: str
    trial_id: int
    steps_completed: int
    searcher_metric: float | None = None
    state: str = COMPLETED


def _has_metric(ckpt: CheckpointRecord) -> bool:
    return ckpt.searcher_metric is not None and not math.isnan(ckpt.searcher_metric)


def _best(
    ckpts: Iterable[CheckpointRecord], count: int, smaller_is_better: bool
) -> list[CheckpointRecord]:
    """The ``count`` best by metric; ties go to the later checkpoint, then to the uuid."""
    if count <= 0:
        return []
    sign = 1.0 if smaller_is_better else -1.0
    scored = [c for c in ckpts if _has_metric(c)]
    scored.sort(key=lambda c: (sign * c.searcher_metric, -c.steps_completed, c.uuid))  # type: ignore[operator]
    return scored[:count]


def _latest(ckpts: Iterable[CheckpointRecord], count: int) -> list[CheckpointRecord]:
    """The ``count`` latest by steps; ties go to the uuid, so the answer is deterministic."""
    if count <= 0:
        return []
    return sorted(ckpts, key=lambda c: (-c.steps_completed, c.uuid))[:count]


def checkpoints_to_keep(
    checkpoints: Iterable[CheckpointRecord],
    *,
    save_experiment_best: int,
    save_trial_best: int,
    save_trial_latest: int,
    smaller_is_better: bool,
) -> set[str]:
    """The uuids of the COMPLETED checkpoints the retention settings keep."""
    completed = [c for c in checkpoints if c.state == COMPLETED]
    keep = {c.uuid for c in _best(completed, save_experiment_best, smaller_is_better)}
    by_trial: dict[int, list[CheckpointRecord]] = defaultdict(list)
    for c in completed:
        by_trial[c.trial_id].append(c)
    for trial_ckpts in by_trial.values():
        keep.update(c.uuid for c in _best(trial_ckpts, save_trial_best, smaller_is_better))
        keep.update(c.uuid for c in _latest(trial_ckpts, save_trial_latest))
    return keep


def checkpoints_to_delete(
    checkpoints: Iterable[CheckpointRecord],
    *,
    save_experiment_best: int,
    save_trial_best: int,
    save_trial_latest: int,
    smaller_is_better: bool,
) -> set[str]:
    """The uuids of the COMPLETED checkpoints the retention settings let go.

    Args:
        checkpoints: Every checkpoint of one experiment.
        save_experiment_best: How many of the experiment's best checkpoints to keep.
        save_trial_best: How many of each trial's best checkpoints to keep.
        save_trial_latest: How many of each trial's latest checkpoints to keep.
        smaller_is_better: Whether a smaller searcher metric is better.

    Returns:
        A subset of the uuids of the COMPLETED input checkpoints. The same input, in any
        order, gives the same answer. Whether the newest checkpoint of a trial that may still
        resume must survive is the caller's concern (see the module docstring).

    Raises:
        ValueError: A retention count is negative.
    """
    for name, value in (
        ("save_experiment_best", save_experiment_best),
        ("save_trial_best", save_trial_best),
        ("save_trial_latest", save_trial_latest),
    ):
        if value < 0:
            raise ValueError(f"checkpoint_storage.{name}: must be >= 0, not {value}")
    ckpts = list(checkpoints)
    keep = checkpoints_to_keep(
        ckpts,
        save_experiment_best=save_experiment_best,
        save_trial_best=save_trial_best,
        save_trial_latest=save_trial_latest,
        smaller_is_better=smaller_is_better,
    )
    return {c.uuid for c in ckpts if c.state == COMPLETED and c.uuid not in keep}
