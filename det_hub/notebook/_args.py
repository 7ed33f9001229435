"""Argument parsing for ``%det_experiment``: argparse, with errors raised instead of exiting."""

from __future__ import annotations

import argparse
import shlex
from typing import Any, NoReturn

PROG = "%det_experiment"
CELL_PROG = "%%det_experiment"


class MagicArgumentError(Exception):
    """The magic's arguments cannot be understood; the message says what was wrong."""


class HelpShown(Exception):  # noqa: N818 - a signal, not a failure
    """``-h``/``--help`` printed the help; the magic has nothing more to do."""


class MagicArgumentParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` that raises rather than ending the kernel's process."""

    def error(self, message: str) -> NoReturn:
        raise MagicArgumentError(f"{self.prog}: {message} (see {self.prog} --help)")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            raise MagicArgumentError(message.strip())
        raise HelpShown()


def split_line(line: str) -> list[str]:
    """The magic's line split as a shell would split it."""
    try:
        return shlex.split(line)
    except ValueError as exc:  # e.g. an unclosed quote
        raise MagicArgumentError(f"{PROG}: cannot read the arguments: {exc}") from None


def _add_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="change one setting, e.g. searcher.max_length.batches=200 (repeatable; YAML value)")
    parser.add_argument("--name", help="experiment name (replaces the config's)")
    parser.add_argument("--paused", action="store_true", help="create it paused")
    parser.add_argument("-f", "--follow", action="store_true",
                        help="show progress and the log tail until the experiment ends")


def line_parser() -> MagicArgumentParser:
    """The parser of the line magic ``%det_experiment VERB ...``."""
    parser = MagicArgumentParser(prog=PROG, description="Submit and control det_hub experiments.")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True,
                                  parser_class=MagicArgumentParser)

    create = verbs.add_parser("create", help="submit an experiment")
    create.add_argument("config", metavar="CONFIG", help="experiment config file (YAML)")
    create.add_argument("context", metavar="CONTEXT", nargs="?", default=".",
                        help="model definition directory (default: the working directory)")
    _add_overrides(create)

    listing = verbs.add_parser("list", help="list experiments")
    listing.add_argument("--all", "-a", action="store_true", help="every user's experiments")
    listing.add_argument("--archived", action="store_true", help="include archived experiments")
    listing.add_argument("--state", help="only experiments in this state (RUNNING, QUEUED, COMPLETED ...; ACTIVE for every active one)")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")

    for verb, text in (("describe", "show an experiment and its trials"),
                       ("watch", "show progress and the log tail until the experiment ends"),
                       ("pause", "pause an active experiment"),
                       ("activate", "activate a paused experiment"),
                       ("kill", "stop an experiment's trials now; it ends CANCELED")):
        sub = verbs.add_parser(verb, help=text)
        sub.add_argument("id", metavar="ID", type=int, help="the experiment's id")

    logs = verbs.add_parser("logs", help="print a trial's logs")
    logs.add_argument("trial_id", metavar="TRIAL", type=int, help="the trial's id")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="keep printing new lines until the trial ends")
    return parser


def cell_parser() -> MagicArgumentParser:
    """The parser of the cell magic's line, ``%%det_experiment [CONFIG] [options]``."""
    parser = MagicArgumentParser(
        prog=CELL_PROG,
        description="Submit the cell as an experiment's training code: a Core API script, or "
        "a module defining a det_hub.pytorch.PyTorchTrial subclass.")
    parser.add_argument("config", metavar="CONFIG", nargs="?",
                        help="experiment config file (YAML); without it a single-trial config "
                        "is built from the options below")
    parser.add_argument("--hparam", dest="hparams", action="append", default=[],
                        metavar="NAME=VALUE", help="set a hyperparameter (repeatable; YAML value)")
    parser.add_argument("--context", metavar="DIR",
                        help="directory sent along with the cell (default: the working directory)")
    parser.add_argument("--metric", help="the searcher's metric (default: loss)")
    parser.add_argument("--max-length", type=int, metavar="BATCHES",
                        help="batches to train (default: 100)")
    _add_overrides(parser)
    return parser


def parse(parser: MagicArgumentParser, line: str) -> Any:
    """``line`` parsed by ``parser``.

    Raises:
        MagicArgumentError: The arguments are wrong.
        HelpShown: The help was asked for and printed.
    """
    return parser.parse_args(split_line(line))
