"""A form to launch an experiment from a config file, its hyperparameters edited first."""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import yaml

from det_hub.client import Client, DetHubError, Experiment, MasterError
from det_hub.config import ConfigError, parse_experiment_config
from det_hub.widgets._common import client_or_default

_RANGES = ("int", "double", "log")
#: The categorical dropdown's choice that keeps every value to search over.
_SEARCH_ALL = "<search all>"


class _Field:
    """The form's part for one hyperparameter, and how to read it back into the config."""

    def __init__(self, path: tuple[str, ...], spec: Any) -> None:
        self.path, self.spec = path, spec
        name = self.name = ".".join(path)
        self.inputs: dict[str, widgets.ValueWidget] = {}
        kind = spec.get("type") if isinstance(spec, Mapping) else None
        if kind in _RANGES:
            box = widgets.IntText if kind == "int" else widgets.FloatText
            for bound in ("minval", "maxval"):
                self.inputs[bound] = box(value=spec.get(bound, 0),
                                         description=bound, layout={"width": "14em"})
        elif kind == "categorical":
            vals = list(spec.get("vals") or [])
            # Pinning one value turns the search over it into a constant.
            self.inputs["val"] = widgets.Dropdown(
                options=[(_SEARCH_ALL, _SEARCH_ALL)] + [(_text(v), i) for i, v in enumerate(vals)],
                value=_SEARCH_ALL, description="value")
        elif kind == "const" or not isinstance(spec, Mapping):
            value = spec.get("val") if kind == "const" else spec
            self.inputs["val"] = _const_input(value)
        # Any other mapping with a type is passed on as written; the config check names it.
        self.label = widgets.HTML(f"<code>{html.escape(name)}</code> "
                                  f"<small>{html.escape(str(kind or 'const'))}</small>")
        self.box = widgets.HBox([self.label, *self.inputs.values()])

    def value(self) -> Any:
        """The hyperparameter as the config should hold it now."""
        spec = self.spec
        kind = spec.get("type") if isinstance(spec, Mapping) else None
        if kind in _RANGES:
            return {**spec, **{k: w.value for k, w in self.inputs.items()}}
        if kind == "categorical":
            chosen = self.inputs["val"].value
            if chosen == _SEARCH_ALL:
                return dict(spec)
            return {"type": "const", "val": spec["vals"][chosen]}
        if "val" not in self.inputs:
            return spec
        entered = self.inputs["val"].value
        if isinstance(self.inputs["val"], widgets.Textarea):
            try:
                entered = yaml.safe_load(entered)
            except yaml.YAMLError:
                raise ValueError(f"hyperparameter {self.name}: the value is not YAML") from None
        return {**spec, "val": entered} if kind == "const" else entered


class ExperimentLauncher:
    """A widget that creates an experiment from one of a directory's YAML configs.

    Pick a config file; the form then shows its hyperparameters: ``int``, ``double`` and
    ``log`` ones as their ``minval`` and ``maxval``, ``categorical`` ones as a dropdown that
    searches all values or pins one, constants as a number, text or checkbox field (YAML text
    for lists and mappings). Nested hyperparameters are named by their dotted path. With the
    name and the context directory, **launch** does what ``det-hub experiment create CONFIG
    CONTEXT`` does with the config so changed: the config is checked here first, then sent.

    Args:
        client: the master's client; one from the environment by default.
        directory: where to look for ``*.yaml`` and ``*.yml`` configs; also the default
            context directory.

    :attr:`launched` holds the created :class:`~det_hub.client.Experiment`, and
    :attr:`message` what became of the last launch (its id, or why it failed).
    """

    def __init__(self, client: Client | None = None, directory: str | Path = ".") -> None:
        self.client = client_or_default(client)
        self.directory = Path(directory).expanduser()
        self.config: dict[str, Any] = {}
        self.fields: list[_Field] = []
        self.launched: Experiment | None = None
        self.message = ""

        self.config_file = widgets.Dropdown(description="config", options=[])
        self.config_file.observe(lambda _: self.load(), names="value")
        self.name = widgets.Text(description="name")
        self.context = widgets.Text(value=str(self.directory), description="context")
        self.hparams = widgets.VBox()
        self.launch_button = widgets.Button(description="launch", icon="rocket",
                                            button_style="primary")
        self.launch_button.on_click(lambda _b: self.launch())
        self.status = widgets.HTML()
        self.widget = widgets.VBox([self.config_file, self.name, self.context,
                                    widgets.HTML("<b>hyperparameters</b>"), self.hparams,
                                    self.launch_button, self.status])
        self.refresh()

    def refresh(self) -> None:
        """List the directory's config files again."""
        files = sorted(p.name for pattern in ("*.yaml", "*.yml")
                       for p in self.directory.glob(pattern) if p.is_file())
        chosen = self.config_file.value
        self.config_file.options = files
        self.config_file.value = chosen if chosen in files else (files[0] if files else None)
        self.load()

    def load(self) -> None:
        """Read the chosen config file and build the form for it."""
        self.config, self.fields = {}, []
        self.hparams.children = ()
        self.launch_button.disabled = True
        if not self.config_file.value:
            self._say(f"no *.yaml config in {self.directory}")
            return
        path = self.directory / self.config_file.value
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            self._say(f"cannot read {path}: {error}")
            return
        if not isinstance(loaded, dict):
            self._say(f"{path} is not a mapping of settings")
            return
        self.config = loaded
        self.name.value = str(loaded.get("name") or "")
        space = loaded.get("hyperparameters") or {}
        self.fields = ([_Field(p, s) for p, s in _leaves(space)]
                       if isinstance(space, Mapping) else [])
        self.hparams.children = [f.box for f in self.fields]
        self.launch_button.disabled = False
        self._say("")

    def edited_config(self) -> dict[str, Any]:
        """The chosen config with the form's name and hyperparameters.

        Raises:
            ValueError: A field holds a value that cannot be read (YAML text that is not).
        """
        config = dict(self.config)
        if self.fields:
            space: dict[str, Any] = {}
            for f in self.fields:
                _put(space, f.path, f.value())
            config["hyperparameters"] = space
        if self.name.value.strip():
            config["name"] = self.name.value.strip()
        return config

    def launch(self) -> Experiment | None:
        """Create the experiment; returns it (also in :attr:`launched`), or None with the
        reason in :attr:`message`."""
        self.launched = None
        if not self.config:
            self._say("launch: no config loaded")
            return None
        try:
            config = self.edited_config()
            parse_experiment_config(config)
        except ConfigError as error:
            self._say("launch: the config is not valid:\n" + str(error))
            return None
        except ValueError as error:
            self._say(f"launch: {error}")
            return None
        context = self.context.value.strip() or None
        self._say("launching ...")
        try:
            self.launched = self.client.create_experiment(config, context)
        except MasterError as error:
            self._say("\n".join([f"launch: {error}", *error.detail_lines()]))
            return None
        except DetHubError as error:
            self._say(f"launch: {error}")
            return None
        self._say(f"launched experiment {self.launched.id} ({self.launched.name})")
        return self.launched

    def _say(self, message: str) -> None:
        self.message = message
        self.status.value = f"<pre>{html.escape(message)}</pre>" if message else ""

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def _leaves(space: Mapping[str, Any],
            prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every hyperparameter of a space with its path of names, nested ones included."""
    found: list[tuple[tuple[str, ...], Any]] = []
    for name, spec in space.items():
        if isinstance(spec, Mapping) and "type" not in spec:
            found.extend(_leaves(spec, (*prefix, str(name))))
        else:
            found.append(((*prefix, str(name)), spec))
    return found


def _put(space: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        space = space.setdefault(part, {})
    space[path[-1]] = value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True)\
        .strip().removesuffix("\n...")


def _const_input(value: Any) -> widgets.ValueWidget:
    layout = {"width": "24em"}
    if isinstance(value, bool):
        return widgets.Checkbox(value=value, description="value", indent=False)
    if isinstance(value, int):
        return widgets.IntText(value=value, description="value", layout=layout)
    if isinstance(value, float):
        return widgets.FloatText(value=value, description="value", layout=layout)
    if isinstance(value, str):
        return widgets.Text(value=value, description="value", layout=layout)
    return widgets.Textarea(value=_text(value), description="value", layout=layout)
