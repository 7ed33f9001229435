"""The OpenAPI 3 document, built from the route table so that it cannot drift from it.

Paths come from the route regexes (named groups become ``{parameters}``), operations from the
methods each handler defines, summaries from their docstrings, query parameters from the
handlers' ``query``, and request bodies and answers from their ``body`` and ``answers``: the
models of :mod:`det_hub.service.wire`, whose JSON schemas (pydantic writes JSON Schema 2020-12)
are rewritten in OpenAPI 3.0's dialect and kept once each under ``components/schemas``.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, get_args, get_origin

from pydantic import BaseModel, TypeAdapter

from det_hub import __version__
from det_hub.service import wire
from det_hub.service.handlers.base import APIHandler
from det_hub.service.wire import answers

API_PREFIX = "/api/v1"
METHODS = ("get", "post", "put", "patch", "delete")
_GROUP = re.compile(r"\(\?P<(?P<name>\w+)>[^)]*\)")
REF = "#/components/schemas/{model}"

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
    schemas = Schemas()
    paths: dict[str, Any] = {}
    for route in routes:
        pattern, handler = route[0], route[1]
        arguments = route[2] if len(route) > 2 else {}
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
                "responses": _responses(handler, method, arguments, schemas),
            }
            if not handler.public:
                op["security"] = [{"bearer": []}]
            if method in handler.body:
                op["requestBody"] = {"required": True, "content": {
                    "application/json": {"schema": schemas.of(handler.body[method])}}}
            item[method] = op
        paths[path] = item
    # Objects that are not a JSON answer of their own (stream events, parts of others) too.
    for model in vars(answers).values():
        if inspect.isclass(model) and issubclass(model, wire.AnswerModel) \
                and model is not wire.AnswerModel:
            schemas.of(model)
    return {
        "openapi": "3.0.3",
        "info": {"title": "det_hub master", "version": __version__,
                 "description": "Experiments, trials, checkpoints and the cluster."},
        "servers": [{"url": server_url}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": ERROR_SCHEMA, **dict(sorted(schemas.components.items()))},
        },
    }


class Schemas:
    """The document's ``components/schemas`` as they are referred to: each model once, under
    its class name, with the models and enums it refers to."""

    def __init__(self) -> None:
        self.components: dict[str, Any] = {}

    def of(self, annotation: Any) -> dict[str, Any]:
        """The schema of a model (a reference to its component), ``list[model]``, or another
        type (``dict[str, Any]``), written where it is used."""
        if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
            name = annotation.__name__
            if name not in self.components:
                self.components[name] = self._take(
                    annotation.model_json_schema(ref_template=REF))
            return {"$ref": REF.format(model=name)}
        if get_origin(annotation) is list:
            [item] = get_args(annotation)
            return {"type": "array", "items": self.of(item)}
        return self._take(TypeAdapter(annotation).json_schema(ref_template=REF))

    def _take(self, schema: dict[str, Any]) -> dict[str, Any]:
        for name, nested in schema.pop("$defs", {}).items():
            self.components.setdefault(name, openapi_schema(nested))
        return openapi_schema(schema)


#: The keywords whose value is a schema, a list of schemas, or a mapping of names to schemas.
_SCHEMA = ("items", "additionalProperties", "not")
_SCHEMAS = ("anyOf", "oneOf", "allOf")
_NAMED_SCHEMAS = ("properties",)
_NULL = {"type": "null"}


def openapi_schema(schema: Any) -> Any:
    """A JSON schema as pydantic writes it (2020-12) in OpenAPI 3.0's dialect: ``null`` in an
    ``anyOf`` becomes ``nullable``, ``const`` a one-value ``enum``, a ``$ref`` with other
    keywords an ``allOf`` of it, numeric exclusive bounds boolean ones; titles are left out
    (the components are named by them)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in _SCHEMA and isinstance(value, dict):
            out[key] = openapi_schema(value)
        elif key in _SCHEMAS:
            out[key] = [openapi_schema(v) for v in value]
        elif key in _NAMED_SCHEMAS:
            out[key] = {name: openapi_schema(v) for name, v in value.items()}
        elif key == "const":
            out["enum"] = [value]
        elif key == "examples":
            out["example"] = value[0]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        else:
            out[key] = value
    if _NULL in out.get("anyOf", []):
        others = [s for s in out.pop("anyOf") if s != _NULL]
        if len(others) > 1:
            out["anyOf"] = others
        elif "$ref" in others[0]:
            out["allOf"] = others
        else:
            out = {**others[0], **out}
        out["nullable"] = True
    if "$ref" in out and len(out) > 1:
        out["allOf"] = [{"$ref": out.pop("$ref")}]
    return out


def dereference(document: dict[str, Any], schema: Any) -> Any:
    """``schema`` with every ``$ref`` into ``document``'s components replaced by what it
    names, and a one-schema ``allOf`` merged into where it is: the schema as one reads it."""
    if isinstance(schema, list):
        return [dereference(document, s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return dereference(document, document["components"]["schemas"][name])
    out = {k: dereference(document, v) for k, v in schema.items()}
    if len(out.get("allOf", [])) == 1:
        [inner] = out.pop("allOf")
        out = {**inner, **out}
    return out


def _responses(handler: type[APIHandler], method: str, arguments: dict[str, Any],
               schemas: Schemas) -> dict[str, Any]:
    ok = "201" if method in handler.created else "200"
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    responses: dict[str, Any] = {ok: _answer(handler.answers.get(method, "ok"), arguments,
                                             schemas)}
    if method in handler.repeatable:
        responses["200"] = {**responses[ok], "description": (
            "the same report was stored before (a retry whose answer was lost): nothing "
            "changed, and this is what it stored")}
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


def _answer(answer: Any, arguments: dict[str, Any], schemas: Schemas) -> dict[str, Any]:
    """A successful response from a handler's ``answers`` entry."""
    if isinstance(answer, str):
        return {"description": answer}
    if isinstance(answer, wire.Lines):
        return {"description": f"newline-delimited JSON, one {answer.model.__name__} a line",
                "content": {"application/x-ndjson": {"schema": schemas.of(answer.model)}}}
    if isinstance(answer, tuple):
        key, inner = answer
        key = key.format(**arguments)
        return {"description": key, "content": {"application/json": {"schema": {
            "type": "object", "required": [key], "properties": {key: schemas.of(inner)}}}}}
    return {"description": " ".join((answer.__doc__ or answer.__name__).split()),
            "content": {"application/json": {"schema": schemas.of(answer)}}}
