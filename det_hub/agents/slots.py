"""Slot discovery for a host: its GPUs, or groups of CPU cores when it has none."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess


@dataclasses.dataclass(frozen=True)
class SlotInfo:
    """A slot as the agent knows it.

    ``device`` is the GPU index for ``cuda`` slots; ``cpus`` the cores a task on this slot is
    pinned to (every core of the host for GPU slots, which do not divide the CPUs).
    """

    id: int
    kind: str
    device: str = ""
    cpus: tuple[int, ...] = ()
    description: str = ""


def discover_gpus(nvidia_smi: str = "nvidia-smi") -> list[tuple[str, str]]:
    """``(index, name)`` of each NVIDIA GPU, or an empty list without a driver."""
    exe = shutil.which(nvidia_smi)
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=index,name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        index, _, name = line.partition(",")
        if index.strip().isdigit():
            gpus.append((index.strip(), name.strip()))
    return gpus


def available_cpus() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def discover_slots(*, cpu_slot_cores: int = 1, use_gpus: bool = True) -> list[SlotInfo]:
    """The host's slots: one per GPU, else one per ``cpu_slot_cores`` cores.

    Cores that do not fill a whole slot are left out of the CPU slots rather than making an
    uneven one, so every CPU slot is worth the same.
    """
    if cpu_slot_cores < 1:
        raise ValueError("cpu_slot_cores must be at least 1")
    cpus = available_cpus()
    gpus = discover_gpus() if use_gpus else []
    if gpus:
        return [SlotInfo(i, "cuda", device=index, cpus=tuple(cpus), description=name)
                for i, (index, name) in enumerate(gpus)]
    groups = [cpus[i:i + cpu_slot_cores] for i in range(0, len(cpus), cpu_slot_cores)]
    groups = [g for g in groups if len(g) == cpu_slot_cores] or [cpus]
    return [SlotInfo(i, "cpu", cpus=tuple(g), description=f"{len(g)} CPU core(s)")
            for i, g in enumerate(groups)]
