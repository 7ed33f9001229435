"""Properties of both policies over random pools, queues and running allocations.

Snapshots (``scheduler_checks.snapshots``): up to 5 agents of 1-6 slots, some disabled; slots
held at random by running allocations (spanning agents, of mixed priorities and jobs, some not
preemptible, some already stopping, some unknown to the policy); up to 12 requests of 0 to
twice the biggest agent's slots, so that some are split over agents and some can never run.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scheduler_checks import (
    Cluster,
    Snapshot,
    can_ever_run,
    check_decision,
    fits,
    free_after,
    max_capacity,
    queue_key,
    reference_priority,
    snapshots,
)

from det_hub.scheduler import (
    Agent,
    Decision,
    FairShareScheduler,
    PriorityScheduler,
    Request,
    Running,
    Slot,
    fair_shares,
)

PROPERTY = settings(max_examples=500, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
FITS = st.sampled_from(["best", "worst"])


def waiting(snap: Snapshot, decision: Decision) -> list[Request]:
    """Requests left waiting that could run in this pool."""
    started = {a.allocation_id for a in decision.assignments}
    return [r for r in snap.pending
            if r.allocation_id not in started and can_ever_run(snap.agents, r.slots)]


# --- both policies --------------------------------------------------------------------------
@PROPERTY
@given(snap=snapshots(), preemption=st.booleans(), fit=FITS, fair=st.booleans())
def test_decisions_never_overcommit_split_gangs_or_touch_busy_or_disabled_slots(
        snap, preemption, fit, fair) -> None:
    kind = FairShareScheduler if fair else PriorityScheduler
    decision = kind(preemption=preemption, fitting_policy=fit).schedule(
        snap.agents, snap.pending, snap.running)
    check_decision(snap.agents, snap.pending, snap.running, decision, preemption)


@PROPERTY
@given(snap=snapshots(), preemption=st.booleans(), fit=FITS, fair=st.booleans(),
       rng=st.randoms(use_true_random=False))
def test_the_order_of_the_snapshot_does_not_matter(snap, preemption, fit, fair, rng) -> None:
    kind = FairShareScheduler if fair else PriorityScheduler
    policy = kind(preemption=preemption, fitting_policy=fit)
    first = policy.schedule(snap.agents, snap.pending, snap.running)
    agents, pending, running = list(snap.agents), list(snap.pending), list(snap.running)
    for items in (agents, pending, running):
        rng.shuffle(items)
    assert policy.schedule(agents, pending, running) == first


# --- priority -------------------------------------------------------------------------------
@PROPERTY
@given(snap=snapshots(), fit=FITS)
def test_without_preemption_priority_is_the_plain_greedy_scan(snap, fit) -> None:
    decision = PriorityScheduler(fitting_policy=fit).schedule(
        snap.agents, snap.pending, snap.running)
    assert decision.assignments == reference_priority(snap.agents, snap.pending, fit)
    assert decision.preemptions == []


@PROPERTY
@given(snap=snapshots(), preemption=st.booleans(), fit=FITS)
def test_no_waiting_request_could_use_what_less_important_ones_got(
        snap, preemption, fit) -> None:
    """The priority invariant. Take any request W left waiting, and the slots left free after
    the pass, less those reserved for requests ahead of W (waiting for their victims), plus
    every slot given to, or reserved for, a request behind W in the queue: W does not fit
    there. So nothing behind W took anything W could have used, alone or together; no slot
    idles that W could use; and only more important requests' reservations stand in W's way."""
    decision, reserved = PriorityScheduler(preemption=preemption, fitting_policy=fit)._schedule(
        snap.agents, snap.pending, snap.running)
    if not preemption:
        assert reserved == {}
    rank = {r.allocation_id: queue_key(r) for r in snap.pending}
    # Reserved slots are free, given to no one, reserved once, and only for requests that wait.
    free_slots = {(a.id, s.id) for a in snap.agents if a.enabled for s in a.free_slots()}
    free_slots -= {(p.agent_id, s) for a in decision.assignments for p in a.placements
                   for s in p.slot_ids}
    held = [(p.agent_id, s) for ps in reserved.values() for p in ps for s in p.slot_ids]
    assert len(held) == len(set(held)) and set(held) <= free_slots
    assert not set(reserved) & {a.allocation_id for a in decision.assignments}
    final = free_after(snap.agents, decision)
    for placements in reserved.values():
        for p in placements:
            final[p.agent_id] -= len(p.slot_ids)
    top = max_capacity(snap.agents)
    behind_of = [(a.allocation_id, a.placements) for a in decision.assignments]
    behind_of += list(reserved.items())
    for w in waiting(snap, decision):
        free = dict(final)
        for aid, placements in behind_of:
            if rank[aid] > rank[w.allocation_id]:
                for p in placements:
                    free[p.agent_id] += len(p.slot_ids)
        assert not fits(free, top, w.slots), (w, decision, reserved)


@PROPERTY
@given(snap=snapshots(), fit=FITS)
def test_preemption_only_for_more_important_requests_that_wait(snap, fit) -> None:
    decision = PriorityScheduler(preemption=True, fitting_policy=fit).schedule(
        snap.agents, snap.pending, snap.running)
    info = {r.allocation_id: r for r in snap.running}
    left = waiting(snap, decision)
    for aid in decision.preemptions:
        assert any(w.priority < info[aid].priority for w in left), (aid, decision)
    # Each victim is needed for some slot of a waiting request.
    assert len(decision.preemptions) <= sum(w.slots for w in left)


@st.composite
def contested(draw: st.DrawFn) -> tuple[Snapshot, Request]:
    """A snapshot where everything running may be preempted and one request, ``top``, is more
    important than anything else and could run in the pool."""
    snap = draw(snapshots())
    agents = [Agent(a.id, tuple(Slot(s.id, s.kind, None if s.allocation_id == "ghost"
                                     else s.allocation_id) for s in a.slots), a.enabled)
              for a in snap.agents]
    running = [Running(r.allocation_id, r.slots, priority=max(r.priority, 2),
                       queued_at=r.queued_at, group=r.group, preempting=r.preempting)
               for r in snap.running]
    pending = [Request(r.allocation_id, r.slots, priority=max(r.priority, 2),
                       position=r.position, queued_at=r.queued_at)
               for r in snap.pending]
    sizes = [n for n in range(0, 13) if can_ever_run(agents, n)]
    top = Request("top", draw(st.sampled_from(sizes or [0])), priority=1, queued_at=9.0)
    return Snapshot(agents, [*pending, top], running), top


@PROPERTY
@given(case=contested(), fit=FITS)
def test_the_most_important_request_runs_by_the_second_pass(case, fit) -> None:
    """Preemption and reservation together: whatever the pool holds, the most important
    request gets room in one pass and starts in the next, once its victims have left."""
    snap, top = case
    if not can_ever_run(snap.agents, top.slots):
        return
    policy = PriorityScheduler(preemption=True, fitting_policy=fit)
    first = policy.schedule(snap.agents, snap.pending, snap.running)
    if "top" in {a.allocation_id for a in first.assignments}:
        return
    # Carry the first pass out: starts hold their slots, victims and those already stopping
    # are gone.
    gone = set(first.preemptions) | {r.allocation_id for r in snap.running if r.preempting}
    holder = {(p.agent_id, s): a.allocation_id
              for a in first.assignments for p in a.placements for s in p.slot_ids}
    agents = [Agent(a.id, tuple(
        Slot(s.id, s.kind, holder.get((a.id, s.id),
                                      None if s.allocation_id in gone else s.allocation_id))
        for s in a.slots), a.enabled) for a in snap.agents]
    started = {a.allocation_id for a in first.assignments}
    by_id = {r.allocation_id: r for r in snap.pending}
    running = [r for r in snap.running if r.allocation_id not in gone]
    running += [Running(aid, by_id[aid].slots, priority=by_id[aid].priority) for aid in started]
    pending = [r for r in snap.pending if r.allocation_id not in started]
    second = policy.schedule(agents, pending, running)
    assert second.assignments and second.assignments[0].allocation_id == "top"


# --- fair share -----------------------------------------------------------------------------
def water_level_shares(demands: dict[str, float], weights: dict[str, float],
                       capacity: float) -> dict[str, float]:
    """Max-min fair shares by bisection on the water level: share = min(demand, level * w)."""
    if sum(demands.values()) <= capacity:
        return dict(demands)
    lo, hi = 0.0, capacity / min(weights.values()) + 1
    for _ in range(200):
        mid = (lo + hi) / 2
        if sum(min(d, mid * weights[g]) for g, d in demands.items()) > capacity:
            hi = mid
        else:
            lo = mid
    return {g: min(d, lo * weights[g]) for g, d in demands.items()}


@settings(max_examples=300, deadline=None)
@given(demands=st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 20), min_size=1),
       weights=st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=6, max_size=6),
       capacity=st.integers(0, 60))
def test_fair_shares_fill_the_pool_by_weight(demands, weights, capacity) -> None:
    w = dict(zip("abcdef", weights, strict=True))
    shares = fair_shares(demands, w, capacity)
    expected = water_level_shares(demands, {g: w[g] for g in demands}, capacity)
    for g in demands:
        assert abs(shares[g] - expected[g]) < 1e-6
        assert -1e-9 <= shares[g] <= demands[g] + 1e-9
    assert abs(sum(shares.values()) - min(capacity, sum(demands.values()))) < 1e-6


def jobs_of(snap: Snapshot) -> tuple[dict[str, float], dict[str, float]]:
    """Each job's share (independently computed) and the slots it holds, not stopping."""
    def job(r: Request | Running) -> str:
        return r.group or "solo-" + r.allocation_id

    demand: dict[str, float] = {}
    weight: dict[str, float] = {}
    held: dict[str, float] = {}
    for r in snap.running:
        demand[job(r)] = demand.get(job(r), 0) + r.slots
        weight[job(r)] = r.weight
        held[job(r)] = held.get(job(r), 0) + (0 if r.preempting else r.slots)
    for q in snap.pending:
        if can_ever_run(snap.agents, q.slots):
            demand[job(q)] = demand.get(job(q), 0) + q.slots
            weight[job(q)] = q.weight
    pool = sum(len(a.slots) for a in snap.agents if a.enabled)
    return water_level_shares(demand, weight, pool), held


@PROPERTY
@given(snap=snapshots(), fit=FITS)
def test_fair_share_preempts_only_jobs_above_their_share_for_jobs_below(snap, fit) -> None:
    """Victims belong to jobs that hold more than their share, counting what they start or
    are given room for in the same pass; and only while a job below its share waits."""
    decision, reserved = FairShareScheduler(fitting_policy=fit)._schedule(
        snap.agents, snap.pending, snap.running)
    shares, before = jobs_of(snap)
    by_id = {r.allocation_id: r for r in [*snap.pending, *snap.running]}

    def job(aid: str) -> str:
        return by_id[aid].group or "solo-" + aid

    # Room went to jobs that were below their share.
    assert all(before.get(job(aid), 0) < shares[job(aid)] - 1e-9 for aid in reserved)
    if decision.preemptions:
        assert reserved
    held = dict(before)
    for aid in [*(a.allocation_id for a in decision.assignments), *reserved]:
        held[job(aid)] = held.get(job(aid), 0) + by_id[aid].slots
    for aid in decision.preemptions:
        assert held[job(aid)] > shares[job(aid)] + 1e-9, (aid, held, shares)


@PROPERTY
@given(snap=snapshots(), preemption=st.booleans(), fit=FITS)
def test_fair_share_leaves_no_slot_idle_that_a_waiting_request_could_use(
        snap, preemption, fit) -> None:
    """No request waits that fits in the free slots nobody was given room in."""
    decision, reserved = FairShareScheduler(preemption=preemption, fitting_policy=fit)._schedule(
        snap.agents, snap.pending, snap.running)
    if not preemption:
        assert reserved == {}
    free_slots = {(a.id, s.id) for a in snap.agents if a.enabled for s in a.free_slots()}
    free_slots -= {(p.agent_id, s) for a in decision.assignments for p in a.placements
                   for s in p.slot_ids}
    held = [(p.agent_id, s) for ps in reserved.values() for p in ps for s in p.slot_ids]
    assert len(held) == len(set(held)) and set(held) <= free_slots
    assert not set(reserved) & {a.allocation_id for a in decision.assignments}
    final = free_after(snap.agents, decision)
    for agent_id, _ in held:
        final[agent_id] -= 1
    top = max_capacity(snap.agents)
    for w in waiting(snap, decision):
        assert not fits(final, top, w.slots), w


@settings(max_examples=100, deadline=None)
@given(caps=st.lists(st.sampled_from([4, 8]), min_size=1, max_size=4),
       jobs=st.lists(st.tuples(st.sampled_from([1.0, 2.0, 3.0]), st.sampled_from([1, 2, 4]),
                               st.integers(0, 3)), min_size=2, max_size=4))
def test_fair_share_converges_to_the_shares(caps, jobs) -> None:
    """Jobs with more work than the pool arrive over time; a preempted allocation stops in the
    next pass and queues again. After some passes every job holds its share of the pool
    (weight / total weight x slots) to within one request, and no slot is idle that a
    request could use."""
    cluster = Cluster({f"x{i}": c for i, c in enumerate(caps)})
    pool = sum(caps)
    names = [f"j{i}" for i in range(len(jobs))]
    policy = FairShareScheduler()
    for step in range(16):
        for name, (weight, size, arrives) in zip(names, jobs, strict=True):
            if step >= arrives:
                while sum(r.slots for r in cluster.pending.values() if r.group == name) < pool:
                    cluster.submit(name, size, weight)
        decision = cluster.step(policy)
    assert decision.preemptions == [] and decision.assignments == []  # at rest
    total = sum(w for w, _, _ in jobs)
    held = cluster.held_by(names)
    biggest = max(size for _, size, _ in jobs)
    for name, (weight, _, _) in zip(names, jobs, strict=True):
        share = weight / total * pool
        assert abs(held[name] - share) <= biggest, (held, name, share)
    free = {f"x{i}": c for i, c in enumerate(caps)}
    for h in cluster.held.values():
        for agent_id, slot_ids in h.placements:
            free[agent_id] -= len(slot_ids)
    assert not any(fits(free, max(caps), size) for _, size, _ in jobs)
