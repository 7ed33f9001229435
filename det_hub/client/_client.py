"""The REST client: one :class:`Client` per master, holding its own HTTP session."""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

import requests

from det_hub import nonfinite

# yaml, det_hub.config (pydantic) and the context packer (pathspec) are imported by the methods
# that submit configs and contexts: a client that only reads, as `det-hub experiment list`
# does, starts without them.
from ._errors import DetHubError, MasterError, MasterUnreachable
from ._objects import (
    Agent,
    Checkpoint,
    Command,
    Experiment,
    Job,
    Listing,
    MetricReport,
    NewUser,
    ResourcePool,
    Task,
    Trial,
    User,
)
from ._registry import CheckpointGCResult, Model, ModelVersion
from ._settings import resolve_master, resolve_token
from ._webhooks import Webhook, parse_trigger

ProgressCallback = Callable[[int, int], None]

API_PREFIX = "/api/v1"
_UPLOAD_CHUNK = 256 * 1024
# A followed log stream may be quiet for long stretches; after this long without a byte the
# client reconnects (from the last id seen), which also notices half-open connections.
_FOLLOW_READ_TIMEOUT = 60.0
_CREATE_READ_TIMEOUT = 120.0
# Answers a proxy gives while the master behind it restarts: worth retrying while following.
_RETRYABLE_STATUSES = frozenset({502, 503, 504})


class _UploadBody:
    """A request body sent in chunks, reporting how much has gone out.

    ``__len__`` lets requests send a Content-Length instead of chunked encoding, which every
    server and proxy on the way accepts.
    """

    def __init__(self, payload: bytes, progress: ProgressCallback | None) -> None:
        self._payload = payload
        self._progress = progress

    def __len__(self) -> int:
        return len(self._payload)

    def __iter__(self) -> Iterator[bytes]:
        total = len(self._payload)
        view = memoryview(self._payload)
        sent = 0
        if self._progress is not None:
            self._progress(0, total)
        while sent < total:
            chunk = bytes(view[sent : sent + _UPLOAD_CHUNK])
            yield chunk
            sent += len(chunk)
            if self._progress is not None:
                self._progress(sent, total)


class _StreamBroken(Exception):
    """A streamed answer ended without its proper end (connection dropped or timed out)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.timed_out = "timed out" in str(cause).lower() or isinstance(cause, requests.Timeout)


def _short_reason(exc: BaseException) -> str:
    """The useful part of a requests connection error, e.g. ``[Errno 111] Connection refused``."""
    if isinstance(exc, requests.Timeout):
        return "timed out"
    text = str(exc)
    match = re.search(r"\[Errno -?\d+\][^'\")]*", text)
    if match:
        return match.group(0).strip()
    return type(exc).__name__


def _bool_param(value: bool) -> str:
    return "true" if value else "false"


def _error_from_response(response: requests.Response) -> MasterError:
    message = ""
    details: list[Any] = []
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        message = str(body.get("error") or body.get("message") or "")
        raw_details = body.get("details")
        if isinstance(raw_details, list):
            details = raw_details
        elif raw_details:
            details = [raw_details]
    if not message:
        message = f"the master answered {response.status_code} {response.reason or ''}".strip()
    return MasterError(response.status_code, message, details)


class Client:
    """A client of one det_hub master's REST API.

    Args:
        master: The master's URL. Default: ``DET_HUB_MASTER``, else ``http://127.0.0.1:8080``.
            Behind JupyterHub, give the service URL (``https://hub/services/det-hub``).
        token: The user token. Default: ``DET_HUB_TOKEN``, else, for a master on this machine,
            the ``admin-token`` file in the data directory (``DET_HUB_DATA_DIR``, default
            ``~/.det_hub``) that ``det-hub master`` writes.
        timeout: Seconds to wait for the master to connect and for each answer.
        session: A :class:`requests.Session` to use (a new one by default).

    Every method raises :class:`MasterError` when the master answers with an error and
    :class:`MasterUnreachable` when it cannot be reached.
    """

    def __init__(
        self,
        master: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30,
        session: requests.Session | None = None,
    ) -> None:
        self.master = resolve_master(master)
        self.token = resolve_token(token, self.master)
        self.timeout = timeout
        self._session = session if session is not None else requests.Session()

    def __repr__(self) -> str:
        return f"Client(master={self.master!r})"

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the client's HTTP connections."""
        self._session.close()

    @property
    def api_url(self) -> str:
        """The base URL of the REST API, e.g. ``http://127.0.0.1:8080/api/v1``."""
        return self.master + API_PREFIX

    # -- plumbing ---------------------------------------------------------------------------

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if extra:
            headers.update(extra)
        return headers

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None,
        json_body: Any = None,
        data: Any = None,
        headers: Mapping[str, str] | None = None,
        stream: bool = False,
        timeout: float | tuple[float, float] | None = None,
    ) -> requests.Response:
        """Sends one request; raises :class:`MasterError` on an error status."""
        # Pairs, so that a parameter may repeat (``metric=a&metric=b``).
        clean_params = []
        for key, value in params.items() if isinstance(params, Mapping) else params or ():
            if value is None:
                continue
            clean_params.append((key, _bool_param(value) if isinstance(value, bool) else value))
        try:
            response = self._session.request(
                method,
                self.api_url + path,
                params=clean_params or None,
                json=json_body,
                data=data,
                headers=self._headers(headers),
                stream=stream,
                timeout=timeout if timeout is not None else self.timeout,
            )
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise MasterUnreachable(self.master, _short_reason(exc)) from exc
        if response.status_code >= 400:
            error = _error_from_response(response)
            response.close()
            raise error
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self._request(method, path, **kwargs)
        try:
            body = response.json()
        except ValueError:
            raise MasterError(
                response.status_code,
                f"the answer from {self.master} to {method} {path} is not JSON; "
                "is the URL that of a det_hub master?",
            ) from None
        if not isinstance(body, dict):
            raise MasterError(response.status_code, f"unexpected answer to {method} {path}")
        return body

    def _get(self, path: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return self._json("GET", path, params=params)

    def _post(self, path: str, body: Any = None) -> dict[str, Any]:
        return self._json("POST", path, json_body=body if body is not None else {})

    def _patch(self, path: str, body: Any) -> dict[str, Any]:
        return self._json("PATCH", path, json_body=body)

    @staticmethod
    def _items(body: dict[str, Any], key: str) -> list[dict[str, Any]]:
        items = body.get(key)
        return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []

    # -- cluster ----------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Returns the master's health, ``{"status": "ok", "version": ...}``; needs no token."""
        return self._get("/health")

    def openapi(self) -> dict[str, Any]:
        """Returns the master's OpenAPI 3 document."""
        return self._get("/openapi.json")

    def me(self) -> User:
        """Returns the user that the client's token belongs to."""
        body = self._get("/me")
        user = body.get("user")
        return User.from_json(user if isinstance(user, dict) else {})

    def list_agents(self) -> Listing[Agent]:
        """Returns the agents and their slots."""
        body = self._get("/agents")
        return Listing([Agent.from_json(a) for a in self._items(body, "agents")], body)

    def get_agent(self, agent_id: str) -> Agent:
        """Returns one agent and its slots."""
        return Agent.from_json(_object(self._get(f"/agents/{_segment(agent_id)}"), "agent"))

    def enable_agent(self, agent_id: str) -> Agent:
        """Lets a disabled agent take new work again (admins only)."""
        body = self._post(f"/agents/{_segment(agent_id)}/enable")
        return Agent.from_json(_object(body, "agent"))

    def disable_agent(self, agent_id: str, drain: bool = True) -> Agent:
        """Stops an agent from taking new work (admins only).

        Args:
            agent_id: The agent.
            drain: Let the trials running there finish (the default). With ``False`` they
                are asked to checkpoint and exit, and go on from that checkpoint on another
                agent once one is free.
        """
        body = self._post(f"/agents/{_segment(agent_id)}/disable", {"drain": drain})
        return Agent.from_json(_object(body, "agent"))

    def list_resource_pools(self) -> Listing[ResourcePool]:
        """Returns the resource pools with their scheduling settings and slot usage."""
        body = self._get("/resource_pools")
        return Listing(
            [ResourcePool.from_json(p) for p in self._items(body, "resource_pools")], body
        )

    def list_jobs(self, resource_pool: str | None = None) -> Listing[Job]:
        """Returns the job queue in the order the scheduler considers it.

        Args:
            resource_pool: Only this pool's jobs (the master answers 404 for an unknown pool).
        """
        body = self._get("/jobs", {"resource_pool": resource_pool})
        return Listing([Job.from_json(j) for j in self._items(body, "jobs")], body)

    def get_job(self, job_id: str | int) -> Job:
        """Returns one job of the queue; ``job_id`` is ``exp-<id>`` or the experiment's id."""
        return Job.from_json(_object(self._get(f"/jobs/{_segment(str(job_id))}"), "job"))

    def update_job(
        self,
        job_id: str | int,
        *,
        priority: int | None = None,
        weight: float | None = None,
        ahead_of: str | int | None = None,
    ) -> Job:
        """Changes a job's priority, weight or place in the queue (its owner or an admin).

        Args:
            job_id: ``exp-<id>`` or the experiment's id.
            priority: 1 to 99; smaller runs first.
            weight: Its share of a fair-share pool, greater than 0.
            ahead_of: Another job of the same pool: this one moves right before it and takes
                its priority.

        Returns:
            The job's row of the queue after the change.

        Raises:
            ValueError: Nothing to change was given.
            MasterError: 400 for a value out of range, 403 for someone else's job, 404 for a
                job that is not in the queue.
        """
        changes: dict[str, Any] = {"priority": priority, "weight": weight,
                                   "ahead_of": str(ahead_of) if ahead_of is not None else None}
        changes = {k: v for k, v in changes.items() if v is not None}
        if not changes:
            raise ValueError("nothing to change: give priority, weight or ahead_of")
        body = self._patch(f"/jobs/{_segment(str(job_id))}", changes)
        return Job.from_json(_object(body, "job"))

    def list_users(self) -> Listing[User]:
        """Returns the master's users."""
        body = self._get("/users")
        return Listing([User.from_json(u) for u in self._items(body, "users")], body)

    def create_user(self, username: str, admin: bool = False) -> NewUser:
        """Creates a user (admins only) and returns it with its token, which is not shown again."""
        body = self._json("POST", "/users", json_body={"username": username, "admin": admin})
        return NewUser.from_json(body)

    def link_with_agent_user(
        self,
        username: str,
        agent_uid: int,
        agent_gid: int,
        agent_user: str | None = None,
        agent_group: str | None = None,
    ) -> User:
        """Links a user to the Unix account their tasks run as (admins only), replacing any
        earlier link; Determined's ``det user link-with-agent-user``.

        Args:
            username: The det_hub user.
            agent_uid: The account's uid, 1 to 4294967294 (tasks never run as root).
            agent_gid: Its group's gid, 1 to 4294967294.
            agent_user: The account's name, for people reading the link.
            agent_group: The group's name, likewise.

        Raises:
            MasterError: 400 naming a bad field, 403 for a caller who is not an admin, 404
                for an unknown user.
        """
        link = {"agent_uid": agent_uid, "agent_gid": agent_gid, "agent_user": agent_user,
                "agent_group": agent_group}
        body = self._patch(f"/users/{_segment(username)}", {"agent_user_group": link})
        return User.from_json(_object(body, "user"))

    def unlink_agent_user(self, username: str) -> User:
        """Forgets the Unix account a user is linked to (admins only)."""
        body = self._patch(f"/users/{_segment(username)}", {"agent_user_group": None})
        return User.from_json(_object(body, "user"))

    # -- experiments ------------------------------------------------------------------------

    def create_experiment(
        self,
        config_text: str | Mapping[str, Any],
        context_dir: str | Path | None,
        *,
        activate: bool = True,
        name: str | None = None,
        progress: ProgressCallback | None = None,
        parent_id: int | None = None,
    ) -> Experiment:
        """Submits an experiment.

        Args:
            config_text: The experiment config as YAML text (or as a mapping).
            context_dir: The model-definition directory, packed with :func:`pack_context`;
                ``None`` sends no context.
            activate: Whether the experiment starts at once (else it is created PAUSED).
            name: A name that replaces the config's ``name``.
            progress: Called as ``progress(bytes_sent, bytes_total)`` while the body uploads.
            parent_id: The experiment this one is forked from; its context is used when
                ``context_dir`` is ``None``.

        Returns:
            The created experiment.

        Raises:
            ContextError: The context cannot be packed (see :func:`pack_context`); nothing was
                sent.
            ContextTooLarge: The context is over the limit; nothing was sent.
            MasterError: The master refused the experiment (400 for a bad config, with one
                detail per wrong key).
        """
        import yaml

        from ._context import pack_context

        if not isinstance(config_text, str):
            config_text = yaml.safe_dump(dict(config_text), sort_keys=False)
        if name is not None:
            config_text = _with_name(config_text, name)
        context = pack_context(context_dir) if context_dir is not None else None
        payload = json.dumps(
            {
                "config": config_text,
                "context": base64.b64encode(context).decode("ascii") if context is not None else None,
                "activate": activate,
                "parent_id": parent_id,
            }
        ).encode("utf-8")
        body = self._json(
            "POST",
            "/experiments",
            data=_UploadBody(payload, progress),
            headers={"Content-Type": "application/json"},
            # The master unpacks and validates before it answers; allow it more than a plain GET.
            timeout=(self.timeout, max(self.timeout, _CREATE_READ_TIMEOUT)),
        )
        return Experiment.from_json(_object(body, "experiment"))

    def list_experiments(
        self,
        state: str | None = None,
        archived: bool | None = None,
        owner: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> Listing[Experiment]:
        """Returns one page of experiments, newest first.

        Args:
            state: Only experiments in this state (``RUNNING``, ``QUEUED``, ``COMPLETED``, ...;
                ``ACTIVE`` for every active one).
            archived: Only archived (``True``) or only unarchived (``False``) ones; ``None``
                for both.
            owner: Only this user's experiments.
            limit: Page size (the master allows at most 1000).
            offset: How many to skip.

        Returns:
            The experiments; ``.pagination["total"]`` tells how many match in all.
        """
        body = self._get(
            "/experiments",
            {"state": state, "archived": archived, "owner": owner, "limit": limit, "offset": offset},
        )
        pagination = body.get("pagination")
        return Listing(
            [Experiment.from_json(e) for e in self._items(body, "experiments")],
            body,
            pagination if isinstance(pagination, dict) else None,
        )

    def get_experiment(self, experiment_id: int) -> Experiment:
        """Returns one experiment."""
        return Experiment.from_json(_object(self._get(f"/experiments/{int(experiment_id)}"), "experiment"))

    def fork_experiment(
        self,
        experiment_id: int,
        overrides: Mapping[str, Any] | None = None,
        *,
        context_dir: str | Path | None = None,
        activate: bool = True,
        name: str | None = None,
        progress: ProgressCallback | None = None,
    ) -> Experiment:
        """Creates a new experiment from another's config with ``overrides`` merged in (see
        :func:`det_hub.config.merge_config`), and its context unless ``context_dir`` is given.

        Raises:
            MasterError: The source does not exist (404), or the master refused the new config.
        """
        from det_hub.config import merge_config

        source = self.get_experiment(experiment_id)
        config = merge_config(source.config, overrides or {})
        return self.create_experiment(config, context_dir, activate=activate, name=name,
                                      progress=progress, parent_id=source.id)

    def continue_experiment(
        self, experiment_id: int, overrides: Mapping[str, Any] | None = None
    ) -> Experiment:
        """Trains a finished experiment on, in place, from its trials' latest checkpoints, with
        ``overrides`` (a partial config, such as ``{"searcher": {"max_length": {"batches":
        2000}}}``) merged into its config.

        Raises:
            MasterError: 409 when the experiment is not finished or has nothing to continue,
                400 when the merged config is invalid.
        """
        import yaml

        text = yaml.safe_dump(dict(overrides), sort_keys=False) if overrides else None
        body = self._post(f"/experiments/{int(experiment_id)}/continue", {"config": text})
        return Experiment.from_json(_object(body, "experiment"))

    def _experiment_action(self, experiment_id: int, action: str) -> Experiment:
        body = self._post(f"/experiments/{int(experiment_id)}/{action}")
        return Experiment.from_json(_object(body, "experiment"))

    def pause_experiment(self, experiment_id: int) -> Experiment:
        """Pauses an active experiment; its trials stop and keep their checkpoints."""
        return self._experiment_action(experiment_id, "pause")

    def activate_experiment(self, experiment_id: int) -> Experiment:
        """Activates a paused experiment."""
        return self._experiment_action(experiment_id, "activate")

    def cancel_experiment(self, experiment_id: int) -> Experiment:
        """Cancels an experiment gracefully (``det experiment cancel``): its trials checkpoint
        and stop, as a pause stops them, and it ends CANCELED. :meth:`kill_experiment` stops
        them at once."""
        return self._experiment_action(experiment_id, "cancel")

    def kill_experiment(self, experiment_id: int) -> Experiment:
        """Kills an experiment: its trials stop at once and it ends CANCELED."""
        return self._experiment_action(experiment_id, "kill")

    def archive_experiment(self, experiment_id: int) -> Experiment:
        """Archives a finished experiment, hiding it from default lists."""
        return self._experiment_action(experiment_id, "archive")

    def unarchive_experiment(self, experiment_id: int) -> Experiment:
        """Unarchives an experiment."""
        return self._experiment_action(experiment_id, "unarchive")

    def get_searcher(self, experiment_id: int) -> dict[str, Any]:
        """Returns the search at a glance: method, metric, progress, trials created, waiting
        trials and, for the ASHA methods, the rung table (``rungs``) keyed by trial ids."""
        return _object(self._get(f"/experiments/{int(experiment_id)}/searcher"), "searcher")

    def get_searcher_state(self, experiment_id: int) -> dict[str, Any]:
        """Returns the searcher's own state for an experiment (its shape depends on the searcher)."""
        return _object(self._get(f"/experiments/{int(experiment_id)}/searcher_state"), "searcher")

    def wait_for_experiment(
        self, experiment_id: int, poll: float = 1.0, timeout: float | None = None
    ) -> Experiment:
        """Waits until an experiment is COMPLETED, CANCELED or ERROR, and returns it.

        Args:
            experiment_id: The experiment.
            poll: Seconds between checks.
            timeout: Give up after this many seconds (``None``: wait as long as it takes).

        Raises:
            TimeoutError: ``timeout`` passed first.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            experiment = self.get_experiment(experiment_id)
            if experiment.is_terminal:
                return experiment
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"experiment {experiment_id} is still {experiment.state} after {timeout} s"
                )
            time.sleep(poll)

    # -- trials -----------------------------------------------------------------------------

    def list_trials(self, experiment_id: int) -> Listing[Trial]:
        """Returns an experiment's trials."""
        body = self._get(f"/experiments/{int(experiment_id)}/trials")
        return Listing([Trial.from_json(t) for t in self._items(body, "trials")], body)

    def get_trial(self, trial_id: int) -> Trial:
        """Returns one trial."""
        return Trial.from_json(_object(self._get(f"/trials/{int(trial_id)}"), "trial"))

    def trial_metrics(
        self,
        trial_id: int,
        group: str | None = None,
        max_points: int | None = None,
        after: int | None = None,
    ) -> Listing[MetricReport]:
        """Returns a trial's metric reports in ascending order of steps.

        Args:
            trial_id: The trial.
            group: ``training`` or ``validation`` (default: both).
            max_points: Let the master downsample to about this many reports.
            after: Only reports after this many completed steps.
        """
        body = self._get(
            f"/trials/{int(trial_id)}/metrics",
            {"group": group, "max_points": max_points, "after": after},
        )
        return Listing([MetricReport.from_json(m) for m in self._items(body, "metrics")], body)

    def trial_metric_columns(
        self,
        trial_id: int,
        group: str | None = None,
        metrics: Iterable[str] | None = None,
        after: int | None = None,
    ) -> dict[str, dict[str, Any]]:
        """Returns a trial's metrics as columns, by group: ``{"training": {"ids": [...],
        "steps": [...], "metrics": {"loss": [...], ...}}, ...}``, each group's rows ascending
        by step. Every row is read, in bulk: a curve of 100,000 points in a fraction of a
        second. A value is None where a row lacks that metric; NaN and infinities are floats.

        Args:
            trial_id: The trial.
            group: Only this group (default: every group).
            metrics: Only these metrics (default: all).
            after: Only rows after this many completed steps.
        """
        params: list[tuple[str, Any]] = [("group", group), ("after", after)]
        params += [("metric", m) for m in metrics or ()]
        path = f"/trials/{int(trial_id)}/metrics/columns"
        response = self._request("GET", path, params=params)
        try:
            groups = nonfinite.fast_loads(response.content)["groups"]
        except (ValueError, KeyError, TypeError):
            raise MasterError(response.status_code,
                              f"unexpected answer to GET {path}") from None
        for columns in groups.values():
            columns["metrics"] = {
                name: nonfinite.decode(values) if str in map(type, values) else values
                for name, values in columns["metrics"].items()}
        return dict(groups)

    def trial_metrics_frame(
        self,
        trial_id: int,
        group: str = "training",
        metrics: Iterable[str] | None = None,
        after: int | None = None,
    ) -> Any:
        """Returns one group of a trial's metrics as a pandas ``DataFrame``: a row per report,
        ascending, with columns ``steps_completed`` and ``id`` and one per metric. Read in bulk
        as :meth:`trial_metric_columns` reads it.

        Raises:
            ImportError: pandas is not installed (``pip install pandas``).
        """
        try:
            import pandas
        except ImportError:
            raise ImportError("trial_metrics_frame needs pandas: pip install pandas") from None
        columns = self.trial_metric_columns(trial_id, group, metrics, after).get(
            group, {"ids": [], "steps": [], "metrics": {}})
        return pandas.DataFrame({"steps_completed": columns["steps"], "id": columns["ids"],
                                 **columns["metrics"]})

    def trial_logs(
        self,
        trial_id: int,
        follow: bool = False,
        after_id: int = 0,
        *,
        limit: int | None = None,
        max_reconnects: int = 10,
    ) -> Iterator[dict[str, Any]]:
        """Yields a trial's log lines, ``{"id", "trial_id", "allocation_id", "timestamp", "rank",
        "stdtype", "message"}``, oldest first.

        When following, the iterator ends once the trial has ended and every line has been
        yielded. A dropped connection is taken up again from the last id seen, so no line is
        yielded twice or skipped.

        Args:
            trial_id: The trial.
            follow: Keep the stream open for new lines until the trial ends.
            after_id: Only lines with a greater id.
            limit: At most this many lines (without ``follow`` only).
            max_reconnects: When following, give up after this many failed connection attempts
                in a row (with a growing wait between them).

        Raises:
            MasterUnreachable: The master could not be reached (again) while following.
        """
        return self._stream_logs(
            f"/trials/{int(trial_id)}/logs", lambda: self.get_trial(trial_id).is_terminal,
            follow, after_id, limit, max_reconnects)

    def _stream_logs(
        self,
        path: str,
        ended: Callable[[], bool],
        follow: bool,
        after_id: int,
        limit: int | None,
        max_reconnects: int,
    ) -> Iterator[dict[str, Any]]:
        """Log rows of ``path``, reconnecting while following until ``ended()`` says the
        trial or command is over (see :meth:`trial_logs`)."""
        last_id = after_id
        failures = 0  # connection attempts in a row that brought nothing
        while True:
            yielded = False
            try:
                for row in self._log_rows(path, follow, last_id, limit):
                    line_id = row.get("id")
                    if isinstance(line_id, int):
                        if line_id <= last_id:
                            continue  # already yielded before a reconnect
                        last_id = line_id
                    yielded = True
                    yield row
            except (_StreamBroken, MasterUnreachable, _RetryableStatus) as exc:
                if not follow:
                    _reraise_public(exc, self.master)
                if yielded or _quiet(exc):
                    # Progress was made, or the trial was merely quiet: take up again at once.
                    failures = 0
                    continue
                failures += 1
                if failures > max_reconnects:
                    _reraise_public(exc, self.master)
                time.sleep(min(0.5 * 2 ** (failures - 1), 5.0))
                continue
            if not follow:
                return
            # The master ends a followed stream only once the trial has ended, but a proxy on
            # the way may also close it cleanly; ask the trial to tell the two apart.
            if ended():
                # Lines written between such a cut and the end are fetched without follow.
                for row in self._log_rows(path, False, last_id, None):
                    line_id = row.get("id")
                    if isinstance(line_id, int):
                        if line_id <= last_id:
                            continue
                        last_id = line_id
                    yield row
                return
            if yielded:
                failures = 0
            else:
                failures += 1
                time.sleep(min(0.5 * 2 ** (failures - 1), 5.0))

    def _log_rows(
        self, path: str, follow: bool, after_id: int, limit: int | None
    ) -> Iterator[dict[str, Any]]:
        """One request's worth of log rows; raises :class:`_StreamBroken` if it is cut off."""
        timeout: float | tuple[float, float] = (
            (self.timeout, _FOLLOW_READ_TIMEOUT) if follow else self.timeout
        )
        try:
            response = self._request(
                "GET",
                path,
                params={"follow": follow, "after_id": after_id, "limit": limit if not follow else None},
                headers={"Accept": "application/x-ndjson, application/json"},
                stream=True,
                timeout=timeout,
            )
        except MasterError as error:
            if follow and error.status in _RETRYABLE_STATUSES:
                raise _RetryableStatus(error) from None
            raise
        with response:
            pending = b""
            try:
                for chunk in response.iter_content(chunk_size=None):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        row = _parse_log_line(line)
                        if row is not None:
                            yield row
            except requests.RequestException as exc:
                # The unfinished last line is dropped here; it is sent again after a reconnect.
                raise _StreamBroken(exc) from exc
            row = _parse_log_line(pending)
            if row is not None:
                yield row

    # -- commands ---------------------------------------------------------------------------

    def run_command(
        self,
        entrypoint: str | Sequence[str] | None = None,
        *,
        config: str | Mapping[str, Any] | None = None,
        context_dir: str | Path | None = None,
    ) -> Command:
        """Runs a command on the cluster's slots (Determined's ``det cmd run``).

        Args:
            entrypoint: The command: a list of arguments, or one string split as a shell
                would. It replaces the config's ``entrypoint``.
            config: A command config (YAML text or a mapping): ``resources``, ``environment``,
                ``bind_mounts``, ``description``, ``idle_timeout``, ...
            context_dir: A directory packed with :func:`pack_context` and unpacked as the
                command's working directory.

        Returns:
            The command, QUEUED.

        Raises:
            ValueError: No entrypoint, given or in the config.
            MasterError: The master refused it (400 with one detail per wrong setting).
        """
        import yaml

        from ._context import pack_context

        if isinstance(config, str):
            loaded = yaml.safe_load(config) if config.strip() else {}
            data = dict(loaded) if isinstance(loaded, dict) else None
        else:
            data = dict(config or {})
        if data is None:
            text = str(config)  # not a mapping: the master says what is wrong with it
        else:
            if entrypoint is not None:
                data["entrypoint"] = entrypoint if isinstance(entrypoint, str) else list(entrypoint)
            if not data.get("entrypoint"):
                raise ValueError("no command to run: give an entrypoint")
            text = yaml.safe_dump(data, sort_keys=False)
        context = pack_context(context_dir) if context_dir is not None else None
        body = self._json(
            "POST",
            "/commands",
            json_body={
                "config": text,
                "context": base64.b64encode(context).decode("ascii") if context is not None else None,
            },
            timeout=(self.timeout, max(self.timeout, _CREATE_READ_TIMEOUT)),
        )
        return Command.from_json(_object(body, "command"))

    def list_commands(self) -> Listing[Task]:
        """Returns the commands, oldest first."""
        return self.list_tasks("command")

    def get_command(self, command_id: int) -> Task:
        """Returns one command."""
        return self.get_task("command", command_id)

    def kill_command(self, command_id: int) -> Task:
        """Kills a command (its owner or an admin); returns it, TERMINATING or TERMINATED."""
        return self.kill_task("command", command_id)

    def command_logs(
        self,
        command_id: int,
        follow: bool = False,
        after_id: int = 0,
        *,
        limit: int | None = None,
        max_reconnects: int = 10,
    ) -> Iterator[dict[str, Any]]:
        """Yields a command's log lines (see :meth:`task_logs`)."""
        return self.task_logs("command", command_id, follow, after_id, limit=limit,
                              max_reconnects=max_reconnects)

    # -- notebooks, shells, TensorBoards, and tasks of every type ----------------------------

    def start_notebook(self, *, config: str | Mapping[str, Any] | None = None,
                       context_dir: str | Path | None = None) -> Task:
        """Starts a notebook (JupyterLab) on the cluster's slots; its :attr:`Task.url`, below
        the master's URL, opens it once it is :attr:`Task.ready`.

        Args:
            config: A task config (YAML text or a mapping): ``resources``, ``environment``,
                ``bind_mounts``, ``description``, ``idle_timeout``.
            context_dir: A directory sent along as the notebook's working directory.
        """
        return self._start_task("notebook", config, context_dir)

    def start_shell(self, *, config: str | Mapping[str, Any] | None = None,
                    context_dir: str | Path | None = None) -> Task:
        """Starts a shell (an SSH server that takes only the key in :attr:`Task.private_key`)
        on the cluster's slots; ``det-hub shell open`` connects to it."""
        return self._start_task("shell", config, context_dir)

    def start_tensorboard(self, experiment_ids: Sequence[int], *,
                          config: str | Mapping[str, Any] | None = None) -> Task:
        """Starts a TensorBoard over the experiments' metrics (the event files their trials
        write), on the cluster's slots; its :attr:`Task.url` opens it."""
        return self._start_task("tensorboard", config, None,
                                experiment_ids=[int(i) for i in experiment_ids])

    def _start_task(self, kind: str, config: str | Mapping[str, Any] | None,
                    context_dir: str | Path | None, **extra: Any) -> Task:
        import yaml

        from ._context import pack_context

        text = config if isinstance(config, str) else yaml.safe_dump(dict(config or {}))
        context = pack_context(context_dir) if context_dir is not None else None
        body = self._json(
            "POST", f"/{kind}s",
            json_body={
                "config": text,
                "context": base64.b64encode(context).decode("ascii") if context is not None else None,
                **extra,
            },
            timeout=(self.timeout, max(self.timeout, _CREATE_READ_TIMEOUT)),
        )
        return Task.from_json(_object(body, kind))

    def list_tasks(self, kind: str) -> Listing[Task]:
        """Returns the tasks of one type (``command``, ``notebook``, ``shell``,
        ``tensorboard``), oldest first."""
        body = self._get(f"/{_kind(kind)}s")
        return Listing([Task.from_json(c) for c in self._items(body, f"{kind}s")], body)

    def get_task(self, kind: str, task_id: int) -> Task:
        """Returns one task of this type."""
        return Task.from_json(_object(self._get(f"/{_kind(kind)}s/{int(task_id)}"), kind))

    def kill_task(self, kind: str, task_id: int) -> Task:
        """Kills a task (its owner or an admin); returns it, TERMINATING or TERMINATED."""
        return Task.from_json(_object(self._post(f"/{_kind(kind)}s/{int(task_id)}/kill"), kind))

    def task_logs(
        self,
        kind: str,
        task_id: int,
        follow: bool = False,
        after_id: int = 0,
        *,
        limit: int | None = None,
        max_reconnects: int = 10,
    ) -> Iterator[dict[str, Any]]:
        """Yields a task's log lines, ``{"id", "task_id", "allocation_id", "timestamp",
        "rank", "stdtype", "message"}``, oldest first; as :meth:`trial_logs`, following ends
        once the task has ended and every line has been yielded."""
        return self._stream_logs(
            f"/{_kind(kind)}s/{int(task_id)}/logs",
            lambda: self.get_task(kind, task_id).is_terminal,
            follow, after_id, limit, max_reconnects)

    def experiment_context(self, experiment_id: int) -> bytes:
        """Returns the experiment's context archive (a .tar.gz), as the master keeps it; empty
        when it has none."""
        response = self._request("GET", f"/experiments/{int(experiment_id)}/context",
                                 headers={"Accept": "application/gzip"})
        return response.content

    # -- checkpoints ------------------------------------------------------------------------

    def list_checkpoints(self, experiment_id: int) -> Listing[Checkpoint]:
        """Returns an experiment's checkpoints, newest first."""
        body = self._get(f"/experiments/{int(experiment_id)}/checkpoints")
        return Listing([Checkpoint.from_json(c, self) for c in self._items(body, "checkpoints")],
                       body)

    def get_checkpoint(self, uuid: str) -> Checkpoint:
        """Returns one checkpoint."""
        return Checkpoint.from_json(_object(self._get(f"/checkpoints/{uuid}"), "checkpoint"),
                                    self)

    def checkpoint_metrics(self, uuid: str, group: str | None = None) -> Listing[MetricReport]:
        """Returns the metric reports of every trial that reported using a checkpoint
        (``core_context.experimental.report_task_using_checkpoint``, or through a model
        version of it), trial by trial, each in ascending order of steps; each report says
        its ``trial_id``.

        Args:
            uuid: The checkpoint.
            group: Only this group (``validation``, ``training``, ...); all by default.

        Raises:
            MasterError: 404 for an unknown checkpoint.
        """
        body = self._get(f"/checkpoints/{_segment(uuid)}/metrics", {"group": group})
        return Listing([MetricReport.from_json(m) for m in self._items(body, "metrics")], body)

    def delete_checkpoint(self, uuid: str) -> Checkpoint:
        """Deletes a checkpoint's files (its experiment's owner or an admin) and returns it,
        now ``DELETED``.

        Raises:
            MasterError: 409 when a model version names it (the message names them), when it
                is the latest checkpoint of a trial that can still run, or when it is not
                COMPLETED; 403 for another user's; 404 for an unknown uuid.
        """
        body = self._json("DELETE", f"/checkpoints/{_segment(uuid)}")
        return Checkpoint.from_json(_object(body, "checkpoint"), self)

    def checkpoint_gc(
        self,
        experiment_id: int,
        *,
        save_experiment_best: int | None = None,
        save_trial_best: int | None = None,
        save_trial_latest: int | None = None,
        dry_run: bool = False,
    ) -> CheckpointGCResult:
        """Sets an experiment's checkpoint retention policy (the settings given; the others
        keep their value) and runs checkpoint GC over it now. With ``dry_run`` nothing changes
        and the answer says what would be deleted. Registered checkpoints, and the latest of
        each trial that can still run, are always kept."""
        policy = {"save_experiment_best": save_experiment_best,
                  "save_trial_best": save_trial_best, "save_trial_latest": save_trial_latest}
        body = {k: v for k, v in policy.items() if v is not None}
        answer = self._post(f"/experiments/{int(experiment_id)}/gc", {**body, "dry_run": dry_run})
        return CheckpointGCResult.from_json(answer, self)

    # -- model registry ---------------------------------------------------------------------

    def create_model(
        self,
        name: str,
        description: str = "",
        labels: Iterable[str] = (),
        metadata: Mapping[str, Any] | None = None,
        notes: str = "",
    ) -> Model:
        """Creates a model, without versions, owned by the caller.

        Raises:
            MasterError: 409 when the name is taken; 400 for a bad name (empty, with ``/``
                or control characters, or spaces at an end).
        """
        body = {"name": name, "description": description, "labels": list(labels),
                "metadata": dict(metadata or {}), "notes": notes}
        return Model.from_json(_object(self._post("/models", body), "model"), self)

    def get_model(self, name: str) -> Model:
        """Returns the model with this name (404 when there is none)."""
        return Model.from_json(_object(self._get(f"/models/{_segment(name)}"), "model"), self)

    def list_models(
        self,
        *,
        archived: bool | None = None,
        name: str | None = None,
        label: str | None = None,
        owner: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> Listing[Model]:
        """Returns one page of models, by name; ``name`` keeps those whose name holds that
        text (any case), ``archived=False`` leaves archived ones out."""
        body = self._get("/models", {"archived": archived, "name": name, "label": label,
                                     "owner": owner, "limit": limit, "offset": offset})
        pagination = body.get("pagination")
        return Listing([Model.from_json(m, self) for m in self._items(body, "models")], body,
                       pagination if isinstance(pagination, dict) else None)

    def update_model(self, model: str, /, **changes: Any) -> Model:
        """Changes model ``model``: its ``name``, ``description``, ``labels``, ``notes``,
        ``metadata`` (replaced), ``add_metadata`` (keys set), ``remove_metadata`` (keys taken
        out)."""
        body = self._patch(f"/models/{_segment(model)}", changes)
        return Model.from_json(_object(body, "model"), self)

    def archive_model(self, name: str) -> Model:
        return Model.from_json(_object(self._post(f"/models/{_segment(name)}/archive"),
                                       "model"), self)

    def unarchive_model(self, name: str) -> Model:
        return Model.from_json(_object(self._post(f"/models/{_segment(name)}/unarchive"),
                                       "model"), self)

    def delete_model(self, name: str) -> Model:
        """Deletes a model and its versions (their checkpoints are kept); returns it as it
        was."""
        body = self._json("DELETE", f"/models/{_segment(name)}")
        return Model.from_json(_object(body, "model"))

    def register_model_version(
        self,
        model: str,
        checkpoint_uuid: str,
        *,
        name: str = "",
        comment: str = "",
        notes: str = "",
        labels: Iterable[str] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> ModelVersion:
        """Registers a COMPLETED checkpoint as the next version of model ``model``; ``name``
        and the rest describe the version.

        Raises:
            MasterError: 404 for an unknown model or checkpoint; 409 when the model is
                archived or the checkpoint is not COMPLETED.
        """
        body = {"checkpoint_uuid": checkpoint_uuid, "name": name, "comment": comment,
                "notes": notes, "labels": list(labels), "metadata": dict(metadata or {})}
        answer = self._post(f"/models/{_segment(model)}/versions", body)
        return ModelVersion.from_json(_object(answer, "model_version"), self)

    def list_model_versions(self, name: str) -> Listing[ModelVersion]:
        """Returns a model's versions, newest first."""
        body = self._get(f"/models/{_segment(name)}/versions")
        return Listing([ModelVersion.from_json(v, self)
                        for v in self._items(body, "model_versions")], body)

    def get_model_version(self, name: str, version: int | None = None) -> ModelVersion:
        """Returns version ``version`` of a model, or its latest when None.

        Raises:
            MasterError: 404 for an unknown model or version, or a model without versions.
        """
        if version is None:
            versions = self.list_model_versions(name)
            if not versions:
                raise MasterError(404, f"model {name!r} has no versions")
            return versions[0]
        body = self._get(f"/models/{_segment(name)}/versions/{int(version)}")
        return ModelVersion.from_json(_object(body, "model_version"), self)

    def model_version_metrics(self, name: str, version: int,
                              group: str | None = None) -> Listing[MetricReport]:
        """Returns the metric reports of every trial that reported using version ``version``
        of a model (``core_context.experimental.report_task_using_model_version``), as
        :meth:`checkpoint_metrics` orders them.

        Raises:
            MasterError: 404 for an unknown model or version.
        """
        body = self._get(f"/models/{_segment(name)}/versions/{int(version)}/metrics",
                         {"group": group})
        return Listing([MetricReport.from_json(m) for m in self._items(body, "metrics")], body)

    def update_model_version(self, model: str, version: int, /,
                             **changes: Any) -> ModelVersion:
        """Changes a version's ``name``, ``comment``, ``notes``, ``labels`` or metadata (as
        :meth:`update_model`)."""
        body = self._patch(f"/models/{_segment(model)}/versions/{int(version)}", changes)
        return ModelVersion.from_json(_object(body, "model_version"), self)

    def delete_model_version(self, name: str, version: int) -> ModelVersion:
        """Deletes one version of a model; returns it as it was."""
        body = self._json("DELETE", f"/models/{_segment(name)}/versions/{int(version)}")
        return ModelVersion.from_json(_object(body, "model_version"), self)

    # -- webhooks ---------------------------------------------------------------------------

    def list_webhooks(self) -> Listing[Webhook]:
        """Returns the webhooks (admins only)."""
        body = self._get("/webhooks")
        return Listing([Webhook.from_json(h) for h in self._items(body, "webhooks")], body)

    def create_webhook(
        self,
        url: str,
        triggers: Sequence[str | Mapping[str, Any]],
        *,
        webhook_type: str = "DEFAULT",
        name: str = "",
        mode: str = "WORKSPACE",
    ) -> Webhook:
        """Registers a webhook (admins only).

        Args:
            url: Where the master POSTs events (http or https).
            triggers: ``"EXPERIMENT_STATE_CHANGE:COMPLETED"``, ``"CUSTOM"``,
                ``"CUSTOM:error"``, or the API's ``{"trigger_type", "condition"}`` objects.
            webhook_type: ``DEFAULT`` (Determined's JSON event) or ``SLACK``.
            name: A name to know it by (and for experiment configs to name it by).
            mode: ``WORKSPACE`` (every experiment's events) or ``SPECIFIC`` (only those of
                experiments whose config lists it under ``integrations.webhooks``, by
                ``webhook_name`` or ``webhook_id``).
        """
        body = {"url": url, "webhook_type": webhook_type, "name": name, "mode": mode,
                "triggers": [parse_trigger(t) if isinstance(t, str) else dict(t)
                             for t in triggers]}
        return Webhook.from_json(_object(self._post("/webhooks", body), "webhook"))

    def delete_webhook(self, webhook_id: int) -> Webhook:
        """Deletes a webhook (admins only); returns it as it was."""
        return Webhook.from_json(_object(self._json("DELETE", f"/webhooks/{int(webhook_id)}"),
                                         "webhook"))

    def test_webhook(self, webhook_id: int) -> dict[str, Any]:
        """Sends a webhook a test event now, once: ``{"delivered": bool, "error": str|None}``."""
        return self._post(f"/webhooks/{int(webhook_id)}/test")

    def webhook_signing_key(self) -> str:
        """Returns the key the master signs webhook deliveries with (admins only): a
        receiver checks that ``X-Determined-AI-Signature`` is the hex HMAC-SHA256, under this
        key, of ``<X-Determined-AI-Signature-Timestamp>,<raw body>``."""
        return str(self._get("/webhooks/signing_key")["signing_key"])

    # -- live metrics -----------------------------------------------------------------------

    def downsampled_metrics(
        self,
        trial_id: int,
        metric: str,
        *,
        max_points: int = 1000,
        group: str | None = None,
    ) -> Listing[MetricReport]:
        """Returns a trial's metric reports reduced to at most ``max_points`` per group by the
        master, keeping the shape of ``metric``'s curve (Largest-Triangle-Three-Buckets).

        Args:
            trial_id: The trial.
            metric: The metric whose peaks and dips must survive, e.g. ``loss``.
            max_points: Reports per group to keep at most.
            group: ``training`` or ``validation`` (default: both).
        """
        body = self._get(
            f"/trials/{int(trial_id)}/metrics",
            {"group": group, "max_points": max_points, "metric": metric},
        )
        return Listing([MetricReport.from_json(m) for m in self._items(body, "metrics")], body)

    def stream_experiment_events(
        self,
        experiment_id: int,
        after_id: int = 0,
        *,
        stop: threading.Event | None = None,
        heartbeat: float = 15.0,
        max_reconnects: int = 10,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Yields ``(event, data)`` from an experiment's live stream: ``("metrics", row)`` for
        every metric row of its trials with an id above ``after_id``, ``("state", {...})``
        whenever the experiment or a trial changes state or progress, and ``("rolled_back",
        {"trial_id", "run_id", "steps_completed"})`` when a new run of a trial rolled back the
        rows its earlier runs reported past ``steps_completed`` (drop those yielded before).

        A dropped connection, or the master asking to be reconnected to, is taken up again from
        the last row id seen, so no row is yielded twice or skipped. The iterator ends when the
        master ends the stream because the experiment is over, or soon after ``stop`` is set.

        Args:
            experiment_id: The experiment.
            after_id: Only rows with a greater id.
            stop: Set it to end the iterator; it is looked at on every event and heartbeat.
            heartbeat: Seconds between the master's heartbeats (1 to 60), which bounds how long
                a set ``stop`` goes unnoticed.
            max_reconnects: Give up after this many failed connection attempts in a row.

        Raises:
            MasterError: The master refused the stream (no such experiment, bad token).
            MasterUnreachable: The master could not be reached (again).
        """
        last_id = int(after_id)
        failures = 0
        path = f"/experiments/{int(experiment_id)}/metrics/stream"
        # Twice the heartbeat without a byte means the connection is dead: reconnect.
        timeout = (self.timeout, max(2.0 * heartbeat, 5.0))
        while stop is None or not stop.is_set():
            progressed = False
            try:
                response = self._request(
                    "GET", path, params={"after_id": last_id, "heartbeat": heartbeat},
                    headers={"Accept": "text/event-stream"}, stream=True, timeout=timeout)
            except MasterError as error:
                if error.status not in _RETRYABLE_STATUSES:
                    raise
                cause: Exception = _RetryableStatus(error)
            except MasterUnreachable as exc:
                cause = exc
            else:
                try:
                    with response:
                        for name, data in _sse_events(response, stop):
                            progressed = True
                            if name == "metrics":
                                row_id = data.get("id")
                                if isinstance(row_id, int):
                                    if row_id <= last_id:
                                        continue
                                    last_id = row_id
                                yield name, data
                            elif name in ("state", "rolled_back"):
                                yield name, data
                            elif name == "end":
                                return
                            elif name == "reconnect":
                                break
                    cause = MasterUnreachable(self.master, "the metric stream ended early")
                except requests.RequestException as exc:
                    cause = _StreamBroken(exc)
            if stop is not None and stop.is_set():
                return
            if progressed:
                failures = 0
                continue
            failures += 1
            if failures > max_reconnects:
                _reraise_public(cause, self.master)
            wait = min(0.5 * 2 ** (failures - 1), 5.0)
            if stop is not None:
                stop.wait(wait)
            else:
                time.sleep(wait)

    def stream_metrics(
        self,
        experiment_id: int,
        after_id: int = 0,
        *,
        stop: threading.Event | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Yields every metric row of an experiment's trials with an id above ``after_id`` as
        the master stores it: ``{"id", "trial_id", "group", "steps_completed", "metrics",
        "report_time"}``, first the stored ones, then live ones. Ends when the experiment is
        over and every row was yielded, or once ``stop`` is set (see
        :meth:`stream_experiment_events`)."""
        for name, data in self.stream_experiment_events(experiment_id, after_id, stop=stop):
            if name == "metrics":
                if isinstance(data.get("metrics"), dict):
                    # NaN and infinities come as Determined's strings; floats again here.
                    data = dict(data, metrics=nonfinite.decode(data["metrics"]))
                yield data


class _RetryableStatus(Exception):
    """An error status that a proxy gives while the master restarts."""

    def __init__(self, error: MasterError) -> None:
        super().__init__(str(error))
        self.error = error


def _quiet(exc: Exception) -> bool:
    """Whether a followed stream failed only because no line came for a while (a quiet trial, or
    a master that sends headers with the first line), which is no sign of trouble."""
    if isinstance(exc, _StreamBroken):
        return exc.timed_out
    return isinstance(exc, MasterUnreachable) and isinstance(exc.__cause__, requests.ReadTimeout)


def _reraise_public(exc: Exception, master: str) -> NoReturn:
    """Raises the SDK's public error for an internal streaming failure."""
    if isinstance(exc, _RetryableStatus):
        raise exc.error from None
    if isinstance(exc, _StreamBroken):
        raise MasterUnreachable(master, "the log stream was cut off") from exc
    raise exc


def _parse_log_line(line: bytes) -> dict[str, Any] | None:
    text = line.strip()
    if not text:
        return None
    try:
        row = json.loads(text)
    except ValueError:
        # Shown rather than dropped: a line the master could not encode is still output.
        return {"message": text.decode("utf-8", "replace")}
    return row if isinstance(row, dict) else {"message": str(row)}


def _sse_events(
    response: requests.Response, stop: threading.Event | None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Server-Sent Events of a streamed answer as ``(event, data)``, JSON data decoded.

    Parsed here rather than with an SSE package: the master's frames are one ``event`` and one
    ``data`` line each, and requests already does the streaming.
    """
    pending = b""
    name, data_lines = "message", list[str]()
    for chunk in response.iter_content(chunk_size=None):
        if stop is not None and stop.is_set():
            return
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for raw in lines:
            line = raw.rstrip(b"\r").decode("utf-8", "replace")
            if not line:
                if data_lines:
                    try:
                        data = json.loads("\n".join(data_lines))
                    except ValueError:
                        data = None
                    if isinstance(data, dict):
                        yield name, data
                name, data_lines = "message", []
            elif line.startswith(":"):
                if stop is not None and stop.is_set():
                    return
            else:
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "event":
                    name = value
                elif field == "data":
                    data_lines.append(value)


def _segment(value: str) -> str:
    """A value as one URL path segment (agent ids may hold any character)."""
    return quote(value, safe="")


TASK_KINDS = ("command", "notebook", "shell", "tensorboard")


def _kind(kind: str) -> str:
    if kind not in TASK_KINDS:
        raise ValueError(f"no task type {kind!r}; one of {', '.join(TASK_KINDS)}")
    return kind


def _object(body: dict[str, Any], key: str) -> dict[str, Any]:
    value = body.get(key)
    if not isinstance(value, dict):
        raise DetHubError(f"the master's answer has no {key!r} object")
    return value


def _with_name(config_text: str, name: str) -> str:
    """The config with its ``name`` replaced; left as is if it is not a YAML mapping, since the
    master's validation then explains what is wrong with it."""
    import yaml

    try:
        config = yaml.safe_load(config_text)
    except yaml.YAMLError:
        return config_text
    if not isinstance(config, dict):
        return config_text
    config["name"] = name
    return yaml.safe_dump(config, sort_keys=False)


__all__ = ["Client", "ProgressCallback"]
