"""Questions to the SLURM scheduler: `scontrol show <entity> --oneliner`, and the states of jobs
(`slurm_states`: sacct, then squeue).

Each record of that output is one line of `Key=Value` fields (values may hold spaces, as in
`OS=Linux 6.1 #1 SMP`). A host without the SLURM client, a failing command or one that does not
answer within the timeout raises `SchedulerUnavailable` with a one-line reason; callers say so and
go on without the answer.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping

QUERY_TIMEOUT_S = 20.0
# SLURM states of a job that is waiting or running
SCHEDULER_ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING",
                    "SUSPENDED", "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT")
UNKNOWN_TO_SLURM = "GONE"
"""The state `slurm_states` gives a job neither sacct nor squeue knows."""
# a field starts at a word followed by "=", at the start of the line or after whitespace
FIELD_START = re.compile(r"(?:^|\s)([A-Za-z][\w:/.]*)=")


def state_word(state: str | None) -> str:
    """A SLURM state's first word, upper case ("CANCELLED by 0" -> "CANCELLED"; "" for none)."""
    return (state or "").split(" ")[0].upper()


def still_held(state: str | None) -> bool:
    """Whether SLURM still holds a job in `state`: waiting, running or suspended
    (`SCHEDULER_ACTIVE`); False for no state."""
    return state_word(state) in SCHEDULER_ACTIVE


class SchedulerUnavailable(RuntimeError):
    """The scheduler could not be asked; the message says why, in one line."""


def parse_oneliner(line: str) -> dict[str, str]:
    """The `Key=Value` fields of one `scontrol --oneliner` record."""
    starts = list(FIELD_START.finditer(line))
    ends = [m.start() for m in starts[1:]] + [len(line)] if starts else []
    return {m.group(1): line[m.end() : end].strip() for m, end in zip(starts, ends, strict=True)}


def scontrol_show(entity: str, *names: str, timeout_s: float = QUERY_TIMEOUT_S) -> list[dict[str, str]]:
    """The records of `scontrol show <entity> [names]` (entity: partition, node, job)."""
    exe = shutil.which("scontrol")
    command = f"scontrol show {entity}"
    if exe is None:
        raise SchedulerUnavailable("no SLURM client on this host (scontrol is not on PATH)")
    try:
        proc = subprocess.run(
            [exe, "show", entity, "--oneliner", *names], capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        raise SchedulerUnavailable(f"`{command}` did not answer within {timeout_s:g} s") from None
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines() or [f"exit status {proc.returncode}"]
        raise SchedulerUnavailable(f"`{command}` failed: {lines[-1].strip()}")
    records = [parse_oneliner(line) for line in proc.stdout.splitlines()]
    return [r for r in records if r]


def slurm_states(job_ids: Mapping[int, str]) -> dict[int, str]:
    """The SLURM state of each job number's job id, or {} when SLURM cannot be asked.

    ``sacct`` answers first; ``squeue -r -t all`` for the jobs it does not know (without
    accounting, or array tasks still pending). A job neither knows is ``GONE`` (`UNKNOWN_TO_SLURM`): a pending array
    task that was cancelled leaves no trace (and submitit would wait for it for ever).
    """
    wanted = set(job_ids.values())
    if not wanted or shutil.which("squeue") is None:
        return {}
    found = _ask(["sacct", "-j", ",".join(sorted(wanted)), "-o", "JobID,State", "--parsable2",
                  "--noheader"]) or {}
    arrays = sorted({job_id.split("_")[0] for job_id in wanted - set(found)})
    if arrays:
        queued = _ask(["squeue", "-r", "-h", "-t", "all", "-j", ",".join(arrays), "-o", "%i|%T"])
        if queued is None:
            return {num: found[i] for num, i in job_ids.items() if i in found}
        found |= queued
    return {num: found.get(job_id, UNKNOWN_TO_SLURM) for num, job_id in job_ids.items()}


def _ask(command: list[str]) -> dict[str, str] | None:
    """``{job id: state}`` from a ``id|state`` listing, or None when the command failed."""
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return dict(line.strip().split("|", 1) for line in out.splitlines() if line.count("|") == 1)
