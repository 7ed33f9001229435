"""Experiment configs: parsing, validation with precise error paths, hyperparameter spaces.

Pure: nothing here does I/O beyond parsing the text it is given.

>>> cfg = parse_experiment_config('''
... entrypoint: model_def:MNistTrial
... searcher: {name: single, metric: validation_loss, max_length: {batches: 100}}
... ''')
>>> cfg.searcher.max_length.to_dict()
{'batches': 100}
"""

from det_hub.config._errors import ConfigError, Problem, error_problems, fail, loc_to_path
from det_hub.config._length import Length, LengthUnit
from det_hub.config._model import validate_section
from det_hub.config.command import (
    CommandConfig,
    CommandResources,
    TaskConfig,
    parse_command_config,
    parse_duration,
    parse_task_config,
)
from det_hub.config.environment import BindMount, DeviceImages, DeviceVariables, EnvironmentConfig
from det_hub.config.experiment import ExperimentConfig, ReproducibilityConfig, names_trial_class
from det_hub.config.hyperparameters import (
    CategoricalHP,
    ConstHP,
    DoubleHP,
    Hyperparameter,
    IntHP,
    LogHP,
)
from det_hub.config.limited_yaml import ConfigLimitError, ConfigLimits, load_yaml
from det_hub.config.overrides import merge_config, overrides_from, parse_override
from det_hub.config.parse import parse_experiment_config
from det_hub.config.resources import ResourcesConfig
from det_hub.config.sampling import grid_hparams, sample_hparams
from det_hub.config.searcher import SearcherConfig
from det_hub.config.storage import CheckpointStorage, DirectoryConfig, S3Config, SharedFSConfig

__all__ = [
    "BindMount",
    "CategoricalHP",
    "CheckpointStorage",
    "CommandConfig",
    "CommandResources",
    "ConfigError",
    "ConfigLimitError",
    "ConfigLimits",
    "ConstHP",
    "DeviceImages",
    "DeviceVariables",
    "DirectoryConfig",
    "DoubleHP",
    "EnvironmentConfig",
    "ExperimentConfig",
    "Hyperparameter",
    "IntHP",
    "Length",
    "LengthUnit",
    "LogHP",
    "Problem",
    "ReproducibilityConfig",
    "ResourcesConfig",
    "S3Config",
    "SearcherConfig",
    "SharedFSConfig",
    "TaskConfig",
    "error_problems",
    "fail",
    "grid_hparams",
    "load_yaml",
    "loc_to_path",
    "merge_config",
    "names_trial_class",
    "overrides_from",
    "parse_command_config",
    "parse_duration",
    "parse_experiment_config",
    "parse_override",
    "parse_task_config",
    "sample_hparams",
    "validate_section",
]
