"""Runs a trial class: ``python -m det_hub.exec.harness model_def:MNistTrial``.

The master runs this for configs whose ``entrypoint`` names a trial class. It imports the
class from the working directory (the unpacked context), builds its context from the cluster
info (hyperparameters, config, the checkpoint to resume from) and trains it with
:class:`det_hub.pytorch.Trainer`, following the searcher's operations.

Outside a cluster, ``--config`` names an experiment config: hyperparameters are drawn from
its space with its seed and training runs to its ``searcher.max_length``, checkpointing into
``--checkpoint-dir``.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from det_hub.pytorch import EntrypointError, load_trial_class

EXIT_OK = 0
EXIT_TRAINING_FAILED = 1
EXIT_BAD_ENTRYPOINT = 2

logger = logging.getLogger("det_hub.exec.harness")


def _local_settings(config_path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    from det_hub.config import parse_experiment_config, sample_hparams

    config = parse_experiment_config(Path(config_path).read_text("utf-8"))
    seed = config.reproducibility.experiment_seed or 0
    hparams = sample_hparams(config.hyperparameters, random.Random(seed))
    exp_conf = config.to_dict()
    exp_conf.setdefault("reproducibility", {})["experiment_seed"] = seed
    return hparams, exp_conf


def run(
    entrypoint: str,
    *,
    config_path: str | None = None,
    checkpoint_dir: str | None = None,
    test_mode: bool = False,
) -> None:
    """Import and train the trial class ``entrypoint``.

    Raises:
        EntrypointError: The class cannot be loaded.
    """
    from det_hub import core, pytorch

    trial_class = load_trial_class(entrypoint)
    in_cluster = core.get_cluster_info() is not None
    hparams: dict[str, Any] | None = None
    exp_conf: dict[str, Any] | None = None
    if not in_cluster:
        if config_path is None:
            raise ValueError("outside a cluster the harness needs --config EXPERIMENT.yaml")
        hparams, exp_conf = _local_settings(config_path)
    distributed = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        distributed = core.DistributedContext.from_torch_distributed()
    try:
        with pytorch.init(
            hparams=hparams,
            exp_conf=exp_conf,
            distributed=distributed,
            checkpoint_storage=None if in_cluster else (checkpoint_dir or "checkpoints"),
        ) as context:
            trial = trial_class(context)
            pytorch.Trainer(trial, context).fit(test_mode=test_mode)
    finally:
        if distributed is not None:
            distributed.close()


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m det_hub.exec.harness", description="Train a det_hub PyTorchTrial class."
    )
    parser.add_argument("entrypoint", help="the trial class, as module:TrialClass")
    parser.add_argument("--config", help="experiment config, for runs outside a cluster")
    parser.add_argument(
        "--checkpoint-dir", help="where checkpoints go outside a cluster (default ./checkpoints)"
    )
    parser.add_argument(
        "--test", action="store_true", help="train one batch, validate and checkpoint"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        run(
            args.entrypoint,
            config_path=args.config,
            checkpoint_dir=args.checkpoint_dir,
            test_mode=args.test,
        )
    except EntrypointError as exc:
        print(f"det_hub.exec.harness: {exc}", file=sys.stderr)
        return EXIT_BAD_ENTRYPOINT
    except Exception:
        print(
            f"det_hub.exec.harness: trial {args.entrypoint!r} failed:\n{traceback.format_exc()}",
            file=sys.stderr,
        )
        return EXIT_TRAINING_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
