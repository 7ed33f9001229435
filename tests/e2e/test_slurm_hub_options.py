"""A hub server's Slurm options from the spawn page, through a real JupyterHub, master and the
private test Slurm of ``scripts/test-services.sh start``: the page offers the fields the admin
set up, refuses a time limit over the admin's limit and a memory size Slurm does not read with
the message on the page (nothing starts), refuses Slurm options for a server that is no Slurm
job, and a server started with a time limit, memory and partition is a Slurm job that has
them. Without that Slurm the test is skipped, except in CI, where it fails.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
import requests

from .test_slurm import POOL, job_state, slurm_command, slurm_hub, stop_hub

pytestmark = pytest.mark.slow

#: What the admin lets users choose, on top of the Slurm hub of tests/e2e/test_slurm.py.
OPTIONS = """
c.DetSpawner.slurm_form_fields = ["time", "mem", "partition"]
c.DetSpawner.slurm_time_max = "2:00:00"
c.DetSpawner.slurm_mem_default = "200M"
c.DetSpawner.slurm_mem_max = "1G"
c.DetSpawner.slurm_partitions = [{partition!r}]
c.DetSpawner.profiles = [
    {{"display_name": "On Slurm", "resource_pool": {pool!r}}},
    {{"display_name": "On the master's host", "resource_pool": "default",
      "server_mode": "task"}},
]
"""


def progress(hub: Any, token: str) -> list[dict[str, Any]]:
    """The spawn's progress events, to the last (ready or failed)."""
    with requests.get(f"{hub.url}/hub/api/users/frank/server/progress", stream=True,
                      timeout=180, headers={"Authorization": f"token {token}"}) as events:
        return [json.loads(line[len("data:"):]) for line in
                events.iter_lines(decode_unicode=True) if line and line.startswith("data:")]


def test_a_hub_servers_slurm_job_gets_the_options_chosen_on_the_spawn_page(
        slurm: dict[str, str], slurm_shared: Path, tmp_path: Path) -> None:
    hub = slurm_hub(tmp_path, slurm, slurm_shared, local_pool=True,
                    hub_config=OPTIONS.format(pool=POOL, partition=slurm["partition"]))
    data = hub.data_dir
    try:
        frank, admin = hub.token("frank"), hub.token("admin")
        browser = hub.login("frank")
        xsrf = browser.cookies.get("_xsrf", path="/hub/")
        spawn = f"{hub.url}/hub/spawn/frank"

        page = browser.get(spawn, timeout=30)
        assert page.status_code == 200, page.text[:500]
        assert re.findall(r'name="(profile|slurm_\w+)"', page.text) == [
            "profile", "slurm_time", "slurm_mem", "slurm_partition"], page.text[:2000]
        assert "at most 2:00:00" in page.text and "at most 1G" in page.text

        # Wrong choices: the spawn page again, saying what is wrong; nothing starts.
        refused = browser.post(spawn, timeout=60, data={
            "_xsrf": xsrf, "profile": "0", "slurm_time": "3:00:00", "slurm_mem": "4GB",
            "slurm_partition": ""})
        shown = html.unescape(refused.text)
        assert refused.status_code == 200 and (
            "Time limit: '3:00:00' is more than the 2:00:00 this hub allows; Memory: '4GB' "
            "is not a memory size: give a size such as 512M or 4G") in shown, shown[-3000:]
        assert 'name="slurm_time"' in refused.text, "the form is shown again"
        assert hub.call("GET", "/hub_servers", admin).json()["hub_servers"] == []

        # Slurm options for a server that is no Slurm job: its start fails, saying so.
        pools = {p["name"]: p["type"] for p in
                 hub.call("GET", "/resource_pools", admin).json()["resource_pools"]}
        assert "slurm" not in pools["default"] and "slurm" in pools[POOL], pools
        browser.post(spawn, timeout=60, data={"_xsrf": xsrf, "profile": "1",
                                              "slurm_time": "30", "slurm_mem": "",
                                              "slurm_partition": ""})
        news = progress(hub, frank)
        assert news[-1].get("failed"), news
        assert "the Slurm options chosen (time 30) are for servers that run as Slurm jobs, " \
               "and this server runs in resource pool 'default', which is not a Slurm " \
               "partition" in news[-1]["message"], news
        assert hub.call("GET", "/hub_servers", admin).json()["hub_servers"] == []

        # Good choices: the server's Slurm job has them.
        started = browser.post(spawn, timeout=60, data={
            "_xsrf": xsrf, "profile": "0", "slurm_time": "45", "slurm_mem": "300m",
            "slurm_partition": slurm["partition"]})
        assert started.status_code == 200, started.text[:500]
        news = progress(hub, frank)
        assert news[-1].get("ready"), news
        [server] = hub.call("GET", "/hub_servers", admin).json()["hub_servers"]
        assert server["state"] == "RUNNING", server
        assert server["config"]["slurm"]["sbatch_args"] == [
            "--time=45", "--mem=300M", f"--partition={slurm['partition']}"]
        [job] = {str(json.loads(r.read_text())["job_id"])
                 for r in (data / "slurm" / POOL).glob("*.json")}
        fields = dict(word.split("=", 1) for word in slurm_command(
            slurm, "scontrol", "--oneliner", "show", "job", job).split() if "=" in word)
        assert (fields["JobState"], fields["TimeLimit"], fields["MinMemoryNode"],
                fields["Partition"], fields["UserId"].split("(")[0]) == (
            "RUNNING", "00:45:00", "300M", slurm["partition"], "nobody"), fields
        status = requests.get(f"{hub.url}/user/frank/api/status", timeout=30,
                              headers={"Authorization": f"token {frank}"})
        assert status.status_code == 200, status.text

        stopped = requests.delete(f"{hub.url}/hub/api/users/frank/server", timeout=90,
                                  headers={"Authorization": f"token {frank}"})
        assert stopped.status_code in (202, 204), stopped.text
        hub.wait(lambda: hub.call("GET", "/hub_servers", admin).json()["hub_servers"][0][
            "state"] == "TERMINATED", 90)
        assert job_state(slurm, job) in ("COMPLETED", "CANCELLED", "FAILED")
    finally:
        stop_hub(hub, slurm)
