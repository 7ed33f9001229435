"""Behaviour of individual sections: entrypoints, environment, storage, searcher helpers."""

from __future__ import annotations

from typing import Any

import pytest

from det_hub.config import (
    ConfigError,
    DirectoryConfig,
    EnvironmentConfig,
    LengthUnit,
    Problem,
    S3Config,
    SearcherConfig,
    SharedFSConfig,
    parse_experiment_config,
)


def config(**overrides: Any) -> dict[str, Any]:
    return {
        "entrypoint": "model_def:Trial",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        **overrides,
    }


@pytest.mark.parametrize(
    ("entrypoint", "kind", "argv"),
    [
        ("model_def:MNistTrial", "trial_class", None),
        ("pkg.sub.model_def:Outer.Inner", "trial_class", None),
        ("  model_def:Trial  ", "trial_class", None),
        ("python3 train.py", "script", ["python3", "train.py"]),
        ("python3 train.py --name 'a b'", "script", ["python3", "train.py", "--name", "a b"]),
        ("python3 -m pkg.mod:main", "script", ["python3", "-m", "pkg.mod:main"]),
        ("train.py", "script", ["train.py"]),
        (["python3", "train.py", "a b"], "script", ["python3", "train.py", "a b"]),
        (["model_def:Trial"], "script", ["model_def:Trial"]),
    ],
)
def test_entrypoint_kinds(entrypoint: Any, kind: str, argv: list[str] | None) -> None:
    cfg = parse_experiment_config(config(entrypoint=entrypoint))
    assert cfg.entrypoint_kind == kind
    assert cfg.entrypoint_argv() == argv


def test_environment_variables_for_each_device() -> None:
    env = parse_experiment_config(
        config(environment={"environment_variables": ["A=1", "B=x=y", "A=2"]})
    ).environment
    assert env.variables_for("cpu") == {"A": "2", "B": "x=y"}
    assert env.variables_for("cuda") == {"A": "2", "B": "x=y"}
    assert env.variables_for("gpu") == {"A": "2", "B": "x=y"}
    with pytest.raises(ValueError, match="unknown device type 'tpu'"):
        env.variables_for("tpu")  # type: ignore[arg-type]


def test_single_image_applies_to_every_device() -> None:
    env = parse_experiment_config(config(environment={"image": "det:py3"})).environment
    assert [env.image_for(d) for d in ("cpu", "cuda", "rocm")] == ["det:py3"] * 3
    assert EnvironmentConfig().image_for("cpu") is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            {"type": "shared_fs", "host_path": "/mnt/ckpt"},
            SharedFSConfig(host_path="/mnt/ckpt"),
        ),
        ({"type": "s3", "bucket": "b", "prefix": "p"}, S3Config(bucket="b", prefix="p")),
        (
            {"type": "directory", "container_path": "/ckpt", "save_experiment_best": 3},
            DirectoryConfig(container_path="/ckpt", save_experiment_best=3),
        ),
    ],
)
def test_checkpoint_storage_types(raw: dict[str, Any], expected: Any) -> None:
    storage = parse_experiment_config(config(checkpoint_storage=raw)).checkpoint_storage
    assert storage == expected
    assert type(storage) is type(expected)


def test_storage_defaults() -> None:
    storage = SharedFSConfig(host_path="/x")
    assert (storage.save_experiment_best, storage.save_trial_best, storage.save_trial_latest) == (
        0,
        1,
        1,
    )
    assert storage.propagation == "rprivate"
    assert storage.storage_path is None


def test_searcher_defaults_and_helpers() -> None:
    searcher = SearcherConfig.model_validate(
        {"name": "adaptive_asha", "metric": "acc", "max_trials": 4, "max_length": {"batches": 300}}
    )
    assert searcher.smaller_is_better is True
    assert (searcher.divisor, searcher.max_rungs, searcher.mode) == (4, 5, "standard")
    assert searcher.stop_once is True
    assert searcher.bracket_rungs is None
    assert searcher.sampler == "random"
    assert searcher.length_unit is LengthUnit.BATCHES
    assert searcher.max_units == 300
    unbounded = SearcherConfig.model_validate({"name": "custom", "metric": "acc"})
    assert unbounded.length_unit is None
    assert unbounded.max_units is None


def test_configs_are_immutable() -> None:
    cfg = parse_experiment_config(config())
    with pytest.raises(ValueError):
        cfg.searcher.metric = "other"
    changed = cfg.model_copy(update={"name": "renamed"})
    assert changed.name == "renamed"
    assert cfg.name == "Experiment"


def test_resource_pool_empty_means_default() -> None:
    cfg = parse_experiment_config(config(resources={"resource_pool": "", "shm_size": 1024}))
    assert cfg.resources.resource_pool == "default"
    assert cfg.resources.shm_size == 1024


def test_shm_size_must_be_a_size() -> None:
    with pytest.raises(ConfigError) as info:
        parse_experiment_config(config(resources={"shm_size": [1]}))
    assert info.value.problems == [
        Problem("resources.shm_size", "must be a number of bytes or a size such as '4G'")
    ]


def test_pbs_is_dropped_and_slurm_is_read() -> None:
    cfg = parse_experiment_config(config(pbs={"x": 1}, slurm={
        "sbatch_args": ["--time=10", "--mem=1G"], "gpu_type": "a100", "slots_per_node": 4}))
    assert not hasattr(cfg, "pbs")
    assert cfg.slurm is not None
    assert cfg.slurm.sbatch_args == ["--time=10", "--mem=1G"]
    assert cfg.slurm.gpu_type == "a100"
    assert parse_experiment_config(cfg.to_dict()) == cfg
    assert parse_experiment_config(config()).slurm is None


def test_slurm_options_det_hub_sets_are_refused() -> None:
    with pytest.raises(ConfigError) as info:
        parse_experiment_config(config(slurm={"y": 2}))
    assert info.value.problems == [
        Problem("slurm.y", "unknown key; valid keys are gpu_type, sbatch_args, slots_per_node")]
    with pytest.raises(ConfigError) as info:
        parse_experiment_config(config(slurm={
            "sbatch_args": ["--time=10", "--output=/tmp/x", "-Jname", "-o", "--nodes=2"]}))
    assert info.value.problems == [
        Problem("slurm.sbatch_args[1]", "'--output=/tmp/x': det_hub sets --output on every "
                "job itself"),
        Problem("slurm.sbatch_args[2]", "'-Jname': det_hub sets --job-name on every job itself"),
        Problem("slurm.sbatch_args[3]", "'-o': det_hub sets --output on every job itself"),
        Problem("slurm.sbatch_args[4]", "'--nodes=2': det_hub sets --nodes on every job itself"),
    ]


def test_accepted_free_form_sections_are_kept() -> None:
    cfg = parse_experiment_config(
        config(
            optimizations={"aggregation_frequency": 4},
            profiling={"enabled": True, "begin_on_batch": 0},
            retention_policy={"log_retention_days": 7},
            integrations={"pachyderm": {"dataset": {"repo": "r"}}},
            debug=True,
        )
    )
    assert cfg.optimizations == {"aggregation_frequency": 4}
    assert cfg.profiling == {"enabled": True, "begin_on_batch": 0}
    assert cfg.retention_policy == {"log_retention_days": 7}
    assert cfg.integrations == {"pachyderm": {"dataset": {"repo": "r"}}}
    assert cfg.debug is True
