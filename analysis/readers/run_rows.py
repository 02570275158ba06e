"""What a run directory's metrics and status files say, read without pandas: the live monitor
and the sweep's progress read them while the jobs run (`analysis.readers.collect` builds its frames on
them). The names of the metrics every reader shares live here too; the statuses'
(`FINISHED_STATUSES`, `STOPPED_STATUSES`, `UNSTABLE_STATUSES`) are `grpo.run.finished`'s, read here."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analysis.names.metric_names import METRIC_NAMES, REWARD
from grpo.run.files import (
    MAX_STATUS_BYTES,
    RunFileError,
    parse_json,
    read_json,
    typed_status_fields,
)
from grpo.run.finished import FINISHED_STATUSES as FINISHED_STATUSES  # read by the analysis
from grpo.run.finished import STOPPED_STATUSES as STOPPED_STATUSES
from grpo.run.finished import UNSTABLE_STATUSES as UNSTABLE_STATUSES
from grpo.run.outcomes import is_reward

EVAL_REWARD = "eval/reward"
ELAPSED = "time/elapsed_s"
"""Total wall-clock of a run (evaluation included): its GPU-hours."""
TRAIN_CLOCK = "time/elapsed_no_eval_s"
"""Training wall-clock (evaluation excluded): the wall-clock axis of curves and comparisons."""
MAX_STEP = 2**53
"""The largest step a metrics row may have (more than any run trains; a larger one is a damaged
or crafted line: a frame's integers and float axes hold up to it exactly)."""
NON_FINITE = frozenset({"nan", "inf", "-inf", "+inf", "infinity", "-infinity"})


def job_dirs(sweep_dir: Path) -> list[Path]:
    """The sweep's job directories (`0/`, `1/`, ...: a directory named by its job number), in job
    order. OSError where the sweep directory cannot be listed."""
    jobs = [p for p in sweep_dir.iterdir() if p.name.isdigit() and p.is_dir()]
    return sorted(jobs, key=lambda p: int(p.name))


def is_step_row(row: Any) -> bool:
    """Whether parsed JSON `row` is a metrics row: an object whose ``step`` is an integer in
    [0, MAX_STEP]."""
    return type(row) is dict and type(step := row.get("step")) is int and 0 <= step <= MAX_STEP


def parse_line(line: str) -> tuple[dict[str, Any] | None, bool]:
    """The step row on ``line`` (None if none) and whether the line is damaged (also a row whose
    ``step`` is not an integer in [0, MAX_STEP]).

    A damaged line is a truncated write, possibly with the row written after a resume glued
    to it; metrics rows are flat, so the last ``{`` of such a line opens that row.
    """
    for damaged, text in ((False, line), (True, line[line.rfind("{"):])):
        try:
            row = parse_json(text, "a metrics line")
        except RunFileError:
            continue
        is_row = is_step_row(row)
        return (with_floats(row) if is_row else None), damaged or not is_row
    return None, True


def with_floats(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with the trainer's spelling of non-finite floats (``"nan"``, ``"inf"``) as floats."""
    return {k: float(v) if isinstance(v, str) and v.lower() in NON_FINITE else v
            for k, v in row.items()}


def read_status(run_dir: Path, has_metrics: bool) -> tuple[dict[str, Any], str | None]:
    """``status.json`` and what is wrong with it (None: nothing). Without a readable one the
    status is ``unknown``, or ``pending`` for a run with neither metrics nor the file."""
    path = run_dir / "status.json"
    if not path.exists():
        return {"status": "unknown" if has_metrics else "pending"}, ("no status.json" if has_metrics else None)
    try:
        status = read_json(path, MAX_STATUS_BYTES)
    except RunFileError as error:
        return {"status": "unknown"}, f"status.json is unreadable ({error})"
    status = typed_status_fields(status) if isinstance(status, dict) else {}
    if "status" not in status:
        return {"status": "unknown"}, "status.json holds no status"
    return status, None


REWARD_KEYS = tuple(key for key, name in METRIC_NAMES.items() if name.bounds == REWARD and "reward" in key)
"""The logged rewards (and reward parts), each a number in [0, 1] by construction."""


def bad_reward(rows: Sequence[dict[str, Any]]) -> str | None:
    """The first logged reward that is not a number in [0, 1] (``grpo.run.outcomes.is_reward``:
    a NaN, an infinity, a value out of range, a text), in words; None when every one is. A run
    that logged one is crafted or broken, and none of its metrics can be trusted."""
    for row in rows:
        for key in REWARD_KEYS:
            if key in row and not is_reward(row[key]):
                return f"step {row['step']} logged {key}={row[key]!r}, not a reward in [0, 1]"
    return None
