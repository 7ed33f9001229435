"""One worker of a launcher test that waits to be stopped; see test_torch_distributed.

``MODE`` says what each rank does, e.g. ``0=catch,1=fail``:

- ``catch``: on SIGTERM or SIGINT print ``got signal N`` and exit 0;
- ``plain``: keep the default signal handling;
- ``ignore``: ignore SIGTERM (only SIGKILL stops it);
- ``fail``: once every other rank is ready, exit 3.

Each rank creates ``READY_DIR/rank-N`` once its handlers are in place.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType


def caught(signum: int, frame: FrameType | None) -> None:
    print(f"got signal {signum}", flush=True)
    sys.exit(0)


def main() -> None:
    rank = int(os.environ["RANK"])
    size = int(os.environ["WORLD_SIZE"])
    modes = dict(part.split("=") for part in os.environ["MODE"].split(","))
    mode = modes[str(rank)]
    ready = Path(os.environ["READY_DIR"])
    if mode == "catch":
        signal.signal(signal.SIGTERM, caught)
        signal.signal(signal.SIGINT, caught)
    elif mode == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Printed before the ready file exists: a signal sent once it does cannot land between
    # the line and its newline (print writes them separately).
    print(f"rank {rank} ready", flush=True)
    (ready / f"rank-{rank}").touch()
    if mode == "fail":
        others = [ready / f"rank-{r}" for r in range(size) if r != rank]
        while not all(p.exists() for p in others):
            time.sleep(0.02)
        print("failing with 3", file=sys.stderr, flush=True)
        sys.exit(3)
    time.sleep(120)
    print("not stopped", flush=True)


if __name__ == "__main__":
    main()
