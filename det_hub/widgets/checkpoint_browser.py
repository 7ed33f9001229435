"""An experiment's checkpoints in a table, to download, load, delete or register one."""

from __future__ import annotations

import contextlib
import html
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from det_hub.client import (
    Checkpoint,
    Client,
    DetHubError,
    MasterError,
    Model,
    ModelVersion,
    checkpoint_directory,
)
from det_hub.widgets._common import client_or_default, format_number, html_table


class CheckpointBrowser:
    """A widget listing an experiment's checkpoints, newest first, with actions on one.

    The table shows each checkpoint's trial, steps completed, state, size and the validation
    metrics its trial reported at those steps (blank when it validated elsewhere). Checkpoints
    the master's retention policy has deleted stay listed, as ``DELETED``. Select a completed
    checkpoint, then:

    * **download** copies its files to ``<directory>/<uuid>``, the directory being the one
      typed in the text field;
    * **load** calls :func:`det_hub.load_checkpoint` and keeps what it returns in
      :attr:`loaded` (a PyTorchTrial's model, else the checkpoint's directory);
    * **delete** asks first, in a row that appears below the buttons; **yes, delete** then
      has the master delete the checkpoint's files (it stays listed, as ``DELETED``). The
      master refuses a checkpoint a model version names, and the latest checkpoint of a
      trial that can still run; the reason is shown;
    * **register** registers it as the next version of the model named in the ``model``
      field (pick one of the registry's or type a new name: a missing model is created).

    Args:
        experiment_id: the experiment.
        client: the master's client; one from the environment by default.

    :attr:`rows` holds one dict per checkpoint (``uuid``, ``trial_id``, ``steps_completed``,
    ``state``, ``size``, ``metrics``); :attr:`message` the outcome of the last action.
    """

    def __init__(self, experiment_id: int, client: Client | None = None) -> None:
        self.client = client_or_default(client)
        self.experiment_id = int(experiment_id)
        self.rows: list[dict[str, Any]] = []
        self.checkpoints: dict[str, Checkpoint] = {}
        self.loaded: Any = None
        self.message = ""

        self.table = widgets.HTML()
        self.select = widgets.Select(description="checkpoint", options=[], rows=6,
                                     layout={"width": "40em"})
        self.directory = widgets.Text(value="checkpoints", description="directory")
        self.model_name = widgets.Combobox(description="model", placeholder="model name",
                                           ensure_option=False)
        self.buttons = {
            "download": widgets.Button(description="download", icon="download"),
            "load": widgets.Button(description="load", icon="upload"),
            "delete": widgets.Button(description="delete", icon="trash",
                                     button_style="danger"),
            "register": widgets.Button(description="register", icon="bookmark"),
            "refresh": widgets.Button(description="refresh", icon="refresh"),
        }
        self.buttons["download"].on_click(lambda _b: self.download())
        self.buttons["load"].on_click(lambda _b: self.load())
        self.buttons["delete"].on_click(lambda _b: self.ask_delete())
        self.buttons["register"].on_click(lambda _b: self.register())
        self.buttons["refresh"].on_click(lambda _b: self.refresh())
        # The confirm step of a deletion: hidden until delete is pressed.
        self.question = widgets.HTML()
        self.confirm_buttons = {
            "yes": widgets.Button(description="yes, delete", button_style="danger"),
            "no": widgets.Button(description="cancel"),
        }
        self.confirm_buttons["yes"].on_click(lambda _b: self.delete())
        self.confirm_buttons["no"].on_click(lambda _b: self.cancel_delete())
        self.confirm = widgets.HBox([self.question, *self.confirm_buttons.values()],
                                    layout={"display": "none"})
        #: The uuid the confirm row asks about, while it is shown.
        self.pending_delete: str | None = None
        self.select.observe(lambda _: self._on_select(), names="value")
        self.status = widgets.HTML()
        self.widget = widgets.VBox([
            self.table, self.select,
            widgets.HBox([self.directory, self.buttons["download"], self.buttons["load"],
                          self.buttons["delete"], self.buttons["refresh"]]),
            widgets.HBox([self.model_name, self.buttons["register"]]),
            self.confirm, self.status])
        self.refresh()

    @property
    def selected(self) -> str | None:
        """The uuid of the selected checkpoint."""
        value = self.select.value
        return str(value) if value else None

    def refresh(self) -> None:
        """Read the checkpoints and their trials' validation metrics, and redraw."""
        checkpoints = list(self.client.list_checkpoints(self.experiment_id))
        validations: dict[int, dict[int, dict[str, Any]]] = {}
        for trial_id in sorted({c.trial_id for c in checkpoints}):
            validations[trial_id] = {
                r.steps_completed: r.metrics
                for r in self.client.trial_metrics(trial_id, group="validation")}
        self.checkpoints = {c.uuid: c for c in checkpoints}
        self.rows = [{"uuid": c.uuid, "trial_id": c.trial_id,
                      "steps_completed": c.steps_completed, "state": c.state, "size": c.size,
                      "metrics": validations[c.trial_id].get(c.steps_completed, {})}
                     for c in checkpoints]
        self.table.value = html_table(
            ["uuid", "trial", "steps", "state", "size", "validation metrics"],
            [[r["uuid"], r["trial_id"], r["steps_completed"], r["state"], _size(r["size"]),
              ", ".join(f"{k}={format_number(v)}" for k, v in sorted(r["metrics"].items()))]
             for r in self.rows])
        chosen = self.select.value
        self.select.options = [
            (f"trial {r['trial_id']} at {r['steps_completed']} steps: {r['uuid']}", r["uuid"])
            for r in self.rows]
        uuids = [r["uuid"] for r in self.rows]
        self.select.value = chosen if chosen in uuids else (uuids[0] if uuids else None)
        self._refresh_models()
        self._enable()

    def _refresh_models(self) -> None:
        """Offer the registry's unarchived models in the model field."""
        try:
            models = self.client.list_models(archived=False, limit=1000)
        except DetHubError:
            return  # the field still takes a typed name
        self.model_name.options = [m.name for m in models]

    def download(self) -> Path | None:
        """Copy the selected checkpoint's files to ``<directory>/<uuid>``; returns that
        directory, or None if the copy failed (the reason is in :attr:`message`)."""
        uuid = self._usable("download")
        if uuid is None:
            return None
        target = Path(self.directory.value.strip() or ".").expanduser() / uuid
        self._say(f"downloading {uuid} to {target} ...")
        try:
            found = checkpoint_directory(self.checkpoints[uuid], target)
        except (OSError, ValueError) as error:
            self._say(f"download: {error}")
            return None
        self._say(f"downloaded {uuid} to {found}")
        return found

    def load(self) -> Any:
        """Load the selected checkpoint with :func:`det_hub.load_checkpoint` into
        :attr:`loaded`, and return it (None if loading failed; see :attr:`message`)."""
        from det_hub import load_checkpoint

        uuid = self._usable("load")
        if uuid is None:
            return None
        self._say(f"loading {uuid} ...")
        try:
            self.loaded = load_checkpoint(uuid, client=self.client)
        except Exception as error:  # the trial's own code runs here and may raise anything
            self._say(f"load: {type(error).__name__}: {error}")
            return None
        what = type(self.loaded).__name__
        self._say(f"loaded {uuid}: {what} {self.loaded}" if isinstance(self.loaded, Path)
                  else f"loaded {uuid}: {what}")
        return self.loaded

    def ask_delete(self) -> None:
        """Show the confirm step for deleting the selected checkpoint."""
        uuid = self._usable("delete")
        if uuid is None:
            return
        self.pending_delete = uuid
        self.question.value = html.escape(f"Delete the files of checkpoint {uuid}?")
        self.confirm.layout.display = "flex"

    def cancel_delete(self) -> None:
        """Hide the confirm step; nothing is deleted."""
        self._hide_confirm()
        self._say("delete: canceled")

    def delete(self) -> bool:
        """Delete the checkpoint the confirm step asks about (shown by :meth:`ask_delete`)
        and redraw; returns whether it was deleted (the reason when not is in
        :attr:`message`)."""
        uuid = self.pending_delete
        self._hide_confirm()
        if uuid is None:
            self._say("delete: press delete first, then confirm")
            return False
        try:
            self.checkpoints[uuid].delete()
        except DetHubError as error:
            self._say(f"delete: {error}")
            return False
        self.refresh()
        self._say(f"deleted {uuid}")
        return True

    def _hide_confirm(self) -> None:
        self.pending_delete = None
        self.confirm.layout.display = "none"

    def register(self) -> ModelVersion | None:
        """Register the selected checkpoint as the next version of the model named in the
        model field, creating the model when there is none of that name; returns the
        :class:`~det_hub.client.ModelVersion`, or None (the reason is in :attr:`message`)."""
        uuid = self._usable("register")
        if uuid is None:
            return None
        name = self.model_name.value.strip()
        if not name:
            self._say("register: type a model name, or pick one")
            return None
        created: Model | None = None
        try:
            try:
                model = self.client.get_model(name)
            except MasterError as error:
                if error.status != 404:
                    raise
                model = created = self.client.create_model(name)
            version = model.register_version(uuid)
        except DetHubError as error:
            if created is not None:
                # A refused registration leaves no empty model behind.
                with contextlib.suppress(DetHubError):
                    created.delete()
            self._say(f"register: {error}")
            return None
        self._refresh_models()
        self._say(f"registered {uuid} as {'new model ' if created else ''}{model.name} "
                  f"version {version.version}")
        return version

    def _usable(self, action: str) -> str | None:
        """The selected checkpoint's uuid if its files are there to use; else None, with
        the reason said."""
        uuid = self.selected
        if uuid is None:
            self._say(f"{action}: no checkpoint selected")
            return None
        state = self.checkpoints[uuid].state
        if state != "COMPLETED":
            self._say(f"{action}: checkpoint {uuid} is {state}, its files are not there to use")
            return None
        return uuid

    def _on_select(self) -> None:
        # A confirm step is for the checkpoint it names; choosing another one withdraws it.
        if self.pending_delete is not None and self.pending_delete != self.selected:
            self._hide_confirm()
        self._enable()

    def _enable(self) -> None:
        uuid = self.selected
        usable = uuid is not None and self.checkpoints[uuid].state == "COMPLETED"
        for name in ("download", "load", "delete", "register"):
            self.buttons[name].disabled = not usable

    def _say(self, message: str) -> None:
        self.message = message
        self.status.value = html.escape(message)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def _size(size: int) -> str:
    scaled, unit = float(size), "B"
    for bigger in ("KiB", "MiB", "GiB"):
        if scaled < 1024:
            break
        scaled, unit = scaled / 1024, bigger
    return f"{size} B" if unit == "B" else f"{scaled:.1f} {unit}"
