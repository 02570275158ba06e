"""A run directory's bookkeeping files: `metrics.jsonl` (one line per GRPO step) and `status.json`.

Both are written so that nothing is lost: status is replaced atomically; metrics are appended
and flushed line by line. On resume, lines of steps after the checkpoint (logged, then lost with
the crash) are moved to `metrics.discarded.jsonl` so that `metrics.jsonl` holds each step once.
"""

from __future__ import annotations

import json
import logging
import math
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

# running: training (or killed without a word: SIGKILL, node failure); completed: all steps done;
# diverged / collapsed: stopped by the health checks; failed: stopped by an error (reason);
# preempted: stopped by SIGUSR2 or a requeue with a checkpoint at its last step, and requeued:
# it resumes by itself; cancelled: stopped by SIGTERM (scancel, hard time limit, kill) with a
# checkpoint at its last step: launching the same sweep again resumes it
STATUSES = ("running", "completed", "diverged", "collapsed", "failed", "preempted", "cancelled")
log = logging.getLogger(__name__)


class RunDirError(RuntimeError):
    """A run directory the run cannot use as it is; the message says what to fix. Printed
    without a traceback by the job (grpo.sweep.job)."""


def check_writable(run_dir: Path) -> None:
    """Raise RunDirError unless the run can write where it writes: `run_dir` and its
    `checkpoints/` and `rollouts/` (new files), `metrics.jsonl` (appended). Changes nothing."""
    for directory in (run_dir, run_dir / "checkpoints", run_dir / "rollouts"):
        if not directory.is_dir():
            continue
        probe = directory / f".write_probe_{os.getpid()}"
        try:
            probe.touch()
            probe.unlink()
        except OSError as err:
            raise RunDirError(not_writable(run_dir, directory, err)) from err
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists() and not os.access(metrics, os.W_OK):
        raise RunDirError(not_writable(run_dir, metrics, PermissionError(13, "Permission denied")))


def not_writable(run_dir: Path, path: Path, err: OSError) -> str:
    """The refusal for a run directory where `path` cannot be written (`err`)."""
    return (f"the run directory {run_dir} is not writable: {path}: {err.strerror}. Nothing was "
            f"changed; make it writable (e.g. `chmod -R u+w {run_dir}`, or remount the file "
            "system read-write) and start the run again to resume it")


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan" / "inf": strict JSON, and still visible to a reader
    return value


class MetricsLog:
    """Append-only `metrics.jsonl` of a run."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "metrics.jsonl"

    def read(self) -> list[dict[str, Any]]:
        """All complete records (a torn last line is skipped)."""
        if not self.path.exists():
            return []
        records = []
        for line in self.path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return records

    def truncate_after(self, last_step: int) -> int:
        """Keep the records of steps <= last_step; move the rest aside. Returns how many moved."""
        records = self.read()
        kept = [r for r in records if r["step"] <= last_step]
        dropped = [r for r in records if r["step"] > last_step]
        if dropped:
            with (self.path.parent / "metrics.discarded.jsonl").open("a") as f:
                f.writelines(json.dumps(r) + "\n" for r in dropped)
        if dropped or len(kept) != len(records) or (records and self._has_torn_line()):
            atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        return len(dropped)

    def _has_torn_line(self) -> bool:
        text = self.path.read_text()
        return bool(text) and not text.endswith("\n")

    def append(self, record: dict[str, Any]) -> None:
        """Append one step's record and flush it to disk."""
        line = json.dumps({k: _json_value(v) for k, v in record.items()})
        with self.path.open("a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


def write_status(
    run_dir: Path,
    status: str,
    *,
    last_step: int | None,
    n_grpo_steps: int,
    restarts: int,
    reason: str | None = None,
) -> None:
    """Replace `status.json` with the run's current state.

    `resumed_from` keeps the step each restart continued from: the first write with a higher
    `restarts` than the file on disk starts a new attempt after `last_step` (0: from scratch).
    """
    if status not in STATUSES:
        raise ValueError(f"unknown run status {status!r}")
    previous = _readable_status(run_dir)
    known = previous.get("resumed_from")
    resumed_from = [s for s in known if isinstance(s, int)] if isinstance(known, list) else []
    previous_restarts = previous.get("restarts")
    if restarts > (previous_restarts if isinstance(previous_restarts, int) else 0):
        resumed_from.append(0 if last_step is None else last_step + 1)
    payload = {
        "status": status,
        "reason": reason,
        "last_step": last_step,
        "n_grpo_steps": n_grpo_steps,
        "restarts": restarts,
        "resumed_from": resumed_from,
        "updated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    atomic_write_text(run_dir / "status.json", json.dumps(payload, indent=2) + "\n")


def _readable_status(run_dir: Path) -> dict[str, Any]:
    """The status on disk as a dict; empty when missing, torn or not a JSON object."""
    try:
        status = json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}
    return status if isinstance(status, dict) else {}


def read_status(run_dir: Path) -> dict[str, Any] | None:
    """The run's `status.json`, or None if it has none or it is not a JSON object (a warning)."""
    path = run_dir / "status.json"
    if not path.exists():
        return None
    try:
        status = json.loads(path.read_bytes())
        problem = None if isinstance(status, dict) else "not a JSON object"
    except (OSError, ValueError) as err:
        problem = str(err)
    if problem is not None:
        log.warning(f"{path} is unreadable ({problem}); it is rewritten, the restart count starts at 0")
        return None
    return status
