"""Turning the failures a user can fix into one message in the cell, without a traceback."""

from __future__ import annotations

import sys

from det_hub.client import DetHubError, MasterError, MasterUnreachable
from det_hub.config import ConfigError
from det_hub.console import UserError
from det_hub.env_names import MASTER_ENV, TOKEN_ENV
from det_hub.notebook._args import MagicArgumentError

#: The errors the magics report as a message; anything else is a bug and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (
    DetHubError, ConfigError, MagicArgumentError, UserError, OSError,
)

_RED = "\x1b[31m"
_RESET = "\x1b[0m"


def error_message(error: BaseException) -> str:
    """What to tell the user about ``error``: a first line, then details indented below it."""
    if isinstance(error, MasterUnreachable):
        return (f"Error: {error} - is the master running? The magics use {MASTER_ENV} "
                f"and {TOKEN_ENV}.")
    if isinstance(error, MagicArgumentError):
        return f"Error: {error}"
    if isinstance(error, ConfigError):
        problems = [str(p) for p in error.problems]
        return "Error: bad config: " + problems[0] + "".join(f"\n  {p}" for p in problems[1:])
    lines = [f"Error: {error}"]
    if isinstance(error, MasterError):
        lines.extend(f"  {detail}" for detail in error.detail_lines())
        if error.status == 401:
            lines.append(f"  Set {TOKEN_ENV} to a token of yours (det-hub user create).")
    return "\n".join(lines)


def report_error(error: BaseException) -> None:
    """Prints :func:`error_message` to stderr, in red."""
    print(f"{_RED}{error_message(error)}{_RESET}", file=sys.stderr, flush=True)
