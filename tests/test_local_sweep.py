"""The local launcher runs a whole sweep on this machine, a bounded pool at a time, each job in its
own directory with its own ports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grpo.sweep.job import assign_job_ports
from hydra_plugins.grpo_sweeps.pooled_local_launcher import pool_size

ROOT = Path(__file__).resolve().parents[1]


def test_each_job_takes_distinct_free_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("MASTER_ADDR", "MASTER_PORT", "VLLM_PORT"):
        monkeypatch.delenv(key, raising=False)
    ports = assign_job_ports()
    assert ports["MASTER_PORT"] != ports["VLLM_PORT"]
    assert all(1024 < int(ports[k]) < 65536 for k in ("MASTER_PORT", "VLLM_PORT"))
    monkeypatch.setenv("MASTER_PORT", "29555")
    assert assign_job_ports()["MASTER_PORT"] == "29555", "a port set by the user is kept"


def test_pool_size_counts_cores_and_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4")
    assert pool_size(gpus_per_job=0, cpus_per_job=4, max_parallel_jobs=None) == 4
    assert pool_size(gpus_per_job=2, cpus_per_job=1, max_parallel_jobs=None) == 2
    assert pool_size(gpus_per_job=1, cpus_per_job=2, max_parallel_jobs=3) == 3
    with pytest.raises(RuntimeError, match="cluster.gpus_per_job=8 but this machine has 5 GPU"):
        pool_size(gpus_per_job=8, cpus_per_job=1, max_parallel_jobs=None)


@pytest.mark.slow
def test_nine_job_sweep_runs_to_completion_on_cpu(tmp_path: Path, tiny_model_dir: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "launch.py"), "-m", "off_policy.epochs=1,2,4",
         "train_batch_size=64,128,256", "model=tiny", "data=toy", "rollout=hf",
         f"model.path={tiny_model_dir}", "rollout_batch_size=256", "n_grpo_steps=2",
         "loss=grpo_clip", f"paths.output_root={tmp_path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (sweep,) = (p.parent for p in tmp_path.rglob("multirun.yaml"))
    runs = sorted((p for p in sweep.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    assert [r.name for r in runs] == [str(i) for i in range(9)]
    for run in runs:
        status = json.loads((run / "status.json").read_text())
        assert status["status"] == "completed" and status["last_step"] == 1
        overrides = yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text())
        epochs = int(next(o for o in overrides if o.startswith("off_policy.epochs=")).split("=")[1])
        tbs = int(next(o for o in overrides if o.startswith("train_batch_size=")).split("=")[1])
        records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records] == [0, 1]
        assert records[0]["train/optimizer_steps_this_grpo_step"] == epochs * 256 // tbs
