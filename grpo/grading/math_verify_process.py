"""math-verify's verdict on two answers, in helper processes, in bounded time, from any thread.

math-verify parses the ground truth first (as the gold), then the prediction, and `verify`
compares them. Its own timeout uses SIGALRM, which only works in the main thread and cannot
interrupt a long C-level computation holding the GIL (sympy evaluating `2^{10^{10}}` takes
minutes), so math-verify runs here with its timeouts off, in a helper process, under two CPU-time
timers of the helper (CPU time, not wall-clock time, so that a verdict does not depend on how
loaded the machine is: same answers, same rewards):
- after `timeout_s` CPU seconds (ITIMER_PROF) a Python exception ends the comparison, which is
  tried once more (`ATTEMPTS`): the first use of a part of sympy fills its caches, which costs
  0.1-0.3 CPU s on a 2-core x86-64 machine (`(x+1)^2` against `x^2+2x+1` in a fresh helper: up
  to 0.28 s) and the same call then takes milliseconds; a call out of time twice counts as
  unequal and the helper serves on (sympy's Python code, the common case);
- after `HARD_LIMIT_FACTOR` times that (ITIMER_VIRTUAL, default action) the kernel ends the helper,
  which a computation in C ignoring the first timer needs: the call counts as unequal and a spare
  helper, started beforehand, takes over at once.

The helpers are plain `subprocess`es (no `multiprocessing`), so this also works inside daemonic
pool workers; each process that asks starts its own (a forked child never reuses its parent's).
Up to `POOL_SIZE` calls from different threads run at once, each on its own helper.

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

DEFAULT_TIMEOUT_S = 0.25
"""Default bound, in CPU seconds of the helper, on one attempt at a math-verify comparison (both
parses and the verify); real MATH answers take a few milliseconds once sympy's caches are warm."""

ATTEMPTS = 2
"""Attempts at a comparison that runs out of time: the second one finds the caches the first
filled (a right answer must not be graded wrong because it was the first of its kind). A hostile
answer thus costs at most ATTEMPTS x timeout_s CPU seconds."""

HARD_LIMIT_FACTOR = 2.0
"""A comparison that ignores the first timer (a computation in C) ends with its helper after
this many times `timeout_s` CPU seconds."""

POOL_SIZE = max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1))
"""Helpers of one process: calls from up to this many threads run in parallel."""

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
    import resource

    class OutOfTime(BaseException):  # not an Exception: math-verify's handlers must not eat it
        pass

    def out_of_time(signum: int, frame: object) -> None:
        raise OutOfTime

    logging.disable(logging.CRITICAL)  # math-verify warns about its disabled timeouts
    try:
        resource.setrlimit(resource.RLIMIT_AS, (HELPER_MEMORY_LIMIT_BYTES,) * 2)
    except (ValueError, OSError):  # the hard limit is already lower
        pass
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # ended by a timer: no core file
    signal.signal(signal.SIGPROF, out_of_time)
    signal.signal(signal.SIGVTALRM, signal.SIG_DFL)  # terminates the helper
    # math-verify and sympy load parts of themselves on first use: do the commonest before any
    # call is timed (a polynomial's expansion costs most: ~0.2 CPU s)
    _math_verify_equal("x^2+2x+1", "(x+1)^2", False)

    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    for line in sys.stdin.buffer:
        ground_truth, predicted, exact_prediction, timeout_s = json.loads(line)
        verdict = False
        for _ in range(ATTEMPTS):
            try:
                signal.setitimer(signal.ITIMER_VIRTUAL, timeout_s * HARD_LIMIT_FACTOR)
                signal.setitimer(signal.ITIMER_PROF, timeout_s)
                verdict = _math_verify_equal(ground_truth, predicted, exact_prediction)
                break
            except OutOfTime:  # no time left: once more with the caches it filled
                continue
            except Exception:  # a parser crash: a wrong answer
                break
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
                signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        out.write(b"1\n" if verdict else b"0\n")
        out.flush()


IGNORED_SIGNALS = ("SIGINT", "SIGHUP", "SIGTERM", "SIGUSR1", "SIGUSR2")
"""Signals the helper ignores, from its first instruction on (it starts with them blocked): they are meant for its parent (SLURM's
time-limit warning SIGUSR2 and a preemption's SIGTERM reach every process of a job, Ctrl-C's
SIGINT and a closing terminal's SIGHUP the whole process group; every signal the trainer's
`grpo.run.preemption.STOPS` stops at), which checkpoints or stops and then ends the helper by closing
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


def _launch() -> subprocess.Popen:
    """Start a helper process (it reports ready once math-verify is loaded: `_await_ready`)."""
    # the child starts with the signals blocked (it inherits the mask) and unblocks them only
    # once it ignores them, so one that arrives while the interpreter starts cannot kill it
    blocked = [getattr(signal, name) for name in IGNORED_SIGNALS]
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        return subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP, os.path.abspath(__file__), json.dumps(sys.path),
             ",".join(IGNORED_SIGNALS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,  # unbuffered: a fork can never inherit (and later flush) half a request
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _await_ready(proc: subprocess.Popen) -> subprocess.Popen:
    """`proc` once it has reported ready; RuntimeError (the helper killed) if it does not."""
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


def _end(proc: subprocess.Popen | None) -> None:
    if proc is not None:
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()


class _MathVerifyHelper:
    """One helper process, restarted after a timeout that ended it or a crash; once one has
    ended, a spare is kept starting in the background, so the next replacement is ready at once."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._spare: subprocess.Popen | None = None

    def forget(self) -> None:
        """In a forked child: drop the parent's processes (only this process's pipe ends close)."""
        for proc in (self._proc, self._spare):
            if proc is not None:
                proc.stdin.close()
                proc.stdout.close()
        self._proc = self._spare = None

    def _replace(self) -> None:
        replaced = self._proc is not None
        _end(self._proc)
        self._proc = None
        spare, self._spare = self._spare, None
        self._proc = _await_ready(spare if spare is not None and spare.poll() is None else _launch())
        if replaced or spare is not None:
            self._spare = _launch()

    def equal(self, ground_truth: str, predicted: str, exact_prediction: bool, timeout_s: float) -> bool:
        """math-verify's verdict, or False if it needs more than timeout_s CPU seconds."""
        if self._proc is None or self._proc.poll() is not None:
            self._replace()
        request = json.dumps([ground_truth, predicted, exact_prediction, timeout_s]) + "\n"
        try:
            _write_all(self._proc.stdin.fileno(), request.encode())
            reply = _read_line(self._proc, HELPER_WALL_LIMIT_S)
        except (_HelperTimeout, BrokenPipeError):
            reply = b""
        if reply not in (b"0", b"1"):  # ended by the hard timer, or crashed (e.g. out of memory)
            _end(self._proc)
            self._proc = None
            if self._spare is None:
                self._spare = _launch()
            return False
        return reply == b"1"

    def close(self) -> None:
        _end(self._proc)
        _end(self._spare)
        self._proc = self._spare = None


class _HelperPool:
    """Up to POOL_SIZE helpers of this process, each used by one thread at a time."""

    def __init__(self) -> None:
        self.after_fork_in_child()

    def after_fork_in_child(self) -> None:
        """A forked child must not share its parent's helpers (nor a lock held at fork time)."""
        for helper in getattr(self, "_all", []):
            helper.forget()
        self._lock = threading.Lock()
        self._idle: list[_MathVerifyHelper] = []
        self._all: list[_MathVerifyHelper] = []
        self._free = threading.Semaphore(POOL_SIZE)

    def equal(self, ground_truth: str, predicted: str, exact_prediction: bool, timeout_s: float) -> bool:
        with self._free:
            with self._lock:
                if not self._idle:
                    self._all.append(_MathVerifyHelper())
                    self._idle.append(self._all[-1])
                helper = self._idle.pop()
            try:
                return helper.equal(ground_truth, predicted, exact_prediction, timeout_s)
            finally:
                with self._lock:
                    self._idle.append(helper)

    def close(self) -> None:
        with self._lock:
            for helper in self._all:
                helper.close()


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


_HELPERS = _HelperPool()
atexit.register(_HELPERS.close)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_HELPERS.after_fork_in_child)


def math_verify_equal(
    ground_truth: str,
    predicted: str,
    exact_prediction: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> bool:
    """Whether math-verify finds `predicted` equal to `ground_truth`.

    Safe to call from any thread and from worker processes. A call uses at most `ATTEMPTS` x
    `timeout_s` CPU seconds (`HARD_LIMIT_FACTOR` times `timeout_s` for a computation in C), plus a helper's start-up
    (about half a second) on a thread's first call, plus any wait while POOL_SIZE other threads'
    calls run. The verdict does not depend on the machine's load (the bound is CPU time, not
    wall-clock time).

    Args:
        ground_truth: the reference answer (parsed as math-verify's gold), LaTeX without `$`.
        predicted: the answer to check, LaTeX without `$`.
        exact_prediction: the prediction is a plain rational number, so it cannot equal an
            irrational ground truth (math-verify alone accepts 6 matching decimals).
        timeout_s: bound in CPU seconds on one attempt at the comparison; a comparison that
            exceeds it in each of its `ATTEMPTS` counts as unequal.

    Returns:
        math-verify's verdict; False also when a side does not parse or the call times out.
    """
    return _HELPERS.equal(ground_truth, predicted, exact_prediction, timeout_s)
