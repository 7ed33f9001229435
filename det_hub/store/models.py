"""The tables of the master's store, as SQLAlchemy 2 declarative models.

Every state column holds the string value of an enum from :mod:`det_hub.states`. Migrations in
``migrations/versions`` are written by hand to match these models; change both together.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from det_hub.defaults import DEFAULT_PRIORITY, DEFAULT_RESOURCE_POOL

from .columns import UTCDateTime, big_id_type, json_type, utcnow


class Base(DeclarativeBase):
    """Declarative base for all store tables."""

    # Constraint names match the hand-written migrations, so later migrations can name them.
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s",
        }
    )
    type_annotation_map = {dt.datetime: UTCDateTime()}

    def __repr__(self) -> str:
        keys = [c.key for c in self.__mapper__.column_attrs][:3]
        inner = ", ".join(f"{k}={self.__dict__.get(k)!r}" for k in keys)
        return f"{type(self).__name__}({inner})"


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    username: Mapped[str] = mapped_column(String(255), unique=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # The Unix account the user's tasks run as (Determined's link-with-agent-user): uid and
    # gid are set together or not at all; the names are for people and may be missing.
    # 64-bit: uids go up to 2**32 - 2, past PostgreSQL's INTEGER.
    agent_uid: Mapped[int | None] = mapped_column(BigInteger, default=None)
    agent_gid: Mapped[int | None] = mapped_column(BigInteger, default=None)
    agent_user: Mapped[str | None] = mapped_column(String(32), default=None)
    agent_group: Mapped[str | None] = mapped_column(String(32), default=None)


class Token(Base):
    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # sha256 hex of the secret; the secret itself is never stored.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[dt.datetime | None] = mapped_column(default=None)


class Experiment(Base):
    __tablename__ = "experiments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    description: Mapped[str] = mapped_column(Text, default="")
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    state: Mapped[str] = mapped_column(String(32), index=True)
    archived: Mapped[bool] = mapped_column(Boolean, default=False)
    progress: Mapped[float | None] = mapped_column(Float, default=None)
    config: Mapped[dict[str, Any]] = mapped_column(json_type())
    original_config: Mapped[str] = mapped_column(Text)
    searcher_metric: Mapped[str] = mapped_column(String(255))
    smaller_is_better: Mapped[bool] = mapped_column(Boolean)
    resource_pool: Mapped[str] = mapped_column(String(255), default=DEFAULT_RESOURCE_POOL)
    priority: Mapped[int] = mapped_column(Integer, default=DEFAULT_PRIORITY)
    #: Share of a fair-share pool, from ``resources.weight``; `det-hub job update` changes it.
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    #: Place in the job queue among jobs of equal priority, smaller first. ``None`` means the
    #: creation time; `det-hub job update --ahead-of` sets it.
    queue_position: Mapped[float | None] = mapped_column(Float, default=None)
    seed: Mapped[int] = mapped_column(BigInteger, default=0)
    #: The search method's state stored whole (up to ``events_through`` of its
    #: ``searcher_events``), which grows with the search's trials: deferred, so that loading
    #: an experiment does not read it; :meth:`Store.load_searcher` does.
    searcher_state: Mapped[dict[str, Any] | None] = mapped_column(
        json_type(), default=None, deferred=True)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    labels: Mapped[list[str]] = mapped_column(json_type(), default=list)
    notes: Mapped[str] = mapped_column(Text, default="")
    #: The experiment this one was forked from (`det-hub experiment create --fork`).
    parent_id: Mapped[int | None] = mapped_column(
        ForeignKey("experiments.id", ondelete="SET NULL"), default=None
    )


class ExperimentContext(Base):
    """The uploaded context archive, kept apart so that listing experiments never reads blobs."""

    __tablename__ = "experiment_contexts"

    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    archive: Mapped[bytes] = mapped_column(LargeBinary)


class Trial(Base):
    __tablename__ = "trials"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), index=True
    )
    request_id: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(32))
    run_state: Mapped[str | None] = mapped_column(String(32), default=None)
    hparams: Mapped[dict[str, Any]] = mapped_column(json_type())
    seed: Mapped[int] = mapped_column(BigInteger)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    steps_completed: Mapped[int] = mapped_column(BigInteger, default=0)
    progress: Mapped[float | None] = mapped_column(Float, default=None)
    latest_checkpoint: Mapped[str | None] = mapped_column(String(64), default=None)
    best_validation: Mapped[dict[str, Any] | None] = mapped_column(json_type(), default=None)
    latest_validation: Mapped[dict[str, Any] | None] = mapped_column(json_type(), default=None)
    searcher_metric_value: Mapped[float | None] = mapped_column(Float, default=None)
    runner_state: Mapped[str | None] = mapped_column(String(255), default=None)
    #: The trial's runs so far: each start of its process (the first, and every restart or
    #: resume) is the next run. Metric rows carry the run that reported them.
    run_id: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: The step below which the coarse levels of the trial's block summaries hold its rows:
    #: rows from this step on are in the finest level only until the store rolls them up (see
    #: :mod:`det_hub.store.summaries`). A multiple of :data:`.summaries.ROLLUP_SPAN`.
    summaries_below: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class Task(Base):
    """A task that is not an experiment's trial: a command, notebook, shell or TensorBoard."""

    __tablename__ = "tasks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    type: Mapped[str] = mapped_column(String(32))
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    state: Mapped[str] = mapped_column(String(32), index=True)
    description: Mapped[str] = mapped_column(Text, default="")
    config: Mapped[dict[str, Any]] = mapped_column(json_type())
    resource_pool: Mapped[str] = mapped_column(String(255), default=DEFAULT_RESOURCE_POOL)
    priority: Mapped[int] = mapped_column(Integer, default=DEFAULT_PRIORITY)
    #: Place in the job queue, as ``experiments.queue_position``; ``None`` means creation time.
    queue_position: Mapped[float | None] = mapped_column(Float, default=None)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    exit_code: Mapped[int | None] = mapped_column(Integer, default=None)
    exit_reason: Mapped[str | None] = mapped_column(Text, default=None)
    #: What the task's type needs beyond its config (a TensorBoard's experiment ids, a shell's
    #: public key).
    details: Mapped[dict[str, Any] | None] = mapped_column(json_type(), default=None)
    #: Only the owner sees it: a notebook's or TensorBoard's access token, a shell's private key.
    secret: Mapped[str | None] = mapped_column(Text, default=None)
    #: ``host:port`` of what a proxied task serves, once it has said it is ready.
    proxy_address: Mapped[str | None] = mapped_column(String(255), default=None)


class TaskContext(Base):
    """A task's context archive, kept apart for the reason experiment contexts are."""

    __tablename__ = "task_contexts"

    task_id: Mapped[int] = mapped_column(
        ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True
    )
    archive: Mapped[bytes] = mapped_column(LargeBinary)


class Allocation(Base):
    """One attempt to run a trial (id ``"<trial id>.<attempt>"``, e.g. ``"7.0"``) or a task
    (``"task-<task id>.<attempt>"``); exactly one of ``trial_id`` and ``task_id`` is set."""

    __tablename__ = "allocations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    trial_id: Mapped[int | None] = mapped_column(
        ForeignKey("trials.id", ondelete="CASCADE"), index=True, default=None
    )
    task_id: Mapped[int | None] = mapped_column(
        ForeignKey("tasks.id", ondelete="CASCADE"), index=True, default=None
    )
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    state: Mapped[str] = mapped_column(String(32))
    slots: Mapped[int] = mapped_column(Integer)
    agent_id: Mapped[str | None] = mapped_column(String(255), default=None)
    slot_ids: Mapped[list[Any] | None] = mapped_column(json_type(), default=None)
    pid: Mapped[int | None] = mapped_column(Integer, default=None)
    workdir: Mapped[str | None] = mapped_column(Text, default=None)
    log_offset: Mapped[int] = mapped_column(BigInteger, default=0)
    preempt: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(default=None)
    ended_at: Mapped[dt.datetime | None] = mapped_column(default=None, index=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, default=None)
    exit_reason: Mapped[str | None] = mapped_column(Text, default=None)
    #: Every agent the allocation runs on: ``[{"agent_id", "slot_ids", "log_offset", "pid",
    #: "where"}]``, the chief first. ``agent_id``/``slot_ids``/``pid`` above repeat the chief's.
    placements: Mapped[list[Any] | None] = mapped_column(json_type(), default=None)


class AgentSetting(Base):
    """What an admin set on an agent, kept across master restarts."""

    __tablename__ = "agent_settings"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class MetricChunk(Base):
    """A batch of a trial's metric rows of one group, packed into one row
    (:mod:`det_hub.store.packing`): the database keeps one row per batch, not per point."""

    __tablename__ = "metric_chunks"
    __table_args__ = (
        # Every read of a trial's metrics: its chunks, of one group, reaching past a step.
        Index("ix_metric_chunks_trial_group_last", "trial_id", "group_name", "last_step"),
        # Row ids are made of chunk ids, and a row's id is never given again, even once rolled
        # back (see RolledBackMetric): a live stream resumes after the last id it sent.
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(big_id_type(), primary_key=True, autoincrement=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    group: Mapped[str] = mapped_column("group_name", String(64))
    #: The trial's run that reported the rows (see ``Trial.run_id``).
    trial_run: Mapped[int] = mapped_column(Integer)
    count: Mapped[int] = mapped_column(Integer)
    #: The rows' least and greatest ``steps_completed``.
    first_step: Mapped[int] = mapped_column(BigInteger)
    last_step: Mapped[int] = mapped_column(BigInteger)
    #: The rows' least and greatest id when the pack lists its rows' ids; None when they are
    #: the chunk's own (``id << ROW_BITS`` onwards).
    first_id: Mapped[int | None] = mapped_column(BigInteger)
    last_id: Mapped[int | None] = mapped_column(BigInteger)
    #: When the batch arrived: the report time of the rows that gave none.
    report_time: Mapped[dt.datetime] = mapped_column(default=utcnow)
    #: The packed rows (``Pack.encode``).
    payload: Mapped[bytes] = mapped_column(LargeBinary)


class RolledBackMetric(Base):
    """A metric row a trial reported past the checkpoint a later run of it restarted from.

    That run trains those steps again, so the row no longer counts: it is moved here, out of
    every query, chart, stream, searcher decision and best-metric figure, and kept for audit.
    """

    __tablename__ = "rolled_back_metrics"

    #: The row's id in ``metrics``.
    id: Mapped[int] = mapped_column(big_id_type(), primary_key=True, autoincrement=False)
    trial_id: Mapped[int] = mapped_column(
        ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    group: Mapped[str] = mapped_column("group_name", String(64))
    steps_completed: Mapped[int] = mapped_column(BigInteger)
    report_time: Mapped[dt.datetime] = mapped_column()
    metrics: Mapped[dict[str, Any]] = mapped_column(json_type())
    trial_run: Mapped[int] = mapped_column(Integer)
    #: The run whose start rolled the row back, and when.
    rolled_back_by_run: Mapped[int] = mapped_column(Integer)
    rolled_back_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class SearcherEvent(Base):
    """What an experiment's search method was told (a trial created, a validation, a trial
    closed, ...), after its state was last stored whole in ``experiments.searcher_state``.

    The method's state is that document with these events replayed in ``seq`` order. The
    master appends a few small rows per event instead of rewriting the whole state, and now
    and then stores the whole state again and drops the events it holds.
    """

    __tablename__ = "searcher_events"

    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    event: Mapped[dict[str, Any]] = mapped_column(json_type())


class MetricBatch(Base):
    """A metric batch already stored, by the key its sender gave it: a repeat of the batch (a
    retry whose first answer was lost) is recognised by this row and stored nothing.

    The row is written in the transaction that stores the batch, under a primary key, so two
    copies of one batch can never both be stored, even when they arrive at the same time.
    """

    __tablename__ = "metric_batches"

    trial_id: Mapped[int] = mapped_column(
        ForeignKey("trials.id", ondelete="CASCADE"), primary_key=True)
    #: Unique within the trial: the sender's run of the trial and the batch's number in it.
    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    #: How many rows the batch stored: the answer a repeat gets.
    rows: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class MetricSummary(Base):
    """One block of one metric's curve, summarised for drawing (see :mod:`det_hub.store.summaries`).

    A block holds the numeric values of one metric in one group of a trial whose
    ``steps_completed >> level`` equals ``block``: their count and, as ``(step, id, value)``,
    the first, the last, the lowest and the highest row. They are kept current as rows arrive,
    so that a chart of a million rows reads a few thousand blocks instead of every row.
    """

    __tablename__ = "metric_summaries"

    trial_id: Mapped[int] = mapped_column(
        ForeignKey("trials.id", ondelete="CASCADE"), primary_key=True
    )
    group: Mapped[str] = mapped_column("group_name", String(64), primary_key=True)
    name: Mapped[str] = mapped_column(Text, primary_key=True)
    level: Mapped[int] = mapped_column(Integer, primary_key=True)
    block: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)
    first_step: Mapped[int] = mapped_column(BigInteger)
    first_id: Mapped[int] = mapped_column(BigInteger)
    first_value: Mapped[float] = mapped_column(Float(53))
    last_step: Mapped[int] = mapped_column(BigInteger)
    last_id: Mapped[int] = mapped_column(BigInteger)
    last_value: Mapped[float] = mapped_column(Float(53))
    min_step: Mapped[int] = mapped_column(BigInteger)
    min_id: Mapped[int] = mapped_column(BigInteger)
    min_value: Mapped[float] = mapped_column(Float(53))
    max_step: Mapped[int] = mapped_column(BigInteger)
    max_id: Mapped[int] = mapped_column(BigInteger)
    max_value: Mapped[float] = mapped_column(Float(53))


class Checkpoint(Base):
    __tablename__ = "checkpoints"

    uuid: Mapped[str] = mapped_column(String(64), primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"), index=True)
    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), index=True
    )
    allocation_id: Mapped[str | None] = mapped_column(String(64), default=None)
    state: Mapped[str] = mapped_column(String(32))
    steps_completed: Mapped[int] = mapped_column(BigInteger)
    report_time: Mapped[dt.datetime] = mapped_column(default=utcnow)
    resources: Mapped[dict[str, int]] = mapped_column(json_type())
    # ``metadata`` is reserved on declarative classes, hence the attribute name.
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", json_type())
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    storage: Mapped[dict[str, Any]] = mapped_column(json_type())


class TaskLog(Base):
    """One line of a trial's or a task's output; exactly one of the two ids is set."""

    __tablename__ = "task_logs"
    __table_args__ = (
        Index("ix_task_logs_trial_id_id", "trial_id", "id"),
        Index("ix_task_logs_task_id_id", "task_id", "id"),
    )

    id: Mapped[int] = mapped_column(big_id_type(), primary_key=True, autoincrement=True)
    trial_id: Mapped[int | None] = mapped_column(
        ForeignKey("trials.id", ondelete="CASCADE"), default=None
    )
    task_id: Mapped[int | None] = mapped_column(
        ForeignKey("tasks.id", ondelete="CASCADE"), default=None
    )
    allocation_id: Mapped[str | None] = mapped_column(String(64), default=None)
    timestamp: Mapped[dt.datetime] = mapped_column(default=utcnow)
    rank: Mapped[int | None] = mapped_column(Integer, default=None)
    stdtype: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text)


class Model(Base):
    """A named entry of the model registry; its versions point at checkpoints."""

    __tablename__ = "models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    description: Mapped[str] = mapped_column(Text, default="")
    labels: Mapped[list[str]] = mapped_column(json_type(), default=list)
    notes: Mapped[str] = mapped_column(Text, default="")
    # ``metadata`` is reserved on declarative classes, hence the attribute name.
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", json_type(), default=dict)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    creation_time: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_updated_time: Mapped[dt.datetime] = mapped_column(default=utcnow)
    archived: Mapped[bool] = mapped_column(Boolean, default=False)


class ModelVersion(Base):
    """One checkpoint registered under a model, numbered 1, 2, 3, ... within it.

    A checkpoint named here is never deleted, by GC or by hand, while the version exists.
    """

    __tablename__ = "model_versions"
    __table_args__ = (UniqueConstraint("model_id", "version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    checkpoint_uuid: Mapped[str] = mapped_column(ForeignKey("checkpoints.uuid"), index=True)
    name: Mapped[str] = mapped_column(String(255), default="")
    comment: Mapped[str] = mapped_column(Text, default="")
    notes: Mapped[str] = mapped_column(Text, default="")
    labels: Mapped[list[str]] = mapped_column(json_type(), default=list)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", json_type(), default=dict)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    creation_time: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_updated_time: Mapped[dt.datetime] = mapped_column(default=utcnow)


class TrialSourceInfo(Base):
    """A trial's link to a checkpoint it used (Determined's trial source info of type
    INFERENCE): what a batch-inference trial evaluated, so that the metrics it reports are
    found from the checkpoint, or from the model version, they were computed with.

    ``model_version_id`` is set when the trial named a model version (whose checkpoint is
    ``checkpoint_uuid``); a version is referred to by its row, not by model name and number,
    because a model may be renamed and a deleted version's number may be taken again. Such a
    link goes with its version; the plain link to the checkpoint, added with it, stays.
    """

    __tablename__ = "trial_source_infos"
    # One row per link. The unique constraint holds only where model_version_id is set
    # (NULLs are distinct on both databases); the store keeps plain links unique itself.
    __table_args__ = (UniqueConstraint("trial_id", "checkpoint_uuid", "model_version_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id", ondelete="CASCADE"))
    checkpoint_uuid: Mapped[str] = mapped_column(
        ForeignKey("checkpoints.uuid", ondelete="CASCADE"), index=True)
    model_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("model_versions.id", ondelete="CASCADE"), index=True, default=None)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class Webhook(Base):
    """A URL the master POSTs to when one of its triggers fires (Determined's webhooks)."""

    __tablename__ = "webhooks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), default="")
    url: Mapped[str] = mapped_column(Text)
    #: ``DEFAULT`` (Determined's JSON event) or ``SLACK`` (a Slack message).
    webhook_type: Mapped[str] = mapped_column(String(16))
    #: ``WORKSPACE``: every experiment's events; ``SPECIFIC``: those of experiments whose
    #: config names it.
    mode: Mapped[str] = mapped_column(String(16), default="WORKSPACE")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # Loaded with the webhook, so that a detached row still has them.
    triggers: Mapped[list[WebhookTrigger]] = relationship(
        lazy="selectin", cascade="all, delete-orphan", passive_deletes=True,
        order_by="WebhookTrigger.id")


class WebhookTrigger(Base):
    """One event a webhook fires on: a trigger type and the condition it must meet."""

    __tablename__ = "webhook_triggers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    webhook_id: Mapped[int] = mapped_column(
        ForeignKey("webhooks.id", ondelete="CASCADE"), index=True)
    #: ``EXPERIMENT_STATE_CHANGE`` or ``CUSTOM``.
    trigger_type: Mapped[str] = mapped_column(String(32))
    #: ``{"state": "COMPLETED"}`` for a state change; ``{}`` or ``{"level": ...}`` for CUSTOM.
    condition: Mapped[dict[str, Any]] = mapped_column(json_type(), default=dict)


class WebhookDelivery(Base):
    """An event on its way to a webhook: written before the first attempt and removed once
    the receiver took it or the retries gave up, so that a delivery under way when the master
    stopped is made after it starts again."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    webhook_id: Mapped[int] = mapped_column(
        ForeignKey("webhooks.id", ondelete="CASCADE"), index=True)
    event_type: Mapped[str] = mapped_column(String(32))
    #: The payload as sent (its ``event_id`` lets receivers drop a repeat).
    body: Mapped[dict[str, Any]] = mapped_column(json_type())
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


LogRow = TaskLog

__all__ = [
    "AgentSetting",
    "Allocation",
    "Base",
    "Checkpoint",
    "Experiment",
    "ExperimentContext",
    "LogRow",
    "MetricChunk",
    "MetricBatch",
    "RolledBackMetric",
    "SearcherEvent",
    "Model",
    "ModelVersion",
    "Task",
    "TaskContext",
    "TaskLog",
    "Token",
    "Trial",
    "TrialSourceInfo",
    "User",
    "Webhook",
    "WebhookDelivery",
    "WebhookTrigger",
]
