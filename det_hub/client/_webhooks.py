"""Webhooks in the SDK: :class:`Webhook`, a view of the master's webhook object."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from ._objects import _dict, _int, _opt_int, parse_time


@dataclass
class WebhookTrigger:
    """One event a webhook fires on: ``EXPERIMENT_STATE_CHANGE`` with ``{"state": ...}``, or
    ``CUSTOM`` (alerts from training code)."""

    trigger_type: str
    condition: dict[str, Any] = field(default_factory=dict)
    #: The master's id of the trigger (None for one not registered yet).
    id: int | None = field(default=None, compare=False)

    def __str__(self) -> str:
        """``TYPE:VALUE`` as the CLI's ``--trigger`` takes it (``CUSTOM`` alone when no
        condition)."""
        value = next(iter(self.condition.values()), None)
        return self.trigger_type if value is None else f"{self.trigger_type}:{value}"


@dataclass
class Webhook:
    """A URL the master POSTs events to (see :meth:`Client.create_webhook`)."""

    id: int
    url: str
    webhook_type: str = "DEFAULT"
    name: str = ""
    mode: str = "WORKSPACE"
    triggers: list[WebhookTrigger] = field(default_factory=list)
    created_at: dt.datetime | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Webhook:
        """Builds a :class:`Webhook` from the API's webhook object."""
        triggers = data.get("triggers")
        return cls(
            id=_int(data.get("id")),
            url=str(data.get("url") or ""),
            webhook_type=str(data.get("webhook_type") or "DEFAULT"),
            name=str(data.get("name") or ""),
            mode=str(data.get("mode") or "WORKSPACE"),
            triggers=[WebhookTrigger(str(t.get("trigger_type") or ""), _dict(t.get("condition")),
                                     _opt_int(t.get("id")))
                      for t in (triggers if isinstance(triggers, list) else [])
                      if isinstance(t, dict)],
            created_at=parse_time(data.get("created_at")),
            raw=data,
        )


def parse_trigger(text: str) -> dict[str, Any]:
    """A trigger of the API from ``TYPE[:VALUE]``: ``EXPERIMENT_STATE_CHANGE:COMPLETED`` is a
    state condition, ``CUSTOM`` every alert and ``CUSTOM:error`` alerts of that level."""
    kind, _, value = text.partition(":")
    kind = kind.strip().upper()
    if not value:
        return {"trigger_type": kind, "condition": {}}
    key = "state" if kind == "EXPERIMENT_STATE_CHANGE" else "level"
    value = value.strip()
    return {"trigger_type": kind,
            "condition": {key: value.upper() if key == "state" else value.lower()}}
