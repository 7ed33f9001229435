"""The request bodies of the endpoints that take JSON, one model each.

A handler reads its body with ``self.parsed_body()``: a bad body is a 400 naming the first
bad field, with one detail per problem. The registry's and the webhooks' bodies are checked
by their managers, which name every bad field with rules of their own (model names, URLs,
trigger conditions); their models here describe them for ``openapi.json``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, SkipValidation, WithJsonSchema, model_validator, with_config
from typing_extensions import NotRequired, Self, TypedDict

from det_hub.config import fail
from det_hub.service.webhooks import MAX_DESCRIPTION, MAX_NAME, MAX_TITLE, MAX_URL
from det_hub.service.wire._base import (
    RANGE,
    MetricValue,
    Number,
    RequestModel,
    Says,
    Time,
    omittable,
)
from det_hub.store import MAX_BIG_INTEGER, MAX_INTEGER

TRUE_OR_FALSE = Says("must be true or false")
BASE64 = Says("must be base64 text or null")
UUID_PATTERN = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
#: The longest key a metric batch may carry: the store's column.
MAX_BATCH_KEY = 128

# --- experiments -----------------------------------------------------------------------------


class ExperimentCreate(RequestModel):
    """An experiment to create (or fork) from a config and a context archive."""

    config: Annotated[str, Says("must be the experiment config's YAML text")] = Field(
        description="the experiment config as YAML text")
    context: Annotated[str | None, BASE64] = Field(None, description="base64 of a .tar.gz")
    activate: Annotated[bool, TRUE_OR_FALSE] = True
    parent_id: Annotated[int | None, Field(ge=0, le=MAX_INTEGER),
                         Says("must be an experiment id")] = Field(
        None, description="fork this experiment: recorded as forked_from, and its context is "
                          "used when none is sent")


class ExperimentContinue(RequestModel):
    """Settings to change before a finished experiment trains on."""

    config: Annotated[str | None, Says("must be YAML text")] = Field(
        None, description="YAML of the settings to change, merged into the experiment's "
                          "config (a partial config, such as 'searcher: {max_length: "
                          "{batches: 2000}}')")


_COUNT = Says("must be an integer >= 0")


class CheckpointGCPolicy(RequestModel):
    """The experiment's checkpoint retention settings to set (those left out keep their
    value), and whether only to answer what GC would delete."""

    model_config = ConfigDict(extra="forbid")
    refusal: ClassVar[str | None] = "invalid checkpoint GC policy"
    unknown_field: ClassVar[str | None] = (
        "unknown field; one of dry_run, save_experiment_best, save_trial_best, "
        "save_trial_latest")

    save_experiment_best: Annotated[int, Field(ge=0, le=MAX_INTEGER), _COUNT] = omittable()
    save_trial_best: Annotated[int, Field(ge=0, le=MAX_INTEGER), _COUNT] = omittable()
    save_trial_latest: Annotated[int, Field(ge=0, le=MAX_INTEGER), _COUNT] = omittable()
    dry_run: Annotated[bool, TRUE_OR_FALSE] = Field(
        False, description="only answer what would be deleted; change nothing")


# --- trials ----------------------------------------------------------------------------------


@with_config(ConfigDict(strict=True))
class ReportedMetrics(TypedDict):
    """One row of a metric batch. A dict, not a model: a batch holds up to hundreds of rows,
    and their values are not checked one by one (any JSON is a metric)."""

    steps_completed: Annotated[int, Field(ge=0, le=MAX_BIG_INTEGER)]
    metrics: dict[str, SkipValidation[MetricValue]]
    report_time: NotRequired[Time | None]


class MetricBatch(RequestModel):
    """A batch of a trial's metric reports of one group (training code), as rows."""

    group: Annotated[str, Field(min_length=1, max_length=64),
                     Says("must be a name such as 'training' or 'validation'")] = Field(
        description="training, validation or another group name")
    metrics: list[ReportedMetrics]
    key: Annotated[str | None, Field(pattern=f"^[A-Za-z0-9:._-]{{1,{MAX_BATCH_KEY}}}$"),
                   Says(f"must be 1 to {MAX_BATCH_KEY} letters, digits or ':._-'")] = Field(
        None, description="unique within the trial: a batch sent again with the same key is "
                          "stored once")


#: The latest report time a batch of columns may give: the year 9999.
MAX_EPOCH_SECONDS = 253_402_300_799

#: A step of a batch of columns.
Step = Annotated[int, Field(ge=0, le=MAX_BIG_INTEGER)]


class MetricColumns(MetricBatch):
    """A batch of a trial's metric reports of one group, as columns: each row's step, and each
    metric's values, one per step. What the Core API sends: smaller than rows, and stored as
    it comes. Every row has every metric; rows with different metrics are sent as rows."""

    metrics: dict[str, list[SkipValidation[MetricValue]]] = Field(  # type: ignore[assignment]
        description="each metric's values, one per step")
    steps: Annotated[list[Step], Says("must be a list of whole numbers >= 0, one per row")] = \
        Field(description="each row's steps_completed")
    report_times: Annotated[list[Annotated[float, Field(ge=0, le=MAX_EPOCH_SECONDS)]] | None,
                            Says("must be a list of times in seconds since 1970, one per row")
                            ] = Field(None, description="each row's report time, in seconds "
                                                        "since 1970 (UTC); by default when it "
                                                        "arrives")

    @model_validator(mode="after")
    def _one_value_per_step(self) -> Self:
        if self.report_times is not None and len(self.report_times) != len(self.steps):
            fail(f"report_times: {len(self.report_times)} times for {len(self.steps)} steps; "
                 "give one time per step")
        for name, values in self.metrics.items():
            if len(values) != len(self.steps):
                fail(f"metrics.{name}: {len(values)} values for {len(self.steps)} steps; "
                     "give one value per step")
        return self


class TrialSourceLink(RequestModel):
    """The checkpoint a trial used, or a model version and its checkpoint."""

    model_config = ConfigDict(extra="forbid")
    unknown_field: ClassVar[str | None] = (
        "unknown field; the fields are checkpoint_uuid, model_name, model_version")

    checkpoint_uuid: Annotated[str, Field(pattern=UUID_PATTERN.replace("a-f", "a-fA-F")),
                               Says("must be the UUID string of a checkpoint")] = Field(
        description="the checkpoint the trial used")
    model_name: Annotated[str | None, Field(min_length=1),
                          Says("must be the name of a model")] = Field(
        None, description="with model_version: the model version it used")
    model_version: Annotated[int | None, Field(ge=1, le=MAX_INTEGER),
                             Says("must be a version number >= 1")] = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> Self:
        if (self.model_name is None) != (self.model_version is None):
            fail("model_name and model_version: give both to name a model version, or "
                 "neither to name only a checkpoint")
        return self


class TrialProgress(RequestModel):
    """How far the trial is (training code)."""

    progress: Annotated[float, Field(ge=0, le=1), Says("must be a number between 0 and 1")]


class TrialEarlyExit(RequestModel):
    """Why the trial is about to exit early (training code)."""

    reason: Annotated[Literal["ERRORED", "INVALID_HP", "USER_REQUESTED_STOP"],
                      Says("must be one of ERRORED, INVALID_HP, USER_REQUESTED_STOP")]


class CompletedOperation(RequestModel):
    """The searcher's operation is done, with the searcher metric."""

    length: Annotated[int, Field(ge=0, le=MAX_BIG_INTEGER),
                      Says(f"must be an integer from 0 to {MAX_BIG_INTEGER}", RANGE),
                      Says("must be an integer >= 0")]
    searcher_metric: Annotated[Number, Says('must be a number, "NaN", "Infinity" or '
                                            '"-Infinity"')]


class CheckpointReport(RequestModel):
    """A checkpoint the training code has written."""

    uuid: Annotated[str, Field(pattern=UUID_PATTERN), Says("must be a lower-case UUID string")]
    trial_id: Annotated[int, Field(ge=0, le=MAX_INTEGER)]
    steps_completed: Annotated[int, Field(ge=0, le=MAX_BIG_INTEGER)] = omittable(
        description="default: metadata's steps_completed, else 0")
    resources: Annotated[dict[str, Annotated[int, Field(ge=0, le=MAX_BIG_INTEGER)]] | None,
                         Says("must map relative file paths to sizes in bytes")] = None
    metadata: Annotated[dict[str, Any] | None, Says("must be an object")] = None
    state: Annotated[Literal["ACTIVE", "COMPLETED"], Says("must be ACTIVE or COMPLETED")] = (
        "COMPLETED")


class CustomAlert(RequestModel):
    """A custom alert for the CUSTOM webhooks (training code, the owner or an admin); checked
    by the webhooks."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=MAX_TITLE)
    description: str = Field("", max_length=MAX_DESCRIPTION)
    level: Literal["debug", "info", "warn", "error"] = "info"


# --- the registry (checked by the registry) --------------------------------------------------

_NAME = Field(description="1 to 255 characters, without '/' or control characters, and not "
                          "starting or ending with a space")
_LABELS = Field(description="duplicates are dropped, order kept")


class ModelCreate(RequestModel):
    """A model to create, without versions."""

    model_config = ConfigDict(extra="forbid")

    name: str = _NAME
    description: str = omittable()
    labels: list[str] = omittable()
    notes: str = omittable()
    metadata: dict[str, Any] = omittable()


class ModelChanges(RequestModel):
    """What to change of a model; ``metadata`` replaces it, ``add_metadata`` sets keys and
    ``remove_metadata`` takes keys out."""

    model_config = ConfigDict(extra="forbid")

    name: str = omittable(description=_NAME.description)
    description: str = omittable()
    labels: list[str] = omittable()
    notes: str = omittable()
    metadata: dict[str, Any] = omittable()
    add_metadata: dict[str, Any] = omittable(description="keys to set in the metadata")
    remove_metadata: list[str] = omittable(description="keys to take out of the metadata")


class VersionCreate(RequestModel):
    """A COMPLETED checkpoint to register as the model's next version."""

    model_config = ConfigDict(extra="forbid")

    checkpoint_uuid: str = Field(pattern=UUID_PATTERN)
    name: str = omittable(max_length=255)
    comment: str = omittable()
    notes: str = omittable()
    labels: list[str] = omittable()
    metadata: dict[str, Any] = omittable()


class VersionChanges(RequestModel):
    """What to change of a model version, as for a model."""

    model_config = ConfigDict(extra="forbid")

    name: str = omittable(max_length=255)
    comment: str = omittable()
    notes: str = omittable()
    labels: list[str] = omittable()
    metadata: dict[str, Any] = omittable()
    add_metadata: dict[str, Any] = omittable(description="keys to set in the metadata")
    remove_metadata: list[str] = omittable(description="keys to take out of the metadata")


# --- the cluster and tasks -------------------------------------------------------------------


class AgentDisable(RequestModel):
    """How to stop an agent from taking new work."""

    drain: Annotated[bool, TRUE_OR_FALSE] = Field(
        True, description="let what runs there finish there (true), or ask the trials to "
                          "checkpoint and move to another agent (false)")


class JobChanges(RequestModel):
    """What to change of a job: its priority, its weight, or its place in the queue."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})
    unknown_field: ClassVar[str | None] = "unknown field; give priority, weight or ahead_of"

    priority: Annotated[int | None, Field(ge=1, le=99),
                        Says("must be between 1 and 99", RANGE)] = Field(
        None, description="smaller runs first")
    weight: Annotated[float | None, Field(gt=0, allow_inf_nan=False),
                      Says("must be a number greater than 0")] = Field(
        None, description="share of a fair-share pool")
    ahead_of: Annotated[str | None, Field(pattern=r"\S"),
                        Says("must be a job id such as 'exp-3'")] = Field(
        None, description="a job id of the same pool: move this job right before it, taking "
                          "its priority")

    @model_validator(mode="after")
    def _one_change(self) -> Self:
        if self.priority is None and self.weight is None and self.ahead_of is None:
            fail("nothing to change: give priority, weight or ahead_of")
        if self.priority is not None and self.ahead_of is not None:
            fail("cannot be given with ahead_of, which gives the job the priority of the job "
                 "it moves ahead of", "priority")
        return self


class TaskCreate(RequestModel):
    """A task to start: a command, notebook, shell or TensorBoard."""

    config: Annotated[str, Says("must be the task config's YAML text")] = omittable(
        description="the task config as YAML text: resources, environment, bind_mounts, "
                    "description, idle_timeout; a command's also entrypoint (required for "
                    "commands; a notebook's or shell's may be left out)")
    context: Annotated[str | None, BASE64] = Field(None, description="base64 of a .tar.gz")
    experiment_ids: Annotated[list[Annotated[int, Field(ge=0, le=MAX_INTEGER)]] | None,
                              Says("must be a list of experiment ids")] = (
        Field(None, description="a TensorBoard's experiments (tensorboards only)"))
    command: Annotated[list[Annotated[str, Field(min_length=1, pattern=r"^[^\x00]*$")]] | None,
                       Field(min_length=1),
                       Says("must be a non-empty list of strings")] = Field(
        None, description="hub servers only: the single-user server's command, which the "
                          "master runs in the resource pool (a Slurm job there) instead of only "
                          "holding slots for the spawner")
    environment: Annotated[dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")],
                                Annotated[str, Field(pattern=r"^[^\x00]*$")]] | None,
                           Says("must be an object of NAME: text")] = Field(
        None, description="hub servers with a command only: the environment the hub gives the "
                          "server (its API token among them); never shown by the API, handed "
                          "to the server's process alone")


class TaskPort(RequestModel):
    """The port a proxied task's server answers on (its own allocation token)."""

    port: Annotated[int, Field(ge=1, le=65535), Says("must be a TCP port number (1-65535)")]


# --- users -----------------------------------------------------------------------------------


class UserCreate(RequestModel):
    """A user to create (admins)."""

    username: str
    admin: Annotated[bool, TRUE_OR_FALSE] = False


_ID = WithJsonSchema({"type": "integer", "minimum": 1, "maximum": 4294967294})
_UNIX_NAME = WithJsonSchema({"anyOf": [{"type": "string", "maxLength": 32}, {"type": "null"}]})


class AgentUserGroupLink(RequestModel):
    """The Unix account a user's tasks run as. The values are checked by the master
    (``unix_accounts.link_problems``), which names every bad one; uid and gid are integers
    from 1 to 4294967294 (root is refused), names Unix names of at most 32 characters."""

    model_config = ConfigDict(extra="forbid")
    unknown_field: ClassVar[str | None] = (
        "unknown field; one of agent_uid, agent_gid, agent_user, agent_group")

    agent_uid: Annotated[Any, _ID]
    agent_gid: Annotated[Any, _ID]
    agent_user: Annotated[Any, _UNIX_NAME] = None
    agent_group: Annotated[Any, _UNIX_NAME] = None


class UserChanges(RequestModel):
    """A user's link to a Unix account: an object links, null unlinks."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"required": ["agent_user_group"]})
    unknown_field: ClassVar[str | None] = (
        "unknown field; agent_user_group is the one that can be changed")

    agent_user_group: Annotated[AgentUserGroupLink | None,
                                Says("must be an object or null", frozenset({"model_type"}))] = (
        omittable(description="the Unix account the user's tasks run as; null unlinks"))

    @model_validator(mode="after")
    def _sent(self) -> Self:
        if "agent_user_group" not in self.model_fields_set:
            fail('nothing to change: send {"agent_user_group": {...} or null}')
        return self


# --- webhooks (checked by the webhooks) ------------------------------------------------------


class WebhookTriggerSpec(RequestModel):
    """An event to fire on: ``EXPERIMENT_STATE_CHANGE`` with ``{"state": "COMPLETED"}`` (any
    experiment state), or ``CUSTOM`` with ``{}`` or ``{"level": "error"}``."""

    model_config = ConfigDict(extra="forbid")

    trigger_type: Literal["EXPERIMENT_STATE_CHANGE", "CUSTOM"]
    condition: dict[str, Any] = omittable()


class WebhookCreate(RequestModel):
    """A webhook to register (admins)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=MAX_URL, json_schema_extra={"format": "uri"},
                     description="http:// or https://")
    webhook_type: Literal["DEFAULT", "SLACK"] = "DEFAULT"
    name: str = Field("", max_length=MAX_NAME)
    mode: Literal["WORKSPACE", "SPECIFIC"] = Field(
        "WORKSPACE", description="WORKSPACE: every experiment's events; SPECIFIC: only those "
                                 "of experiments whose config names it (integrations.webhooks)")
    triggers: list[WebhookTriggerSpec] = Field(min_length=1)
