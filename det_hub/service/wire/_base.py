"""What every wire model is made of: the two bases, the JSON types the API shares, and the
reading of a request body into its model with errors in the API's words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from det_hub.config import Problem, error_problems, loc_to_path
from det_hub.service.errors import BadRequest

#: NaN and the infinities as Determined's REST API writes them (see det_hub.nonfinite).
NonFinite = Literal["NaN", "Infinity", "-Infinity"]
#: A number as the API writes it: finite, or one of Determined's three strings.
Number = float | NonFinite
#: A reported metric: usually a number, which may be NaN or infinite; any JSON is kept.
MetricValue = float | NonFinite | str | bool | None | list[Any] | dict[str, Any]
#: An ISO 8601 UTC time, ``2026-11-22T10:00:00.123456Z``.
Time = Annotated[str, Field(json_schema_extra={"format": "date-time"})]

#: The pydantic error types of a value out of its range.
RANGE = frozenset({"greater_than_equal", "greater_than", "less_than_equal", "less_than"})

# The API speaks JSON: what the config's wording calls a mapping is an object here.
_JSON_WORDS = {"dict_type": "must be an object", "model_type": "must be an object",
               "model_attributes_type": "must be an object"}


@dataclass(frozen=True)
class Says:
    """What a refused field's detail says, in place of the generic phrase: ``progress:
    Annotated[float, Says("must be a number between 0 and 1")]``. ``kinds`` limits it to some
    pydantic error types (:data:`RANGE`, ``{"model_type"}``); a field may have several."""

    message: str
    kinds: frozenset[str] | None = None


@dataclass(frozen=True)
class Lines:
    """An answer of newline-delimited JSON, one ``model`` per line (log streams)."""

    model: type[BaseModel]


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def omittable(**kwargs: Any) -> Any:
    """A field that may be left out but is never null when sent: None in the model when it
    was not sent (see :meth:`RequestModel.given`), without a default in the schema."""
    return Field(default=None, json_schema_extra=_no_default, **kwargs)


class RequestModel(BaseModel):
    """A request body. Types are strict, as the handlers' checks were: ``"5"`` is not an
    integer and ``true`` is not a number. Unknown fields are ignored unless a model forbids
    them (``extra="forbid"``), as the endpoints that refused them did."""

    model_config = ConfigDict(strict=True, extra="ignore")

    #: The error of a refused body, in place of its first problem (``path: message``).
    refusal: ClassVar[str | None] = None
    #: What an unknown field's detail says; None: ``unknown field; one of ...``.
    unknown_field: ClassVar[str | None] = None

    @classmethod
    def unknown_field_message(cls) -> str:
        return cls.unknown_field or "unknown field; one of " + ", ".join(cls.model_fields)

    def given(self) -> dict[str, Any]:
        """The fields the body sent, checked, as JSON data."""
        return self.model_dump(exclude_unset=True)


class AnswerModel(BaseModel):
    """An object the API answers with. The master builds answers as plain dicts
    (``service/serialize.py``); these models describe them exactly, for ``openapi.json`` and
    for the tests that hold the master, the SDK and the panel to them."""

    model_config = ConfigDict(strict=True, extra="forbid")


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model an annotation holds (``M``, ``M | None``, ``list[M]``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _field_path(model: type[BaseModel], loc: tuple[Any, ...]
                ) -> tuple[type[BaseModel], FieldInfo | None, int]:
    """Where an error location ends: the innermost model it reaches, the field of that model
    it is at (None: at the model itself), and how many parts of ``loc`` name that field; the
    parts after it are list indexes, keys or union branches of the field's own value."""
    start = 0
    while True:
        name = loc[start] if start < len(loc) else None
        info = model.model_fields.get(name) if isinstance(name, str) else None
        if info is None:
            return model, None, start
        inner = _model_in(info.annotation)
        nested = next((i for i in range(start + 1, len(loc))
                       if inner is not None and isinstance(loc[i], str)
                       and loc[i] in inner.model_fields), None)
        if inner is None or nested is None:
            return model, info, start + 1
        model, start = inner, nested


def _owner(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel]:
    """The model of the object at ``loc`` (where an unknown field was found)."""
    for part in loc:
        info = model.model_fields.get(part) if isinstance(part, str) else None
        inner = _model_in(info.annotation) if info is not None else None
        if inner is not None:
            model = inner
    return model


def problems_of(model: type[RequestModel], error: ValidationError) -> list[Problem]:
    """A refused body's problems, one per field, in the API's words."""
    problems: list[Problem] = []
    for e in error.errors(include_url=False):
        for problem in _problems(model, e):
            if problem not in problems:
                problems.append(problem)
    return problems


def _problems(model: type[RequestModel], e: ErrorDetails) -> list[Problem]:
    loc = tuple(e["loc"])
    if e["type"] == "extra_forbidden":
        owner = _owner(model, loc[:-1])
        message = (owner.unknown_field_message() if issubclass(owner, RequestModel)
                   else "unknown field")
        return [Problem(loc_to_path(loc), message)]
    _, info, end = _field_path(model, loc)
    says = [m for m in info.metadata if isinstance(m, Says)] if info is not None else []
    said = next((s.message for s in says if s.kinds is None or e["type"] in s.kinds), None)
    if said is not None:
        return [Problem(loc_to_path(loc[:end]), said)]
    if e["type"] in _JSON_WORDS:
        return [Problem(loc_to_path(loc), _JSON_WORDS[e["type"]])]
    return error_problems(e)


M = TypeVar("M", bound=RequestModel)


def parse(model: type[M], data: Any) -> M:
    """``data`` (a request's JSON body) read as ``model``.

    Raises:
        BadRequest: naming the first bad field (``"path: message"``, or the model's
            ``refusal``), with one ``{"path", "message"}`` detail per problem.
    """
    try:
        return model.model_validate(data)
    except ValidationError as e:
        problems = problems_of(model, e)
    raise BadRequest(model.refusal or str(problems[0]),
                     [{"path": p.path, "message": p.message} for p in problems])
