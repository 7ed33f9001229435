"""Pages for people in browsers, behind the hub's sign-in, under the service's prefix
(``/services/det-hub/``):

- ``<prefix>``: the dashboard: experiments, with filters, and the live notebooks, shells,
  TensorBoards and commands;
- ``<prefix>experiments/<id>``: an experiment: metric charts, its trials with their
  hyperparameters, its checkpoints, and pause/activate/kill/archive for its owner and admins;
  while it runs, its charts, state, progress and trials follow its event stream;
- ``<prefix>trials/<id>/logs``: a trial's logs, followed while it runs;
- ``<prefix>admin``: for hub admins: agents and their slots, the job queue and its controls,
  each user's usage in slot-hours, and what runs, with kill, drain and enable actions; the
  pools, agents and queue follow the cluster's event stream.

Pages are rendered here from ``templates/``; a small script in ``static/`` draws the charts
(Plotly.js, served from the ``plotly`` package: nothing comes from the internet), follows
an experiment through Server-Sent Events and logs through a JSON endpoint beside the pages,
signed in by the same hub cookie. Every POST must
carry the ``_xsrf`` token the pages put in their forms, and every change goes through the
master's methods, which allow it to the work's owner or an admin, as the REST API does.
"""

from __future__ import annotations

import contextlib
import html
import json
import math
import re
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from tornado.web import HTTPError, RequestHandler, StaticFileHandler, authenticated

from det_hub import __version__
from det_hub.config import LengthUnit
from det_hub.plotly_bundle import pages_plotly_js, plotly_version, send_plotly
from det_hub.scopes import MANAGE_SCOPE
from det_hub.search_view import flatten, hparam_columns, search_data
from det_hub.service import wire
from det_hub.service.errors import (
    APIError,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    Unavailable,
    answered_error,
    logged_as_traceback,
)
from det_hub.service.events import (
    Event,
    ExperimentFilter,
    cluster_events,
    experiment_events,
    experiment_list_events,
)
from det_hub.service.handlers.base import check_path_ids
from det_hub.service.handlers.streams import EventSender
from det_hub.service.hub import page_base
from det_hub.service.serialize import checkpoint_json, iso, trial_json
from det_hub.service.webhooks import webhook_json
from det_hub.states import ACTIVE_SUBSTATES, ExperimentState, TaskType, TrialState

# The hub's sign-in handler base comes from jupyterhub (an optional extra, present whenever
# pages are served); type checkers see the tornado handler it extends.
if TYPE_CHECKING:
    from det_hub.service.master import Master, Principal
    from det_hub.store import MetricRow, Task, TaskLog, Trial

    _PageBase = RequestHandler
else:
    _PageBase = page_base()

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"

#: Experiments per page of the dashboard.
PAGE_SIZE = 50
#: Points per trial and metric group in a chart (the store downsamples to about this many).
CHART_POINTS = 500
#: Log lines per read, on the page and from its follower.
LOG_BATCH = 1000
#: The most experiments one comparison shows.
COMPARE_MAX = 8

EXPERIMENT_ACTIONS = ("pause", "activate", "kill", "archive", "unarchive")
AGENT_ACTIONS = ("enable", "drain", "disable")


# --- what the pages show, without HTTP ---------------------------------------------------
@dataclass(frozen=True)
class ExperimentFilters:
    """The dashboard's filters, as its query string gives them.

    Attributes:
        state: an experiment state's name, or "" for any.
        owner: "" for anyone, "mine", or a user name.
        archived: "no" (the default), "yes" (only archived ones) or "all".
        name: text the name must hold, ignoring case.
        offset: experiments skipped, for paging.
    """

    state: str = ""
    owner: str = ""
    archived: str = "no"
    name: str = ""
    offset: int = 0

    @classmethod
    def parse(cls, args: Mapping[str, str]) -> ExperimentFilters:
        """Read the filters from query arguments.

        Raises:
            BadRequest: A value no form offers, naming the argument.
        """
        state = args.get("state", "").strip()
        if state and state not in ExperimentState.__members__:
            raise BadRequest(f"state: {state!r} is not an experiment state")
        archived = args.get("archived", "").strip() or "no"
        if archived not in ("no", "yes", "all"):
            raise BadRequest("archived: must be no, yes or all")
        raw_offset = args.get("offset", "").strip() or "0"
        if not raw_offset.isdigit():
            raise BadRequest("offset: must be a whole number >= 0")
        return cls(state=state, owner=args.get("owner", "").strip(), archived=archived,
                   name=args.get("name", "").strip(), offset=int(raw_offset))

    def query(self, **changes: Any) -> str:
        """These filters, with ``changes``, as a query string (for paging links)."""
        values = {"state": self.state, "owner": self.owner, "archived": self.archived,
                  "name": self.name, "offset": self.offset, **changes}
        return urlencode({k: v for k, v in values.items()
                          if v not in ("", 0) and not (k == "archived" and v == "no")})

    @property
    def any(self) -> bool:
        """Whether any filter narrows the list."""
        return bool(self.state or self.owner or self.name or self.archived != "no")


#: Metrics that count how far training got (``batches``, ``records``, ``epochs``) rather than
#: how well it goes: their charts are hidden until asked for.
COUNTERS = frozenset(unit.value for unit in LengthUnit)


def metric_series(metrics: Mapping[int, Sequence[MetricRow]],
                  labels: Mapping[int, str] | None = None) -> list[dict[str, Any]]:
    """Chart traces from trials' metric rows: one per trial, group and numeric metric, as
    ``{"metric", "trial_id", "group", "x": steps, "y": values, "counter"}`` (``counter``: one
    of :data:`COUNTERS`), with ``"label"``, what the legend calls the trial, for trials named
    in ``labels``; ordered by metric, then trial, then group (training first). Values that
    are not finite numbers are left out."""
    traces: dict[tuple[str, int, str], dict[str, Any]] = {}
    for trial_id, rows in metrics.items():
        for row in rows:
            for name, value in row.metrics.items():
                if isinstance(value, bool) or not isinstance(value, (int, float)) \
                        or not math.isfinite(value):
                    continue
                trace = traces.setdefault((name, trial_id, row.group), {
                    "metric": name, "trial_id": trial_id, "group": row.group, "x": [],
                    "y": [], "counter": name in COUNTERS})
                if labels and trial_id in labels:
                    trace["label"] = labels[trial_id]
                trace["x"].append(row.steps_completed)
                trace["y"].append(value)

    def order(key: tuple[str, int, str]) -> tuple[str, int, int, str]:
        name, trial_id, group = key
        return name, trial_id, {"training": 0, "validation": 1}.get(group, 2), group

    return [traces[k] for k in sorted(traces, key=order)]


#: The admin page's live sections: each one's template (``admin_<name>.html``) and the parts of
#: the cluster's state (:meth:`JobQueue.state <det_hub.service.jobs.JobQueue.state>`) it shows.
ADMIN_SECTIONS: dict[str, frozenset[str]] = {
    "pools": frozenset({"resource_pools"}),
    "agents": frozenset({"agents", "allocations"}),
    "jobs": frozenset({"jobs"}),
}


def admin_sections(state: Mapping[str, Any]) -> dict[str, Any]:
    """What the admin page's sections are drawn from, out of the cluster's state: the pools,
    the agents, the open allocations by id (who holds each slot) and the queue."""
    return {"pools": state["resource_pools"], "agents": state["agents"],
            "holders": {a["id"]: a for a in state["allocations"]}, "jobs": state["jobs"]}


def job_changes(form: Mapping[str, str]) -> wire.JobChanges:
    """What a job form asks to change (``priority``, ``weight`` and ``ahead_of``, as text), read
    as the REST API reads it (:class:`wire.JobChanges`).

    Raises:
        BadRequest: A value that is not a number, or what the REST API refuses.
    """
    changes: dict[str, Any] = {}
    priority = form.get("priority", "").strip()
    if priority:
        if not re.fullmatch(r"\d+", priority):
            raise BadRequest("priority: must be a whole number from 1 to 99")
        changes["priority"] = int(priority)
    weight = form.get("weight", "").strip()
    if weight:
        try:
            changes["weight"] = float(weight)
        except ValueError:
            raise BadRequest("weight: must be a number greater than 0") from None
    ahead_of = form.get("ahead_of", "").strip()
    if ahead_of:
        changes["ahead_of"] = ahead_of
    return wire.parse(wire.JobChanges, changes)


def json_script(value: Any) -> str:
    """JSON that is safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` that could
    end it or open a comment."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def when(value: datetime | str | None) -> str:
    """A time for people: ``2025-03-01 12:00:05``, in UTC; "" for none."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value.strftime("%Y-%m-%d %H:%M:%S")


def size(num_bytes: int | None) -> str:
    """A size for people: ``512 B``, ``1.5 MiB``."""
    value = float(num_bytes or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return ""  # not reached


def slot_hours(hours: float) -> str:
    """Slot-hours for people: whole ones when there are many, four decimals (about a second
    of a slot) when there are few."""
    return f"{hours:.0f}" if hours >= 100 else f"{hours:.2f}" if hours >= 1 else f"{hours:.4f}"


def kill_question(item: Mapping[str, Any]) -> str:
    """What a Kill button asks before it stops an experiment or a task (as the API shows them):
    which, whose, and what is lost."""
    if "type" in item:  # a notebook, shell, TensorBoard or command
        kind = str(item["type"]).lower().replace("_", " ")
        return (f'Kill {kind} {item["id"]} ("{item["description"]}") of {item["owner"]}? It '
                "stops now, and what it has not saved is lost.")
    return (f'Kill experiment {item["id"]} ("{item["name"]}") of {item["owner"]}? Its running '
            "trials stop now without a checkpoint, and it ends CANCELED: it cannot be "
            "activated again.")


def hparams_text(hparams: Mapping[str, Any] | None) -> str:
    """Hyperparameters on one line, numbers to 4 significant digits:
    ``lr=0.000123, layers=[64, 32], opt={name=adam}``."""
    return ", ".join(f"{k}={short_value(v)}" for k, v in (hparams or {}).items())


def short_value(value: Any) -> str:
    """A hyperparameter's value as a table shows it: floats to 4 significant digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return "{" + hparams_text(value) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(short_value(v) for v in value) + "]"
    return value if isinstance(value, str) else json.dumps(value)


def trial_columns(trials: Sequence[Mapping[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """The trials table's hyperparameter columns (dotted names of those that differ between
    trials) and the hyperparameters all trials share, with their value."""
    return hparam_columns([{"hparams": flatten(t["hparams"] or {})} for t in trials])


#: How a log line says its level: Python's logging (``ERROR:root:``, ``[E 12:00 name]``,
#: ``... ERROR ...``), a traceback, an exception's last line.
_ERROR_LINE = re.compile(r"\b(?:CRITICAL|FATAL|ERROR)\b|^\[[EC] |^Traceback \(most recent call "
                         r"last\)|^[\w.]*(?:Error|Exception)\b(?::|$)")
_WARNING_LINE = re.compile(r"\bWARN(?:ING)?\b|^\[W |^[\w.]*Warning:")
_DEBUG_LINE = re.compile(r"\bDEBUG\b|^\[D ")


def log_level(message: str) -> str:
    """``error``, ``warning``, ``debug`` or ``info``: the level a log line reads as, from its
    text, whichever stream it came on (Python logs INFO to stderr)."""
    if _ERROR_LINE.search(message):
        return "error"
    if _WARNING_LINE.search(message):
        return "warning"
    return "debug" if _DEBUG_LINE.search(message) else "info"


def log_line_json(row: TaskLog) -> dict[str, Any]:
    return {"id": row.id, "timestamp": iso(row.timestamp), "rank": row.rank,
            "stdtype": row.stdtype, "level": log_level(row.message), "message": row.message}


# --- handlers ----------------------------------------------------------------------------
class PageHandler(_PageBase):
    """A page: signed in through the hub, rendered from ``templates/``; a POST must carry the
    page's ``_xsrf`` token."""

    #: Only hub admins may open it.
    admin_only = False
    principal: Principal

    @property
    def master(self) -> Master:
        return self.application.settings["master"]

    def get_template_path(self) -> str:
        return str(TEMPLATES)

    async def prepare(self) -> None:
        # Who is signed in, first: the error pages below show it.
        prepared = super().prepare()
        if prepared is not None:
            await prepared
        if self.master.stopping:
            raise Unavailable("the master is shutting down; try again shortly")
        check_path_ids(self.path_kwargs)
        if self.request.method not in ("GET", "HEAD"):
            # The hub's cookie check already takes a POST without the token for one from
            # nobody; this says why.
            self.check_xsrf_cookie()
        if self.current_user:
            self.principal = await self.master.users.hub_principal(self.current_user)
            if self.admin_only and not self.principal.is_admin:
                raise Forbidden("this page is for hub admins only")

    def get_template_namespace(self) -> dict[str, Any]:
        namespace = super().get_template_namespace()
        model = self.current_user or {}
        hub = self.master.hub
        namespace.update(
            base=self.master.base_url, hub_prefix=hub.auth.hub_prefix if hub else "/hub/",
            user_name=model.get("name"),
            is_admin=bool(getattr(self, "principal", None) and self.principal.is_admin),
            may_manage=bool(getattr(self, "principal", None)
                            and self.principal.may(MANAGE_SCOPE)),
            xsrf=self.xsrf_token.decode(), version=__version__, when=when, size=size,
            json_script=json_script, hparams_text=hparams_text, slot_hours=slot_hours,
            kill_question=kill_question,
            post_button=self.post_button, section="",
            active_states=("ACTIVE", *ACTIVE_SUBSTATES))
        return namespace

    def post_button(self, action: str, label: str, *, next_page: str = "", danger: bool = False,
                    title: str = "", confirm: str = "") -> str:
        """A form of one button that POSTs to ``action`` (with the XSRF token, and the page to
        come back to), as HTML for ``{% raw %}``. With ``confirm``, the page's script asks that
        question first and sends nothing unless the user agrees."""
        back = (f'<input type="hidden" name="next" value="{html.escape(next_page)}">'
                if next_page else "")
        attrs = (' class="danger"' if danger else "") + (
            f' title="{html.escape(title)}"' if title else "")
        asks = f' data-confirm="{html.escape(confirm)}"' if confirm else ""
        return (f'<form method="post" action="{html.escape(action)}" class="inline"{asks}>'
                f'{self.xsrf_form_html()}{back}<button type="submit"{attrs}>'
                f"{html.escape(label)}</button></form>")

    def log_exception(self, typ: type[BaseException] | None, value: BaseException | None,
                      tb: TracebackType | None) -> None:
        if logged_as_traceback(value):
            super().log_exception(typ, value, tb)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = answered_error(self, kwargs.get("exc_info", (None, None, None))[1])
        status_code = self.get_status()
        details: list[Any] = []
        if isinstance(exc, APIError):
            message, details = exc.message, exc.details
        elif isinstance(exc, HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        else:
            message = self._reason
        self.render("error.html", status=status_code, reason=self._reason, message=message,
                    details=details)

    def done(self, default: str) -> None:
        """Answer a form: back to the page it came from (its ``next`` field, when that is one
        of these pages), else to ``default``."""
        target = self.get_body_argument("next", "")
        base = self.master.base_url
        if not target.startswith(base) or "//" in target or "\\" in target:
            target = default
        self.redirect(target, status=303)

    async def live_tasks(self) -> list[dict[str, Any]]:
        """The tasks that have not ended, oldest first, as the API shows them to this user
        (with the URL that opens a notebook or TensorBoard for its owner and admins)."""
        rows: list[Task] = sorted(self.master.tasks.live.values(), key=lambda t: t.id)
        return await self.master.tasks.to_json(self.principal, rows)


class DataHandler(PageHandler):
    """A page's JSON endpoint: the same sign-in, answered in JSON, errors too."""

    def set_default_headers(self) -> None:
        self.set_header("Cache-Control", "no-store")

    async def prepare(self) -> None:
        await super().prepare()
        if not self.current_user:
            raise Forbidden("not signed in: open the page first")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = answered_error(self, kwargs.get("exc_info", (None, None, None))[1])
        if isinstance(exc, APIError):
            body = exc.body()
        else:
            body = {"error": getattr(exc, "log_message", None) or self._reason, "details": []}
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps(body))

    def send(self, body: dict[str, Any]) -> None:
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps(body))


class DashboardPage(PageHandler):
    """``<prefix>``: experiments with filters, and the live tasks."""

    @authenticated
    async def get(self) -> None:
        users = self.master.users
        filters = ExperimentFilters.parse(
            {k: self.get_query_argument(k, "") for k in ("state", "owner", "archived", "name",
                                                          "offset")})
        owner_id, nobody = await filter_owner(self, filters)
        rows, total = ([], 0) if nobody else await self.master.experiments.query(
            states=[filters.state] if filters.state else None,
            archived={"no": False, "yes": True}.get(filters.archived), owner_id=owner_id,
            name_contains=filters.name or None, limit=PAGE_SIZE, offset=filters.offset)
        self.render(
            "dashboard.html", section="dashboard", filters=filters,
            experiments=await self.master.experiments.to_json(rows), total=total,
            page_size=PAGE_SIZE, states=list(ExperimentState.__members__),
            users=[u.username for u in await users.all()],
            tasks=await self.live_tasks())


class ExperimentListStream(EventSender, DataHandler):
    """``<prefix>experiments/stream?state=&owner=&archived=``: what keeps the dashboard's list
    live, as Server-Sent Events (the REST API's ``/experiments/stream`` with the dashboard's
    filters, signed in as the page is): a snapshot, then each experiment that changes."""

    async def get(self) -> None:
        filters = ExperimentFilters.parse(
            {k: self.get_query_argument(k, "") for k in ("state", "owner", "archived")})
        owner_id, nobody = await filter_owner(self, filters)
        if nobody:
            raise NotFound(f"no user {filters.owner!r}")
        where = ExperimentFilter(
            owner_id=owner_id, archived={"no": False, "yes": True}.get(filters.archived),
            states=frozenset([filters.state]) if filters.state else None)
        await self.send_events(experiment_list_events(
            self.master, where, limit=PAGE_SIZE, heartbeat=self.heartbeat, poll=self.poll))


async def filter_owner(page: PageHandler, filters: ExperimentFilters) -> tuple[int | None, bool]:
    """The user id the dashboard's owner filter names (None for anyone), and whether it names
    nobody known."""
    if filters.owner == "mine":
        assert page.principal.user is not None
        return page.principal.user.id, False
    if filters.owner:
        owner = await page.master.users.get(filters.owner)
        return (owner.id, False) if owner else (None, True)
    return None, False


def best_trial(trials: Sequence[Trial], smaller_is_better: bool) -> Trial | None:
    """The trial with the best searcher metric (the first of equals); None when none has
    one."""
    scored = [t for t in trials if t.searcher_metric_value is not None
              and math.isfinite(t.searcher_metric_value)]
    if not scored:
        return None
    pick = min if smaller_is_better else max
    return pick(scored, key=lambda t: t.searcher_metric_value or 0.0)


def compared_ids(raw: Sequence[str]) -> list[int]:
    """The experiment ids of a comparison's ``id`` arguments, each once, in order.

    Raises:
        BadRequest: one is no id, or there are fewer than two or more than COMPARE_MAX.
    """
    bad = [value for value in raw if not value.isdigit()]
    if bad:
        raise BadRequest(f"id: {bad[0]!r} is no experiment id (compare?id=1&id=2)")
    ids = list(dict.fromkeys(int(value) for value in raw))
    if not 2 <= len(ids) <= COMPARE_MAX:
        raise BadRequest(f"id: tick from 2 to {COMPARE_MAX} experiments to compare, not "
                         f"{len(ids)}")
    return ids


def page_part_keys(trials: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[Any, ...]]]:
    """What each live part of an experiment's page (beside its charts and trials table) is
    drawn from, in the trials of a stream's ``state`` event: the part is read again when this
    changes."""
    return {
        "search": [(t["id"], t["searcher_metric_value"]) for t in trials],
        "rungs": [(t["id"], t["shown_state"], t["steps_completed"]) for t in trials],
        "checkpoints": [(t["id"], t["latest_checkpoint"]) for t in trials],
    }


class ExperimentPage(PageHandler):
    """``<prefix>experiments/<id>``: charts, trials, checkpoints and actions."""

    @authenticated
    async def get(self, experiment_id: str) -> None:
        m, eid = self.master, int(experiment_id)
        row = await m.experiments.get(eid)
        [experiment] = await m.experiments.to_json([row])
        trials = await m.experiments.trials(eid)
        checkpoints = await m.checkpoints.of_experiment(eid)
        rows = await m.trials.chart_metrics(trials, CHART_POINTS)
        shown_trials = [trial_json(t) for t in trials]
        columns, fixed = trial_columns(shown_trials)
        who = self.principal
        self.render(
            "experiment.html", section="dashboard", experiment=experiment,
            original_config=row.original_config,
            trials=shown_trials, columns=columns, fixed=fixed, flatten=flatten,
            short=short_value,
            search=search_data(experiment, shown_trials),
            rungs=(await m.experiments.searcher_view(eid))["rungs"],
            checkpoints=[checkpoint_json(c) for c in checkpoints],
            registered=self.registered(),
            series=metric_series(rows), plotly=plotly_version(pages_plotly_js()),
            # The stream goes on from the newest row drawn (each trial's last row is drawn).
            after_id=max((r.id for trial_rows in rows.values() for r in trial_rows), default=0),
            counters=COUNTERS,
            live=not ExperimentState(row.state).terminal,
            may_change=who.may_change(row.owner_id))


    def registered(self) -> dict[str, str] | None:
        """What :class:`CheckpointRegister` came back saying it registered, if it did."""
        found = {k: self.get_query_argument(k, "") for k in ("registered", "version",
                                                             "checkpoint")}
        if not all(found.values()) or not found["version"].isdigit():
            return None
        return {"model": found["registered"], "version": found["version"],
                "checkpoint": found["checkpoint"]}


class ExperimentStream(EventSender, DataHandler):
    """``<prefix>experiments/<id>/stream?after_id=N``: what keeps the experiment's page live,
    as Server-Sent Events: its metric rows after row ``N`` as they are stored, and its state,
    progress and trials' states and batches whenever they change (the REST API's
    ``/experiments/<id>/metrics/stream``, signed in as the page is)."""

    async def get(self, experiment_id: str) -> None:
        eid = int(experiment_id)
        await self.master.experiments.get(eid)
        raw = self.get_query_argument("after_id", "0")
        if not raw.isdigit():
            raise BadRequest("after_id: must be a metric row id")
        await self.send_events(self.with_page_parts(eid, experiment_events(
            self.master, eid, int(raw), heartbeat=self.heartbeat, poll=self.poll)))

    async def with_page_parts(self, eid: int, events: AsyncGenerator[list[Event], None],
                              ) -> AsyncGenerator[list[Event], None]:
        """``events``, and after each ``state`` event what else of the page it changed:
        ``search`` (the search view, as :func:`search_data` gives it), ``rungs`` (the ASHA
        rung table) and ``checkpoints`` (the experiment's, newest first)."""
        m = self.master
        [experiment] = await m.experiments.to_json([await m.experiments.get(eid)])
        # What each part was last read from, and what was last sent of it.
        keys: dict[str, Any] = {}
        sent: dict[str, Any] = {}
        async with contextlib.aclosing(events):
            async for batch in events:
                states = [data for name, data in batch if name == "state"]
                if states:
                    trials = states[-1]["trials"]
                    # Each part is read again only when what it shows may have changed, and
                    # sent only when it did.
                    for name, key in page_part_keys(trials).items():
                        if keys.get(name) == key:
                            continue
                        keys[name] = key
                        value = await self.page_part(name, experiment, trials)
                        if name not in sent or sent[name] != value:
                            sent[name] = value
                            batch.append((name, value))
                yield batch

    async def page_part(self, name: str, experiment: Mapping[str, Any],
                        trials: Sequence[Mapping[str, Any]]) -> Any:
        m, eid = self.master, experiment["id"]
        if name == "search":
            return search_data(experiment, trials)
        if name == "rungs":
            return (await m.experiments.searcher_view(eid))["rungs"]
        return [checkpoint_json(c) for c in await m.checkpoints.of_experiment(eid)]


class ComparePage(PageHandler):
    """``<prefix>compare?id=1&id=2``: the best trial of each experiment (by its searcher
    metric) side by side: metric, hyperparameters, and their curves on the same charts."""

    @authenticated
    async def get(self) -> None:
        m = self.master
        # Each experiment, as the API shows it, and its best trial.
        compared: list[tuple[dict[str, Any], Trial | None]] = []
        for eid in compared_ids(self.get_query_arguments("id")):
            row = await m.experiments.get(eid)
            [experiment] = await m.experiments.to_json([row])
            compared.append((experiment, best_trial(await m.experiments.trials(eid),
                                                    bool(experiment["smaller_is_better"]))))
        best = {e["id"]: trial for e, trial in compared if trial is not None}
        shown = {eid: trial_json(trial) for eid, trial in best.items()}
        rows = await m.trials.chart_metrics(best.values(), CHART_POINTS)
        labels = {trial.id: f"experiment {eid} trial {trial.id}" for eid, trial in best.items()}
        columns, fixed = trial_columns(list(shown.values()))
        self.render("compare.html", section="dashboard", compared=[e for e, _ in compared],
                    best=shown, columns=columns, fixed=fixed, flatten=flatten,
                    short=short_value, series=metric_series(rows, labels), counters=COUNTERS,
                    plotly=plotly_version(pages_plotly_js()))


class CheckpointRegister(PageHandler):
    """``POST <prefix>checkpoints/<uuid>/register`` (field ``model``): the checkpoint as the
    next version of that model, made first when there is none of that name (the checkpoint's
    experiment's owner, a user with the manage scope, or an admin); back to its experiment's
    page, which says what was registered."""

    @authenticated
    async def post(self, uuid: str) -> None:
        m, who = self.master, self.principal
        name = self.get_body_argument("model", "").strip()
        if not name:
            raise BadRequest("model: name the model to register the checkpoint under")
        checkpoint = await m.checkpoints.get(who, uuid)
        made = False
        try:
            await m.registry.get_model(name)
        except NotFound:
            try:
                await m.registry.create_model(who, {"name": name})
                made = True
            except Conflict:
                pass  # made meanwhile: registered under as it is
        try:
            version = await m.registry.register_version(who, name, {"checkpoint_uuid": uuid})
        except APIError:
            if made:  # made for this checkpoint only: not left behind empty
                await m.registry.delete_model(who, name)
            raise
        query = urlencode({"registered": name, "version": version.version, "checkpoint": uuid})
        self.redirect(f"{m.base_url}experiments/{checkpoint.experiment_id}?{query}#checkpoints",
                      status=303)


class ExperimentImportance(DataHandler):
    """``<prefix>experiments/<id>/importance``: each hyperparameter's share of the variance
    of the searcher metric (the REST API's ``hyperparameter-importance``)."""

    async def get(self, experiment_id: str) -> None:
        self.send(await self.master.importance.of(int(experiment_id)))


class ExperimentAction(PageHandler):
    """``POST <prefix>experiments/<id>/<action>``: pause, activate, kill, archive or
    unarchive (the owner or an admin)."""

    @authenticated
    async def post(self, experiment_id: str, action: str) -> None:
        eid, who, m = int(experiment_id), self.principal, self.master
        if action == "pause":
            await m.experiments.pause(who, eid)
        elif action == "activate":
            await m.experiments.activate(who, eid)
        elif action == "kill":
            await m.experiments.kill(who, eid)
        else:
            await m.experiments.set_archived(who, eid, action == "archive")
        self.done(f"{m.base_url}experiments/{eid}")


class TrialPage(PageHandler):
    """``<prefix>trials/<id>``: a trial's facts, every hyperparameter at full precision, its
    metric charts and checkpoints, live while it runs."""

    @authenticated
    async def get(self, trial_id: str) -> None:
        m, tid = self.master, int(trial_id)
        trial = await m.experiments.get_trial(self.principal, tid)
        row = await m.experiments.get(trial.experiment_id)
        [experiment] = await m.experiments.to_json([row])
        rows = await m.trials.chart_metrics([trial], CHART_POINTS)
        checkpoints = [checkpoint_json(c) for c in await m.checkpoints.of_experiment(row.id)
                       if c.trial_id == tid]
        self.render(
            "trial.html", section="dashboard", trial=trial_json(trial), experiment=experiment,
            hparams=sorted(flatten(trial.hparams or {}).items()),
            series=metric_series(rows), plotly=plotly_version(pages_plotly_js()), counters=COUNTERS,
            after_id=max((r.id for r in rows.get(tid, [])), default=0),
            live=not TrialState(trial.state).terminal, checkpoints=checkpoints,
            may_change=self.principal.may_change(row.owner_id))


class TrialLogsPage(PageHandler):
    """``<prefix>trials/<id>/logs``: the first lines, and a script that follows the rest."""

    @authenticated
    async def get(self, trial_id: str) -> None:
        tid = int(trial_id)
        trial = await self.master.experiments.get_trial(self.principal, tid)
        # Asked before the read: a trial's last line is stored before its end is.
        ended = await self.master.trials.ended(self.principal, tid)
        rows = await self.master.trials.logs(tid, limit=LOG_BATCH)
        self.render("logs.html", section="dashboard", trial=trial_json(trial),
                    lines=[log_line_json(r) for r in rows],
                    after_id=rows[-1].id if rows else 0,
                    ended=ended and len(rows) < LOG_BATCH)


class TrialLogsData(DataHandler):
    """``<prefix>trials/<id>/logs/lines?after_id=N``: the next lines, and whether the trial
    has ended (then, once a read returns fewer than ``batch`` lines, there are no more)."""

    async def get(self, trial_id: str) -> None:
        tid = int(trial_id)
        raw = self.get_query_argument("after_id", "0") or "0"
        if not raw.isdigit():
            raise BadRequest("after_id: must be a whole number >= 0")
        ended = await self.master.trials.ended(self.principal, tid)
        rows = await self.master.trials.logs(tid, after_id=int(raw), limit=LOG_BATCH)
        self.send({"logs": [log_line_json(r) for r in rows], "ended": ended,
                   "batch": LOG_BATCH})


class TaskKill(PageHandler):
    """``POST <prefix>tasks/<id>/kill``: kill a notebook, shell, TensorBoard or command (its
    owner or an admin)."""

    @authenticated
    async def post(self, task_id: str) -> None:
        tid = int(task_id)
        task = await self.master.tasks.find(tid)
        if task is None:
            raise NotFound(f"task {tid} not found")
        await self.master.tasks.kill(self.principal, TaskType(task.type), tid)
        self.done(self.master.base_url)


class PlotlyScript(RequestHandler):
    """``<prefix>static/plotly.min.js``: the pages' Plotly.js (det_hub's partial bundle where
    installed, else the ``plotly`` package's), sent gzip-compressed to browsers that take it (compressed once, then from memory). Asked for
    under the digest of its content (``?v=``, as the pages ask), a browser keeps it a year;
    otherwise it asks again each time and is answered 304 while it has not changed."""

    async def get(self) -> None:
        await send_plotly(self, pages_plotly_js(), cache="public",
                          missing="Plotly.js is not installed: install the plotly package")


class AdminPage(PageHandler):
    """``<prefix>admin``: the cluster, the queue, usage, and what runs."""

    admin_only = True

    @authenticated
    async def get(self) -> None:
        m = self.master
        usage = await m.jobs.usage()
        self.render(
            "admin.html", section="admin", **admin_sections(m.jobs.state()),
            usage=sorted(usage.items(), key=lambda kv: (-kv[1], kv[0])),
            experiments=await m.experiments.to_json(m.experiments.live()),
            tasks=await self.live_tasks(),
            webhooks=[webhook_json(h) for h in await m.webhooks.list_webhooks(self.principal)])


class ClusterStream(EventSender, DataHandler):
    """``<prefix>admin/stream``: what keeps the admin page's pools, agents and queue live, as
    Server-Sent Events (the REST API's ``/cluster/stream``, signed in as the page is):
    ``sections`` with the HTML of each section that a change of the cluster touched, rendered
    from the same templates as the page (all of them first), so that their forms and the
    questions they ask are the page's own."""

    admin_only = True

    async def get(self) -> None:
        # The sections' forms carry the page's XSRF token: read before the answer starts.
        self.xsrf_token  # noqa: B018
        await self.send_events(self.sections(cluster_events(
            self.master, heartbeat=self.heartbeat, poll=self.poll)))

    async def sections(self, events: AsyncGenerator[list[Event], None],
                       ) -> AsyncGenerator[list[Event], None]:
        """The cluster's events as the page takes them: each ``snapshot`` or ``cluster``
        event as a ``sections`` event (``{name: html}``, see :data:`ADMIN_SECTIONS`); the
        others as they are."""
        state: dict[str, Any] = {}
        async with contextlib.aclosing(events):
            async for batch in events:
                out: list[Event] = []
                for name, data in batch:
                    if name not in ("snapshot", "cluster"):
                        out.append((name, data))
                        continue
                    state.update(data)
                    args = admin_sections(state)
                    out.append(("sections", {
                        section: self.render_string(f"admin_{section}.html", **args).decode()
                        for section, parts in ADMIN_SECTIONS.items() if parts & data.keys()}))
                yield out


class AdminJobUpdate(PageHandler):
    """``POST <prefix>admin/jobs/<job id>``: a job's priority, weight or place in the
    queue."""

    admin_only = True

    @authenticated
    async def post(self, job_id: str) -> None:
        form = {k: self.get_body_argument(k, "") for k in ("priority", "weight", "ahead_of")}
        await self.master.jobs.update(self.principal, job_id, job_changes(form))
        self.done(f"{self.master.base_url}admin#jobs")


class AdminAgentAction(PageHandler):
    """``POST <prefix>admin/agents/<id>/<action>``: ``enable`` an agent, ``drain`` it (no new
    work; what runs there finishes) or ``disable`` it (no new work; trials there checkpoint
    and move to other agents)."""

    admin_only = True

    @authenticated
    async def post(self, agent_id: str, action: str) -> None:
        await self.master.jobs.set_agent_enabled(self.principal, agent_id, action == "enable",
                                            drain=action != "disable")
        self.done(f"{self.master.base_url}admin#agents")


class AdminWebhookDelete(PageHandler):
    """``POST <prefix>admin/webhooks/<id>/delete``: delete a webhook."""

    admin_only = True

    @authenticated
    async def post(self, webhook_id: str) -> None:
        await self.master.webhooks.delete(self.principal, int(webhook_id))
        self.done(f"{self.master.base_url}admin#webhooks")


def page_handlers(base_url: str) -> list[tuple[Any, ...]]:
    """The pages' routes, their JSON endpoints and static files under the service's
    prefix."""
    base = re.escape(base_url)
    eid, tid = r"(?P<experiment_id>\d+)", r"(?P<trial_id>\d+)"
    routes: list[tuple[Any, ...]] = [
        (base, DashboardPage),
        (rf"{base}experiments/stream", ExperimentListStream),
        (rf"{base}experiments/{eid}", ExperimentPage),
        (rf"{base}experiments/{eid}/stream", ExperimentStream),
        (rf"{base}experiments/{eid}/importance", ExperimentImportance),
        (rf"{base}compare", ComparePage),
        (rf"{base}checkpoints/(?P<uuid>[0-9a-fA-F-]{{36}})/register", CheckpointRegister),
        (rf"{base}experiments/{eid}/(?P<action>{'|'.join(EXPERIMENT_ACTIONS)})",
         ExperimentAction),
        (rf"{base}trials/{tid}", TrialPage),
        (rf"{base}trials/{tid}/logs", TrialLogsPage),
        (rf"{base}trials/{tid}/logs/lines", TrialLogsData),
        (rf"{base}tasks/(?P<task_id>\d+)/kill", TaskKill),
        (rf"{base}admin", AdminPage),
        (rf"{base}admin/stream", ClusterStream),
        (rf"{base}admin/jobs/(?P<job_id>[^/]+)", AdminJobUpdate),
        (rf"{base}admin/agents/(?P<agent_id>[^/]+)/(?P<action>{'|'.join(AGENT_ACTIONS)})",
         AdminAgentAction),
        (rf"{base}admin/webhooks/(?P<webhook_id>\d+)/delete", AdminWebhookDelete),
    ]
    routes.append((rf"{base}static/plotly\.min\.js", PlotlyScript))
    routes.append((rf"{base}static/(.+)", StaticFileHandler, {"path": str(STATIC)}))
    return routes


__all__ = ["ADMIN_SECTIONS", "ExperimentFilters", "admin_sections", "job_changes", "json_script",
           "kill_question", "metric_series", "page_handlers"]
