"""``det-hub trial``: describe a trial, show its logs and metrics."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

from ._connect import client_from_args


def print_logs(lines: Iterable[dict[str, Any]], *, as_json: bool, follow: bool,
               stopped: str) -> int:
    """Prints log rows as they come, one JSON object per line with ``as_json`` (NDJSON, as the
    master streams it, so it pipes into jq). Ctrl-C while following prints ``stopped`` and
    returns 130; otherwise 0."""
    from det_hub.console import format_log_line

    try:
        for line in lines:
            print(json.dumps(line) if as_json else format_log_line(line), flush=follow)
    except KeyboardInterrupt:
        if not follow:
            raise
        print(f"\n{stopped}", file=sys.stderr)
        return 130
    return 0


def _describe(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    trial = client_from_args(args).get_trial(args.id)
    if args.json:
        r.print_json({"trial": trial.raw})
        return 0
    best = trial.best_validation or {}
    r.print_fields([
        ("ID", trial.id),
        ("Experiment", trial.experiment_id),
        ("State", trial.state),
        ("Run state", r.or_none(trial.run_state)),
        ("Steps completed", trial.steps_completed),
        ("Progress", r.fmt_percent(trial.progress)),
        ("Restarts", trial.restarts),
        ("Seed", r.or_none(trial.seed)),
        ("Hyperparameters", r.fmt_mapping(trial.hparams)),
        ("Searcher metric", r.fmt_value(trial.searcher_metric_value)),
        ("Best validation",
         f"{r.fmt_mapping(best.get('metrics'))} at step {best.get('steps_completed')}" if best else r.NONE),
        ("Latest checkpoint", r.or_none(trial.latest_checkpoint)),
        ("Started", r.fmt_time(trial.created_at)),
        ("Ended", r.fmt_time(trial.ended_at)),
        ("Duration", r.fmt_duration(trial.created_at, trial.ended_at)),
    ])
    return 0


def _logs(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    return print_logs(client.trial_logs(args.id, follow=args.follow, after_id=args.after_id),
                      as_json=args.json, follow=args.follow,
                      stopped=f"Stopped following trial {args.id}; it keeps running.")


def _metrics(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    reports = client_from_args(args).trial_metrics(args.id, group=args.group, max_points=args.max_points)
    if args.json:
        r.print_json(reports.raw)
        return 0
    names: list[str] = []
    for report in reports:
        names.extend(name for name in report.metrics if name not in names)
    headers = ["Group", "Steps", "Reported", *names]
    rows = [
        [report.group, report.steps_completed, r.fmt_time(report.report_time),
         *(r.fmt_value(report.metrics.get(name)) if name in report.metrics else "" for name in names)]
        for report in reports
    ]
    r.print_table(headers, rows)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], json_parent: argparse.ArgumentParser) -> None:
    """Adds ``trial`` (alias ``t``) and its verbs."""
    noun = subparsers.add_parser("trial", aliases=["t"], help="inspect trials")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    describe = verbs.add_parser("describe", parents=[json_parent], help="show a trial")
    describe.add_argument("id", metavar="ID", type=int)
    describe.set_defaults(func=_describe)

    logs = verbs.add_parser("logs", parents=[json_parent],
                            help="print a trial's logs (--json: one JSON object per line)")
    logs.add_argument("id", metavar="ID", type=int)
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing until the trial ends")
    logs.add_argument("--after-id", type=int, default=0, help="only lines after this log id")
    logs.set_defaults(func=_logs)

    metrics = verbs.add_parser("metrics", parents=[json_parent], help="print a trial's metrics")
    metrics.add_argument("id", metavar="ID", type=int)
    metrics.add_argument("--group", choices=["training", "validation"], help="only this group")
    metrics.add_argument("--max-points", type=int, help="downsample to about this many reports")
    metrics.set_defaults(func=_metrics)
