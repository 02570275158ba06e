"""Sweeps on the real local SLURM cluster through hydra-submitit-launcher (no mocks).

Jobs use the documented CPU preset (cluster=slurm_cpu) and wandb's default mode (offline).
Needs `scripts/slurm_cluster.sh start` (CI does it and sets GRPO_REQUIRE_SLURM=1, which turns a
missing cluster into a failure instead of a skip).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from test_slurm_cluster import require_cluster
from wandb_files import history_steps, offline_runs, run_id

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def sweep_command(tmp_path: Path, tiny_model_dir: Path, *overrides: str) -> list[str]:
    """`launch.py -m` of CPU jobs on SLURM (cluster=slurm_cpu), wandb in its default mode."""
    return [sys.executable, str(ROOT / "launch.py"), "-m", "cluster=slurm_cpu", "model=tiny",
            "data=toy", "rollout=hf", f"model.path={tiny_model_dir}", f"paths.output_root={tmp_path}",
            "hydra.launcher.array_parallelism=2", *overrides]


def slurm_sweep(tmp_path: Path, tiny_model_dir: Path, *overrides: str, timeout: int = 900):
    """Run a sweep of `sweep_command` to its end; returns the finished process."""
    return subprocess.run(sweep_command(tmp_path, tiny_model_dir, *overrides), cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout)


def jobs_named(name: str) -> list[str]:
    """SLURM jobs (any state still known to slurmctld) with this job name."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-n", name, "-o", "%i"],
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def run_dirs(tmp_path: Path) -> list[Path]:
    return sorted(p.parent for p in tmp_path.rglob("status.json"))


def logged_steps(run_dir: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_two_by_two_sweep_completes(tmp_path: Path, tiny_model_dir: Path) -> None:
    require_cluster()
    out = slurm_sweep(tmp_path, tiny_model_dir, "learning_rate=3e-4,1e-4",
                      "off_policy.epochs=1,2", "n_grpo_steps=6", "eval.eval_every=3")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    runs = run_dirs(tmp_path)
    assert len(runs) == 4 and (runs[0].parent / "multirun.yaml").exists()
    for run in runs:
        assert json.loads((run / "status.json").read_text())["status"] == "completed"
        assert logged_steps(run) == list(range(6))
        assert (run / ".hydra" / "overrides.yaml").exists()


def test_time_limit_signal_checkpoint_requeue_resume(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A 1-minute job whose run needs longer: signalled, checkpointed, requeued, resumed, finished."""
    require_cluster()
    out = slurm_sweep(
        tmp_path, tiny_model_dir, "n_grpo_steps=300", "rollout_batch_size=256",
        "train_batch_size=256", "eval.eval_every=40", "checkpoint.checkpoint_every=1000",
        "cluster.time_limit_min=1", "hydra.launcher.signal_delay_s=15",
        "hydra.launcher.max_num_timeout=40", timeout=2400,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (run,) = run_dirs(tmp_path)
    status = json.loads((run / "status.json").read_text())
    print(f"\nrequeued run: {status['restarts']} restarts, status {status['status']}")
    assert status["status"] == "completed" and status["restarts"] >= 1
    assert logged_steps(run) == list(range(300))
    assert not (run / "metrics.discarded.jsonl").exists(), "every stop was a clean checkpoint"
    segments = offline_runs(run)
    assert len(segments) == status["restarts"] + 1 and len({run_id(s) for s in segments}) == 1
    assert [step for s in segments for step in history_steps(s)] == list(range(300)), (
        "each wandb segment holds its steps, none lost at a signal")
    assert tracebacks(run.parent) == []


def job_logs(sweep_dir: Path) -> list[Path]:
    """The stderr files of the sweep's SLURM jobs (all incarnations of a job append to one)."""
    return sorted((sweep_dir / ".submitit").rglob("*_log.err"))


def tracebacks(sweep_dir: Path) -> list[str]:
    """The job logs of a sweep that hold a Python traceback, with their last lines."""
    return [f"{log}: ...{log.read_text()[-1500:]}" for log in job_logs(sweep_dir)
            if "Traceback" in log.read_text()]


def test_invalid_job_is_refused_before_sbatch(tmp_path: Path, tiny_model_dir: Path) -> None:
    require_cluster()
    name = f"grpo-invalid-{uuid.uuid4().hex[:8]}"  # other sweeps may share the cluster
    out = slurm_sweep(tmp_path, tiny_model_dir, "train_batch_size=64,100",
                      f"hydra.launcher.name={name}", timeout=300)
    assert out.returncode == 2
    assert "1 of 2 jobs are invalid; nothing was submitted" in out.stderr
    assert "rollout_batch_size=64 must be divisible by train_batch_size=100" in out.stderr
    assert jobs_named(name) == []
    assert not list(tmp_path.rglob(".submitit"))
