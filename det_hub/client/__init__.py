"""Python SDK over the det_hub master's REST API.

Used by the ``det-hub`` CLI, the notebook magics and the widgets::

    from det_hub.client import Client

    client = Client()  # DET_HUB_MASTER / DET_HUB_TOKEN, or the local master's admin token
    exp = client.create_experiment(open("const.yaml").read(), "model_def/")
    for line in client.trial_logs(client.list_trials(exp.id)[0].id, follow=True):
        print(line["message"])
    print(client.wait_for_experiment(exp.id).state)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from det_hub._lazy import lazy_exports

# The names below are imported from their modules on first use (PEP 562), so that a program
# needing one part of the SDK does not pay for the rest: ``det-hub experiment list`` loads the
# REST client, not the context packer (pathspec) and its tar writer. Type checkers read the
# imports under TYPE_CHECKING, which name the same modules as _EXPORTS.
if TYPE_CHECKING:
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

#: Each public name, by the module (of this package) that defines it.
_EXPORTS: dict[str, str] = {
    "checkpoint_directory": "_checkpoint_files",
    "Client": "_client",
    "ProgressCallback": "_client",
    "ALWAYS_SKIPPED_DIRS": "_context",
    "MAX_CONTEXT_BYTES": "_context",
    "context_size": "_context",
    "pack_context": "_context",
    "ContextError": "_errors",
    "ContextTooLarge": "_errors",
    "DetHubError": "_errors",
    "MasterError": "_errors",
    "MasterUnreachable": "_errors",
    "Agent": "_objects",
    "AgentUserGroup": "_objects",
    "Checkpoint": "_objects",
    "Command": "_objects",
    "Experiment": "_objects",
    "Job": "_objects",
    "Listing": "_objects",
    "MetricReport": "_objects",
    "NewUser": "_objects",
    "ResourcePool": "_objects",
    "Slot": "_objects",
    "Task": "_objects",
    "Trial": "_objects",
    "User": "_objects",
    "parse_time": "_objects",
    "CheckpointGCResult": "_registry",
    "Model": "_registry",
    "ModelVersion": "_registry",
    "DEFAULT_MASTER": "_settings",
    "data_dir": "_settings",
    "is_local_master": "_settings",
    "resolve_master": "_settings",
    "resolve_token": "_settings",
    "save_token": "_settings",
    "Webhook": "_webhooks",
    "WebhookTrigger": "_webhooks",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


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
