"""The dashboard and the admin page behind a real ``det-hub up``: what signed-in users and hub
admins see, and what the pages' forms change, over HTTP and in Debian's Chromium.

One hub serves the whole module: alice's finished experiment (training and validation
metrics, a checkpoint), alice's long-running one and bob's long-running one, whose jobs hold
the local agent's slots while the tests run.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from det_hub.hub.up import find_proxy
from det_hub.plotly_bundle import pages_plotly_js, plotly_js
from det_hub.testing import SERVICE, HubProcess, pack, reap_tasks

from .conftest import BROWSER_DIR, REPO, STEPS, browser_node, steps_config

pytestmark = pytest.mark.slow

#: A name that would run as a script if a page did not escape it.
BOBS_NAME = "bob's <script>alert(1)</script>"

#: What the REST API shows for an active experiment.
ACTIVE = ("QUEUED", "STARTING", "RUNNING")


@dataclasses.dataclass
class Cluster:
    hub: HubProcess
    admin: str  # the admin's hub API token
    short: int  # alice's finished experiment
    long: int  # alice's experiment that runs through the module
    bobs: int  # bob's, which runs through the module too
    started: float = dataclasses.field(default_factory=time.time)

    def page(self, session: requests.Session, path: str, **kwargs: Any) -> requests.Response:
        return session.get(f"{self.hub.url}{SERVICE}{path}", timeout=30, **kwargs)

    def post(self, session: requests.Session, path: str, data: dict[str, str],
             ) -> requests.Response:
        return session.post(f"{self.hub.url}{SERVICE}{path}", data=data, timeout=30,
                            allow_redirects=False)

    def api(self, path: str, method: str = "GET", **kwargs: Any) -> Any:
        answer = self.hub.call(method, path, self.admin, **kwargs)
        assert answer.status_code == 200, answer.text
        return answer.json()

    def state(self, experiment_id: int) -> str:
        return str(self.api(f"/experiments/{experiment_id}")["experiment"]["state"])


def _create(hub: HubProcess, token: str, config: dict[str, Any]) -> int:
    made = hub.call("POST", "/experiments", token, json={
        "config": yaml.safe_dump(config), "context": pack(STEPS)})
    assert made.status_code == 201, made.text
    return int(made.json()["experiment"]["id"])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if find_proxy() is None:
        pytest.fail("configurable-http-proxy is not installed (make install-test installs it)")
    data = tmp_path_factory.mktemp("dashboard")
    hub = HubProcess(data / "hub")
    try:
        alice, bob, admin = hub.token("alice"), hub.token("bob"), hub.token("admin")
        running = Cluster(hub, admin, 0, 0, 0)
        running.short = _create(hub, alice, steps_config(
            "alice-short", length=20, sleep=0.01, report_every=2, checkpoint_every=10))
        hub.wait(lambda: running.state(running.short) == "COMPLETED", 120)
        running.long = _create(hub, alice, steps_config("alice-long", length=100_000,
                                                        sleep=0.05))
        running.bobs = _create(hub, bob, steps_config(BOBS_NAME, length=100_000, sleep=0.05))

        def reporting(experiment_id: int) -> bool:
            [trial] = running.api(f"/experiments/{experiment_id}/trials")["trials"]
            return len(running.api(f"/trials/{trial['id']}/metrics")["metrics"]) >= 2

        hub.wait(lambda: reporting(running.long) and reporting(running.bobs), 120)
        yield running
        for experiment_id in (running.long, running.bobs):
            hub.call("POST", f"/experiments/{experiment_id}/kill", admin)
        hub.wait(lambda: all(running.state(e) == "CANCELED"
                             for e in (running.long, running.bobs)), 60)
    finally:
        hub.stop()
        reap_tasks(data)


def _xsrf(page: requests.Response) -> str:
    """The token a page's forms carry."""
    found = re.search(r'name="_xsrf" value="([^"]+)"', page.text) or \
        re.search(r'<meta name="xsrf-token" content="([^"]+)"', page.text)
    assert found, page.text[:500]
    return found.group(1)


def _listed(page: requests.Response) -> list[int]:
    """The ids of the experiments in the dashboard's table, in order."""
    table = page.text.split('id="experiments"', 1)
    if len(table) < 2:
        return []
    body = table[1].split("</table>", 1)[0]
    return list(dict.fromkeys(int(i) for i in re.findall(r'experiments/(\d+)"', body)))


def _chart_data(page: requests.Response) -> list[dict[str, Any]]:
    found = re.search(r'<script type="application/json" id="chart-data">(.*?)</script>',
                      page.text, re.S)
    assert found, page.text[:1000]
    return list(json.loads(found.group(1)))


def test_signed_in_users_see_and_filter_experiments(cluster: Cluster) -> None:
    alice = cluster.hub.login("alice")
    home = cluster.page(alice, "/")
    assert home.status_code == 200, home.text[:500]
    assert "Signed in as alice." in home.text
    assert _listed(home) == [cluster.bobs, cluster.long, cluster.short]  # newest first
    # Names are text, never markup.
    assert "<script>alert(1)</script>" not in home.text
    assert html.escape(BOBS_NAME) in home.text
    # No admin link for a user who is not a hub admin.
    assert f'href="{SERVICE}/admin"' not in home.text

    def listed(**query: str) -> list[int]:
        answer = cluster.page(alice, "/", params=query)
        assert answer.status_code == 200, answer.text[:500]
        return _listed(answer)

    assert listed(owner="mine") == [cluster.long, cluster.short]
    assert listed(owner="bob") == [cluster.bobs]
    assert listed(state="COMPLETED") == [cluster.short]
    assert listed(state="ACTIVE", owner="mine") == [cluster.long]
    assert listed(name="LONG") == [cluster.long]  # ignoring case
    assert listed(name="<script>") == [cluster.bobs]
    assert listed(owner="nobody") == []
    none = cluster.page(alice, "/", params={"name": "no such name"})
    assert "No experiment matches these filters." in none.text

    # Archived experiments are hidden unless asked for.
    xsrf = _xsrf(cluster.page(alice, f"/experiments/{cluster.short}"))
    archived = cluster.post(alice, f"/experiments/{cluster.short}/archive", {"_xsrf": xsrf})
    assert archived.status_code == 303
    assert archived.headers["Location"] == f"{SERVICE}/experiments/{cluster.short}"
    assert cluster.api(f"/experiments/{cluster.short}")["experiment"]["archived"] is True
    assert listed() == [cluster.bobs, cluster.long]
    assert listed(archived="yes") == [cluster.short]
    assert listed(archived="all") == [cluster.bobs, cluster.long, cluster.short]
    assert cluster.post(alice, f"/experiments/{cluster.short}/unarchive",
                        {"_xsrf": xsrf}).status_code == 303
    assert listed() == [cluster.bobs, cluster.long, cluster.short]

    bad = cluster.page(alice, "/", params={"state": "SLEEPING"})
    assert bad.status_code == 400
    assert html.escape("state: 'SLEEPING' is not an experiment state") in bad.text


def test_the_experiment_page_shows_charts_trials_logs_and_checkpoints(cluster: Cluster) -> None:
    alice = cluster.hub.login("alice")
    page = cluster.page(alice, f"/experiments/{cluster.short}")
    assert page.status_code == 200, page.text[:500]
    assert 'id="charts"' in page.text
    # Plotly.js is fetched at once and run once the page is painted.
    [plotly_src] = re.findall(
        rf'id="plotly-src" href="{SERVICE}/static/plotly\.min\.js\?v=([0-9a-f]+)"', page.text)
    # The charts' data is the trial's metrics, as the REST API serves them.
    [trial] = cluster.api(f"/experiments/{cluster.short}/trials")["trials"]
    rest = cluster.api(f"/trials/{trial['id']}/metrics", params={"max_points": 500})["metrics"]
    series = {(s["metric"], s["group"]): s for s in _chart_data(page)}
    assert set(series) == {("loss", "training"), ("validation_loss", "validation")}
    training = [r for r in rest if r["group"] == "training"]
    assert series["loss", "training"]["x"] == [r["steps_completed"] for r in training] \
        == list(range(2, 21, 2))
    assert series["loss", "training"]["y"] == [r["metrics"]["loss"] for r in training]
    assert series["validation_loss", "validation"]["x"] == [20]
    assert series["validation_loss", "validation"]["y"] == [pytest.approx(1 / 20)]
    assert {s["trial_id"] for s in series.values()} == {trial["id"]}
    # The trial, its hyperparameters and state; the checkpoints.
    trials = page.text.split('id="trials"', 1)[1].split("</table>", 1)[0]
    assert "COMPLETED" in trials
    # One trial: its hyperparameters are every trial's, above the table rather than a column
    # each.
    fixed = page.text.split('id="fixed-hparams"', 1)[1].split("</p>", 1)[0]
    assert "sleep=0.01" in fixed and "report_every=2" in fixed
    assert 'data-hparams="[]"' in page.text
    assert f'href="{SERVICE}/trials/{trial["id"]}/logs"' in trials
    checkpoints = cluster.api(f"/experiments/{cluster.short}/checkpoints")["checkpoints"]
    assert len(checkpoints) >= 1
    drawn_checkpoints = re.search(
        r'<script type="application/json" id="checkpoint-data">(.*?)</script>', page.text, re.S)
    assert drawn_checkpoints, page.text[:1000]
    assert [c["uuid"] for c in json.loads(drawn_checkpoints.group(1))] == \
        [c["uuid"] for c in checkpoints]
    # Alice may register them: the table says where.
    assert f'data-register="{SERVICE}/checkpoints/"' in page.text
    assert 'data-register' not in cluster.page(cluster.hub.login("bob"),
                                               f"/experiments/{cluster.short}").text
    # The pages' Plotly.js (det_hub's partial bundle) comes under the service's prefix:
    # compressed, and kept a year under the URL the page names.
    plotly = cluster.page(alice, f"/static/plotly.min.js?v={plotly_src}")
    bundle = pages_plotly_js()
    assert plotly.status_code == 200 and bundle is not None
    assert plotly.content == bundle.read_bytes() and bundle != plotly_js()
    assert plotly.headers["Content-Encoding"] == "gzip"
    assert int(plotly.headers["Content-Length"]) < len(plotly.content) / 2
    assert "max-age=31536000" in plotly.headers["Cache-Control"]

    # A running experiment's page follows its stream from the newest row it drew: its state,
    # then the rows stored since.
    drawn = cluster.page(alice, f"/experiments/{cluster.long}").text
    after = int(re.search(r'data-after="(\d+)"', drawn).group(1))
    assert after > 0
    events: dict[str, list[Any]] = {}
    with cluster.page(alice, f"/experiments/{cluster.long}/stream", params={"after_id": after},
                      stream=True) as live:
        assert live.status_code == 200
        assert live.headers["Content-Type"].startswith("text/event-stream")
        name = None
        for line in live.iter_lines(decode_unicode=True):
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: ") and name:
                events.setdefault(name, []).append(json.loads(line.removeprefix("data: ")))
            if "checkpoints" in events and "metrics" in events:
                break
    [state, *_] = events["state"]
    assert state["shown_state"] in ACTIVE and state["trials"][0]["hparams"] == {"sleep": 0.05}
    # With the state, what else of the page it shows: no search view for one trial, no rungs
    # for the single searcher, the checkpoints as the REST API lists them.
    assert events["search"] == [None] and events["rungs"] == [None]
    listed = cluster.api(f"/experiments/{cluster.long}/checkpoints")["checkpoints"]
    assert [c["uuid"] for c in events["checkpoints"][0]] == [c["uuid"] for c in listed]
    # Importance, which the page asks for beside it: nothing to tell from one trial.
    assert cluster.page(alice, f"/experiments/{cluster.short}/importance").json() == {
        "metric": "validation_loss", "trials": 1, "importance": []}
    assert all(row["id"] > after for row in events["metrics"])
    bad = cluster.page(alice, f"/experiments/{cluster.long}/stream", params={"after_id": "x"})
    assert bad.status_code == 400 and "after_id" in bad.json()["error"]

    # Logs: a finished trial's, and a running one's followed from where the page stopped.
    logs = cluster.page(alice, f"/trials/{trial['id']}/logs")
    assert logs.status_code == 200 and "done" in logs.text
    assert 'data-ended="true"' in logs.text
    lines = cluster.page(alice, f"/trials/{trial['id']}/logs/lines").json()
    assert lines["ended"] is True
    assert any(line["message"].strip() == "done" for line in lines["logs"])
    after = lines["logs"][-1]["id"]
    assert cluster.page(alice, f"/trials/{trial['id']}/logs/lines",
                        params={"after_id": after}).json()["logs"] == []
    [running] = cluster.api(f"/experiments/{cluster.long}/trials")["trials"]
    following = cluster.page(alice, f"/trials/{running['id']}/logs/lines").json()
    assert following["ended"] is False
    # Signed out, the endpoints answer 403 in JSON rather than a sign-in redirect.
    anonymous = requests.get(f"{cluster.hub.url}{SERVICE}/trials/{trial['id']}/logs/lines",
                             timeout=10, allow_redirects=False)
    assert anonymous.status_code == 403 and "error" in anonymous.json()
    assert cluster.page(alice, "/experiments/99999").status_code == 404


def test_experiments_compare_by_their_best_trials(cluster: Cluster) -> None:
    alice = cluster.hub.login("alice")
    listed = cluster.page(alice, "/")
    assert '<form id="compare"' in listed.text
    assert f'name="id" value="{cluster.short}" form="compare"' in listed.text
    page = cluster.page(alice, "/compare", params={"id": [cluster.short, cluster.bobs]})
    assert page.status_code == 200, page.text[:500]
    [best] = cluster.api(f"/experiments/{cluster.short}/trials")["trials"]
    table = page.text.split('id="compared"', 1)[1].split("</table>", 1)[0]
    assert f'data-experiment="{cluster.short}" data-trial="{best["id"]}"' in table
    assert f'{best["searcher_metric_value"]:.6g}' in table
    # Bob's runs and has not validated: it is listed, with nothing to compare yet.
    assert f'data-experiment="{cluster.bobs}">' in table
    assert "no trial has reported validation_loss yet" in table
    # The charts draw the best trials, named by experiment.
    series = _chart_data(page)
    assert {s["label"] for s in series} == {f"experiment {cluster.short} trial {best['id']}"}
    # Bad comparisons say what is wrong.
    one = cluster.page(alice, "/compare", params={"id": cluster.short})
    assert one.status_code == 400 and "tick from 2 to 8 experiments" in one.text
    bad = cluster.page(alice, "/compare", params={"id": [cluster.short, "x"]})
    assert bad.status_code == 400 and "'x' is no experiment id" in html.unescape(bad.text)
    missing = cluster.page(alice, "/compare", params={"id": [cluster.short, 99999]})
    assert missing.status_code == 404


def test_a_trials_page_shows_its_facts_hyperparameters_charts_and_checkpoints(
        cluster: Cluster) -> None:
    alice = cluster.hub.login("alice")
    [trial] = cluster.api(f"/experiments/{cluster.short}/trials")["trials"]
    page = cluster.page(alice, f"/trials/{trial['id']}")
    assert page.status_code == 200, page.text[:500]
    assert f'data-trial-state="{trial["id"]}">COMPLETED<' in page.text
    # Every hyperparameter, at full precision.
    table = page.text.split('id="hparams"', 1)[1].split("</table>", 1)[0]
    for name, value in trial["hparams"].items():
        assert f"<code>{name}</code></td><td class=\"num\">{json.dumps(value)}</td>" in table
    # Its charts: its own series, drawn from its experiment's stream.
    assert {s["trial_id"] for s in _chart_data(page)} == {trial["id"]}
    assert f'data-stream="{SERVICE}/experiments/{cluster.short}/stream"' in page.text
    assert f'data-trial="{trial["id"]}"' in page.text
    checkpoints = re.search(
        r'<script type="application/json" id="checkpoint-data">(.*?)</script>', page.text, re.S)
    assert [c["uuid"] for c in json.loads(checkpoints.group(1))] == [
        c["uuid"] for c in cluster.api(f"/experiments/{cluster.short}/checkpoints")[
            "checkpoints"] if c["trial_id"] == trial["id"]]
    # The experiment's trials table links each trial's page.
    listed = cluster.page(alice, f"/experiments/{cluster.short}").text
    assert f'<a href="{SERVICE}/trials/{trial["id"]}">{trial["id"]}</a>' in listed
    assert cluster.page(alice, "/trials/99999").status_code == 404


def test_a_checkpoint_is_registered_from_its_experiments_page(cluster: Cluster) -> None:
    alice, bob = cluster.hub.login("alice"), cluster.hub.login("bob")
    [checkpoint, *_] = cluster.api(f"/experiments/{cluster.short}/checkpoints")["checkpoints"]
    uuid = checkpoint["uuid"]
    page = cluster.page(bob, f"/experiments/{cluster.short}")
    # Bob may not: the checkpoint is alice's, and no empty model of his is left behind.
    refused = cluster.post(bob, f"/checkpoints/{uuid}/register",
                           {"_xsrf": _xsrf(page), "model": "bobs-model"})
    assert refused.status_code == 403, refused.text[:500]
    assert "only its owner" in html.unescape(refused.text)
    assert cluster.hub.call("GET", "/models/bobs-model", cluster.admin).status_code == 404
    # Alice registers it under a new model, then again as its second version.
    page = cluster.page(alice, f"/experiments/{cluster.short}")
    for version in (1, 2):
        done = cluster.post(alice, f"/checkpoints/{uuid}/register",
                            {"_xsrf": _xsrf(page), "model": "from-the-page"})
        assert done.status_code == 303, done.text[:500]
        assert done.headers["Location"] == (
            f"{SERVICE}/experiments/{cluster.short}?registered=from-the-page&version={version}"
            f"&checkpoint={uuid}#checkpoints")
    versions = cluster.api("/models/from-the-page/versions")["model_versions"]
    assert [(v["version"], v["checkpoint_uuid"]) for v in versions] == [(2, uuid), (1, uuid)]
    shown = cluster.page(alice, done.headers["Location"].split("#")[0].removeprefix(SERVICE))
    notice = shown.text.split('id="registered"', 1)[1].split("</p>", 1)[0]
    assert "version 2 of model <strong>from-the-page</strong>" in notice
    empty = cluster.post(alice, f"/checkpoints/{uuid}/register",
                         {"_xsrf": _xsrf(page), "model": " "})
    assert empty.status_code == 400 and "name the model" in empty.text


def test_destructive_buttons_ask_first_naming_what_stops_and_whose(cluster: Cluster) -> None:
    alice, admin = cluster.hub.login("alice"), cluster.hub.login("admin")
    page = cluster.page(alice, f"/experiments/{cluster.long}").text
    actions = page.split('id="actions"', 1)[1].split("</div>", 1)[0]
    experiment = cluster.api(f"/experiments/{cluster.long}")["experiment"]
    question = html.escape(f'Kill experiment {cluster.long} ("{experiment["name"]}") of '
                           f'{experiment["owner"]}?')
    kill = actions.split('/kill"', 1)[1].split("</form>", 1)[0]
    assert f'data-confirm="{question}' in kill
    pause = actions.split('/pause"', 1)[1].split("</form>", 1)[0]
    assert "data-confirm" not in pause  # pausing checkpoints: nothing is lost
    admin_page = cluster.page(admin, "/admin").text
    assert f'data-confirm="{question}' in admin_page
    agents = admin_page.split('id="agents"', 1)[1].split("</table>", 1)[0]
    assert 'data-confirm="Drain agent local? It takes no new work' in agents
    assert 'data-confirm="Disable agent local now?' in agents
    # Every page carries the script that asks.
    assert "static/dashboard.js" in admin_page and "static/dashboard.js" in page


def test_posts_need_the_xsrf_token_and_the_owner_or_an_admin(cluster: Cluster) -> None:
    alice = cluster.hub.login("alice")
    path = f"/experiments/{cluster.long}/kill"
    page = cluster.page(alice, f"/experiments/{cluster.long}")
    assert f'action="{SERVICE}{path}"' in page.text
    token = _xsrf(page)
    missing = cluster.post(alice, path, {})
    assert missing.status_code == 403 and "_xsrf" in missing.text
    wrong = cluster.post(alice, path, {"_xsrf": token[:-4] + "AAAA"})
    assert wrong.status_code == 403
    # Another user's token is no good either.
    bob = cluster.hub.login("bob")
    bobs_token = _xsrf(cluster.page(bob, "/"))
    assert cluster.post(alice, path, {"_xsrf": bobs_token}).status_code == 403
    assert cluster.state(cluster.long) in ACTIVE

    # Bob may not kill alice's experiment from the page; no kill button is shown to him.
    bobs_view = cluster.page(bob, f"/experiments/{cluster.long}")
    assert f'action="{SERVICE}{path}"' not in bobs_view.text
    refused = cluster.post(bob, path, {"_xsrf": _xsrf(bobs_view)})
    assert refused.status_code == 403
    assert f"only the owner of experiment {cluster.long} or an admin" in refused.text
    assert cluster.state(cluster.long) in ACTIVE
    # But he may pause and activate his own.
    bobs_token = _xsrf(cluster.page(bob, f"/experiments/{cluster.bobs}"))
    paused = cluster.post(bob, f"/experiments/{cluster.bobs}/pause", {"_xsrf": bobs_token})
    assert paused.status_code == 303, paused.text[:500]
    assert cluster.state(cluster.bobs) == "PAUSED"

    def run_state() -> str | None:
        [trial] = cluster.api(f"/experiments/{cluster.bobs}/trials")["trials"]
        return trial["run_state"]  # type: ignore[no-any-return]

    cluster.hub.wait(lambda: run_state() is None, 60)  # its trial checkpointed and exited
    again = cluster.post(bob, f"/experiments/{cluster.bobs}/pause", {"_xsrf": bobs_token})
    assert again.status_code == 409 and "only an ACTIVE experiment can be paused" in again.text
    assert cluster.post(bob, f"/experiments/{cluster.bobs}/activate",
                        {"_xsrf": bobs_token}).status_code == 303
    assert cluster.state(cluster.bobs) in ACTIVE
    cluster.hub.wait(lambda: run_state() == "RUNNING", 60)


def test_the_admin_page_is_for_hub_admins(cluster: Cluster) -> None:
    alice = cluster.hub.login("alice")
    refused = cluster.page(alice, "/admin")
    assert refused.status_code == 403
    assert "this page is for hub admins only" in refused.text
    [agent] = cluster.api("/agents")["agents"]
    drain = cluster.post(alice, f"/admin/agents/{agent['id']}/drain",
                         {"_xsrf": _xsrf(cluster.page(alice, "/"))})
    assert drain.status_code == 403
    assert cluster.api(f"/agents/{agent['id']}")["agent"]["enabled"] is True
    refused = cluster.page(alice, "/admin/stream")
    assert refused.status_code == 403
    assert refused.json()["error"] == "this page is for hub admins only"

    admin = cluster.hub.login("admin")
    assert f'href="{SERVICE}/admin"' in cluster.page(admin, "/").text
    page = cluster.page(admin, "/admin")
    assert page.status_code == 200, page.text[:500]
    assert "Signed in as admin (admin)." in page.text
    # Agents and slots, with what holds them.
    agents = page.text.split('id="agent-table"', 1)[1].split("</table>", 1)[0]
    busy = sum(1 for s in agent["slots"] if s["allocation_id"])
    assert busy == 2
    assert f'data-agent="{agent["id"]}"' in agents
    assert f"{busy} of {len(agent['slots'])} slots in use" in agents
    holders = re.findall(r'<span class="holder"><a href="[^"]+">([^<]+)</a> of (\w+)</span>',
                         agents)
    assert sorted(holders) == sorted([(f"exp-{cluster.long}", "alice"),
                                      (f"exp-{cluster.bobs}", "bob")])
    assert f"/admin/agents/{agent['id']}/drain" in agents
    # The queue, with its controls.
    jobs = page.text.split('id="job-table"', 1)[1].split("</table>", 1)[0]
    for experiment_id in (cluster.long, cluster.bobs):
        assert f'data-job="exp-{experiment_id}"' in jobs
        assert f'action="{SERVICE}/admin/jobs/exp-{experiment_id}"' in jobs
    assert 'name="priority"' in jobs and 'name="weight"' in jobs and 'name="ahead_of"' in jobs
    # Usage in slot-hours: the finished experiment's and the running ones' time so far.
    table = page.text.split('id="usage-table"', 1)[1].split("</table>", 1)[0]
    usage = {name: float(hours) for name, hours in re.findall(
        r'<tr data-user="(\w+)"><td>\w+</td><td class="num" data-hours="([\d.e-]+)">', table)}
    assert set(usage) == {"alice", "bob"}
    # At most both slots since the hub started, in hours.
    ceiling = 2 * (time.time() - cluster.started) / 3600
    assert 0 < usage["bob"] < usage["alice"] < ceiling
    # What runs, with kill buttons.
    running = page.text.split('id="running-experiments"', 1)[1].split("</table>", 1)[0]
    assert f'action="{SERVICE}/experiments/{cluster.long}/kill"' in running
    assert f'action="{SERVICE}/experiments/{cluster.bobs}/kill"' in running
    assert f"/experiments/{cluster.short}/" not in running

    # The page's stream: first every live section, as the page has it.
    with cluster.page(admin, "/admin/stream", stream=True,
                      params={"_xsrf": _xsrf(page)}) as answer:
        assert answer.status_code == 200
        assert answer.headers["Content-Type"].startswith("text/event-stream")
        lines = answer.iter_lines(decode_unicode=True)
        assert next(lines) == "event: sections"
        sections = json.loads(next(lines).removeprefix("data: "))
    assert set(sections) == {"pools", "agents", "jobs"}
    assert f'data-agent="{agent["id"]}"' in sections["agents"]
    assert f"/admin/agents/{agent['id']}/drain" in sections["agents"]
    assert f'data-confirm="Drain agent {agent["id"]}?' in sections["agents"]
    assert f'name="_xsrf" value="{_xsrf(page)}"' in sections["jobs"]
    for experiment_id in (cluster.long, cluster.bobs):
        assert f'action="{SERVICE}/admin/jobs/exp-{experiment_id}"' in sections["jobs"]


def test_admins_reorder_the_queue_and_drain_agents_from_the_page(cluster: Cluster) -> None:
    admin = cluster.hub.login("admin")
    token = _xsrf(cluster.page(admin, "/admin"))
    long_job, bobs_job = f"exp-{cluster.long}", f"exp-{cluster.bobs}"

    def job(job_id: str) -> dict[str, Any]:
        return dict(cluster.api(f"/jobs/{job_id}")["job"])

    done = cluster.post(admin, f"/admin/jobs/{long_job}", {"_xsrf": token, "priority": "10"})
    assert done.status_code == 303 and done.headers["Location"] == f"{SERVICE}/admin#jobs"
    assert job(long_job)["priority"] == 10
    assert cluster.post(admin, f"/admin/jobs/{long_job}",
                        {"_xsrf": token, "weight": "2.5"}).status_code == 303
    assert job(long_job)["weight"] == 2.5
    # Bob's job moves ahead of alice's, taking its priority.
    assert cluster.post(admin, f"/admin/jobs/{bobs_job}",
                        {"_xsrf": token, "ahead_of": long_job}).status_code == 303
    order = [j["job_id"] for j in cluster.api("/jobs")["jobs"]]
    assert order.index(bobs_job) < order.index(long_job)
    assert job(bobs_job)["priority"] == 10
    page = cluster.page(admin, "/admin")
    row = page.text.split(f'data-job="{bobs_job}"', 1)[1].split("</tr>", 1)[0]
    assert 'name="priority" min="1" max="99" value="10"' in row
    # Bad values are refused with a page that says why, and change nothing.
    bad = cluster.post(admin, f"/admin/jobs/{long_job}", {"_xsrf": token, "priority": "x"})
    assert bad.status_code == 400 and "priority: must be a whole number" in bad.text
    out_of_range = cluster.post(admin, f"/admin/jobs/{long_job}",
                                {"_xsrf": token, "priority": "500"})
    assert out_of_range.status_code == 400 and "between 1 and 99" in out_of_range.text
    assert job(long_job)["priority"] == 10
    assert cluster.post(admin, "/admin/jobs/exp-99999",
                        {"_xsrf": token, "priority": "5"}).status_code == 404

    # Draining: no new work, what runs goes on; then enabled again.
    [agent] = cluster.api("/agents")["agents"]
    drained = cluster.post(admin, f"/admin/agents/{agent['id']}/drain", {"_xsrf": token})
    assert drained.status_code == 303 and drained.headers["Location"] == \
        f"{SERVICE}/admin#agents"
    assert cluster.api(f"/agents/{agent['id']}")["agent"]["enabled"] is False
    page = cluster.page(admin, "/admin")
    agents = page.text.split('id="agent-table"', 1)[1].split("</table>", 1)[0]
    assert "disabled" in agents and f"/admin/agents/{agent['id']}/enable" in agents
    assert cluster.state(cluster.long) in ACTIVE
    time.sleep(1)
    assert {j["job_id"]: j["state"] for j in cluster.api("/jobs")["jobs"]}[long_job] == \
        "SCHEDULED"
    assert cluster.post(admin, f"/admin/agents/{agent['id']}/enable",
                        {"_xsrf": token}).status_code == 303
    assert cluster.api(f"/agents/{agent['id']}")["agent"]["enabled"] is True


def test_tasks_are_killed_from_the_pages_by_their_owner_or_an_admin(cluster: Cluster) -> None:
    # Both slots are taken, so alice's command waits in the queue.
    made = cluster.hub.call("POST", "/commands", cluster.hub.token("alice"), json={
        "config": yaml.safe_dump({"entrypoint": ["sleep", "600"],
                                  "description": "alice's <wait>"})})
    assert made.status_code == 201, made.text
    command = made.json()["command"]
    bob, admin = cluster.hub.login("bob"), cluster.hub.login("admin")
    home = cluster.page(bob, "/")
    tasks = home.text.split('id="tasks"', 1)[1].split("</table>", 1)[0]
    assert html.escape("alice's <wait>") in tasks and "QUEUED" in tasks
    kill = f"/tasks/{command['id']}/kill"
    assert f'action="{SERVICE}{kill}"' not in tasks  # not bob's to kill
    refused = cluster.post(bob, kill, {"_xsrf": _xsrf(home)})
    assert refused.status_code == 403
    assert f"only the owner of command {command['id']} or an admin" in refused.text
    assert cluster.api(f"/commands/{command['id']}")["command"]["state"] == "QUEUED"

    page = cluster.page(admin, "/admin")
    table = page.text.split('id="task-table"', 1)[1].split("</table>", 1)[0]
    assert f'action="{SERVICE}{kill}"' in table
    killed = cluster.post(admin, kill, {"_xsrf": _xsrf(page), "next": f"{SERVICE}/admin#tasks"})
    assert killed.status_code == 303 and killed.headers["Location"] == f"{SERVICE}/admin#tasks"
    cluster.hub.wait(lambda: cluster.api(f"/commands/{command['id']}")["command"]["state"]
                     == "TERMINATED", 30)
    assert "No notebook, shell, TensorBoard or command is running." in \
        cluster.page(admin, "/admin").text


def test_a_browser_signs_in_and_sees_the_queue_a_chart_and_logs(
        cluster: Cluster, tmp_path: Path) -> None:
    node = browser_node()
    shots = tmp_path / "screenshots"
    made: list[int] = []

    def create_while_watched() -> None:
        # Once the browser shows the dashboard, an experiment is created: its row must come
        # in at the top without a reload.
        deadline = time.monotonic() + 120
        while not (shots / "dashboard.png").is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        made.append(_create(cluster.hub, cluster.admin, steps_config(
            "made-while-watched", length=4, sleep=0.01, report_every=2)))

    [agent] = cluster.api("/agents")["agents"]

    def drain_while_watched() -> None:
        # Once the browser shows the admin page, the agent is drained through the REST API,
        # and enabled again once the page showed that: it must show both without a reload.
        for shot, action, body in (("admin.png", "disable", {"drain": True}),
                                   ("admin-drained.png", "enable", None)):
            deadline = time.monotonic() + 180
            while not (shots / shot).is_file() and time.monotonic() < deadline:
                time.sleep(0.1)
            if (shots / shot).is_file():
                cluster.api(f"/agents/{agent['id']}/{action}", "POST", json=body)

    creator = threading.Thread(target=create_while_watched, daemon=True)
    creator.start()
    drainer = threading.Thread(target=drain_while_watched, daemon=True)
    drainer.start()
    try:
        done = subprocess.run(
            [node, str(BROWSER_DIR / "admin_page.mjs"), cluster.hub.url, "admin",
             cluster.hub.password, str(shots), str(cluster.short)],
            capture_output=True, text=True, timeout=240, cwd=BROWSER_DIR)
    finally:
        artifacts = os.environ.get("DET_HUB_ARTIFACTS")
        if artifacts and shots.is_dir():
            shutil.copytree(shots, REPO / "test-artifacts" / "dashboard", dirs_exist_ok=True)
        creator.join(timeout=30)
        drainer.join(timeout=30)
        # Whatever the browser got to, the agent takes work again.
        cluster.api(f"/agents/{agent['id']}/enable", "POST")
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    for name in ("dashboard.png", "admin.png", "admin-drained.png", "experiment.png", "logs.png"):
        shot = shots / name
        assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    report = json.loads((shots / "report.json").read_text())
    assert report["experiments_listed"] == 3
    # The experiment made while the dashboard was open came in on top, as it is.
    assert report["arrived"]["id"] == made[0]
    assert report["arrived"]["name"] == "made-while-watched" and report["arrived"]["state"]
    assert report["job"] in (f"exp-{cluster.long}", f"exp-{cluster.bobs}")
    # The agent drained and enabled through the REST API showed as such on the page, with the
    # buttons of its state, without a reload; the updated row's Drain asked first.
    assert report["agent_live"] == {
        "agent": agent["id"],
        "disabled": {"load": "first", "buttons": ["Enable"]},
        "enabled": {"load": "first", "buttons": ["Drain", "Disable now"]},
    }
    assert report["drain_question"].startswith(f"Drain agent {agent['id']}? It takes no new work")
    # The priority set through the page's form, in the browser, is the job's.
    assert report["priority"] == 7
    assert cluster.api(f"/jobs/{report['job']}")["job"]["priority"] == 7
    assert any(t["points"] > 0 for t in report["traces"])
    # A trial has one colour on every chart (its training and validation traces alike).
    colours: dict[str, set[str]] = {}
    for trace in report["colours"]:
        colours.setdefault(trace["name"].split(" ")[1], set()).add(trace["colour"])
    assert colours and all(len(c) == 1 for c in colours.values()), report["colours"]
    assert len(report["colours"]) > len(colours)  # more than one chart per trial
    assert report["log_scale"] is True
    # The running experiment's page drew more points and more batches as the trial reported.
    assert report["live"]["points"][1] > report["live"]["points"][0]
    # Kill asked before it posted, naming what stops and whose it is; dismissed, the
    # experiment runs on.
    eid = int(report["job"].removeprefix("exp-"))
    experiment = cluster.api(f"/experiments/{eid}")["experiment"]
    assert report["kill_question"].startswith(
        f'Kill experiment {eid} ("{experiment["name"]}") of {experiment["owner"]}?')
    assert "without a checkpoint" in report["kill_question"]
    assert "CANCELED" not in experiment["state"]
