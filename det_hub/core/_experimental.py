"""``core_context.experimental``: Determined's experimental Core API calls.

They link the running trial to the checkpoint, or registered model version, that it uses: a
batch-inference trial says which checkpoint it evaluates, and the metrics it reports are then
found from that checkpoint (``Client.get_checkpoint(uuid).get_metrics()``) or model version
(``ModelVersion.get_metrics()``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from det_hub.core._http import MasterSession

if TYPE_CHECKING:
    from det_hub.client import Checkpoint, ModelVersion

logger = logging.getLogger("det_hub.core")


def _checkpoint_uuid(checkpoint: Any) -> str:
    """The uuid of a checkpoint given as an SDK :class:`~det_hub.client.Checkpoint` (or any
    object with a string ``uuid``) or as the uuid itself."""
    uuid = checkpoint if isinstance(checkpoint, str) else getattr(checkpoint, "uuid", None)
    if not isinstance(uuid, str):
        raise TypeError("report_task_using_checkpoint(): give a det_hub.client.Checkpoint "
                        f"or its uuid string, not {type(checkpoint).__name__}")
    if not uuid.strip():
        raise ValueError("report_task_using_checkpoint(): the checkpoint uuid is empty")
    return uuid.strip()


def _model_version_fields(model_version: Any) -> dict[str, Any]:
    """``{"checkpoint_uuid", "model_name", "model_version"}`` of an SDK
    :class:`~det_hub.client.ModelVersion`."""
    checkpoint = getattr(model_version, "checkpoint", None)
    name = getattr(model_version, "model_name", None)
    number = getattr(model_version, "version", None)
    uuid = getattr(checkpoint, "uuid", None)
    if (not isinstance(uuid, str) or not isinstance(name, str) or isinstance(number, bool)
            or not isinstance(number, int)):
        raise TypeError("report_task_using_model_version(): give a det_hub.client.ModelVersion "
                        f"(as Model.get_version() answers), not {type(model_version).__name__}")
    return {"checkpoint_uuid": uuid, "model_name": name, "model_version": number}


class ExperimentalCoreContext:
    """Links the trial to what it uses, so that its metrics are found from there.

    Args:
        session: The master session of the trial (its allocation token).
        trial_id: The trial to link.
    """

    def __init__(self, session: MasterSession, trial_id: int) -> None:
        self._session = session
        self._trial_id = trial_id

    def report_task_using_checkpoint(self, checkpoint: Checkpoint | str) -> None:
        """Say that this trial uses a checkpoint (to evaluate it, say): the metrics the trial
        reports are then among the checkpoint's (``Checkpoint.get_metrics()``). Reporting it
        again changes nothing.

        Args:
            checkpoint: The checkpoint, as ``Client.get_checkpoint()`` answers it, or its
                uuid.

        Raises:
            TypeError: Neither a checkpoint nor a string.
            ValueError: An empty uuid.
            MasterError: The master refused (404: no such checkpoint).
        """
        self._report({"checkpoint_uuid": _checkpoint_uuid(checkpoint)})

    def report_task_using_model_version(self, model_version: ModelVersion) -> None:
        """Say that this trial uses a registered model version: the metrics the trial reports
        are then among the version's (``ModelVersion.get_metrics()``) and among its
        checkpoint's. Reporting it again changes nothing.

        Args:
            model_version: The version, as ``Model.get_version()`` answers it.

        Raises:
            TypeError: Not a model version.
            MasterError: The master refused (404: no such model or version).
        """
        self._report(_model_version_fields(model_version))

    def _report(self, body: dict[str, Any]) -> None:
        # Retried: a link reported twice is stored once.
        self._session.post(f"/trials/{self._trial_id}/source_info", body, retry=True)


class LocalExperimentalCoreContext(ExperimentalCoreContext):
    """``core_context.experimental`` outside a cluster: there is no store to link in, so each
    call only logs what it would have linked, at info level (Determined's does nothing)."""

    def __init__(self) -> None:
        pass

    def report_task_using_checkpoint(self, checkpoint: Checkpoint | str) -> None:
        """Log the checkpoint a trial on a cluster would be linked to."""
        try:
            uuid = _checkpoint_uuid(checkpoint)
        except (TypeError, ValueError):
            uuid = repr(checkpoint)
        logger.info("report_task_using_checkpoint: would link the trial to checkpoint %s "
                    "(not on a cluster: nothing is stored)", uuid)

    def report_task_using_model_version(self, model_version: ModelVersion) -> None:
        """Log the model version a trial on a cluster would be linked to."""
        try:
            fields = _model_version_fields(model_version)
            what = (f"model {fields['model_name']!r} version {fields['model_version']} "
                    f"(checkpoint {fields['checkpoint_uuid']})")
        except TypeError:
            what = repr(model_version)
        logger.info("report_task_using_model_version: would link the trial to %s "
                    "(not on a cluster: nothing is stored)", what)


__all__ = ["ExperimentalCoreContext", "LocalExperimentalCoreContext"]
