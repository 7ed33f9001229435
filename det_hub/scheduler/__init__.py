"""Scheduling policies: pure functions of a pool's state and its waiting allocations.

A policy takes a snapshot (agents and their slots, pending requests, running allocations) and
returns a :class:`Decision`: which requests start where, and which running allocations to ask
to stop. :func:`build_scheduler` makes one from a resource pool's ``scheduler`` settings.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from det_hub.scheduler._base import (
    DEFAULT_PRIORITY,
    FITTING_POLICIES,
    Agent,
    Assignment,
    Decision,
    Placement,
    Request,
    Running,
    Scheduler,
    Slot,
    check_fitting_policy,
)
from det_hub.scheduler.fair_share import FairShareScheduler, fair_shares
from det_hub.scheduler.priority import PriorityScheduler

#: Policies by the name a pool's ``scheduler.type`` gives.
SCHEDULER_TYPES: dict[str, type[PriorityScheduler] | type[FairShareScheduler]] = {
    "priority": PriorityScheduler,
    "fair_share": FairShareScheduler,
}
_KEYS = ("type", "preemption", "fitting_policy")


def build_scheduler(settings: Mapping[str, Any] | None = None) -> Scheduler:
    """The policy a resource pool's scheduler settings ask for.

    Args:
        settings: ``{"type": "priority" | "fair_share", "preemption": bool,
            "fitting_policy": "best" | "worst"}``, every key optional. ``type`` defaults to
            ``priority`` and ``fitting_policy`` to ``best``; ``preemption`` defaults to the
            policy's own default: off for ``priority``, on for ``fair_share`` (fair share
            cannot give a newcomer its share of a full pool without it).

    Returns:
        The policy.

    Raises:
        ValueError: An unknown key or a bad value; the message names the key and what is
            allowed.
    """
    settings = dict(settings or {})
    unknown = sorted(set(settings) - set(_KEYS), key=str)
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), _KEYS, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ValueError(f"scheduler.{unknown[0]}: unknown key{hint}; allowed keys are "
                         f"{', '.join(sorted(_KEYS))}")
    kind = settings.get("type", "priority")
    if not isinstance(kind, str) or kind not in SCHEDULER_TYPES:
        raise ValueError(f"scheduler.type: must be one of {', '.join(SCHEDULER_TYPES)}; "
                         f"got {kind!r}")
    fitting = check_fitting_policy(settings.get("fitting_policy", "best"))
    policy = SCHEDULER_TYPES[kind]
    if "preemption" not in settings:
        return policy(fitting_policy=fitting)
    preemption = settings["preemption"]
    if not isinstance(preemption, bool):
        raise ValueError(f"scheduler.preemption: must be true or false; got {preemption!r}")
    return policy(preemption=preemption, fitting_policy=fitting)


__all__ = [
    "DEFAULT_PRIORITY",
    "FITTING_POLICIES",
    "SCHEDULER_TYPES",
    "Agent",
    "Assignment",
    "Decision",
    "FairShareScheduler",
    "Placement",
    "PriorityScheduler",
    "Request",
    "Running",
    "Scheduler",
    "Slot",
    "build_scheduler",
    "fair_shares",
]
