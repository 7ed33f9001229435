"""Tasks: commands, notebooks, shells and TensorBoards. Each type has the same resource shape
(``/commands``, ``/notebooks``, ``/shells``, ``/tensorboards``): start one, list and read them,
kill one, stream its logs. A proxied task's own process says when it serves (``/ready``)."""

from __future__ import annotations

import asyncio
from typing import Any

from det_hub.service import wire
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
        body = await self.master.tasks.to_json(self.principal, rows)
        key = self.kind.key
        self.send({key: body[0]} if one else {f"{key}s": body}, status=status)


class TasksHandler(TaskHandlerBase):
    created = frozenset({"post"})
    extra_responses = {"post": {"413": "the request body, the config or the unpacked context "
                                       "is larger than its limit"}}
    body = {"post": wire.TaskCreate}
    answers = {"get": ("{kind.key}s", list[wire.Task]), "post": ("{kind.key}", wire.Task)}

    async def get(self) -> None:
        """List the tasks of one type, oldest first."""
        rows = await self.master.tasks.of_type(self.principal, self.kind)
        await self.send_tasks(rows, one=False)

    async def post(self) -> None:
        """Start a task: run a command, or start a notebook, shell or TensorBoard."""
        kind = self.kind
        # A body may be 160 MiB: read it off the event loop, as the config and context are.
        body: wire.TaskCreate = await asyncio.to_thread(self.parsed_body)
        config = body.config if "config" in body.model_fields_set else (
            "" if kind.proxied else None)
        if config is None:
            raise BadRequest(f"config: must be the {kind.word} config's YAML text")
        context, experiment_ids = body.context, body.experiment_ids or []
        if experiment_ids and kind is not TaskType.TENSORBOARD:
            raise BadRequest(f"experiment_ids: only a TensorBoard shows experiments, not a "
                             f"{kind.word}")
        for name in ("command", "environment"):
            if getattr(body, name) is not None and kind is not TaskType.HUB_SERVER:
                raise BadRequest(f"{name}: only a hub server takes one, not a {kind.word}")
        if body.environment is not None and body.command is None:
            raise BadRequest("environment: only a hub server with a command takes one")
        task = await self.master.tasks.create(self.principal, kind, config, context,
                                             experiment_ids, command=body.command,
                                             environment=body.environment)
        await self.send_tasks([task], one=True, status=201)


class TaskHandler(TaskHandlerBase):
    answers = {"get": ("{kind.key}", wire.Task)}

    async def get(self, task_id: str) -> None:
        """One task; its owner and admins also get what lets them use it (a URL with its
        access token, a shell's private key)."""
        task = await self.master.tasks.get(self.principal, self.kind, int(task_id))
        await self.send_tasks([task], one=True)


class TaskKillHandler(TaskHandlerBase):
    answers = {"post": ("{kind.key}", wire.Task)}

    async def post(self, task_id: str) -> None:
        """Kill a task (its owner or an admin)."""
        task = await self.master.tasks.kill(self.principal, self.kind, int(task_id))
        await self.send_tasks([task], one=True)


class TaskLogsHandler(TaskHandlerBase):
    query = {"get": log_query("task")}
    answers = {"get": wire.Lines(wire.TaskLogLine)}

    async def get(self, task_id: str) -> None:
        """The task's log lines as newline-delimited JSON."""
        tid = int(task_id)
        await self.master.tasks.get(self.principal, self.kind, tid)
        tasks = self.master.tasks

        async def read(after: int, limit: int) -> list[Any]:
            return await tasks.logs(tid, after_id=after, limit=limit)

        async def ended() -> bool:
            return self.master.tasks.ended(tid)

        await self.stream_logs(read, "task_id", ended)


class TaskReadyHandler(APIHandler):
    allow_allocation = True
    body = {"post": wire.TaskPort}
    answers = {"post": wire.TaskReady}

    async def post(self, task_id: str) -> None:
        """A proxied task's server answers on this port of its agent's address (the task's
        own allocation token only)."""
        await self.master.tasks.ready(self.principal, int(task_id), self.parsed_body().port)
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
