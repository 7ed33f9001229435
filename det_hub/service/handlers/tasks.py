"""Commands: run one on the cluster, list and read them, kill one, stream its logs."""

from __future__ import annotations

from typing import Any

from det_hub.service.errors import BadRequest
from det_hub.service.handlers.base import APIHandler

ID = r"(?P<task_id>\d+)"


class CommandsHandler(APIHandler):
    created = frozenset({"post"})
    extra_responses = {"post": {"413": "the context is larger than 96 MiB unpacked"}}
    body = {"post": {"type": "object", "required": ["config"], "properties": {
        "config": {"type": "string", "description": (
            "the command config as YAML text (entrypoint, resources, environment, "
            "bind_mounts, description, idle_timeout)")},
        "context": {"type": ["string", "null"], "description": "base64 of a .tar.gz"}}}}
    answers = {"get": "commands", "post": "command"}

    async def get(self) -> None:
        """List commands, oldest first."""
        rows = await self.master.list_commands(self.principal)
        self.send({"commands": await self.master.command_json(rows)})

    async def post(self) -> None:
        """Run a command on the cluster."""
        body = self.json_body()
        config = body.get("config")
        if not isinstance(config, str):
            raise BadRequest("config: must be the command config's YAML text")
        context = body.get("context")
        if context is not None and not isinstance(context, str):
            raise BadRequest("context: must be base64 text or null")
        task = await self.master.create_command(self.principal, config, context)
        [command] = await self.master.command_json([task])
        self.send({"command": command}, status=201)


class CommandHandler(APIHandler):
    answers = {"get": "command"}

    async def get(self, task_id: str) -> None:
        """One command."""
        task = await self.master.get_command(self.principal, int(task_id))
        [command] = await self.master.command_json([task])
        self.send({"command": command})


class CommandKillHandler(APIHandler):
    answers = {"post": "command"}

    async def post(self, task_id: str) -> None:
        """Kill a command (its owner or an admin)."""
        task = await self.master.kill_command(self.principal, int(task_id))
        [command] = await self.master.command_json([task])
        self.send({"command": command})


class CommandLogsHandler(APIHandler):
    query = {"get": {
        "follow": ("boolean", "keep the stream open until the command ends"),
        "after_id": ("integer", "only lines after this id"),
        "limit": ("integer", "at most this many lines (without follow)"),
    }}
    answers = {"get": "logs (newline-delimited JSON)"}

    async def get(self, task_id: str) -> None:
        """The command's log lines as newline-delimited JSON."""
        tid = int(task_id)
        await self.master.get_command(self.principal, tid)
        store = self.master.store

        async def read(after: int, limit: int) -> list[Any]:
            return await store.get_task_logs(tid, after_id=after, limit=limit)

        async def ended() -> bool:
            return self.master.command_ended(tid)

        await self.stream_logs(read, "task_id", ended)


routes = [
    (r"/commands", CommandsHandler),
    (rf"/commands/{ID}", CommandHandler),
    (rf"/commands/{ID}/kill", CommandKillHandler),
    (rf"/commands/{ID}/logs", CommandLogsHandler),
]
