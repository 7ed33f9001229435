"""Canned master answers, shaped as docs/rest-api.md says."""

from __future__ import annotations

from typing import Any

EXPERIMENT: dict[str, Any] = {
    "id": 3, "name": "mnist-const", "description": "", "owner": "admin", "state": "ACTIVE",
    "archived": False, "progress": 0.25, "created_at": "2026-11-22T10:00:00.123456Z",
    "ended_at": None,
    "config": {"name": "mnist-const", "searcher": {"name": "single", "metric": "validation_loss"}},
    "searcher_metric": "validation_loss", "smaller_is_better": True,
    "num_trials": 2, "resource_pool": "default", "priority": 42,
}
EXPERIMENT_DONE: dict[str, Any] = {
    **EXPERIMENT, "id": 2, "name": "mnist-old", "owner": "ann", "state": "COMPLETED",
    "progress": 1.0, "archived": True, "ended_at": "2026-11-22T11:02:00Z",
    "created_at": "2026-11-22T10:00:00Z",
}
TRIALS: list[dict[str, Any]] = [
    {
        "id": 7, "experiment_id": 3, "request_id": "0f3c", "state": "ACTIVE", "run_state": "RUNNING",
        "hparams": {"lr": 0.1}, "seed": 123, "restarts": 0, "created_at": "2026-11-22T10:00:01Z",
        "ended_at": None, "steps_completed": 500, "progress": 0.5,
        "latest_checkpoint": "5b0d6c1e-aaaa-bbbb-cccc-000000000001",
        "best_validation": {"steps_completed": 400, "metrics": {"validation_loss": 0.1}},
        "searcher_metric_value": 0.1,
    },
    {
        "id": 8, "experiment_id": 3, "request_id": "9a1b", "state": "COMPLETED", "run_state": None,
        "hparams": {"lr": 0.01}, "seed": 124, "restarts": 1, "created_at": "2026-11-22T10:00:02Z",
        "ended_at": "2026-11-22T10:30:00Z", "steps_completed": 1000, "progress": 1.0,
        "latest_checkpoint": None,
        "best_validation": {"steps_completed": 1000, "metrics": {"validation_loss": 0.05}},
        "searcher_metric_value": 0.05,
    },
]
METRICS: dict[str, Any] = {"metrics": [
    {"group": "training", "steps_completed": 100, "report_time": "2026-11-22T10:01:00Z",
     "metrics": {"loss": 0.9}},
    {"group": "validation", "steps_completed": 100, "report_time": "2026-11-22T10:01:05Z",
     "metrics": {"validation_loss": 0.8, "accuracy": 0.71234567}},
]}
CHECKPOINT: dict[str, Any] = {
    "uuid": "5b0d6c1e-aaaa-bbbb-cccc-000000000001", "trial_id": 7, "experiment_id": 3,
    "allocation_id": "7.0", "state": "COMPLETED", "steps_completed": 500,
    "report_time": "2026-11-22T10:05:00Z", "resources": {"model.pt": 1234, "optimizer.pt": 2048},
    "metadata": {"steps_completed": 500}, "size": 3282,
    "storage": {"type": "shared_fs", "host_path": "/root/.det_hub/checkpoints", "storage_path": None},
}
AGENTS: dict[str, Any] = {"agents": [{
    "id": "local", "type": "local", "resource_pool": "default", "enabled": True,
    "address": "127.0.0.1", "connected": True, "slots": [
        {"id": 0, "type": "cpu", "device": "cpu0-3", "cpus": [0, 1, 2, 3],
         "description": "CPUs 0-3", "allocation_id": "7.0"},
        {"id": 1, "type": "cpu", "device": "cpu4-7", "cpus": [4, 5, 6, 7],
         "description": "CPUs 4-7", "allocation_id": None},
    ]}]}
POOLS: dict[str, Any] = {"resource_pools": [
    {"name": "default", "description": "", "type": "local", "agents": 1, "slots_total": 2,
     "slots_used": 1, "slot_type": "cpu", "scheduler": "priority", "preemption": False,
     "fitting_policy": "best", "preemption_timeout": 3600.0, "default": True},
    {"name": "gpu", "description": "the A100 hosts", "type": "docker", "agents": 2,
     "slots_total": 16, "slots_used": 0, "slot_type": "cuda", "scheduler": "fair_share",
     "preemption": True, "fitting_policy": "worst", "preemption_timeout": 600.0,
     "default": False},
]}
JOB_RUNNING: dict[str, Any] = {
    "job_id": "exp-3", "type": "EXPERIMENT", "name": "mnist-const", "owner": "admin",
    "resource_pool": "default", "queue_position": 1, "priority": 42, "weight": 1.0,
    "state": "SCHEDULED", "slots_requested": 1, "slots_allocated": 1, "allocations": 1,
    "preemptible": True, "submitted": "2026-11-22T10:00:00Z",
    "queued_at": "2026-11-22T10:00:01Z", "experiment_id": 3,
}
JOB_QUEUED: dict[str, Any] = {
    "job_id": "exp-4", "type": "EXPERIMENT", "name": "resnet", "owner": "ann",
    "resource_pool": "default", "queue_position": 2, "priority": 50, "weight": 2.5,
    "state": "QUEUED", "slots_requested": 2, "slots_allocated": 0, "allocations": 1,
    "preemptible": True, "submitted": "2026-11-22T10:09:00Z",
    "queued_at": "2026-11-22T10:10:00Z", "experiment_id": 4,
}
JOBS: dict[str, Any] = {"jobs": [JOB_RUNNING, JOB_QUEUED]}
USERS: dict[str, Any] = {"users": [
    {"id": 1, "username": "admin", "admin": True},
    {"id": 2, "username": "ann", "admin": False},
]}
ME: dict[str, Any] = {"user": {"id": 1, "username": "admin", "admin": True}}
