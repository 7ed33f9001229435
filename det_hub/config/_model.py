"""The base of every config section: strict types, no unknown keys, every problem collected."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)

from det_hub.config._errors import (
    ConfigError,
    Problem,
    fail,
    not_one_of_message,
    problems_error,
    problems_from_validation_error,
)

ModelT = TypeVar("ModelT", bound="ConfigModel")


class ConfigModel(BaseModel):
    """A config section.

    Types are strict, as in Determined's JSON schema: ``"5"`` is not an integer and ``true`` is
    not a number. Keys set to null count as absent, so ``resources:`` with nothing under it
    means the defaults. Problems in fields and in nested sections are gathered into one error
    whose paths are relative to this section; :meth:`_semantic_problems` adds the checks that
    span several fields.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    #: Whether a key set to null means "use the default" (not for values that may be null).
    drop_none: ClassVar[bool] = True
    #: Keys that are accepted for compatibility and then thrown away.
    ignored_keys: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="wrap")
    @classmethod
    def _collect_problems(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        if isinstance(data, cls):
            return data
        if not isinstance(data, Mapping):
            fail("must be a mapping")
        data = {
            key: value
            for key, value in data.items()
            if key not in cls.ignored_keys and not (value is None and cls.drop_none)
        }
        try:
            model = handler(data)
        except ValidationError as exc:
            raise problems_error(
                problems_from_validation_error(exc, [*cls.model_fields, *cls.ignored_keys])
            ) from None
        problems = model._semantic_problems()
        if problems:
            raise problems_error(problems)
        return model

    def _semantic_problems(self) -> list[Problem]:
        """Problems that involve more than one field; paths relative to this section."""
        return []


def validate_section(cls: type[ModelT], data: Any) -> ModelT:
    """Validate ``data`` as ``cls``, raising :class:`ConfigError` with relative paths."""
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(problems_from_validation_error(exc, list(cls.model_fields))) from None


def choice(*choices: str) -> BeforeValidator:
    """A validator for a name from a fixed set, suggesting the closest one when it is not."""

    def check(value: Any) -> Any:
        if isinstance(value, str) and value in choices:
            return value
        fail(not_one_of_message(value, choices))

    return BeforeValidator(check)


def absolute_path(path: str) -> str:
    """Check a path is absolute (for use with ``AfterValidator``)."""
    if not path.startswith("/"):
        fail("must be an absolute path")
    return path


def not_empty(text: str) -> str:
    """Check a string is not empty (for use with ``AfterValidator``)."""
    if not text:
        fail("must not be empty")
    return text


def reraise_as_problems(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Adapt a parser that raises :class:`ConfigError` for use as a pydantic validator."""

    def run(value: Any) -> Any:
        try:
            return parse(value)
        except ConfigError as exc:
            raise problems_error(exc.problems) from None

    return run
