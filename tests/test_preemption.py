"""The preemption watcher with real signals sent to this process, submitit's handlers stood in for
by handlers that record their calls (the SLURM tests run the real ones)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from grpo.run.preemption import PreemptionWatcher

SIGNALS = (signal.SIGUSR2, signal.SIGTERM, signal.SIGCONT)


@pytest.fixture
def submitit_like() -> Iterator[list[str]]:
    """Handlers installed as submitit's job environment installs them: SIGUSR2 requeues the job
    (SLURM then sends SIGCONT and SIGTERM to the job's processes), SIGTERM and SIGCONT are logged
    and otherwise bypassed. Yields the list of their calls; restores this process's handlers."""
    calls: list[str] = []

    def requeue(signum: int, frame: object) -> None:
        calls.append("requeue")
        os.kill(os.getpid(), signal.SIGCONT)
        os.kill(os.getpid(), signal.SIGTERM)
        calls.append("exit")

    def bypass(signum: int, frame: object) -> None:
        calls.append(f"bypass {signal.Signals(signum).name}")

    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    signal.signal(signal.SIGUSR2, requeue)
    signal.signal(signal.SIGTERM, bypass)
    signal.signal(signal.SIGCONT, bypass)
    try:
        yield calls
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_sigcont_is_neither_a_stop_nor_passed_on(submitit_like: list[str]) -> None:
    with PreemptionWatcher() as watcher:
        os.kill(os.getpid(), signal.SIGCONT)
        assert watcher.received == []
        os.kill(os.getpid(), signal.SIGTERM)
        assert watcher.received == [signal.SIGTERM]
    assert submitit_like == []
    # not handed over: the handlers from before are back
    os.kill(os.getpid(), signal.SIGCONT)
    assert submitit_like == ["bypass SIGCONT"]


def test_signals_a_requeue_brings_during_the_hand_over_are_recorded_not_logged(
    submitit_like: list[str],
) -> None:
    with PreemptionWatcher() as watcher:
        os.kill(os.getpid(), signal.SIGUSR2)
        assert watcher.verdict().status == "preempted"
        watcher.hand_over()
    # the requeue ran, and the SIGCONT and SIGTERM it brought reached no logging handler, during
    # the hand-over or after it (the process is leaving)
    assert submitit_like == ["requeue", "exit"]
    assert watcher.received == [signal.SIGUSR2, signal.SIGTERM]
    os.kill(os.getpid(), signal.SIGTERM)
    assert submitit_like == ["requeue", "exit"]
    assert watcher.received == [signal.SIGUSR2, signal.SIGTERM, signal.SIGTERM]


def test_a_sigterm_stop_is_handed_to_the_previous_handler(submitit_like: list[str]) -> None:
    with PreemptionWatcher() as watcher:
        os.kill(os.getpid(), signal.SIGTERM)
        watcher.hand_over()
    assert submitit_like == ["bypass SIGTERM"]
