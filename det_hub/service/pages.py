"""Pages for people in browsers, behind the hub's sign-in: for now the home page, which shows
who is signed in, the experiments and the running notebooks, shells and TensorBoards."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from tornado.web import authenticated

from det_hub.service.hub import page_base
from det_hub.states import TaskType

if TYPE_CHECKING:
    from det_hub.service.master import Master


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows) or f'<tr><td colspan="{len(headers)}">none</td></tr>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page_handlers(base_url: str) -> list[tuple[Any, ...]]:
    """The pages' routes under the service's prefix."""

    class HomePage(page_base()):  # type: ignore[misc]
        """``<prefix>``: the signed-in user, the experiments, the live tasks."""

        @property
        def master(self) -> Master:
            return self.application.settings["master"]

        @authenticated
        async def get(self) -> None:
            model = self.current_user
            experiments, _ = await self.master.store.list_experiments(limit=100)
            owners = {e.owner_id: await self.master.username(e.owner_id) for e in experiments}
            tasks = [t for t in self.master.tasks.live.values()
                     if TaskType(t.type) is not TaskType.COMMAND]
            who = html.escape(model["name"]) + (" (admin)" if model.get("admin") else "")
            self.write(
                "<!doctype html><html><head><meta charset='utf-8'><title>det_hub</title>"
                "</head><body>"
                f"<h1>det_hub</h1><p id='user'>Signed in as {who}.</p>"
                "<h2>Experiments</h2>" + _table(
                    ["ID", "Name", "State", "Owner", "Progress"],
                    [[e.id, e.name, e.state, owners[e.owner_id],
                      f"{(e.progress or 0) * 100:.0f}%"] for e in experiments]) +
                "<h2>Notebooks, shells and TensorBoards</h2>" + _table(
                    ["ID", "Type", "Description", "State"],
                    [[t.id, t.type, t.description, t.state] for t in tasks]) +
                "</body></html>")

    return [(base_url, HomePage)]


__all__ = ["page_handlers"]
