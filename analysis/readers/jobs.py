"""A sweep's jobs as its launcher recorded them (``<sweep>/jobs.json``: every job's overrides and
scheduler job id, so that jobs that never started, queued or cancelled before they wrote a status,
are listed too) and what the scheduler says of them now, from any shell: read by the live view
(:mod:`analysis.outputs.progress`), the report, the relaunch and the chain."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.run.files import atomic_write_text
from grpo.run.slurm import slurm_states

JOBS_FILE = "jobs.json"


@dataclass(frozen=True)
class Job:
    """One job of a sweep as the launcher submitted it.

    ``job_id`` is the scheduler's id (SLURM ``<array>_<task>``, a local job's process id);
    ``log`` the job's stderr file, where a traceback of a failed job ends up.
    """

    num: int
    overrides: tuple[str, ...]
    job_id: str | None = None
    log: str | None = None


@dataclass(frozen=True)
class JobsFile:
    """``<sweep>/jobs.json``: the launcher kind, where it runs, and its jobs by number."""

    launcher: str
    host: str
    pid: int
    jobs: dict[int, Job] = field(default_factory=dict)


def write_jobs(sweep_dir: Path, launcher: str, jobs: Iterable[Job]) -> None:
    """Record ``jobs`` in ``<sweep>/jobs.json`` (merged by job number with what is there)."""
    known = read_jobs(sweep_dir)
    merged = dict(known.jobs) if known is not None else {}
    merged.update({job.num: job for job in jobs})
    payload = {
        "launcher": launcher, "host": socket.gethostname(), "pid": os.getpid(),
        "jobs": [{"num": j.num, "overrides": list(j.overrides), "job_id": j.job_id, "log": j.log}
                 for j in sorted(merged.values(), key=lambda j: j.num)],
    }
    atomic_write_text(sweep_dir / JOBS_FILE, json.dumps(payload, indent=1) + "\n")


def read_jobs(sweep_dir: Path) -> JobsFile | None:
    """``<sweep>/jobs.json``, or None when it is missing or unreadable; bad entries are skipped."""
    try:
        payload = json.loads((sweep_dir / JOBS_FILE).read_text())
        entries = payload["jobs"]
        info = JobsFile(str(payload["launcher"]), str(payload["host"]), int(payload["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for entry in entries if isinstance(entries, list) else []:
        try:
            job = Job(int(entry["num"]), tuple(str(o) for o in entry["overrides"]),
                      str_or_none(entry.get("job_id")), str_or_none(entry.get("log")))
        except (KeyError, TypeError, ValueError):
            continue
        info.jobs[job.num] = job
    return info


def str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def override_key(override: str) -> str:
    """``learning_rate`` of ``learning_rate=3e-4``, ``+experiment=demo`` or ``~x``."""
    return override.split("=", 1)[0].lstrip("+~")


def varying_keys(overrides: Sequence[Sequence[str]]) -> list[str]:
    """Keys whose value differs between the jobs (every key when there is one job)."""
    values: dict[str, set[str]] = {}
    for job in overrides:
        for override in job:
            values.setdefault(override_key(override), set()).add(override)
    if len(overrides) == 1:
        return [k for k in values if not k.startswith("hydra")]
    return [k for k, seen in values.items()
            if len(seen) > 1 or sum(k in map(override_key, job) for job in overrides) < len(overrides)]


def local_states(info: JobsFile) -> dict[int, str]:
    """For local jobs when on their host: RUNNING or FINISHED for a started job (its process),
    LAUNCHER_GONE for one that was never started and never will be; else {}."""
    if info.host != socket.gethostname():
        return {}
    launcher_alive = _alive(str(info.pid))
    states = {}
    for num, job in info.jobs.items():
        if job.job_id and job.job_id.isdigit():
            states[num] = "RUNNING" if _alive(job.job_id) else "FINISHED"
        elif not launcher_alive:
            states[num] = "LAUNCHER_GONE"
    return states


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def scheduler_states(sweep_dir: Path) -> dict[int, str]:
    """What the scheduler says about the jobs recorded in ``<sweep>/jobs.json`` (see above)."""
    info = read_jobs(sweep_dir)
    if info is None:
        return {}
    if info.launcher == "slurm":
        return slurm_states({n: j.job_id for n, j in info.jobs.items() if j.job_id})
    return local_states(info)
