"""Read what a run logged to wandb in offline mode, through wandb's own public reader of the
offline transaction log (`wandb leet inspect --json`), and check it against metrics.jsonl."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def offline_history(run_dir: Path) -> list[dict]:
    """The history rows (one dict per `wandb.log` call) of the offline wandb run in `run_dir`;
    fails unless there is exactly one offline run file there."""
    files = sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, f"expected one offline wandb run in {run_dir}, found {files}"
    out = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(files[0])],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    records = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    return [r["history"]["item"] for r in records if r.get("type") == "history"]


def assert_wandb_holds_the_metrics(run_dir: Path) -> None:
    """Every metrics.jsonl row was logged to the offline wandb run, at its step, value for value."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    logged = {item["_step"]: item for item in offline_history(run_dir)}
    assert sorted(logged) == [row["step"] for row in rows]
    for row in rows:
        item = logged[row["step"]]
        assert {key: item.get(key) for key in row} == row, f"step {row['step']}"
