"""``to_dict`` gives JSON data that parses back to an equal config."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from det_hub.config import ExperimentConfig, parse_experiment_config

lengths = st.builds(
    lambda unit, n: {unit: n},
    st.sampled_from(["batches", "records", "epochs"]),
    st.integers(1, 10**6),
)
texts = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-0123456789", min_size=1, max_size=12)


@st.composite
def searchers(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(
        st.sampled_from(["single", "random", "grid", "adaptive_asha", "async_halving", "custom"])
    )
    searcher: dict[str, Any] = {
        "name": name,
        "metric": draw(texts),
        "smaller_is_better": draw(st.booleans()),
        "max_concurrent_trials": draw(st.integers(0, 64)),
    }
    if draw(st.booleans()):
        searcher["time_metric"] = draw(texts)
        searcher["max_time"] = draw(st.integers(1, 10**6))
    else:
        searcher["max_length"] = draw(lengths)
    if name in ("random", "adaptive_asha", "async_halving") or draw(st.booleans()):
        searcher["max_trials"] = draw(st.integers(1, 1000))
    if name == "async_halving":
        searcher["num_rungs"] = draw(st.integers(1, 6))
    if name != "grid":
        searcher["sampler"] = draw(st.sampled_from(["random", "tpe"]))
    if name in ("adaptive_asha", "async_halving"):
        searcher["divisor"] = draw(st.integers(2, 8))
        searcher["mode"] = draw(st.sampled_from(["aggressive", "standard", "conservative"]))
        searcher["bracket_rungs"] = draw(st.none() | st.lists(st.integers(1, 5), max_size=3))
    return searcher


storages = st.none() | st.sampled_from(
    [
        {"type": "shared_fs", "host_path": "/tmp/ckpt", "storage_path": "exp"},
        {
            "type": "s3",
            "bucket": "b",
            "endpoint_url": "http://127.0.0.1:8333",
            "save_experiment_best": 2,
        },
        {"type": "directory", "container_path": "/ckpt", "save_trial_latest": 0},
    ]
)
hparams = st.sampled_from(
    [
        {},
        {
            "lr": 0.1,
            "opt": {
                "name": "adam",
                "beta": {"type": "double", "minval": 0.8, "maxval": 0.99, "count": 3},
            },
        },
        {
            "n": {"type": "int", "minval": 1, "maxval": 9, "count": 2},
            "c": {"type": "categorical", "vals": [1, "a", None]},
        },
        {"l": {"type": "log", "base": 2, "minval": -3, "maxval": 0, "count": 4}, "v": [1, 2]},
    ]
)


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "entrypoint": draw(
            st.sampled_from(["model_def:Trial", "python3 train.py --x 1", ["python3", "t.py"]])
        ),
        "searcher": draw(searchers()),
        "hyperparameters": draw(hparams),
        "records_per_epoch": draw(st.integers(1, 10**5)),
    }
    optional: dict[str, st.SearchStrategy[Any]] = {
        "name": texts,
        "labels": st.lists(texts, max_size=3),
        "data": st.dictionaries(texts, st.integers() | texts, max_size=3),
        "resources": st.builds(
            lambda s, w, p: {"slots_per_trial": s, "weight": w, "priority": p},
            st.integers(1, 8),
            st.floats(0.1, 10),
            st.integers(1, 99),
        ),
        "checkpoint_storage": storages,
        "environment": st.sampled_from(
            [
                {"image": "python:3.11", "environment_variables": ["A=1"]},
                {"image": {"cpu": "c", "cuda": "g"}, "environment_variables": {"cpu": ["X=y"]}},
            ]
        ),
        "bind_mounts": st.lists(
            st.builds(
                lambda ro: {"host_path": "/h", "container_path": "/c", "read_only": ro},
                st.booleans(),
            ),
            max_size=2,
        ),
        "reproducibility": st.builds(lambda s: {"experiment_seed": s}, st.integers(0, 2**31 - 1)),
        "min_validation_period": lengths,
        "min_checkpoint_period": lengths,
        "checkpoint_policy": st.sampled_from(["best", "all", "none"]),
        "max_restarts": st.integers(0, 10),
        "scheduling_unit": st.integers(1, 1000),
        "perform_initial_validation": st.booleans(),
        "log_policies": st.sampled_from([[{"pattern": "x"}], {"a": 1}]),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            cfg[key] = draw(strategy)
    if cfg["searcher"]["name"] == "grid":
        cfg["hyperparameters"] = {"c": {"type": "categorical", "vals": [1, 2]}}
    return cfg


@settings(max_examples=150, deadline=None)
@given(raw=configs())
def test_to_dict_round_trips(raw: dict[str, Any]) -> None:
    cfg = parse_experiment_config(raw)
    data = cfg.to_dict()
    assert json.loads(json.dumps(data)) == data
    again = parse_experiment_config(data)
    assert again == cfg
    assert again.to_dict() == data
    # The YAML text of the dumped config reads back the same as well.
    assert parse_experiment_config(json.dumps(data)) == cfg


def test_to_dict_fills_defaults() -> None:
    data = parse_experiment_config(
        {"entrypoint": "python3 train.py", "searcher": {"name": "single", "metric": "loss"}}
    ).to_dict()
    assert data["name"] == "Experiment"
    assert data["searcher"]["smaller_is_better"] is True
    assert data["searcher"]["max_length"] is None
    assert data["resources"]["slots_per_trial"] == 1
    assert data["resources"]["weight"] == 1.0
    assert data["checkpoint_storage"] is None
    assert data["reproducibility"] == {"experiment_seed": None}
    assert data["environment"]["environment_variables"] == {"cpu": [], "cuda": [], "rocm": []}
    assert data["hyperparameters"] == {}
    assert sorted(data) == sorted(ExperimentConfig.model_fields)


def test_to_dict_writes_the_config_forms() -> None:
    data = parse_experiment_config(
        {
            "entrypoint": "model_def:Trial",
            "searcher": {"name": "single", "metric": "loss", "max_length": {"records": 64}},
            "hyperparameters": {"lr": 0.1, "n": {"type": "int", "minval": 1, "maxval": 2}},
            "checkpoint_storage": {"type": "shared_fs", "host_path": "/ckpt"},
        }
    ).to_dict()
    assert data["searcher"]["max_length"] == {"records": 64}
    assert data["hyperparameters"] == {
        "lr": {"type": "const", "val": 0.1},
        "n": {"type": "int", "minval": 1, "maxval": 2, "count": None},
    }
    assert data["checkpoint_storage"] == {
        "save_experiment_best": 0,
        "save_trial_best": 1,
        "save_trial_latest": 1,
        "type": "shared_fs",
        "host_path": "/ckpt",
        "storage_path": None,
        "propagation": "rprivate",
        "container_path": None,
    }
