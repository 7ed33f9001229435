"""The data directory of ``det-hub master`` and ``det-hub up``: the operator's alone.

It holds the store, the admin token, cookie secrets, logs, the hub's database and password,
task directories and default checkpoint storage, so no other local account may read any of it:
the directory is 0700, and what is made in it is made 0600 (files) or 0700 (directories) from
the start, under the process umask :data:`PRIVATE_UMASK`, never loosened and chmod-ed later.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

#: The umask of the master, ``det-hub up`` and the hub processes it starts.
PRIVATE_UMASK = 0o077
#: The mode of every directory made in the data directory, the data directory included.
DIR_MODE = 0o700
#: The mode of every file made in the data directory.
FILE_MODE = 0o600


def private_umask() -> int:
    """Set the process umask to :data:`PRIVATE_UMASK`; answers the one it replaces."""
    return os.umask(PRIVATE_UMASK)


def _loose(mode: int) -> bool:
    return bool(stat.S_IMODE(mode) & 0o077)


def make_private_dir(path: Path, log: logging.Logger | logging.LoggerAdapter | None = None,
                     ) -> list[str]:
    """Create the data directory ``path`` (mode 0700), or tighten one from an older version.

    An existing directory that others may read or enter is made 0700, and so is each entry
    directly in it that this account owns (files lose their group and other bits); entries
    further down are left to their owners (task directories, checkpoints). A line on ``log``
    says what was tightened.

    Returns:
        What was tightened, as ``"name (was 0755)"``; empty when nothing was.
    """
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    tightened = []
    mode = path.stat().st_mode
    if _loose(mode):
        path.chmod(DIR_MODE)
        tightened.append(f"{path} (was {stat.S_IMODE(mode):04o})")
    uid = os.geteuid()
    for entry in sorted(path.iterdir()):
        info = entry.lstat()
        if info.st_uid != uid or not _loose(info.st_mode):
            continue  # links and others' files are not ours to change
        if stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode):
            entry.chmod(stat.S_IMODE(info.st_mode) & 0o700)
            tightened.append(f"{entry.name} (was {stat.S_IMODE(info.st_mode):04o})")
    if tightened and log is not None:
        log.warning("data directory %s was readable by other accounts; made private: %s",
                    path, ", ".join(tightened))
    return tightened


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, a file made 0600 (an existing file keeps its mode)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def file_mode(path: Path) -> str:
    """The permission bits of ``path`` as ``"0600"``."""
    return f"{stat.S_IMODE(path.stat().st_mode):04o}"


__all__ = ["DIR_MODE", "FILE_MODE", "PRIVATE_UMASK", "file_mode", "make_private_dir",
           "private_umask", "write_private"]
