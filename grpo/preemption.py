"""Notice a coming preemption or time limit (SIGUSR2 from SLURM/submitit, SIGTERM) without dying
mid-step: the handler only records the signal; the trainer checkpoints at the end of the current
GRPO step and then hands the signal to whoever handled it before (submitit requeues the job)."""

from __future__ import annotations

import os
import signal
from types import FrameType
from typing import Any

WATCHED = (signal.SIGUSR2, signal.SIGTERM)


class PreemptionWatcher:
    """Records SIGUSR2/SIGTERM while installed; see the module docstring."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> PreemptionWatcher:
        for sig in WATCHED:
            self._previous[sig] = signal.signal(sig, self._record)
        return self

    def _record(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def hand_over(self) -> None:
        """Restore the previous handlers and deliver the recorded signal to them."""
        assert self.received is not None
        self.__exit__()
        handler = self._previous[self.received]
        if callable(handler):
            handler(self.received, None)
        else:
            os.kill(os.getpid(), self.received)
