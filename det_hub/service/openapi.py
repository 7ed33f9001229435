"""The OpenAPI 3 document, built from the route table so that it cannot drift from it.

Paths come from the route regexes (named groups become ``{parameters}``), operations from the
methods each handler defines, summaries from their docstrings, and inputs from the handlers'
``query`` and ``body`` attributes.
"""

from __future__ import annotations

import re
from typing import Any

from det_hub import __version__
from det_hub.service.handlers.base import APIHandler

API_PREFIX = "/api/v1"
METHODS = ("get", "post", "put", "patch", "delete")
_GROUP = re.compile(r"\(\?P<(?P<name>\w+)>[^)]*\)")

ERROR_SCHEMA = {
    "type": "object", "required": ["error"],
    "properties": {"error": {"type": "string"}, "details": {"type": "array"}},
}


def openapi_path(pattern: str) -> str:
    """``/trials/(?P<trial_id>\\d+)/logs`` -> ``/trials/{trial_id}/logs``."""
    return API_PREFIX + _GROUP.sub(lambda m: "{" + m.group("name") + "}", pattern).replace(
        "\\.", ".")


def handler_methods(handler: type[APIHandler]) -> list[str]:
    """The HTTP methods a handler implements itself (not the base class's 405s)."""
    return [m for m in METHODS
            if getattr(handler, m, None) is not getattr(APIHandler, m, None)]


def openapi_document(routes: list[tuple[Any, ...]], server_url: str = "/") -> dict[str, Any]:
    """The document for these routes, served below ``server_url`` (a hub service's prefix)."""
    paths: dict[str, Any] = {}
    for route in routes:
        pattern, handler = route[0], route[1]
        path = openapi_path(pattern)
        params = [{"name": m.group("name"), "in": "path", "required": True,
                   "schema": {"type": "integer" if "\\d" in m.group(0) else "string"}}
                  for m in _GROUP.finditer(pattern)]
        item: dict[str, Any] = {}
        for method in handler_methods(handler):
            doc = (getattr(handler, method).__doc__ or "").strip().splitlines()
            op: dict[str, Any] = {
                "operationId": f"{method}_{path[len(API_PREFIX) + 1:]}".replace("/", "_")
                .replace("{", "").replace("}", "").replace(".", "_"),
                "summary": doc[0] if doc else "",
                "tags": [path.split("/")[3]],
                "parameters": params + [
                    {"name": name, "in": "query", "schema": {"type": kind},
                     "description": text}
                    for name, (kind, text) in handler.query.get(method, {}).items()],
                "responses": _responses(handler, method),
            }
            if not handler.public:
                op["security"] = [{"bearer": []}]
            if method in handler.body:
                op["requestBody"] = {"required": True, "content": {
                    "application/json": {"schema": handler.body[method]}}}
            item[method] = op
        paths[path] = item
    return {
        "openapi": "3.0.3",
        "info": {"title": "det_hub master", "version": __version__,
                 "description": "Experiments, trials, checkpoints and the cluster."},
        "servers": [{"url": server_url}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": ERROR_SCHEMA},
        },
    }


def _responses(handler: type[APIHandler], method: str) -> dict[str, Any]:
    ok = "201" if method in handler.created else "200"
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    responses: dict[str, Any] = {ok: {"description": handler.answers.get(method, "ok")}}
    responses["400"] = {"description": "bad input", **error}
    if not handler.public:
        responses["401"] = {"description": "no or bad token", **error}
        responses["403"] = {"description": "not allowed", **error}
    responses["404"] = {"description": "not found", **error}
    if method == "post":
        responses["409"] = {"description": "not allowed in the current state", **error}
    for status, text in handler.extra_responses.get(method, {}).items():
        responses[status] = {"description": text, **error}
    return responses
