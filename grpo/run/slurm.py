"""Questions to the SLURM scheduler, asked through `scontrol show <entity> --oneliner`.

Each record of that output is one line of `Key=Value` fields (values may hold spaces, as in
`OS=Linux 6.1 #1 SMP`). A host without the SLURM client, a failing command or one that does not
answer within the timeout raises `SchedulerUnavailable` with a one-line reason; callers say so and
go on without the answer.
"""

from __future__ import annotations

import re
import shutil
import subprocess

QUERY_TIMEOUT_S = 20.0
# a field starts at a word followed by "=", at the start of the line or after whitespace
FIELD_START = re.compile(r"(?:^|\s)([A-Za-z][\w:/.]*)=")


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
