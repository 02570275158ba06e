"""math-verify's verdict on two answers, in a helper process, in bounded time, from any thread.

math-verify parses the ground truth first (as the gold), then the prediction, and `verify`
compares them. Its own timeout uses SIGALRM, which only works in the main thread and cannot
interrupt a long C-level computation holding the GIL (sympy evaluating `2^{10^{10}}` takes
minutes), so math-verify runs here with its timeouts off, in a helper process, and a call may
use `timeout_s` seconds of the helper's CPU time (RLIMIT_CPU: the kernel ends the helper past it;
the call counts as unequal and a new helper takes over). CPU time, not wall-clock time, so that a
verdict does not depend on how loaded the machine is: same answers, same rewards.

The helper is a plain `subprocess` (no `multiprocessing`), so this also works inside daemonic
pool workers; each process that asks starts its own helper (a forked child never reuses its
parent's), and calls from several threads of one process are serialised on it.

This module imports only the standard library at load time, so the helper loads it by path
without importing torch or the rest of the `grpo` package.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

DEFAULT_TIMEOUT_S = 5.0
"""Default bound, in CPU seconds of the helper, on one math-verify comparison (both parses and
the verify); whole seconds are enforced, so a call gets between this and one second more."""

STARTUP_TIMEOUT_S = 120.0
"""How long, in seconds, the helper process may take to import math-verify and report ready."""

HELPER_WALL_LIMIT_S = 900.0
"""Wall-clock seconds after which a call gives up on a helper that has not answered. Only a safety
net for a helper that hangs without computing: the CPU-time bound is what ends long calls."""

HELPER_MEMORY_LIMIT_BYTES = 4 * 1024**3
"""Address-space cap of the helper process, so a runaway big-number computation cannot exhaust
the machine's memory before its timeout."""


def _latex_wrapped(answer: str) -> str:
    """Wrap a bare answer in `$...$` so math-verify parses it as LaTeX (it is left alone if it
    already has math delimiters or a `\\boxed`)."""
    if any(marker in answer for marker in ("$", "\\boxed", "\\(", "\\[")):
        return answer
    return f"${answer}$"


def _math_verify_equal(ground_truth: str, predicted: str, exact_prediction: bool) -> bool:
    """math-verify's verdict, without any timeout (call only in the helper process).

    With `exact_prediction` (the prediction is a plain rational number), a ground truth that
    parses to an irrational number (sqrt(2), 2 pi) is unequal: math-verify would accept a decimal
    that matches it to 6 places.
    """
    from math_verify import parse, verify

    gold = parse(_latex_wrapped(ground_truth), parsing_timeout=None)
    if not gold:
        return False
    if exact_prediction and getattr(gold[0], "is_number", False) and gold[0].is_rational is False:
        return False
    pred = parse(_latex_wrapped(predicted), parsing_timeout=None)
    if not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=None))


def _serve() -> None:
    """Helper-process loop: read JSON [ground_truth, predicted, exact_prediction, timeout_s]
    lines, answer b"1\\n" or b"0\\n"; the kernel ends the process when a call uses more than
    timeout_s CPU seconds."""
    import logging
    import math
    import resource

    logging.disable(logging.CRITICAL)  # math-verify warns about its disabled timeouts
    try:
        resource.setrlimit(resource.RLIMIT_AS, (HELPER_MEMORY_LIMIT_BYTES,) * 2)
    except (ValueError, OSError):  # the hard limit is already lower
        pass
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # ended by SIGXCPU: no core file
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)
    hard_cpu_limit = resource.getrlimit(resource.RLIMIT_CPU)[1]
    # math-verify and sympy load parts of themselves on first use: do it before any call is timed
    _math_verify_equal("x+1", "1+x", False)

    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    for line in sys.stdin.buffer:
        ground_truth, predicted, exact_prediction, timeout_s = json.loads(line)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu_limit = math.ceil(usage.ru_utime + usage.ru_stime + timeout_s)
        if hard_cpu_limit != resource.RLIM_INFINITY:
            cpu_limit = min(cpu_limit, hard_cpu_limit)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit, hard_cpu_limit))
        try:
            verdict = _math_verify_equal(ground_truth, predicted, exact_prediction)
        except Exception:  # a parser crash is a wrong answer, not a dead helper
            verdict = False
        out.write(b"1\n" if verdict else b"0\n")
        out.flush()


IGNORED_SIGNALS = ("SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2")
"""Signals the helper ignores, from its first instruction on (it starts with them blocked): they are meant for its parent (SLURM's
time-limit warning SIGUSR2 and a preemption's SIGTERM reach every process of a job, Ctrl-C's
SIGINT the whole process group), which checkpoints or stops and then ends the helper by closing
its stdin or killing it. Without this, a warning that arrives while the helper starts up kills
it and with it the run."""

_BOOTSTRAP = """
import signal, sys
ignored = [getattr(signal, name) for name in sys.argv[3].split(",") if hasattr(signal, name)]
for sig in ignored:
    signal.signal(sig, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_UNBLOCK, ignored)
import importlib.util, json
sys.path[:] = json.loads(sys.argv[2])
spec = importlib.util.spec_from_file_location("_grpo_math_verify_helper", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module._serve()
"""


class _HelperTimeout(Exception):
    """The helper did not answer in time."""


class _MathVerifyHelper:
    """Owns this process's helper process; restarts it after a timeout or a crash."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None

    def after_fork_in_child(self) -> None:
        """A forked child must not share its parent's helper (nor a lock held at fork time)."""
        self._lock = threading.Lock()
        if self._proc is not None:
            self._proc.stdin.close()  # only this process's copies of the pipe ends
            self._proc.stdout.close()
        self._proc = None

    @staticmethod
    def _start() -> subprocess.Popen:
        # the child starts with the signals blocked (it inherits the mask) and unblocks them only
        # once it ignores them, so one that arrives while the interpreter starts cannot kill it
        blocked = [getattr(signal, name) for name in IGNORED_SIGNALS]
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _BOOTSTRAP,
                    os.path.abspath(__file__),
                    json.dumps(sys.path),
                    ",".join(IGNORED_SIGNALS),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,  # unbuffered: a fork can never inherit (and later flush) half a request
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        try:
            reply = _read_line(proc, STARTUP_TIMEOUT_S)
        except _HelperTimeout:
            reply = None
        if reply != b"ready":
            proc.kill()  # no effect when it has already exited (reply b"")
            exit_code = proc.wait()
            if reply is None:
                cause = f"no answer within {STARTUP_TIMEOUT_S} s"
            elif exit_code < 0:
                cause = f"killed by signal {-exit_code} while starting"
            else:
                cause = f"exit code {exit_code}; is math-verify[antlr4_9_3] installed here?"
            raise RuntimeError(f"the math-verify grading helper did not start: {cause}")
        return proc

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc.stdin.close()
            self._proc.stdout.close()
        self._proc = None

    def equal(
        self, ground_truth: str, predicted: str, exact_prediction: bool, timeout_s: float
    ) -> bool:
        """math-verify's verdict, or False if it needs more than timeout_s CPU seconds."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._stop()
                self._proc = self._start()
            request = json.dumps([ground_truth, predicted, exact_prediction, timeout_s]) + "\n"
            try:
                _write_all(self._proc.stdin.fileno(), request.encode())
                reply = _read_line(self._proc, HELPER_WALL_LIMIT_S)
            except (_HelperTimeout, BrokenPipeError):
                reply = b""
            if reply not in (b"0", b"1"):  # out of CPU time, or crashed (e.g. out of memory)
                self._stop()
                return False
            return reply == b"1"

    def close(self) -> None:
        with self._lock:
            self._stop()


def _write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to a pipe (one request, far below the pipe's capacity)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_line(proc: subprocess.Popen, timeout_s: float) -> bytes:
    """One line from the helper's stdout without the newline (b"" if it died); _HelperTimeout if
    none arrives within timeout_s seconds."""
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    data = b""
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            raise _HelperTimeout
        chunk = os.read(fd, 64)
        if not chunk:
            return b""
        data += chunk
    return data[:-1]


_HELPER = _MathVerifyHelper()
atexit.register(_HELPER.close)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_HELPER.after_fork_in_child)


def math_verify_equal(
    ground_truth: str,
    predicted: str,
    exact_prediction: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> bool:
    """Whether math-verify finds `predicted` equal to `ground_truth`.

    Safe to call from any thread and from worker processes. A call uses at most about `timeout_s`
    CPU seconds, plus the helper's start-up (about a second) on a process's first call and on the
    call after a timeout, plus any wait for other threads' calls (they share one helper). The
    verdict does not depend on the machine's load (the bound is CPU time, not wall-clock time).

    Args:
        ground_truth: the reference answer (parsed as math-verify's gold), LaTeX without `$`.
        predicted: the answer to check, LaTeX without `$`.
        exact_prediction: the prediction is a plain rational number, so it cannot equal an
            irrational ground truth (math-verify alone accepts 6 matching decimals).
        timeout_s: bound in CPU seconds on the comparison; exceeding it counts as unequal.

    Returns:
        math-verify's verdict; False also when a side does not parse or the call times out.
    """
    return _HELPER.equal(ground_truth, predicted, exact_prediction, timeout_s)
