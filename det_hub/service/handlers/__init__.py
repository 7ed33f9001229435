"""REST handlers, one module per resource; :data:`api_routes` gathers their routes."""

from __future__ import annotations

from typing import Any

from det_hub.service.handlers import (
    allocations,
    checkpoints,
    cluster,
    experiments,
    meta,
    models,
    streams,
    tasks,
    trials,
    users,
    webhooks,
)

#: Every route under /api/v1, as (path regex, handler[, initialize kwargs]).
api_routes: list[tuple[Any, ...]] = [
    *meta.routes,
    *experiments.routes,
    *trials.routes,
    *checkpoints.routes,
    *models.routes,
    *allocations.routes,
    *cluster.routes,
    *tasks.routes,
    *users.routes,
    *webhooks.routes,
    *streams.routes,
]

__all__ = ["api_routes"]
