"""What the ``det-hub`` CLI and the notebook magics share: how they show things
(:mod:`det_hub.console.render`), the :class:`UserError` they report without a traceback,
reading configs and ``--config`` overrides, and the trials table.

Both front ends import from here and neither imports the other::

    from det_hub.console import UserError, read_config
    from det_hub.console import render as r

    r.print_table(["ID", "State"], [[1, "COMPLETED"]])

It sits on the SDK (:mod:`det_hub.client`) and the config parser (:mod:`det_hub.config`) only.
"""

from det_hub.console import render
from det_hub.console.configs import config_overrides, read_config, read_config_mapping
from det_hub.console.errors import UserError
from det_hub.console.render import format_log_line
from det_hub.console.trials import best_trial, trial_rows

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
