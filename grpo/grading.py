"""Grade a predicted math answer against a ground truth, in bounded time, from any thread.

Three stages, cheapest first:

1. String normalization (`normalize_answer`): strips `$`, `\\left`/`\\right`, spacing commands,
   `\\text{}` wrappers and trailing units, degrees, percent signs, a leading `x =`, whitespace,
   thousands separators, and rewrites `\\dfrac`, `\\frac12`, `\\sqrt2`. Equal normalized strings
   are correct.
2. Plain numbers (integers, decimals, `a/b`, `\\frac{a}{b}`) on both sides are compared exactly as
   rationals, and that decides: 0.5 = \\frac{1}{2}, 3.0 = 3, but 0.333 != \\frac{1}{3}.
3. Everything else goes to `math-verify` (gold parsed first, then `verify(gold, pred)`), run in a
   helper process. math-verify's own timeout uses SIGALRM, which only works in the main thread and
   cannot interrupt a long C-level computation holding the GIL (sympy evaluating
   `2^{10^{10}}` takes minutes), so math-verify runs with its timeouts off and the helper process
   is killed and replaced when a call exceeds `timeout_s`. The call then grades as incorrect.

The helper is a plain `subprocess` (no `multiprocessing`), so grading also works inside daemonic
pool workers; each process that grades starts its own helper (a forked child never reuses its
parent's), and calls from several threads of one process are serialised on it.

SLURM signals every process of a job (SIGUSR2 before the time limit, SIGTERM on scancel or a
requeue) while the trainer finishes its step before it stops: the helper ignores both from its
first instruction on (it starts with them blocked), so that step is graded right. It ends when
its stdin closes, i.e. with the process that started it.

This module imports only the standard library at load time, so the helper can load it by path
without importing torch or the rest of the `grpo` package.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from fractions import Fraction

DEFAULT_TIMEOUT_S = 5.0
"""Default bound, in seconds, on one math-verify comparison (both parses and the verify)."""

STARTUP_TIMEOUT_S = 120.0
"""How long, in seconds, the helper process may take to import math-verify and report ready."""

MAX_ANSWER_CHARS = 1000
"""Answers longer than this (in characters) skip math-verify and are graded by string only."""

HELPER_MEMORY_LIMIT_BYTES = 4 * 1024**3
"""Address-space cap of the helper process, so a runaway big-number computation cannot exhaust
the machine's memory before its timeout."""

JOB_SIGNALS = (signal.SIGUSR2, signal.SIGTERM)
"""What a scheduler sends every process of a job before stopping it; the helper ignores them."""

# ----------------------------------------------------------------------------------------------
# Stage 1 and 2: normalization and exact comparison of plain numbers.

_SPACING = re.compile(r"\\[,;:! ]|\\q?quad\b|~")
_DELETE = (
    "\\left",
    "\\right",
    "\\displaystyle",
    "\\$",
    "$",
    "\\%",
    "%",
    "^{\\circ}",
    "^\\circ",
    "\\circ",
    "°",
)
_TEXT_ONLY = re.compile(r"^\\(?:text|textbf|textrm|mathrm|mbox)\{([^{}]*)\}$")
_TRAILING_UNIT = re.compile(r"^(.+?)\s*\\(?:text|textrm|mathrm|mbox)\{[^{}]*\}$")
_ASSIGNMENT = re.compile(r"^[A-Za-z]\s*=\s*([^=]+)$")
_FRAC_SHORT = re.compile(r"\\frac(\d)(\d)")
_FRAC_HALF_SHORT = re.compile(r"\\frac(\d)\{")
_FRAC_HALF_SHORT_DENOM = re.compile(r"\\frac\{([^{}]*)\}(\d)")
_SQRT_SHORT = re.compile(r"\\sqrt(\w)")
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_DECIMAL = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)$")
_SLASH_FRACTION = re.compile(r"^([-+]?\d+)/(\d+)$")
_LATEX_FRACTION = re.compile(r"^([-+]?)\\frac\{([-+]?\d+)\}\{(\d+)\}$")


def normalize_answer(answer: str) -> str:
    """Canonical string form of a final answer, for exact comparison.

    Args:
        answer: a final answer, e.g. "$\\dfrac{1}{2}$", "10\\text{ cm}", "x = 5", "45^\\circ".

    Returns:
        The normalized string, e.g. "\\frac{1}{2}", "10", "5", "45" (empty if nothing is left).
    """
    s = answer.strip()
    s = _SPACING.sub(" ", s).replace("{,}", ",")
    for token in _DELETE:
        s = s.replace(token, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").strip()
    while True:  # unwrap \text{...} around the whole answer, then drop a trailing unit
        match = _TEXT_ONLY.match(s) or _TRAILING_UNIT.match(s)
        if match is None:
            break
        s = match.group(1).strip()
    match = _ASSIGNMENT.match(s)
    if match is not None:
        s = match.group(1)
    s = "".join(s.split())
    s = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", s)
    s = _FRAC_HALF_SHORT.sub(r"\\frac{\1}{", s)
    s = _FRAC_HALF_SHORT_DENOM.sub(r"\\frac{\1}{\2}", s)
    s = _SQRT_SHORT.sub(r"\\sqrt{\1}", s)
    s = s.rstrip(".")
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    return s


def _as_rational(normalized: str) -> Fraction | None:
    """The exact value of a normalized plain number, or None if it is not one."""
    try:
        if _DECIMAL.match(normalized):
            return Fraction(normalized)
        match = _SLASH_FRACTION.match(normalized)
        if match is not None:
            return Fraction(int(match.group(1)), int(match.group(2)))
        match = _LATEX_FRACTION.match(normalized)
        if match is not None:
            value = Fraction(int(match.group(2)), int(match.group(3)))
            return -value if match.group(1) == "-" else value
    except (ValueError, ZeroDivisionError):  # zero denominator, or too many digits to convert
        return None
    return None


# ----------------------------------------------------------------------------------------------
# Stage 3: math-verify, in a helper process.


def _latex_wrapped(answer: str) -> str:
    """Wrap a bare answer in `$...$` so math-verify parses it as LaTeX (it is left alone if it
    already has math delimiters or a `\\boxed`)."""
    if any(marker in answer for marker in ("$", "\\boxed", "\\(", "\\[")):
        return answer
    return f"${answer}$"


def _math_verify_equal(ground_truth: str, predicted: str) -> bool:
    """math-verify's verdict, without any timeout (call only in the helper process)."""
    from math_verify import parse, verify

    gold = parse(_latex_wrapped(ground_truth), parsing_timeout=None)
    if not gold:
        return False
    pred = parse(_latex_wrapped(predicted), parsing_timeout=None)
    if not pred:
        return False
    return bool(verify(gold, pred, timeout_seconds=None))


def _serve() -> None:
    """Helper-process loop: read JSON [ground_truth, predicted] lines, answer b"1\\n"/b"0\\n"."""
    import logging

    logging.disable(logging.CRITICAL)  # math-verify warns about its disabled timeouts
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (HELPER_MEMORY_LIMIT_BYTES,) * 2)
    except (ImportError, ValueError, OSError):  # not POSIX, or the hard limit is already lower
        pass
    import math_verify  # noqa: F401  (imported before reporting ready; the first call is fast)

    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    for line in sys.stdin.buffer:
        try:
            ground_truth, predicted = json.loads(line)
            verdict = _math_verify_equal(ground_truth, predicted)
        except Exception:  # a parser crash is a wrong answer, not a dead helper
            verdict = False
        out.write(b"1\n" if verdict else b"0\n")
        out.flush()


_BOOTSTRAP = """
import signal, sys
ignored = [int(sig) for sig in sys.argv[3].split(",")]
for sig in ignored:
    signal.signal(sig, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_UNBLOCK, ignored)
import importlib.util, json
sys.path[:] = json.loads(sys.argv[2])
spec = importlib.util.spec_from_file_location("_grpo_grading_helper", sys.argv[1])
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
        # the child inherits the blocked mask; it ignores the signals before it unblocks them
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, JOB_SIGNALS)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, os.path.abspath(__file__), json.dumps(sys.path),
                 ",".join(str(int(sig)) for sig in JOB_SIGNALS)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,  # unbuffered: a fork can never inherit (and later flush) half a request
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        try:
            reply = _read_line(proc, STARTUP_TIMEOUT_S)
        except _HelperTimeout:
            reply = b""
        if reply != b"ready":
            proc.kill()
            proc.wait()
            raise RuntimeError(
                f"the math-verify grading helper did not start (exit code {proc.returncode}); "
                "is math-verify[antlr4_9_3] installed in this environment?"
            )
        return proc

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc.stdin.close()
            self._proc.stdout.close()
        self._proc = None

    def equal(self, ground_truth: str, predicted: str, timeout_s: float) -> bool:
        """math-verify's verdict, or False if it takes longer than timeout_s seconds."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._stop()
                self._proc = self._start()
            request = (json.dumps([ground_truth, predicted]) + "\n").encode()
            try:
                _write_all(self._proc.stdin.fileno(), request)
                reply = _read_line(self._proc, timeout_s)
            except (_HelperTimeout, BrokenPipeError):
                reply = b""
            if reply not in (b"0", b"1"):  # timed out, or crashed mid-call (e.g. out of memory)
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


def grade_answer(predicted: str, ground_truth: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether `predicted` is a correct final answer for `ground_truth`.

    Safe to call from any thread and from worker processes. A call takes at most about
    `timeout_s`, plus the helper's start-up (about a second) on a process's first math-verify call
    and on the call after a timeout, plus any wait for other threads' calls (they share one helper).

    Args:
        predicted: the model's final answer (already extracted from the response).
        ground_truth: the reference answer (math-verify parses it as the gold).
        timeout_s: bound in seconds on the math-verify stage; exceeding it grades as incorrect.

    Returns:
        True if the answers match by normalized string, by exact rational value, or by
        math-verify; False otherwise (including empty answers and timeouts).
    """
    predicted, ground_truth = str(predicted).strip(), str(ground_truth).strip()
    if not predicted or not ground_truth:
        return False
    norm_pred, norm_gold = normalize_answer(predicted), normalize_answer(ground_truth)
    if norm_pred and norm_pred == norm_gold:
        return True
    value_pred, value_gold = _as_rational(norm_pred), _as_rational(norm_gold)
    if value_pred is not None and value_gold is not None:
        return value_pred == value_gold
    if len(predicted) > MAX_ANSWER_CHARS or len(ground_truth) > MAX_ANSWER_CHARS:
        return False
    return _HELPER.equal(ground_truth, predicted, timeout_s)
