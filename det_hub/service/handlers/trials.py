"""Trials: reading them, their metrics and logs, and the calls training code makes."""

from __future__ import annotations

import re
from typing import Any

from det_hub import nonfinite
from det_hub.service.errors import BadRequest
from det_hub.service.handlers.base import APIHandler, log_query
from det_hub.service.serialize import metric_json, trial_json
from det_hub.states import TrialState

ID = r"(?P<trial_id>\d+)"


class TrialHandler(APIHandler):
    allow_allocation = True
    answers = {"get": "trial"}

    async def get(self, trial_id: str) -> None:
        """One trial."""
        trial = await self.master.get_trial(self.principal, int(trial_id))
        self.send({"trial": trial_json(trial)})


#: The longest key a metric batch may carry (the store's column), and the keys allowed.
MAX_BATCH_KEY = 128
BATCH_KEY = re.compile(rf"[A-Za-z0-9:._-]{{1,{MAX_BATCH_KEY}}}")


class TrialMetricsHandler(APIHandler):
    allow_allocation = True
    query = {"get": {
        "group": ("string", "training, validation or another group name (default: all)"),
        "max_points": ("integer", "downsample to about this many points per group"),
        "after": ("integer", "only points after this steps_completed"),
        "metric": ("string", "with max_points: keep the shape of this metric's curve (LTTB); "
                             "without it every k-th point is kept"),
    }}
    body = {"post": {"type": "object", "required": ["group", "metrics"], "properties": {
        "group": {"type": "string"},
        "metrics": {"type": "array", "items": {"type": "object", "required": [
            "steps_completed", "metrics"]}},
        "key": {"type": "string", "pattern": BATCH_KEY.pattern,
                "description": "unique within the trial: a batch sent again with the same "
                               "key is stored once"}}}}
    answers = {"get": "metrics", "post": "count"}

    async def get(self, trial_id: str) -> None:
        """The trial's metrics, ascending, optionally downsampled."""
        tid = int(trial_id)
        await self.master.get_trial(self.principal, tid)
        max_points = self.int_arg("max_points", 0, 0, 1_000_000) or None
        after = self.get_query_argument("after", None)
        rows = await self.master.store.get_metrics(
            tid, group=self.get_query_argument("group", None) or None, max_points=max_points,
            after=self.int_arg("after", 0) if after else None,
            metric=self.get_query_argument("metric", None) or None)
        self.send({"metrics": [metric_json(r) for r in rows]})

    async def post(self, trial_id: str) -> None:
        """Report a batch of metrics (training code)."""
        body = self.json_body()
        group = body.get("group")
        if not isinstance(group, str) or not group or len(group) > 64:
            raise BadRequest("group: must be a name such as 'training' or 'validation'")
        rows = body.get("metrics")
        if not isinstance(rows, list):
            raise BadRequest("metrics: must be a list of {steps_completed, metrics}")
        key = body.get("key")
        if key is not None and (not isinstance(key, str) or not BATCH_KEY.fullmatch(key)):
            raise BadRequest(f"key: must be 1 to {MAX_BATCH_KEY} letters, digits or ':._-'")
        count, repeat = await self.master.report_metrics(
            self.principal, int(trial_id), group, rows, key=key)
        self.send({"count": count, "repeat": repeat})


class TrialSourceInfoHandler(APIHandler):
    allow_allocation = True
    body = {"post": {"type": "object", "required": ["checkpoint_uuid"], "properties": {
        "checkpoint_uuid": {"type": "string", "description": "the checkpoint the trial used"},
        "model_name": {"type": "string",
                       "description": "with model_version: the model version it used"},
        "model_version": {"type": "integer"}}}}
    answers = {"post": "trial_source_info"}
    extra_responses = {"post": {"409": "the model version is another checkpoint"}}

    async def post(self, trial_id: str) -> None:
        """Link the trial to the checkpoint or model version it used (training code, the
        owner or an admin)."""
        link = await self.master.report_trial_source(
            self.principal, int(trial_id), self.json_body())
        self.send({"trial_source_info": link})


class TrialLogsHandler(APIHandler):
    allow_allocation = True
    query = {"get": log_query("trial")}
    answers = {"get": "logs (newline-delimited JSON)"}

    async def get(self, trial_id: str) -> None:
        """The trial's log lines as newline-delimited JSON."""
        tid = int(trial_id)
        await self.master.get_trial(self.principal, tid)
        store = self.master.store

        async def read(after: int, limit: int) -> list[Any]:
            return await store.get_logs(tid, after_id=after, limit=limit)

        async def ended() -> bool:
            trial = await self.master.get_trial(self.principal, tid)
            return TrialState(trial.state).terminal and self.master.cluster.for_trial(tid) is None

        await self.stream_logs(read, "trial_id", ended)


class TrialProgressHandler(APIHandler):
    allow_allocation = True
    body = {"post": {"type": "object", "required": ["progress"],
                     "properties": {"progress": {"type": "number"}}}}
    answers = {"post": "(empty)"}

    async def post(self, trial_id: str) -> None:
        """Report the trial's progress, 0 to 1 (training code)."""
        value = self.json_body().get("progress")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadRequest("progress: must be a number between 0 and 1")
        await self.master.report_progress(self.principal, int(trial_id), float(value))
        self.send({})


class TrialEarlyExitHandler(APIHandler):
    allow_allocation = True
    body = {"post": {"type": "object", "required": ["reason"], "properties": {
        "reason": {"enum": ["INVALID_HP", "USER_REQUESTED_STOP", "ERRORED"]}}}}
    answers = {"post": "(empty)"}

    async def post(self, trial_id: str) -> None:
        """Say why the trial is about to exit early (training code)."""
        reason = self.json_body().get("reason")
        await self.master.report_early_exit(self.principal, int(trial_id), str(reason))
        self.send({})


class ExperimentBestValidationHandler(APIHandler):
    allow_allocation = True
    answers = {"get": "best_validation"}

    async def get(self, trial_id: str) -> None:
        """The best searcher-metric value of the trial's experiment so far."""
        value = await self.master.experiment_best_validation(self.principal, int(trial_id))
        self.send({"best_validation": value})


class SearcherOperationHandler(APIHandler):
    allow_allocation = True
    answers = {"get": "operation"}

    async def get(self, trial_id: str) -> None:
        """The length the searcher wants this trial trained to."""
        self.send(await self.master.searcher_operation(self.principal, int(trial_id)))


class CompletedOperationHandler(APIHandler):
    allow_allocation = True
    body = {"post": {"type": "object", "required": ["length", "searcher_metric"], "properties": {
        "length": {"type": "integer"},
        # A number, or "NaN", "Infinity", "-Infinity" (see det_hub.nonfinite).
        "searcher_metric": {"type": ["number", "string"]}}}}
    answers = {"post": "(empty)"}

    async def post(self, trial_id: str) -> None:
        """Report that the searcher's operation is done, with the searcher metric."""
        body = self.json_body()
        length, metric = body.get("length"), nonfinite.decode(body.get("searcher_metric"))
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise BadRequest("length: must be an integer >= 0")
        if isinstance(metric, bool) or not isinstance(metric, (int, float)):
            raise BadRequest('searcher_metric: must be a number, "NaN", "Infinity" or '
                             '"-Infinity"')
        await self.master.complete_operation(self.principal, int(trial_id), length, float(metric))
        self.send({})


routes = [
    (rf"/trials/{ID}", TrialHandler),
    (rf"/trials/{ID}/metrics", TrialMetricsHandler),
    (rf"/trials/{ID}/logs", TrialLogsHandler),
    (rf"/trials/{ID}/source_info", TrialSourceInfoHandler),
    (rf"/trials/{ID}/progress", TrialProgressHandler),
    (rf"/trials/{ID}/early_exit", TrialEarlyExitHandler),
    (rf"/trials/{ID}/experiment_best_validation", ExperimentBestValidationHandler),
    (rf"/trials/{ID}/searcher/operation", SearcherOperationHandler),
    (rf"/trials/{ID}/searcher/completed_operation", CompletedOperationHandler),
]
