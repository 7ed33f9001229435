"""The objects the master answers with, field for field as ``service/serialize.py`` and the
managers' views build them. Nullable fields are ``X | None``; fields only some objects have
(a proxied task's, a checkpoint read alone) may be absent and are not required."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from det_hub.service.wire._base import AnswerModel, MetricValue, Number, Time, omittable
from det_hub.states import CheckpointState, ExperimentState, TaskState, TaskType, TrialState

# The states arrive as strings: the enums are checked by value.
ExperimentStateName = Annotated[ExperimentState, Field(strict=False)]
TrialStateName = Annotated[TrialState, Field(strict=False)]
CheckpointStateName = Annotated[CheckpointState, Field(strict=False)]
TaskStateName = Annotated[TaskState, Field(strict=False)]
TaskTypeName = Annotated[TaskType, Field(strict=False)]
#: Where an active trial's process is; WAITING: checkpointed at its ASHA rung.
RunStateName = Literal["QUEUED", "STARTING", "RUNNING", "WAITING"]
Metrics = dict[str, MetricValue]


class Pagination(AnswerModel):
    """Where a page of a list is: ``offset`` and ``limit`` as asked, ``total`` matching."""

    offset: int
    limit: int
    total: int


class Empty(AnswerModel):
    """``{}``: done."""


class Health(AnswerModel):
    """The master is up."""

    status: Literal["ok"]
    version: str


# --- users -----------------------------------------------------------------------------------


class AgentUserGroup(AnswerModel):
    """The Unix account a user's tasks run as; the names may be unknown."""

    agent_uid: int
    agent_gid: int
    agent_user: str | None
    agent_group: str | None


class User(AnswerModel):
    """A user of the master."""

    id: int
    username: str
    admin: bool
    active: bool
    created_at: Time
    agent_user_group: AgentUserGroup | None


class NewUser(AnswerModel):
    """A user just made, with their token, shown this once."""

    user: User
    token: str


# --- experiments and trials ------------------------------------------------------------------


class Experiment(AnswerModel):
    """An experiment, with its state as shown (an active one's QUEUED, STARTING or
    RUNNING)."""

    id: int
    name: str
    description: str
    owner: str
    state: ExperimentStateName
    archived: bool
    progress: float | None
    created_at: Time
    ended_at: Time | None
    config: dict[str, Any] = Field(description="the validated config with defaults filled")
    searcher_metric: str
    smaller_is_better: bool
    best_searcher_metric: Number | None = Field(
        description="the best searcher-metric value any of its trials validated with")
    num_trials: int
    resource_pool: str
    priority: int
    weight: float
    job_id: str
    seed: int
    labels: list[str]
    forked_from: int | None


class ExperimentPage(AnswerModel):
    """A page of experiments, newest first."""

    experiments: list[Experiment]
    pagination: Pagination


class Validation(AnswerModel):
    """A trial's validation metrics at a number of steps."""

    steps_completed: int
    metrics: Metrics


class Trial(AnswerModel):
    """A trial, with its state as shown."""

    id: int
    experiment_id: int
    request_id: str
    state: TrialStateName
    run_state: RunStateName | None
    hparams: dict[str, Any]
    seed: int
    restarts: int
    #: Its process's starts so far (the first, restarts and resumes); metric rows of earlier
    #: runs past the checkpoint a later run started from are rolled back.
    run_id: int
    created_at: Time
    ended_at: Time | None
    steps_completed: int
    progress: float | None
    latest_checkpoint: str | None
    best_validation: Validation | None
    latest_validation: Validation | None
    searcher_metric_value: Number | None


class MetricRow(AnswerModel):
    """One report of a trial's metrics, as every metrics endpoint and the metric stream
    list it."""

    id: int
    trial_id: int
    group: str
    steps_completed: int
    report_time: Time
    metrics: Metrics


class MetricColumnsOfGroup(AnswerModel):
    """One group's rows as columns, ascending by step then id."""

    ids: list[int]
    steps: list[int]
    #: Each metric's values, one per row; null where a row lacks the metric.
    metrics: dict[str, list[MetricValue]]


class TrialMetricColumns(AnswerModel):
    """A trial's metrics as columns, by group."""

    trial_id: int
    groups: dict[str, MetricColumnsOfGroup]


class RolledBackMetricRow(MetricRow):
    """A row a trial reported past the checkpoint a later run of it started from: it no longer
    counts anywhere, and is kept for audit with the run that reported it and the run that
    rolled it back."""

    trial_run: int
    rolled_back_by_run: int
    rolled_back_at: Time


class MetricsStored(AnswerModel):
    """What a batch of metrics stored; ``repeat``: a batch with its key was stored before,
    and nothing was stored now.

    ``preempt``, to the trial's own training code only: whether its allocation must stop now,
    as its preemption signal says once the master has acted on the batch. A validation that
    made the searcher stop the trial (ASHA at a rung) is answered true, so training code
    learns the decision from the report itself."""

    count: int
    repeat: bool
    preempt: bool = omittable()


class TrialLogLine(AnswerModel):
    """One line of a trial's output."""

    id: int
    trial_id: int
    allocation_id: str | None
    timestamp: Time
    rank: int | None
    stdtype: str
    message: str


class TaskLogLine(AnswerModel):
    """One line of a task's output."""

    id: int
    task_id: int
    allocation_id: str | None
    timestamp: Time
    rank: int | None
    stdtype: str
    message: str


class TrialSourceInfo(AnswerModel):
    """A trial's link to the checkpoint, or the model version, it used."""

    trial_id: int
    checkpoint_uuid: str
    model_name: str | None
    model_version: int | None
    created_at: Time


class Operation(AnswerModel):
    """The length to train to, and the shorter lengths where a validation lets the searcher
    decide early."""

    length: int
    validate_at: list[int]


class SearcherOperation(AnswerModel):
    """What the searcher wants of a trial now; ``completed``: nothing more for now."""

    operation: Operation | None
    completed: bool


class BestValidation(AnswerModel):
    """The best searcher-metric value any trial of the experiment reported."""

    best_validation: Number | None


class Alert(AnswerModel):
    """A custom alert, as the CUSTOM webhooks get it."""

    title: str
    description: str
    level: Literal["debug", "info", "warn", "error"]


class TrialStreamState(AnswerModel):
    """A trial in the ``state`` events of the metric stream."""

    id: int
    state: TrialStateName
    shown_state: str = Field(description="the state as the trial's list shows it (a trial "
                             "waiting at an ASHA rung is shown as such)")
    steps_completed: int
    progress: float | None
    hparams: dict[str, Any]
    searcher_metric_value: float | None = Field(
        description="the trial's best value of the searcher metric so far")
    restarts: int
    latest_checkpoint: str | None


class ExperimentStreamState(AnswerModel):
    """``event: state`` of an experiment's metric stream."""

    experiment_id: int
    state: ExperimentStateName
    shown_state: str = Field(description="the state as the experiment list shows it")
    progress: float | None
    trials: list[TrialStreamState]


class StreamRollback(AnswerModel):
    """``event: rolled_back`` of an experiment's metric stream: a new run of the trial trains
    on from ``steps_completed``, and the rows its earlier runs reported past that no longer
    count."""

    trial_id: int
    run_id: int
    steps_completed: int


# --- the searcher ----------------------------------------------------------------------------


class RungResult(AnswerModel):
    """A trial's result at a rung; ``metric`` null for a trial that exited without one."""

    trial_id: int | None
    metric: Number | None
    promoted: bool


class Rung(AnswerModel):
    """One rung of an ASHA bracket."""

    index: int
    length: int
    reported: int
    best_metric: float | None
    promoted: int
    trial_ids: list[int] = Field(description="the trials with a result here, best first")
    results: list[RungResult]
    training: list[int] = Field(description="trials training towards this rung now")


class Bracket(AnswerModel):
    """One bracket of an ASHA search."""

    index: int
    num_rungs: int
    max_trials: int
    max_concurrent_trials: int
    trials_created: int
    trials_invalid: int
    rungs: list[Rung]


class RungTable(AnswerModel):
    """The rungs of ``adaptive_asha`` and ``async_halving``."""

    name: str
    divisor: float
    stop_once: bool
    smaller_is_better: bool
    max_length: int
    brackets: list[Bracket]


class SearcherView(AnswerModel):
    """The search at a glance."""

    name: str
    metric: str
    smaller_is_better: bool
    progress: float | None
    trials_created: int
    shutdown: bool
    waiting_trials: list[int]
    rungs: RungTable | None


class SearchScatter(AnswerModel):
    """One hyperparameter against the searcher metric."""

    name: str = Field(description="the hyperparameter's dotted name")
    log: bool = Field(description="whether its space is log: a log axis")
    x: list[Any] = Field(description="its value per trial (numbers, else text)")
    y: list[float]
    trial_ids: list[int]


class SearchView(AnswerModel):
    """A search at a glance: the trials that have a searcher metric, their hyperparameters
    against it."""

    metric: str
    smaller_is_better: bool
    parallel: dict[str, Any] = Field(
        description="a Plotly parcoords trace: an axis per hyperparameter that varies and one "
        "for the metric; customdata holds each line's trial id")
    scatters: list[SearchScatter]


class ParameterImportance(AnswerModel):
    """One hyperparameter's share of the variance of the searcher metric."""

    name: str = Field(description="the hyperparameter's dotted name")
    importance: float = Field(description="its share, the shares of a search summing to 1")


class HyperparameterImportance(AnswerModel):
    """How much each hyperparameter explains the searcher metric (optuna's fANOVA)."""

    metric: str
    trials: int = Field(description="the trials with a searcher metric that the figures are from")
    importance: list[ParameterImportance] = Field(
        description="largest first; empty unless two such trials differ in their metric and "
        "a hyperparameter varies among them")


# --- checkpoints and the registry ------------------------------------------------------------


class CheckpointTraining(AnswerModel):
    """What a checkpoint was trained from."""

    experiment_config: dict[str, Any]
    searcher_metric: str
    hparams: dict[str, Any]
    trial_seed: int | None
    validation_metrics: Metrics | None
    model_definition: str = Field(description="the API path of the experiment's context")


class Checkpoint(AnswerModel):
    """A checkpoint; ``training`` only where one is read alone."""

    uuid: str
    trial_id: int
    experiment_id: int
    allocation_id: str | None
    state: CheckpointStateName
    steps_completed: int
    report_time: Time
    resources: dict[str, int] = Field(description="file paths and their sizes in bytes")
    metadata: dict[str, Any]
    size: int
    storage: dict[str, Any]
    training: CheckpointTraining = omittable()


class RetentionPolicy(AnswerModel):
    """The checkpoint retention settings applied."""

    save_experiment_best: int
    save_trial_best: int
    save_trial_latest: int


class CheckpointGCResult(AnswerModel):
    """What checkpoint GC deleted, or for a dry run would delete."""

    dry_run: bool
    policy: RetentionPolicy
    uuids: list[str]
    checkpoints: list[Checkpoint]
    registered: list[str] = Field(
        description="checkpoints the policy lets go but a model version keeps")


class Model(AnswerModel):
    """A model of the registry."""

    id: int
    name: str
    description: str
    labels: list[str]
    notes: str
    metadata: dict[str, Any]
    owner: str
    creation_time: Time
    last_updated_time: Time
    archived: bool
    num_versions: int


class ModelPage(AnswerModel):
    """A page of models, by name."""

    models: list[Model]
    pagination: Pagination


class ModelVersion(AnswerModel):
    """A checkpoint registered under a model; ``checkpoint`` null once it is gone."""

    id: int
    model_id: int
    model_name: str
    version: int
    checkpoint_uuid: str
    checkpoint: Checkpoint | None
    name: str
    comment: str
    notes: str
    labels: list[str]
    metadata: dict[str, Any]
    owner: str
    creation_time: Time
    last_updated_time: Time


class ModelVersions(AnswerModel):
    """A model and its versions, newest first."""

    model: Model
    model_versions: list[ModelVersion]


# --- the cluster -----------------------------------------------------------------------------


class Slot(AnswerModel):
    """One slot of an agent: a GPU, or a group of CPUs."""

    id: int
    type: str = Field(description="cpu or cuda")
    device: str
    cpus: list[int]
    description: str
    allocation_id: str | None


class Agent(AnswerModel):
    """A host that runs work on its slots."""

    id: str
    type: str = Field(description="local or docker")
    resource_pool: str
    enabled: bool
    address: str
    connected: bool
    isolation_warning: str | None
    slots: list[Slot]


class ResourcePool(AnswerModel):
    """A resource pool: its agents, slots and scheduling settings."""

    name: str
    description: str
    type: str | None
    agents: int
    slots_total: int
    slots_used: int
    slot_type: str | None
    scheduler: str = Field(description="priority or fair_share")
    preemption: bool
    fitting_policy: str | None
    preemption_timeout: float
    default: bool


class Job(AnswerModel):
    """An entry of the job queue: an experiment or a task."""

    job_id: str
    type: str
    name: str
    owner: str
    resource_pool: str
    queue_position: int | None
    priority: int
    weight: float
    state: Literal["QUEUED", "SCHEDULED", "SCHEDULED_PARTIALLY"]
    slots_requested: int
    slots_allocated: int
    allocations: int
    preemptible: bool
    submitted: Time
    queued_at: Time | None
    experiment_id: int | None
    task_id: int | None
    reason: str | None = Field(
        default=None, description="why its allocations wait where the resource manager says "
        "(a Slurm job pending, with Slurm's reason); null otherwise")


class ClusterAllocation(AnswerModel):
    """An allocation holding or waiting for slots, in the cluster stream: whose job it is, and
    for which trial or task (a slot's ``allocation_id`` names it)."""

    id: str
    job_id: str
    owner: str
    experiment_id: int | None
    trial_id: int | None
    task_id: int | None
    state: Literal["QUEUED", "STARTING", "RUNNING"]
    slots: int


class ClusterState(AnswerModel):
    """``event: snapshot`` of the cluster stream: the agents, resource pools and job queue as
    their own endpoints show them, and the open allocations. Each ``event: cluster`` carries
    the fields that changed since, each whole."""

    agents: list[Agent]
    resource_pools: list[ResourcePool]
    jobs: list[Job]
    allocations: list[ClusterAllocation]


class TaskPlacement(AnswerModel):
    """Where a running hub server's slots are, and what a container on them gets."""

    agent_id: str
    agent_type: str
    address: str
    slot_ids: list[int]
    docker: dict[str, Any] | None
    gpus: list[str]
    cpus: list[int]
    environment: dict[str, str]


class Task(AnswerModel):
    """A command, notebook, shell, TensorBoard or hub server. The proxied ones also have
    ``proxy_path`` and ``ready``; a TensorBoard its ``experiment_ids``; a shell its
    ``public_key``; for its owner and admins a shell's ``private_key``, a notebook's or
    TensorBoard's ``url`` with its token, and a hub server's ``placement`` and, where the
    master runs the server, its ``server_address``."""

    id: int
    type: TaskTypeName
    description: str
    owner: str
    state: TaskStateName
    entrypoint: list[str] | str | None
    resource_pool: str
    priority: int
    slots: int
    job_id: str
    created_at: Time
    ended_at: Time | None
    exit_code: int | None
    exit_reason: str | None
    config: dict[str, Any]
    proxy_path: str = omittable()
    ready: bool = omittable()
    experiment_ids: list[int] = omittable()
    public_key: str | None = omittable()
    private_key: str | None = omittable()
    url: str = omittable()
    placement: TaskPlacement | None = omittable()
    server_address: str = omittable(
        description="a hub server the master runs: the host:port its server answers on, once "
                    "it does (host from the agent, such as the node Slurm gave the job)")


class Preemption(AnswerModel):
    """Whether the allocation should stop."""

    preempt: bool


class TaskReady(AnswerModel):
    """The task's server is reached through the proxy from now on."""

    ready: bool


# --- webhooks --------------------------------------------------------------------------------


class WebhookTrigger(AnswerModel):
    """An event a webhook fires on."""

    id: int
    trigger_type: str
    condition: dict[str, Any]


class Webhook(AnswerModel):
    """A URL the master POSTs events to."""

    id: int
    name: str
    url: str
    webhook_type: str
    mode: str
    created_at: Time
    triggers: list[WebhookTrigger]


class WebhookTest(AnswerModel):
    """Whether a test event was answered 2xx, and if not why."""

    delivered: bool
    error: str | None
