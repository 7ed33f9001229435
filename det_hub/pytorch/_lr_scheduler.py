"""A torch LR scheduler together with when det_hub should step it."""

from __future__ import annotations

import enum
from typing import Any


class LRScheduler:
    """Wraps a torch LR scheduler; made by :meth:`PyTorchTrialContext.wrap_lr_scheduler`.

    Attributes:
        scheduler: The torch scheduler.
        step_mode: When det_hub steps it.
        frequency: With ``STEP_EVERY_BATCH``/``STEP_EVERY_EPOCH``, step every this many.
    """

    class StepMode(enum.Enum):
        """When the scheduler is stepped."""

        STEP_EVERY_EPOCH = 1
        STEP_EVERY_BATCH = 2
        MANUAL_STEP = 3
        STEP_EVERY_OPTIMIZER_STEP = 4

    def __init__(self, scheduler: Any, step_mode: StepMode, frequency: int = 1) -> None:
        if not isinstance(step_mode, LRScheduler.StepMode):
            raise TypeError(f"step_mode must be an LRScheduler.StepMode, not {step_mode!r}")
        if frequency < 1:
            raise ValueError(f"frequency must be >= 1, not {frequency}")
        self.scheduler = scheduler
        self.step_mode = step_mode
        self.frequency = frequency

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Step the torch scheduler."""
        self.scheduler.step(*args, **kwargs)

    def get_last_lr(self) -> list[float]:
        """The learning rates the scheduler set last."""
        return list(self.scheduler.get_last_lr())

    def state_dict(self) -> dict[str, Any]:
        return dict(self.scheduler.state_dict())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scheduler.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        # Everything else (base_lrs, last_epoch, ...) is the torch scheduler's.
        if name == "scheduler":
            raise AttributeError(name)
        return getattr(self.scheduler, name)
