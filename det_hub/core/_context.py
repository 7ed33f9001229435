"""``det_hub.core.init()``: the entry point of the Core API."""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from det_hub.core._checkpoint import CheckpointContext
from det_hub.core._cluster_info import ClusterInfo, get_cluster_info
from det_hub.core._distributed import DistributedContext
from det_hub.core._experimental import ExperimentalCoreContext, LocalExperimentalCoreContext
from det_hub.core._http import MasterSession
from det_hub.core._metric_sender import MetricSender
from det_hub.core._preempt import PreemptContext, PreemptMode
from det_hub.core._profiler import ProfilerContext
from det_hub.core._searcher import SearcherContext, parse_searcher_units
from det_hub.core._tensorboard_sync import TensorboardSync
from det_hub.core._train import TrainContext
from det_hub.env_names import INGEST_URL_ENV, LOCAL_MAX_LENGTH_ENV, MASTER_ENV
from det_hub.storage import SharedFSStorage, StorageManager, build_storage

logger = logging.getLogger("det_hub.core")

#: The levels :meth:`Context.alert` accepts, and the logging level each maps to off-cluster.
ALERT_LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
DEFAULT_LOCAL_CHECKPOINTS = "checkpoints"


class TensorboardMode(enum.Enum):
    """Whether reported metrics are also written as TensorBoard event files.

    ``AUTO`` (the default): inside a cluster the chief writes them into the checkpoint
    storage (see :meth:`det_hub.storage.StorageManager.tensorboard_path`; an object store gets
    them from a local directory every few seconds and when the context closes). ``MANUAL``:
    they are not; training code writes its own.
    """

    AUTO = "AUTO"
    MANUAL = "MANUAL"


class Context:
    """What training code uses to talk to det_hub; made by :func:`init`.

    Attributes:
        train: Metrics, progress and early exits (:class:`TrainContext`).
        checkpoint: Checkpoint storage (:class:`CheckpointContext`).
        preempt: Whether to stop (:class:`PreemptContext`).
        searcher: The searcher's operations (:class:`SearcherContext`).
        distributed: The ranks and collectives (:class:`DistributedContext`).
        info: The cluster info, or None outside a cluster.
        profiler: Determined's system-metrics profiler (:class:`ProfilerContext`); not
            available here, so ``profiler.on()`` raises.
        experimental: Links the trial to the checkpoint or model version it uses, so that
            the metrics it reports are found from them
            (:class:`~det_hub.core._experimental.ExperimentalCoreContext`); outside a cluster
            it only logs what it would link.
    """

    def __init__(
        self,
        *,
        distributed: DistributedContext,
        train: TrainContext,
        checkpoint: CheckpointContext,
        preempt: PreemptContext,
        searcher: SearcherContext,
        info: ClusterInfo | None,
        session: MasterSession | None = None,
        tensorboard_sync: TensorboardSync | None = None,
        experimental: ExperimentalCoreContext | None = None,
    ) -> None:
        self.distributed = distributed
        self.train = train
        self.checkpoint = checkpoint
        self.preempt = preempt
        self.searcher = searcher
        self.info = info
        self.profiler = ProfilerContext()
        self.experimental = experimental or LocalExperimentalCoreContext()
        self._session = session
        self._tensorboard_sync = tensorboard_sync
        self._closed = False

    def alert(self, title: str, description: str = "", level: str = "info") -> None:
        """Raise an alert about this trial: the master hands it to the webhooks set up for
        alerts. Outside a cluster it is logged to the ``det_hub.core`` logger.

        Args:
            title: A short, non-empty headline.
            description: More detail (may be empty).
            level: ``"info"`` (the default), ``"warn"``, ``"error"`` or ``"debug"``.

        Raises:
            ValueError: An empty title or a level not among those above.
            TypeError: A title or description that is not a string.
            MasterError: The master refused the alert or could not be reached.
        """
        if not isinstance(title, str) or not isinstance(description, str):
            raise TypeError(
                f"alert(): title and description must be strings, not "
                f"{type(title).__name__} and {type(description).__name__}"
            )
        if not title.strip():
            raise ValueError("alert(): title must not be empty")
        if level not in ALERT_LEVELS:
            raise ValueError(
                f"alert(): level {level!r} is not one of " + ", ".join(map(repr, ALERT_LEVELS))
            )
        if self._session is None or self.info is None or self.info.trial is None:
            logger.log(ALERT_LEVELS[level], "alert: %s%s", title,
                       f": {description}" if description else "")
            return
        # Not retried: a repeated POST would notify the webhooks twice.
        self._session.post(
            f"/trials/{self.info.trial.trial_id}/alerts",
            {"title": title, "description": description, "level": level},
        )

    def close(self, exc: BaseException | None = None) -> None:
        """Deliver outstanding metrics and stop the background threads.

        Args:
            exc: The exception the training code is failing with, if any; a delivery error is
                then logged instead of raised so that it does not hide the first one.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.train.close()
        except Exception:
            if exc is None:
                raise
            logger.exception("could not deliver metrics while closing")
        finally:
            if self._tensorboard_sync is not None:
                self._tensorboard_sync.close()  # after train.close(): the event file is whole
            self.preempt.close()
            self.profiler._close()
            if self._session is not None:
                self._session.close()
            # As Determined's core.init() does: a torch.distributed group the distributed
            # context made is taken down here, not left to interpreter exit (which can abort).
            self.distributed.close()

    def __enter__(self) -> Context:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(exc)


def _local_storage(checkpoint_storage: Any) -> StorageManager:
    if isinstance(checkpoint_storage, StorageManager):
        return checkpoint_storage
    if isinstance(checkpoint_storage, Mapping):
        return build_storage(checkpoint_storage)
    if checkpoint_storage is None:
        checkpoint_storage = DEFAULT_LOCAL_CHECKPOINTS
    return SharedFSStorage(Path(checkpoint_storage))


def _local_max_length() -> int:
    raw = os.environ.get(LOCAL_MAX_LENGTH_ENV, "1")
    try:
        length = int(raw)
    except ValueError:
        raise ValueError(f"{LOCAL_MAX_LENGTH_ENV}={raw!r}: must be an integer") from None
    if length < 0:
        raise ValueError(f"{LOCAL_MAX_LENGTH_ENV}={raw!r}: must be >= 0")
    return length


def init(
    *,
    distributed: DistributedContext | None = None,
    checkpoint_storage: str | os.PathLike[str] | Mapping[str, Any] | StorageManager | None = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
    metric_batch_interval: float = 0.25,
    retry_deadline: float = 600.0,
) -> Context:
    """Start the Core API; use the answer as a context manager.

    Inside a trial (``DET_HUB_CLUSTER_INFO`` set) it talks to the master named there with the
    allocation token. Outside a cluster it gives a local context: metrics go to the
    ``det_hub.core`` logger, checkpoints to ``checkpoint_storage`` (default ``./checkpoints``),
    ``should_preempt()`` is always False and the searcher gives one operation of length
    ``DET_HUB_LOCAL_MAX_LENGTH`` (default 1).

    Args:
        distributed: The ranks of a distributed job; a job of one when None.
        checkpoint_storage: Where checkpoints go: a directory, a ``checkpoint_storage``
            config dict or a :class:`~det_hub.storage.StorageManager`. Inside a cluster the
            experiment's storage is used when None.
        preempt_mode: Which ranks watch for preemption (see :class:`PreemptMode`).
        tensorboard_mode: ``AUTO`` writes reported metrics as TensorBoard event files into the
            checkpoint storage inside a cluster; ``MANUAL`` does not (see
            :class:`TensorboardMode`).
        metric_batch_interval: Seconds a training-metric row may wait to be batched. The
            default keeps live charts well within a second of training, while rows reported
            faster than that still travel together.
        retry_deadline: Seconds a call to an unreachable master keeps being retried.

    Returns:
        The :class:`Context`.

    Example:
        >>> import det_hub.core as core
        >>> with core.init() as core_context:  # doctest: +SKIP
        ...     for op in core_context.searcher.operations():
        ...         ...
    """
    write_events = TensorboardMode(tensorboard_mode) == TensorboardMode.AUTO
    dist = distributed or DistributedContext()
    info = get_cluster_info()
    if info is None:
        train = TrainContext(distributed=dist)
        return Context(
            distributed=dist,
            train=train,
            checkpoint=CheckpointContext(
                distributed=dist, storage=_local_storage(checkpoint_storage)
            ),
            preempt=PreemptContext(distributed=dist, mode=preempt_mode),
            searcher=SearcherContext(
                distributed=dist, train=train, local_length=_local_max_length()
            ),
            info=None,
            experimental=LocalExperimentalCoreContext(),
        )

    if not info.master_url:
        raise ValueError(f"no master URL: set {MASTER_ENV} or master_url in the cluster info")
    if info.trial is None:
        raise ValueError("the cluster info describes no trial; the Core API runs in trials only")
    session = MasterSession(info.master_url, info.session_token, retry_deadline=retry_deadline)
    trial_id = info.trial.trial_id
    if checkpoint_storage is None:
        if not info.checkpoint_storage:
            raise ValueError("the cluster info has no checkpoint_storage")
        storage = build_storage(info.checkpoint_storage)
    else:
        storage = _local_storage(checkpoint_storage)
    preempt = PreemptContext(
        distributed=dist, session=session, allocation_id=info.allocation_id, mode=preempt_mode
    )
    sender = None
    tensorboard_dir = None
    tensorboard_sync = None
    if dist.is_chief:
        # The master's answers to metric reports carry its decisions (a searcher stopping the
        # trial at a rung), for should_preempt() to reflect as soon as the report returns.
        ingest_url = os.environ.get(INGEST_URL_ENV)
        ingest = MasterSession(ingest_url, info.session_token) if ingest_url else None
        sender = MetricSender(session, trial_id, batch_interval=metric_batch_interval,
                              on_answer=preempt._take_metrics_answer, ingest=ingest)
        if write_events:
            tensorboard_dir = storage.tensorboard_path(info.trial.experiment_id, trial_id)
            if tensorboard_dir is None and storage.remote_tensorboard:
                tensorboard_sync = TensorboardSync(storage, info.trial.experiment_id, trial_id)
                tensorboard_dir = tensorboard_sync.local_dir
    train = TrainContext(
        distributed=dist,
        session=session,
        trial_id=trial_id,
        sender=sender,
        tensorboard_dir=tensorboard_dir,
    )
    return Context(
        distributed=dist,
        train=train,
        checkpoint=CheckpointContext(
            distributed=dist, storage=storage, session=session, trial_id=trial_id, train=train
        ),
        preempt=preempt,
        searcher=SearcherContext(distributed=dist, train=train, session=session, trial_id=trial_id,
                                 units=parse_searcher_units(info.trial._config)),
        info=info,
        session=session,
        tensorboard_sync=tensorboard_sync,
        experimental=ExperimentalCoreContext(session, trial_id),
    )
