"""What one in-process run of ``det-hub`` gave."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Result:
    code: int
    out: str
    err: str
