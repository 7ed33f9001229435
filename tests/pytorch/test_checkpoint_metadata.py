"""The metadata keys Determined's Trainer writes with its checkpoints, written by ours too,
and a checkpoint with them still loads."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from pytorch_trial_defs import RegressionTrial, weights

from det_hub import pytorch
from det_hub.pytorch._checkpoint_state import DETERMINED_VERSION

HPARAMS = {"global_batch_size": 8, "hidden": 16, "lr": 0.05, "dropout": 0.3}


def _train(storage: Path, batches: int, latest: str | None = None) -> tuple[list[torch.Tensor],
                                                                          pytorch.Trainer]:
    with pytorch.init(hparams=HPARAMS, exp_conf={"reproducibility": {"experiment_seed": 3}},
                      checkpoint_storage=storage) as context:
        trainer = pytorch.Trainer(RegressionTrial(context), context)
        trainer.fit(max_length=pytorch.Batch(batches), latest_checkpoint=latest)
        return weights(context), trainer


def test_trainer_checkpoints_carry_determineds_metadata_keys(tmp_path: Path) -> None:
    _, trainer = _train(tmp_path, 5)
    uuid = trainer.last_checkpoint
    assert uuid is not None
    meta = json.loads((tmp_path / uuid / "metadata.json").read_text())
    assert meta["determined_version"] == DETERMINED_VERSION == "0.38.0"
    assert meta["format"] == "pickle"
    assert meta["framework"] == f"torch-{torch.__version__}"
    assert meta["steps_completed"] == 5
    # Loading is unaffected by the extra key: training resumes where it stopped.
    _, resumed = _train(tmp_path, 7, latest=uuid)
    assert resumed.batches_trained == 7
