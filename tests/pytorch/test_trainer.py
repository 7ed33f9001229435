"""Trainer and PyTorchTrialContext in local mode: exact resume, reproducibility, schedules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from pytorch_trial_defs import NUM_RECORDS, RegressionTrial, regression_data, weights
from torch import nn

from det_hub import pytorch

HPARAMS = {"global_batch_size": 8, "hidden": 16, "lr": 0.05, "dropout": 0.3}
EPOCH = NUM_RECORDS // HPARAMS["global_batch_size"]  # 8 batches


def _train(
    storage: Path,
    seed: int = 7,
    hparams: dict[str, Any] | None = None,
    **fit: Any,
) -> tuple[list[torch.Tensor], RegressionTrial, pytorch.Trainer]:
    exp_conf = {"reproducibility": {"experiment_seed": seed}}
    with pytorch.init(
        hparams=hparams or HPARAMS, exp_conf=exp_conf, checkpoint_storage=storage
    ) as context:
        trial = RegressionTrial(context)
        trainer = pytorch.Trainer(trial, context)
        trainer.fit(**fit)
        return weights(context), trial, trainer


def _checkpoints(storage: Path) -> list[dict[str, Any]]:
    metas = [json.loads(p.read_text()) for p in storage.glob("*/metadata.json")]
    return sorted(metas, key=lambda m: m["steps_completed"])


@pytest.mark.parametrize("lr_mode", ["STEP_EVERY_EPOCH", "STEP_EVERY_BATCH"])
def test_resume_from_checkpoint_is_bit_identical(tmp_path: Path, lr_mode: str) -> None:
    hp = {**HPARAMS, "lr_mode": lr_mode}
    total, split = 21, 11  # neither on an epoch boundary
    straight, ref_trial, _ = _train(tmp_path / "a", hparams=hp, max_length=pytorch.Batch(total))
    # The interrupted run also validates, which must not disturb training's randomness.
    _, first, trainer = _train(
        tmp_path / "b",
        hparams=hp,
        max_length=pytorch.Batch(split),
        validation_period=pytorch.Batch(4),
    )
    uuid = trainer.last_checkpoint
    assert uuid is not None
    assert (tmp_path / "b" / uuid / pytorch.STATE_FILE).exists()
    assert (
        json.loads((tmp_path / "b" / uuid / "metadata.json").read_text())["steps_completed"]
        == split
    )
    resumed, trial, trainer2 = _train(
        tmp_path / "b", hparams=hp, max_length=pytorch.Batch(total), latest_checkpoint=uuid
    )
    assert trainer2.batches_trained == total
    assert len(straight) == len(resumed) == 4
    for a, b in zip(straight, resumed, strict=True):
        assert torch.equal(a, b)
    # Optimizer, scheduler and callback state came back too.
    assert trial.sched.get_last_lr() == ref_trial.sched.get_last_lr()
    assert trial.recorder.epochs_ended == ref_trial.recorder.epochs_ended == total // EPOCH
    m_ref = ref_trial.opt.state_dict()["state"]
    m_res = trial.opt.state_dict()["state"]
    assert all(torch.equal(m_ref[k]["momentum_buffer"], m_res[k]["momentum_buffer"]) for k in m_ref)


def test_same_seed_same_weights_other_seed_other_weights(tmp_path: Path) -> None:
    one, _, _ = _train(tmp_path / "1", seed=3, max_length=pytorch.Batch(10))
    two, _, _ = _train(tmp_path / "2", seed=3, max_length=pytorch.Batch(10))
    other, _, _ = _train(tmp_path / "3", seed=4, max_length=pytorch.Batch(10))
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(one, other, strict=True))


def test_schedule_of_validations_checkpoints_and_lr(tmp_path: Path) -> None:
    _, trial, trainer = _train(
        tmp_path,
        max_length=pytorch.Epoch(2),
        validation_period=pytorch.Batch(5),
        checkpoint_period=pytorch.Epoch(1),
        checkpoint_policy="none",
        reporting_period=pytorch.Batch(4),
        step_zero_validation=True,
    )
    assert trainer.batches_trained == 2 * EPOCH
    validations = [m for kind, m in trial.recorder.events if kind == "validation"]
    assert [m["batches"] for m in validations] == [0, 5, 10, 15, 16]
    assert [m["records"] for m in validations] == [0, 40, 80, 120, 128]
    assert [m["epochs"] for m in validations] == [0, 5 / 8, 10 / 8, 15 / 8, 2]
    assert all(m["validation_loss"] > 0 for m in validations)
    # Periodic checkpoints at each epoch end; the final one is not written twice.
    assert [m["steps_completed"] for m in _checkpoints(tmp_path)] == [8, 16]
    assert trial.recorder.training_losses[0][0] == 4
    assert [b for b, _ in trial.recorder.training_losses] == [4, 8, 12, 16]
    assert trial.sched.get_last_lr() == pytest.approx([0.05 * 0.25])
    # Validation on an unchanged model is exactly the same number.
    assert validations[-1]["validation_loss"] == pytest.approx(
        _direct_validation_loss(trial), rel=1e-6
    )


def _direct_validation_loss(trial: RegressionTrial) -> float:
    data = regression_data(20, 1)
    trial.model.eval()
    with torch.no_grad():
        pred = trial.model(data.tensors[0])
    return float(nn.functional.mse_loss(pred, data.tensors[1]))


def test_checkpoint_policy_best_and_all(tmp_path: Path) -> None:
    conf = {
        "entrypoint": "model_def:T",
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 12}},
        "reproducibility": {"experiment_seed": 1},
        "checkpoint_policy": "all",
        "min_validation_period": {"batches": 3},
    }
    with pytorch.init(hparams=HPARAMS, exp_conf=conf, checkpoint_storage=tmp_path / "all") as ctx:
        trial = RegressionTrial(ctx)
        pytorch.Trainer(trial, ctx).fit()
    assert [m["steps_completed"] for m in _checkpoints(tmp_path / "all")] == [3, 6, 9, 12]
    conf["checkpoint_policy"] = "best"
    with pytorch.init(hparams=HPARAMS, exp_conf=conf, checkpoint_storage=tmp_path / "best") as ctx:
        trial = RegressionTrial(ctx)
        pytorch.Trainer(trial, ctx).fit()
    losses = [m for kind, m in trial.recorder.events if kind == "validation"]
    best_steps, best = [], float("inf")
    for m in losses:
        if m["validation_loss"] < best:
            best = m["validation_loss"]
            best_steps.append(m["batches"])
    expected = sorted(set(best_steps) | {12})
    assert [m["steps_completed"] for m in _checkpoints(tmp_path / "best")] == expected


class _SumMaxTrial(pytorch.PyTorchTrial):
    """Validation over values 0..9 in batches of 4 (the last holds 2) to check reductions."""

    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        super().__init__(context)
        self.model = context.wrap_model(nn.Linear(1, 1))
        self.opt = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.0))

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(torch.arange(10.0).unsqueeze(1), batch_size=4)

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(torch.arange(10.0), batch_size=4)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> torch.Tensor:
        loss = self.model(batch).sum()
        self.context.backward(loss)
        self.context.step_optimizer(self.opt)
        return loss

    def evaluate_batch(self, batch: torch.Tensor) -> dict[str, Any]:
        mean = batch.mean()
        return {"avg": mean, "sum": batch.sum(), "max": batch.max(), "min": batch.min()}

    def evaluation_reducer(self) -> dict[str, pytorch.Reducer]:
        return {"sum": pytorch.Reducer.SUM, "max": pytorch.Reducer.MAX, "min": pytorch.Reducer.MIN}


class _CountReducer(pytorch.MetricReducer):
    def __init__(self) -> None:
        self.count = 0

    def reset(self) -> None:
        self.count = 0

    def per_slot_reduce(self) -> int:
        return self.count

    def cross_slot_reduce(self, per_slot_metrics: Any) -> int:
        return sum(per_slot_metrics)


class _FullDatasetTrial(_SumMaxTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        super().__init__(context)
        self.counter = context.wrap_reducer(_CountReducer(), "train_batches", for_validation=False)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> torch.Tensor:
        self.counter.count += 1  # type: ignore[attr-defined]
        return super().train_batch(batch, epoch_idx, batch_idx)

    evaluate_batch = pytorch.PyTorchTrial.evaluate_batch  # type: ignore[assignment]

    def evaluate_full_dataset(self, data_loader: Any) -> dict[str, Any]:
        return {"total": sum(float(b.sum()) for b in data_loader)}


def test_reducers_weighted_average_and_custom(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    class Grab(pytorch.PyTorchCallback):
        def on_validation_end(self, metrics: dict[str, Any]) -> None:
            seen.update(metrics)

        def on_training_workload_end(self, avg: dict[str, Any], batch: Any) -> None:
            seen["training"] = avg

    with pytorch.init(hparams={}, checkpoint_storage=tmp_path) as ctx:
        trial = _SumMaxTrial(ctx)
        trial.build_callbacks = lambda: {"grab": Grab()}  # type: ignore[method-assign]
        pytorch.Trainer(trial, ctx).fit(max_length=pytorch.Batch(1))
    # Batch means 1.5, 5.5, 8.5 weighted by 4, 4, 2: the mean of 0..9.
    assert seen["avg"] == pytest.approx(4.5)
    assert (seen["sum"], seen["max"], seen["min"]) == (45.0, 9.0, 0.0)
    assert (seen["batches"], seen["records"], seen["epochs"]) == (1, 4, 1 / 3)
    seen.clear()
    with pytorch.init(hparams={}, checkpoint_storage=tmp_path) as ctx:
        trial2 = _FullDatasetTrial(ctx)
        trial2.build_callbacks = lambda: {"grab": Grab()}  # type: ignore[method-assign]
        pytorch.Trainer(trial2, ctx).fit(max_length=pytorch.Batch(3), reporting_period=2)
    assert seen["total"] == 45.0
    assert seen["training"]["train_batches"] == 1  # the period after the report at batch 2


def test_context_api(tmp_path: Path) -> None:
    with pytorch.init(
        hparams={"global_batch_size": 6, "x": 1},
        exp_conf={"data": {"url": "u"}},
        checkpoint_storage=tmp_path,
    ) as ctx:
        assert ctx.get_hparam("x") == 1
        with pytest.raises(ValueError, match="'nope' not found.*global_batch_size, x"):
            ctx.get_hparam("nope")
        assert (ctx.get_global_batch_size(), ctx.get_per_slot_batch_size()) == (6, 6)
        assert ctx.get_data_config() == {"url": "u"}
        assert (ctx.get_trial_id(), ctx.get_experiment_id()) == (0, 0)
        assert ctx.device == torch.device("cpu")
        moved = ctx.to_device({"a": [torch.ones(1)], "b": (torch.zeros(1), 3)})
        assert moved["b"][1] == 3 and moved["a"][0].device.type == "cpu"
        with ctx.autocast():  # CPU: plain float32 unless a dtype is asked for
            assert torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype == torch.float32
        with ctx.autocast(dtype=torch.bfloat16):
            assert torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype == torch.bfloat16
        ctx.set_stop_requested(True)
        assert ctx.get_stop_requested()


def test_stop_requested_checkpoints_and_ends(tmp_path: Path) -> None:
    class StopAtFive(pytorch.PyTorchCallback):
        def __init__(self, ctx: pytorch.PyTorchTrialContext) -> None:
            self.ctx = ctx

        def on_training_workload_end(self, avg: dict[str, Any], batch: Any) -> None:
            if avg["batches"] >= 5:
                self.ctx.set_stop_requested(True)

    conf = {
        "entrypoint": "m:T",
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 50}},
        "scheduling_unit": 5,
    }
    with pytorch.init(hparams=HPARAMS, exp_conf=conf, checkpoint_storage=tmp_path) as ctx:
        trial = RegressionTrial(ctx)
        trial.build_callbacks = lambda: {"stop": StopAtFive(ctx)}  # type: ignore[method-assign]
        trainer = pytorch.Trainer(trial, ctx)
        trainer.fit()
    assert trainer.batches_trained == 5
    assert [m["steps_completed"] for m in _checkpoints(tmp_path)] == [5]


def test_local_fit_needs_a_length(tmp_path: Path) -> None:
    with pytorch.init(hparams=HPARAMS, checkpoint_storage=tmp_path) as ctx:
        trial = RegressionTrial(ctx)
        with pytest.raises(ValueError, match="needs max_length"):
            pytorch.Trainer(trial, ctx).fit()


def test_training_metrics_are_read_once_per_period_and_copied() -> None:
    """Batch metrics stay tensors until the report (one device read per period), yet each is
    a copy: a tensor the trial updates in place later does not change earlier batches."""
    from det_hub.pytorch._batch_metrics import BatchMetrics

    running = torch.zeros(())
    period = BatchMetrics("train_batch()")
    for value in (1.0, 2.0, 3.0):
        running += value
        period.add({"total": running, "lr": 0.5})
    assert len(period) == 3
    assert period.rows() == [
        {"total": 1.0, "lr": 0.5}, {"total": 3.0, "lr": 0.5}, {"total": 6.0, "lr": 0.5}]
    assert period.means() == {"total": 10 / 3, "lr": 0.5}
    loss_only = BatchMetrics("train_batch()")
    loss_only.add(torch.tensor(0.25))
    assert loss_only.rows() == [{"loss": 0.25}]
    with pytest.raises(TypeError, match="'loss' is a tensor of 2 values"):
        BatchMetrics("train_batch()").add({"loss": torch.ones(2)})
    with pytest.raises(TypeError, match=r"train_batch\(\) must return a dict"):
        BatchMetrics("train_batch()").add([1.0])
    with pytest.raises(TypeError, match="'name' has a value of type str"):
        BatchMetrics("train_batch()").add({"name": "x"})


def test_a_loss_is_kept_without_a_copy_and_read_with_the_rest_of_its_period() -> None:
    """The output of an autograd op is held as it is (no device work per batch); views, no-grad
    metrics and other dtypes are copied and read in the same pass, each group with one stack."""
    from det_hub.pytorch._batch_metrics import BatchMetrics

    w = torch.tensor([1.5, 2.0], requires_grad=True)
    loss = (w * w).sum()
    pair = w * 3
    period = BatchMetrics("train_batch()")
    period.add({"loss": loss, "first": pair[0], "count": torch.tensor(7),
                "half": torch.tensor(0.5, dtype=torch.float16)})
    kept = period._columns["loss"].values[0]
    assert kept.data_ptr() == loss.data_ptr()  # the same storage: no copy
    first = period._columns["first"].values[0]
    assert first.data_ptr() != pair.data_ptr()  # a view: copied, its base not held
    assert period.rows() == [{"loss": 6.25, "first": 4.5, "count": 7.0, "half": 0.5}]


def test_batches_that_return_different_metrics_are_each_kept_where_they_were() -> None:
    """A metric some batches leave out is averaged over the batches that gave it, and a
    metric returned in different shapes, dtypes or as plain numbers is read all the same."""
    from det_hub.pytorch._batch_metrics import BatchMetrics

    period = BatchMetrics("train_batch()")
    period.add({"loss": torch.tensor(1.0), "acc": torch.tensor([0.5])})
    period.add({"loss": torch.tensor(3.0, dtype=torch.float64)})
    period.add({"loss": 2.0, "acc": torch.tensor(1, dtype=torch.int64)})
    assert period.rows() == [{"loss": 1.0, "acc": 0.5}, {"loss": 3.0}, {"loss": 2.0, "acc": 1.0}]
    assert period.means() == {"loss": 2.0, "acc": 0.75}
    assert period.columns()["acc"] == ([0, 2], [0.5, 1.0])
    assert BatchMetrics("train_batch()").rows() == []


def test_a_kept_loss_changed_in_place_afterwards_is_refused_by_name() -> None:
    from det_hub.pytorch._batch_metrics import BatchMetrics

    w = torch.tensor(2.0, requires_grad=True)
    loss = w * 2
    period = BatchMetrics("train_batch()")
    period.add({"loss": loss})
    with torch.no_grad():
        loss.add_(1)
    with pytest.raises(RuntimeError, match="'loss' was changed in place"):
        period.means()


def test_a_checkpoint_of_another_trial_is_a_warm_start(tmp_path: Path) -> None:
    """searcher.source_trial_id: weights and optimizer carry over; the position does not."""
    storage = tmp_path / "ckpts"

    def trial_run(trial_id: int, batches: int, source: str | None) -> tuple[Any, Any]:
        exp_conf = {"reproducibility": {"experiment_seed": trial_id}}
        with pytorch.init(hparams=HPARAMS, exp_conf=exp_conf,
                          checkpoint_storage=storage) as context:
            context._trial_id = trial_id
            trial = RegressionTrial(context)
            trainer = pytorch.Trainer(trial, context)
            started: list[list[torch.Tensor]] = []

            class AtStart(pytorch.PyTorchCallback):
                def on_training_start(self) -> None:
                    started.append(weights(context))

            trial.build_callbacks = lambda: {"recorder": trial.recorder,  # type: ignore
                                             "at_start": AtStart()}
            trainer.fit(max_length=pytorch.Batch(batches), latest_checkpoint=source)
            return trainer, (started[0], weights(context))

    source, (_, source_final) = trial_run(1, 10, None)
    warm, (warm_start, _) = trial_run(2, 5, source.last_checkpoint)
    assert warm.batches_trained == 5  # its own count, from zero
    assert all(torch.equal(a, b) for a, b in zip(source_final, warm_start, strict=True))


def test_record_lengths_round_up_to_whole_global_batches(tmp_path: Path) -> None:
    assert pytorch.Record(17).to_batches(EPOCH, 8) == 3
    assert pytorch.Record(16).to_batches(EPOCH, 8) == 2
    with pytest.raises(ValueError, match="global batch size"):
        pytorch.Record(16).to_batches(EPOCH)
    _, _, trainer = _train(tmp_path, max_length=pytorch.Record(20))
    assert trainer.batches_trained == 3


def test_fit_length_wins_over_a_disagreeing_searcher_max_length(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf = {
        "entrypoint": "python3 train.py",  # a script's epoch is its loader's (no records_per_epoch)
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"epochs": 2}},
    }
    with pytorch.init(hparams=HPARAMS, exp_conf=conf, checkpoint_storage=tmp_path) as ctx:
        trainer = pytorch.Trainer(RegressionTrial(ctx), ctx)
        with caplog.at_level("WARNING", logger="det_hub.pytorch"):
            trainer.fit(max_length=pytorch.Batch(3))
    assert trainer.batches_trained == 3
    [warning] = [r.getMessage() for r in caplog.records if "asks for" in r.getMessage()]
    assert "asks for 3 batches" in warning and f"for {2 * EPOCH};" in warning


def test_data_that_runs_out_is_an_error_naming_both_numbers(tmp_path: Path) -> None:
    class ReadOnce:
        """Two batches that can be iterated once only."""

        batch_size = 8

        def __init__(self) -> None:
            data = regression_data(16, 0).tensors
            self._it = iter([(data[0][:8], data[1][:8]), (data[0][8:], data[1][8:])])

        def __len__(self) -> int:
            return 2

        def __iter__(self) -> Any:
            return self._it

    with pytorch.init(hparams=HPARAMS, checkpoint_storage=tmp_path) as ctx:
        trial = RegressionTrial(ctx)
        trial.build_training_data_loader = ReadOnce  # type: ignore[method-assign,assignment]
        trainer = pytorch.Trainer(trial, ctx)
        with pytest.raises(RuntimeError, match="ran out after 2 batches, short of the 5 batches"):
            trainer.fit(max_length=pytorch.Batch(5))
    assert trainer.batches_trained == 2
