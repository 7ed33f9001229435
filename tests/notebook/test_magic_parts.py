"""The magics' parts that need no master: the cell's entrypoint and config, arguments, errors."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from det_hub.client import MasterError, pack_context
from det_hub.config import ConfigError, Problem, parse_experiment_config
from det_hub.notebook import _cell
from det_hub.notebook._args import MagicArgumentError
from det_hub.notebook._errors import error_message

from .conftest import closed_port_url, run_magic


@pytest.mark.parametrize(("source", "expected"), [
    ("import det_hub.core as core\nprint(1)\n", "python3 det_hub_cell.py"),
    ("from det_hub import pytorch\nclass T(pytorch.PyTorchTrial):\n    pass\n",
     "det_hub_cell:T"),
    ("from det_hub.pytorch import PyTorchTrial\nclass Base(PyTorchTrial): ...\n"
     "class Mine(Base): ...\nclass Other: ...\n", "det_hub_cell:Mine"),
    ("import det_hub\nclass T(det_hub.pytorch.PyTorchTrial): ...\n", "det_hub_cell:T"),
])
def test_the_entrypoint_is_the_trial_class_or_the_script(source: str, expected: str) -> None:
    assert _cell.entrypoint_for(source) == expected


def test_a_cell_with_two_unrelated_trials_or_bad_syntax_is_refused() -> None:
    two = "class A(PyTorchTrial): ...\nclass B(PyTorchTrial): ...\n"
    with pytest.raises(MagicArgumentError, match=r"several PyTorchTrial subclasses \(A, B\)"):
        _cell.entrypoint_for(two)
    with pytest.raises(MagicArgumentError, match="not valid Python: line 1"):
        _cell.entrypoint_for("def (:\n")


def test_the_default_cell_config_is_a_valid_single_trial() -> None:
    config = _cell.cell_config(None, "print(1)", hparams={"lr": 0.1}, metric=None,
                               max_length=None)
    parsed = parse_experiment_config(config)
    assert parsed.searcher.name == "single" and parsed.searcher.metric == "loss"
    assert parsed.to_dict()["searcher"]["max_length"] == {"batches": 100}
    assert parsed.entrypoint == "python3 det_hub_cell.py" and parsed.max_restarts == 0
    assert parsed.to_dict()["hyperparameters"]["lr"] == {"type": "const", "val": 0.1}


def test_a_given_config_keeps_its_settings_under_the_options() -> None:
    base: dict[str, Any] = {"name": "mine", "entrypoint": "python3 other.py", "max_restarts": 2,
            "hyperparameters": {"lr": 0.5, "layers": 2},
            "searcher": {"name": "single", "metric": "acc", "smaller_is_better": False,
                         "max_length": {"batches": 7}}}
    config = _cell.cell_config(base, "print(1)", hparams={"lr": 0.01}, metric=None,
                               max_length=30)
    assert config["entrypoint"] == "python3 det_hub_cell.py"
    assert config["hyperparameters"] == {"lr": 0.01, "layers": 2}
    assert config["searcher"] == {"name": "single", "metric": "acc", "smaller_is_better": False,
                                  "max_length": {"batches": 30}}
    assert config["max_restarts"] == 2 and base["searcher"]["max_length"] == {"batches": 7}


def test_hparams_are_read_as_yaml() -> None:
    assert _cell.parse_hparams(["lr=1e-3", "layers=[8, 8]", "act=relu", "on=true"]) == {
        "lr": 0.001, "layers": [8, 8], "act": "relu", "on": True}
    with pytest.raises(MagicArgumentError, match="'lr': must be NAME=VALUE"):
        _cell.parse_hparams(["lr"])


def test_the_cell_context_holds_what_pack_context_sends_plus_the_cell(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "helper.py").write_text("X = 1\n")
    (source / "data.bin").write_bytes(b"\0" * 10)
    (source / ".detignore").write_text("*.bin\n")
    (source / "__pycache__").mkdir()
    (source / "__pycache__" / "junk.pyc").write_bytes(b"junk")
    target = _cell.write_context(source, "print('cell')\n", tmp_path / "ctx")
    files = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
    assert files == ["det_hub_cell.py", "pkg/helper.py"]  # the .detignore stays behind
    assert (target / "det_hub_cell.py").read_text() == "print('cell')\n"
    with tarfile.open(fileobj=__import__("io").BytesIO(pack_context(target))) as tar:
        assert "det_hub_cell.py" in tar.getnames()


def test_error_messages_put_details_under_one_first_line() -> None:
    error = MasterError(400, "invalid experiment config",
                        [{"path": "searcher.metric", "message": "required"}])
    assert error_message(error) == "Error: invalid experiment config\n  searcher.metric: required"
    assert error_message(ConfigError([Problem("a.b", "must be >= 1"), Problem("c", "x")])) == \
        "Error: bad config: a.b: must be >= 1\n  c: x"


@pytest.mark.parametrize(("line", "message"), [
    ("", "%det_experiment: the following arguments are required: VERB"),
    ("frobnicate 3", "%det_experiment: argument VERB: invalid choice: 'frobnicate'"),
    ("describe seven", "%det_experiment describe: argument ID: invalid int value: 'seven'"),
    ("create", "%det_experiment create: the following arguments are required: CONFIG"),
    ("logs 'unclosed", "%det_experiment: cannot read the arguments: No closing quotation"),
])
def test_bad_arguments_give_one_line_and_no_traceback(
        shell: InteractiveShell, line: str, message: str) -> None:
    ran = run_magic(shell, line)
    assert ran.error is None and ran.value is None
    assert ran.stderr.startswith(f"Error: {message}")
    assert ran.stderr.count("\n") == 1 and "Traceback" not in ran.stderr + ran.stdout


def test_help_prints_the_verbs(shell: InteractiveShell) -> None:
    ran = run_magic(shell, "--help")
    assert ran.error is None and ran.stderr == ""
    assert "create" in ran.stdout and "logs" in ran.stdout and "watch" in ran.stdout


def test_an_unreachable_master_is_one_message(
        shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    url = closed_port_url()
    monkeypatch.setenv("DET_HUB_MASTER", url)
    monkeypatch.setenv("DET_HUB_TOKEN", "any")
    ran = run_magic(shell, "list")
    assert ran.error is None and ran.value is None and "Traceback" not in ran.stderr
    assert ran.stderr.startswith(f"Error: cannot reach the master at {url} (")
    assert ran.stderr.count("\n") == 1 and "DET_HUB_MASTER" in ran.stderr
