"""Slurm ends a job with a SIGTERM to every process of it, SIGKILL following ``KillWait``
seconds later: training code that asks ``should_preempt()`` takes that SIGTERM as the request
to checkpoint and stop, rather than dying where it stands. Each case runs in an interpreter of
its own, since it changes how the process takes SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

#: A process with a PreemptContext on a cluster (a session; no allocation, so no long poll),
#: which sends itself SIGTERM after the step given and reports what it sees.
SCRIPT = textwrap.dedent('''
    import os, signal, sys, threading
    from det_hub.core._distributed import DistributedContext
    from det_hub.core._preempt import PreemptContext

    class Session:
        def post(self, path, body=None, **kwargs):
            print("posted", path, flush=True)

    steps = sys.argv[1].split(",")
    preempt = PreemptContext(distributed=DistributedContext(), session=Session())
    for step in steps:
        if step == "own-handler":
            signal.signal(signal.SIGTERM, lambda *a: print("own handler", flush=True))
        elif step == "ask":
            print("asked", preempt.should_preempt(), flush=True)
        elif step == "ask-in-thread":
            asking = threading.Thread(
                target=lambda: print("asked", preempt.should_preempt(), flush=True))
            asking.start()
            asking.join()
        elif step == "term":
            os.kill(os.getpid(), signal.SIGTERM)
        elif step == "close":
            preempt.close()
    print("ended", flush=True)
''')


def run(steps: str, *, slurm_job: str | None = "812") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    if slurm_job is not None:
        env["SLURM_JOB_ID"] = slurm_job
    return subprocess.run([sys.executable, "-c", SCRIPT, steps], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def test_sigterm_in_a_slurm_job_is_the_request_to_stop() -> None:
    done = run("ask,term,ask,term,ask")
    assert done.returncode == 0, done.stderr
    # The second SIGTERM (a launcher passing Slurm's on) changes nothing; the request is
    # acknowledged to the master once.
    assert done.stdout.splitlines() == [
        "asked False", "posted /allocations/None/signals/ack_preemption", "asked True",
        "asked True", "ended"]
    assert done.stderr.count("SIGTERM: Slurm is ending job 812 (a preemption, a cancel or "
                             "its time limit); this process checkpoints and stops") == 1


def test_code_that_never_asks_ends_at_sigterm_as_before() -> None:
    done = run("term,ask")
    assert done.returncode == -signal.SIGTERM and done.stdout == ""


def test_outside_slurm_sigterm_ends_the_process() -> None:
    done = run("ask,term,ask", slurm_job=None)
    assert done.returncode == -signal.SIGTERM
    assert done.stdout.splitlines() == ["asked False"]


def test_a_handler_of_the_codes_own_is_left_alone() -> None:
    done = run("own-handler,ask,term,ask")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["asked False", "own handler", "asked False", "ended"]


def test_once_closed_sigterm_ends_the_process_again() -> None:
    done = run("ask,close,term,ask")
    assert done.returncode == -signal.SIGTERM
    assert done.stdout.splitlines() == ["asked False"]


def test_asked_from_another_thread_it_does_not_listen() -> None:
    done = run("ask-in-thread,term,ask")
    assert done.returncode == -signal.SIGTERM
    assert done.stdout.splitlines() == ["asked False"]
