"""What one in-process run of ``det-hub`` gave, and reading its tables back."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass
class Result:
    code: int
    out: str
    err: str


def table_rows(out: str) -> list[list[str]]:
    """A tabulate 'simple' table as rows of cells split on runs of 2+ spaces, headers first
    and the dashed rule left out."""
    return [re.split(r"\s{2,}", line.strip()) for line in out.strip().splitlines()
            if line.strip() and not set(line.strip()) <= {"-", " "}]
