"""What the ``det-hub`` CLI and the notebook magics share: how they show things
(:mod:`det_hub.console.render`), the :class:`UserError` they report without a traceback,
reading configs and ``--config`` overrides, and the trials table.

Both front ends import from here and neither imports the other::

    from det_hub.console import UserError, read_config
    from det_hub.console import render as r

    r.print_table(["ID", "State"], [[1, "COMPLETED"]])

It sits on the SDK (:mod:`det_hub.client`) and the config parser (:mod:`det_hub.config`) only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from det_hub._lazy import lazy_exports

# Imported on first use (PEP 562): a command that prints a table loads the renderer, not the
# config parser (pydantic, yaml) that reading a config needs. Type checkers read these imports.
if TYPE_CHECKING:
    from det_hub.console import render
    from det_hub.console.configs import config_overrides, read_config, read_config_mapping
    from det_hub.console.errors import UserError
    from det_hub.console.render import format_log_line
    from det_hub.console.trials import best_trial, trial_rows

#: Each public name, by the module (of this package) it comes from; ``render`` is one itself.
_EXPORTS: dict[str, str] = {
    "render": "render",
    "config_overrides": "configs",
    "read_config": "configs",
    "read_config_mapping": "configs",
    "UserError": "errors",
    "format_log_line": "render",
    "best_trial": "trials",
    "trial_rows": "trials",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "UserError",
    "best_trial",
    "config_overrides",
    "format_log_line",
    "read_config",
    "read_config_mapping",
    "render",
    "trial_rows",
]
