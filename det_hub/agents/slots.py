"""Slot discovery for a host: its GPUs, or groups of CPU cores when it has none."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class SlotInfo:
    """A slot as the agent knows it.

    ``device`` is the GPU index for ``cuda`` slots; ``cpus`` the cores a task on this slot is
    pinned to (every core of the host for GPU slots, which do not divide the CPUs); ``uuid`` the
    GPU's UUID where it is known, which names the GPU to a container runtime unambiguously.
    """

    id: int
    kind: str
    device: str = ""
    cpus: tuple[int, ...] = ()
    description: str = ""
    uuid: str = ""


def slot_resources(slots: Sequence[SlotInfo]) -> dict[str, Any]:
    """What a container on these slots gets, as JSON-able data: ``gpus`` (the ids a runtime's
    device request names: UUIDs where known) when they are GPU slots, else ``cpus`` (the cores
    to pin it to), and the ``environment`` that goes with them (``CUDA_VISIBLE_DEVICES``
    numbering the requested GPUs from 0, as the runtime shows them; ``OMP_NUM_THREADS`` on
    CPU slots)."""
    if slots and all(s.kind == "cuda" for s in slots):
        return {"gpus": [s.uuid or s.device for s in slots], "cpus": [], "environment": {
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(slots)))}}
    cpus = sorted({c for s in slots for c in s.cpus})
    return {"gpus": [], "cpus": cpus, "environment": {
        "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": str(max(1, len(cpus)))}}


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    """One GPU as ``nvidia-smi --query-gpu=index,uuid,name`` describes it."""

    index: str
    uuid: str = ""
    name: str = ""


def parse_gpu_query(output: str) -> list[GpuInfo]:
    """Parse ``nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader`` output.

    Lines that do not start with a numeric index (warnings, blank lines) are skipped. The name
    comes last, so a comma inside it does not shift the other fields.
    """
    gpus = []
    for line in output.splitlines():
        fields = [f.strip() for f in line.split(",", 2)]
        if not fields[0].isdigit():
            continue
        uuid = fields[1] if len(fields) > 1 else ""
        name = fields[2] if len(fields) > 2 else ""
        gpus.append(GpuInfo(fields[0], uuid, name))
    return gpus


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


def gpu_slots(gpus: list[GpuInfo], cpus: list[int]) -> list[SlotInfo]:
    """One ``cuda`` slot per GPU; each slot's task may use all of ``cpus``."""
    return [SlotInfo(i, "cuda", device=g.index, cpus=tuple(cpus),
                     description=g.name or f"GPU {g.index}", uuid=g.uuid)
            for i, g in enumerate(gpus)]


def cpu_slots(cpus: list[int], cpu_slot_cores: int = 1) -> list[SlotInfo]:
    """One ``cpu`` slot per ``cpu_slot_cores`` of ``cpus``.

    Cores that do not fill a whole slot are left out rather than making an uneven slot, so
    every CPU slot is worth the same; a host with fewer cores than one slot gets one slot of
    all of them.
    """
    if cpu_slot_cores < 1:
        raise ValueError("cpu_slot_cores must be at least 1")
    groups = [cpus[i:i + cpu_slot_cores] for i in range(0, len(cpus), cpu_slot_cores)]
    groups = [g for g in groups if len(g) == cpu_slot_cores] or [cpus]
    return [SlotInfo(i, "cpu", cpus=tuple(g), description=f"{len(g)} CPU core(s)")
            for i, g in enumerate(groups)]


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
        return gpu_slots([GpuInfo(index, name=name) for index, name in gpus], cpus)
    return cpu_slots(cpus, cpu_slot_cores)
