"""Training lengths: a count of batches, records or epochs."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from det_hub.config._errors import ConfigError, Problem, problems_error, unknown_key_message


class LengthUnit(str, enum.Enum):
    """The unit a :class:`Length` counts in."""

    BATCHES = "batches"
    RECORDS = "records"
    EPOCHS = "epochs"


_UNIT_NAMES = [unit.value for unit in LengthUnit]
_FORMS = "{batches: N}, {records: N} or {epochs: N}"


class Length(BaseModel):
    """A length of training, written in configs as ``{batches: 100}`` (or records, epochs).

    Attributes:
        unit: What is counted.
        value: How many, at least 1.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    unit: LengthUnit
    value: int = Field(strict=True, ge=1)

    @classmethod
    def parse(cls, obj: Any) -> Length:
        """Read the config form ``{"batches": 100}``.

        Raises:
            ConfigError: With paths relative to the length (``"batches"`` for a bad count).
        """
        if isinstance(obj, Length):
            return obj
        unit, value = _parse_config_form(obj)
        return cls(unit=unit, value=value)

    def to_dict(self) -> dict[str, int]:
        """The config form, e.g. ``{"batches": 100}``."""
        return {self.unit.value: self.value}

    def to_batches(
        self, records_per_epoch: int | None = None, global_batch_size: int | None = None
    ) -> int:
        """This length in batches, rounded up so that at least the length is trained.

        Args:
            records_per_epoch: Needed for epochs.
            global_batch_size: Needed for records and epochs.

        Raises:
            ValueError: When a needed argument is missing or not positive.
        """
        if self.unit is LengthUnit.BATCHES:
            return self.value
        if not global_batch_size or global_batch_size < 1:
            raise ValueError(f"a length in {self.unit.value} needs a global_batch_size >= 1")
        records = self.value
        if self.unit is LengthUnit.EPOCHS:
            if not records_per_epoch or records_per_epoch < 1:
                raise ValueError("a length in epochs needs records_per_epoch >= 1")
            records = self.value * records_per_epoch
        return -(-records // global_batch_size)

    @model_validator(mode="before")
    @classmethod
    def _from_config_form(cls, data: Any) -> Any:
        # Keyword construction, Length(unit=..., value=...), arrives here as well.
        if isinstance(data, Mapping) and set(data) == {"unit", "value"}:
            return data
        try:
            unit, value = _parse_config_form(data)
        except ConfigError as exc:
            raise problems_error(exc.problems) from None
        return {"unit": unit, "value": value}

    @model_serializer
    def _to_config_form(self) -> dict[str, int]:
        return self.to_dict()

    def __str__(self) -> str:
        return f"{self.value} {self.unit.value}"


def _parse_config_form(obj: Any) -> tuple[LengthUnit, int]:
    if not isinstance(obj, Mapping):
        if isinstance(obj, int) and not isinstance(obj, bool):
            message = f"a bare number is not a length; write {_FORMS}"
        else:
            message = f"must be a mapping: {_FORMS}"
        raise ConfigError([Problem("", message)])
    if len(obj) != 1:
        if not obj:
            message = f"must name one unit: {_FORMS}"
        else:
            message = "must name exactly one unit, not " + ", ".join(map(str, obj))
        raise ConfigError([Problem("", message)])
    ((key, value),) = obj.items()
    if key not in _UNIT_NAMES:
        raise ConfigError([Problem(str(key), unknown_key_message(key, _UNIT_NAMES))])
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError([Problem(key, "must be an integer")])
    if value < 1:
        raise ConfigError([Problem(key, "must be >= 1")])
    return LengthUnit(key), value
