"""Auto-resume: a run killed by a real signal and restarted in its directory continues its curves
(steps 0..N once each, 0 being the evaluation before the first update) and ends with the same weights as an uninterrupted run."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from training_runs import assert_same_run, finish, kill_after, latest, launch, steps


@pytest.mark.slow
def test_sigkill_mid_run_then_restart(tiny_model_dir: Path, tmp_path: Path, reference: Path) -> None:
    proc = launch(tmp_path, tiny_model_dir)
    kill_after(proc, tmp_path, 13, signal.SIGKILL)
    logged = steps(tmp_path)
    checkpointed = int(latest(tmp_path)[len("step_"):])
    assert len(logged) >= 13 and checkpointed in (10, 15) and len(logged) > checkpointed + 1
    returncode, output = finish(launch(tmp_path, tiny_model_dir))
    assert returncode == 0, output
    assert steps(tmp_path, "metrics.discarded.jsonl") == list(range(checkpointed + 1, len(logged)))
    assert_same_run(tmp_path, reference)
    resumed = json.loads((tmp_path / "status.json").read_text())["resumed_from"]
    assert resumed == [checkpointed + 1], "status.json says where the restart continued"


@pytest.mark.slow
def test_sigterm_checkpoints_then_restart(tiny_model_dir: Path, tmp_path: Path, reference: Path) -> None:
    proc = launch(tmp_path, tiny_model_dir)
    kill_after(proc, tmp_path, 7, signal.SIGTERM)
    assert proc.returncode == -signal.SIGTERM, "the signal is handed on once the work is safe"
    status = json.loads((tmp_path / "status.json").read_text())
    last = status["last_step"]
    assert status["status"] == "cancelled" and status["reason"].startswith("SIGTERM from scancel")
    assert latest(tmp_path) == f"step_{last:06d}"
    assert steps(tmp_path) == list(range(last + 1))
    returncode, output = finish(launch(tmp_path, tiny_model_dir))
    assert returncode == 0, output
    assert not (tmp_path / "metrics.discarded.jsonl").exists()
    assert_same_run(tmp_path, reference)
    assert json.loads((tmp_path / "status.json").read_text())["resumed_from"] == [last + 1]
