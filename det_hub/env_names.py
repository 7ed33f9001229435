"""The names of the ``DET_HUB_*`` environment variables det_hub sets and reads, each once.

A constant is the variable's name less ``DET_HUB_``, with ``_ENV`` after it: ``MASTER_ENV`` is
``DET_HUB_MASTER``. Each says who sets the variable and who reads it. Every ``DET_HUB_*`` name
det_hub's source mentions is one of these (a test checks it): a new variable is added here
first, and documented in docs/rest-api.md where a task's process sees it.
"""

from __future__ import annotations

# -- where the master and the user's credentials are ------------------------------------------

#: The master's URL. Set by the master for every task, by ``det_hub.hub.configure`` for
#: notebook servers, or by the user; read by the SDK, the CLI, the notebook magics, the Core
#: API (over the cluster info's ``master_url``), the server extension and DetSpawner.
MASTER_ENV = "DET_HUB_MASTER"
#: Where a trial's Core API sends its training metrics: the master's ingest workers
#: (:mod:`det_hub.service.ingest`). Set by the master on trials while they run; read by the
#: Core API, which sends to the master when it is unset or does not answer.
INGEST_URL_ENV = "DET_HUB_INGEST_URL"
#: A user's API token. Set by the user, by ``det_hub.hub.configure`` for notebook servers (the
#: server's hub token), and by ``det-hub shell`` for its SSH tunnel; read by the SDK.
TOKEN_ENV = "DET_HUB_TOKEN"
#: The data directory of a master on this machine (default ``~/.det_hub``). Set by the user;
#: read by the SDK (for the local master's admin token) and ``det-hub up``.
DATA_DIR_ENV = "DET_HUB_DATA_DIR"

# -- what the master gives every task's process -----------------------------------------------

#: The allocation's id. Set by the cluster; read by the Core API's cluster info.
ALLOCATION_ID_ENV = "DET_HUB_ALLOCATION_ID"
#: The allocation's token, with which its process talks to the master. Set by the cluster; read
#: by the Core API and the notebook, shell and TensorBoard tasks.
ALLOCATION_TOKEN_ENV = "DET_HUB_ALLOCATION_TOKEN"
#: The path of the allocation's ``cluster_info.json``. Set by the cluster; read by the Core
#: API, ``det_hub.pytorch.init`` and the distributed launchers.
CLUSTER_INFO_ENV = "DET_HUB_CLUSTER_INFO"
#: The address the master reaches the task's agent at. Set by the cluster (on a Slurm pool, by
#: the job's runner: its node's ``NodeAddr``); read by the notebook, shell, TensorBoard and hub
#: server tasks, whose servers listen there.
AGENT_ADDRESS_ENV = "DET_HUB_AGENT_ADDRESS"
#: The owner's data cache on the host (default ``~/.cache/det_hub/data``). Set by the cluster
#: for local tasks, or by the user; read by ``det_hub.data``.
DATA_CACHE_ENV = "DET_HUB_DATA_CACHE"

# -- a trial's process ------------------------------------------------------------------------

#: The trial's id. Set by the master; read by training code that wants it.
TRIAL_ID_ENV = "DET_HUB_TRIAL_ID"
#: The trial's experiment's id. Set by the master; read by training code that wants it.
EXPERIMENT_ID_ENV = "DET_HUB_EXPERIMENT_ID"
#: How many batches a Core API script outside a cluster trains (default 1). Set by the user;
#: read by the Core API, whose searcher asks for that length outside a cluster.
LOCAL_MAX_LENGTH_ENV = "DET_HUB_LOCAL_MAX_LENGTH"

# -- a trial on several hosts -----------------------------------------------------------------

#: How many hosts the allocation runs on. Set by the cluster for an allocation of more than
#: one; read by ``det_hub.launch.torch_distributed``.
NNODES_ENV = "DET_HUB_NNODES"
#: This host's place among them, from 0. Set and read as :data:`NNODES_ENV`.
NODE_RANK_ENV = "DET_HUB_NODE_RANK"
#: The chief host's address, where the workers meet. Set and read as :data:`NNODES_ENV`.
CHIEF_ADDR_ENV = "DET_HUB_CHIEF_ADDR"
#: The port they meet on at the chief. Set and read as :data:`NNODES_ENV`.
CHIEF_PORT_ENV = "DET_HUB_CHIEF_PORT"
#: The framework a distributed launcher started the workers for (``torch``, ``horovod``). Set
#: by ``det_hub.launch``; read by training code that wants it.
DISTRIBUTED_ENV = "DET_HUB_DISTRIBUTED"

# -- a task's process (a command, notebook, shell or TensorBoard) ------------------------------

#: The task's job id (``cmd-3``). Set by the master; read by the task's code that wants it.
TASK_ID_ENV = "DET_HUB_TASK_ID"
#: The task's type (``COMMAND``, ``NOTEBOOK``, ...). Set by the master; read as
#: :data:`TASK_ID_ENV`.
TASK_TYPE_ENV = "DET_HUB_TASK_TYPE"
#: The task's number (``3``). Set by the master for proxied tasks; read by them, to tell the
#: master their server answers.
TASK_NUMBER_ENV = "DET_HUB_TASK_NUMBER"
#: The path the master's proxy serves the task under (``/proxy/3/``). Set by the master for
#: proxied tasks; read by them, whose servers answer under it.
PROXY_PATH_ENV = "DET_HUB_PROXY_PATH"
#: The token the proxy adds to a notebook's requests. Set by the master; read by the notebook
#: task.
NOTEBOOK_TOKEN_ENV = "DET_HUB_NOTEBOOK_TOKEN"
#: The public key a shell accepts. Set by the master; read by the shell task.
SHELL_PUBLIC_KEY_ENV = "DET_HUB_SHELL_PUBLIC_KEY"
#: Each experiment's TensorBoard directory, as JSON. Set by the master; read by the
#: TensorBoard task.
TENSORBOARD_LOGDIRS_ENV = "DET_HUB_TENSORBOARD_LOGDIRS"
#: The remote (S3) storage of experiments whose files are not on the host, as JSON. Set by the
#: master; read by the TensorBoard task.
TENSORBOARD_STORAGES_ENV = "DET_HUB_TENSORBOARD_STORAGES"

# -- the host's tools -------------------------------------------------------------------------

#: The host's cache of downloaded wheels (default ``~/.cache/det_hub/wheels``). Set by the
#: user; read by the local agent, which shows it to tasks.
WHEEL_CACHE_ENV = "DET_HUB_WHEEL_CACHE"
#: The ``configurable-http-proxy`` program. Set by the user; read by ``det-hub up``.
PROXY_COMMAND_ENV = "DET_HUB_PROXY_COMMAND"

__all__ = [
    "AGENT_ADDRESS_ENV",
    "ALLOCATION_ID_ENV",
    "ALLOCATION_TOKEN_ENV",
    "CHIEF_ADDR_ENV",
    "CHIEF_PORT_ENV",
    "CLUSTER_INFO_ENV",
    "DATA_CACHE_ENV",
    "DATA_DIR_ENV",
    "DISTRIBUTED_ENV",
    "EXPERIMENT_ID_ENV",
    "INGEST_URL_ENV",
    "LOCAL_MAX_LENGTH_ENV",
    "MASTER_ENV",
    "NNODES_ENV",
    "NODE_RANK_ENV",
    "NOTEBOOK_TOKEN_ENV",
    "PROXY_COMMAND_ENV",
    "PROXY_PATH_ENV",
    "SHELL_PUBLIC_KEY_ENV",
    "TASK_ID_ENV",
    "TASK_NUMBER_ENV",
    "TASK_TYPE_ENV",
    "TENSORBOARD_LOGDIRS_ENV",
    "TENSORBOARD_STORAGES_ENV",
    "TOKEN_ENV",
    "TRIAL_ID_ENV",
    "WHEEL_CACHE_ENV",
]
