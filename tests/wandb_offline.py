"""Read what a run logged to wandb in offline mode, through wandb's own public reader of the
offline transaction log (`wandb leet inspect --json`), and find the wandb services a test started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def offline_runs(run_dir: Path) -> list[Path]:
    """The offline-run folders (`wandb/offline-run-<date>_<time>-<id>`) of a run directory, oldest
    first: one per segment of a run that was stopped and resumed."""
    return sorted((run_dir / "wandb").glob("offline-run-*"))


def run_id(offline_run: Path) -> str:
    """The wandb run id of an offline-run folder, from its `run-<id>.wandb` file (the folder's
    name gets a suffix when a segment starts within the same second as the one before)."""
    (path,) = offline_run.glob("run-*.wandb")
    return path.name.removeprefix("run-").removesuffix(".wandb")


def segment_history(offline_run: Path) -> list[dict]:
    """The history rows (one dict per `wandb.log` call) of one offline-run folder, in the order
    written."""
    (path,) = offline_run.glob("run-*.wandb")
    out = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    records = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    return [r["history"]["item"] for r in records if r.get("type") == "history"]


def history_steps(offline_run: Path) -> list[int]:
    """The steps of the history rows of one offline-run folder, in the order written."""
    return [int(item["_step"]) for item in segment_history(offline_run)]


def offline_history(run_dir: Path) -> list[dict]:
    """The history rows of the offline wandb run in `run_dir`; fails unless there is exactly one
    offline run there."""
    segments = offline_runs(run_dir)
    assert len(segments) == 1, f"expected one offline wandb run in {run_dir}, found {segments}"
    return segment_history(segments[0])


def assert_wandb_holds_the_metrics(run_dir: Path) -> None:
    """Every metrics.jsonl row was logged to the offline wandb run, at its step, value for value."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    logged = {item["_step"]: item for item in offline_history(run_dir)}
    assert sorted(logged) == [row["step"] for row in rows]
    for row in rows:
        item = logged[row["step"]]
        assert {key: item.get(key) for key in row} == row, f"step {row['step']}"


def service_pids() -> list[int]:
    """Process ids of the running wandb-core services started by this process."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm, fields = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        state, parent = fields[0], int(fields[1])
        if comm == "wandb-core" and parent == os.getpid() and state != "Z":  # Z: exited, not reaped
            pids.append(int(stat.parent.name))
    return pids
