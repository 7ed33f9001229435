"""A new user's home gets det_hub's quickstart notebook and examples once."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from det_hub.hub.first_run import MARKER, QUICKSTART, examples_source, pre_spawn_hook, seed_home


def examples(tmp_path: Path) -> Path:
    source = tmp_path / "examples"
    (source / "core_api").mkdir(parents=True)
    (source / QUICKSTART).write_text("{}")
    (source / "core_api" / "const.yaml").write_text("entrypoint: python3 train.py\n")
    (source / "core_api" / "__pycache__").mkdir()
    (source / "core_api" / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"x")
    return source


def test_a_new_home_gets_the_quickstart_on_top_and_the_examples_beside_it(
        tmp_path: Path) -> None:
    home = tmp_path / "users" / "carol"
    copied = seed_home(home, examples(tmp_path))
    assert sorted(p.relative_to(home).as_posix() for p in copied) == [
        "examples/core_api/const.yaml", QUICKSTART]
    assert (home / MARKER).is_file()


def test_what_the_user_changed_or_removed_stays_as_they_left_it(tmp_path: Path) -> None:
    source = examples(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    (home / QUICKSTART).write_text("mine")
    seed_home(home, source)
    assert (home / QUICKSTART).read_text() == "mine"  # never replaced
    (home / "examples" / "core_api" / "const.yaml").unlink()
    assert seed_home(home, source) == []  # once per home
    assert not (home / "examples" / "core_api" / "const.yaml").exists()
    (home / MARKER).unlink()
    assert [p.name for p in seed_home(home, source)] == ["const.yaml"]


def test_the_hook_seeds_the_spawners_home_from_the_examples_det_hub_ships(
        tmp_path: Path) -> None:
    source = examples_source()
    assert source is not None and (source / QUICKSTART).is_file()
    home = tmp_path / "dave"
    spawner = SimpleNamespace(home_dir=str(home), user=SimpleNamespace(name="dave"),
                              log=logging.getLogger("test"))
    pre_spawn_hook(spawner)
    assert (home / QUICKSTART).read_bytes() == (source / QUICKSTART).read_bytes()
    assert (home / "examples" / "mnist_pytorch" / "const.yaml").is_file()


def test_a_container_seeds_its_notebook_directory_then_becomes_the_server(
        tmp_path: Path) -> None:
    """What DetSpawner's containers run first: the real module, as its own process."""
    home = tmp_path / "notebooks"
    home.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "det_hub.hub.first_run", "--", sys.executable, "-c",
         "import os; print(sorted(os.listdir('.')))"],
        cwd=home, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    # The command ran after the copy, in the same directory, and said nothing of it on stdout.
    assert done.stdout.strip() == str(sorted([MARKER, QUICKSTART, "examples"]))
    assert "det_hub: copied" in done.stderr and str(home) in done.stderr
    # Once: the next start copies nothing and says nothing.
    again = subprocess.run(
        [sys.executable, "-m", "det_hub.hub.first_run", "--into", str(home), "--", "true"],
        capture_output=True, text=True, timeout=60, check=False)
    assert (again.returncode, again.stderr) == (0, "")


def test_a_home_that_cannot_be_seeded_says_so_and_the_server_starts_all_the_same(
        tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    done = subprocess.run(
        [sys.executable, "-m", "det_hub.hub.first_run", "--into", str(blocked / "home"), "--",
         sys.executable, "-c", "print('server')"],
        capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, "server\n")
    assert f"could not copy the examples into {blocked / 'home'}" in done.stderr


async def test_detspawner_starts_the_server_through_the_seeding() -> None:
    from det_hub.spawner import DetSpawner

    spawner = DetSpawner(cmd=["/opt/venv/bin/python3.11", "-m", "jupyterhub.singleuser"])
    command = await spawner.get_command()
    assert command[:4] == ["/opt/venv/bin/python3.11", "-m", "det_hub.hub.first_run", "--"]
    assert command[4:6] == ["/opt/venv/bin/python3.11", "-m"]
    spawner = DetSpawner(cmd=["start-singleuser.sh"], notebook_dir="~/work")
    assert (await spawner.get_command())[:6] == [
        "python3", "-m", "det_hub.hub.first_run", "--into", "~/work", "--"]
    spawner = DetSpawner(cmd=["start-singleuser.sh"], seed_examples=False)
    assert (await spawner.get_command())[0] == "start-singleuser.sh"
