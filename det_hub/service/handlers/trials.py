"""Trials: reading them, their metrics and logs, and the calls training code makes."""

from __future__ import annotations

from typing import Any

import orjson

from det_hub import nonfinite
from det_hub.service import wire
from det_hub.service.handlers.base import APIHandler, log_query
from det_hub.service.reports import read_report
from det_hub.service.serialize import metric_json, rolled_back_metric_json, trial_json

ID = r"(?P<trial_id>\d+)"


class TrialHandler(APIHandler):
    allow_allocation = True
    answers = {"get": ("trial", wire.Trial)}

    async def get(self, trial_id: str) -> None:
        """One trial."""
        trial = await self.master.experiments.get_trial(self.principal, int(trial_id))
        self.send({"trial": trial_json(trial)})


class TrialMetricsHandler(APIHandler):
    allow_allocation = True
    query = {"get": {
        "group": ("string", "training, validation or another group name (default: all)"),
        "max_points": ("integer", "downsample to about this many points per group"),
        "after": ("integer", "only points after this steps_completed"),
        "metric": ("string", "with max_points: keep the shape of this metric's curve (LTTB); "
                             "without it every k-th point is kept"),
    }}
    body = {"post": wire.MetricBatch | wire.MetricColumns}
    answers = {"get": ("metrics", list[wire.MetricRow]), "post": wire.MetricsStored}

    async def get(self, trial_id: str) -> None:
        """The trial's metrics, ascending, optionally downsampled."""
        max_points = self.int_arg("max_points", 0, 0, 1_000_000) or None
        after = self.get_query_argument("after", None)
        rows = await self.master.trials.metrics(
            self.principal, int(trial_id),
            group=self.get_query_argument("group", None) or None, max_points=max_points,
            after=self.int_arg("after", 0) if after else None,
            metric=self.get_query_argument("metric", None) or None)
        self.send({"metrics": [metric_json(r) for r in rows]})

    async def post(self, trial_id: str) -> None:
        """Report a batch of metrics (training code)."""
        count, repeat = await self.master.trials.report_metrics(
            self.principal, int(trial_id), read_report(self.json_body()))
        answer: dict[str, Any] = {"count": count, "repeat": repeat}
        alloc = self.principal.allocation
        if alloc is not None:
            # Read once the searcher has acted on the batch (a repeat's too: its first answer
            # may be what was lost): training code stops at the rung that decided it.
            answer["preempt"] = alloc.preempt.is_set()
        self.send(answer)


class MetricColumnsHandler(APIHandler):
    allow_allocation = True
    query = {"get": {
        "group": ("string", "only this group (training, validation, ...)"),
        "metric": ("string", "only this metric; repeat for several"),
        "after": ("integer", "only rows after this steps_completed"),
    }}
    answers = {"get": wire.TrialMetricColumns}

    async def get(self, trial_id: str) -> None:
        """The trial's metrics as columns, by group: every row, in a form read in bulk (a
        curve of 100,000 points in a fraction of a second)."""
        after = self.get_query_argument("after", None)
        groups = await self.master.trials.metric_columns(
            self.principal, int(trial_id),
            group=self.get_query_argument("group", None) or None,
            names=self.get_query_arguments("metric") or None,
            after=self.int_arg("after", 0) if after else None)
        answer = {"trial_id": int(trial_id), "groups": {g: c.json() for g, c in groups.items()}}
        try:
            # Stored values are JSON already (NaN as Determined's strings): no pass over them.
            body = orjson.dumps(answer)
        except orjson.JSONEncodeError:  # a whole number past 64 bits
            body = nonfinite.dumps(answer).encode()
        self.set_header("Content-Type", "application/json")
        self.finish(body)


class RolledBackMetricsHandler(APIHandler):
    allow_allocation = True
    answers = {"get": ("metrics", list[wire.RolledBackMetricRow])}

    async def get(self, trial_id: str) -> None:
        """The rows a later run of the trial rolled back: reported past the checkpoint that
        run started from, they count nowhere else and are kept for audit."""
        rows = await self.master.trials.rolled_back_metrics(self.principal, int(trial_id))
        self.send({"metrics": [rolled_back_metric_json(r) for r in rows]})


class TrialSourceInfoHandler(APIHandler):
    allow_allocation = True
    body = {"post": wire.TrialSourceLink}
    answers = {"post": ("trial_source_info", wire.TrialSourceInfo)}
    extra_responses = {"post": {"409": "the model version is another checkpoint"}}

    async def post(self, trial_id: str) -> None:
        """Link the trial to the checkpoint or model version it used (training code, the
        owner or an admin)."""
        link = await self.master.trials.report_source(
            self.principal, int(trial_id), self.parsed_body())
        self.send({"trial_source_info": link})


class TrialLogsHandler(APIHandler):
    allow_allocation = True
    query = {"get": log_query("trial")}
    answers = {"get": wire.Lines(wire.TrialLogLine)}

    async def get(self, trial_id: str) -> None:
        """The trial's log lines as newline-delimited JSON."""
        tid = int(trial_id)
        trials = self.master.trials
        await self.master.experiments.get_trial(self.principal, tid)

        async def read(after: int, limit: int) -> list[Any]:
            return await trials.logs(tid, after_id=after, limit=limit)

        async def ended() -> bool:
            return await trials.ended(self.principal, tid)

        await self.stream_logs(read, "trial_id", ended)


class TrialProgressHandler(APIHandler):
    allow_allocation = True
    body = {"post": wire.TrialProgress}
    answers = {"post": wire.Empty}

    async def post(self, trial_id: str) -> None:
        """Report the trial's progress, 0 to 1 (training code)."""
        value = self.parsed_body().progress
        await self.master.trials.report_progress(self.principal, int(trial_id), float(value))
        self.send({})


class TrialEarlyExitHandler(APIHandler):
    allow_allocation = True
    body = {"post": wire.TrialEarlyExit}
    answers = {"post": wire.Empty}

    async def post(self, trial_id: str) -> None:
        """Say why the trial is about to exit early (training code)."""
        reason = self.parsed_body().reason
        await self.master.trials.report_early_exit(self.principal, int(trial_id), str(reason))
        self.send({})


class ExperimentBestValidationHandler(APIHandler):
    allow_allocation = True
    answers = {"get": wire.BestValidation}

    async def get(self, trial_id: str) -> None:
        """The best searcher-metric value of the trial's experiment so far."""
        value = await self.master.trials.best_validation(self.principal, int(trial_id))
        self.send({"best_validation": value})


class SearcherOperationHandler(APIHandler):
    allow_allocation = True
    answers = {"get": wire.SearcherOperation}

    async def get(self, trial_id: str) -> None:
        """The length the searcher wants this trial trained to."""
        self.send(await self.master.trials.searcher_operation(self.principal, int(trial_id)))


class CompletedOperationHandler(APIHandler):
    allow_allocation = True
    body = {"post": wire.CompletedOperation}
    answers = {"post": wire.Empty}

    async def post(self, trial_id: str) -> None:
        """Report that the searcher's operation is done, with the searcher metric."""
        body: wire.CompletedOperation = self.parsed_body()
        length, metric = body.length, nonfinite.decode(body.searcher_metric)
        await self.master.trials.complete_operation(self.principal, int(trial_id), length,
                                                    float(metric))
        self.send({})


routes = [
    (rf"/trials/{ID}", TrialHandler),
    (rf"/trials/{ID}/metrics", TrialMetricsHandler),
    (rf"/trials/{ID}/metrics/rolled_back", RolledBackMetricsHandler),
    (rf"/trials/{ID}/metrics/columns", MetricColumnsHandler),
    (rf"/trials/{ID}/logs", TrialLogsHandler),
    (rf"/trials/{ID}/source_info", TrialSourceInfoHandler),
    (rf"/trials/{ID}/progress", TrialProgressHandler),
    (rf"/trials/{ID}/early_exit", TrialEarlyExitHandler),
    (rf"/trials/{ID}/experiment_best_validation", ExperimentBestValidationHandler),
    (rf"/trials/{ID}/searcher/operation", SearcherOperationHandler),
    (rf"/trials/{ID}/searcher/completed_operation", CompletedOperationHandler),
]
