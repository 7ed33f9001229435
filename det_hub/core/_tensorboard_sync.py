"""Sending a trial's TensorBoard event files to storage that keeps them remotely (S3).

The chief writes its event files into a local temporary directory, as it would into a shared
file system; :class:`TensorboardSync` uploads what changed there every few seconds and once
more when the trial's Core API context closes.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from pathlib import Path

from det_hub.storage import StorageManager, directory_resources

logger = logging.getLogger("det_hub.core")

#: Seconds between uploads: a TensorBoard over remote files reloads every few seconds too.
DEFAULT_SYNC_SECS = 10.0


class TensorboardSync:
    """Uploads the event files of :attr:`local_dir` to a trial's TensorBoard directory in
    ``storage`` (see :meth:`StorageManager.upload_tensorboard`) in a background thread.

    Failures are logged (once until an upload succeeds again) and never fail training.

    Args:
        storage: A storage with :attr:`~det_hub.storage.StorageManager.remote_tensorboard`.
        experiment_id: The trial's experiment.
        trial_id: The trial.
        interval: Seconds between uploads.
    """

    def __init__(
        self,
        storage: StorageManager,
        experiment_id: int,
        trial_id: int,
        interval: float = DEFAULT_SYNC_SECS,
    ) -> None:
        self.storage = storage
        self.experiment_id = experiment_id
        self.trial_id = trial_id
        self.local_dir = Path(tempfile.mkdtemp(prefix=f"det_hub_tensorboard_{trial_id}_"))
        self._sent: dict[str, int] = {}
        self._lock = threading.Lock()
        self._failing = False
        self._closed = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(interval,), name="det_hub-tensorboard-sync", daemon=True
        )
        self._thread.start()

    def sync(self) -> bool:
        """Upload what changed since the last successful upload.

        Returns:
            Whether storage now holds every file as it was when this call looked.
        """
        with self._lock:
            files = directory_resources(self.local_dir)
            if files == self._sent:
                return True
            try:
                self.storage.upload_tensorboard(self.local_dir, self.experiment_id, self.trial_id)
            except Exception as exc:
                if not self._failing:
                    logger.warning("cannot upload TensorBoard events to %s (will retry): %s",
                                   self.storage, exc)
                self._failing = True
                return False
            self._failing = False
            self._sent = files
            return True

    def _run(self, interval: float) -> None:
        while not self._closed.wait(interval):
            self.sync()

    def close(self) -> None:
        """Stop the thread, upload what is left and remove the local directory (kept when
        the last upload failed, so nothing is lost silently); closing twice is a no-op."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._thread.join()
        if self.sync():
            shutil.rmtree(self.local_dir, ignore_errors=True)
        else:
            logger.warning("TensorBoard events not uploaded are left in %s", self.local_dir)
