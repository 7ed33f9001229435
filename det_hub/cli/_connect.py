"""Building the SDK client from the CLI's global options."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from det_hub.client import Client


def client_from_args(args: argparse.Namespace) -> Client:
    """A client for the master named by ``-m/--master`` and ``--token`` (or their env vars)."""
    from det_hub.client import Client

    return Client(getattr(args, "master", None), getattr(args, "token", None))
