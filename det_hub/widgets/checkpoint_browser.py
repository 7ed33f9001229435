"""An experiment's checkpoints in a table, to download or load one."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from det_hub.client import Checkpoint, Client
from det_hub.notebook.checkpoint import checkpoint_directory
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
      :attr:`loaded` (a PyTorchTrial's model, else the checkpoint's directory).

    There is no delete button: the master has no API to delete a checkpoint, and removing
    the files behind its back would leave it listing checkpoints that are gone. Registering a
    checkpoint in a model registry is not offered either, as det_hub has no registry.

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
        self.buttons = {
            "download": widgets.Button(description="download", icon="download"),
            "load": widgets.Button(description="load", icon="upload"),
            "refresh": widgets.Button(description="refresh", icon="refresh"),
        }
        self.buttons["download"].on_click(lambda _b: self.download())
        self.buttons["load"].on_click(lambda _b: self.load())
        self.buttons["refresh"].on_click(lambda _b: self.refresh())
        self.select.observe(lambda _: self._enable(), names="value")
        self.status = widgets.HTML()
        self.widget = widgets.VBox([
            self.table, self.select, widgets.HBox([self.directory, *self.buttons.values()]),
            self.status])
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
        self._enable()

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

    def _enable(self) -> None:
        uuid = self.selected
        usable = uuid is not None and self.checkpoints[uuid].state == "COMPLETED"
        for name in ("download", "load"):
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
