"""A new user's home gets det_hub's quickstart notebook and examples once."""

from __future__ import annotations

import logging
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
