"""Every kind of problem, reported at its path with a message a user can act on."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from det_hub.config import ConfigError, Problem, parse_experiment_config


def base() -> dict[str, Any]:
    return {
        "entrypoint": "model_def:Trial",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
    }


def with_(path: str, value: Any) -> dict[str, Any]:
    """The base config with the dotted ``path`` set to ``value``."""
    cfg = base()
    *parents, last = path.split(".")
    node = cfg
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return cfg


def problems(cfg: Any) -> list[Problem]:
    with pytest.raises(ConfigError) as info:
        parse_experiment_config(cfg)
    return info.value.problems


def test_base_config_is_valid() -> None:
    assert parse_experiment_config(base()).searcher.metric == "loss"


SEARCHERS = "single, random, grid, adaptive_asha, async_halving, custom"


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        # types
        ("searcher.max_trials", "5", Problem("searcher.max_trials", "must be an integer")),
        ("searcher.max_trials", 2.5, Problem("searcher.max_trials", "must be an integer")),
        ("searcher.max_trials", True, Problem("searcher.max_trials", "must be an integer")),
        ("searcher.metric", 3, Problem("searcher.metric", "must be a string")),
        (
            "searcher.smaller_is_better",
            "yes",
            Problem("searcher.smaller_is_better", "must be true or false"),
        ),
        ("resources.weight", "heavy", Problem("resources.weight", "must be a number")),
        ("resources.weight", float("inf"), Problem("resources.weight", "must be a finite number")),
        ("labels", "a", Problem("labels", "must be a list")),
        ("labels", ["a", 1], Problem("labels[1]", "must be a string")),
        ("resources", 4, Problem("resources", "must be a mapping")),
        ("searcher", [], Problem("searcher", "must be a mapping")),
        ("data", [1], Problem("data", "must be a mapping")),
        # bounds
        ("searcher.max_trials", 0, Problem("searcher.max_trials", "must be >= 1")),
        (
            "searcher.max_concurrent_trials",
            -1,
            Problem("searcher.max_concurrent_trials", "must be >= 0"),
        ),
        ("searcher.divisor", 1, Problem("searcher.divisor", "must be > 1")),
        ("searcher.bracket_rungs", [3, 0], Problem("searcher.bracket_rungs[1]", "must be >= 1")),
        ("resources.slots_per_trial", 0, Problem("resources.slots_per_trial", "must be >= 1")),
        ("resources.weight", 0, Problem("resources.weight", "must be > 0")),
        ("resources.priority", 0, Problem("resources.priority", "must be >= 1")),
        ("resources.priority", 100, Problem("resources.priority", "must be <= 99")),
        ("resources.max_slots", 1, None),
        ("records_per_epoch", -1, Problem("records_per_epoch", "must be >= 0")),
        ("scheduling_unit", 0, Problem("scheduling_unit", "must be >= 1")),
        ("max_restarts", -2, Problem("max_restarts", "must be >= 0")),
        (
            "reproducibility.experiment_seed",
            -1,
            Problem("reproducibility.experiment_seed", "must be >= 0"),
        ),
        # names from a fixed set
        (
            "searcher.name",
            "asha",
            Problem(
                "searcher.name",
                f"'asha' is not one of {SEARCHERS}; did you mean 'adaptive_asha'?",
            ),
        ),
        (
            "searcher.name",
            "randm",
            Problem("searcher.name", f"'randm' is not one of {SEARCHERS}; did you mean 'random'?"),
        ),
        ("searcher.name", "pbt", Problem("searcher.name", f"'pbt' is not one of {SEARCHERS}")),
        ("searcher.name", 7, Problem("searcher.name", f"must be one of {SEARCHERS}")),
        (
            "searcher.mode",
            "agressive",
            Problem(
                "searcher.mode",
                "'agressive' is not one of aggressive, standard, conservative; did you mean 'aggressive'?",
            ),
        ),
        (
            "searcher.sampler",
            "tpee",
            Problem("searcher.sampler", "'tpee' is not one of random, tpe; did you mean 'tpe'?"),
        ),
        (
            "checkpoint_policy",
            "latest",
            Problem(
                "checkpoint_policy", "'latest' is not one of best, all, none; did you mean 'best'?"
            ),
        ),
        (
            "checkpoint_policy",
            "sometimes",
            Problem("checkpoint_policy", "'sometimes' is not one of best, all, none"),
        ),
        # unknown keys
        (
            "searcher.maxtrials",
            3,
            Problem("searcher.maxtrials", "unknown key; did you mean 'max_trials'?"),
        ),
        (
            "hyperparameter",
            {},
            Problem("hyperparameter", "unknown key; did you mean 'hyperparameters'?"),
        ),
        (
            "resources.slot_per_trial",
            2,
            Problem("resources.slot_per_trial", "unknown key; did you mean 'slots_per_trial'?"),
        ),
        (
            "reproducibility.seed",
            2,
            Problem("reproducibility.seed", "unknown key; did you mean 'experiment_seed'?"),
        ),
        (
            "reproducibility.x",
            2,
            Problem("reproducibility.x", "unknown key; valid keys are experiment_seed"),
        ),
        # lengths
        (
            "searcher.max_length",
            100,
            Problem(
                "searcher.max_length",
                "a bare number is not a length; write {batches: N}, {records: N} or {epochs: N}",
            ),
        ),
        (
            "searcher.max_length",
            {"batch": 5},
            Problem("searcher.max_length.batch", "unknown key; did you mean 'batches'?"),
        ),
        (
            "searcher.max_length",
            {"batches": 0},
            Problem("searcher.max_length.batches", "must be >= 1"),
        ),
        (
            "searcher.max_length",
            {"batches": "5"},
            Problem("searcher.max_length.batches", "must be an integer"),
        ),
        (
            "searcher.max_length",
            {"batches": 5, "epochs": 1},
            Problem("searcher.max_length", "must name exactly one unit, not batches, epochs"),
        ),
        (
            "min_validation_period",
            {},
            Problem(
                "min_validation_period",
                "must name one unit: {batches: N}, {records: N} or {epochs: N}",
            ),
        ),
        # entrypoint
        ("entrypoint", "", Problem("entrypoint", "must not be empty")),
        ("entrypoint", [], Problem("entrypoint", "must not be empty")),
        ("entrypoint", ["python3", 3], Problem("entrypoint[1]", "must be a string")),
        (
            "entrypoint",
            {"cmd": "x"},
            Problem(
                "entrypoint",
                'must be "module:TrialClass", a command, or a list of command arguments',
            ),
        ),
        # checkpoint storage
        (
            "checkpoint_storage",
            {"host_path": "/x"},
            Problem("checkpoint_storage.type", "required; one of shared_fs, s3, directory"),
        ),
        (
            "checkpoint_storage",
            {"type": "sharedfs", "host_path": "/x"},
            Problem(
                "checkpoint_storage.type",
                "'sharedfs' is not one of shared_fs, s3, directory; did you mean 'shared_fs'?",
            ),
        ),
        (
            "checkpoint_storage",
            {"type": "shared_fs"},
            Problem("checkpoint_storage.host_path", "required"),
        ),
        (
            "checkpoint_storage",
            {"type": "shared_fs", "host_path": "rel"},
            Problem("checkpoint_storage.host_path", "must be an absolute path"),
        ),
        (
            "checkpoint_storage",
            {"type": "s3", "bucket": ""},
            Problem("checkpoint_storage.bucket", "must not be empty"),
        ),
        (
            "checkpoint_storage",
            {"type": "directory"},
            Problem("checkpoint_storage.container_path", "required"),
        ),
        (
            "checkpoint_storage",
            {"type": "s3", "bucket": "b", "save_trial_best": -1},
            Problem("checkpoint_storage.save_trial_best", "must be >= 0"),
        ),
        ("checkpoint_storage", "s3", Problem("checkpoint_storage", "must be a mapping")),
        # environment and bind mounts
        (
            "environment.environment_variables",
            ["A=1", "B"],
            Problem("environment.environment_variables[1]", "must be \"NAME=value\", got 'B'"),
        ),
        (
            "environment.environment_variables",
            {"cuda": ["=x"]},
            Problem(
                "environment.environment_variables.cuda[0]", "must be \"NAME=value\", got '=x'"
            ),
        ),
        (
            "environment.environment_variables",
            "A=1",
            Problem("environment.environment_variables", 'must be a list of "NAME=value" strings'),
        ),
        (
            "environment.image",
            {"cpu": "a", "tpu": "b"},
            Problem("environment.image.tpu", "unknown key; did you mean 'cpu'?"),
        ),
        (
            "environment.image",
            3,
            Problem(
                "environment.image", "must be an image name or a mapping with cpu, cuda and rocm"
            ),
        ),
        (
            "bind_mounts",
            [{"host_path": "data", "container_path": "/d"}],
            Problem("bind_mounts[0].host_path", "must be an absolute path"),
        ),
        (
            "bind_mounts",
            [{"host_path": "/data"}],
            Problem("bind_mounts[0].container_path", "required"),
        ),
        # hyperparameters
        (
            "hyperparameters",
            {"lr": {"type": "double", "minval": 0.1, "maxval": 0.01}},
            Problem("hyperparameters.lr.maxval", "must be greater than minval (0.1)"),
        ),
        (
            "hyperparameters",
            {"lr": {"type": "double", "minval": 0.1, "maxval": 0.1}},
            Problem("hyperparameters.lr.maxval", "must be greater than minval (0.1)"),
        ),
        (
            "hyperparameters",
            {"n": {"type": "int", "minval": 5, "maxval": 4}},
            Problem("hyperparameters.n.maxval", "must be greater than or equal to minval (5)"),
        ),
        (
            "hyperparameters",
            {"n": {"type": "int", "minval": 1.5, "maxval": 4}},
            Problem("hyperparameters.n.minval", "must be an integer"),
        ),
        (
            "hyperparameters",
            {"n": {"type": "int", "minval": 1, "maxval": 4, "count": 0}},
            Problem("hyperparameters.n.count", "must be >= 1"),
        ),
        (
            "hyperparameters",
            {"n": {"type": "int", "maxval": 4}},
            Problem("hyperparameters.n.minval", "required"),
        ),
        (
            "hyperparameters",
            {"l": {"type": "log", "base": 0, "minval": -4, "maxval": -1}},
            Problem("hyperparameters.l.base", "must be > 0"),
        ),
        (
            "hyperparameters",
            {"l": {"type": "log", "minval": -1, "maxval": -4}},
            Problem("hyperparameters.l.maxval", "must be greater than minval (-1.0)"),
        ),
        (
            "hyperparameters",
            {"c": {"type": "categorical", "vals": []}},
            Problem("hyperparameters.c.vals", "must not be empty"),
        ),
        ("hyperparameters", {"c": {"type": "const"}}, Problem("hyperparameters.c.val", "required")),
        (
            "hyperparameters",
            {"opt": {"lr": {"type": "dobule", "minval": 0, "maxval": 1}}},
            Problem(
                "hyperparameters.opt.lr.type",
                "'dobule' is not one of const, int, double, log, categorical; did you mean 'double'?",
            ),
        ),
        (
            "hyperparameters",
            {"n": {"type": "int", "minval": 1, "maxval": 4, "cnt": 2}},
            Problem("hyperparameters.n.cnt", "unknown key; did you mean 'count'?"),
        ),
        (
            "hyperparameters",
            [1, 2],
            Problem("hyperparameters", "must be a mapping of names to hyperparameters"),
        ),
    ],
)
def test_problem_message_and_path(path: str, value: Any, expected: Problem | None) -> None:
    cfg = with_(path, value)
    if expected is None:
        # max_slots 1 with one slot per trial is fine; the mismatch is tested below.
        assert parse_experiment_config(cfg).resources.max_slots == value
        return
    assert problems(cfg) == [expected]


@pytest.mark.parametrize(
    ("cfg", "expected"),
    [
        ({"searcher": base()["searcher"]}, [Problem("entrypoint", "required")]),
        ({"entrypoint": "x:Y"}, [Problem("searcher", "required")]),
        (
            {"entrypoint": "x:Y", "searcher": {"name": "single"}},
            [Problem("searcher.metric", "required")],
        ),
        (
            with_("searcher", {"name": "random", "metric": "m"}),
            [Problem("searcher.max_trials", "required by the random searcher")],
        ),
        (
            with_(
                "searcher",
                {
                    "name": "async_halving",
                    "metric": "m",
                    "max_trials": 3,
                    "max_length": {"batches": 9},
                },
            ),
            [Problem("searcher.num_rungs", "required by the async_halving searcher")],
        ),
        (
            with_("searcher", {"name": "adaptive_asha", "metric": "m", "max_trials": 3}),
            [
                Problem(
                    "searcher.max_length",
                    "required by the adaptive_asha searcher (or time_metric with max_time)",
                )
            ],
        ),
        (
            with_("searcher", {"name": "grid", "metric": "m", "sampler": "tpe"}),
            [
                Problem(
                    "searcher.sampler",
                    "the grid searcher tries every grid point; it takes no sampler",
                )
            ],
        ),
        (
            with_("searcher", {"name": "single", "metric": "m", "time_metric": "batches"}),
            [Problem("searcher.max_time", "required when time_metric is set")],
        ),
        (
            with_("searcher", {"name": "single", "metric": "m", "max_time": 10}),
            [Problem("searcher.time_metric", "required when max_time is set")],
        ),
        (
            with_(
                "searcher",
                {
                    "name": "single",
                    "metric": "m",
                    "max_time": 10,
                    "time_metric": "b",
                    "max_length": {"batches": 3},
                },
            ),
            [Problem("searcher.time_metric", "give either max_length or time_metric, not both")],
        ),
        (
            with_("resources", {"slots_per_trial": 4, "max_slots": 2}),
            [Problem("resources.max_slots", "must be >= slots_per_trial (4)")],
        ),
        (
            with_("searcher.max_length", {"epochs": 2}),
            [
                Problem(
                    "records_per_epoch",
                    "required (> 0) when a length is in epochs (searcher.max_length)",
                )
            ],
        ),
        (
            {
                **base(),
                "searcher": {"name": "grid", "metric": "m"},
                "hyperparameters": {
                    "a": {"type": "int", "minval": 1, "maxval": 3},
                    "b": {"type": "categorical", "vals": [1, 2]},
                    "g": {"c": {"type": "log", "minval": -3, "maxval": -1}},
                },
            },
            [
                Problem("hyperparameters.a.count", "required by the grid searcher"),
                Problem("hyperparameters.g.c.count", "required by the grid searcher"),
            ],
        ),
    ],
)
def test_required_and_cross_field_problems(cfg: dict[str, Any], expected: list[Problem]) -> None:
    assert problems(cfg) == expected


def test_epochs_need_records_per_epoch_only_for_trial_classes() -> None:
    cfg = with_("searcher.max_length", {"epochs": 2})
    cfg["entrypoint"] = "python3 train.py"
    assert parse_experiment_config(cfg).records_per_epoch == 0
    cfg["entrypoint"] = "model_def:Trial"
    cfg["records_per_epoch"] = 100
    assert parse_experiment_config(cfg).records_per_epoch == 100


def test_every_problem_is_reported_at_once() -> None:
    text = """
entrypoint: model_def:Trial
searcher:
  name: random
  metric: loss
  max_trials: 0
resources:
  slots_per_trial: two
hyperparameters:
  lr: {type: double, minval: 1.0, maxval: 0.5}
"""
    with pytest.raises(ConfigError) as info:
        parse_experiment_config(text)
    assert info.value.problems == [
        Problem("hyperparameters.lr.maxval", "must be greater than minval (1.0)"),
        Problem("searcher.max_trials", "must be >= 1"),
        Problem("resources.slots_per_trial", "must be an integer"),
    ]
    assert str(info.value) == (
        "hyperparameters.lr.maxval: must be greater than minval (1.0)\n"
        "searcher.max_trials: must be >= 1\n"
        "resources.slots_per_trial: must be an integer"
    )


def test_problems_in_several_places_of_one_section_are_all_reported() -> None:
    found = problems(
        {
            "entrypoint": "x:Y",
            "searcher": {"name": "asha", "metric": 1, "max_trials": -1, "divisr": 2},
            "bind_mounts": [{"host_path": "a", "container_path": "/a"}, {"host_path": "b"}],
        }
    )
    assert [p.path for p in found] == [
        "searcher.name",
        "searcher.metric",
        "searcher.max_trials",
        "searcher.divisr",
        "bind_mounts[0].host_path",
        "bind_mounts[1].host_path",
        "bind_mounts[1].container_path",
    ]


def test_keys_that_are_not_strings() -> None:
    found = problems("entrypoint: x:Y\nsearcher: {name: single, metric: m}\ndata: {1: a}\n2: b\n")
    assert found == [
        Problem("data", "key 1 must be a string"),
        Problem("", "key 2 must be a string"),
    ]


def test_no_pydantic_wording_leaks() -> None:
    found = problems(
        {
            "entrypoint": 5,
            "searcher": {"name": None, "metric": [], "max_length": "10", "divisor": "x"},
            "resources": {"weight": [], "priority": "high", "devices": 3},
            "environment": {"force_pull_image": 2},
            "records_per_epoch": None,
            "labels": [{}],
        }
    )
    for problem in found:
        for leak in ("Input should", "type=", "[", "pydantic", "Value error"):
            assert leak not in problem.message, problem


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "a: [1, 2",
            "invalid YAML at line 1, column 9: expected ',' or ']', but got '<stream end>'",
        ),
        (
            "entrypoint: x:Y\n  bad: indent",
            "invalid YAML at line 2, column 6: mapping values are not allowed here",
        ),
        ("", "the config is empty; expected a mapping of settings"),
        ("# only a comment\n", "the config is empty; expected a mapping of settings"),
        ("- a\n- b\n", "the config must be a mapping of settings, not a list"),
        ("just text", "the config must be a mapping of settings, not a string"),
        ("42", "the config must be a mapping of settings, not a number"),
    ],
)
def test_unreadable_documents(text: str, message: str) -> None:
    assert problems(text) == [Problem("", message)]


def test_non_utf8_bytes() -> None:
    (problem,) = problems(b"name: \xff\xfe")
    assert problem.path == ""
    assert problem.message.startswith("the config is not UTF-8 text")


def test_config_error_survives_pickling_and_is_a_value_error() -> None:
    error = ConfigError([Problem("searcher.max_trials", "must be >= 1"), Problem("", "bad")])
    copy = pickle.loads(pickle.dumps(error))
    assert copy.problems == error.problems
    assert str(copy) == "searcher.max_trials: must be >= 1\nbad"
    assert isinstance(error, ValueError)


def test_null_sections_mean_defaults() -> None:
    cfg = parse_experiment_config(
        "entrypoint: x:Y\nsearcher: {name: single, metric: m}\nresources:\nenvironment:\n"
        "hyperparameters:\ndescription:\n"
    )
    assert cfg.resources.slots_per_trial == 1
    assert cfg.hyperparameters == {}
    assert cfg.description == ""


def test_null_required_key_is_reported_as_required() -> None:
    assert problems("entrypoint:\nsearcher: {name: single, metric: m}") == [
        Problem("entrypoint", "required")
    ]
