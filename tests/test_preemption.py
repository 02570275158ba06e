"""The preemption watcher with real signals sent to this process, submitit's handlers stood in for
by handlers that record their calls (the SLURM tests run the real ones)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpo.run.preemption import QUIET, WATCHED, PreemptionWatcher, Verdict

ROOT = Path(__file__).resolve().parents[1]

SIGNALS = (*WATCHED, *QUIET)
"""Every signal a watcher takes: a watcher that handed over leaves its handlers installed (the
process is leaving), so the fixture puts back each one, not only those it set."""


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


@pytest.mark.parametrize(("sig", "cause"), [(signal.SIGINT, "SIGINT (Ctrl-C)"),
                                            (signal.SIGHUP, "SIGHUP (the terminal closed)")],
                         ids=["ctrl_c", "sighup"])
def test_a_terminal_signal_cancels_the_run_once_said(capfd: pytest.CaptureFixture[str],
                                                     sig: signal.Signals, cause: str) -> None:
    """Ctrl-C and a closing terminal stop the run alike: `cancelled`, naming the signal, said once
    on stderr however often it comes; the handlers from before are back after the watcher."""
    before = signal.getsignal(sig)
    with PreemptionWatcher() as watcher:
        os.kill(os.getpid(), sig)
        os.kill(os.getpid(), sig)  # the shell's SIGHUP, then the kernel's
        assert watcher.received == [sig, sig]
        assert watcher.verdict() == Verdict(
            "cancelled", cause, "launch the same command again to resume from this checkpoint")
        os.kill(os.getpid(), signal.SIGTERM)  # a stronger stop decides
        assert watcher.verdict().cause.startswith("SIGTERM from scancel")
    assert signal.getsignal(sig) is before
    assert capfd.readouterr().err == (f"\n{cause}: the run stops after this GRPO step, with a "
                                      "checkpoint, as 'cancelled'; launch the same command again "
                                      "to resume it\n")


HAND_OVER = """
import os, signal, sys
from grpo.run.preemption import PreemptionWatcher
if sys.argv[2] == "ctrl-c":  # a local sweep's job takes SIGHUP as Ctrl-C: KeyboardInterrupt
    signal.signal(signal.SIGHUP, signal.default_int_handler)
with PreemptionWatcher() as watcher:
    os.kill(os.getpid(), int(sys.argv[1]))
    print(watcher.verdict().status, flush=True)
    watcher.hand_over()
print("not ended")
"""


@pytest.mark.parametrize(("sig", "before"), [(signal.SIGINT, "python"), (signal.SIGHUP, "default"),
                                             (signal.SIGHUP, "ctrl-c")])
def test_a_terminal_signal_ends_the_process_by_the_signal(sig: signal.Signals, before: str) -> None:
    """After the checkpoint the terminal's signal ends the process by its default action, a shell
    seeing 128 + the signal: not a KeyboardInterrupt traceback, also where SIGHUP raised it."""
    out = subprocess.run([sys.executable, "-c", HAND_OVER, str(int(sig)), before], cwd=ROOT,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == -sig, out.stderr
    assert out.stdout == "cancelled\n" and "Traceback" not in out.stderr, out.stderr
