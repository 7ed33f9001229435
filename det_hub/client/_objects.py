"""Typed views of the master's JSON objects.

Each class is a frozen dataclass built by ``from_json`` from one object of the REST API
(docs/rest-api.md). Fields the SDK's users commonly need are typed attributes; the whole JSON
object stays available as ``.raw``, so nothing the master sends is lost, including fields added
after this SDK was written. Missing fields take neutral defaults rather than failing, so that a
newer or older master still reads.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from det_hub import nonfinite
from det_hub.states import TERMINAL_EXPERIMENT_STATES, TERMINAL_TRIAL_STATES, TaskState

from ._checkpoint_files import checkpoint_directory
from ._errors import DetHubError

if TYPE_CHECKING:
    from ._client import Client

T = TypeVar("T")

_TERMINAL_EXPERIMENT = frozenset(s.value for s in TERMINAL_EXPERIMENT_STATES)
_TERMINAL_TRIAL = frozenset(s.value for s in TERMINAL_TRIAL_STATES)


def parse_time(value: Any) -> dt.datetime | None:
    """Parses an ISO 8601 time from the API into an aware datetime; ``None`` if absent or bad."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    # Python 3.10's fromisoformat does not take the "Z" suffix.
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return parsed


def _int(value: Any, default: int = 0) -> int:
    return int(value) if isinstance(value, (int, float)) else default


def _opt_float(value: Any) -> float | None:
    value = nonfinite.decode(value) if isinstance(value, str) else value
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _opt_str(value: Any) -> str | None:
    return str(value) if value is not None else None


def _opt_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


class Listing(list[T], Generic[T]):
    """A list answer of the API: the typed items, plus the whole JSON answer.

    Attributes:
        raw: The JSON answer exactly as the master sent it.
        pagination: ``{"offset", "limit", "total"}`` for paginated lists, else ``None``.
    """

    def __init__(
        self, items: list[T], raw: dict[str, Any], pagination: dict[str, Any] | None = None
    ) -> None:
        super().__init__(items)
        self.raw = raw
        self.pagination = pagination

    @property
    def total(self) -> int:
        """The number of items on the master (all pages), or this page's length if unpaginated."""
        if self.pagination and isinstance(self.pagination.get("total"), int):
            return int(self.pagination["total"])
        return len(self)


@dataclass(frozen=True)
class AgentUserGroup:
    """The Unix account a user's tasks run as (``det-hub user link-with-agent-user``); the
    names are None when the link was made without them."""

    agent_uid: int
    agent_gid: int
    agent_user: str | None = None
    agent_group: str | None = None

    @classmethod
    def from_json(cls, data: Any) -> AgentUserGroup | None:
        """Builds one from a user's ``agent_user_group``; None for an unlinked user."""
        if not isinstance(data, dict) or _opt_int(data.get("agent_uid")) is None:
            return None
        return cls(agent_uid=_int(data.get("agent_uid")), agent_gid=_int(data.get("agent_gid")),
                   agent_user=_opt_str(data.get("agent_user")),
                   agent_group=_opt_str(data.get("agent_group")))


@dataclass(frozen=True)
class User:
    """A user of the master."""

    id: int
    username: str
    admin: bool
    raw: dict[str, Any] = field(repr=False, compare=False)
    #: The Unix account the user's tasks run as, None when not linked to one.
    agent_user_group: AgentUserGroup | None = None
    #: False once the user is deactivated.
    active: bool = True
    created_at: dt.datetime | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> User:
        """Builds a :class:`User` from the API's user object."""
        return cls(
            id=_int(data.get("id")),
            username=str(data.get("username", "")),
            admin=bool(data.get("admin", False)),
            raw=data,
            agent_user_group=AgentUserGroup.from_json(data.get("agent_user_group")),
            active=bool(data.get("active", True)),
            created_at=parse_time(data.get("created_at")),
        )


@dataclass(frozen=True)
class NewUser:
    """The answer to creating a user: the user and its token, which is shown only this once."""

    user: User
    token: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NewUser:
        """Builds a :class:`NewUser` from the ``POST /users`` answer."""
        return cls(user=User.from_json(_dict(data.get("user"))), token=str(data.get("token", "")), raw=data)


@dataclass(frozen=True)
class Experiment:
    """An experiment: one config, one searcher, one or more trials."""

    id: int
    name: str
    state: str
    owner: str = ""
    description: str = ""
    archived: bool = False
    progress: float | None = None
    created_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    config: dict[str, Any] = field(default_factory=dict, repr=False)
    searcher_metric: str | None = None
    smaller_is_better: bool = True
    num_trials: int = 0
    resource_pool: str = ""
    priority: int | None = None
    #: The experiment this one was forked from.
    forked_from: int | None = None
    #: The best searcher-metric value any of its trials validated with; None before any.
    best_searcher_metric: float | None = None
    #: Its share of a fair-share pool.
    weight: float | None = None
    #: Its entry in the job queue: ``exp-<id>``.
    job_id: str = ""
    seed: int | None = None
    labels: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_terminal(self) -> bool:
        """Whether the experiment has reached COMPLETED, CANCELED or ERROR."""
        return self.state in _TERMINAL_EXPERIMENT

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Experiment:
        """Builds an :class:`Experiment` from the API's experiment object."""
        priority = data.get("priority")
        metric = data.get("searcher_metric")
        return cls(
            id=_int(data.get("id")),
            name=str(data.get("name") or ""),
            state=str(data.get("state", "")),
            owner=str(data.get("owner") or ""),
            description=str(data.get("description") or ""),
            archived=bool(data.get("archived", False)),
            progress=_opt_float(data.get("progress")),
            created_at=parse_time(data.get("created_at")),
            ended_at=parse_time(data.get("ended_at")),
            config=_dict(data.get("config")),
            searcher_metric=str(metric) if metric is not None else None,
            smaller_is_better=bool(data.get("smaller_is_better", True)),
            num_trials=_int(data.get("num_trials")),
            resource_pool=str(data.get("resource_pool") or ""),
            priority=int(priority) if isinstance(priority, int) else None,
            forked_from=_opt_int(data.get("forked_from")),
            best_searcher_metric=_opt_float(data.get("best_searcher_metric")),
            weight=_opt_float(data.get("weight")),
            job_id=str(data.get("job_id") or ""),
            seed=_opt_int(data.get("seed")),
            labels=[str(v) for v in data.get("labels") or []],
            raw=data,
        )


@dataclass(frozen=True)
class Trial:
    """One trial of an experiment: one hyperparameter setting trained by one process group."""

    id: int
    experiment_id: int
    state: str
    run_state: str | None = None
    request_id: str = ""
    hparams: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    restarts: int = 0
    #: Starts of its process so far: the first, and every restart or resume.
    run_id: int = 0
    created_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    steps_completed: int = 0
    progress: float | None = None
    latest_checkpoint: str | None = None
    best_validation: dict[str, Any] | None = None
    searcher_metric_value: float | None = None
    #: The validation with the most steps: ``{"steps_completed", "metrics"}``.
    latest_validation: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_terminal(self) -> bool:
        """Whether the trial has reached COMPLETED, CANCELED or ERROR."""
        return self.state in _TERMINAL_TRIAL

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Trial:
        """Builds a :class:`Trial` from the API's trial object."""
        seed = data.get("seed")
        best, latest = data.get("best_validation"), data.get("latest_validation")
        checkpoint = data.get("latest_checkpoint")
        run_state = data.get("run_state")
        return cls(
            id=_int(data.get("id")),
            experiment_id=_int(data.get("experiment_id")),
            state=str(data.get("state", "")),
            run_state=str(run_state) if run_state is not None else None,
            request_id=str(data.get("request_id") or ""),
            hparams=_dict(data.get("hparams")),
            seed=int(seed) if isinstance(seed, int) else None,
            restarts=_int(data.get("restarts")),
            run_id=_int(data.get("run_id")),
            created_at=parse_time(data.get("created_at")),
            ended_at=parse_time(data.get("ended_at")),
            steps_completed=_int(data.get("steps_completed")),
            progress=_opt_float(data.get("progress")),
            latest_checkpoint=str(checkpoint) if checkpoint else None,
            # NaN and infinities come as Determined's strings; floats again here.
            best_validation=nonfinite.decode(best) if isinstance(best, dict) else None,
            searcher_metric_value=_opt_float(data.get("searcher_metric_value")),
            latest_validation=nonfinite.decode(latest) if isinstance(latest, dict) else None,
            raw=data,
        )


@dataclass(frozen=True)
class MetricReport:
    """One report of metrics by a trial at a number of completed steps."""

    group: str
    steps_completed: int
    report_time: dt.datetime | None
    metrics: dict[str, Any]
    raw: dict[str, Any] = field(repr=False, compare=False)
    #: The trial that reported it (None from a master that does not say).
    trial_id: int | None = None
    #: The row's id: increasing in the order the master stored the rows.
    id: int | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MetricReport:
        """Builds a :class:`MetricReport` from one item of ``GET /trials/{id}/metrics``
        (or of the metrics of a checkpoint or model version)."""
        return cls(
            group=str(data.get("group", "")),
            steps_completed=_int(data.get("steps_completed")),
            report_time=parse_time(data.get("report_time")),
            metrics=nonfinite.decode(_dict(data.get("metrics"))),
            raw=data,
            trial_id=_opt_int(data.get("trial_id")),
            id=_opt_int(data.get("id")),
        )


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint written by a trial.

    One read through a :class:`Client` can :meth:`download` its files and :meth:`delete` it.
    """

    uuid: str
    trial_id: int
    experiment_id: int
    state: str
    steps_completed: int = 0
    allocation_id: str = ""
    report_time: dt.datetime | None = None
    resources: dict[str, int] = field(default_factory=dict, repr=False)
    metadata: dict[str, Any] = field(default_factory=dict, repr=False)
    size: int = 0
    storage: dict[str, Any] = field(default_factory=dict, repr=False)
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _client: Client | None = field(default=None, repr=False, compare=False)

    @property
    def training(self) -> dict[str, Any] | None:
        """What the checkpoint was trained from, when it was read alone
        (``Client.get_checkpoint``, a model version): ``experiment_config``,
        ``searcher_metric``, ``hparams``, ``trial_seed``, ``validation_metrics`` at its step
        (None when none were reported there) and ``model_definition``, the API path of the
        experiment's context archive. None in lists."""
        training = self.raw.get("training")
        return dict(training) if isinstance(training, dict) else None

    def download(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Copies the checkpoint's files into ``path`` (default ``checkpoints/<uuid>``,
        created when missing) from its storage, and returns that directory.

        Raises:
            ValueError: The storage type cannot be read from this machine.
            FileNotFoundError: The files are not where the storage says (a ``shared_fs``
                storage must be mounted here at the same path).
        """
        return checkpoint_directory(self, Path("checkpoints", self.uuid) if path is None
                                    else path)

    def get_metrics(self, group: str | None = None) -> Listing[MetricReport]:
        """Returns the metric reports of every trial that reported using this checkpoint
        (``core_context.experimental.report_task_using_checkpoint``, or through a model
        version of it): trial by trial, each in ascending order of steps, each report with
        its ``trial_id``. ``group`` keeps one group (``validation``, ``training``, ...)."""
        return self._sdk().checkpoint_metrics(self.uuid, group)

    def delete(self) -> Checkpoint:
        """Deletes the checkpoint's files (its experiment's owner or an admin); returns it as
        it is now, ``DELETED``.

        Raises:
            MasterError: 409 when a model version names it, or it is the latest checkpoint
                of a trial that can still run; 403 for another user's.
        """
        return self._sdk().delete_checkpoint(self.uuid)

    def _sdk(self) -> Client:
        if self._client is None:
            raise DetHubError(f"checkpoint {self.uuid} was not read through a Client; "
                              "use Client.get_checkpoint() to act on it")
        return self._client

    @classmethod
    def from_json(cls, data: dict[str, Any], client: Client | None = None) -> Checkpoint:
        """Builds a :class:`Checkpoint` from the API's checkpoint object; ``client`` is the
        one that read it, for :meth:`delete`."""
        return cls(
            uuid=str(data.get("uuid", "")),
            trial_id=_int(data.get("trial_id")),
            experiment_id=_int(data.get("experiment_id")),
            state=str(data.get("state", "")),
            steps_completed=_int(data.get("steps_completed")),
            allocation_id=str(data.get("allocation_id") or ""),
            report_time=parse_time(data.get("report_time")),
            resources={str(k): _int(v) for k, v in _dict(data.get("resources")).items()},
            metadata=_dict(data.get("metadata")),
            size=_int(data.get("size")),
            storage=_dict(data.get("storage")),
            raw=data,
            _client=client,
        )


@dataclass(frozen=True)
class Slot:
    """One slot of an agent: a GPU, or a group of CPUs."""

    id: str
    type: str
    device: str = ""
    allocation_id: str | None = None
    #: The CPU cores a task on this slot is pinned to.
    cpus: list[int] = field(default_factory=list)
    description: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Slot:
        """Builds a :class:`Slot` from one item of an agent's ``slots``."""
        allocation = data.get("allocation_id")
        device = data.get("device")
        return cls(
            id=str(data.get("id", "")),
            type=str(data.get("type", "")),
            device=str(device) if device is not None else "",
            allocation_id=str(allocation) if allocation else None,
            cpus=[_int(c) for c in data.get("cpus") or []],
            description=str(data.get("description") or ""),
            raw=data,
        )


@dataclass(frozen=True)
class Agent:
    """A host (or local process runner) that runs trials on its slots.

    Attributes:
        enabled: Whether the scheduler may start new work there (admins disable agents).
        connected: Whether the master hears from it; trials on an agent that stays silent
            too long restart elsewhere.
    """

    id: str
    type: str
    enabled: bool
    resource_pool: str = ""
    address: str = ""
    connected: bool = True
    slots: list[Slot] = field(default_factory=list)
    #: What an admin should know about how the agent keeps tasks apart; None when all is well.
    isolation_warning: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Agent:
        """Builds an :class:`Agent` from the API's agent object."""
        slots = data.get("slots") if isinstance(data.get("slots"), list) else []
        return cls(
            id=str(data.get("id", "")),
            type=str(data.get("type", "")),
            enabled=bool(data.get("enabled", True)),
            resource_pool=str(data.get("resource_pool") or ""),
            address=str(data.get("address") or ""),
            connected=bool(data.get("connected", True)),
            slots=[Slot.from_json(s) for s in slots or [] if isinstance(s, dict)],
            isolation_warning=_opt_str(data.get("isolation_warning")),
            raw=data,
        )


@dataclass(frozen=True)
class ResourcePool:
    """A named group of agents that one scheduling policy fills.

    Attributes:
        scheduler: ``priority`` or ``fair_share``.
        preemption: Whether the scheduler preempts lower-priority work for higher.
        preemption_timeout: Seconds a task asked to stop has to checkpoint and exit.
        default: Whether experiments that name no pool go here.
    """

    name: str
    type: str
    agents: int
    slots_total: int
    slots_used: int
    description: str = ""
    scheduler: str = ""
    preemption: bool = False
    fitting_policy: str = ""
    preemption_timeout: float | None = None
    default: bool = False
    #: The kinds of its slots (``cpu``, ``cuda``, both comma-separated); None without agents.
    slot_type: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ResourcePool:
        """Builds a :class:`ResourcePool` from the API's resource pool object."""
        agents = data.get("agents")
        return cls(
            name=str(data.get("name", "")),
            type=str(data.get("type") or ""),
            # Counted here whether the master sends a number or the agents' ids.
            agents=len(agents) if isinstance(agents, list) else _int(agents),
            slots_total=_int(data.get("slots_total")),
            slots_used=_int(data.get("slots_used")),
            description=str(data.get("description") or ""),
            scheduler=str(data.get("scheduler") or ""),
            preemption=bool(data.get("preemption", False)),
            fitting_policy=str(data.get("fitting_policy") or ""),
            preemption_timeout=_opt_float(data.get("preemption_timeout")),
            default=bool(data.get("default", False)),
            slot_type=_opt_str(data.get("slot_type")),
            raw=data,
        )


@dataclass(frozen=True)
class Job:
    """An entry of the job queue: an experiment, whose trials share its priority, weight and
    place in the queue, or a command.

    Attributes:
        job_id: ``exp-<experiment id>``, or ``cmd-<command id>``.
        queue_position: 1-based place in its pool's queue; ``None`` while it asks for nothing.
        priority: 1 to 99, smaller first.
        weight: Its share of a fair-share pool.
        state: ``QUEUED``, ``SCHEDULED`` (all its allocations run) or ``SCHEDULED_PARTIALLY``.
        slots_requested: Slots its allocations ask for, running or waiting.
        slots_allocated: Slots its running allocations hold.
    """

    job_id: str
    state: str
    type: str = "EXPERIMENT"
    name: str = ""
    owner: str = ""
    resource_pool: str = ""
    queue_position: int | None = None
    priority: int | None = None
    weight: float | None = None
    slots_requested: int = 0
    slots_allocated: int = 0
    preemptible: bool = True
    submitted: dt.datetime | None = None
    queued_at: dt.datetime | None = None
    experiment_id: int | None = None
    task_id: int | None = None
    #: How many allocations it has, running or waiting.
    allocations: int = 0
    #: Why its allocations wait where the resource manager says (Slurm's pending reason).
    reason: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        """Builds a :class:`Job` from the API's job object."""
        return cls(
            job_id=str(data.get("job_id", "")),
            state=str(data.get("state", "")),
            type=str(data.get("type") or "EXPERIMENT"),
            name=str(data.get("name") or ""),
            owner=str(data.get("owner") or ""),
            resource_pool=str(data.get("resource_pool") or ""),
            queue_position=_opt_int(data.get("queue_position")),
            priority=_opt_int(data.get("priority")),
            weight=_opt_float(data.get("weight")),
            slots_requested=_int(data.get("slots_requested")),
            slots_allocated=_int(data.get("slots_allocated")),
            preemptible=bool(data.get("preemptible", True)),
            submitted=parse_time(data.get("submitted")),
            queued_at=parse_time(data.get("queued_at")),
            experiment_id=_opt_int(data.get("experiment_id")),
            task_id=_opt_int(data.get("task_id")),
            allocations=_int(data.get("allocations")),
            reason=_opt_str(data.get("reason")),
            raw=data,
        )


@dataclass(frozen=True)
class Task:
    """A command, notebook, shell or TensorBoard on the cluster's slots.

    Attributes:
        type: ``COMMAND``, ``NOTEBOOK``, ``SHELL`` or ``TENSORBOARD``.
        state: ``QUEUED``, ``PULLING``, ``STARTING``, ``RUNNING``, ``TERMINATING`` or
            ``TERMINATED``.
        exit_code: The process's exit status once it has ended; ``None`` when a signal ended
            it or it never started.
        exit_reason: Why it ended, in words.
        ready: A notebook, shell or TensorBoard serves, through ``proxy_path`` of the master.
        url: The path (below the master's URL) that opens a notebook or TensorBoard in a
            browser, with its access token; only its owner and admins get it.
        private_key: A shell's SSH key (OpenSSH format); only its owner and admins get it.
    """

    id: int
    state: str
    type: str = "COMMAND"
    description: str = ""
    owner: str = ""
    entrypoint: list[str] | str | None = None
    resource_pool: str = ""
    priority: int | None = None
    slots: int = 1
    job_id: str = ""
    created_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    exit_code: int | None = None
    exit_reason: str | None = None
    ready: bool = False
    proxy_path: str | None = None
    url: str | None = None
    private_key: str | None = None
    experiment_ids: list[int] = field(default_factory=list)
    #: The validated task config, defaults filled.
    config: dict[str, Any] = field(default_factory=dict, repr=False)
    #: A shell's public key.
    public_key: str | None = None
    #: Where a running hub server's slots are (its owner and admins only).
    placement: dict[str, Any] | None = None
    #: ``host:port`` of a hub server the master runs, once it answers (its owner and admins).
    server_address: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_terminal(self) -> bool:
        """Whether the task has ended (TERMINATED)."""
        return self.state == TaskState.TERMINATED.value

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Task:
        """Builds a :class:`Task` from the API's command, notebook, shell or tensorboard
        object."""
        entrypoint = data.get("entrypoint")
        reason = data.get("exit_reason")
        return cls(
            id=_int(data.get("id")),
            state=str(data.get("state", "")),
            type=str(data.get("type") or "COMMAND"),
            description=str(data.get("description") or ""),
            owner=str(data.get("owner") or ""),
            entrypoint=entrypoint if isinstance(entrypoint, (str, list)) else None,
            resource_pool=str(data.get("resource_pool") or ""),
            priority=_opt_int(data.get("priority")),
            slots=_int(data.get("slots"), 1),
            job_id=str(data.get("job_id") or ""),
            created_at=parse_time(data.get("created_at")),
            ended_at=parse_time(data.get("ended_at")),
            exit_code=_opt_int(data.get("exit_code")),
            exit_reason=str(reason) if reason is not None else None,
            ready=bool(data.get("ready")),
            proxy_path=_opt_str(data.get("proxy_path")),
            url=_opt_str(data.get("url")),
            private_key=_opt_str(data.get("private_key")),
            experiment_ids=[_int(i) for i in data.get("experiment_ids") or []],
            config=_dict(data.get("config")),
            public_key=_opt_str(data.get("public_key")),
            placement=_dict(data.get("placement")) or None,
            server_address=_opt_str(data.get("server_address")),
            raw=data,
        )


#: A command is a task of type ``COMMAND``; the name stays for code written against it.
Command = Task


__all__ = [
    "Agent",
    "AgentUserGroup",
    "Checkpoint",
    "Command",
    "Task",
    "Experiment",
    "Job",
    "Listing",
    "MetricReport",
    "NewUser",
    "ResourcePool",
    "Slot",
    "Trial",
    "User",
    "parse_time",
]
