"""What a notebook, shell or TensorBoard task does around the server it runs: listen where the
master reaches it, wait until the server answers, then tell the master (which opens the proxy
path to it), and pass signals on so that a kill stops the server cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from det_hub.core import MasterSession
from det_hub.env_names import (
    AGENT_ADDRESS_ENV,
    ALLOCATION_TOKEN_ENV,
    MASTER_ENV,
    PROXY_PATH_ENV,
    TASK_NUMBER_ENV,
)
from det_hub.ports import free_port as free_port

#: The server has this long to answer before the task gives up.
START_TIMEOUT = 300.0


def bind_host() -> str:
    """The address the master reaches this task on (its agent's): the server listens there."""
    return os.environ.get(AGENT_ADDRESS_ENV) or "127.0.0.1"


def proxy_path() -> str:
    """The path the master's proxy serves the task under, ``/proxy/<id>/``; the server
    answers under the same path."""
    path = os.environ.get(PROXY_PATH_ENV, "/")
    return path if path.endswith("/") else path + "/"


def announce(port: int) -> None:
    """Tell the master the task's server answers on ``port``.

    Raises:
        MasterError: The master refused (the task has ended), or stayed unreachable.
    """
    task = os.environ[TASK_NUMBER_ENV]
    session = MasterSession(os.environ[MASTER_ENV],
                            os.environ.get(ALLOCATION_TOKEN_ENV), retry_deadline=120)
    try:
        session.post(f"/tasks/{task}/ready", {"port": port}, retry=True)
    finally:
        session.close()


def fail(message: str) -> int:
    """Print why the task cannot serve (it lands in the task's logs) and give its exit code."""
    print(f"det_hub: {message}", file=sys.stderr, flush=True)
    return 1


def run_server(argv: Sequence[str], port: int, answers: Callable[[], bool],
               env: dict[str, str] | None = None) -> int:
    """Run a server process until it exits; announce ``port`` once ``answers()`` is true.

    SIGTERM and SIGINT are passed on to the server. Returns its exit code (128 + signal for
    one ended by a signal), or 1 when it never answered.
    """
    proc = subprocess.Popen(list(argv), env=env)

    def pass_on(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    signal.signal(signal.SIGTERM, pass_on)
    signal.signal(signal.SIGINT, pass_on)
    deadline = time.monotonic() + START_TIMEOUT
    while not answers():
        if proc.poll() is not None:
            return fail(f"the server exited with code {proc.returncode} before it answered")
        if time.monotonic() > deadline:
            proc.terminate()
            proc.wait()
            return fail(f"the server did not answer within {START_TIMEOUT:g} s")
        time.sleep(0.2)
    print(f"det_hub: serving on port {port}", flush=True)
    try:
        announce(port)
    except Exception as e:  # the master will not send anyone: do not serve on
        proc.terminate()
        proc.wait()
        return fail(f"could not tell the master the server is ready: {e}")
    code = proc.wait()
    return code if code >= 0 else 128 - code


def http_answers(url: str, headers: dict[str, str] | None = None) -> Callable[[], bool]:
    """A probe: whether a GET of ``url`` gets an answer below 500."""
    import requests

    def probe() -> bool:
        try:
            return requests.get(url, headers=headers, timeout=2).status_code < 500
        except requests.RequestException:
            return False

    return probe
