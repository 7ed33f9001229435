"""Lengths in batches, records and epochs."""

from __future__ import annotations

from typing import Any

import pytest

from det_hub.config import ConfigError, Length, LengthUnit, Problem


@pytest.mark.parametrize(
    ("obj", "unit", "value"),
    [
        ({"batches": 100}, LengthUnit.BATCHES, 100),
        ({"records": 6400}, LengthUnit.RECORDS, 6400),
        ({"epochs": 1}, LengthUnit.EPOCHS, 1),
    ],
)
def test_parse_and_to_dict(obj: dict[str, int], unit: LengthUnit, value: int) -> None:
    length = Length.parse(obj)
    assert (length.unit, length.value) == (unit, value)
    assert length.to_dict() == obj
    assert length.model_dump() == obj
    assert Length.parse(length) is length
    assert Length.model_validate(obj) == length


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        (
            100,
            Problem(
                "", "a bare number is not a length; write {batches: N}, {records: N} or {epochs: N}"
            ),
        ),
        ("100", Problem("", "must be a mapping: {batches: N}, {records: N} or {epochs: N}")),
        ({}, Problem("", "must name one unit: {batches: N}, {records: N} or {epochs: N}")),
        ({"steps": 3}, Problem("steps", "unknown key; valid keys are batches, epochs, records")),
        ({"epoch": 3}, Problem("epoch", "unknown key; did you mean 'epochs'?")),
        ({"batches": 0}, Problem("batches", "must be >= 1")),
        ({"batches": 1.5}, Problem("batches", "must be an integer")),
        ({"batches": True}, Problem("batches", "must be an integer")),
    ],
)
def test_parse_errors(obj: Any, problem: Problem) -> None:
    with pytest.raises(ConfigError) as info:
        Length.parse(obj)
    assert info.value.problems == [problem]


def test_keyword_construction_and_immutability() -> None:
    length = Length(unit=LengthUnit.RECORDS, value=10)
    assert length == Length.parse({"records": 10})
    assert Length(unit="epochs", value=2) == Length.parse({"epochs": 2})  # type: ignore[arg-type]
    assert str(length) == "10 records"
    with pytest.raises(ValueError):
        length.value = 3
    assert hash(length) == hash(Length.parse({"records": 10}))


@pytest.mark.parametrize(
    ("obj", "records_per_epoch", "global_batch_size", "batches"),
    [
        ({"batches": 937}, None, None, 937),
        ({"batches": 5}, 100, 32, 5),
        ({"records": 6400}, None, 64, 100),
        ({"records": 6401}, None, 64, 101),
        ({"records": 1}, None, 64, 1),
        ({"epochs": 1}, 60000, 64, 938),
        ({"epochs": 2}, 64, 32, 4),
        ({"epochs": 3}, 1000, 1000, 3),
    ],
)
def test_to_batches(
    obj: dict[str, int], records_per_epoch: int | None, global_batch_size: int | None, batches: int
) -> None:
    assert Length.parse(obj).to_batches(records_per_epoch, global_batch_size) == batches


@pytest.mark.parametrize(
    ("obj", "records_per_epoch", "global_batch_size", "message"),
    [
        ({"records": 10}, None, None, "a length in records needs a global_batch_size >= 1"),
        ({"records": 10}, 5, 0, "a length in records needs a global_batch_size >= 1"),
        ({"epochs": 1}, None, 32, "a length in epochs needs records_per_epoch >= 1"),
        ({"epochs": 1}, 0, 32, "a length in epochs needs records_per_epoch >= 1"),
        ({"epochs": 1}, 100, None, "a length in epochs needs a global_batch_size >= 1"),
    ],
)
def test_to_batches_needs_sizes(
    obj: dict[str, int], records_per_epoch: int | None, global_batch_size: int | None, message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        Length.parse(obj).to_batches(records_per_epoch, global_batch_size)
