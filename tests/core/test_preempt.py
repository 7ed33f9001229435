"""Preemption: a long poll, not a busy one."""

from __future__ import annotations

import logging
import time

import pytest
from conftest import ALLOCATION_ID, FakeMaster

import det_hub.core as core

POLL_PATH = f"/allocations/{ALLOCATION_ID}/signals/preemption"
ACK_PATH = f"/allocations/{ALLOCATION_ID}/signals/ack_preemption"


def test_flag_flip_is_seen_within_a_second_without_busy_polling(in_trial: FakeMaster) -> None:
    state = in_trial.state
    with core.init() as ctx:
        # Calling every "batch" for a second costs nothing and asks the master nothing new.
        end = time.monotonic() + 1.0
        calls = 0
        while time.monotonic() < end:
            assert ctx.preempt.should_preempt() is False
            calls += 1
            time.sleep(0.001)
        assert calls > 100
        assert state.count("GET", POLL_PATH) == 1
        polls = [r for r in state.requests if r["path"] == POLL_PATH]
        assert polls[0]["query"]["timeout_seconds"] == ["60"]

        state.preempt.set()
        flipped = time.monotonic()
        while not ctx.preempt.should_preempt():
            assert time.monotonic() - flipped < 1.0, "preemption not seen within a second"
            time.sleep(0.01)
        # Once true it stays true, and the ack is sent once.
        assert all(ctx.preempt.should_preempt() for _ in range(20))
        assert state.count("GET", POLL_PATH) == 1
        assert state.count("POST", ACK_PATH) == 1


def test_no_auto_ack(in_trial: FakeMaster) -> None:
    state = in_trial.state
    state.preempt.set()
    with core.init() as ctx:
        deadline = time.monotonic() + 2
        while not ctx.preempt.should_preempt(auto_ack=False) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ctx.preempt.should_preempt(auto_ack=False) is True
    assert state.count("POST", ACK_PATH) == 0


def test_master_down_is_waited_out_not_hammered(
    in_trial: FakeMaster, caplog: pytest.LogCaptureFixture
) -> None:
    state = in_trial.state
    caplog.set_level(logging.DEBUG, logger="det_hub.core")
    in_trial.stop()
    with core.init() as ctx:
        time.sleep(2.5)
        assert ctx.preempt.should_preempt() is False
        failures = caplog.text.count("preemption poll failed")
        assert 1 <= failures <= 3
        # Backoff 1 s, 2 s, ...: the server was away, so it saw nothing; now bring it back.
        in_trial.start()
        state.preempt.set()
        deadline = time.monotonic() + 6
        while not ctx.preempt.should_preempt() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ctx.preempt.should_preempt() is True
    assert state.count("GET", POLL_PATH) <= 2
