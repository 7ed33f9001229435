"""What a scheduling policy sees and what it decides.

A policy is handed a snapshot of one resource pool (its agents with their slots, the
allocations waiting for slots, the allocations holding slots) and returns the assignments to
make now and the running allocations to ask to checkpoint and stop. It keeps no state between
calls and reads no clock: times come in on the requests, so the same snapshot always gives the
same decision.

Priority follows Determined: 1 is the most important, 99 the least, 42 the default.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence

from det_hub.defaults import DEFAULT_PRIORITY


@dataclasses.dataclass(frozen=True, slots=True)
class Slot:
    """One schedulable unit on an agent: a GPU, or a group of CPU cores.

    Attributes:
        id: The slot's number on its agent, unique on that agent.
        kind: ``"cpu"`` or ``"cuda"``.
        allocation_id: The allocation holding the slot, or None when it is free.
    """

    id: int
    kind: str = "cpu"
    allocation_id: str | None = None

    @property
    def free(self) -> bool:
        """Whether no allocation holds the slot."""
        return self.allocation_id is None


@dataclasses.dataclass(frozen=True, slots=True)
class Agent:
    """A host with slots.

    Attributes:
        id: The agent's name, unique in the pool; ties between agents go to the smaller id.
        slots: Every slot of the agent, free or held.
        enabled: A disabled agent keeps what runs on it (it drains) but gets nothing new.
    """

    id: str
    slots: tuple[Slot, ...]
    enabled: bool = True

    def free_slots(self) -> list[Slot]:
        """The slots a new allocation may take: the free ones, none while disabled."""
        return [s for s in self.slots if s.allocation_id is None] if self.enabled else []


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """An allocation waiting for slots.

    Attributes:
        allocation_id: The allocation that waits.
        slots: Slots it needs, all at once (0 for a task that needs none, such as a
            TensorBoard; it still needs an enabled agent to run on).
        priority: 1 (most important) .. 99 (least).
        position: The job's place in the queue, smaller first; moving a job ahead of another
            gives it a smaller position.
        queued_at: When the allocation was queued; orders allocations of equal position. Any
            comparable number the caller chooses.
        group: The job (an experiment, whose trials all share it); empty for an allocation
            that is a job of its own, such as a notebook.
        owner: The user the job belongs to.
        weight: The job's share of the pool under fair share, relative to other jobs.
        preemptible: Whether the allocation may be asked to stop once it runs.

    Raises:
        ValueError: ``slots`` is negative or ``weight`` is not positive.
    """

    allocation_id: str
    slots: int
    priority: int = DEFAULT_PRIORITY
    position: float = 0.0
    queued_at: float = 0.0
    group: str = ""
    owner: str = ""
    weight: float = 1.0
    preemptible: bool = True

    def __post_init__(self) -> None:
        _check(self.allocation_id, self.slots, self.weight)


@dataclasses.dataclass(frozen=True, slots=True)
class Running:
    """An allocation that holds slots.

    Which slots it holds is visible from ``Agent.slots[*].allocation_id``; ``slots`` is how
    many it holds in all (it may span several agents).

    Attributes:
        allocation_id: The allocation.
        slots: Slots it holds.
        priority: 1 (most important) .. 99 (least).
        position: The job's place in the queue (see :class:`Request`).
        queued_at: When the allocation was queued.
        group: The job (see :class:`Request`).
        owner: The user the job belongs to.
        weight: The job's share under fair share.
        preemptible: False for allocations that must never be asked to stop (notebooks,
            commands, shells).
        preempting: The allocation was already asked to checkpoint and release its slots,
            and will do so soon.

    Raises:
        ValueError: ``slots`` is negative or ``weight`` is not positive.
    """

    allocation_id: str
    slots: int
    priority: int = DEFAULT_PRIORITY
    position: float = 0.0
    queued_at: float = 0.0
    group: str = ""
    owner: str = ""
    weight: float = 1.0
    preemptible: bool = True
    preempting: bool = False

    def __post_init__(self) -> None:
        _check(self.allocation_id, self.slots, self.weight)


def _check(allocation_id: str, slots: int, weight: float) -> None:
    if slots < 0:
        raise ValueError(f"{allocation_id}: slots must be >= 0; got {slots}")
    if not weight > 0:
        raise ValueError(f"{allocation_id}: weight must be > 0; got {weight}")


@dataclasses.dataclass(frozen=True, slots=True)
class Placement:
    """The slots an allocation gets on one agent.

    Attributes:
        agent_id: The agent.
        slot_ids: Ids of the agent's slots, in the agent's slot order.
    """

    agent_id: str
    slot_ids: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Assignment:
    """Start an allocation on these slots.

    Attributes:
        allocation_id: The request that starts.
        placements: One per agent used: one for a request that fits on one agent, several
            with the same number of slots each for a multi-host request.
    """

    allocation_id: str
    placements: tuple[Placement, ...]

    @property
    def slots(self) -> int:
        """Slots assigned in all."""
        return sum(len(p.slot_ids) for p in self.placements)


@dataclasses.dataclass
class Decision:
    """What a scheduling pass decided.

    Attributes:
        assignments: Requests to start now, on the slots given, in the order decided.
        preemptions: Running allocations to ask to checkpoint and release their slots.
    """

    assignments: list[Assignment] = dataclasses.field(default_factory=list)
    preemptions: list[str] = dataclasses.field(default_factory=list)


FITTING_POLICIES = ("best", "worst")


def check_fitting_policy(value: object) -> str:
    """``value`` if it names a fitting policy.

    Raises:
        ValueError: It does not.
    """
    if value not in FITTING_POLICIES:
        raise ValueError(
            f"scheduler.fitting_policy: must be one of {', '.join(FITTING_POLICIES)}; "
            f"got {value!r}"
        )
    return str(value)


class Scheduler(abc.ABC):
    """Base class of scheduling policies: a snapshot in, a :class:`Decision` out.

    Args:
        preemption: Whether the policy may ask running allocations to stop; None for the
            policy's own default (:attr:`default_preemption`).
        fitting_policy: ``"best"`` (the agent whose free slots fit most tightly) or
            ``"worst"`` (the one with the most free slots).

    Raises:
        ValueError: ``fitting_policy`` is neither.
    """

    default_preemption = False

    def __init__(self, preemption: bool | None = None, fitting_policy: str = "best") -> None:
        self.preemption = self.default_preemption if preemption is None else bool(preemption)
        self.fitting_policy = check_fitting_policy(fitting_policy)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(preemption={self.preemption}, "
                f"fitting_policy={self.fitting_policy!r})")

    def schedule(
        self,
        agents: Sequence[Agent],
        pending: Sequence[Request],
        running: Sequence[Running] = (),
    ) -> Decision:
        """Decide which pending requests start now and where, and what to preempt.

        Args:
            agents: Every agent of the pool, disabled ones included (their slots show what
                still runs there).
            pending: Allocations waiting for slots.
            running: Allocations holding slots.

        Returns:
            The assignments and preemptions to carry out.
        """
        return self._schedule(agents, pending, running)[0]

    @abc.abstractmethod
    def _schedule(
        self, agents: Sequence[Agent], pending: Sequence[Request], running: Sequence[Running]
    ) -> tuple[Decision, dict[str, tuple[Placement, ...]]]:
        """The decision, and the free slots reserved for each request that waits for room
        the decision makes (what the pass kept from others; the tests check it)."""


__all__ = [
    "DEFAULT_PRIORITY",
    "FITTING_POLICIES",
    "check_fitting_policy",
    "Agent",
    "Assignment",
    "Decision",
    "Placement",
    "Request",
    "Running",
    "Scheduler",
    "Slot",
]
