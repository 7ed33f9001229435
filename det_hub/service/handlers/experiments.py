"""Experiments: create (or fork), list, read, pause/activate/cancel/kill/archive, continue."""

from __future__ import annotations

import yaml

from det_hub.service.errors import BadRequest
from det_hub.service.handlers.base import NO_OWNER, APIHandler
from det_hub.service.serialize import checkpoint_json, trial_json

ID = r"(?P<experiment_id>\d+)"


class ExperimentsHandler(APIHandler):
    created = frozenset({"post"})
    extra_responses = {"post": {"413": "the context is larger than 96 MiB unpacked"}}
    query = {"get": {
        "state": ("string", "only experiments in this state (repeat for several)"),
        "archived": ("boolean", "only archived (true) or unarchived (false) experiments"),
        "owner": ("string", "only experiments of this user"),
        "limit": ("integer", "at most this many (default 100, at most 1000)"),
        "offset": ("integer", "skip this many"),
    }}
    body = {"post": {"type": "object", "required": ["config"], "properties": {
        "config": {"type": "string", "description": "the experiment config as YAML text"},
        "context": {"type": ["string", "null"], "description": "base64 of a .tar.gz"},
        "activate": {"type": "boolean", "default": True},
        "parent_id": {"type": ["integer", "null"], "description": (
            "fork this experiment: recorded as forked_from, and its context is used when "
            "none is sent")}}}}
    answers = {"get": "experiments", "post": "experiment"}

    async def get(self) -> None:
        """List experiments, newest first."""
        states, owner_id = await self.experiment_filters()
        if owner_id == NO_OWNER:
            self.send({"experiments": [], "pagination": {"offset": 0, "limit": 0, "total": 0}})
            return
        limit = self.int_arg("limit", 100, 1, 1000)
        offset = self.int_arg("offset", 0)
        rows, total = await self.master.list_experiments(
            states=states or None, archived=self.bool_arg("archived"), owner_id=owner_id,
            limit=limit, offset=offset)
        self.send({"experiments": await self.master.experiment_json(rows),
                   "pagination": {"offset": offset, "limit": limit, "total": total}})

    async def post(self) -> None:
        """Create an experiment from a config and a context archive."""
        body = self.json_body()
        config = body.get("config")
        if not isinstance(config, str):
            raise BadRequest("config: must be the experiment config's YAML text")
        activate = body.get("activate", True)
        if not isinstance(activate, bool):
            raise BadRequest("activate: must be true or false")
        parent_id = body.get("parent_id")
        if parent_id is not None and (isinstance(parent_id, bool) or
                                      not isinstance(parent_id, int)):
            raise BadRequest("parent_id: must be an experiment id")
        row = await self.master.create_experiment(
            self.principal, config, body.get("context"), activate=activate, parent_id=parent_id)
        [exp] = await self.master.experiment_json([row])
        self.send({"experiment": exp}, status=201)


class ExperimentHandler(APIHandler):
    answers = {"get": "experiment"}

    async def get(self, experiment_id: str) -> None:
        """One experiment."""
        row = await self.master.get_experiment(int(experiment_id))
        [exp] = await self.master.experiment_json([row])
        self.send({"experiment": exp})


class ExperimentActionHandler(APIHandler):
    answers = {"post": "experiment"}

    def initialize(self, action: str) -> None:
        self.action = action

    async def post(self, experiment_id: str) -> None:
        """Pause, activate, cancel (stop gracefully: trials checkpoint, then stop), kill
        (stop now), archive or unarchive an experiment."""
        eid, who, m = int(experiment_id), self.principal, self.master
        if self.action == "pause":
            row = await m.pause(who, eid)
        elif self.action == "activate":
            row = await m.activate(who, eid)
        elif self.action == "cancel":
            row = await m.cancel(who, eid)
        elif self.action == "kill":
            row = await m.kill(who, eid)
        else:
            row = await m.set_archived(who, eid, self.action == "archive")
        [exp] = await m.experiment_json([row])
        self.send({"experiment": exp})


class ContinueHandler(APIHandler):
    answers = {"post": "experiment"}
    body = {"post": {"type": "object", "properties": {
        "config": {"type": ["string", "null"], "description": (
            "YAML of the settings to change, merged into the experiment's config (a partial "
            "config, such as 'searcher: {max_length: {batches: 2000}}')")}}}}

    async def post(self, experiment_id: str) -> None:
        """Train a finished experiment on from its latest checkpoints, in place."""
        text = self.json_body().get("config")
        if text is not None and not isinstance(text, str):
            raise BadRequest("config: must be YAML text")
        try:
            overrides = yaml.safe_load(text) if text else {}
        except yaml.YAMLError as e:
            raise BadRequest(f"config: invalid YAML: {e}") from None
        if not isinstance(overrides, dict):
            raise BadRequest("config: must be a mapping of settings")
        row = await self.master.continue_experiment(self.principal, int(experiment_id),
                                                    overrides)
        [exp] = await self.master.experiment_json([row])
        self.send({"experiment": exp})


class CheckpointGCHandler(APIHandler):
    answers = {"post": "gc"}
    body = {"post": {"type": "object", "properties": {
        "save_experiment_best": {"type": "integer", "minimum": 0},
        "save_trial_best": {"type": "integer", "minimum": 0},
        "save_trial_latest": {"type": "integer", "minimum": 0},
        "dry_run": {"type": "boolean", "default": False, "description": (
            "only answer what would be deleted; change nothing")}}}}

    async def post(self, experiment_id: str) -> None:
        """Set the experiment's checkpoint retention policy and run checkpoint GC now."""
        self.send(await self.master.collect_checkpoints(self.principal, int(experiment_id),
                                                        self.json_body()))


class ExperimentTrialsHandler(APIHandler):
    answers = {"get": "trials"}

    async def get(self, experiment_id: str) -> None:
        """The experiment's trials."""
        eid = int(experiment_id)
        await self.master.get_experiment(eid)
        run = self.master.runs.get(eid)
        trials = sorted(run.trials.values(), key=lambda t: t.id) if run else \
            await self.master.store.list_trials(eid)
        self.send({"trials": [trial_json(t) for t in trials]})


class ExperimentCheckpointsHandler(APIHandler):
    answers = {"get": "checkpoints"}

    async def get(self, experiment_id: str) -> None:
        """The experiment's checkpoints, newest first."""
        eid = int(experiment_id)
        await self.master.get_experiment(eid)
        rows = await self.master.store.list_checkpoints(experiment_id=eid)
        self.send({"checkpoints": [checkpoint_json(c) for c in rows]})


class SearcherStateHandler(APIHandler):
    answers = {"get": "searcher"}

    async def get(self, experiment_id: str) -> None:
        """The experiment's searcher state."""
        row = await self.master.get_experiment(int(experiment_id))
        self.send({"searcher": row.searcher_state or {}})


class SearcherHandler(APIHandler):
    answers = {"get": "searcher"}

    async def get(self, experiment_id: str) -> None:
        """The search at a glance: method, progress, trials and, for ASHA, the rung table."""
        self.send({"searcher": await self.master.searcher_view(int(experiment_id))})


class ContextHandler(APIHandler):
    answers = {"get": "context"}

    async def get(self, experiment_id: str) -> None:
        """The experiment's context archive (.tar.gz)."""
        eid = int(experiment_id)
        await self.master.get_experiment(eid)
        data = await self.master.store.get_experiment_context(eid) or b""
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
    (rf"/experiments/{ID}/searcher_state", SearcherStateHandler),
    (rf"/experiments/{ID}/context", ContextHandler),
]
