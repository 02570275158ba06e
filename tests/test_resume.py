"""Auto-resume: a run killed by a real signal and restarted in its directory continues its curves
(steps 0..N-1 once each) and ends with the same weights as an uninterrupted run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
N_STEPS = 24


def launch(run_dir: Path, tiny_model_dir: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "launch.py"), "model=tiny", "data=toy", "rollout=hf",
         f"model.path={tiny_model_dir}", "logging.wandb_mode=disabled", f"n_grpo_steps={N_STEPS}",
         "checkpoint.checkpoint_every=5", "eval.eval_every=10", f"hydra.run.dir={run_dir}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.endswith("}")]


def kill_after(proc: subprocess.Popen, run_dir: Path, n_steps: int, sig: int) -> None:
    deadline = time.time() + 240
    while len(steps(run_dir)) < n_steps:
        assert proc.poll() is None, proc.stdout.read()
        assert time.time() < deadline, "the run did not reach the step to kill at"
        time.sleep(0.05)
    proc.send_signal(sig)
    proc.wait(timeout=120)


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "final_model" / "model.safetensors"))


@pytest.fixture(scope="module")
def reference(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("reference")
    proc = launch(run_dir, tiny_model_dir)
    assert proc.wait(timeout=600) == 0, proc.stdout.read()
    return run_dir


def assert_same_run(run_dir: Path, reference: Path) -> None:
    assert steps(run_dir) == list(range(N_STEPS))
    ours = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    theirs = [json.loads(x) for x in (reference / "metrics.jsonl").read_text().splitlines()]
    assert [r["train/loss"] for r in ours] == [r["train/loss"] for r in theirs]
    elapsed = [r["time/elapsed_s"] for r in ours]
    assert elapsed == sorted(elapsed), "wall-clock must continue across the restart"
    a, b = final_weights(run_dir), final_weights(reference)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "completed" and status["restarts"] == 1


@pytest.mark.slow
def test_sigkill_mid_run_then_restart(tiny_model_dir: Path, tmp_path: Path, reference: Path) -> None:
    proc = launch(tmp_path, tiny_model_dir)
    kill_after(proc, tmp_path, 13, signal.SIGKILL)
    logged = steps(tmp_path)
    checkpointed = int((tmp_path / "checkpoints" / "latest").read_text().strip()[len("step_"):])
    assert len(logged) >= 13 and checkpointed in (9, 14) and len(logged) > checkpointed + 1
    proc = launch(tmp_path, tiny_model_dir)
    assert proc.wait(timeout=600) == 0, proc.stdout.read()
    discarded = (tmp_path / "metrics.discarded.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in discarded] == list(range(checkpointed + 1, len(logged)))
    assert_same_run(tmp_path, reference)


@pytest.mark.slow
def test_sigterm_checkpoints_then_restart(tiny_model_dir: Path, tmp_path: Path, reference: Path) -> None:
    proc = launch(tmp_path, tiny_model_dir)
    kill_after(proc, tmp_path, 7, signal.SIGTERM)
    assert proc.returncode == -signal.SIGTERM, "the signal is handed on once the work is safe"
    status = json.loads((tmp_path / "status.json").read_text())
    last = status["last_step"]
    assert status["status"] == "cancelled" and status["reason"].startswith("SIGTERM from scancel")
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == f"step_{last:06d}"
    assert steps(tmp_path) == list(range(last + 1))
    proc = launch(tmp_path, tiny_model_dir)
    assert proc.wait(timeout=600) == 0, proc.stdout.read()
    assert not (tmp_path / "metrics.discarded.jsonl").exists()
    assert_same_run(tmp_path, reference)
