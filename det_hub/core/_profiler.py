"""``core_context.profiler``: Determined's system-metrics profiler, which det_hub lacks."""

from __future__ import annotations


class ProfilerContext:
    """Determined's ``ProfilerContext`` names, each raising :class:`NotImplementedError`.

    det_hub does not sample system metrics (GPU, CPU, memory, network) of a trial, so
    switching the profiler on cannot do what a Determined script expects; it says so instead of
    doing nothing. Switching it off is harmless and allowed.
    """

    def on(self, sampling_interval: int = 1, samples_per_report: int = 10) -> None:
        """Not available: det_hub does not collect system metrics.

        Raises:
            NotImplementedError: Always.
        """
        raise NotImplementedError(
            "core_context.profiler.on(): det_hub does not collect system metrics; "
            "profile with torch.profiler and report figures with "
            "core_context.train.report_metrics()"
        )

    def off(self) -> None:
        """Stop the profiler: nothing to do, since it never runs."""

    def _close(self) -> None:
        self.off()
