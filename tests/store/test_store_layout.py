"""The store's layout: its modules stay small, and splitting them kept every public method."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import det_hub.store
from det_hub.store import Store

#: The most lines a module of :mod:`det_hub.store` may have.
MAX_LINES = 600

#: Every public method :class:`Store` had when its queries moved out of ``store.py`` into one
#: module per resource; each must still be there, documented.
PUBLIC_METHODS = [
    "add_checkpoint",
    "add_logs",
    "add_metrics",
    "add_model_version",
    "add_searcher_events",
    "add_token",
    "add_trial_source",
    "add_webhook_delivery",
    "agent_settings",
    "allocation_for_token",
    "checkpoint_metrics",
    "claim_checkpoints_for_deletion",
    "close",
    "compact_searcher",
    "count_model_versions",
    "count_trials",
    "create_allocation",
    "create_experiment",
    "create_model",
    "create_task",
    "create_trial",
    "create_user",
    "create_webhook",
    "delete_model",
    "delete_model_version",
    "delete_webhook",
    "experiment_metrics_after",
    "get_allocation",
    "get_checkpoint",
    "get_experiment",
    "get_experiment_context",
    "get_logs",
    "get_metrics",
    "get_model",
    "get_model_by_id",
    "get_model_version",
    "get_task",
    "get_task_context",
    "get_task_logs",
    "get_trial",
    "get_user",
    "get_user_by_id",
    "get_webhook",
    "insert_metrics",
    "latest_metrics",
    "link_agent_user",
    "list_checkpoints",
    "list_experiments",
    "list_experiments_in_states",
    "list_model_versions",
    "list_models",
    "list_open_allocations",
    "list_tasks",
    "list_trial_sources",
    "list_trials",
    "list_users",
    "list_webhook_deliveries",
    "list_webhooks",
    "load_searcher",
    "metrics_at",
    "metrics_of_trials",
    "model_version_metrics",
    "open",
    "registered_versions",
    "remove_webhook_delivery",
    "rolled_back_metrics",
    "set_agent_enabled",
    "slot_hours_by_user",
    "start_trial_run",
    "trial_summaries",
    "trials_using_checkpoint",
    "trials_using_model_version",
    "unlink_agent_user",
    "update_allocation",
    "update_checkpoint",
    "update_experiment",
    "update_model",
    "update_model_version",
    "update_task",
    "update_trial",
    "update_user",
    "user_for_token",
]

STORE_DIR = Path(det_hub.store.__file__).resolve().parent


@pytest.mark.parametrize("path", sorted(STORE_DIR.glob("*.py")), ids=lambda p: p.name)
def test_no_store_module_is_too_long(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.name} has {lines} lines; split it by resource"


@pytest.mark.parametrize("name", PUBLIC_METHODS)
def test_public_method_is_still_there(name: str) -> None:
    method = getattr(Store, name, None)
    assert callable(method), f"Store.{name} is gone"
    assert inspect.getdoc(method), f"Store.{name} has lost its docstring"


def test_every_module_has_a_docstring() -> None:
    for path in STORE_DIR.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        assert source.startswith('"""'), f"{path.name} has no module docstring"
