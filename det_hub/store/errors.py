"""Errors the store raises for the service to turn into HTTP answers."""

from __future__ import annotations


class StoreError(Exception):
    """Base class of the store's own errors."""


class StoreConflict(StoreError):
    """A write would break a uniqueness rule (a taken username, a reused uuid or token)."""


class NotFound(StoreError):
    """A row to update, or one a new row refers to, does not exist."""
