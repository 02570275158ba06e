"""Real training runs in subprocesses (`launch.py`, tiny model, toy task) for the resume and
fault-injection tests, and the checks that a run lost and repeated no step."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file

from grpo.data.datasets import SPLITS

ROOT = Path(__file__).resolve().parents[1]
N_STEPS = 24
# checkpoints after steps 5, 10, 15, 20 and the last one, 24 (metrics rows: steps 0..24)
RUN_ARGS = ("model=tiny", "data=toy", "rollout=hf", f"n_grpo_steps={N_STEPS}",
            "checkpoint.checkpoint_every=5", "eval.eval_every=10")


def shipped_data(name: str) -> list[str]:
    """Overrides choosing `data=<name>` with its paths at the files shipped in `data/<name>/`,
    wherever the test runs from (the presets' paths are relative to the checkout)."""
    return [f"data={name}", *(f"data.{split}_path={ROOT / 'data' / name / f'{split}.jsonl'}"
                              for split in SPLITS)]


def launch(run_dir: Path, tiny_model_dir: Path, *overrides: str, env: Mapping[str, str] | None = None,
           prefix: Sequence[str] = ()) -> subprocess.Popen:
    """Start `launch.py` on the tiny model in `run_dir` (stdout and stderr merged).

    env: extra environment variables (e.g. the fault-injection hook of grpo.run.checkpoint);
    prefix: a command the run is started under (e.g. one that mounts the run dir read-only).
    """
    command = [*prefix, sys.executable, str(ROOT / "launch.py"), *RUN_ARGS,
               f"model.path={tiny_model_dir}", f"hydra.run.dir={run_dir}", *overrides]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, **(env or {})})


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    """Wait for `proc`; its return code and output."""
    output, _ = proc.communicate(timeout=600)
    return proc.returncode, output


def steps(run_dir: Path, name: str = "metrics.jsonl") -> list[int]:
    """The steps of the complete lines of `run_dir/name`, in file order."""
    path = run_dir / name
    if not path.exists():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.endswith("}")]


def kill_after(proc: subprocess.Popen, run_dir: Path, n_steps: int, sig: int) -> None:
    """Send `sig` to `proc` once `run_dir` has logged `n_steps` steps; wait for it to end."""
    deadline = time.time() + 240
    while len(steps(run_dir)) < n_steps:
        assert proc.poll() is None, proc.stdout.read()
        assert time.time() < deadline, "the run did not reach the step to kill at"
        time.sleep(0.05)
    proc.send_signal(sig)
    proc.wait(timeout=120)


def copy_run(source: Path, tmp_path: Path) -> Path:
    """A copy of run directory `source` at `tmp_path/run` (links copied as links)."""
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir, symlinks=True)
    return run_dir


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "final_model" / "model.safetensors"))


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def latest(run_dir: Path) -> str | None:
    """The content of `checkpoints/latest`, or None without one."""
    path = run_dir / "checkpoints" / "latest"
    return path.read_text().strip() if path.exists() else None


def assert_same_run(run_dir: Path, reference: Path, restarts: int = 1) -> None:
    """`run_dir` completed with each step 0..N logged once (0: the evaluation before the first
    update, not repeated by a restart), the same losses, evaluations and final weights as the
    uninterrupted `reference`, and both wall-clocks continuing across its `restarts`."""
    assert steps(run_dir) == list(range(N_STEPS + 1))
    ours = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    theirs = [json.loads(x) for x in (reference / "metrics.jsonl").read_text().splitlines()]
    assert "train/loss" not in ours[0] and "eval/reward" in ours[0]
    for key in ("train/loss", "eval/reward"):
        assert [r.get(key) for r in ours] == [r.get(key) for r in theirs], key
    for clock in ("time/elapsed_s", "time/elapsed_no_eval_s"):
        elapsed = [r[clock] for r in ours]
        assert elapsed == sorted(elapsed), f"{clock} must continue across the restart"
    assert all(r["time/elapsed_no_eval_s"] < r["time/elapsed_s"] for r in ours)
    a, b = final_weights(run_dir), final_weights(reference)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert status(run_dir) == {**status(run_dir), "status": "completed", "restarts": restarts}
