"""How long the dashboard's page of a 16-trial search takes to show itself, in a browser.

A random search of 16 trials (two hyperparameters, one on a log scale; each trial reports
training and validation curves and a checkpoint) runs to its end on ``det-hub up``'s cluster
(JupyterHub with the master as its service, the local agent). Headless Chromium
(``bench/page_load.mjs``, playwright-core) signs in at the hub and loads the experiment's page
``--loads`` times cold (a fresh browser, nothing cached) and as many times warm (Plotly.js
cached from before). Each load is timed from the navigation's start to its HTML served, to
its first contentful paint (the page's text and tables), to its metric charts drawn, and, the
search view scrolled into sight right after, to its parallel coordinates and hyperparameter
charts drawn and the importance listed. Prints the median and worst of each, and the bytes the first cold load
moved per resource.

    python bench/page_load.py [--trials 16] [--loads 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _setup import script_context  # noqa: E402
from chart_latency import check_browser  # noqa: E402

from det_hub.client import Client  # noqa: E402
from det_hub.testing import SERVICE, HubProcess  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DRIVER = Path(__file__).with_name("page_load.mjs")
#: Batches per trial: a training row each, a validation row every 10, a checkpoint at the end.
LENGTH = 50

TRAINER = """
import math

import det_hub.core as core

info = core.get_cluster_info()
hp = info.trial.hparams
with core.init() as ctx:
    for op in ctx.searcher.operations():
        loss = 1.0
        for step in range(1, op.length + 1):
            loss = abs(math.log10(hp["lr"]) + 2.5) * 0.2 + hp["width"] / 1000 + 1.0 / step
            ctx.train.report_training_metrics(steps_completed=step, metrics={"loss": loss})
            if step % 10 == 0:
                ctx.train.report_validation_metrics(steps_completed=step,
                                                    metrics={"validation_loss": loss})
        with ctx.checkpoint.store_path({"steps_completed": op.length}) as (path, _):
            (path / "state.txt").write_text(str(loss))
        op.report_completed(loss)
"""


def run(trials: int, loads: int) -> dict[str, object]:
    node = check_browser()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        hub = HubProcess(tmp / "hub")
        try:
            token = hub.token("alice")
            client = Client(hub.url + SERVICE, token)
            experiment = client.create_experiment({
                "name": "page load", "entrypoint": "python3 train.py",
                "hyperparameters": {
                    "lr": {"type": "log", "base": 10, "minval": -5, "maxval": 0},
                    "width": {"type": "int", "minval": 16, "maxval": 512}},
                "searcher": {"name": "random", "metric": "validation_loss",
                             "max_trials": trials, "max_length": {"batches": LENGTH},
                             "max_concurrent_trials": 2},
                "reproducibility": {"experiment_seed": 3},
                "max_restarts": 0}, script_context(tmp / "context", TRAINER))
            state = client.wait_for_experiment(experiment.id, timeout=600).state
            if state != "COMPLETED":
                sys.exit(f"the search ended {state}")
            setup = tmp / "setup.json"
            # Charts: loss, validation_loss; one per hyperparameter beside the parallel axes.
            setup.write_text(json.dumps({
                "hub": hub.url, "service": SERVICE, "user": "alice",
                "password": hub.password, "experiment": experiment.id, "loads": loads,
                "charts": 2, "scatters": 2}))
            done = subprocess.run([node, str(DRIVER), str(setup)], capture_output=True,
                                  text=True, timeout=600, cwd=REPO)
        finally:
            hub.stop()
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].startswith("{"):
        sys.exit(f"the browser driver failed:\n{done.stdout}\n{done.stderr}")
    result: dict[str, object] = json.loads(lines[-1])
    if result["problems"]:
        sys.exit("the browser driver failed:\n  " + "\n  ".join(map(str, result["problems"])))
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=16, help="trials of the search")
    parser.add_argument("--loads", type=int, default=5, help="loads of each kind to time")
    args = parser.parse_args(argv)
    started = time.monotonic()
    result = run(args.trials, args.loads)
    print(f"the page of a {args.trials}-trial search, {args.loads} loads each, seconds from "
          "the navigation's start (median, worst):")
    for kind in ("cold", "warm"):
        loads = result[kind]
        assert isinstance(loads, list)
        figures = []
        for part, label in (("served", "HTML served"),
                            ("painted", "text and tables painted"),
                            ("charts", "metric charts drawn"),
                            ("search", "search view drawn, scrolled to at once")):
            values = [float(load[part]) / 1000 for load in loads]
            figures.append(f"{label} {statistics.median(values):.2f} / {max(values):.2f}")
        print(f"  {kind}: " + "; ".join(figures))
    sizes = result["bytes"]
    assert isinstance(sizes, dict)
    print(f"  first cold load moved {sum(sizes.values()) / 1e6:.2f} MB in {len(sizes)} "
          "responses; the largest:")
    for path, size in sorted(sizes.items(), key=lambda item: -item[1])[:4]:
        print(f"    {size / 1e3:8.1f} kB  {path}")
    print(f"  ({time.monotonic() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
