"""The ``resources`` section: how many slots a trial gets, where and with what priority."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from det_hub.config._errors import Problem, fail
from det_hub.config._model import ConfigModel
from det_hub.defaults import DEFAULT_RESOURCE_POOL, DEFAULT_SLOTS


def _pool_name(value: Any) -> Any:
    # An empty pool name in Determined means the cluster's default pool.
    return DEFAULT_RESOURCE_POOL if value == "" else value


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(value: int | str) -> int:
    """Bytes from a size: a number of bytes, or ``'512M'``, ``'4G'``, ``'1.5GiB'`` (powers of
    1024, as Docker reads them).

    Raises:
        ValueError: Not a size.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return value
    match = _SIZE.match(str(value))
    if match is None:
        raise ValueError(f"{value!r} is not a size such as 4G or 512M")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def _size(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        fail("must be a number of bytes or a size such as '4G'")
    try:
        parse_size(value)
    except ValueError as e:
        fail(str(e))
    return value


class ResourcesConfig(ConfigModel):
    """Slots and scheduling for each trial.

    Attributes:
        slots_per_trial: Slots (GPUs, or CPU groups on CPU agents) one trial uses.
        max_slots: Most slots the experiment may hold at once; None for no limit.
        weight: Share of the cluster under the fair-share scheduler.
        priority: 1 (highest) to 99 under the priority scheduler; None for the pool default.
        resource_pool: The pool to run in.
    """

    slots_per_trial: int = Field(default=DEFAULT_SLOTS, ge=1)
    max_slots: int | None = Field(default=None, ge=1)
    weight: float = Field(default=1.0, gt=0)
    priority: int | None = Field(default=None, ge=1, le=99)
    resource_pool: Annotated[str, BeforeValidator(_pool_name)] = DEFAULT_RESOURCE_POOL
    shm_size: Annotated[int | str | None, BeforeValidator(_size)] = None
    devices: list[Any] = []
    native_parallel: bool = False
    is_single_node: bool | None = None

    def _semantic_problems(self) -> list[Problem]:
        if self.max_slots is not None and self.max_slots < self.slots_per_trial:
            return [Problem("max_slots", f"must be >= slots_per_trial ({self.slots_per_trial})")]
        return []
