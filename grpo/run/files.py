"""A run directory's bookkeeping files: `metrics.jsonl` (one line per GRPO step) and `status.json`,
and the write and read primitives every file of a run directory goes through.

Both are written so that nothing is lost: status is replaced atomically; metrics are appended
and flushed line by line. On resume, lines of steps after the checkpoint (logged, then lost with
the crash) are moved to `metrics.discarded.jsonl` so that `metrics.jsonl` holds each step once.

Writes never follow a symbolic link planted in a run directory: appends open with `O_NOFOLLOW`,
replacements write a temporary file of a unique name (`O_EXCL`) and rename it over the target
(a rename replaces a link, never writes through it), and `subdir` refuses a link where a
directory of the run should be. Reads are bounded (`read_json`, `read_yaml`, `MetricsLog.read`): a
file that is too large, not UTF-8, not JSON (or YAML), or nested too deeply is a `RunFileError` (a
`ValueError`) with a one-line message, never a traceback of the parser.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import tempfile
from collections.abc import Callable
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from omegaconf._utils import get_yaml_loader

# running: training (or killed without a word: SIGKILL, node failure); completed: all steps done;
# diverged / collapsed: stopped by the health checks; pruned: stopped by the sweep's pruner
# (grpo.run.pruning) with a checkpoint at its last step; failed: stopped by an error (reason);
# preempted: stopped by SIGUSR2 or a requeue with a checkpoint at its last step, and requeued:
# it resumes by itself; cancelled: stopped by SIGTERM (scancel, hard time limit, kill) with a
# checkpoint at its last step: launching the same sweep again resumes it
STATUSES = ("running", "completed", "diverged", "collapsed", "pruned", "failed", "preempted",
            "cancelled")
MAX_JSON_BYTES = 64 << 20
"""Largest JSON file of a run directory that is read (a status or manifest is a few kB, a
checkpoint's trainer-state JSON a few MB)."""
MAX_STATUS_BYTES = 1 << 20
"""Largest status.json that is read (it is a few hundred bytes)."""
MAX_METRICS_BYTES = 1 << 30
"""Largest metrics.jsonl that is read (a 200-step run's is about 1 MB)."""
log = logging.getLogger(__name__)
_UMASK = os.umask(0o022)
os.umask(_UMASK)


class RunDirError(RuntimeError):
    """A run directory the run cannot use as it is; the message says what to fix. Printed
    without a traceback by the job (grpo.sweep.job)."""


class RunFileError(ValueError):
    """A file of a run directory that cannot be read as what it should be; the message says why."""


def read_bytes(path: Path, max_bytes: int) -> bytes:
    """The content of `path`, or RunFileError when it is unreadable or larger than `max_bytes`."""
    try:
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as err:
        raise RunFileError(f"{path.name} is unreadable ({err.strerror or err})") from None
    if len(data) > max_bytes:
        raise RunFileError(f"{path.name} is larger than {max_bytes} bytes") from None
    return data


def parse_json(data: bytes | str, name: str) -> Any:
    """`data` parsed as JSON; RunFileError (naming `name`) when it is not UTF-8 JSON or nested
    too deeply to parse."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        what = "nested too deeply" if isinstance(err, RecursionError) else str(err)[:200]
        raise RunFileError(f"{name} is not readable JSON ({what})") from None


def read_json(path: Path, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """`path` parsed as JSON, bounded (see `read_bytes`, `parse_json`)."""
    return parse_json(read_bytes(path, max_bytes), path.name)


class _YamlLoader(yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader):
    """libyaml's parser with OmegaConf's scalars (``1e-5`` is a float, dates stay text)."""


_YamlLoader.yaml_implicit_resolvers = get_yaml_loader().yaml_implicit_resolvers
MAX_YAML_BYTES = 16 << 20
"""Largest YAML file of a run directory read (Hydra's `.hydra/` files are a few kB)."""
MAX_YAML_DEPTH = 64
"""Deepest nesting of a YAML file read (Hydra's nest 5 levels)."""


def read_yaml(path: Path) -> Any:
    """The plain data of a YAML file (None when missing); much faster than OmegaConf.load.
    RunFileError when it is too large, nested too deeply or not UTF-8; yaml.YAMLError when it is
    not YAML."""
    if not path.is_file():
        return None
    try:
        text = read_bytes(path, MAX_YAML_BYTES).decode()
    except UnicodeDecodeError:
        raise RunFileError(f"{path.name} is not UTF-8") from None
    return parse_yaml(text, path.name)


def parse_yaml(text: str, name: str) -> Any:
    """The plain data of YAML `text` (of file `name`, for messages); RunFileError when it is
    nested too deeply, yaml.YAMLError when it is not YAML."""
    depth = 0  # libyaml's constructor recurses in C: a deeply nested file would crash the process
    for event in yaml.parse(text, Loader=_YamlLoader):
        depth += isinstance(event, yaml.CollectionStartEvent) - isinstance(event, yaml.CollectionEndEvent)
        if depth > MAX_YAML_DEPTH:
            raise RunFileError(f"{name} is nested more than {MAX_YAML_DEPTH} levels deep")
    return yaml.load(text, Loader=_YamlLoader)


def planted_link(path: Path) -> RunDirError:
    """The refusal to write through `path`, a symbolic link where a run's own file should be."""
    return RunDirError(f"{path} is a symbolic link; a run or sweep directory's files are its own: "
                       "remove it and start again")


def subdir(run_dir: Path, name: str) -> Path:
    """`run_dir/name`, created if missing; RunDirError when it is a symbolic link or not a
    directory (writes there would land outside the run directory)."""
    path = run_dir / name
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        pass
    if path.is_symlink():
        raise planted_link(path)
    if not path.is_dir():
        raise RunDirError(f"{path} is not a directory; remove it and start the run again")
    return path


def append_line(path: Path, line: str) -> None:
    """Append `line` and a newline to `path` (created if missing), flushed to disk; never through
    a symbolic link (RunDirError)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise planted_link(path) from None
        raise
    with os.fdopen(fd, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""No space left, over quota, file larger than allowed: a write that freeing space fixes."""


def is_disk_full(err: BaseException) -> bool:
    """Whether `err` (an OSError, or safetensors' error around one) says the disk is full."""
    if isinstance(err, OSError):
        return err.errno in DISK_FULL_ERRNOS
    return any(f"(os error {n})" in str(err) for n in DISK_FULL_ERRNOS) or (
        err.__cause__ is not None and is_disk_full(err.__cause__))


def check_writable(run_dir: Path) -> None:
    """Raise RunDirError unless the run can write where it writes: `run_dir` and its
    `checkpoints/` and `rollouts/` (new files), `metrics.jsonl` (appended). Changes nothing."""
    for directory in (run_dir, run_dir / "checkpoints", run_dir / "rollouts"):
        if not directory.is_dir():
            continue
        try:
            fd, probe = tempfile.mkstemp(dir=directory, prefix=".write_probe_")  # a new name
            os.close(fd)
            os.unlink(probe)
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


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Make `path` by `write(tmp)` into a new temporary file of a unique name beside it, then a
    rename (which replaces a symbolic link at `path` rather than writing through it): a reader
    sees the old file or the whole new one. `write` is e.g. a frame's `to_csv` or a figure's
    `savefig` (give the format: the temporary name ends in `.tmp`). An OSError names `path`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # as open() would create it (mkstemp's is private)
        os.close(fd)
        write(Path(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:  # named by the file it makes, not the temporary one
        Path(tmp).unlink(missing_ok=True)
        raise type(err)(err.errno, err.strerror, str(path)) from err
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` atomically, never through a link (`atomic_write`)."""
    atomic_write(path, lambda tmp: tmp.write_text(text))


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # "nan" / "inf": strict JSON, and still visible to a reader
    return value


def metrics_row(line: bytes) -> dict[str, Any] | None:
    """One line of metrics.jsonl as a record (a JSON object with an integer `step` >= 0), or None
    when it is not one (torn, not UTF-8, crafted)."""
    try:
        record = parse_json(line, "a metrics line")
    except RunFileError:
        return None
    if not isinstance(record, dict):
        return None
    step = record.get("step")
    return record if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None


class MetricsLog:
    """Append-only `metrics.jsonl` of a run."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.discarded = run_dir / "metrics.discarded.jsonl"

    def _lines(self) -> list[bytes]:
        if not self.path.exists():
            return []
        return read_bytes(self.path, MAX_METRICS_BYTES).splitlines()

    def read(self) -> list[dict[str, Any]]:
        """All records (lines that are not one, e.g. a torn last line, are skipped)."""
        return [r for r in map(metrics_row, self._lines()) if r is not None]

    def steps_missing(self, last_step: int) -> list[int]:
        """The steps 0..last_step that have no record."""
        return sorted(set(range(last_step + 1)) - {r["step"] for r in self.read()})

    def truncate_after(self, last_step: int) -> int:
        """Keep the records of steps <= last_step; move the rest, and every line that is not a
        record, to metrics.discarded.jsonl (a warning counts them). Returns how many moved."""
        lines = self._lines()
        records = [metrics_row(line) for line in lines]
        kept = [r for r in records if r is not None and r["step"] <= last_step]
        dropped = [json.dumps(r) for r in records if r is not None and r["step"] > last_step]
        unreadable = [line for line, r in zip(lines, records, strict=True) if r is None and line.strip()]
        if unreadable:
            log.warning(f"{self.path}: {len(unreadable)} lines are not metrics records (torn, not "
                        f"UTF-8 or without an integer step); moved to {self.discarded.name}")
        dropped += [json.dumps({"unreadable_line": line.decode("utf-8", "replace")}) for line in unreadable]
        for line in dropped:
            append_line(self.discarded, line)
        if dropped or (lines and self._has_torn_line()):
            atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        return len(dropped)

    def _has_torn_line(self) -> bool:
        with self.path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"

    def append(self, record: dict[str, Any]) -> None:
        """Append one step's record and flush it to disk (never through a symbolic link)."""
        append_line(self.path, json.dumps({k: _json_value(v) for k, v in record.items()}))


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


STATUS_FIELDS: dict[str, tuple[type, ...]] = {
    "status": (str,), "reason": (str, type(None)), "last_step": (int, type(None)),
    "n_grpo_steps": (int,), "restarts": (int,), "resumed_from": (list,), "updated_at": (str,),
}
"""The fields of status.json and their types; a field of another type is dropped on reading."""


def _readable_status(run_dir: Path) -> dict[str, Any]:
    """The status on disk as a dict of fields of the right types (`STATUS_FIELDS`); empty when
    missing, torn or not a JSON object."""
    try:
        status = read_json(run_dir / "status.json", MAX_STATUS_BYTES)
    except RunFileError:
        return {}
    return typed_status_fields(status) if isinstance(status, dict) else {}


def typed_status_fields(status: dict[str, Any]) -> dict[str, Any]:
    """The fields of a status.json object that are known and of their type (`STATUS_FIELDS`)."""
    return {key: value for key, value in status.items() if key in STATUS_FIELDS
            and isinstance(value, STATUS_FIELDS[key]) and not isinstance(value, bool)}


def read_status(run_dir: Path) -> dict[str, Any] | None:
    """The run's `status.json` (fields of the wrong type dropped, `STATUS_FIELDS`), or None if it
    has none or it is not a JSON object (a warning)."""
    path = run_dir / "status.json"
    if not path.exists() and not path.is_symlink():
        return None
    try:
        status = read_json(path, MAX_STATUS_BYTES)
        problem = None if isinstance(status, dict) else "not a JSON object"
    except RunFileError as err:
        problem = str(err)
    if problem is not None:
        log.warning(f"{path} is unreadable ({problem}); it is rewritten, the restart count starts at 0")
        return None
    return typed_status_fields(status)


def silence(fd: int) -> None:
    """Point file descriptor `fd`, and stderr where it writes to the same file, at /dev/null
    (its reader has gone: a broken pipe; what is written from now on goes nowhere, and the
    interpreter's last flush raises nothing)."""
    sinks = [fd]
    with suppress(OSError):  # stderr closed: nothing to point anywhere
        if fd != 2 and os.path.samestat(os.fstat(fd), os.fstat(2)):
            sinks.append(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    for sink in sinks:
        os.dup2(devnull, sink)
    os.close(devnull)
