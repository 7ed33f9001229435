"""The master's database: SQLAlchemy 2 models, Alembic migrations and an async query API.

SQLite (``sqlite:///path.db``) is the embedded default and PostgreSQL
(``postgresql://user@host/db``, psycopg 3) the production store; both run the same code.
"""

from .columns import utcnow
from .errors import NotFound, StoreConflict, StoreError
from .models import (
    AgentSetting,
    Allocation,
    Checkpoint,
    Experiment,
    ExperimentContext,
    LogRow,
    Metric,
    MetricRow,
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
from .store import Store, TrialSummary, hash_token

__all__ = [
    "AgentSetting",
    "Allocation",
    "Checkpoint",
    "Experiment",
    "ExperimentContext",
    "LogRow",
    "Metric",
    "MetricRow",
    "Model",
    "ModelVersion",
    "NotFound",
    "Store",
    "StoreConflict",
    "StoreError",
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
