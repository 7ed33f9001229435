"""``det-hub model``, ``checkpoint delete`` and ``experiment set gc-policy`` against a real
master whose trials wrote real checkpoints; confirmation answers come on standard input."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_result import Result, table_rows

from det_hub.cli.main import main
from det_hub.testing import MasterProcess

pytestmark = pytest.mark.slow

Cli = Callable[..., Result]


@pytest.fixture(scope="module")
def master(module_master: MasterProcess) -> MasterProcess:
    return module_master


@pytest.fixture
def cli(master: MasterProcess, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> Cli:
    """Runs ``det-hub -m <master> --token <admin> ARGS`` in-process; ``stdin`` is what the
    user types (nothing: standard input is closed)."""

    def run(*argv: str, stdin: str = "") -> Result:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = main(["-m", master.url, f"--token={master.token}", *argv])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture
def kept_steps_experiment(master: MasterProcess,
                          kept_checkpoints: Callable[..., int]) -> Callable[[], dict[int, str]]:
    """Runs a completed experiment that kept its checkpoints at 2, 4, 6 and 7 batches;
    answers their uuids by steps (and its id as ``"id"``)."""

    def run() -> dict[int, str]:
        eid = kept_checkpoints(master, "cli")
        ckpts = master.get(f"/experiments/{eid}/checkpoints")["checkpoints"]
        return {"id": eid, **{c["steps_completed"]: c["uuid"] for c in ckpts}}  # type: ignore[dict-item]

    return run


def test_model_verbs(kept_steps_experiment: Callable[[], dict[int, str]], cli: Cli, master: MasterProcess) -> None:
    ckpts = kept_steps_experiment()
    made = cli("model", "create", "cli-model", "--description", "steps", "--label", "a",
               "--label", "b")
    assert made.code == 0 and made.out.startswith("Created model cli-model (id ")
    taken = cli("model", "create", "cli-model")
    assert taken.code == 1 and taken.err == "Error: a model named 'cli-model' already exists\n"

    registered = cli("model", "register-version", "cli-model", ckpts[4], "--version-name",
                     "four")
    assert registered.code == 0 and registered.out == (
        f"Registered checkpoint {ckpts[4]} as cli-model version 1\n")
    as_json = cli("model", "register-version", "cli-model", ckpts[7], "--json")
    assert json.loads(as_json.out)["model_version"]["version"] == 2

    listed = table_rows(cli("model", "list").out)
    assert listed[0] == ["Name", "Owner", "Versions", "Labels", "Description", "Archived",
                         "Updated"]
    assert listed[1][:6] == ["cli-model", "admin", "2", "a, b", "steps", "no"]
    versions = table_rows(cli("model", "list-versions", "cli-model").out)
    assert [r[:2] for r in versions[1:]] == [["2", ckpts[7]], ["1", ckpts[4]]]
    assert versions[2][5:7] == ["COMPLETED", "four"]
    described = cli("model", "describe", "cli-model")
    assert "Description:  steps" in described.out and "Versions:     2" in described.out
    assert ckpts[4] in described.out
    data = json.loads(cli("model", "describe", "cli-model", "--json").out)
    assert data["model"]["name"] == "cli-model" and len(data["model_versions"]) == 2

    assert cli("model", "archive", "cli-model").out == "Model cli-model: archived\n"
    assert "cli-model" not in cli("model", "list").out
    assert "cli-model" in cli("model", "list", "--archived").out
    refused = cli("model", "register-version", "cli-model", ckpts[6])
    assert refused.code == 1 and "is archived" in refused.err
    assert cli("model", "unarchive", "cli-model").out == "Model cli-model: not archived\n"

    unknown = cli("model", "describe", "nope")
    assert unknown.code == 1 and unknown.err == "Error: model 'nope' not found\n"

    kept = cli("model", "delete-version", "cli-model", "1", stdin="n\n")
    assert kept.code == 1 and "Nothing deleted." in kept.err
    assert cli("model", "delete-version", "cli-model", "1", "--yes").code == 0
    declined = cli("model", "delete", "cli-model", stdin="no\n")
    assert declined.code == 1 and "Delete model cli-model and its 1 version(s)" in declined.err
    assert master.get("/models/cli-model")["model"]["num_versions"] == 1
    deleted = cli("model", "delete", "cli-model", stdin="y\n")
    assert deleted.code == 0 and deleted.out == "Deleted model cli-model\n"
    assert master.api("GET", "/models/cli-model").status_code == 404


def test_checkpoint_delete_asks_and_reports_each_refusal(kept_steps_experiment: Callable[[], dict[int, str]], cli: Cli,
                                                         master: MasterProcess) -> None:
    ckpts = kept_steps_experiment()
    files: Path = master.data_dir / "checkpoints" / "admin"
    cli("model", "create", "cli-keeper")
    cli("model", "register-version", "cli-keeper", ckpts[2])

    no_answer = cli("checkpoint", "delete", ckpts[4])
    assert no_answer.code == 1 and "pass --yes" in no_answer.err
    declined = cli("checkpoint", "delete", ckpts[4], stdin="n\n")
    assert declined.code == 1 and f"Delete the files of 1 checkpoint(s): {ckpts[4]}?" in (
        declined.err)
    assert (files / ckpts[4]).is_dir()

    both = cli("checkpoint", "delete", ckpts[2], ckpts[4], stdin="y\n")
    assert both.code == 1
    assert both.out == f"Deleted checkpoint {ckpts[4]}\n"
    assert (f"Error: checkpoint {ckpts[2]} is registered as model 'cli-keeper' version 1; "
            "delete that version first") in both.err
    assert not (files / ckpts[4]).exists() and (files / ckpts[2]).is_dir()
    assert cli("checkpoint", "delete", ckpts[6], "--yes").out == (
        f"Deleted checkpoint {ckpts[6]}\n")
    assert master.get(f"/checkpoints/{ckpts[6]}")["checkpoint"]["state"] == "DELETED"


def test_checkpoint_download_and_describe(kept_steps_experiment: Callable[[], dict[int, str]], cli: Cli, master: MasterProcess,
                                          tmp_path: Path) -> None:
    ckpts = kept_steps_experiment()
    got = cli("checkpoint", "download", ckpts[7], "-o", str(tmp_path / "seven"))
    assert got.code == 0, got.err
    assert got.out.startswith(f"Checkpoint {ckpts[7]} (") and got.out.endswith(
        f"is in {tmp_path / 'seven'}\n")
    assert json.loads((tmp_path / "seven" / "state.json").read_text()) == {"step": 7}
    described = cli("checkpoint", "describe", ckpts[7])
    assert f"shared_fs {master.data_dir / 'checkpoints'}" in described.out
    missing = cli("checkpoint", "download", "00000000-0000-4000-8000-000000000000")
    assert missing.code == 1 and "not found" in missing.err


def test_set_gc_policy_shows_what_goes_and_asks(kept_steps_experiment: Callable[[], dict[int, str]], cli: Cli, master: MasterProcess) -> None:
    ckpts = kept_steps_experiment()
    eid = ckpts["id"]
    cli("model", "create", "cli-gc")
    cli("model", "register-version", "cli-gc", ckpts[2])
    policy = ("--save-trial-best", "0", "--save-trial-latest", "1")

    declined = cli("experiment", "set", "gc-policy", str(eid), *policy, stdin="n\n")
    assert declined.code == 1 and "Nothing changed." in declined.err
    lines = declined.out.splitlines()
    assert lines[0] == (f"With save_experiment_best=0, save_trial_best=0, save_trial_latest=1,"
                        f" GC would delete 2 checkpoint(s) of experiment {eid}:")
    table = table_rows("\n".join(lines[1:-1]))
    assert table[0] == ["UUID", "Trial", "Steps", "Size"]
    assert sorted((r[0], r[2]) for r in table[1:]) == sorted([(ckpts[4], "4"), (ckpts[6], "6")])
    assert lines[-1] == f"Kept because a model version names them: {ckpts[2]}"
    assert {c["state"] for c in master.get(f"/experiments/{eid}/checkpoints")[
        "checkpoints"]} == {"COMPLETED"}

    done = cli("experiment", "set", "gc-policy", str(eid), *policy, "--yes")
    assert done.code == 0 and done.out.splitlines()[-1] == (
        f"Experiment {eid}: checkpoint GC policy set; deleted 2 checkpoint(s)")
    states = {c["steps_completed"]: c["state"]
              for c in master.get(f"/experiments/{eid}/checkpoints")["checkpoints"]}
    assert states == {2: "COMPLETED", 4: "DELETED", 6: "DELETED", 7: "COMPLETED"}
    storage = master.experiment(eid)["config"]["checkpoint_storage"]
    assert (storage["save_trial_best"], storage["save_trial_latest"]) == (0, 1)

    nothing = cli("experiment", "set", "gc-policy", str(eid))
    assert nothing.code == 0 and "GC would delete no checkpoint" in nothing.out
    bad = cli("experiment", "set", "gc-policy", str(eid), "--save-trial-best", "-1")
    assert bad.code == 1 and "save_trial_best: must be an integer >= 0" in bad.err


def test_help_lists_the_model_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "--help"]) == 0
    out = capsys.readouterr().out
    for verb in ("create", "list", "describe", "register-version", "list-versions", "delete",
                 "archive", "unarchive"):
        assert verb in out
    assert main(["checkpoint", "--help"]) == 0
    assert "delete" in capsys.readouterr().out
