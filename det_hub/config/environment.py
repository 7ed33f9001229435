"""The ``environment`` and ``bind_mounts`` sections: the container a trial runs in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator

from det_hub.config._errors import Problem, fail, problems_error
from det_hub.config._model import ConfigModel, absolute_path, not_empty

DEVICE_TYPES = ("cpu", "cuda", "rocm")
Device = Literal["cpu", "cuda", "rocm", "gpu"]


def _per_device(value: Any) -> dict[str, Any]:
    """A single value applies to every device type; ``gpu`` is Determined's older ``cuda``."""
    if isinstance(value, Mapping):
        per_device = dict(value)
        if "gpu" in per_device and "cuda" not in per_device:
            per_device["cuda"] = per_device.pop("gpu")
        return per_device
    return {device: value for device in DEVICE_TYPES}


def _images(value: Any) -> Any:
    if not isinstance(value, (str, Mapping)):
        fail("must be an image name or a mapping with cpu, cuda and rocm")
    return _per_device(value)


def _variable_problems(value: Any, path: str) -> list[Problem]:
    if not isinstance(value, list):
        return [Problem(path, 'must be a list of "NAME=value" strings')]
    problems = []
    for index, item in enumerate(value):
        if not isinstance(item, str):
            problems.append(Problem(f"{path}[{index}]", 'must be a "NAME=value" string'))
        elif "=" not in item or item.startswith("="):
            problems.append(Problem(f"{path}[{index}]", f'must be "NAME=value", got {item!r}'))
    return problems


def _variables(value: Any) -> Any:
    if isinstance(value, Mapping):
        problems = [
            problem
            for device, per_device in value.items()
            if device in (*DEVICE_TYPES, "gpu") and per_device is not None
            for problem in _variable_problems(per_device, str(device))
        ]
    else:
        problems = _variable_problems(value, "")
    if problems:
        raise problems_error(problems)
    return _per_device(value)


class DeviceImages(ConfigModel):
    """The container image for each device type."""

    cpu: str | None = None
    cuda: str | None = None
    rocm: str | None = None


class DeviceVariables(ConfigModel):
    """Environment variables (``"NAME=value"``) for each device type."""

    cpu: list[str] = []
    cuda: list[str] = []
    rocm: list[str] = []


class EnvironmentConfig(ConfigModel):
    """The container environment of a trial.

    ``image`` and ``environment_variables`` are either one value for all device types or a
    mapping with ``cpu``, ``cuda`` and ``rocm``. The remaining keys are passed to the container
    runtime as they are.
    """

    image: Annotated[DeviceImages | None, BeforeValidator(_images)] = None
    environment_variables: Annotated[DeviceVariables, BeforeValidator(_variables)] = (
        DeviceVariables()
    )
    force_pull_image: bool = False
    registry_auth: dict[str, Any] | None = None
    pod_spec: dict[str, Any] | None = None
    add_capabilities: list[str] = []
    drop_capabilities: list[str] = []
    ports: dict[str, Any] | None = None
    proxy_ports: list[Any] | None = None

    def image_for(self, device: Device) -> str | None:
        """The image for ``device``, or None for the cluster's default."""
        if self.image is None:
            return None
        return getattr(self.image, _device(device))

    def variables_for(self, device: Device) -> dict[str, str]:
        """The environment variables for ``device`` as a dict (later duplicates win)."""
        pairs = getattr(self.environment_variables, _device(device))
        return dict(pair.split("=", 1) for pair in pairs)


def _device(device: str) -> str:
    name = "cuda" if device == "gpu" else device
    if name not in DEVICE_TYPES:
        raise ValueError(f"unknown device type {device!r}; expected one of cpu, cuda, rocm")
    return name


class BindMount(ConfigModel):
    """A host directory mounted into the trial's container."""

    host_path: Annotated[str, AfterValidator(absolute_path)]
    container_path: Annotated[str, AfterValidator(not_empty)]
    read_only: bool = False
    propagation: str = "rprivate"
