"""Pages for people in browsers, behind the hub's sign-in, under the service's prefix
(``/services/det-hub/``):

- ``<prefix>``: the dashboard: experiments, with filters, and the live notebooks, shells,
  TensorBoards and commands;
- ``<prefix>experiments/<id>``: an experiment: metric charts, its trials with their
  hyperparameters, its checkpoints, and pause/activate/kill/archive for its owner and admins;
  while it runs, its charts, state, progress and trials follow its event stream;
- ``<prefix>trials/<id>/logs``: a trial's logs, followed while it runs;
- ``<prefix>admin``: for hub admins: agents and their slots, the job queue and its controls,
  each user's usage in slot-hours, and what runs, with kill, drain and enable actions.

Pages are rendered here from ``templates/``; a small script in ``static/`` draws the charts
(Plotly.js, served from the ``plotly`` package: nothing comes from the internet), follows
an experiment through Server-Sent Events and logs through a JSON endpoint beside the pages,
signed in by the same hub cookie. Every POST must
carry the ``_xsrf`` token the pages put in their forms, and every change goes through the
master's methods, which allow it to the work's owner or an admin, as the REST API does.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import hashlib
import html
import importlib.util
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from tornado.web import HTTPError, RequestHandler, StaticFileHandler, authenticated

from det_hub import __version__
from det_hub.config import LengthUnit
from det_hub.scopes import MANAGE_SCOPE
from det_hub.search_view import (
    drawn,
    flatten,
    hparam_axes,
    log_scaled,
    parallel_coordinates,
    scatter,
)
from det_hub.service import wire
from det_hub.service.errors import (
    APIError,
    BadRequest,
    Forbidden,
    NotFound,
    Unavailable,
    answered_error,
    logged_as_traceback,
)
from det_hub.service.events import ExperimentFilter, experiment_events, experiment_list_events
from det_hub.service.handlers.base import check_path_ids
from det_hub.service.handlers.streams import EventSender
from det_hub.service.hub import page_base
from det_hub.service.serialize import checkpoint_json, iso, trial_json
from det_hub.service.webhooks import webhook_json
from det_hub.states import ACTIVE_SUBSTATES, ExperimentState, TaskType

# The hub's sign-in handler base comes from jupyterhub (an optional extra, present whenever
# pages are served); type checkers see the tornado handler it extends.
if TYPE_CHECKING:
    from det_hub.service.master import Master, Principal
    from det_hub.store import MetricRow, Task, TaskLog

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

EXPERIMENT_ACTIONS = ("pause", "activate", "kill", "archive", "unarchive")
AGENT_ACTIONS = ("enable", "drain", "disable")


@functools.cache
def plotly_js() -> Path | None:
    """Plotly.js as the ``plotly`` Python package bundles it; None without the package."""
    spec = importlib.util.find_spec("plotly")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "package_data" / "plotly.min.js"
        if path.is_file():
            return path
    return None


@functools.cache
def plotly_version() -> str | None:
    """What names this Plotly.js's content in its URL (``?v=``): a digest of the file; None
    without the package."""
    path = plotly_js()
    return None if path is None else hashlib.sha256(path.read_bytes()).hexdigest()[:16]


@functools.cache
def plotly_gzip() -> bytes:
    """Plotly.js gzip-compressed (about a third of its 4.8 MB), made once per process."""
    path = plotly_js()
    assert path is not None
    return gzip.compress(path.read_bytes(), compresslevel=9, mtime=0)


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


def metric_series(metrics: Mapping[int, Sequence[MetricRow]]) -> list[dict[str, Any]]:
    """Chart traces from trials' metric rows: one per trial, group and numeric metric, as
    ``{"metric", "trial_id", "group", "x": steps, "y": values, "counter"}`` (``counter``: one
    of :data:`COUNTERS`); ordered by metric, then trial, then group (training first). Values
    that are not finite numbers are left out."""
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
                trace["x"].append(row.steps_completed)
                trace["y"].append(value)

    def order(key: tuple[str, int, str]) -> tuple[str, int, int, str]:
        name, trial_id, group = key
        return name, trial_id, {"training": 0, "validation": 1}.get(group, 2), group

    return [traces[k] for k in sorted(traces, key=order)]


def search_data(experiment: Mapping[str, Any],
                trials: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The experiment page's view of its search (as the API shows the experiment and its
    trials): a parallel-coordinates trace of the trials' hyperparameters and searcher metric,
    and each hyperparameter against the metric, on a log axis where its space is log. None
    until two trials have a metric."""
    rows = [{"trial_id": t["id"], "state": t["state"], "hparams": flatten(t["hparams"] or {}),
             "metric": t["searcher_metric_value"]
             if isinstance(t["searcher_metric_value"], (int, float))
             and math.isfinite(t["searcher_metric_value"]) else None} for t in trials]
    if len(drawn(rows)) < 2:
        return None
    metric, smaller = experiment["searcher_metric"], bool(experiment["smaller_is_better"])
    logs = log_scaled((experiment.get("config") or {}).get("hyperparameters"))
    return {"metric": metric, "smaller_is_better": smaller,
            "parallel": parallel_coordinates(rows, metric, smaller, logs),
            "scatters": [{"name": name, "log": name in logs, **scatter(rows, name)}
                         for name in hparam_axes(rows)]}


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
    return ", ".join(f"{k}={_short(v)}" for k, v in (hparams or {}).items())


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return "{" + hparams_text(value) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    return value if isinstance(value, str) else json.dumps(value)


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
        who = self.principal
        self.render(
            "experiment.html", section="dashboard", experiment=experiment,
            original_config=row.original_config,
            trials=shown_trials,
            search=search_data(experiment, shown_trials),
            checkpoints=[checkpoint_json(c) for c in checkpoints],
            series=metric_series(rows), plotly=plotly_version(),
            # The stream goes on from the newest row drawn (each trial's last row is drawn).
            after_id=max((r.id for trial_rows in rows.values() for r in trial_rows), default=0),
            counters=COUNTERS,
            live=not ExperimentState(row.state).terminal,
            may_change=who.may_change(row.owner_id))


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
        await self.send_events(experiment_events(self.master, eid, int(raw),
                                                 heartbeat=self.heartbeat, poll=self.poll))


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
    """``<prefix>static/plotly.min.js``: Plotly.js from the ``plotly`` package, sent
    gzip-compressed to browsers that take it (compressed once, then from memory). Asked for
    under the digest of its content (``?v=``, as the pages ask), a browser keeps it a year;
    otherwise it asks again each time and is answered 304 while it has not changed."""

    async def get(self) -> None:
        version = plotly_version()
        path = plotly_js()
        if version is None or path is None:
            raise HTTPError(404, "Plotly.js is not installed: install the plotly package")
        zipped = "gzip" in self.request.headers.get("Accept-Encoding", "")
        self.set_header("Content-Type", "text/javascript; charset=UTF-8")
        self.set_header("Vary", "Accept-Encoding")
        self.set_header("Etag", f'"{version}{"-gzip" if zipped else ""}"')
        self.set_header("Cache-Control", "public, max-age=31536000, immutable"
                        if self.get_query_argument("v", None) == version else "no-cache")
        if self.check_etag_header():
            self.set_status(304)
            return
        if zipped:
            self.set_header("Content-Encoding", "gzip")
            self.finish(await asyncio.to_thread(plotly_gzip))
        else:
            self.finish(await asyncio.to_thread(path.read_bytes))


class AdminPage(PageHandler):
    """``<prefix>admin``: the cluster, the queue, usage, and what runs."""

    admin_only = True

    @authenticated
    async def get(self) -> None:
        m = self.master
        holders = {a.id: {"owner": a.spec.owner, "job_id": a.spec.job_id,
                          "experiment_id": a.spec.experiment_id, "task_id": a.spec.task_id}
                   for a in m.jobs.allocations()}
        usage = await m.jobs.usage()
        self.render(
            "admin.html", section="admin", pools=m.jobs.pools(),
            agents=m.jobs.agents(), holders=holders, jobs=m.jobs.queue(),
            usage=sorted(usage.items(), key=lambda kv: (-kv[1], kv[0])),
            experiments=await m.experiments.to_json(m.experiments.live()),
            tasks=await self.live_tasks(),
            webhooks=[webhook_json(h) for h in await m.webhooks.list_webhooks(self.principal)])


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
        (rf"{base}experiments/{eid}/(?P<action>{'|'.join(EXPERIMENT_ACTIONS)})",
         ExperimentAction),
        (rf"{base}trials/{tid}/logs", TrialLogsPage),
        (rf"{base}trials/{tid}/logs/lines", TrialLogsData),
        (rf"{base}tasks/(?P<task_id>\d+)/kill", TaskKill),
        (rf"{base}admin", AdminPage),
        (rf"{base}admin/jobs/(?P<job_id>[^/]+)", AdminJobUpdate),
        (rf"{base}admin/agents/(?P<agent_id>[^/]+)/(?P<action>{'|'.join(AGENT_ACTIONS)})",
         AdminAgentAction),
        (rf"{base}admin/webhooks/(?P<webhook_id>\d+)/delete", AdminWebhookDelete),
    ]
    routes.append((rf"{base}static/plotly\.min\.js", PlotlyScript))
    routes.append((rf"{base}static/(.+)", StaticFileHandler, {"path": str(STATIC)}))
    return routes


__all__ = ["ExperimentFilters", "job_changes", "json_script", "kill_question", "metric_series",
           "page_handlers"]
