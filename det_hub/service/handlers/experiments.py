"""Experiments: create (or fork), list, read, pause/activate/cancel/kill/archive, continue."""

from __future__ import annotations

import asyncio
from typing import Any

from det_hub.search_view import search_data
from det_hub.service import wire
from det_hub.service.context import read_yaml
from det_hub.service.errors import BadRequest
from det_hub.service.handlers.base import NO_OWNER, APIHandler
from det_hub.service.serialize import checkpoint_json, trial_json

ID = r"(?P<experiment_id>\d+)"


class ExperimentsHandler(APIHandler):
    created = frozenset({"post"})
    extra_responses = {"post": {"413": "the request body, the config or the unpacked context "
                                       "is larger than its limit"}}
    query = {"get": {
        "state": ("string", "only experiments in this state (repeat for several)"),
        "archived": ("boolean", "only archived (true) or unarchived (false) experiments"),
        "owner": ("string", "only experiments of this user"),
        "limit": ("integer", "at most this many (default 100, at most 1000)"),
        "offset": ("integer", "skip this many"),
    }}
    body = {"post": wire.ExperimentCreate}
    answers = {"get": wire.ExperimentPage, "post": ("experiment", wire.Experiment)}

    async def get(self) -> None:
        """List experiments, newest first."""
        states, owner_id = await self.experiment_filters()
        if owner_id == NO_OWNER:
            self.send({"experiments": [], "pagination": {"offset": 0, "limit": 0, "total": 0}})
            return
        limit = self.int_arg("limit", 100, 1, 1000)
        offset = self.int_arg("offset", 0)
        rows, total = await self.master.experiments.query(
            states=states or None, archived=self.bool_arg("archived"), owner_id=owner_id,
            limit=limit, offset=offset)
        self.send({"experiments": await self.master.experiments.to_json(rows),
                   "pagination": {"offset": offset, "limit": limit, "total": total}})

    async def post(self) -> None:
        """Create an experiment from a config and a context archive."""
        # A body may be 160 MiB: read it off the event loop, as the config and context are.
        body: wire.ExperimentCreate = await asyncio.to_thread(self.parsed_body)
        config, activate, parent_id = body.config, body.activate, body.parent_id
        row = await self.master.experiments.create(
            self.principal, config, body.context, activate=activate, parent_id=parent_id)
        [exp] = await self.master.experiments.to_json([row])
        self.send({"experiment": exp}, status=201)


class ExperimentHandler(APIHandler):
    answers = {"get": ("experiment", wire.Experiment)}

    async def get(self, experiment_id: str) -> None:
        """One experiment."""
        row = await self.master.experiments.get(int(experiment_id))
        [exp] = await self.master.experiments.to_json([row])
        self.send({"experiment": exp})


class ExperimentActionHandler(APIHandler):
    answers = {"post": ("experiment", wire.Experiment)}

    def initialize(self, action: str) -> None:
        self.action = action

    async def post(self, experiment_id: str) -> None:
        """Pause, activate, cancel (stop gracefully: trials checkpoint, then stop), kill
        (stop now), archive or unarchive an experiment."""
        eid, who, m = int(experiment_id), self.principal, self.master
        if self.action == "pause":
            row = await m.experiments.pause(who, eid)
        elif self.action == "activate":
            row = await m.experiments.activate(who, eid)
        elif self.action == "cancel":
            row = await m.experiments.cancel(who, eid)
        elif self.action == "kill":
            row = await m.experiments.kill(who, eid)
        else:
            row = await m.experiments.set_archived(who, eid, self.action == "archive")
        [exp] = await m.experiments.to_json([row])
        self.send({"experiment": exp})


class ContinueHandler(APIHandler):
    answers = {"post": ("experiment", wire.Experiment)}
    body = {"post": wire.ExperimentContinue}
    extra_responses = {"post": {"413": "the request body or the config is larger than its "
                                       "limit"}}

    async def post(self, experiment_id: str) -> None:
        """Train a finished experiment on from its latest checkpoints, in place."""
        body: wire.ExperimentContinue = await asyncio.to_thread(self.parsed_body)
        text = body.config
        limits = self.master.experiments.config_limits
        overrides = await read_yaml(text, limits, "config") if text else {}
        if overrides is None:
            overrides = {}
        if not isinstance(overrides, dict):
            raise BadRequest("config: must be a mapping of settings")
        row = await self.master.experiments.continue_experiment(self.principal, int(experiment_id),
                                                    overrides)
        [exp] = await self.master.experiments.to_json([row])
        self.send({"experiment": exp})


class CheckpointGCHandler(APIHandler):
    answers = {"post": wire.CheckpointGCResult}
    body = {"post": wire.CheckpointGCPolicy}

    async def post(self, experiment_id: str) -> None:
        """Set the experiment's checkpoint retention policy and run checkpoint GC now."""
        self.send(await self.master.checkpoints.collect(self.principal, int(experiment_id),
                                                        self.parsed_body()))


class ExperimentTrialsHandler(APIHandler):
    answers = {"get": ("trials", list[wire.Trial])}

    async def get(self, experiment_id: str) -> None:
        """The experiment's trials."""
        trials = await self.master.experiments.trials(int(experiment_id))
        self.send({"trials": [trial_json(t) for t in trials]})


class ExperimentCheckpointsHandler(APIHandler):
    answers = {"get": ("checkpoints", list[wire.Checkpoint])}

    async def get(self, experiment_id: str) -> None:
        """The experiment's checkpoints, newest first."""
        rows = await self.master.checkpoints.of_experiment(int(experiment_id))
        self.send({"checkpoints": [checkpoint_json(c) for c in rows]})


class SearcherStateHandler(APIHandler):
    answers = {"get": ("searcher", dict[str, Any])}

    async def get(self, experiment_id: str) -> None:
        """The experiment's searcher state: its search method's, and each trial's length
        done as the searcher counts it."""
        self.send({"searcher": await self.master.experiments.searcher_state(int(experiment_id))})


class SearcherHandler(APIHandler):
    answers = {"get": ("searcher", wire.SearcherView)}

    async def get(self, experiment_id: str) -> None:
        """The search at a glance: method, progress, trials and, for ASHA, the rung table."""
        self.send({"searcher": await self.master.experiments.searcher_view(int(experiment_id))})


class SearchViewHandler(APIHandler):
    answers = {"get": ("search", wire.SearchView | None)}

    async def get(self, experiment_id: str) -> None:
        """The search at a glance: its trials' hyperparameters against the searcher metric
        (parallel coordinates, and a chart per hyperparameter); null until two trials have
        a metric."""
        experiments, eid = self.master.experiments, int(experiment_id)
        [experiment] = await experiments.to_json([await experiments.get(eid)])
        trials = [trial_json(t) for t in await experiments.trials(eid)]
        self.send({"search": search_data(experiment, trials)})


class ImportanceHandler(APIHandler):
    answers = {"get": wire.HyperparameterImportance}

    async def get(self, experiment_id: str) -> None:
        """How much each hyperparameter explains the searcher metric: optuna's fANOVA over
        the trials' best metric values (needs optuna and scikit-learn on the master)."""
        self.send(await self.master.importance.of(int(experiment_id)))


class ContextHandler(APIHandler):
    answers = {"get": "the context archive (application/gzip)"}

    async def get(self, experiment_id: str) -> None:
        """The experiment's context archive (.tar.gz)."""
        eid = int(experiment_id)
        data = await self.master.experiments.context(eid) or b""
        self.set_header("Content-Type", "application/gzip")
        self.set_header("Content-Disposition", f'attachment; filename="experiment-{eid}.tar.gz"')
        self.finish(data)


routes = [
    (r"/experiments", ExperimentsHandler),
    (rf"/experiments/{ID}", ExperimentHandler),
    *[(rf"/experiments/{ID}/{action}", ExperimentActionHandler, {"action": action})
      for action in ("pause", "activate", "cancel", "kill", "archive", "unarchive")],
    (rf"/experiments/{ID}/continue", ContinueHandler),
    (rf"/experiments/{ID}/trials", ExperimentTrialsHandler),
    (rf"/experiments/{ID}/checkpoints", ExperimentCheckpointsHandler),
    (rf"/experiments/{ID}/gc", CheckpointGCHandler),
    (rf"/experiments/{ID}/searcher", SearcherHandler),
    (rf"/experiments/{ID}/hyperparameter-importance", ImportanceHandler),
    (rf"/experiments/{ID}/search-view", SearchViewHandler),
    (rf"/experiments/{ID}/searcher_state", SearcherStateHandler),
    (rf"/experiments/{ID}/context", ContextHandler),
]
