"""bench/scheduler_scale.py run small: the snapshot it times is the one its docstring describes,
the decisions it times are sound, and the figures it prints add up. No assertion on time."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import scheduler_scale as bench  # noqa: E402

from det_hub.scheduler import Assignment, Decision, Placement  # noqa: E402

AGENTS, SLOTS, PENDING = 20, 8, 200


@pytest.fixture(scope="module")
def snapshot() -> bench.Snapshot:
    return bench.make_snapshot(AGENTS, SLOTS, PENDING, busy=0.5, seed=0)


def test_the_snapshot_is_as_described(snapshot) -> None:
    assert len(snapshot.agents) == AGENTS
    assert all(len(a.slots) == SLOTS for a in snapshot.agents)
    assert len(snapshot.pending) == PENDING
    assert {r.slots for r in snapshot.pending} == set(bench.SIZES)
    # Running allocations hold exactly the slots the agents say they hold.
    held: dict[str, int] = {}
    for a in snapshot.agents:
        for s in a.slots:
            if s.allocation_id is not None:
                held[s.allocation_id] = held.get(s.allocation_id, 0) + 1
    assert held == {r.allocation_id: r.slots for r in snapshot.running}
    # About half the pool is busy, by allocations of mixed priorities, some not preemptible.
    assert 0.4 * AGENTS * SLOTS <= snapshot.busy_slots <= 0.5 * AGENTS * SLOTS
    assert len({r.priority for r in snapshot.running}) >= 3
    assert any(not r.preemptible for r in snapshot.running)
    # Trials of one experiment share its group, priority, weight and place in the queue.
    by_group: dict[str, set] = {}
    for r in [*snapshot.pending, *snapshot.running]:
        if r.group:
            by_group.setdefault(r.group, set()).add((r.priority, r.weight, r.position, r.slots))
    assert all(len(v) == 1 for v in by_group.values())
    again = bench.make_snapshot(AGENTS, SLOTS, PENDING, busy=0.5, seed=0)
    assert again == snapshot


def test_the_check_catches_unsound_decisions(snapshot) -> None:
    busy = next((a.id, s.id) for a in snapshot.agents for s in a.slots if s.allocation_id)
    free = next((a.id, s.id) for a in snapshot.agents for s in a.slots if not s.allocation_id)
    one = next(r for r in snapshot.pending if r.slots == 1)
    two = next(r for r in snapshot.pending if r.slots == 2)
    bad = [
        Decision([Assignment(one.allocation_id, (Placement(busy[0], (busy[1],)),))]),
        Decision([Assignment(two.allocation_id, (Placement(free[0], (free[1],)),))]),
        Decision([Assignment(one.allocation_id, (Placement(free[0], (free[1],)),)),
                  Assignment(two.allocation_id, (Placement(free[0], (free[1], free[1])),))]),
        Decision(preemptions=[next(r.allocation_id for r in snapshot.running
                                   if not r.preemptible)]),
    ]
    for decision in bad:
        with pytest.raises(AssertionError):
            bench.check(snapshot, decision)


def test_every_policy_decides_soundly_and_fills_the_pool(snapshot) -> None:
    rows = bench.measure(snapshot, repeats=2)
    assert [(r.policy, r.scenario) for r in rows] == [(p, s) for p, s, _ in bench.POLICIES]
    free = AGENTS * SLOTS - snapshot.busy_slots
    for row in rows:
        assert len(row.times_ms) == 2 and all(t > 0 for t in row.times_ms)
        assert row.p90 >= row.median > 0
        assert 0 < row.assigned <= PENDING
        # Far more is asked for than is free: without preemption every free slot is taken
        # (the queue has requests of 1 slot); with it, some are kept for requests whose
        # victims have yet to leave.
        if "no preemption" in row.scenario:
            assert row.slots == free and row.preempted == 0
        else:
            assert row.slots <= free and row.preempted > 0


def test_main_prints_the_table(capsys) -> None:
    assert bench.main(["--agents", str(AGENTS), "--pending", str(PENDING),
                       "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    header = re.search(r"(\d+) agents x (\d+) slots, ([\d,]+) slots held by ([\d,]+) running "
                       r"allocations, ([\d,]+) pending", out)
    assert header is not None
    agents, slots, held, _, pending = (int(x.replace(",", "")) for x in header.groups())
    assert (agents, slots, pending) == (AGENTS, SLOTS, PENDING)
    rows = re.findall(r"^(priority|fair_share)\s+(.+?)\s+([\d.]+)\s+([\d.]+)\s+([\d,]+)\s+"
                      r"([\d,]+)\s+([\d,]+)$", out, re.MULTILINE)
    assert [(p, s) for p, s, *_ in rows] == [(p, s) for p, s, _ in bench.POLICIES]
    for _, scenario, median, p90, assigned, got, preempted in rows:
        assert float(p90) >= float(median) > 0
        assert 0 < int(assigned) <= int(got) <= agents * slots - held
        assert (int(preempted) == 0) == ("no preemption" in scenario)


def test_rows_report_median_and_p90() -> None:
    row = bench.Row("priority", "x", [float(i) for i in range(1, 11)], 1, 1, 0)
    assert row.median == 5.5
    assert row.p90 == pytest.approx(9.1)
    assert dataclasses.replace(row, times_ms=[3.0]).p90 == 3.0
