"""The searcher's decision on a validation reaches should_preempt() as the report returns.

The stand-in master here answers metric batches as the real one does, with ``preempt``, and
holds its preemption long poll without ever answering true: only the report's own answer (or,
from a master that does not send it, one quick question after the validation) can make
``should_preempt()`` true, so each test shows which of them did.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import ALLOCATION_ID, TRIAL_ID, FakeMaster, MasterState, _handler, reported_rows

import det_hub.core as core

REPO = Path(__file__).resolve().parents[2]
POLL_PATH = f"/allocations/{ALLOCATION_ID}/signals/preemption"
ACK_PATH = f"/allocations/{ALLOCATION_ID}/signals/ack_preemption"


class DecidingState(MasterState):
    """``stop_at``: a validation at this step or later makes the "searcher" stop the trial.
    ``answers_decision``: False plays a master that answers batches without ``preempt``."""

    def __init__(self, stop_at: int, answers_decision: bool = True) -> None:
        super().__init__()
        self.stop_at = stop_at
        self.answers_decision = answers_decision


class DecidingMaster(FakeMaster):
    state: DecidingState

    def start(self) -> None:
        state = self.state
        base: Any = _handler(state)

        class Handler(base):
            def do_GET(self) -> None:
                if not self.path.startswith("/api/v1" + POLL_PATH):
                    super().do_GET()
                    return
                _, query, _ = self._record()
                if query.get("timeout_seconds") == ["0"]:
                    self._reply(200, {"preempt": state.preempt.is_set()})
                    return
                # The long poll is held, as when its answer is still on the way.
                state.stopping.wait(float(query.get("timeout_seconds", ["60"])[0]))
                self._reply(200, {"preempt": False})

            def do_POST(self) -> None:
                if self.path != f"/api/v1/trials/{TRIAL_ID}/metrics":
                    super().do_POST()
                    return
                _, _, body = self._record()
                rows = reported_rows(body)
                with state.lock:
                    for row in rows:
                        state.metric_rows.append((body["group"], row))
                    if body["group"] == "validation" and any(
                            r["steps_completed"] >= state.stop_at for r in rows):
                        state.preempt.set()  # the searcher stops the trial on this report
                answer = {"count": len(rows), "repeat": False}
                if state.answers_decision:
                    answer["preempt"] = state.preempt.is_set()
                self._reply(200, answer)

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        self._server = server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(params=[True, False], ids=["answers-decision", "older-master"])
def master(request: pytest.FixtureRequest) -> Iterator[DecidingMaster]:
    """Used by ``in_trial`` and ``make_trial_env`` in place of the plain stand-in."""
    fake = DecidingMaster(DecidingState(stop_at=8, answers_decision=request.param), _free_port())
    fake.start()
    yield fake
    fake.stop()


def _quick_asks(state: MasterState) -> int:
    with state.lock:
        return sum(1 for r in state.requests if r["method"] == "GET" and r["path"] == POLL_PATH
                   and r["query"].get("timeout_seconds") == ["0"])


def test_should_preempt_is_true_right_after_the_validation_the_searcher_stopped_on(
        in_trial: DecidingMaster) -> None:
    state = in_trial.state
    with core.init(metric_batch_interval=60.0) as ctx:
        for step in range(1, 5):
            ctx.train.report_training_metrics(step, {"loss": 1.0 / step})
            assert ctx.preempt.should_preempt() is False
        ctx.train.report_validation_metrics(4, {"validation_loss": 0.5})
        # Delivered before the call returned, with the training rows before it.
        assert [(g, r["steps_completed"]) for g, r in state.metric_rows] == \
            [("training", s) for s in range(1, 5)] + [("validation", 4)]
        assert ctx.preempt.should_preempt() is False

        ctx.train.report_validation_metrics(8, {"validation_loss": 0.25})
        assert (state.metric_rows[-1][0], state.metric_rows[-1][1]["steps_completed"]) == \
            ("validation", 8)
        assert ctx.preempt.should_preempt() is True
        assert ctx.preempt.should_preempt() is True  # it stays true
    assert state.count("POST", ACK_PATH) == 1
    if state.answers_decision:
        assert _quick_asks(state) == 0, "the answer carried the decision: nothing more to ask"
    else:
        assert _quick_asks(state) == 2, "an older master is asked once after each validation"


def test_the_decision_is_shared_by_every_rank(in_trial: DecidingMaster,
                                              make_trial_env: Any) -> None:
    """Two ranks (gloo): the chief reports, both ask should_preempt() at the same point and
    agree, before and after the validation the searcher stopped on."""
    port = _free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    base.update(make_trial_env())
    base["PYTHONPATH"] = str(REPO)
    procs = []
    for rank in range(2):
        env = {**base, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
        procs.append(subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True))
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        answers.append(json.loads(next(line for line in out.splitlines()
                                        if line.startswith("RESULT "))[len("RESULT "):]))
    assert answers[0] == answers[1] == {"after_4": False, "after_8": True, "batches": 8}
    assert [r["steps_completed"] for g, r in in_trial.state.metric_rows
            if g == "validation"] == [4, 8]


#: One rank of the test above: trains "batches", validating at 4 and 8, stopping when told.
RANK_SCRIPT = """
import json
import det_hub.core as core

with core.DistributedContext.from_torch_distributed() as dist:
    with core.init(distributed=dist) as ctx:
        out = {}
        batches = 0
        for step in range(1, 13):
            batches = step
            if step in (4, 8):
                ctx.train.report_validation_metrics(step, {"validation_loss": 1.0 / step})
                out[f"after_{step}"] = ctx.preempt.should_preempt()
                if out[f"after_{step}"]:
                    break
        out["batches"] = batches
print("RESULT " + json.dumps(out), flush=True)
"""


def test_a_preemption_in_a_training_answer_is_taken_too(in_trial: DecidingMaster) -> None:
    """A pause or the scheduler may want the slots at any time: an answer to training rows
    that says so is heeded as the long poll's would be."""
    state = in_trial.state
    state.stop_at = 10**9
    with core.init(metric_batch_interval=0.01) as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1.0})
        ctx.train.flush(timeout=5)
        assert ctx.preempt.should_preempt() is False
        state.preempt.set()
        ctx.train.report_training_metrics(2, {"loss": 0.5})
        ctx.train.flush(timeout=5)
        # From an older master only the long poll (held here) would bring it.
        assert ctx.preempt.should_preempt() is state.answers_decision
