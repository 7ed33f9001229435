"""Runs one task's process for the local agent, detached from the master.

The master starts this module in a new session with the task's command after ``--``. It runs
the command, writes every output line with its time and stream to a JSON-lines log file, and
when the command ends writes its exit status to a file. Because nothing flows through pipes to
the master, the task keeps running when the master stops, and a restarted master picks up the
log and the exit status from the files where it left off.

    python -m det_hub.agents.local_runner --log LOG --exit-file EXIT [--cpus 0,1] -- CMD...
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO


def _pump(stream: IO[bytes], name: str, log: IO[str], lock: threading.Lock) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        record = json.dumps({"t": time.time(), "s": name, "m": line})
        with lock:
            log.write(record + "\n")
            log.flush()


def _write_exit(path: str, status: dict[str, object]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(status, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="det_hub.agents.local_runner")
    parser.add_argument("--log", required=True)
    parser.add_argument("--exit-file", required=True)
    parser.add_argument("--cpus", default="", help="comma-separated CPU ids to pin the task to")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")

    if args.cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})

    lock = threading.Lock()
    with open(args.log, "a", encoding="utf-8") as log:
        try:
            child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as e:
            with lock:
                log.write(json.dumps({"t": time.time(), "s": "system",
                                      "m": f"cannot start {command[0]!r}: {e.strerror}"}) + "\n")
            _write_exit(args.exit_file, {"exit_code": 127, "signal": None,
                                         "reason": f"cannot start {command[0]!r}: {e.strerror}"})
            return 127

        def forward(signum: int, _frame: object) -> None:
            # The master signals the whole process group; forwarding covers a direct kill of
            # this runner too. The runner itself stays to record the exit status.
            try:
                child.send_signal(signum)
            except ProcessLookupError:
                pass

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, forward)

        assert child.stdout is not None and child.stderr is not None
        pumps = [
            threading.Thread(target=_pump, args=(child.stdout, "stdout", log, lock), daemon=True),
            threading.Thread(target=_pump, args=(child.stderr, "stderr", log, lock), daemon=True),
        ]
        for p in pumps:
            p.start()
        code = child.wait()
        for p in pumps:
            p.join()
    status: dict[str, object] = {"exit_code": code, "signal": None}
    if code < 0:
        status["signal"] = signal.Signals(-code).name
    _write_exit(args.exit_file, status)
    return 0


if __name__ == "__main__":
    sys.exit(main())
