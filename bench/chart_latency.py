"""Chart latency in a browser: from a metric report to the row drawn, on the dashboard's
experiment page, the JupyterLab panel's experiment view and a notebook's MetricsPlot.

A Core API script reports a training row every ``--interval`` seconds (step 1, 2, ...;
``loss`` = 1/step) and prints, for each, the wall-clock time its report call returned. The
cluster is ``det-hub up`` (JupyterHub with the master as its service, the local agent); a
JupyterLab server with det_hub's server extension, panel and widgets reaches the master as
the same user. Headless Chromium (``bench/chart_latency.mjs``, playwright-core) opens the
three surfaces while the experiment is still paused: (a) the dashboard's experiment page,
signed in at the hub, (b) the panel's view of the experiment, (c) a notebook whose cell makes
a ``MetricsPlot`` of it. Each page looks at its chart every 5 ms and notes when each step first
shows in a training trace's computed data (what Plotly draws). Then the experiment runs.

Per surface and row: the time it first showed minus the time its report call returned; the
median, 95th percentile and worst, and how many rows were seen (a row never seen is an error).
Training rows wait in the Core API's sender for up to its batch interval before they are sent
(``core.init(metric_batch_interval=...)``): ``--batch-interval`` sets it for the script, by
default the Core API's own.

    python bench/chart_latency.py [--rows 50] [--interval 0.2] [--batch-interval SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import nbformat  # noqa: E402
from _setup import percentile, script_context  # noqa: E402

from det_hub.client import Client  # noqa: E402
from det_hub.testing import SERVICE, HubProcess, jupyterlab_server  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DRIVER = Path(__file__).with_name("chart_latency.mjs")
CHROMIUM = "/usr/bin/chromium"
#: Marks the script's lines that say when a report call returned.
MARK = "chart_latency returned "

REPORTER = f"""
import json
import time

import det_hub.core as core

info = core.get_cluster_info()
hp = info.trial.hparams
options = {{}} if hp["batch_interval"] is None else {{"metric_batch_interval": hp["batch_interval"]}}
with core.init(**options) as ctx:
    for op in ctx.searcher.operations():
        for step in range(1, op.length + 1):
            time.sleep(hp["interval"])
            ctx.train.report_training_metrics(steps_completed=step,
                                              metrics={{"loss": 1.0 / step}})
            print({MARK!r} + json.dumps([step, time.time()]), flush=True)
        ctx.train.report_validation_metrics(steps_completed=op.length,
                                            metrics={{"loss": 1.0 / op.length}})
        op.report_completed(1.0 / op.length)
"""

SURFACES = ("dashboard experiment page", "lab panel experiment view", "notebook MetricsPlot")


def check_browser() -> str:
    node = shutil.which("node")
    driver = REPO / "tests" / "e2e" / "browser" / "node_modules" / "playwright-core"
    missing = [what for what, there in ((f"Chromium ({CHROMIUM})", os.access(CHROMIUM, os.X_OK)),
                                         ("node", node is not None),
                                         (f"playwright-core ({driver})", driver.is_dir()))
               if not there]
    if missing or node is None:
        sys.exit(f"chart_latency needs {', '.join(missing)}: `make install-test` installs them")
    return node


def run(rows: int, interval: float, batch_interval: float | None) -> dict[str, list[float]]:
    """Seconds from each report call's return to its row showing, per surface."""
    node = check_browser()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        hub = HubProcess(tmp / "hub")
        try:
            token = hub.token("alice")
            client = Client(hub.url + SERVICE, token)
            experiment = client.create_experiment({
                "name": "chart latency", "entrypoint": "python3 train.py",
                "hyperparameters": {"interval": interval, "batch_interval": batch_interval},
                "searcher": {"name": "single", "metric": "loss",
                             "max_length": {"batches": rows}},
                "max_restarts": 0}, script_context(tmp / "context", REPORTER), activate=False)
            eid = experiment.id
            work = tmp / "work"
            work.mkdir()
            notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
                f'from det_hub.widgets import MetricsPlot\n\nMetricsPlot({eid}, metric="loss")')])
            notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                               "language": "python"}
            nbformat.write(notebook, work / "chart_latency.ipynb")
            lab_token = "chart-latency"
            lab_state = tmp / "lab"
            lab_state.mkdir()
            with jupyterlab_server(hub.url + SERVICE, token, lab_state, work,
                                   lab_token) as lab:
                setup = tmp / "setup.json"
                setup.write_text(json.dumps({
                    "hub": hub.url, "service": SERVICE, "user": "alice",
                    "password": hub.password, "lab": f"{lab}/?token={lab_token}",
                    "experiment": eid, "notebook": "chart_latency.ipynb", "rows": rows,
                    "timeout_s": 120 + rows * interval}))
                seen = watch(node, setup, lambda: client.activate_experiment(eid))
            state = client.wait_for_experiment(eid, timeout=120).state
            if state != "COMPLETED":
                sys.exit(f"the experiment ended {state}; its trial's log:\n"
                         + "\n".join(r.get("message", "") for r in client.trial_logs(
                             client.list_trials(eid)[0].id)))
            returned = report_times(client, eid)
        finally:
            hub.stop()
    if len(returned) != rows:
        sys.exit(f"the script says it reported {len(returned)} rows, not {rows}")
    latencies: dict[str, list[float]] = {}
    missing: list[str] = []
    for surface in SURFACES:
        shown = {int(float(step)): ms / 1000.0 for step, ms in seen.get(surface, {}).items()}
        absent = sorted(set(returned) - set(shown))
        if absent:
            missing.append(f"{surface}: never showed steps {absent}")
        latencies[surface] = [shown[s] - returned[s] for s in sorted(returned) if s in shown]
    print_figures(rows, interval, batch_interval, latencies)
    if missing:
        sys.exit("rows missing:\n  " + "\n  ".join(missing))
    return latencies


def watch(node: str, setup: Path, go: Any) -> dict[str, dict[str, float]]:
    """Runs the browser driver; calls ``go()`` once its pages are ready; what they saw."""
    driver = subprocess.Popen([node, str(DRIVER), str(setup)], stdout=subprocess.PIPE,
                              text=True, cwd=REPO)
    assert driver.stdout is not None
    lines: list[str] = []
    try:
        for line in driver.stdout:
            lines.append(line.strip())
            if line.strip() == "ready":
                go()
        driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    result = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
    if result is None:
        sys.exit("the browser driver gave no result:\n" + "\n".join(lines))
    if result["problems"]:
        sys.exit("the browser driver failed:\n  " + "\n  ".join(result["problems"]))
    return dict(result["seen"])


def report_times(client: Client, experiment_id: int) -> dict[int, float]:
    """When each step's report call returned, as the script printed it."""
    [trial] = client.list_trials(experiment_id)
    returned: dict[int, float] = {}
    for row in client.trial_logs(trial.id):
        message = str(row.get("message", ""))
        if MARK in message:
            step, at = json.loads(message.split(MARK, 1)[1])
            returned[int(step)] = float(at)
    return returned


def print_figures(rows: int, interval: float, batch_interval: float | None,
                  latencies: dict[str, list[float]]) -> None:
    batching = "the Core API's default" if batch_interval is None else f"{batch_interval:g} s"
    print(f"report -> drawn, {rows} training rows one every {interval:g} s, metric batch "
          f"interval {batching}:")
    for surface, values in latencies.items():
        if not values:
            print(f"  {surface}: 0/{rows} rows")
            continue
        print(f"  {surface}: {len(values)}/{rows} rows, p50 {percentile(values, 50):.3f} s, "
              f"p95 {percentile(values, 95):.3f} s, max {max(values):.3f} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50, help="training rows to report")
    parser.add_argument("--interval", type=float, default=0.2,
                        help="seconds between two reports")
    parser.add_argument("--batch-interval", type=float, default=None,
                        help="the script's core.init(metric_batch_interval=...)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    run(args.rows, args.interval, args.batch_interval)
    print(f"  ({time.monotonic() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
