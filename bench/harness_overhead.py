"""Training-loop overhead of PyTorchTrial on the local agent, against a raw PyTorch loop.

Both sides train the same MLP on the same synthetic data (fixed seeds) for the same number of
batches with the same torch thread count, each in a fresh Python process pinned to the same
cores:

* raw: a plain loop over a torch ``DataLoader`` of a ``TensorDataset``: forward, backward,
  optimizer step.
* harness: the same model as a ``PyTorchTrial`` (entrypoint ``module:Class``), created as an
  experiment on a real master (SQLite, local agent with one slot of all cores), run by the
  harness and the ``Trainer`` through the master: single searcher of ``max_length`` batches,
  validation and a checkpoint once at the end as a real run does.

Each side times its own N training batches inside its process with ``time.perf_counter``: the
raw loop around the loop, the trial from ``on_training_start`` to the training report of
batch N (a callback prints the figure; it is read back from the trial's log through the API).
What the harness adds per batch (metric extraction, periodic reports to the master,
preemption checks, det_hub's resumable sampler) is thus inside the figure, while process
start-up, validation and checkpointing are not; those are in the end-to-end time, which is
the master's own ``ended_at - created_at`` of the experiment.

Runs alternate raw and harness so that drift in the machine's speed hits both alike. Both the
ratio of the two medians and the median of the pairs' ratios (each harness run against the raw
run just before it) are reported; on a host whose speed drifts, the second is the steadier.

Where the host has cores beyond the trial's, the master (and the agent inside it) is pinned to
those, so that the figure is the harness's own cost rather than the master's polling competing
for the trial's cores; on a host with no spare core they share, as on a small embedded cluster.
With ``--device cuda`` both sides train on the first GPU (the trial on a GPU slot), which is
where a per-batch host-device sync would show; a GPU slot pins no cores, so both sides then run
on the cores the master leaves. ``--hidden`` and ``--batch-size`` size the work: the defaults
keep a GPU's batches bound by the host's kernel launches, ``--hidden 8192 --batch-size 512``
makes them bound by the GPU.

    python bench/harness_overhead.py [--runs 3] [--batches 6000] [--threads 2] [--device cpu]
        [--hidden 1024] [--batch-size 64]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _setup import fresh_database  # noqa: E402

from det_hub.testing import TERMINAL, MasterProcess  # noqa: E402

MODEL_MODULE = "overhead_model"
TRIAL_MODULE = "overhead_trial"
TRIAL_CLASS = "OverheadTrial"
MARKER = "TRAIN_SECONDS"


def model_source(hidden: int, batch: int) -> str:
    """The model, data and raw loop both sides use, written into the experiment's context.

    The default sizes (``hidden`` 1024, ``batch`` 64) give ~3-4 ms a batch on two cores: real
    work dominates, yet a per-batch cost of the harness of even 0.1 ms would show as ~3 %. On a
    GPU those sizes leave the loop bound by the host's kernel launches, where the harness's
    Python shows; a large ``hidden`` makes it bound by the GPU, where a per-batch host-device
    sync would show instead.
    """
    return f'''
import sys
import time

import torch
from torch import nn
from torch.utils.data import TensorDataset

FEATURES, HIDDEN, CLASSES = 512, {hidden}, 10
SAMPLES, BATCH = 8192, {batch}
MARKER = "{MARKER}"


def make_data(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    y = torch.randint(0, CLASSES, (SAMPLES,), generator=g)
    return TensorDataset(x, y)


def make_model():
    return nn.Sequential(
        nn.Linear(FEATURES, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
        nn.Linear(HIDDEN, CLASSES),
    )


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def raw_main(batches, threads, device):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    device = torch.device(device)
    model = make_model().to(device)
    optimizer = make_optimizer(model)
    loss_fn = nn.CrossEntropyLoss()
    loader = torch.utils.data.DataLoader(
        make_data(0), batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    model.train()
    done = 0
    t0 = time.perf_counter()
    while done < batches:
        for x, y in loader:
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            done += 1
            if done == batches:
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(MARKER, f"{{time.perf_counter() - t0:.6f}}", done, flush=True)


if __name__ == "__main__":
    raw_main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
'''

# The trial: the same model, data and optimizer through det_hub.pytorch.
TRIAL_SOURCE = f'''
import time

import torch
from torch import nn

from det_hub import pytorch
from {MODEL_MODULE} import BATCH, MARKER, make_data, make_model, make_optimizer


class TrainTimer(pytorch.PyTorchCallback):
    """Prints the seconds from the start of training to the report of batch `target`."""

    def __init__(self, target):
        self.target = target
        self.t0 = 0.0

    def on_training_start(self):
        self.t0 = time.perf_counter()

    def on_training_workload_end(self, avg_metrics, batch_metrics):
        if avg_metrics["batches"] >= self.target:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - self.t0
            print(MARKER, f"{{elapsed:.6f}}", avg_metrics["batches"], flush=True)


class {TRIAL_CLASS}(pytorch.PyTorchTrial):
    def __init__(self, context):
        super().__init__(context)
        torch.set_num_threads(int(context.get_hparam("threads")))
        self.model = context.wrap_model(make_model())
        self.optimizer = context.wrap_optimizer(make_optimizer(self.model))
        self.loss_fn = nn.CrossEntropyLoss()

    def build_training_data_loader(self):
        return pytorch.DataLoader(make_data(0), batch_size=BATCH, shuffle=True)

    def build_validation_data_loader(self):
        return pytorch.DataLoader(make_data(1), batch_size=BATCH * 4)

    def train_batch(self, batch, epoch_idx, batch_idx):
        x, y = batch
        loss = self.loss_fn(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {{"loss": loss}}

    def evaluate_batch(self, batch):
        x, y = batch
        return {{"validation_loss": self.loss_fn(self.model(x), y)}}

    def build_callbacks(self):
        return {{"timer": TrainTimer(int(self.context.get_hparam("batches")))}}
'''


def parse_marker(lines: list[str], where: str) -> float:
    """Seconds from the last ``TRAIN_SECONDS <s> <batches>`` line."""
    for line in reversed(lines):
        # Trial log lines may carry a prefix; the marker is found anywhere in the line.
        _, sep, rest = line.partition(MARKER + " ")
        if sep:
            return float(rest.split()[0])
    raise RuntimeError(f"no {MARKER} line in {where}:\n" + "\n".join(lines[-30:]))


def run_raw(context: Path, batches: int, threads: int, cpus: list[int], device: str) -> float:
    """One raw run in a fresh process, pinned and threaded as the agent does for a trial."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [sys.executable, f"{MODEL_MODULE}.py", str(batches), str(threads), device],
        cwd=context, env=env, capture_output=True, text=True, check=False,
        preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )
    if done.returncode != 0:
        raise RuntimeError(f"raw loop failed:\n{done.stdout}{done.stderr}")
    return parse_marker(done.stdout.splitlines(), "the raw loop's output")


def experiment_config(batches: int, threads: int, batch_size: int) -> dict[str, object]:
    return {
        "name": "harness-overhead",
        "entrypoint": f"{TRIAL_MODULE}:{TRIAL_CLASS}",
        "hyperparameters": {"global_batch_size": batch_size, "batches": batches,
                            "threads": threads},
        "searcher": {"name": "single", "metric": "validation_loss", "smaller_is_better": True,
                     "max_length": {"batches": batches}},
        # One validation and one checkpoint, at the end, as a real run of this length has.
        "min_validation_period": {"batches": batches},
        "min_checkpoint_period": {"batches": batches},
        "reproducibility": {"experiment_seed": 0},
    }


def pin_process(pid: int, cpus: list[int]) -> None:
    """Pin every thread of ``pid``; threads it starts later inherit the mask."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except ProcessLookupError:  # the thread ended meanwhile
            pass


def _when(stamp: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def run_harness(master: MasterProcess, context: Path, batches: int, threads: int,
                batch_size: int) -> tuple[float, float]:
    """One experiment; returns (training seconds inside the trial, end-to-end seconds)."""
    eid = master.create_ok(experiment_config(batches, threads, batch_size), context=context)
    # Polled once a second: every request costs the master CPU on the cores the trial uses.
    experiment = master.wait(
        lambda: (e := master.experiment(eid))["state"] in TERMINAL and e,
        timeout=30 * 60, every=1.0)
    if experiment["state"] != "COMPLETED":
        raise RuntimeError(f"experiment {eid} ended {experiment['state']}")
    trial_id = master.trials(eid)[0]["id"]
    lines = master.wait(lambda: (ls := master.logs(trial_id)) and any(MARKER in x for x in ls)
                        and ls, timeout=30)
    train = parse_marker(lines, f"trial {trial_id}'s log")
    end_to_end = (_when(experiment["ended_at"]) - _when(experiment["created_at"])).total_seconds()
    return train, end_to_end


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each side")
    parser.add_argument("--batches", type=int, default=6000, help="training batches per run")
    cores = len(os.sched_getaffinity(0))
    parser.add_argument("--threads", type=int, default=max(1, min(2, cores - 1)),
                        help="torch threads, and the cores of the trial's one slot (default: "
                             "2, leaving at least one core for the master)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="train on the CPU slot, or on the first GPU (a GPU slot)")
    parser.add_argument("--hidden", type=int, default=1024,
                        help="width of the MLP's two hidden layers (large: GPU-bound batches)")
    parser.add_argument("--batch-size", type=int, default=64, help="examples per batch")
    args = parser.parse_args()
    # Other load on the cores skews one side or the other; printed so that a reader can judge.
    load_before = os.getloadavg()[0]
    all_cpus = sorted(os.sched_getaffinity(0))
    cpus, spare = all_cpus[: args.threads], all_cpus[args.threads:]
    if len(cpus) < args.threads:
        sys.exit(f"--threads {args.threads}: only {len(cpus)} cores here")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            sys.exit("--device cuda: torch sees no GPU here")

    raw: list[float] = []
    harness: list[float] = []
    end_to_end: list[float] = []
    with fresh_database("sqlite") as url, tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp) / "ctx"
        context.mkdir()
        (context / f"{MODEL_MODULE}.py").write_text(model_source(args.hidden, args.batch_size))
        (context / f"{TRIAL_MODULE}.py").write_text(TRIAL_SOURCE)
        # On the CPU, one slot of `threads` cores: the trial is pinned to the same cores the
        # raw loop uses and gets OMP_NUM_THREADS to match. With --device cuda, GPU slots.
        extra = [f"--cpu-slot-cores={args.threads}"]
        if args.device == "cpu":
            extra.append("--LocalAgent.use_gpus=False")
        master = MasterProcess(Path(tmp) / "data", url, extra_args=extra)
        master.start()
        raw_cpus = cpus
        if spare and master.proc is not None:
            pin_process(master.proc.pid, spare)
            if args.device == "cuda":
                # A GPU slot pins no cores: the trial runs where the agent (inside the master)
                # does, so the raw loop does too.
                raw_cpus = spare
                print(f"trial and raw loop on cores {spare[0]}-{spare[-1]}, beside the master",
                      flush=True)
            else:
                print(f"trial on cores {cpus}, master on cores {spare[0]}-{spare[-1]}",
                      flush=True)
        else:
            print(f"trial on cores {cpus}, master on the same cores (no spare core)", flush=True)
        try:
            for run in range(args.runs):
                raw.append(run_raw(context, args.batches, args.threads, raw_cpus, args.device))
                train, total = run_harness(master, context, args.batches, args.threads,
                                           args.batch_size)
                harness.append(train)
                end_to_end.append(total)
                print(f"run {run + 1}/{args.runs}: raw {raw[-1]:.2f} s, harness {train:.2f} s"
                      f" training, {total:.2f} s end to end", flush=True)
        finally:
            master.stop()

    n = args.batches
    raw_s, harness_s = statistics.median(raw), statistics.median(harness)
    e2e_s = statistics.median(end_to_end)
    print(f"{n} batches of {args.batch_size} on {args.device}, hidden {args.hidden}, "
          f"{args.threads} threads, median of {args.runs} runs each side; "
          f"1-min load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"raw loop:      {raw_s / n * 1000:.3f} ms/batch ({raw_s:.2f} s)")
    print(f"PyTorchTrial:  {harness_s / n * 1000:.3f} ms/batch ({harness_s:.2f} s)")
    print(f"overhead:      {(harness_s / raw_s - 1) * 100:+.2f} % (aim: under 3 %)")
    # Each harness run against the raw run just before it: on a host whose speed drifts over
    # tens of seconds, the drift cancels within a pair but not between the two medians.
    pairs = sorted((h / r - 1) * 100 for r, h in zip(raw, harness, strict=True))
    print(f"pairs:         {statistics.median(pairs):+.2f} % median of {len(pairs)} "
          f"(each: {', '.join(f'{p:+.1f}' for p in pairs)})")
    print(f"end to end:    {e2e_s:.2f} s create -> COMPLETED "
          f"({e2e_s - harness_s:.2f} s beyond the training batches)")


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"benchmark took {time.perf_counter() - started:.0f} s")
