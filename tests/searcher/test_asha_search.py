"""async_halving and adaptive_asha driven through whole searches by a fake master."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from search_driver import Driver, quadratic

from det_hub import nonfinite
from det_hub.searcher import (
    AsyncHalvingSearch,
    Create,
    SearchMethod,
    Shutdown,
    Stop,
    ValidateAfter,
    build_search_method,
)

SPACE = {
    "x": {"type": "double", "minval": 0.0, "maxval": 1.0},
    "opt": {"name": "sgd", "momentum": {"type": "categorical", "vals": [0.0, 0.9]}},
}


def config(**searcher: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "adaptive_asha",
        "metric": "loss",
        "max_trials": 100,
        "max_length": {"batches": 1000},
    }
    return {**base, **searcher}


def method(seed: int = 0, **searcher: Any) -> AsyncHalvingSearch:
    built = build_search_method(config(**searcher), SPACE, seed)
    assert isinstance(built, AsyncHalvingSearch)
    return built


def creates(actions: list[Any]) -> list[str]:
    return [a.request_id for a in actions if isinstance(a, Create)]


def concurrency(m: AsyncHalvingSearch) -> int:
    return sum(b["max_concurrent_trials"] for b in m.rung_table()["brackets"])


def check_finished(driver: Driver, failure: bool = False) -> None:
    """Shut down exactly once, last; every trial closed; progress monotone up to 1."""
    assert driver.shutdowns == [Shutdown(failure=failure)]
    assert isinstance(driver.actions[-1], Shutdown)
    assert all(t.closed for t in driver.created)
    assert all(b <= a + 1e-12 for b, a in zip(driver.progress, driver.progress[1:], strict=False))
    shutdown_at = next(i for i, p in enumerate(driver.progress) if p == 1.0)
    assert all(p <= 0.99 for p in driver.progress[:shutdown_at])
    assert driver.progress[-1] == 1.0


# --- whole searches ---------------------------------------------------------------------
@pytest.mark.parametrize("stop_once", [True, False])
def test_progress_never_runs_ahead_of_the_trials_created(stop_once: bool) -> None:
    """16 trials, 2 at a time, as in Determined's aggressive mode with one bracket: a search
    that still has trials to create shows at most the share it created, though the plan's
    estimate of its work is overrun (stop_once continues more trials past a rung than the
    plan assumes)."""
    m = method(max_trials=16, max_concurrent_trials=2, stop_once=stop_once, mode="aggressive",
               max_rungs=3, divisor=4)
    driver = Driver(m, validate_every=50 if stop_once else None, seed=2).run()
    check_finished(driver)
    for progress, created in zip(driver.progress, driver.created_then, strict=True):
        if created < 16:
            assert progress <= created / 16 + 1e-12


@pytest.mark.parametrize("stop_once", [True, False])
def test_the_worked_example_runs_every_trial_once_and_shuts_down(stop_once: bool) -> None:
    m = method(stop_once=stop_once)
    driver = Driver(m, validate_every=50 if stop_once else None, seed=1).run()
    check_finished(driver)
    assert len(driver.created) == 100
    assert driver.max_training <= concurrency(m) == 16
    table = driver.method.rung_table()  # type: ignore[attr-defined]
    for bracket, trials in zip(table["brackets"], (70, 22, 8), strict=True):
        assert bracket["trials_created"] == trials
        bottom, top = bracket["rungs"][0], bracket["rungs"][-1]
        assert bottom["reported"] == trials  # every trial has a bottom-rung result
        assert 1 <= top["reported"] < trials  # a few reach max_length
        for lower, upper in zip(bracket["rungs"], bracket["rungs"][1:], strict=False):
            # Exactly the trials promoted (or continued) past a rung report at the next.
            assert upper["reported"] == lower["promoted"]
            promoted = {r["request_id"] for r in lower["results"] if r["promoted"]}
            assert set(upper["request_ids"]) == promoted
    json.dumps(table, allow_nan=False)


def test_trials_train_only_as_far_as_their_rung_lets_them() -> None:
    driver = Driver(method(stop_once=False), seed=2).run()
    table = driver.method.rung_table()  # type: ignore[attr-defined]
    for bracket in table["brackets"]:
        lengths = [r["length"] for r in bracket["rungs"]]
        for index, rung in enumerate(bracket["rungs"]):
            for result in rung["results"]:
                trial = driver.trials[result["request_id"]]
                highest = max(
                    i
                    for i, r in enumerate(bracket["rungs"])
                    if trial.request_id in r["request_ids"]
                )
                if index == highest:
                    # Trained exactly to its highest rung, reported once per rung reached.
                    assert trial.done == lengths[index]
                    assert [length for length, _ in trial.reports] == lengths[: index + 1]


@pytest.mark.parametrize("stop_once", [True, False])
@pytest.mark.parametrize("max_concurrent", [0, 1, 3, 40])
def test_concurrency_is_never_exceeded(stop_once: bool, max_concurrent: int) -> None:
    m = method(stop_once=stop_once, max_trials=40, max_concurrent_trials=max_concurrent)
    driver = Driver(m, validate_every=25, seed=max_concurrent).run()
    check_finished(driver)
    assert len(driver.created) == 40
    assert driver.max_training <= concurrency(m)


@pytest.mark.parametrize("smaller_is_better", [True, False])
def test_the_best_trial_reaches_the_top(smaller_is_better: bool) -> None:
    def score(hparams: Mapping[str, Any], length: int) -> float:
        loss = quadratic(hparams, length)
        return loss if smaller_is_better else -loss

    m = method(
        mode="aggressive", max_trials=64, stop_once=False, smaller_is_better=smaller_is_better
    )
    driver = Driver(m, score=score, seed=4).run()
    check_finished(driver)
    best = min(driver.created, key=lambda t: abs(float(t.hparams["x"]) - 0.3))
    top = driver.method.rung_table()["brackets"][0]["rungs"][-1]  # type: ignore[attr-defined]
    assert best.request_id in top["request_ids"]
    assert top["best_metric"] == pytest.approx(score(best.hparams, 1000))


# --- stop_once: true, step by step -----------------------------------------------------
def async_halving(**searcher: Any) -> AsyncHalvingSearch:
    built = build_search_method(
        {
            "name": "async_halving",
            "metric": "loss",
            "max_trials": 10,
            "num_rungs": 3,
            "divisor": 3,
            "time_metric": "batches",
            "max_time": 900,
            "max_concurrent_trials": 3,
            **searcher,
        },
        SPACE,
        0,
    )
    assert isinstance(built, AsyncHalvingSearch)
    return built


def test_stop_once_stops_all_but_the_leader_as_determined_does() -> None:
    # Determined's asha_stopping_test.go TestASHAStopping: rungs 100, 300, 900; 10 trials, 3 at
    # a time, each reporting a worse metric at 100 than the last. Only the first continues.
    m = async_halving()
    actions = m.initial_actions()
    assert [type(a) for a in actions] == [Create, ValidateAfter] * 3
    assert all(a.length == 900 for a in actions if isinstance(a, ValidateAfter))
    queue, first, metric, stopped = creates(actions), creates(actions)[0], 1.0, []
    while queue:
        request_id = queue.pop(0)
        metric += 1
        out = m.on_validation(request_id, metric, 100)
        stopped += [a.request_id for a in out if isinstance(a, Stop)]
        queue += creates(out)
    assert len(stopped) == 9 and first not in stopped
    assert m.trials_created == 10
    for request_id in stopped:
        assert m.on_trial_closed(request_id) == []
    assert m.on_validation(first, metric, 300) == []
    assert m.on_validation(first, metric, 900) == []  # the top rung: it ends by itself
    assert m.on_trial_closed(first) == [Shutdown(failure=False)]
    rungs = m.rung_table()["brackets"][0]["rungs"]
    assert [(r["length"], r["reported"], r["promoted"]) for r in rungs] == [
        (100, 10, 1),
        (300, 1, 1),
        (900, 1, 0),
    ]
    assert rungs[0]["best_metric"] == 2.0 and rungs[0]["request_ids"][0] == first


def test_one_report_can_pass_several_rungs_and_counts_where_it_is_long_enough() -> None:
    m = async_halving()
    a, b, c = creates(m.initial_actions())
    assert m.on_validation(a, 0.5, 150) == []  # past 100: ranked there, continues
    # Past 100, 300 and 900 in one report: b is done, and its slot goes to a new trial.
    assert len(creates(m.on_validation(b, 0.4, 950))) == 1
    rungs = m.rung_table()["brackets"][0]["rungs"]
    assert [r["request_ids"] for r in rungs] == [[b, a], [b], [b]]
    assert m.target_length(a) == 900 and not m.is_waiting(a)
    # c's 0.6 at 120 is third of three at rung 100: keep max(int(3 / 3), 1) = 1 -> stopped.
    out = m.on_validation(c, 0.6, 120)
    assert out[0] == Stop(c) and len(creates(out)) == 1
    assert m.on_validation(c, 0.1, 300) == []  # after the stop: ignored


# --- stop_once: false, step by step ----------------------------------------------------
def test_promotion_waits_then_promotes_when_another_result_makes_room() -> None:
    m = async_halving(stop_once=False, divisor=2, num_rungs=2, max_trials=3, max_time=100)
    a, b, c = creates(m.initial_actions())
    assert m.target_length(a) == 50
    # First result: int(1/2) = 0 may be promoted, so a waits.
    assert m.on_validation(a, 0.5, 50) == []
    assert m.is_waiting(a)
    # Second, worse: now int(2/2) = 1 should be promoted and that is a, promoted late.
    assert m.on_validation(b, 0.9, 50) == [ValidateAfter(a, 100)]
    assert not m.is_waiting(a) and m.is_waiting(b) and m.target_length(a) == 100
    # Third, best: int(3/2) = 1, c ranks first -> promoted at once. Every trial has a bottom
    # result and none still trains there, so b can never be promoted: it is stopped.
    assert m.on_validation(c, 0.1, 50) == [ValidateAfter(c, 100), Stop(b)]
    assert m.on_trial_closed(b) == []
    assert m.on_validation(a, 0.4, 100) == []
    assert m.on_validation(c, 0.05, 100) == []
    assert m.on_trial_closed(a) == []
    assert m.on_trial_closed(c) == [Shutdown(failure=False)]


DETERMINED_ADAPTIVE_EXAMPLE: dict[str, Any] = {
    "max_trials": 5,
    "max_length": {"batches": 900},
    "max_rungs": 2,
    "divisor": 3,
    "max_concurrent_trials": 5,
    "stop_once": False,
}


def test_promotion_matches_determined_adaptive_example() -> None:
    # Determined's adaptive_asha_test.go: 900 batches, 5 trials, standard, max_rungs 2,
    # divisor 3. Bracket 0 (rungs 300, 900) gets the trials with 0.1, 0.2 and 0.3: only 0.1
    # goes on to 900. Bracket 1 (one rung of 900) trains its 2 trials to 900.
    m = method(**DETERMINED_ADAPTIVE_EXAMPLE)
    actions = m.initial_actions()
    targets = {a.request_id: a.length for a in actions if isinstance(a, ValidateAfter)}
    t1, t2, t3, t4, t5 = creates(actions)
    assert [targets[t] for t in (t1, t2, t3, t4, t5)] == [300, 300, 300, 900, 900]
    assert m.on_validation(t1, 0.1, 300) == []
    assert m.on_validation(t2, 0.2, 300) == []
    assert m.on_validation(t3, 0.3, 300) == [ValidateAfter(t1, 900), Stop(t2), Stop(t3)]
    for request_id, metric in ((t4, 0.4), (t5, 0.5), (t1, 0.1)):
        assert m.on_validation(request_id, metric, 900) == []
    for request_id in (t2, t3, t4, t5):
        assert m.on_trial_closed(request_id) == []
    assert m.on_trial_closed(t1) == [Shutdown(failure=False)]


def test_an_errored_trial_takes_the_worst_result_and_is_never_trained_on() -> None:
    # The same example with t2 erroring before its rung result: the rung still fills (0.1,
    # 0.3, worst) and 0.1 is still the one promoted.
    m = method(**DETERMINED_ADAPTIVE_EXAMPLE)
    t1, t2, t3, _, _ = creates(m.initial_actions())
    assert m.on_validation(t1, 0.1, 300) == []
    assert m.on_trial_exited_early(t2, "ERRORED") == []
    assert m.on_validation(t3, 0.3, 300) == [ValidateAfter(t1, 900), Stop(t3)]
    rung = m.rung_table()["brackets"][0]["rungs"][0]
    assert [r["request_id"] for r in rung["results"]] == [t1, t3, t2]
    assert rung["results"][-1] == {"request_id": t2, "metric": None, "promoted": False}


def test_an_exited_trial_that_gets_promoted_passes_the_worst_result_up() -> None:
    # Rungs 100, 200, 400 with divisor 2. a reports first and waits; its user then stops it.
    # b's worse result makes one promotion due, and a ranks first: as a is gone, it becomes
    # rung 1's worst result instead of training on (Determined's recursion does the same).
    m = async_halving(stop_once=False, divisor=2, num_rungs=3, max_trials=4, max_time=400)
    a, b, _ = creates(m.initial_actions())
    assert len(creates(m.on_validation(a, 0.1, 100))) == 1  # a waits; its slot goes to a 4th
    assert m.is_waiting(a)
    assert m.on_trial_exited_early(a, "USER_REQUESTED_STOP") == []
    assert m.on_validation(b, 0.2, 100) == []
    rungs = m.rung_table()["brackets"][0]["rungs"]
    assert rungs[0]["results"][0] == {"request_id": a, "metric": 0.1, "promoted": True}
    assert rungs[1]["results"] == [{"request_id": a, "metric": None, "promoted": False}]
    assert m.is_waiting(b)


def test_a_stopped_trial_is_never_given_a_new_target() -> None:
    # Rungs 50, 100; divisor 2; two trials. b's result promotes a; b can never be promoted and
    # is stopped. Then a turns out INVALID_HP: its bottom result goes, a third trial c replaces
    # it, and c's result makes one promotion due again -- of b, which is being stopped: it
    # counts as the worst top result instead of training on.
    m = async_halving(
        stop_once=False, divisor=2, num_rungs=2, max_trials=2, max_concurrent_trials=2, max_time=100
    )
    a, b = creates(m.initial_actions())
    assert m.on_validation(a, 0.5, 50) == []
    assert m.on_validation(b, 0.9, 50) == [ValidateAfter(a, 100), Stop(b)]
    [c] = creates(m.on_trial_exited_early(a, "INVALID_HP"))
    assert m.on_validation(c, 0.95, 50) == [Stop(c)]
    top = m.rung_table()["brackets"][0]["rungs"][1]
    assert top["results"] == [{"request_id": b, "metric": None, "promoted": False}]
    assert m.on_trial_closed(b) == []
    assert m.on_trial_closed(c) == [Shutdown(failure=False)]


def test_a_report_past_the_next_rung_counts_there_when_promoted() -> None:
    # a trained past its target (to 120) before reporting; when promoted it already has a
    # result for the top rung (100), so it is done: stopped where it waits, not retrained.
    m = async_halving(
        stop_once=False, divisor=2, num_rungs=2, max_trials=2, max_concurrent_trials=2, max_time=100
    )
    a, b = creates(m.initial_actions())
    assert m.on_validation(a, 0.1, 120) == []
    assert m.is_waiting(a)
    assert m.on_validation(b, 0.9, 50) == [Stop(a), Stop(b)]
    top = m.rung_table()["brackets"][0]["rungs"][1]
    assert top["results"] == [{"request_id": a, "metric": 0.1, "promoted": False}]


# --- exits ------------------------------------------------------------------------------
def fault_on(indices: Mapping[int, str], at_least: int = 0) -> Any:
    def fault(index: int, hparams: Mapping[str, Any], length: int) -> str | None:
        return indices.get(index) if length >= at_least else None

    return fault


@pytest.mark.parametrize("stop_once", [True, False])
def test_invalid_hyperparameters_are_replaced_without_counting(stop_once: bool) -> None:
    m = method(stop_once=stop_once, max_trials=30, max_concurrent_trials=4)
    driver = Driver(m, validate_every=100, fault=fault_on({0: "INVALID_HP", 5: "INVALID_HP"}))
    driver.run()
    check_finished(driver)
    assert len(driver.created) == 32
    table = driver.method.rung_table()  # type: ignore[attr-defined]
    assert sum(b["trials_created"] for b in table["brackets"]) == 30
    assert sum(b["trials_invalid"] for b in table["brackets"]) == 2
    invalid = {driver.created[0].request_id, driver.created[5].request_id}
    for bracket in table["brackets"]:
        for rung in bracket["rungs"]:
            assert not invalid & set(rung["request_ids"])
    assert driver.max_training <= concurrency(m)


@pytest.mark.parametrize("stop_once", [True, False])
def test_errored_trials_count_as_done_with_the_worst_result(stop_once: bool) -> None:
    errored = {i: "ERRORED" for i in range(0, 30, 3)}
    m = method(stop_once=stop_once, max_trials=30, max_concurrent_trials=4)
    driver = Driver(m, validate_every=100, fault=fault_on(errored)).run()
    check_finished(driver)
    assert len(driver.created) == 30
    table = driver.method.rung_table()  # type: ignore[attr-defined]
    worst = [
        r["request_id"]
        for b in table["brackets"]
        for rung in b["rungs"]
        for r in rung["results"]
        if r["metric"] is None
    ]
    errored_ids = {driver.created[i].request_id for i in errored}
    assert set(worst) >= errored_ids
    for b in table["brackets"]:
        for rung in b["rungs"]:
            for r in rung["results"]:
                if r["metric"] is None:
                    # A worst result is last in its rung (behind every real result).
                    assert rung["results"].index(r) >= sum(
                        1 for x in rung["results"] if x["metric"] is not None
                    )
    # They never trained past the point where they failed.
    for index in errored:
        trial = driver.created[index]
        assert trial.exit_reason == "ERRORED" and trial.reports == []


@pytest.mark.parametrize("stop_once", [True, False])
def test_a_search_where_every_trial_errors_fails(stop_once: bool) -> None:
    m = method(stop_once=stop_once, max_trials=12, max_concurrent_trials=3)
    driver = Driver(m, fault=lambda index, hparams, length: "ERRORED").run()
    check_finished(driver, failure=True)
    assert len(driver.created) == 12


@pytest.mark.parametrize("stop_once", [True, False])
def test_user_requested_stop_is_a_close_not_a_failure(stop_once: bool) -> None:
    m = method(stop_once=stop_once, max_trials=12, max_concurrent_trials=3)
    driver = Driver(m, fault=lambda index, hparams, length: "USER_REQUESTED_STOP").run()
    check_finished(driver, failure=False)
    assert len(driver.created) == 12


# --- determinism and restarts -----------------------------------------------------------
RESTART_CASES = [
    {"stop_once": True},
    {"stop_once": False},
    {"stop_once": False, "smaller_is_better": False, "mode": "conservative"},
    {"stop_once": True, "max_concurrent_trials": 0, "max_trials": 20},
    {"name": "async_halving", "num_rungs": 3, "stop_once": False, "divisor": 2},
    {"name": "async_halving", "num_rungs": 4, "stop_once": True, "divisor": 3},
]


def run_search(searcher: Mapping[str, Any], seed: int, restart: bool) -> Driver:
    full = config(**{"max_trials": 30, "max_concurrent_trials": 5, **searcher})

    def fresh() -> SearchMethod:
        return build_search_method(full, SPACE, seed)

    faults = fault_on({1: "ERRORED", 4: "INVALID_HP", 7: "USER_REQUESTED_STOP"}, at_least=100)
    driver = Driver(
        fresh(), validate_every=60, fault=faults, seed=seed, rebuild=fresh if restart else None
    )
    return driver.run()


@pytest.mark.parametrize("searcher", RESTART_CASES)
def test_restoring_after_every_event_continues_exactly(searcher: dict[str, Any]) -> None:
    straight = run_search(searcher, seed=5, restart=False)
    restarted = run_search(searcher, seed=5, restart=True)
    check_finished(straight)
    assert restarted.actions == straight.actions
    assert restarted.progress == straight.progress


def test_same_seed_same_search_other_seed_other_hparams() -> None:
    a = run_search({"stop_once": False}, seed=3, restart=False)
    b = run_search({"stop_once": False}, seed=3, restart=False)
    c = run_search({"stop_once": False}, seed=4, restart=False)
    assert a.actions == b.actions
    hparams = [t.hparams for t in a.created]
    assert hparams != [t.hparams for t in c.created]
    assert len({json.dumps(h, sort_keys=True) for h in hparams}) == len(hparams)


def test_events_for_unknown_or_closed_trials_change_nothing() -> None:
    m = method(max_trials=4)
    first = creates(m.initial_actions())[0]
    state = m.snapshot()
    assert m.on_validation("nope", 1.0, 10) == []
    assert m.on_trial_closed("nope") == []
    assert m.snapshot() == state
    m.on_trial_exited_early(first, "ERRORED")
    state = m.snapshot()
    assert m.on_trial_closed(first) == []
    assert m.on_validation(first, 0.1, 1000) == []
    assert m.snapshot() == state
    assert m.target_length("nope") is None and not m.is_waiting("nope")


def test_restore_refuses_a_state_with_other_brackets() -> None:
    state = method(mode="conservative").snapshot()
    with pytest.raises(ValueError, match="different number of brackets"):
        method(mode="aggressive").restore(state)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["adaptive_asha", "async_halving"]),
    stop_once=st.booleans(),
    max_trials=st.integers(1, 25),
    max_length=st.integers(1, 300),
    divisor=st.integers(2, 5),
    num_rungs=st.integers(1, 4),
    mode=st.sampled_from(["aggressive", "standard", "conservative"]),
    max_concurrent=st.integers(0, 6),
    validate_every=st.none() | st.integers(1, 120),
    faults=st.dictionaries(
        st.integers(0, 30), st.sampled_from(["ERRORED", "INVALID_HP", "USER_REQUESTED_STOP"])
    ),
    seed=st.integers(0, 3),
)
def test_any_search_ends_cleanly(
    name: str,
    stop_once: bool,
    max_trials: int,
    max_length: int,
    divisor: int,
    num_rungs: int,
    mode: str,
    max_concurrent: int,
    validate_every: int | None,
    faults: dict[int, str],
    seed: int,
) -> None:
    m = method(
        seed,
        name=name,
        stop_once=stop_once,
        max_trials=max_trials,
        max_length={"batches": max_length},
        divisor=divisor,
        num_rungs=num_rungs,
        mode=mode,
        max_concurrent_trials=max_concurrent,
    )
    driver = Driver(m, validate_every=validate_every, fault=fault_on(faults), seed=seed).run()
    errored = [t for t in driver.created if t.exit_reason == "ERRORED"]
    check_finished(driver, failure=len(errored) == len(driver.created))
    invalid = sum(1 for t in driver.created if t.exit_reason == "INVALID_HP")
    table = driver.method.rung_table()  # type: ignore[attr-defined]
    assert len(driver.created) - invalid == sum(b["max_trials"] for b in table["brackets"])
    assert driver.max_training <= concurrency(m)
    for trial in driver.created:
        assert trial.done <= max(max_length, trial.target or 0)


# --- NaN and infinite metrics -------------------------------------------------------------
@pytest.mark.parametrize("smaller_is_better", [True, False])
def test_a_nan_result_is_the_worst_of_its_rung_and_is_not_promoted(
        smaller_is_better: bool) -> None:
    m = build_search_method(
        {"name": "async_halving", "metric": "loss", "smaller_is_better": smaller_is_better,
         "num_rungs": 2, "divisor": 2, "max_trials": 2, "max_concurrent_trials": 2,
         "stop_once": False, "max_length": {"batches": 100}},
        SPACE, 0)
    ids = creates(m.initial_actions())
    assert len(ids) == 2
    for rid in ids:
        m.on_trial_created(rid)
    bottom = m.target_length(ids[0])
    assert bottom is not None and bottom < 100
    # Even the metric that would lose on value alone beats a NaN.
    worse = 1e9 if smaller_is_better else -1e9
    first = m.on_validation(ids[0], float("nan"), bottom)
    assert not any(isinstance(a, ValidateAfter) for a in first)
    actions = first + m.on_validation(ids[1], worse, bottom)
    promoted = [a.request_id for a in actions if isinstance(a, ValidateAfter)]
    assert promoted == [ids[1]]
    assert m.target_length(ids[1]) == 100
    results = m.rung_table()["brackets"][0]["rungs"][0]["results"]  # type: ignore[attr-defined]
    assert [r["request_id"] for r in results] == [ids[1], ids[0]]
    assert results[1]["metric"] is None


def test_infinities_compare_as_numbers_and_survive_a_snapshot() -> None:
    space = {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}}
    m = build_search_method(
        {"name": "async_halving", "metric": "loss", "num_rungs": 2, "divisor": 2,
         "max_trials": 2, "max_concurrent_trials": 2, "stop_once": False,
         "max_length": {"batches": 100}}, space, 0)
    ids = creates(m.initial_actions())
    for rid in ids:
        m.on_trial_created(rid)
    bottom = m.target_length(ids[0])
    assert bottom is not None
    m.on_validation(ids[0], 5.0, bottom)
    # Smaller is better: minus infinity is the best result there is.
    actions = m.on_validation(ids[1], float("-inf"), bottom)
    assert [a.request_id for a in actions if isinstance(a, ValidateAfter)] == [ids[1]]
    # Stored as JSON (the store writes infinities as "Infinity" strings) and restored.
    state = nonfinite.loads_strict(nonfinite.dumps(m.snapshot()))
    again = build_search_method(
        {"name": "async_halving", "metric": "loss", "num_rungs": 2, "divisor": 2,
         "max_trials": 2, "max_concurrent_trials": 2, "stop_once": False,
         "max_length": {"batches": 100}}, space, 0)
    again.restore(state)
    assert again.rung_table() == m.rung_table()  # type: ignore[attr-defined]
