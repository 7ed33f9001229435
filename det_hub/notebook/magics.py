"""The ``%det_experiment`` line magic and ``%%det_experiment`` cell magic.

Load them with ``%load_ext det_hub``. They reach the master named by ``DET_HUB_MASTER`` with
the token in ``DET_HUB_TOKEN`` (the hub sets both in the notebook servers it starts), as the
``det-hub`` CLI does.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, line_cell_magic, magics_class

from det_hub.client import Client, Experiment
from det_hub.config import merge_config
from det_hub.console import config_overrides, read_config, read_config_mapping
from det_hub.notebook import _args, _cell
from det_hub.notebook._errors import USER_ERRORS, report_error
from det_hub.notebook._follow import follow_experiment, print_logs
from det_hub.notebook._views import ExperimentList, ExperimentView

_ACTIONS: dict[str, Callable[[Client, int], Experiment]] = {
    "pause": Client.pause_experiment,
    "activate": Client.activate_experiment,
    "kill": Client.kill_experiment,
}


@magics_class
class ExperimentMagics(Magics):
    """``%det_experiment VERB ...`` and ``%%det_experiment [CONFIG] [options]``.

    Line magic verbs::

        %det_experiment create CONFIG [CONTEXT] [--follow] [--config KEY=VALUE] [--name N] [--paused]
        %det_experiment list [--all] [--archived] [--state STATE] [--limit N]
        %det_experiment describe ID
        %det_experiment watch ID
        %det_experiment pause|activate|kill ID
        %det_experiment logs TRIAL [-f]

    The cell magic submits the cell's code as the experiment's entrypoint::

        %%det_experiment [CONFIG] [--name N] [--hparam NAME=VALUE ...] [--context DIR]
                         [--metric M] [--max-length BATCHES] [--config KEY=VALUE] [--follow]

    Errors the user can fix (a bad config or argument, an unknown id, an unreachable master)
    are printed as one message, and the magic returns None.
    """

    def __init__(self, shell: InteractiveShell | None = None) -> None:
        super().__init__(shell)
        self._line_parser = _args.line_parser()
        self._cell_parser = _args.cell_parser()

    @line_cell_magic
    def det_experiment(self, line: str, cell: str | None = None) -> Any:
        """Submit, list, show and control det_hub experiments (``%det_experiment --help``)."""
        try:
            if cell is None:
                return self._run_line(_args.parse(self._line_parser, line))
            return self._run_cell(_args.parse(self._cell_parser, line), cell)
        except _args.HelpShown:
            return None
        except USER_ERRORS as error:
            report_error(error)
            return None

    # -- line magic ---------------------------------------------------------------------

    def _run_line(self, args: argparse.Namespace) -> Any:
        verb: str = args.verb
        with Client() as client:
            if verb == "create":
                # As ``det-hub experiment create``: the file as written, unless overridden.
                config: str | dict[str, Any] = read_config(args.config)
                overrides = config_overrides(args)
                if overrides:
                    config = merge_config(read_config_mapping(args.config), overrides)
                return self._create(client, args, config, args.context)
            if verb == "list":
                owner = None if args.all else client.me().username
                listing = client.list_experiments(
                    state=args.state, archived=None if args.archived else False, owner=owner,
                    limit=args.limit)
                return ExperimentList.of(listing)
            if verb == "describe":
                experiment = client.get_experiment(args.id)
                return ExperimentView.of(experiment, client.list_trials(args.id))
            if verb == "watch":
                return self._follow(client, args.id)
            if verb == "logs":
                print_logs(client, args.trial_id, follow=args.follow)
                return None
            return ExperimentView.of(_ACTIONS[verb](client, args.id))

    @staticmethod
    def _create(client: Client, args: argparse.Namespace, config: str | dict[str, Any],
                context: str | Path) -> ExperimentView:
        """Submits the experiment, and follows it with ``--follow``."""
        experiment = client.create_experiment(config, context, activate=not args.paused,
                                              name=args.name)
        print(f"Created experiment {experiment.id}", flush=True)
        if args.follow:
            return ExperimentMagics._follow(client, experiment.id)
        return ExperimentView.of(experiment)

    @staticmethod
    def _follow(client: Client, experiment_id: int) -> ExperimentView:
        experiment = follow_experiment(client, experiment_id)
        return ExperimentView.of(experiment, client.list_trials(experiment_id))

    # -- cell magic ---------------------------------------------------------------------

    def _run_cell(self, args: argparse.Namespace, cell: str) -> ExperimentView:
        base = read_config_mapping(args.config) if args.config else None
        config = _cell.cell_config(base, cell, hparams=_cell.parse_hparams(args.hparams),
                                   metric=args.metric, max_length=args.max_length)
        config = merge_config(config, config_overrides(args))
        with Client() as client, tempfile.TemporaryDirectory(prefix="det_hub_cell_") as tmp:
            context = _cell.write_context(args.context or ".", cell, Path(tmp))
            return self._create(client, args, config, context)


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """Registers the magics; IPython calls this for ``%load_ext det_hub``."""
    ipython.register_magics(ExperimentMagics)
