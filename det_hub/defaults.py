"""The defaults that several layers share, each written down once.

A job's priority, resource pool and slots, and an experiment's checkpoint retention, are
defaulted in the config models, the store's
columns, the master's queue, the agents' and the spawner's settings alike, and the data
directory by the master, ``det-hub up`` and the SDK; they all take the value from here, so
that changing one changes every place that must agree. Values follow Determined's where it has
one.
"""

from __future__ import annotations

#: A job's priority when its config gives none: in the middle of 1 (the most important) to 99
#: (the least), as in Determined.
DEFAULT_PRIORITY = 42

#: The resource pool a job goes to when its config names none (an empty name means it too),
#: the pool an agent serves unless told otherwise, and a pool the master always has.
DEFAULT_RESOURCE_POOL = "default"

#: The slots a trial, a task or a notebook server holds when its config says nothing.
DEFAULT_SLOTS = 1

#: The master's URL when neither the caller nor ``DET_HUB_MASTER`` names one: where
#: ``det-hub master`` listens by default. Read by the SDK and shown in the CLI's help, which
#: takes it from here so that ``det-hub --help`` does not load the SDK.
DEFAULT_MASTER = "http://127.0.0.1:8080"

#: The data directory of ``det-hub master`` and ``det-hub up``, where the SDK looks for a local
#: master's admin token (``DET_HUB_DATA_DIR`` overrides it for the SDK and ``det-hub up``).
DEFAULT_DATA_DIR = "~/.det_hub"

#: How many checkpoints an experiment keeps when its ``checkpoint_storage`` says nothing
#: (Determined's defaults): the best of the experiment, the best of each trial, and each
#: trial's latest (which it resumes from).
RETENTION_DEFAULTS: dict[str, int] = {
    "save_experiment_best": 0, "save_trial_best": 1, "save_trial_latest": 1}

__all__ = ["DEFAULT_DATA_DIR", "DEFAULT_MASTER", "DEFAULT_PRIORITY", "DEFAULT_RESOURCE_POOL",
           "DEFAULT_SLOTS", "RETENTION_DEFAULTS"]
