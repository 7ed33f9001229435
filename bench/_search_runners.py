"""How ``search_quality.py`` runs one search with each framework, on W worker processes.

Every framework gets the same kind of parallelism: W worker processes (``spawn``ed, one torch
thread each), started inside the timed part of the run, each training one trial at a time.

* det_hub: :class:`DetHubDriver` is a small master for a det_hub search method, carrying out its
  actions as ``det_hub/service/experiment.py`` does: a created trial queues for a slot (one slot
  per worker process); a trial trains to its next validation point (the next of
  ``validation_lengths`` above what it has done, else its target), reports, and the driver tells
  it to go on, to stop (a trial told to stop ends at its next validation), or, when the method
  says it waits at its rung (``stop_once: false``), to save its whole state and free its slot.
  A promoted trial (a new ``ValidateAfter``) queues again and resumes from that state on
  whichever worker is free, training only the units above its pause. The search method, its
  TPE sampler included, runs in the driver process, as it runs inside the real master.
* Optuna: W processes share a study in a ``JournalStorage`` file (Optuna's way to run one study
  from several processes), each asking for trials until N have been asked (a shared counter),
  reporting at the same validation points and asking ``should_prune`` there.
* Ray Tune: ``Tuner.fit`` on a local Ray instance of ``num_cpus=W`` (one CPU per trial, and
  ``BasicVariantGenerator(max_concurrent=W)``), on 127.0.0.1 without dashboard or usage
  stats, started once per problem outside the timings, as a cluster would be, with
  ``reuse_actors=True`` (without it Ray starts a process per trial, about a second each
  here). Trials report at the same validation points.

Every trial writes one record per training chunk: which trial, the units it trained (from
``start`` to ``end``), the metric it then reported, the time (``time.monotonic``, one clock for
all processes of the machine) and its hyperparameters. The figures are computed from these
records alone, alike for every framework.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import multiprocessing.connection
import os
import time
import traceback
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _search_problems import ProblemSpec, make_problem

_SPAWN = multiprocessing.get_context("spawn")


@dataclasses.dataclass
class RunResult:
    """One search: its records in time order and how long it took.

    Attributes:
        reports: one dict per training chunk: ``trial``, ``start``, ``end``, ``metric``, ``t``
            (when it was reported), ``busy_s`` (its training and validation time) and
            ``hparams``.
        wall: seconds from launching the workers to the search's end.
        resumes: det_hub promote mode: ``(trial, length at its pause, length it resumed at)``
            for every resume.
        stops: how many trials the search stopped early.
    """

    reports: list[dict[str, Any]]
    wall: float
    resumes: list[tuple[str, int, int]] = dataclasses.field(default_factory=list)
    stops: int = 0

    @property
    def units(self) -> int:
        return sum(r["end"] - r["start"] for r in self.reports)

    @property
    def trials(self) -> int:
        return len({r["trial"] for r in self.reports})


def _train_chunk(run: Any, trial: str, end: int, hparams: Mapping[str, Any]) -> dict[str, Any]:
    """Train ``run`` to ``end``, validate, and return the chunk's record."""
    start, began = run.length, time.monotonic()
    run.train_to(end)
    metric = run.validate()
    now = time.monotonic()
    return {"trial": trial, "start": start, "end": end, "metric": metric, "t": now,
            "busy_s": now - began, "hparams": dict(hparams)}


def _read_logs(directory: Path) -> list[dict[str, Any]]:
    reports = []
    for path in directory.glob("*.jsonl"):
        reports.extend(json.loads(line) for line in path.read_text().splitlines() if line)
    return sorted(reports, key=lambda r: r["t"])


# =============================================================================================
# det_hub
# =============================================================================================

QUEUED, RUNNING, WAITING, CLOSED = "queued", "running", "waiting", "closed"


def _slot_worker(conn: Any, spec: ProblemSpec) -> None:
    """One slot: trains the chunks it is sent, keeping running trials in memory."""
    try:
        problem = make_problem(spec)
        problem.prepare()
        runs: dict[str, Any] = {}
        conn.send(("ready",))
        while True:
            message = conn.recv()
            kind = message[0]
            if kind == "train":
                _, trial, hparams, start, end, checkpoint = message
                run = runs.get(trial)
                if run is None:
                    run = problem.new_run(hparams)
                    if checkpoint is not None:
                        run.load(Path(checkpoint))
                if run.length != start:
                    raise RuntimeError(f"trial {trial} is at {run.length}, asked from {start}")
                runs[trial] = run
                conn.send(("report", _train_chunk(run, trial, end, hparams)))
            elif kind == "pause":
                _, trial, checkpoint = message
                runs.pop(trial).save(Path(checkpoint))
                conn.send(("paused",))
            elif kind == "close":
                runs.pop(message[1], None)
            elif kind == "exit":
                return
    except Exception:
        conn.send(("error", traceback.format_exc()))


class SlotPool:
    """W worker processes, one per slot, each reached through its own pipe."""

    def __init__(self, spec: ProblemSpec, workers: int) -> None:
        self.conns: list[Any] = []
        self.procs: list[Any] = []
        for _ in range(workers):
            parent, child = _SPAWN.Pipe()
            proc = _SPAWN.Process(target=_slot_worker, args=(child, spec), daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)
        for slot in range(workers):
            self.receive(slot, "ready")

    def send(self, slot: int, *message: Any) -> None:
        self.conns[slot].send(message)

    def receive(self, slot: int, kind: str) -> Any:
        message = self.conns[slot].recv()
        if message[0] == "error":
            raise RuntimeError(f"worker {slot} failed:\n{message[1]}")
        if message[0] != kind:
            raise RuntimeError(f"worker {slot} answered {message[0]!r}, expected {kind!r}")
        return message[1] if len(message) > 1 else None

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(("exit",))
            except (BrokenPipeError, OSError):
                pass
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join()


@dataclasses.dataclass
class _DriverTrial:
    key: str
    hparams: dict[str, Any]
    done: int = 0
    state: str = QUEUED
    stopping: bool = False
    slot: int | None = None
    checkpoint: Path | None = None
    paused_at: int | None = None


class DetHubDriver:
    """Runs a det_hub search method to its end on a :class:`SlotPool` (see the module
    docstring). Raises when the method leaves a trial open or never shuts down."""

    def __init__(self, method: Any, pool: SlotPool, checkpoint_dir: Path) -> None:
        self.method = method
        self.pool = pool
        self.checkpoint_dir = checkpoint_dir
        self.trials: dict[str, _DriverTrial] = {}
        self.queue: list[str] = []
        self.free = list(range(len(pool.conns)))
        self.reports: list[dict[str, Any]] = []
        self.resumes: list[tuple[str, int, int]] = []
        self.stops = 0
        self.shutdown = False

    def run(self) -> None:
        self._apply(self.method.initial_actions())
        while True:
            self._dispatch()
            running = {t.slot: t for t in self.trials.values() if t.state == RUNNING}
            if not running:
                break
            conns = {self.pool.conns[slot]: slot for slot in running}
            for conn in multiprocessing.connection.wait(list(conns)):
                slot = conns[conn]
                self._on_report(running[slot], self.pool.receive(slot, "report"))
        stuck = [t.key for t in self.trials.values() if t.state != CLOSED]
        if stuck or not self.shutdown:
            raise RuntimeError(f"the search stalled: shutdown={self.shutdown}, open trials "
                               f"{stuck}")

    # --- scheduling ---------------------------------------------------------------------
    def _dispatch(self) -> None:
        while self.free and self.queue:
            trial = self.trials[self.queue.pop(0)]
            trial.slot = self.free.pop(0)
            trial.state = RUNNING
            if trial.paused_at is not None:
                self.resumes.append((trial.key, trial.paused_at, trial.done))
                trial.paused_at = None
            self._train(trial)

    def _train(self, trial: _DriverTrial) -> None:
        target = self.method.target_length(trial.key)
        if target is None or target <= trial.done:
            raise RuntimeError(f"trial {trial.key} has no length left to train ({target})")
        points = [n for n in self.method.validation_lengths(trial.key) if trial.done < n < target]
        end = min(points, default=target)
        checkpoint = None if trial.checkpoint is None else str(trial.checkpoint)
        assert trial.slot is not None
        self.pool.send(trial.slot, "train", trial.key, trial.hparams, trial.done, end, checkpoint)

    def _release(self, trial: _DriverTrial) -> None:
        assert trial.slot is not None
        self.free.append(trial.slot)
        trial.slot = None

    # --- events -------------------------------------------------------------------------
    def _on_report(self, trial: _DriverTrial, record: dict[str, Any]) -> None:
        self.reports.append(record)
        trial.done = record["end"]
        self._apply(self.method.on_validation(trial.key, record["metric"], record["end"]))
        assert trial.slot is not None
        if trial.stopping:
            # Told to stop while it trained: it ends at this validation, as on the master.
            self.pool.send(trial.slot, "close", trial.key)
            self._close(trial)
            return
        target = self.method.target_length(trial.key)
        if target is not None and trial.done < target:
            self._train(trial)  # on to its next validation point, keeping its slot
        elif self.method.is_waiting(trial.key):
            # Waits at its rung: its state is saved and its slot freed (the master
            # checkpoints a waiting trial and ends its allocation).
            trial.checkpoint = self.checkpoint_dir / f"{trial.key}.state"
            self.pool.send(trial.slot, "pause", trial.key, str(trial.checkpoint))
            self.pool.receive(trial.slot, "paused")
            trial.state = WAITING
            trial.paused_at = trial.done
            self._release(trial)
        else:
            self.pool.send(trial.slot, "close", trial.key)
            self._close(trial)

    def _close(self, trial: _DriverTrial) -> None:
        if trial.slot is not None:
            self._release(trial)
        if trial.key in self.queue:
            self.queue.remove(trial.key)
        trial.state = CLOSED
        self._apply(self.method.on_trial_closed(trial.key))

    def _apply(self, actions: Sequence[Any]) -> None:
        from det_hub.searcher import Create, Shutdown, Stop, ValidateAfter

        for action in actions:
            if isinstance(action, Create):
                self.trials[action.request_id] = _DriverTrial(action.request_id,
                                                              dict(action.hparams))
                self.queue.append(action.request_id)
                self._apply(self.method.on_trial_created(action.request_id))
            elif isinstance(action, ValidateAfter):
                trial = self.trials[action.request_id]
                if trial.state == WAITING:  # promoted: back into the queue, to resume
                    trial.state = QUEUED
                    self.queue.append(trial.key)
                # A running trial picks its new target up at its next report.
            elif isinstance(action, Stop):
                trial = self.trials[action.request_id]
                self.stops += 1
                if trial.state == RUNNING:
                    trial.stopping = True
                elif trial.state in (QUEUED, WAITING):
                    self._close(trial)
            elif isinstance(action, Shutdown):
                self.shutdown = True


def run_det_hub(spec: ProblemSpec, searcher: Mapping[str, Any], workers: int, seed: int,
                tmp: Path) -> RunResult:
    """One det_hub search with ``searcher`` (a ``searcher`` config section) on W workers."""
    from det_hub.searcher import build_search_method

    problem = make_problem(spec)
    started = time.monotonic()
    pool = SlotPool(spec, workers)
    try:
        method = build_search_method(dict(searcher), problem.space, seed)
        driver = DetHubDriver(method, pool, tmp)
        driver.run()
        wall = time.monotonic() - started
    finally:
        pool.close()
    return RunResult(driver.reports, wall, driver.resumes, driver.stops)


# =============================================================================================
# Optuna
# =============================================================================================

def _optuna_worker(spec: ProblemSpec, journal: str, sampler: str, seed: int, index: int,
                   counter: Any, n_trials: int, points: list[int], log: str) -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    problem = make_problem(spec)
    problem.prepare()
    # Each process has its own sampler, seeded apart so that random draws do not repeat.
    worker_seed = seed * 1000 + index
    chosen = (optuna.samplers.RandomSampler(seed=worker_seed) if sampler == "random"
              else optuna.samplers.TPESampler(seed=worker_seed))
    pruner = optuna.pruners.SuccessiveHalvingPruner(
        min_resource=points[0], reduction_factor=4, min_early_stopping_rate=0)
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal))
    study = optuna.load_study(study_name="bench", storage=storage, sampler=chosen, pruner=pruner)
    with open(log, "a") as out:
        while True:
            with counter.get_lock():
                if counter.value >= n_trials:
                    return
                counter.value += 1
            trial = study.ask()
            hparams = problem.normalize(problem.optuna_params(trial))
            run = problem.new_run(hparams)
            key = f"optuna-{trial.number}"
            for point in points:
                record = _train_chunk(run, key, point, hparams)
                out.write(json.dumps(record) + "\n")
                out.flush()
                if point == points[-1]:
                    study.tell(trial, record["metric"])
                    break
                trial.report(record["metric"], point)
                if trial.should_prune():
                    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                    break


def run_optuna(spec: ProblemSpec, sampler: str, n_trials: int, workers: int,
               points: list[int], seed: int, tmp: Path,
               configs: Sequence[Mapping[str, Any]] | None = None) -> RunResult:
    """One Optuna study (``SuccessiveHalvingPruner``, ``sampler`` random or tpe) of N trials;
    with ``configs``, those are enqueued and asked for first, in order."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    started = time.monotonic()
    journal = str(tmp / "optuna.journal")
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(journal))
    study = optuna.create_study(study_name="bench", storage=storage, direction="minimize")
    for config in configs or ():
        study.enqueue_trial(dict(config))
    counter = _SPAWN.Value("i", 0)
    procs = [
        _SPAWN.Process(target=_optuna_worker, args=(
            spec, journal, sampler, seed, index, counter, n_trials, points,
            str(tmp / f"worker-{index}.jsonl")))
        for index in range(workers)
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    wall = time.monotonic() - started
    failed = [proc.exitcode for proc in procs if proc.exitcode != 0]
    if failed:
        raise RuntimeError(f"optuna workers exited with {failed}")
    study = optuna.load_study(study_name="bench", storage=storage)
    pruned = sum(1 for t in study.trials if t.state == optuna.trial.TrialState.PRUNED)
    return RunResult(_read_logs(tmp), wall, stops=pruned)


# =============================================================================================
# Ray Tune
# =============================================================================================

@contextmanager
def ray_instance(workers: int) -> Iterator[float]:
    """A local Ray instance of ``workers`` CPUs on 127.0.0.1; yields its start-up seconds."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    # Tune's newer console output ignores verbose=0; the older one honours it.
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    # Ray's workers must import the bench modules, as the spawned workers do.
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (here, os.environ.get("PYTHONPATH")) if p)
    import logging

    import ray

    started = time.monotonic()
    ray.init(num_cpus=workers, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, logging_level=logging.WARNING)
    try:
        yield time.monotonic() - started
    finally:
        ray.shutdown()


def _ray_trainable(config: dict[str, Any], spec: ProblemSpec, points: list[int],
                   log_dir: str) -> None:
    from ray import tune

    problem = make_problem(spec)
    problem.prepare()
    hparams = problem.normalize(config)
    run = problem.new_run(hparams)
    key = f"ray-{uuid.uuid4().hex[:12]}"
    with open(Path(log_dir) / f"{os.getpid()}.jsonl", "a") as out:
        for point in points:
            record = _train_chunk(run, key, point, hparams)
            out.write(json.dumps(record) + "\n")
            out.flush()
            tune.report({"loss": record["metric"], "units": point})


def run_ray(spec: ProblemSpec, n_trials: int, workers: int, points: list[int], seed: int,
            tmp: Path, configs: Sequence[Mapping[str, Any]] | None = None) -> RunResult:
    """One Ray Tune search: ``ASHAScheduler`` over Ray's default random search; with
    ``configs``, those are its first samples (``points_to_evaluate``), in order."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.basic_variant import BasicVariantGenerator

    problem = make_problem(spec)
    logs = tmp / "logs"
    logs.mkdir()
    scheduler = ASHAScheduler(time_attr="units", metric="loss", mode="min", max_t=points[-1],
                              grace_period=points[0], reduction_factor=4)
    trainable = tune.with_resources(
        tune.with_parameters(_ray_trainable, spec=spec, points=points, log_dir=str(logs)),
        {"cpu": 1})
    tuner = tune.Tuner(
        trainable,
        param_space=problem.ray_space(),
        tune_config=tune.TuneConfig(
            scheduler=scheduler, num_samples=n_trials, reuse_actors=True,
            search_alg=BasicVariantGenerator(
                points_to_evaluate=[dict(c) for c in configs or ()], random_state=seed,
                max_concurrent=workers)),
        run_config=tune.RunConfig(storage_path=str(tmp / "ray"), name="bench", verbose=0),
    )
    started = time.monotonic()
    results = tuner.fit()
    wall = time.monotonic() - started
    if results.errors:
        raise RuntimeError(f"ray trials failed: {results.errors[0]}")
    reports = _read_logs(logs)
    full = {r["trial"] for r in reports if r["end"] == points[-1]}
    return RunResult(reports, wall, stops=len({r["trial"] for r in reports} - full))
