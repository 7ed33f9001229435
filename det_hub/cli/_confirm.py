"""Asking the user before a command destroys something."""

from __future__ import annotations

import sys


def confirm(question: str) -> bool:
    """Asks ``question`` on the terminal; True for an answer starting with ``y``.

    Raises:
        UserError: There is no one to ask (standard input is closed or not a terminal that
            answers), so the command needs ``--yes``.
    """
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        answer = input()
    except EOFError:
        from det_hub.console import UserError

        print(file=sys.stderr)
        raise UserError("no answer to the confirmation question; pass --yes to go on without "
                        "asking") from None
    return answer.strip().lower().startswith("y")
