"""Problems found in a config, the exception that carries them, and their wording.

Pydantic's own messages ("Input should be a valid integer [type=int_type, ...]") are written for
programmers; this module turns them into the short phrases a user can act on, each tied to the
dotted path of the setting it is about.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

from pydantic import ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

#: The pydantic error type under which our validators hand problems up to the enclosing model.
PROBLEMS_ERROR_TYPE = "det_hub_config_problems"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a config.

    Attributes:
        path: Dotted path of the setting, such as ``"searcher.max_trials"`` or
            ``"bind_mounts[0].host_path"``; ``""`` for the config as a whole.
        message: What is wrong, in a short phrase such as ``"must be >= 1"``.
    """

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(ValueError):
    """An experiment config that cannot be used, with every problem found in it.

    Attributes:
        problems: All problems, in the order of the settings they concern.
    """

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: list[Problem] = list(problems)
        super().__init__(self.problems)

    def __str__(self) -> str:
        return "\n".join(str(problem) for problem in self.problems)


def join_path(prefix: str, suffix: str) -> str:
    """Join two dotted paths; list indexes (``[0]``) attach without a dot."""
    if not prefix:
        return suffix
    if not suffix:
        return prefix
    if suffix.startswith("["):
        return prefix + suffix
    return f"{prefix}.{suffix}"


def loc_to_path(loc: Iterable[Any]) -> str:
    """Render a pydantic error location, e.g. ``("bind_mounts", 0, "host_path")``."""
    path = ""
    for part in loc:
        path = join_path(path, f"[{part}]" if isinstance(part, int) else str(part))
    return path


def suggestion(word: object, choices: Collection[str]) -> str | None:
    """The choice closest to ``word``, or None when nothing is close.

    difflib's ratio misses abbreviations such as ``asha`` for ``adaptive_asha``, so a choice that
    contains the word (or is contained in it) is the fallback.
    """
    if not isinstance(word, str) or not word:
        return None
    close = difflib.get_close_matches(word, list(choices), n=1)
    if close:
        return close[0]
    lowered = word.lower()
    if len(lowered) >= 3:
        containing = [c for c in choices if lowered in c.lower() or c.lower() in lowered]
        if containing:
            return max(
                containing, key=lambda c: difflib.SequenceMatcher(None, lowered, c.lower()).ratio()
            )
    return None


def did_you_mean(word: object, choices: Collection[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest choice, or ``""``."""
    best = suggestion(word, choices)
    return f"; did you mean '{best}'?" if best is not None else ""


def unknown_key_message(key: object, valid: Collection[str]) -> str:
    """The message for a key that the section does not have."""
    hint = did_you_mean(key, valid)
    if hint:
        return "unknown key" + hint
    return "unknown key; valid keys are " + ", ".join(sorted(valid))


def not_one_of_message(value: object, choices: Collection[str]) -> str:
    """The message for a value outside a fixed set of names."""
    listed = ", ".join(choices)
    if not isinstance(value, str):
        return f"must be one of {listed}"
    return f"'{value}' is not one of {listed}" + did_you_mean(value, choices)


def problems_error(problems: Iterable[Problem]) -> PydanticCustomError:
    """Wrap problems so that a validator can raise them and the enclosing model collects them.

    The problems' paths are relative to the value being validated; the model above prefixes
    them with that value's location.
    """
    found = list(problems)
    return PydanticCustomError(
        PROBLEMS_ERROR_TYPE,
        "{summary}",
        {"summary": "; ".join(str(p) for p in found), "problems": found},
    )


def fail(message: str, path: str = "") -> NoReturn:
    """Raise one problem from inside a validator."""
    raise problems_error([Problem(path, message)])


def problems_from_validation_error(
    exc: ValidationError, valid_keys: Collection[str] = ()
) -> list[Problem]:
    """Translate a pydantic error into problems.

    Args:
        exc: The error raised while validating one model.
        valid_keys: The model's keys, used to suggest a replacement for an unknown key.
    """
    return _unique([problem for error in exc.errors(include_url=False)
                    for problem in error_problems(error, valid_keys)])


def error_problems(error: ErrorDetails, valid_keys: Collection[str] = ()) -> list[Problem]:
    """Translate one error of a pydantic :class:`~pydantic.ValidationError` (an item of its
    ``errors()``) into problems: one, or those a validator raised with :func:`fail`."""
    loc = error["loc"]
    path = loc_to_path(loc)
    if loc[-1:] == ("[key]",):
        # A mapping key of the wrong type: pydantic puts the key and a "[key]" marker in loc.
        return [Problem(loc_to_path(loc[:-2]), f"key {loc[-2]!r} must be a string")]
    if error["type"] == "invalid_key":
        return [Problem(loc_to_path(loc[:-1]), f"key {loc[-1]!r} must be a string")]
    if error["type"] == PROBLEMS_ERROR_TYPE:
        return [Problem(join_path(path, p.path), p.message) for p in error["ctx"]["problems"]]
    if error["type"] == "extra_forbidden":
        key = loc[-1] if loc else ""
        return [Problem(path, unknown_key_message(key, valid_keys))]
    return [Problem(path, _short_message(error))]


_TYPE_MESSAGES = {
    "missing": "required",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "frozen_instance": "cannot be changed",
}


def _short_message(error: Any) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind in _TYPE_MESSAGES:
        return _TYPE_MESSAGES[kind]
    if kind == "greater_than_equal":
        return f"must be >= {_number(ctx['ge'])}"
    if kind == "greater_than":
        return f"must be > {_number(ctx['gt'])}"
    if kind == "less_than_equal":
        return f"must be <= {_number(ctx['le'])}"
    if kind == "less_than":
        return f"must be < {_number(ctx['lt'])}"
    if kind in ("too_short", "string_too_short"):
        least = ctx.get("min_length", 1)
        return "must not be empty" if least == 1 else f"must have at least {least} items"
    if kind in ("too_long", "string_too_long"):
        return f"must have at most {ctx.get('max_length')} items"
    if kind in ("literal_error", "enum"):
        return f"must be one of {ctx.get('expected')}"
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    message = str(error.get("msg", "is not valid"))
    return message[:1].lower() + message[1:]


def _number(bound: Any) -> str:
    # Bounds of float fields come as 0.0; users wrote 0.
    if isinstance(bound, float) and bound.is_integer():
        return str(int(bound))
    return str(bound)


def _unique(problems: list[Problem]) -> list[Problem]:
    seen: set[Problem] = set()
    unique = []
    for problem in problems:
        if problem not in seen:
            seen.add(problem)
            unique.append(problem)
    return unique
