"""Which host paths a user's tasks may have mounted: the rule every agent kind relies on.

A task sees host paths through its checkpoint storage (``shared_fs``'s ``host_path``) and its
``bind_mounts``. Both are refused where they would show the master's private paths (its data
directory, its configuration and keys) to the task, with one exception: a user's own default
checkpoint directory, ``<data dir>/checkpoints/<username>``, which the master makes for them.
(The master also gives each task its owner's data cache, ``<data dir>/caches/<username>``,
itself; a config cannot name it.)
A path that holds a private path (``/``, the master's home) is refused as well, since mounting
it would show what it holds.

The check is pure: paths are compared as given after normalisation, and the caller resolves
symbolic links first where it can (:func:`resolved`).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: The folder of the data directory that holds each user's default checkpoint directory.
CHECKPOINTS = "checkpoints"
#: The folder of the data directory that holds each user's data cache (DET_HUB_DATA_CACHE).
CACHES = "caches"


def owner_dir(data_dir: Path, kind: str, username: str) -> Path:
    """A user's own directory of a kind (:data:`CHECKPOINTS`, :data:`CACHES`):
    ``<data dir>/<kind>/<username>``."""
    if not username or "/" in username or username in (".", ".."):
        raise ValueError(f"{username!r} cannot name a directory")
    return data_dir / kind / username


def owner_checkpoint_dir(data_dir: Path, username: str) -> Path:
    """A user's default checkpoint storage: ``<data dir>/checkpoints/<username>``."""
    return owner_dir(data_dir, CHECKPOINTS, username)


def resolved(path: str) -> str:
    """``path`` with its symbolic links resolved, as far as it exists."""
    return os.path.realpath(path)


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def mount_problem(host_path: str, *, private: Sequence[str], allowed: str) -> str | None:
    """Why a task may not have ``host_path`` mounted, or None when it may.

    Args:
        host_path: an absolute, resolved host path.
        private: the master's private paths, resolved.
        allowed: the one path inside them the task may have (its owner's checkpoint
            directory), resolved.
    """
    path = posixpath.normpath(host_path)
    if not posixpath.isabs(path):
        return f"{host_path} is not an absolute path"
    if _within(path, allowed):
        return None
    for secret in private:
        if _within(path, secret):
            return f"{host_path} is inside the master's private {secret}"
        if _within(secret, path):
            return f"{host_path} holds the master's private {secret}"
    return None


def path_problems(config: Mapping[str, Any], *, private: Sequence[str],
                  allowed: str) -> list[dict[str, str]]:
    """The config paths (``checkpoint_storage.host_path``, ``bind_mounts[i].host_path``) that
    would show a task what it may not see, as ``{"path", "message"}`` problems."""
    problems = []
    storage = config.get("checkpoint_storage") or {}
    if storage.get("type") == "shared_fs" and storage.get("host_path"):
        why = mount_problem(resolved(str(storage["host_path"])), private=private,
                            allowed=allowed)
        if why:
            problems.append({"path": "checkpoint_storage.host_path", "message": (
                f"{why}; tasks may not mount it (leave checkpoint_storage out for your own "
                f"directory, {allowed})")})
    for i, mount in enumerate(config.get("bind_mounts") or ()):
        host = mount.get("host_path") if isinstance(mount, Mapping) else None
        if not host:
            continue
        why = mount_problem(resolved(str(host)), private=private, allowed=allowed)
        if why:
            problems.append({"path": f"bind_mounts[{i}].host_path",
                             "message": f"{why}; tasks may not mount it"})
    return problems


__all__ = ["CACHES", "CHECKPOINTS", "mount_problem", "owner_checkpoint_dir", "owner_dir",
           "path_problems", "resolved"]
