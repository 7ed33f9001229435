"""Learning that the master wants this allocation to stop (to pause, or to free its slots),
or that Slurm does.

Under Slurm, a job's end comes as a SIGTERM to every one of its processes, followed by a
SIGKILL ``KillWait`` seconds later (30 by default): when Slurm preempts the job without sending
it its user signal (``SlurmctldParameters=preempt_send_user_signal`` in 22.05), when it is
cancelled, or when its time limit passes.
A process that asks :meth:`PreemptContext.should_preempt` has said that it checkpoints and
exits when asked; from its first question on, a SIGTERM is taken as that request (see
:meth:`PreemptContext._listen_for_slurm`) rather than ending it where it stands. The master
reads the exit that follows by how Slurm ended the job
(:func:`det_hub.agents.slurm.with_slurm_reason`): after a preemption the trial goes on from
that checkpoint in a new job.
"""

from __future__ import annotations

import enum
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from det_hub.core._distributed import DistributedContext
from det_hub.core._http import MasterSession

logger = logging.getLogger("det_hub.core")

LONG_POLL_SECONDS = 60


class PreemptMode(enum.Enum):
    """Which workers ask whether to stop.

    ``WorkersAskChief``: the chief watches the master and every rank calls
    :meth:`PreemptContext.should_preempt` together, getting the chief's answer.
    ``WorkersAskMaster``: every rank watches the master itself.
    ``ChiefOnly``: only the chief may call ``should_preempt``.
    """

    WorkersAskMaster = "WORKERS_ASK_MASTER"
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"


class _PreemptionWatcher:
    """A thread that long-polls the preemption signal and remembers a True answer."""

    def __init__(
        self,
        session: MasterSession,
        allocation_id: str,
        *,
        poll_seconds: int = LONG_POLL_SECONDS,
        wait: Callable[[float], bool] | None = None,
    ) -> None:
        self._session = session
        self._path = f"/allocations/{allocation_id}/signals/preemption"
        self._poll_seconds = poll_seconds
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self.preempted = threading.Event()
        self._thread = threading.Thread(target=self._run, name="det-hub-preempt", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            try:
                body = self._session.get(
                    self._path,
                    params={"timeout_seconds": self._poll_seconds},
                    retry=False,
                    # The master holds the request up to poll_seconds; allow for the network.
                    timeout=self._poll_seconds + 15,
                )
            except Exception as exc:
                # The master may be restarting: wait (never spin) and ask again.
                logger.debug("preemption poll failed (%s); again in %.0f s", exc, delay)
                if self._wait(delay):
                    return
                delay = min(delay * 2, 5.0)
                continue
            delay = 1.0
            if isinstance(body, dict) and body.get("preempt"):
                logger.info("the master asked this allocation to stop")
                self.preempted.set()
                return

    def ask_now(self) -> None:
        """Ask the master once without waiting, for a signal the long poll may not have
        brought back yet (a decision the master made while answering this process, when its
        answer did not carry it)."""
        if self.preempted.is_set():
            return
        try:
            body = self._session.get(self._path, params={"timeout_seconds": 0}, retry=False)
        except Exception as exc:  # the long poll still carries the signal, just later
            logger.debug("preemption check failed (%s)", exc)
            return
        if isinstance(body, dict) and body.get("preempt"):
            self.preempted.set()

    def close(self) -> None:
        # The thread may sit in a long poll; it is a daemon and ends with the process.
        self._stop.set()


class PreemptContext:
    """Tells training code whether it should checkpoint and exit.

    The chief (or, in ``WorkersAskMaster`` mode, every rank) watches the master in a
    background thread, so :meth:`should_preempt` is cheap enough to call every batch.

    The master's answer to a validation report also says whether the trial must stop: a
    searcher that stops the trial at a rung decides while answering the report, and
    ``report_validation_metrics`` returns only once it has that answer. So
    ``should_preempt()`` called right after ``report_validation_metrics`` reflects the
    decision the report led to, without waiting for the long poll.
    """

    def __init__(
        self,
        *,
        distributed: DistributedContext,
        session: MasterSession | None = None,
        allocation_id: str | None = None,
        mode: PreemptMode = PreemptMode.WorkersAskChief,
    ) -> None:
        self._dist = distributed
        self._session = session
        self._allocation_id = allocation_id
        self._mode = PreemptMode(mode)
        self._acked = False
        # Set when the master's answer to a metrics report said this allocation must stop.
        self._told = threading.Event()
        self._watcher: _PreemptionWatcher | None = None
        watches = self._mode is PreemptMode.WorkersAskMaster or self._dist.is_chief
        if session is not None and allocation_id and watches:
            self._watcher = _PreemptionWatcher(session, allocation_id)
        # Slurm's SIGTERM, once this process listens for it (see _listen_for_slurm).
        self._slurm_job = os.environ.get("SLURM_JOB_ID") if session is not None else None
        self._terminated = False
        self._listening = False

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """Whether to checkpoint and exit now. Once True, it stays True.

        Right after ``report_validation_metrics`` returns, it reflects what the master decided
        on that validation: a searcher that stopped the trial at its rung makes it True there,
        before another batch is trained.

        In ``WorkersAskChief`` mode every rank must call it at the same point, since the
        chief's answer is broadcast.

        In a Slurm job, from the first call on, the SIGTERM Slurm sends every process of a
        job it ends (a preemption, a cancel, a time limit) makes it True too, instead of
        ending the process there (see the module).

        Args:
            auto_ack: Acknowledge the request to the master the first time the answer is True,
                telling it the trial will exit on its own (call :meth:`acknowledge_preemption_signal`
                yourself when False).

        Raises:
            RuntimeError: A worker calls it in ``ChiefOnly`` mode.
        """
        if self._mode is PreemptMode.ChiefOnly and not self._dist.is_chief:
            raise RuntimeError("should_preempt() is only for the chief in PreemptMode.ChiefOnly")
        if not self._listening:
            self._listen_for_slurm()
        answer = self._terminated or self._told.is_set() or (
            self._watcher is not None and self._watcher.preempted.is_set())
        if self._mode is PreemptMode.WorkersAskChief and self._dist.size > 1:
            answer = bool(self._dist.broadcast(answer))
        if answer and auto_ack:
            self.acknowledge_preemption_signal()
        return answer

    def _listen_for_slurm(self) -> None:
        """In a Slurm job of a det_hub cluster, take SIGTERM as the request to checkpoint and
        stop: Slurm's end of the job (a preemption, a cancel, a time limit) reaches every
        process of it that way, and SIGKILL follows ``KillWait`` seconds later. Only a process
        that asks :meth:`should_preempt` listens, from its main thread, and only where nothing
        else has claimed SIGTERM (a framework's own handler is left alone). Elsewhere SIGTERM
        keeps its default: the process ends at once."""
        self._listening = True
        if not self._slurm_job or threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return
            signal.signal(signal.SIGTERM, self._on_sigterm)
        except (ValueError, OSError):  # no signals here (an embedded interpreter)
            return

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        """Slurm is ending this job: stop at the next :meth:`should_preempt`. A repeat changes
        nothing (a launcher passes Slurm's signal on to its workers, which got it too)."""
        del signum, frame
        if self._terminated:
            return
        self._terminated = True
        logger.warning("SIGTERM: Slurm is ending job %s (a preemption, a cancel or its time "
                       "limit); this process checkpoints and stops", self._slurm_job)

    def _take_metrics_answer(self, group: str, answer: object) -> None:
        """The master's answer to a batch of this process's metrics (called by the metric
        sender before the report waiting for the batch returns).

        Its ``preempt`` is the preemption signal as it stood once the master had acted on the
        batch. A master that does not answer with it is asked the signal once after a
        validation, so that the searcher's decision on it is known just as soon.
        """
        if isinstance(answer, dict) and "preempt" in answer:
            if answer["preempt"] is True:
                if not self._told.is_set():
                    logger.info("the master's answer to a metrics report asked this "
                                "allocation to stop")
                self._told.set()
        elif group == "validation" and self._watcher is not None:
            self._watcher.ask_now()

    def acknowledge_preemption_signal(self) -> None:
        """Tell the master the request to stop was seen (once; chief only)."""
        if self._acked or not self._dist.is_chief or self._session is None:
            return
        self._acked = True
        try:
            self._session.post(
                f"/allocations/{self._allocation_id}/signals/ack_preemption", retry=True
            )
        except Exception as exc:  # the trial still exits; the master then sees it stop anyway
            logger.warning("could not acknowledge preemption: %s", exc)

    def close(self) -> None:
        """Stop watching; SIGTERM ends the process again."""
        if self._watcher is not None:
            self._watcher.close()
        handler: Any = signal.getsignal(signal.SIGTERM)
        if getattr(handler, "__self__", None) is self \
                and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
