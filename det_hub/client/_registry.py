"""The model registry in the SDK: :class:`Model` and :class:`ModelVersion`.

Both are views of the master's JSON objects like those of :mod:`._objects`, and also act on
the master through the :class:`Client` that read them: their setters send the change and take
the master's answer as their new state, so an object is never ahead of what is stored.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._errors import DetHubError
from ._objects import Checkpoint, Listing, MetricReport, _dict, _int, parse_time

if TYPE_CHECKING:
    from ._client import Client


def _labels(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


@dataclass
class Model:
    """A named model of the registry, whose versions are checkpoints.

    Read one with :meth:`Client.get_model` or make one with :meth:`Client.create_model`::

        model = client.create_model("mnist-cnn", description="digits", labels=["vision"])
        version = model.register_version(trial.latest_checkpoint)
        version.checkpoint.download("weights/")
    """

    id: int
    name: str
    description: str = ""
    labels: list[str] = field(default_factory=list)
    notes: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    owner: str = ""
    creation_time: dt.datetime | None = None
    last_updated_time: dt.datetime | None = None
    archived: bool = False
    num_versions: int = 0
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _client: Client | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any], client: Client | None = None) -> Model:
        """Builds a :class:`Model` from the API's model object."""
        return cls(
            id=_int(data.get("id")),
            name=str(data.get("name") or ""),
            description=str(data.get("description") or ""),
            labels=_labels(data.get("labels")),
            notes=str(data.get("notes") or ""),
            metadata=_dict(data.get("metadata")),
            owner=str(data.get("owner") or ""),
            creation_time=parse_time(data.get("creation_time")),
            last_updated_time=parse_time(data.get("last_updated_time")),
            archived=bool(data.get("archived", False)),
            num_versions=_int(data.get("num_versions")),
            raw=data,
            _client=client,
        )

    def _sdk(self) -> Client:
        if self._client is None:
            raise DetHubError(f"model {self.name!r} was not read through a Client; use "
                              "Client.get_model() to act on it")
        return self._client

    def _take(self, other: Model) -> None:
        """Becomes the master's newer answer about this model."""
        for name in self.__dataclass_fields__:
            if name != "_client":
                setattr(self, name, getattr(other, name))

    def _patch(self, **changes: Any) -> None:
        self._take(self._sdk().update_model(self.name, **changes))

    # -- versions ---------------------------------------------------------------------------

    def register_version(
        self,
        checkpoint: str | Checkpoint,
        *,
        name: str = "",
        comment: str = "",
        notes: str = "",
        labels: Iterable[str] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> ModelVersion:
        """Registers a COMPLETED checkpoint (by uuid, or the object) as the next version.

        The checkpoint is then kept: neither GC nor a deletion removes it while a version
        names it.
        """
        uuid = checkpoint.uuid if isinstance(checkpoint, Checkpoint) else str(checkpoint)
        version = self._sdk().register_model_version(
            self.name, uuid, name=name, comment=comment, notes=notes, labels=labels,
            metadata=metadata)
        self.num_versions += 1
        return version

    def get_version(self, version: int | None = None) -> ModelVersion:
        """Version number ``version``, or the latest (the highest number) when None.

        Raises:
            MasterError: 404 when there is no such version (or none at all).
        """
        return self._sdk().get_model_version(self.name, version)

    def list_versions(self) -> list[ModelVersion]:
        """Every version, newest first."""
        return list(self._sdk().list_model_versions(self.name))

    # -- changes ----------------------------------------------------------------------------

    def set_description(self, description: str) -> None:
        self._patch(description=description)

    def set_notes(self, notes: str) -> None:
        self._patch(notes=notes)

    def set_labels(self, labels: Iterable[str]) -> None:
        """Replaces the labels (duplicates are dropped, order kept)."""
        self._patch(labels=list(labels))

    def add_metadata(self, metadata: Mapping[str, Any]) -> None:
        """Sets these keys of the metadata, keeping the others."""
        self._patch(add_metadata=dict(metadata))

    def remove_metadata(self, keys: Iterable[str]) -> None:
        """Takes these keys out of the metadata."""
        self._patch(remove_metadata=list(keys))

    def rename(self, name: str) -> None:
        """Renames the model; its versions stay."""
        self._patch(name=name)

    def archive(self) -> None:
        """Archives the model: it is read-only, and left out of listings by default."""
        self._take(self._sdk().archive_model(self.name))

    def unarchive(self) -> None:
        self._take(self._sdk().unarchive_model(self.name))

    def delete(self) -> None:
        """Deletes the model and its versions (their checkpoints are kept)."""
        self._sdk().delete_model(self.name)


@dataclass
class ModelVersion:
    """One version of a model: a checkpoint, numbered 1, 2, 3, ... within the model.

    :attr:`checkpoint` is the checkpoint itself, to :meth:`~Checkpoint.download` or to give to
    :func:`det_hub.load_checkpoint` (or use :func:`det_hub.load_model`).
    """

    id: int
    model_name: str
    version: int
    checkpoint: Checkpoint
    model_id: int = 0
    name: str = ""
    comment: str = ""
    notes: str = ""
    labels: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    owner: str = ""
    creation_time: dt.datetime | None = None
    last_updated_time: dt.datetime | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _client: Client | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any], client: Client | None = None) -> ModelVersion:
        """Builds a :class:`ModelVersion` from the API's model version object."""
        checkpoint = _dict(data.get("checkpoint")) or {"uuid": data.get("checkpoint_uuid")}
        return cls(
            id=_int(data.get("id")),
            model_name=str(data.get("model_name") or ""),
            version=_int(data.get("version")),
            checkpoint=Checkpoint.from_json(checkpoint, client),
            model_id=_int(data.get("model_id")),
            name=str(data.get("name") or ""),
            comment=str(data.get("comment") or ""),
            notes=str(data.get("notes") or ""),
            labels=_labels(data.get("labels")),
            metadata=_dict(data.get("metadata")),
            owner=str(data.get("owner") or ""),
            creation_time=parse_time(data.get("creation_time")),
            last_updated_time=parse_time(data.get("last_updated_time")),
            raw=data,
            _client=client,
        )

    @property
    def checkpoint_uuid(self) -> str:
        return self.checkpoint.uuid

    def _sdk(self) -> Client:
        if self._client is None:
            raise DetHubError(f"model {self.model_name!r} version {self.version} was not "
                              "read through a Client; use Model.get_version() to act on it")
        return self._client

    def _patch(self, **changes: Any) -> None:
        newer = self._sdk().update_model_version(self.model_name, self.version, **changes)
        for name in self.__dataclass_fields__:
            if name != "_client":
                setattr(self, name, getattr(newer, name))

    def set_name(self, name: str) -> None:
        self._patch(name=name)

    def set_notes(self, notes: str) -> None:
        self._patch(notes=notes)

    def set_comment(self, comment: str) -> None:
        self._patch(comment=comment)

    def set_labels(self, labels: Iterable[str]) -> None:
        self._patch(labels=list(labels))

    def add_metadata(self, metadata: Mapping[str, Any]) -> None:
        self._patch(add_metadata=dict(metadata))

    def remove_metadata(self, keys: Iterable[str]) -> None:
        self._patch(remove_metadata=list(keys))

    def get_metrics(self, group: str | None = None) -> Listing[MetricReport]:
        """Returns the metric reports of every trial that reported using this version
        (``core_context.experimental.report_task_using_model_version``): trial by trial, each
        in ascending order of steps, each report with its ``trial_id``. ``group`` keeps one
        group (``validation``, ``training``, ...)."""
        return self._sdk().model_version_metrics(self.model_name, self.version, group)

    def delete(self) -> None:
        """Deletes this version; its checkpoint may then be deleted (unless another version
        names it)."""
        self._sdk().delete_model_version(self.model_name, self.version)


@dataclass(frozen=True)
class CheckpointGCResult:
    """The answer of :meth:`Client.checkpoint_gc`.

    Attributes:
        dry_run: Nothing was changed; :attr:`uuids` are what GC would delete.
        policy: The retention settings applied (``save_experiment_best``,
            ``save_trial_best``, ``save_trial_latest``).
        uuids: The checkpoints deleted (or, for a dry run, to delete).
        checkpoints: Those checkpoints, as they were before.
        registered: Checkpoints the policy lets go but a model version keeps.
    """

    dry_run: bool
    policy: dict[str, int]
    uuids: list[str]
    checkpoints: list[Checkpoint]
    registered: list[str]
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any], client: Client | None = None) -> CheckpointGCResult:
        return cls(
            dry_run=bool(data.get("dry_run")),
            policy={str(k): _int(v) for k, v in _dict(data.get("policy")).items()},
            uuids=[str(u) for u in data.get("uuids") or []],
            checkpoints=[Checkpoint.from_json(c, client) for c in data.get("checkpoints") or []
                         if isinstance(c, dict)],
            registered=[str(u) for u in data.get("registered") or []],
            raw=data,
        )


__all__ = ["CheckpointGCResult", "Model", "ModelVersion"]
