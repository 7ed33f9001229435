"""Prefix every line a worker prints with its rank: ``[rank=N] ...``.

Usage (Determined's command line)::

    python3 -m det_hub.launch.wrap_rank [--no-redirect-stdio] RANK [--] COMMAND...

``RANK`` is a number, or a comma-separated list of environment variables tried in order
(``RANK,OMPI_COMM_WORLD_RANK``). The command's stdout and stderr go, prefixed, to this
process's stdout and stderr; a ``\\r`` ends a line as ``\\n`` does, so progress bars come out
one update per line. Signals sent to this process are passed on to the command, and its exit
status is returned.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import IO

_LINE_END = re.compile(rb"[\r\n]")
# A line with no break in this many bytes is cut, so one huge line cannot hold memory.
_MAX_LINE = 64 * 1024


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    pending = b""
    while True:
        chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
        if not chunk:
            break
        pending += chunk
        while True:
            match = _LINE_END.search(pending)
            if match is None:
                break
            yield pending[: match.start()] + b"\n"
            pending = pending[match.end() :]
        while len(pending) >= _MAX_LINE:
            yield pending[:_MAX_LINE] + b"\n"
            pending = pending[_MAX_LINE:]
    if pending:
        yield pending + b"\n"


def _forward(src: IO[bytes], dst: IO[str], prefix: bytes) -> None:
    fd = dst.fileno()
    for line in _lines(src):
        os.write(fd, prefix + line)


def _parse_rank(spec: str) -> int:
    if spec.isdigit():
        return int(spec)
    for name in spec.split(","):
        value = os.environ.get(name.strip())
        if value is not None:
            try:
                return int(value)
            except ValueError:
                raise SystemExit(f"wrap_rank: {name}={value!r} is not an integer rank") from None
    raise SystemExit(f"wrap_rank: none of the rank variables {spec} is set")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command and return its exit status (128 + signal number when it was killed)."""
    parser = argparse.ArgumentParser(
        prog="python3 -m det_hub.launch.wrap_rank",
        usage="%(prog)s [-h] [--no-redirect-stdio] RANK [--] COMMAND...",
        description="Prefix each line of a worker's output with its rank.",
    )
    parser.add_argument(
        "--no-redirect-stdio", action="store_true",
        help="Accepted for compatibility: output always goes to this process's stdout/stderr.",
    )
    parser.add_argument("rank", metavar="RANK",
                        help="a rank, or comma-separated names of variables holding it")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND...")
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("no command to run")
    prefix = f"[rank={_parse_rank(args.rank)}] ".encode()
    try:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        print(f"wrap_rank: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127

    def pass_on(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(sig, pass_on)
    assert proc.stdout is not None and proc.stderr is not None
    threads = [
        threading.Thread(target=_forward, args=(proc.stdout, sys.stdout, prefix), daemon=True),
        threading.Thread(target=_forward, args=(proc.stderr, sys.stderr, prefix), daemon=True),
    ]
    sys.stdout.flush()
    sys.stderr.flush()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    code = proc.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
