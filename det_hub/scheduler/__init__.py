"""Scheduling policies: pure functions of pool state and pending requests."""

from det_hub.scheduler._base import Agent, Assignment, Decision, Request, Scheduler, Slot
from det_hub.scheduler.priority import PriorityScheduler

__all__ = [
    "Agent",
    "Assignment",
    "Decision",
    "PriorityScheduler",
    "Request",
    "Scheduler",
    "Slot",
]
