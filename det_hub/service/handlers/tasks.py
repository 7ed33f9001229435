"""Tasks: commands, notebooks, shells and TensorBoards. Each type has the same resource shape
(``/commands``, ``/notebooks``, ``/shells``, ``/tensorboards``): start one, list and read them,
kill one, stream its logs. A proxied task's own process says when it serves (``/ready``)."""

from __future__ import annotations

from typing import Any

from det_hub.service.errors import BadRequest
from det_hub.service.handlers.base import APIHandler, log_query
from det_hub.states import TaskType

ID = r"(?P<task_id>\d+)"


class TaskHandlerBase(APIHandler):
    """A handler for the tasks of one type, given by its route."""

    kind: TaskType

    def initialize(self, kind: TaskType) -> None:
        self.kind = kind

    async def send_tasks(self, rows: list[Any], *, one: bool, status: int = 200) -> None:
        body = await self.master.task_json(self.principal, rows)
        key = self.kind.key
        self.send({key: body[0]} if one else {f"{key}s": body}, status=status)


class TasksHandler(TaskHandlerBase):
    created = frozenset({"post"})
    extra_responses = {"post": {"413": "the context is larger than 96 MiB unpacked"}}
    body = {"post": {"type": "object", "properties": {
        "config": {"type": "string", "description": (
            "the task config as YAML text: resources, environment, bind_mounts, description, "
            "idle_timeout; a command's also entrypoint (required for commands)")},
        "context": {"type": ["string", "null"], "description": "base64 of a .tar.gz"},
        "experiment_ids": {"type": "array", "items": {"type": "integer"},
                           "description": "a TensorBoard's experiments (tensorboards only)"}}}}
    answers = {"get": "commands | notebooks | shells | tensorboards",
               "post": "command | notebook | shell | tensorboard"}

    async def get(self) -> None:
        """List the tasks of one type, oldest first."""
        rows = await self.master.list_tasks(self.principal, self.kind)
        await self.send_tasks(rows, one=False)

    async def post(self) -> None:
        """Start a task: run a command, or start a notebook, shell or TensorBoard."""
        kind = self.kind
        body = self.json_body()
        config = body.get("config", "" if kind.proxied else None)
        if not isinstance(config, str):
            raise BadRequest(f"config: must be the {kind.word} config's YAML text")
        context = body.get("context")
        if context is not None and not isinstance(context, str):
            raise BadRequest("context: must be base64 text or null")
        experiment_ids = body.get("experiment_ids") or []
        if not isinstance(experiment_ids, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in experiment_ids):
            raise BadRequest("experiment_ids: must be a list of experiment ids")
        if experiment_ids and kind is not TaskType.TENSORBOARD:
            raise BadRequest(f"experiment_ids: only a TensorBoard shows experiments, not a "
                             f"{kind.word}")
        task = await self.master.create_task(self.principal, kind, config, context,
                                             experiment_ids)
        await self.send_tasks([task], one=True, status=201)


class TaskHandler(TaskHandlerBase):
    answers = {"get": "command | notebook | shell | tensorboard"}

    async def get(self, task_id: str) -> None:
        """One task; its owner and admins also get what lets them use it (a URL with its
        access token, a shell's private key)."""
        task = await self.master.get_task(self.principal, self.kind, int(task_id))
        await self.send_tasks([task], one=True)


class TaskKillHandler(TaskHandlerBase):
    answers = {"post": "command | notebook | shell | tensorboard"}

    async def post(self, task_id: str) -> None:
        """Kill a task (its owner or an admin)."""
        task = await self.master.kill_task(self.principal, self.kind, int(task_id))
        await self.send_tasks([task], one=True)


class TaskLogsHandler(TaskHandlerBase):
    query = {"get": log_query("task")}
    answers = {"get": "logs (newline-delimited JSON)"}

    async def get(self, task_id: str) -> None:
        """The task's log lines as newline-delimited JSON."""
        tid = int(task_id)
        await self.master.get_task(self.principal, self.kind, tid)
        store = self.master.store

        async def read(after: int, limit: int) -> list[Any]:
            return await store.get_task_logs(tid, after_id=after, limit=limit)

        async def ended() -> bool:
            return self.master.task_ended(tid)

        await self.stream_logs(read, "task_id", ended)


class TaskReadyHandler(APIHandler):
    allow_allocation = True
    body = {"post": {"type": "object", "required": ["port"], "properties": {
        "port": {"type": "integer", "description": "the port the task's server answers on"}}}}
    answers = {"post": "ready"}

    async def post(self, task_id: str) -> None:
        """A proxied task's server answers on this port of its agent's address (the task's
        own allocation token only)."""
        await self.master.task_ready(self.principal, int(task_id), self.json_body().get("port"))
        self.send({"ready": True})


routes: list[tuple[Any, ...]] = [
    route
    for kind in TaskType
    for route in (
        (rf"/{kind.key}s", TasksHandler, {"kind": kind}),
        (rf"/{kind.key}s/{ID}", TaskHandler, {"kind": kind}),
        (rf"/{kind.key}s/{ID}/kill", TaskKillHandler, {"kind": kind}),
        (rf"/{kind.key}s/{ID}/logs", TaskLogsHandler, {"kind": kind}),
    )
]
routes.append((rf"/tasks/{ID}/ready", TaskReadyHandler))
