"""Determined's example configs parse unchanged, with the values and defaults they imply."""

from __future__ import annotations

from det_hub.config import (
    ConstHP,
    DoubleHP,
    ExperimentConfig,
    IntHP,
    Length,
    LengthUnit,
    ResourcesConfig,
    parse_experiment_config,
)

MNIST_CONST = """\
name: mnist_pytorch_const
hyperparameters:
  learning_rate: 1.0
  n_filters1: 32
  n_filters2: 64
  dropout1: 0.25
  dropout2: 0.5
searcher:
  name: single
  metric: validation_loss
  max_length:
    epochs: 1
  smaller_is_better: true
records_per_epoch: 60000
entrypoint: model_def:MNistTrial
"""

MNIST_ADAPTIVE = """\
name: mnist_pytorch_adaptive_search
hyperparameters:
  global_batch_size: 64
  learning_rate:
    type: double
    minval: .0001
    maxval: 1.0
  n_filters1:
    type: int
    minval: 8
    maxval: 64
  n_filters2:
    type: int
    minval: 8
    maxval: 72
  dropout1:
    type: double
    minval: .2
    maxval: .5
  dropout2:
    type: double
    minval: .2
    maxval: .5
searcher:
  name: adaptive_asha
  metric: validation_loss
  smaller_is_better: true
  max_length:
    epochs: 1
  max_trials: 16
records_per_epoch: 60000
entrypoint: model_def:MNistTrial
"""

MNIST_DISTRIBUTED = """\
name: mnist_pytorch_distributed
hyperparameters:
  learning_rate: 1.0
  n_filters1: 32
  n_filters2: 64
  dropout1: 0.25
  dropout2: 0.5
resources:
  slots_per_trial: 2
searcher:
  name: single
  metric: validation_loss
  max_length:
    epochs: 1
  smaller_is_better: true
records_per_epoch: 60000
entrypoint: model_def:MNistTrial
"""

CORE_API_038 = """\
name: core-api-adaptive
entrypoint: python3 train.py
hyperparameters:
  increment_by:
    type: int
    minval: 1
    maxval: 8
searcher:
  name: adaptive_asha
  metric: x
  time_metric: batches
  max_time: 1000
  max_trials: 8
  smaller_is_better: true
max_restarts: 0
"""


def test_mnist_const() -> None:
    cfg = parse_experiment_config(MNIST_CONST)
    assert cfg.name == "mnist_pytorch_const"
    assert cfg.hyperparameters == {
        "learning_rate": ConstHP(val=1.0),
        "n_filters1": ConstHP(val=32),
        "n_filters2": ConstHP(val=64),
        "dropout1": ConstHP(val=0.25),
        "dropout2": ConstHP(val=0.5),
    }
    assert cfg.searcher.name == "single"
    assert cfg.searcher.metric == "validation_loss"
    assert cfg.searcher.smaller_is_better is True
    assert cfg.searcher.max_length == Length(unit=LengthUnit.EPOCHS, value=1)
    assert cfg.records_per_epoch == 60000
    assert cfg.entrypoint == "model_def:MNistTrial"
    assert cfg.entrypoint_kind == "trial_class"
    assert cfg.entrypoint_argv() is None
    # Defaults the master relies on.
    assert cfg.resources == ResourcesConfig()
    assert cfg.resources.slots_per_trial == 1
    assert cfg.resources.resource_pool == "default"
    assert cfg.checkpoint_storage is None
    assert cfg.reproducibility.experiment_seed is None
    assert cfg.scheduling_unit == 100
    assert cfg.max_restarts == 5
    assert cfg.checkpoint_policy == "best"
    assert cfg.min_validation_period is None
    assert cfg.searcher.max_concurrent_trials == 16


def test_mnist_adaptive() -> None:
    cfg = parse_experiment_config(MNIST_ADAPTIVE)
    assert cfg.searcher.name == "adaptive_asha"
    assert cfg.searcher.max_trials == 16
    assert cfg.searcher.divisor == 4
    assert cfg.searcher.max_rungs == 5
    assert cfg.searcher.mode == "standard"
    assert cfg.searcher.stop_once is True
    assert cfg.hyperparameters == {
        "global_batch_size": ConstHP(val=64),
        "learning_rate": DoubleHP(minval=0.0001, maxval=1.0),
        "n_filters1": IntHP(minval=8, maxval=64),
        "n_filters2": IntHP(minval=8, maxval=72),
        "dropout1": DoubleHP(minval=0.2, maxval=0.5),
        "dropout2": DoubleHP(minval=0.2, maxval=0.5),
    }
    assert cfg.searcher.length_unit is LengthUnit.EPOCHS
    assert cfg.searcher.max_units == 1
    assert cfg.searcher.max_length is not None
    assert cfg.searcher.max_length.to_batches(cfg.records_per_epoch, 64) == 938


def test_mnist_distributed() -> None:
    cfg = parse_experiment_config(MNIST_DISTRIBUTED)
    assert cfg.resources.slots_per_trial == 2
    assert cfg.name == "mnist_pytorch_distributed"


def test_core_api_038_config() -> None:
    cfg = parse_experiment_config(CORE_API_038)
    assert cfg.entrypoint_kind == "script"
    assert cfg.entrypoint_argv() == ["python3", "train.py"]
    assert cfg.searcher.name == "adaptive_asha"
    assert cfg.searcher.metric == "x"
    assert cfg.searcher.time_metric == "batches"
    assert cfg.searcher.max_time == 1000
    assert cfg.searcher.max_length is None
    assert cfg.searcher.length_unit == "batches"
    assert cfg.searcher.max_units == 1000
    assert cfg.max_restarts == 0


def test_bytes_and_mappings_parse_like_text() -> None:
    from_text = parse_experiment_config(MNIST_CONST)
    assert parse_experiment_config(MNIST_CONST.encode()) == from_text
    assert parse_experiment_config(from_text.to_dict()) == from_text


def test_full_config_keeps_every_section() -> None:
    cfg = parse_experiment_config(
        """
name: full
description: every section
labels: [a, b]
workspace: ws
project: proj
data: {url: "https://example.org/mnist.tgz", nested: {x: 1}}
entrypoint: [python3, -m, train, --epochs, "3"]
searcher:
  name: random
  metric: accuracy
  smaller_is_better: false
  max_trials: 4
  max_concurrent_trials: 2
  max_length: {records: 1000}
  source_trial_id: 12
resources:
  slots_per_trial: 4
  max_slots: 8
  weight: 0.5
  priority: 10
  resource_pool: ""
  shm_size: 4G
  devices: [/dev/fuse]
checkpoint_storage:
  type: s3
  bucket: ckpts
  prefix: exp
  endpoint_url: http://127.0.0.1:8333
  save_trial_best: 2
environment:
  image: {cpu: img:cpu, gpu: img:cuda}
  environment_variables:
    cpu: [OMP_NUM_THREADS=2, EMPTY=]
    cuda: [NCCL_DEBUG=INFO, A=b=c]
  force_pull_image: true
  add_capabilities: [SYS_ADMIN]
bind_mounts:
  - host_path: /data
    container_path: /mnt/data
    read_only: true
reproducibility: {experiment_seed: 42}
records_per_epoch: 5000
scheduling_unit: 50
min_validation_period: {batches: 200}
min_checkpoint_period: {epochs: 1}
perform_initial_validation: true
checkpoint_policy: all
max_restarts: 1
debug: true
optimizations: {aggregation_frequency: 2}
profiling: {enabled: true}
log_policies: [{pattern: ".*CUDA out of memory.*", action: {type: cancel_retries}}]
retention_policy: {log_retention_days: 30}
integrations: {pachyderm: {}}
pbs: {slots_per_node: 4}
slurm: {gpu_type: a100}
"""
    )
    assert cfg.labels == ["a", "b"]
    assert (cfg.workspace, cfg.project) == ("ws", "proj")
    assert cfg.data == {"url": "https://example.org/mnist.tgz", "nested": {"x": 1}}
    assert cfg.entrypoint_argv() == ["python3", "-m", "train", "--epochs", "3"]
    assert cfg.searcher.smaller_is_better is False
    assert cfg.searcher.max_length == Length(unit=LengthUnit.RECORDS, value=1000)
    assert cfg.searcher.source_trial_id == 12
    assert cfg.resources.resource_pool == "default"
    assert cfg.resources.shm_size == "4G"
    assert cfg.resources.max_slots == 8
    assert cfg.checkpoint_storage is not None
    assert cfg.checkpoint_storage.model_dump() == {
        "save_experiment_best": 0,
        "save_trial_best": 2,
        "save_trial_latest": 1,
        "type": "s3",
        "bucket": "ckpts",
        "prefix": "exp",
        "endpoint_url": "http://127.0.0.1:8333",
        "access_key": None,
        "secret_key": None,
    }
    assert cfg.environment.image_for("cpu") == "img:cpu"
    assert cfg.environment.image_for("cuda") == "img:cuda"
    assert cfg.environment.image_for("rocm") is None
    assert cfg.environment.variables_for("cpu") == {"OMP_NUM_THREADS": "2", "EMPTY": ""}
    assert cfg.environment.variables_for("gpu") == {"NCCL_DEBUG": "INFO", "A": "b=c"}
    assert cfg.environment.variables_for("rocm") == {}
    assert cfg.bind_mounts[0].model_dump() == {
        "host_path": "/data",
        "container_path": "/mnt/data",
        "read_only": True,
        "propagation": "rprivate",
    }
    assert cfg.reproducibility.experiment_seed == 42
    assert cfg.min_checkpoint_period == Length(unit=LengthUnit.EPOCHS, value=1)
    assert cfg.checkpoint_policy == "all"
    assert cfg.log_policies == [
        {"pattern": ".*CUDA out of memory.*", "action": {"type": "cancel_retries"}}
    ]
    assert "pbs" not in cfg.to_dict()
    assert cfg.slurm is not None and cfg.slurm.gpu_type == "a100"
    assert isinstance(cfg, ExperimentConfig)
