"""A sweep with pruning on, for real: the tiny model's runs report to one Optuna study in the sweep
directory; a run the pruner stops checkpoints and ends `pruned`, stays so when the sweep is
launched again (no job is submitted for it), trains on when it is launched with pruning=off, and a killed run re-attaches to its
own trial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from training_runs import RUN_ARGS, steps

from grpo.run.pruning import PruningSettings, open_study

ROOT = Path(__file__).resolve().parents[1]
N_STEPS = 60
# rungs at steps 20 (and 60, the end: never reported); one job at a time, so the order in which
# runs reach a rung is the job order and the outcome is fixed
SWEEP = ("model=tiny", "data=toy", "rollout=hf", f"n_grpo_steps={N_STEPS}", "eval.eval_every=20",
         "checkpoint.checkpoint_every=20", "hydra.launcher.max_parallel_jobs=1",
         "learning_rate=3e-4,3e-2,1e-3")
PRUNING = ("pruning=successive_halving", "pruning.min_resource=20")
SETTINGS = PruningSettings("successive_halving", "step", min_resource=20, reduction_factor=3)


def sweep_run(tmp_path: Path, tiny_model_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "launch.py"), "-m", *SWEEP, f"model.path={tiny_model_dir}",
         f"paths.output_root={tmp_path}", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=900)


def status(run: Path) -> dict:
    return json.loads((run / "status.json").read_text())


def eval_at(run: Path, step: int) -> float:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return next(r["eval/reward"] for r in rows if r["step"] == step)


@pytest.mark.slow
def test_pruned_runs_stop_at_a_rung_stay_pruned_and_train_on_with_pruning_off(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    # lr 3e-2 collapses (validation reward 0 at step 20), below the run before it
    out = sweep_run(tmp_path, tiny_model_dir, *PRUNING)
    assert out.returncode == 0, out.stderr[-3000:]
    (sweep,) = (p.parent for p in tmp_path.rglob("multirun.yaml"))
    runs = [sweep / str(i) for i in range(3)]
    values = [eval_at(run, 20) for run in runs]
    # the first run at the rung goes on; a later one only if it is the best so far (fewer than
    # 3 reached it before: the top 1/3 is the top one)
    expected = ["completed", "completed" if values[1] >= values[0] else "pruned",
                "completed" if values[2] >= max(values[:2]) else "pruned"]
    assert expected[1] == "pruned" and values[1] == 0.0
    assert [status(run)["status"] for run in runs] == expected
    pruned = runs[1]
    assert status(pruned)["last_step"] == 20 and "successive_halving pruner" in status(pruned)["reason"]
    assert steps(pruned) == list(range(21))
    assert (pruned / "checkpoints" / "latest").read_text().strip() == "step_000020"
    assert not (pruned / "final_model").exists()
    study = open_study(sweep, SETTINGS, N_STEPS)
    states = {t.user_attrs["job"]: t.state for t in study.trials}
    assert states == {str(i): optuna.trial.TrialState.PRUNED if s == "pruned"
                      else optuna.trial.TrialState.COMPLETE for i, s in enumerate(expected)}
    n_pruned = expected.count("pruned")
    assert f"Sweep {sweep}: 3 runs: {3 - n_pruned} completed, {n_pruned} pruned" in out.stdout
    assert "Stopped early: " in out.stdout and "CPU-hours spent of an estimated" in out.stdout

    # launched again: every run is over, the pruned one while the sweep prunes: none is submitted
    metrics_before = (pruned / "metrics.jsonl").read_bytes()
    logs = sorted((sweep / ".submitit").iterdir())
    again = sweep_run(tmp_path, tiny_model_dir, *PRUNING, f"hydra.sweep.dir={sweep}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert ("relaunch: 0 to submit, 0 still queued or running (followed), 3 finished (not "
            "submitted)") in again.stdout.splitlines()
    assert (pruned / "metrics.jsonl").read_bytes() == metrics_before
    assert status(pruned)["status"] == "pruned"
    assert sorted((sweep / ".submitit").iterdir()) == logs, "no job started"
    assert f"Sweep {sweep}: 3 runs: {3 - n_pruned} completed, {n_pruned} pruned" in again.stdout
    assert len(open_study(sweep, SETTINGS, N_STEPS).trials) == 3

    # with pruning off the pruned runs, and only they, train on from their checkpoint, every
    # step logged once
    on = sweep_run(tmp_path, tiny_model_dir, "pruning=off", f"hydra.sweep.dir={sweep}")
    assert on.returncode == 0, on.stderr[-3000:]
    assert (f"relaunch: {n_pruned} to submit, 0 still queued or running (followed), "
            f"{3 - n_pruned} finished (not submitted)") in on.stdout.splitlines()
    assert len(list((sweep / ".submitit").glob("*_log.out"))) == 3 + n_pruned
    assert status(pruned)["status"] in ("completed", "collapsed")
    assert status(pruned)["resumed_from"][-1] == 21
    assert steps(pruned)[:22] == list(range(22)) and len(set(steps(pruned))) == len(steps(pruned))
    change = json.loads((pruned / "config_changes.jsonl").read_text().splitlines()[-1])
    assert change["changes"]["pruning.name"] == ["successive_halving", "off"]


@pytest.mark.slow
def test_a_killed_run_reattaches_to_its_trial(tmp_path: Path, tiny_model_dir: Path) -> None:
    run_dir = tmp_path / "sweep" / "0"
    # a sweep of one job (a single run refuses a pruner), in run_dir
    command = [sys.executable, str(ROOT / "launch.py"), "-m", *RUN_ARGS, f"model.path={tiny_model_dir}",
               f"hydra.sweep.dir={run_dir.parent}", f"n_grpo_steps={N_STEPS}", "eval.eval_every=20",
               "pruning=successive_halving", "pruning.min_resource=20"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while len(steps(run_dir)) < 28:  # after the step-20 report and checkpoint
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    os.kill(json.loads((run_dir / ".lock").read_text())["pid"], signal.SIGKILL)  # the job itself
    proc.communicate(timeout=120)
    study = open_study(run_dir.parent, SETTINGS, N_STEPS)
    (trial,) = study.trials
    assert trial.state == optuna.trial.TrialState.RUNNING and set(trial.intermediate_values) == {0, 20}
    output = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    output, returncode = output.stdout + output.stderr, output.returncode
    assert returncode == 0, output
    (trial,) = open_study(run_dir.parent, SETTINGS, N_STEPS).trials
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.user_attrs["job"] == "0"
    assert set(trial.intermediate_values) == {0, 20, 40}
    assert trial.value == eval_at(run_dir, N_STEPS)
