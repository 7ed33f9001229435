"""Python SDK over the det_hub master's REST API.

Used by the ``det-hub`` CLI, the notebook magics and the widgets::

    from det_hub.client import Client

    client = Client()  # DET_HUB_MASTER / DET_HUB_TOKEN, or the local master's admin token
    exp = client.create_experiment(open("const.yaml").read(), "model_def/")
    for line in client.trial_logs(client.list_trials(exp.id)[0].id, follow=True):
        print(line["message"])
    print(client.wait_for_experiment(exp.id).state)
"""

from ._checkpoint_files import checkpoint_directory
from ._client import Client, ProgressCallback
from ._context import ALWAYS_SKIPPED_DIRS, MAX_CONTEXT_BYTES, context_size, pack_context
from ._errors import ContextError, ContextTooLarge, DetHubError, MasterError, MasterUnreachable
from ._objects import (
    Agent,
    AgentUserGroup,
    Checkpoint,
    Command,
    Experiment,
    Job,
    Listing,
    MetricReport,
    NewUser,
    ResourcePool,
    Slot,
    Task,
    Trial,
    User,
    parse_time,
)
from ._registry import CheckpointGCResult, Model, ModelVersion
from ._settings import (
    DEFAULT_MASTER,
    data_dir,
    is_local_master,
    resolve_master,
    resolve_token,
    save_token,
)
from ._webhooks import Webhook, WebhookTrigger

__all__ = [
    "ALWAYS_SKIPPED_DIRS",
    "Agent",
    "AgentUserGroup",
    "Checkpoint",
    "CheckpointGCResult",
    "Client",
    "Command",
    "ContextError",
    "ContextTooLarge",
    "DEFAULT_MASTER",
    "DetHubError",
    "Experiment",
    "Job",
    "Listing",
    "MAX_CONTEXT_BYTES",
    "MasterError",
    "MasterUnreachable",
    "MetricReport",
    "Model",
    "ModelVersion",
    "NewUser",
    "ProgressCallback",
    "ResourcePool",
    "Slot",
    "Task",
    "Trial",
    "User",
    "Webhook",
    "WebhookTrigger",
    "checkpoint_directory",
    "context_size",
    "data_dir",
    "is_local_master",
    "pack_context",
    "parse_time",
    "resolve_master",
    "resolve_token",
    "save_token",
]
