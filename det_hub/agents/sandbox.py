"""The local agent's sandbox: each task runs inside bubblewrap (``bwrap``).

A sandboxed task has a process-id namespace of its own (its ``/proc`` shows its own processes
and nothing else), its own System V IPC, a fresh ``/dev`` with a private ``/dev/shm``, and a
file system assembled from a short list: the system's directories and the task's Python
read-only, then the task's own directories writable and the paths its experiment may use.
Nothing else of the host is there: not the master's data directory, not other tasks'
directories, not the Docker socket. Where the master runs as root, ``bwrap`` runs privileged
and the task drops to its Unix identity with ``setpriv`` before anything of the user's runs;
otherwise ``bwrap`` makes an unprivileged user namespace and the task keeps the master's
account, which the namespaces fence in.

:func:`bwrap_argv` turns a :class:`SandboxLayout` into bwrap's arguments, looking only at which
of the listed paths exist, so a layout is tested without running anything. :func:`probe` asks
whether bwrap can run here.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath

#: Where the system's programs and libraries live; each is bound read-only where it exists.
SYSTEM_PATHS = ("/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                "/sys")


@dataclasses.dataclass(frozen=True)
class Mount:
    """A host path shown at ``dest`` in the sandbox (the same path unless given)."""

    source: str
    dest: str = ""
    writable: bool = False

    @property
    def target(self) -> str:
        return self.dest or self.source


@dataclasses.dataclass(frozen=True)
class SandboxLayout:
    """What one task's sandbox holds.

    Attributes:
        read_only: host paths shown read-only at the same path (the system, the task's Python).
        hidden: paths inside ``read_only`` ones that show empty (the master's data directory,
            its configuration and keys, where they would otherwise show): a directory as an
            empty one, a file as an empty file.
        mounts: the task's own paths, in order: its directories (writable), its files and the
            storage and data its experiment names.
        tmp: the host directory that is the task's ``/tmp`` and ``/var/tmp``.
        workdir: the directory the task starts in.
        devices: device nodes passed through (a GPU slot's ``/dev/nvidia*``).
    """

    read_only: Sequence[str]
    mounts: Sequence[Mount]
    tmp: str
    workdir: str
    hidden: Sequence[str] = ()
    devices: Sequence[str] = ()


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def minimal_paths(paths: Iterable[str]) -> list[str]:
    """The absolute, normalised paths with those inside another one left out, sorted."""
    normal = sorted({os.path.normpath(p) for p in paths if p and os.path.isabs(p)})
    kept: list[str] = []
    for p in normal:
        if not any(_inside(p, k) for k in kept):
            kept.append(p)
    return kept


def bwrap_argv(layout: SandboxLayout, *, bwrap: str = "bwrap") -> list[str]:
    """bwrap's command line for ``layout``, up to and including the ``--`` before the command.

    Directories on the way to a mount that the sandbox would not otherwise have are made 0755,
    so that a task under another uid reaches its mounts (bwrap makes them 0700).
    """
    argv = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-cgroup-try",
            "--die-with-parent"]
    ro = minimal_paths(layout.read_only)
    hidden = [h for h in minimal_paths(layout.hidden) if any(_inside(h, r) for r in ro)]
    present: set[str] = {"/"}

    def exists(path: str) -> bool:
        return path in present or (any(_inside(path, r) for r in ro)
                                   and not any(_inside(path, h) for h in hidden))

    def parents(dest: str) -> None:
        for parent in reversed(PurePosixPath(dest).parents):
            if not exists(str(parent)):
                argv.extend(["--perms", "0755", "--dir", str(parent)])
                present.add(str(parent))

    # The task's /tmp first: what is bound below it later (a Python or a checkout kept under
    # /tmp) then shows on top of it instead of being hidden by it.
    for dest in ("/tmp", "/var/tmp"):
        parents(dest)
        argv.extend(["--bind", layout.tmp, dest])
        present.add(dest)
    for path in ro:
        if os.path.islink(path):
            argv.extend(["--symlink", os.readlink(path), path])
        elif os.path.exists(path):
            parents(path)
            argv.extend(["--ro-bind", path, path])
        present.add(path)
    for path in hidden:
        if os.path.isdir(path):
            argv.extend(["--perms", "0755", "--tmpfs", path])
        else:  # a file (a config, a key): an empty one in its place
            argv.extend(["--ro-bind", "/dev/null", path])
        present.add(path)
    argv.extend(["--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm", "--proc", "/proc"])
    present.update(("/dev", "/dev/shm", "/proc"))
    for device in layout.devices:
        argv.extend(["--dev-bind", device, device])
    for mount in layout.mounts:
        parents(mount.target)
        argv.extend(["--bind" if mount.writable else "--ro-bind", mount.source, mount.target])
        present.add(mount.target)
    argv.extend(["--chdir", layout.workdir, "--"])
    return argv


def drop_privileges_argv(uid: int, gid: int, *, setpriv: str = "setpriv") -> list[str]:
    """The command that becomes ``uid:gid`` with no supplementary groups, no capabilities and
    no way back (no setuid program regains root), then runs what follows it."""
    if uid == 0 or gid == 0:
        raise ValueError("tasks never run as root")
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--no-new-privs",
            "--inh-caps=-all", "--"]


def probe(bwrap: str = "bwrap") -> str | None:
    """Why bubblewrap cannot sandbox a task here, or None when it can.

    Runs ``bwrap`` once with the namespaces a task gets around ``true``.
    """
    found = shutil.which(bwrap)
    if found is None:
        return f"{bwrap!r} is not installed (Debian's bubblewrap package provides it)"
    true = shutil.which("true") or "/bin/true"
    argv = [found, "--unshare-pid", "--unshare-ipc", "--ro-bind", "/", "/", "--dev", "/dev",
            "--proc", "/proc", "--", true]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{found} does not run: {e}"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip() or f"exit code {done.returncode}"
        hint = "" if os.geteuid() == 0 else (
            " (unprivileged user namespaces may be disabled: sysctl "
            "kernel.unprivileged_userns_clone or user.max_user_namespaces)")
        return f"{found} cannot make a sandbox: {why}{hint}"
    return None


__all__ = ["SYSTEM_PATHS", "Mount", "SandboxLayout", "bwrap_argv", "drop_privileges_argv",
           "minimal_paths", "probe"]
