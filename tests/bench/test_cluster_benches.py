"""bench/first_metric.py and bench/cluster_utilisation.py, run small through their ``main``
on the local agent and on the test Docker engines: the figures they print are read back and
checked to be figures at all (times positive and in order, shares within 0..100 %, every trial
counted). Nothing here asserts on speed."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from traitlets.config import Config

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import cluster_utilisation as cu  # noqa: E402
import first_metric  # noqa: E402
from _setup import DOCKER_HOSTS, DOCKER_IMAGE  # noqa: E402

from det_hub.testing import required_env, write_docker_config  # noqa: E402

pytestmark = pytest.mark.slow

FIGURES = re.compile(r"^  (?P<label>[^:]+):\s+median (?P<median>[\d.]+) s, "
                     r"best (?P<best>[\d.]+) s, worst (?P<worst>[\d.]+) s$", re.MULTILINE)


@pytest.fixture
def engines() -> None:
    required_env(DOCKER_HOSTS[0], DOCKER_IMAGE)


def test_the_docker_config_names_each_engine_as_an_agent(tmp_path: Path) -> None:
    path = write_docker_config(tmp_path / "det_hub_config.py",
                               ["unix:///a.sock", "unix:///b.sock"], "det-hub-test:bookworm",
                               ["bench-a", "bench-b"])
    c = Config()
    exec(path.read_text(), {"c": c})
    assert c.MasterApp.local_agent is False
    assert c.MasterApp.docker_agents == [
        {"agent_id": "bench-a", "docker_host": "unix:///a.sock"},
        {"agent_id": "bench-b", "docker_host": "unix:///b.sock"}]
    assert c.DockerAgent.default_image == {"cpu": "det-hub-test:bookworm",
                                           "cuda": "det-hub-test:bookworm"}
    assert c.DockerAgent.python == sys.executable
    assert c.DockerAgent.pull_images is False
    assert str(BENCH.parent / "det_hub") in {m["host_path"] for m in c.DockerAgent.mounts}


def test_utilisation_weighs_each_sample_by_the_time_to_the_next() -> None:
    samples = [cu.Sample(0.0, 4, 4, True), cu.Sample(1.0, 4, 2, True),
               cu.Sample(3.0, 4, 1, False), cu.Sample(4.0, 4, 0, False)]
    u = cu.utilisation(samples)
    # Pending: 4 busy for 1 s, 2 busy for 2 s, of 4 slots for 3 s.
    assert u.pending == pytest.approx(8 / 12)
    assert u.overall == pytest.approx(9 / 16)
    assert u.pending_slot_seconds == pytest.approx(12.0)
    assert (u.samples, u.pending_samples) == (4, 2)
    assert cu.utilisation([]).pending is None
    assert cu.utilisation(samples[2:]).pending is None


def check_first_metric(out: str, agent: str, runs: int) -> None:
    title = "container start to first metric" if agent == "docker" else "first metric"
    assert out.startswith(f"{title}, {first_metric.AGENTS[agent]}, SQLite store, "
                          f"{runs} experiments:"), out
    rows = {m["label"].split(" (")[0]: m for m in FIGURES.finditer(out)}
    assert set(rows) == {"create to RUNNING", "create to first metric",
                         "RUNNING to first metric"}, out
    for m in rows.values():
        best, median, worst = float(m["best"]), float(m["median"]), float(m["worst"])
        assert 0 < best <= median <= worst, out
    # Each run is RUNNING before its first metric, so the medians are in that order too.
    assert float(rows["create to RUNNING"]["median"]) <= \
        float(rows["create to first metric"]["median"]), out
    assert "not seen" not in out and "no start was stored" not in out


def test_first_metric_on_the_local_agent(capsys: pytest.CaptureFixture[str]) -> None:
    first_metric.main(["--runs", "2", "--agent", "local"])
    check_first_metric(capsys.readouterr().out, "local", 2)


def test_container_start_to_first_metric(engines: None,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    first_metric.main(["--runs", "2", "--agent", "docker"])
    check_first_metric(capsys.readouterr().out, "docker", 2)


def check_utilisation(out: str, trials: int) -> None:
    def number(pattern: str) -> float:
        m = re.search(pattern, out)
        assert m, f"{pattern!r} not in:\n{out}"
        return float(m[1])

    slots = number(r": (\d+) slots, ")
    assert slots >= 1
    assert number(r"max_concurrent_trials (\d+),") > slots  # so trials wait
    pending = number(r"busy while work was pending:\s+([\d.]+) % of ")
    overall = number(r"busy overall:\s+([\d.]+) %")
    assert 0 <= pending <= 100 and 0 <= overall <= 100, out
    assert number(r"% of ([\d.]+) slot-seconds") > 0
    assert "(aim: 95 % or more)" in out
    assert number(r"wall time:\s+([\d.]+) s") > 0
    assert re.search(rf"trials:\s+{trials} \({trials} completed, \d+ batches\)", out), out
    samples = number(r"samples:\s+(\d+) ")
    assert 0 < number(r"\((\d+) with work pending\)") <= samples
    assert number(r"every 50 ms, (\d+) failed") == 0


def test_cluster_utilisation_on_the_local_agent(capsys: pytest.CaptureFixture[str]) -> None:
    cu.main(["--agent", "local", "--trials", "4", "--sleep", "0.05"])
    out = capsys.readouterr().out
    assert "on the local agent" in out
    check_utilisation(out, 4)


def test_cluster_utilisation_on_the_docker_cluster(engines: None,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    cu.main(["--agent", "docker", "--trials", "6", "--sleep", "0.05"])
    out = capsys.readouterr().out
    assert "on the docker cluster" in out
    check_utilisation(out, 6)
