"""Webhooks, as Determined has them: the master POSTs an event to each registered URL whose
triggers match it.

Events are an experiment reaching a state (``EXPERIMENT_STATE_CHANGE``, condition
``{"state": "COMPLETED"}``) and alerts from training code (``CUSTOM``, sent by
``core_context.alert(title, description, level)``). A ``DEFAULT`` webhook gets Determined's
JSON event, a ``SLACK`` webhook a Slack message.

Checking input and building payloads are pure functions below; :class:`WebhookManager` does
the I/O: it reads the matching webhooks and delivers to each in a task of its own, with
retries and a timeout, so that neither a state change nor a request waits on a receiver.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import json
import logging
import secrets
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from traitlets import Float, Integer, Unicode
from traitlets.config import LoggingConfigurable

from det_hub.defaults import DEFAULT_SLOTS
from det_hub.service.errors import BadRequest, Forbidden, NotFound
from det_hub.service.serialize import iso
from det_hub.states import ExperimentState
from det_hub.store import NotFound as StoreNotFound

if TYPE_CHECKING:
    from det_hub.service.master import Principal
    from det_hub.store import Experiment, Store, Trial, Webhook

log = logging.getLogger("det_hub.webhooks")

EXPERIMENT_STATE_CHANGE = "EXPERIMENT_STATE_CHANGE"
CUSTOM = "CUSTOM"
#: The trigger types a webhook may have (Determined's ``TASK_LOG`` is not one yet).
TRIGGER_TYPES = (EXPERIMENT_STATE_CHANGE, CUSTOM)
WEBHOOK_TYPES = ("DEFAULT", "SLACK")
#: ``WORKSPACE``: every experiment's events. ``SPECIFIC``: only the events of experiments
#: whose config names the webhook, by name or id, as Determined's configs do::
#:
#:     integrations:
#:       webhooks:
#:         webhook_name: [ci]
#:         webhook_id: [3]
MODES = ("WORKSPACE", "SPECIFIC")
#: The headers that sign a delivery (:func:`sign`), named as Determined names them.
SIGNATURE_HEADER = "X-Determined-AI-Signature"
SIGNATURE_TIMESTAMP_HEADER = "X-Determined-AI-Signature-Timestamp"
#: The levels of a custom alert, as ``core_context.alert`` gives them.
ALERT_LEVELS = ("debug", "info", "warn", "error")
MAX_NAME = 255
MAX_URL = 2048
MAX_TITLE = 1000
MAX_DESCRIPTION = 10_000
#: Where a workspace or project would be named in Determined's payloads; det_hub has none.
UNCATEGORIZED = "Uncategorized"


@dataclasses.dataclass(frozen=True)
class WebhookSpec:
    """A webhook to register, checked."""

    url: str
    webhook_type: str
    triggers: tuple[tuple[str, dict[str, Any]], ...]
    name: str = ""
    mode: str = "WORKSPACE"


@dataclasses.dataclass(frozen=True)
class Alert:
    """A custom alert from training code, checked."""

    title: str
    description: str
    level: str


def _problem(path: str, message: str) -> dict[str, str]:
    return {"path": path, "message": message}


def _refuse(problems: list[dict[str, str]]) -> BadRequest:
    return BadRequest("; ".join(f"{p['path']}: {p['message']}" for p in problems), problems)


def url_problem(url: Any) -> str | None:
    """Why ``url`` cannot be a webhook's URL, or None when it can (http or https, a host)."""
    if not isinstance(url, str) or not url:
        return "must be an http:// or https:// URL"
    if len(url) > MAX_URL:
        return f"must be at most {MAX_URL} characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as e:
        return f"{url!r} is not a valid URL ({e})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http:// or https:// URL with a host"
    if any(c.isspace() for c in url):
        return f"{url!r} holds whitespace"
    return None


def condition_problems(path: str, trigger_type: str, condition: Any) -> list[dict[str, str]]:
    """What is wrong with a trigger's condition (empty when nothing)."""
    if not isinstance(condition, dict):
        return [_problem(path, "must be an object")]
    if trigger_type == EXPERIMENT_STATE_CHANGE:
        state = condition.get("state")
        extra = sorted(set(condition) - {"state"})
        problems = [_problem(f"{path}.{k}", "unknown key; state is the one condition")
                    for k in extra]
        if state not in ExperimentState.__members__:
            problems.append(_problem(f"{path}.state", f"{state!r} is not an experiment state; "
                                     f"one of {', '.join(ExperimentState.__members__)}"))
        return problems
    extra = sorted(set(condition) - {"level"})
    problems = [_problem(f"{path}.{k}", "unknown key; level is the one condition")
                for k in extra]
    if "level" in condition and condition["level"] not in ALERT_LEVELS:
        problems.append(_problem(f"{path}.level", f"{condition['level']!r} is not one of "
                                 f"{', '.join(ALERT_LEVELS)}"))
    return problems


def parse_webhook(body: Mapping[str, Any]) -> WebhookSpec:
    """The webhook a ``POST /webhooks`` body describes::

        {"url": "https://...", "webhook_type": "DEFAULT" | "SLACK", "name": "...",
         "mode": "WORKSPACE" | "SPECIFIC",
         "triggers": [{"trigger_type": "EXPERIMENT_STATE_CHANGE",
                       "condition": {"state": "COMPLETED"}},
                      {"trigger_type": "CUSTOM", "condition": {}}]}

    Raises:
        BadRequest: naming every field that is wrong (``details``: ``{path, message}``).
    """
    problems: list[dict[str, str]] = []
    known = {"url", "webhook_type", "name", "mode", "triggers"}
    problems += [_problem(k, f"unknown field; one of {', '.join(sorted(known))}")
                 for k in sorted(set(body) - known)]
    url = body.get("url")
    if (why := url_problem(url)) is not None:
        problems.append(_problem("url", why))
    kind = body.get("webhook_type", "DEFAULT")
    if kind not in WEBHOOK_TYPES:
        problems.append(_problem("webhook_type", f"{kind!r} is not one of "
                                 f"{', '.join(WEBHOOK_TYPES)}"))
    name = body.get("name", "")
    if not isinstance(name, str) or len(name) > MAX_NAME:
        problems.append(_problem("name", f"must be a string of at most {MAX_NAME} characters"))
    mode = body.get("mode", "WORKSPACE")
    if mode not in MODES:
        problems.append(_problem("mode", f"{mode!r} is not one of {', '.join(MODES)}"))
    raw = body.get("triggers")
    triggers: list[tuple[str, dict[str, Any]]] = []
    if not isinstance(raw, list) or not raw:
        problems.append(_problem("triggers", "must be a non-empty list of "
                                 "{trigger_type, condition}"))
        raw = []
    for i, t in enumerate(raw):
        path = f"triggers[{i}]"
        if not isinstance(t, dict):
            problems.append(_problem(path, "must be an object {trigger_type, condition}"))
            continue
        problems += [_problem(f"{path}.{k}", "unknown key; trigger_type and condition are "
                              "the keys") for k in sorted(set(t) - {"trigger_type", "condition"})]
        trigger_type = t.get("trigger_type")
        if trigger_type not in TRIGGER_TYPES:
            problems.append(_problem(f"{path}.trigger_type", f"{trigger_type!r} is not one of "
                                     f"{', '.join(TRIGGER_TYPES)}"))
            continue
        condition = t.get("condition", {})
        found = condition_problems(f"{path}.condition", trigger_type, condition)
        problems += found
        if not found:
            triggers.append((trigger_type, dict(condition)))
    if problems:
        raise _refuse(problems)
    return WebhookSpec(url=str(url), webhook_type=str(kind), name=str(name), mode=str(mode),
                       triggers=tuple(triggers))


def parse_alert(body: Mapping[str, Any]) -> Alert:
    """The alert a ``POST /trials/{id}/alerts`` body describes: ``{"title": str,
    "description": str, "level": "info" | "warn" | "error" | "debug"}`` (description and level
    may be left out: "" and "info").

    Raises:
        BadRequest: naming every field that is wrong.
    """
    problems: list[dict[str, str]] = []
    known = {"title", "description", "level"}
    problems += [_problem(k, "unknown field; title, description and level are the fields")
                 for k in sorted(set(body) - known)]
    title = body.get("title")
    if not isinstance(title, str) or not title.strip() or len(title) > MAX_TITLE:
        problems.append(_problem("title", f"must be a non-empty string of at most {MAX_TITLE} "
                                 "characters"))
    description = body.get("description", "")
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        problems.append(_problem("description", "must be a string of at most "
                                 f"{MAX_DESCRIPTION} characters"))
    level = body.get("level", "info")
    if level not in ALERT_LEVELS:
        problems.append(_problem("level", f"{level!r} is not one of {', '.join(ALERT_LEVELS)}"))
    if problems:
        raise _refuse(problems)
    return Alert(title=str(title), description=str(description), level=str(level))


def names_webhook(config: Mapping[str, Any], hook_id: int, hook_name: str) -> bool:
    """Whether an experiment config names a webhook in ``integrations.webhooks``
    (``webhook_name``: names, ``webhook_id``: ids), which a ``SPECIFIC`` webhook needs."""
    integrations = config.get("integrations")
    named = integrations.get("webhooks") if isinstance(integrations, Mapping) else None
    if not isinstance(named, Mapping):
        return False
    names, ids = named.get("webhook_name") or [], named.get("webhook_id") or []
    return ((bool(hook_name) and isinstance(names, list) and hook_name in names)
            or (isinstance(ids, list) and hook_id in ids))


def trigger_matches(trigger_type: str, condition: Mapping[str, Any], event_type: str,
                    event: Mapping[str, Any]) -> bool:
    """Whether a trigger fires for an event: same type, and every key of its condition has
    the event's value (``{}`` matches every event of the type)."""
    return trigger_type == event_type and all(event.get(k) == v for k, v in condition.items())


def experiment_event_data(row: Experiment, owner: str) -> dict[str, Any]:
    """``event_data`` of an ``EXPERIMENT_STATE_CHANGE`` event, Determined's fields first."""
    resources = (row.config or {}).get("resources") or {}
    end = row.ended_at
    duration = int((end - row.created_at).total_seconds()) if end and row.created_at else None
    return {"experiment": {
        "id": row.id, "state": row.state, "name": row.name,
        "slots_per_trial": int(resources.get("slots_per_trial", DEFAULT_SLOTS)),
        "duration": duration, "resource_pool": row.resource_pool,
        "workspace": UNCATEGORIZED, "project": UNCATEGORIZED,
        "owner": owner, "created_at": iso(row.created_at), "ended_at": iso(end),
    }}


def alert_event_data(alert: Alert, experiment_id: int, trial_id: int) -> dict[str, Any]:
    """``event_data`` of a ``CUSTOM`` event."""
    return {"title": alert.title, "description": alert.description, "level": alert.level,
            "experiment_id": experiment_id, "trial_id": trial_id,
            "workspace": UNCATEGORIZED, "project": UNCATEGORIZED}


def default_payload(event_id: str, event_type: str, timestamp: int,
                    condition: Mapping[str, Any], event_data: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON a ``DEFAULT`` webhook gets (Determined's shape)."""
    return {"event_id": event_id, "event_type": event_type, "timestamp": timestamp,
            "condition": dict(condition), "event_data": dict(event_data)}


def slack_payload(event_type: str, event_data: Mapping[str, Any]) -> dict[str, Any]:
    """The message a ``SLACK`` webhook gets: Slack's ``text`` (for notifications) and
    ``blocks``."""
    if event_type == EXPERIMENT_STATE_CHANGE:
        e = event_data["experiment"]
        text = f"Experiment {e['id']} ({e['name']}) is {e['state']}"
        fields = [f"*Owner:* {e['owner']}", f"*Resource pool:* {e['resource_pool']}",
                  f"*Slots per trial:* {e['slots_per_trial']}"]
        if e.get("duration") is not None:
            fields.append(f"*Duration:* {e['duration']} s")
    else:
        text = f"[{event_data['level'].upper()}] {event_data['title']}"
        fields = [f"*Experiment:* {event_data['experiment_id']}",
                  f"*Trial:* {event_data['trial_id']}"]
        if event_data.get("description"):
            text += f"\n{event_data['description']}"
    return {"text": text, "blocks": [
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        {"type": "section", "fields": [{"type": "mrkdwn", "text": f} for f in fields]},
    ]}


def payload_for(webhook_type: str, event_id: str, event_type: str, timestamp: int,
                condition: Mapping[str, Any], event_data: Mapping[str, Any]) -> dict[str, Any]:
    """The body a webhook of this type gets for an event."""
    if webhook_type == "SLACK":
        return slack_payload(event_type, event_data)
    return default_payload(event_id, event_type, timestamp, condition, event_data)


def sign(key: str, timestamp: int, payload: bytes) -> str:
    """The signature of one delivery, as Determined computes it: the hex HMAC-SHA256, under
    ``key``, of the timestamp, a comma and the body. A receiver recomputes it from the two
    headers and the raw body to know that the event came from this master."""
    message = str(int(timestamp)).encode() + b"," + payload
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def webhook_json(hook: Webhook) -> dict[str, Any]:
    """A webhook as the API shows it."""
    return {"id": hook.id, "name": hook.name, "url": hook.url,
            "webhook_type": hook.webhook_type, "mode": hook.mode,
            "created_at": iso(hook.created_at),
            "triggers": [{"id": t.id, "trigger_type": t.trigger_type, "condition": t.condition}
                         for t in hook.triggers]}


class WebhookManager(LoggingConfigurable):
    """Registers webhooks (admins) and delivers events to them.

    The master hands it every committed experiment state change
    (:meth:`on_experiment_state`, one of the store's ``experiment_state_listeners``) and
    every alert (:meth:`alert`); each delivery is a task of its own.
    """

    retries = Integer(
        3, min=0, config=True,
        help="How many more times a failed delivery (no answer, or a status other than 2xx) "
             "is tried before it is given up, with a log line.")
    backoff_seconds = Float(
        1.0, min=0.0, config=True,
        help="Seconds before the first retry of a delivery; each later retry waits twice as "
             "long as the one before.")
    timeout_seconds = Float(
        10.0, min=0.1, config=True,
        help="Seconds a receiver has to connect and answer one delivery attempt.")
    signing_key = Unicode(
        "", config=True,
        help="The key every delivery is signed with, as Determined signs them: the header "
             "X-Determined-AI-Signature is the hex HMAC-SHA256, under this key, of "
             "'<X-Determined-AI-Signature-Timestamp>,<body>'. Empty: a key made at the "
             "master's first start and kept in its data directory (webhook-signing-key); "
             "admins read it with `det-hub webhook signing-key`.")
    max_pending = Integer(
        1000, min=1, config=True,
        help="The most deliveries under way at once; events past that are dropped, with a log "
             "line, rather than let a slow receiver pile up work in the master.")

    def __init__(self, store: Store, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not self.signing_key:
            # Good for this process; the master app keeps one in its data directory instead.
            self.signing_key = secrets.token_hex(32)
        self.store = store
        self._tasks: set[asyncio.Task[Any]] = set()
        self._client: AsyncHTTPClient | None = None

    # --- registration -------------------------------------------------------------------
    @staticmethod
    def _admin(who: Principal, what: str) -> None:
        if not who.is_admin:
            raise Forbidden(f"only admins can {what} webhooks")

    async def create(self, who: Principal, body: Mapping[str, Any]) -> Webhook:
        """Register a webhook (admins only); see :func:`parse_webhook` for the body."""
        self._admin(who, "create")
        spec = parse_webhook(body)
        return await self.store.create_webhook(url=spec.url, webhook_type=spec.webhook_type,
                                               name=spec.name, mode=spec.mode,
                                               triggers=spec.triggers)

    def get_signing_key(self, who: Principal) -> str:
        """The key deliveries are signed with (admins only; see :func:`sign`)."""
        self._admin(who, "read the signing key of")
        return self.signing_key

    async def list_webhooks(self, who: Principal) -> list[Webhook]:
        """Every webhook (admins only: a URL, a Slack one above all, is a secret)."""
        self._admin(who, "list")
        return await self.store.list_webhooks()

    async def get(self, who: Principal, webhook_id: int) -> Webhook:
        """One webhook (admins).

        Raises:
            NotFound: No such webhook."""
        self._admin(who, "see")
        hook = await self.store.get_webhook(webhook_id)
        if hook is None:
            raise NotFound(f"webhook {webhook_id} not found")
        return hook

    async def delete(self, who: Principal, webhook_id: int) -> Webhook:
        """Remove a webhook (admins only); returns it as it was."""
        hook = await self.get(who, webhook_id)
        try:
            await self.store.delete_webhook(webhook_id)
        except StoreNotFound:
            raise NotFound(f"webhook {webhook_id} not found") from None
        return hook

    async def test(self, who: Principal, webhook_id: int) -> dict[str, Any]:
        """Send the webhook a test event now, once, and say how it went (admins only)."""
        hook = await self.get(who, webhook_id)
        data = {"title": "det_hub test event", "description": f"webhook {hook.id} works",
                "level": "info", "experiment_id": None, "trial_id": None,
                "workspace": UNCATEGORIZED, "project": UNCATEGORIZED}
        body = payload_for(hook.webhook_type, str(uuid.uuid4()), CUSTOM, int(time.time()), {},
                           data)
        error = await self._attempt(hook.url, body)
        return {"delivered": error is None, "error": error}

    # --- events -------------------------------------------------------------------------
    def on_experiment_state(self, row: Experiment) -> None:
        """An experiment's new state was committed: deliver it to matching webhooks. Never
        blocks; what it starts runs on its own."""
        self._spawn(self._fire_experiment(row))

    async def alert(self, who: Principal, trial: Trial, experiment: Experiment,
                    body: Mapping[str, Any]) -> Alert:
        """A custom alert from a trial's training code (its allocation token), or from its
        experiment's owner or an admin: checked, then delivered in the background."""
        if who.allocation is None and not who.may_change(experiment.owner_id):
            raise Forbidden(f"only trial {trial.id}'s training code, its owner or an admin "
                            "can send its alerts")
        alert = parse_alert(body)
        data = alert_event_data(alert, experiment.id, trial.id)
        self._spawn(self._fire(CUSTOM, {"level": alert.level}, {}, data, experiment))
        return alert

    async def _fire_experiment(self, row: Experiment) -> None:
        user = await self.store.get_user_by_id(row.owner_id)
        data = experiment_event_data(row, user.username if user else str(row.owner_id))
        await self._fire(EXPERIMENT_STATE_CHANGE, {"state": row.state}, {"state": row.state},
                         data, row)

    async def _fire(self, event_type: str, event: Mapping[str, Any],
                    condition: Mapping[str, Any], data: Mapping[str, Any],
                    experiment: Experiment) -> None:
        """Deliver one event of ``experiment`` to every webhook with a trigger it matches
        (once each); a ``SPECIFIC`` webhook only when the experiment's config names it."""
        event_id, now = str(uuid.uuid4()), int(time.time())
        for hook in await self.store.list_webhooks(event_type):
            if hook.mode == "SPECIFIC" and not names_webhook(experiment.config or {}, hook.id,
                                                             hook.name):
                continue
            if not any(trigger_matches(t.trigger_type, t.condition, event_type, event)
                       for t in hook.triggers):
                continue
            if len(self._tasks) >= self.max_pending:
                log.warning("webhooks: %d deliveries under way already; the %s event is not "
                            "sent to webhook %d", len(self._tasks), event_type, hook.id)
                continue
            body = payload_for(hook.webhook_type, event_id, event_type, now, condition, data)
            # Kept until it is made or given up: a restarted master makes it then.
            kept = await self.store.add_webhook_delivery(hook.id, event_type, body)
            self._spawn(self._deliver(hook.id, hook.url, body, event_type, kept.id))

    async def resume(self) -> int:
        """Make the deliveries a stopped master left unmade (under way, or waiting to retry
        when it stopped); how many. The master calls it as it starts."""
        pending = await self.store.list_webhook_deliveries()
        for kept, hook in pending:
            log.info("webhook %d: delivering the %s event %s left from before the restart",
                     hook.id, kept.event_type, kept.body.get("event_id", ""))
            self._spawn(self._deliver(hook.id, hook.url, kept.body, kept.event_type, kept.id))
        return len(pending)

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("webhooks: an event could not be delivered: %s", task.exception())

    async def _deliver(self, hook_id: int, url: str, body: dict[str, Any],
                       event_type: str, delivery_id: int) -> bool:
        """POST ``body`` to ``url``, retrying with backoff; log the failure that gave up.
        The kept delivery is forgotten either way; a stop (cancellation) leaves it kept."""
        error: str | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_seconds * 2 ** (attempt - 1))
            error = await self._attempt(url, body)
            if error is None:
                break
        else:
            log.warning("webhook %d: gave up delivering the %s event to %s after %d "
                        "attempt(s): %s", hook_id, event_type, url, self.retries + 1, error)
        await self.store.remove_webhook_delivery(delivery_id)
        return error is None

    async def _attempt(self, url: str, body: dict[str, Any]) -> str | None:
        """One POST; None when it was answered 2xx, else why not."""
        if self._client is None:
            # Its own client: a receiver that never answers holds none of the proxy's
            # connections.
            self._client = AsyncHTTPClient(force_instance=True, max_clients=50)
        payload = json.dumps(body).encode()
        timestamp = int(time.time())
        request = HTTPRequest(url, method="POST", body=payload,
                              headers={"Content-Type": "application/json; charset=UTF-8",
                                       "User-Agent": "det_hub-webhooks",
                                       SIGNATURE_TIMESTAMP_HEADER: str(timestamp),
                                       SIGNATURE_HEADER: sign(self.signing_key, timestamp,
                                                              payload)},
                              connect_timeout=self.timeout_seconds,
                              request_timeout=self.timeout_seconds, follow_redirects=False)
        try:
            response = await self._client.fetch(request, raise_error=False)
        except Exception as e:  # DNS, refused connection, TLS: all a failed attempt
            return f"{type(e).__name__}: {e}"
        if 200 <= response.code < 300:
            return None
        if response.code == 599:
            return str(response.error or "no answer")
        return f"HTTP {response.code}"

    async def drain(self, timeout: float) -> bool:
        """Wait, at most ``timeout`` seconds, for the deliveries under way; True when none
        is left."""
        deadline = time.monotonic() + timeout
        while self._tasks and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return not self._tasks

    async def stop(self) -> None:
        """Cancel the deliveries under way and close the HTTP client."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._client is not None:
            self._client.close()
            self._client = None


__all__ = [
    "ALERT_LEVELS",
    "CUSTOM",
    "EXPERIMENT_STATE_CHANGE",
    "TRIGGER_TYPES",
    "WEBHOOK_TYPES",
    "Alert",
    "WebhookManager",
    "WebhookSpec",
    "alert_event_data",
    "default_payload",
    "experiment_event_data",
    "parse_alert",
    "parse_webhook",
    "payload_for",
    "slack_payload",
    "trigger_matches",
    "webhook_json",
]
