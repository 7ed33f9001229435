"""The one error the front ends share: a mistake in what the user asked for."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in what the user asked for (a missing file, a bad option); shown without a
    traceback."""


__all__ = ["UserError"]
