"""The master's database: SQLAlchemy 2 models, Alembic migrations and an async query API.

SQLite (``sqlite:///path.db``) is the embedded default and PostgreSQL
(``postgresql://user@host/db``, psycopg 3) the production store; both run the same code.

Layout:

- :mod:`.store`: the :class:`Store` class: opening (and migrating) and closing, sessions,
  the transaction helpers, listeners. Its queries are methods of mixins, one per resource:
- :mod:`.users`: users and tokens (:func:`hash_token`);
- :mod:`.experiments`: experiments and their context archives;
- :mod:`.trials`: trials, and experiments' :class:`TrialSummary`;
- :mod:`.metrics`: the metric rows trials report, and :mod:`.metric_writes`, storing them;
- :mod:`.metric_summaries`: the metrics' block summaries and downsampled reads (the pure
  parts are :mod:`.summaries` and :mod:`det_hub.lttb`);
- :mod:`.checkpoints`: checkpoints;
- :mod:`.logs`: trial and task log lines;
- :mod:`.tasks`: tasks, their context archives, and allocations;
- :mod:`.cluster`: agent settings and slot-hour usage;
- :mod:`.registry`: the model registry;
- :mod:`.webhooks`: webhooks, their triggers and pending deliveries;
- :mod:`.sources`: trial source infos (which trials used which checkpoint).

:mod:`._common` holds what they share. :mod:`.models` declares the tables, :mod:`.columns` the
column types, :mod:`.engine` the URLs, engines and migrations, :mod:`.errors` the errors.
"""

from .columns import MAX_BIG_INTEGER, MAX_INTEGER, utcnow
from .errors import NotFound, StoreConflict, StoreError, StoreUnavailable
from .models import (
    AgentSetting,
    Allocation,
    Checkpoint,
    Experiment,
    ExperimentContext,
    LogRow,
    MetricChunk,
    Model,
    ModelVersion,
    Task,
    TaskContext,
    TaskLog,
    Token,
    Trial,
    TrialSourceInfo,
    User,
    Webhook,
    WebhookTrigger,
)
from .packing import MetricRow
from .store import Store
from .trials import TrialSummary
from .users import hash_token

__all__ = [
    "MAX_BIG_INTEGER",
    "MAX_INTEGER",
    "AgentSetting",
    "Allocation",
    "Checkpoint",
    "Experiment",
    "ExperimentContext",
    "LogRow",
    "MetricChunk",
    "MetricRow",
    "Model",
    "ModelVersion",
    "NotFound",
    "Store",
    "StoreConflict",
    "StoreError",
    "StoreUnavailable",
    "Task",
    "TaskContext",
    "TaskLog",
    "Token",
    "Trial",
    "TrialSourceInfo",
    "TrialSummary",
    "User",
    "Webhook",
    "WebhookTrigger",
    "hash_token",
    "utcnow",
]
