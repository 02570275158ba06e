"""scancel and preemption of real SLURM jobs, with wandb in its default mode (offline).

SLURM sends SIGTERM to every process of a cancelled or requeued job, wandb's service (wandb-core)
included, which dies of it holding steps it has not written. Each stop must still end in a
checkpoint at the step the signal interrupted, a status that says what happened, a resume that
redoes no step and continues the same wandb run id, and no traceback in the job's log.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from test_slurm_cluster import require_cluster
from test_slurm_sweep import jobs_named, logged_steps, sweep_command, tracebacks
from wandb_offline import history_steps, offline_runs, run_id

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
N_STEPS = 20
REDONE = re.compile(r"resumed from \S+ after step (\d+) \((\d+) uncheckpointed steps redone\)")


def start_sweep(tmp_path: Path, tiny_model_dir: Path, name: str) -> subprocess.Popen:
    """A one-job sweep of N_STEPS steps whose only checkpoints are the ones a signal asks for."""
    command = sweep_command(
        tmp_path, tiny_model_dir, f"n_grpo_steps={N_STEPS}", "checkpoint.checkpoint_every=1000",
        "eval.eval_every=1000", f"hydra.sweep.dir={tmp_path / 'sweep'}", f"hydra.launcher.name={name}",
    )
    return subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def running_job(proc: subprocess.Popen, run: Path, name: str, n_steps: int) -> str:
    """The SLURM id of the sweep's job once its run has logged `n_steps` steps."""
    deadline = time.time() + 900  # the job may wait behind other sweeps sharing the cluster
    while not (run / "metrics.jsonl").exists() or len(logged_steps(run)) < n_steps:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.time() < deadline, "the job did not reach the step to signal at"
        time.sleep(0.2)
    (job,) = jobs_named(name)
    return job


def finish(proc: subprocess.Popen, timeout: int = 900, returncode: int = 0) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == returncode, out[-3000:]
    return out


def status(run: Path) -> dict:
    return json.loads((run / "status.json").read_text())


def resumes(run: Path) -> list[tuple[int, int]]:
    """(GRPO steps done when it resumed, steps redone) of each resume of the run, from its log."""
    return [(int(a), int(b)) for a, b in REDONE.findall((run / "launch.log").read_text())]


def test_scancel_checkpoints_at_the_signal_and_the_rerun_redoes_nothing(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    require_cluster()
    name = f"grpo-cancel-{uuid.uuid4().hex[:8]}"
    run = tmp_path / "sweep" / "0"
    proc = start_sweep(tmp_path, tiny_model_dir, name)
    subprocess.run(["scancel", running_job(proc, run, name, 3)], check=True)
    out = finish(proc, returncode=1)  # the cancelled job returned its status: a run did not finish
    assert out.strip().splitlines()[-1] == "error: 1 of 1 runs did not finish (1 cancelled); see the summary above"
    stopped = status(run)
    last = stopped["last_step"]
    assert stopped["status"] == "cancelled" and stopped["reason"].startswith("SIGTERM from scancel"), stopped
    assert 2 <= last < N_STEPS  # rows 0 (the evaluation before the first update) to 2 logged
    assert (run / "checkpoints" / "latest").read_text().strip() == f"step_{last:06d}"
    assert logged_steps(run) == list(range(last + 1))
    before = offline_runs(run)
    assert history_steps(before[-1]) == list(range(last + 1)), "wandb holds every step up to the signal"
    assert tracebacks(tmp_path / "sweep") == []

    proc = start_sweep(tmp_path, tiny_model_dir, name)  # the same sweep again
    finish(proc)
    assert status(run)["status"] == "completed" and status(run)["restarts"] == 1
    assert logged_steps(run) == list(range(N_STEPS + 1))  # step 0 not repeated by the rerun
    assert not (run / "metrics.discarded.jsonl").exists()
    ((resumed_after, redone),) = resumes(run)
    after = offline_runs(run)[len(before):]
    assert (resumed_after, redone) == (last, 0)
    assert [step for segment in after for step in history_steps(segment)] == list(range(last + 1, N_STEPS + 1))
    ids_before, ids_after = {run_id(r) for r in before}, {run_id(r) for r in after}
    assert len(ids_before) == 1 and ids_after == ids_before
    assert tracebacks(tmp_path / "sweep") == []
    print(f"\ncancel: status {stopped['status']} at step {last}; steps redone on rerun: {redone}; "
          f"wandb run id before {ids_before.pop()}, after {ids_after.pop()}")


def test_requeue_checkpoints_at_the_signal_and_the_job_resumes_by_itself(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """`scontrol requeue` is what submitit does on SIGUSR2 and what SLURM's preemption
    (PreemptMode=REQUEUE) does: SIGTERM to the whole job, then the job runs again."""
    require_cluster()
    name = f"grpo-requeue-{uuid.uuid4().hex[:8]}"
    run = tmp_path / "sweep" / "0"
    proc = start_sweep(tmp_path, tiny_model_dir, name)
    subprocess.run(["scontrol", "requeue", running_job(proc, run, name, 3)], check=True)
    finish(proc)  # waits for the requeued job to finish the run
    final = status(run)
    assert final["status"] == "completed" and final["restarts"] == 1
    assert logged_steps(run) == list(range(N_STEPS + 1))  # step 0 not repeated by the resume
    assert not (run / "metrics.discarded.jsonl").exists()
    ((resumed_after, redone),) = resumes(run)
    assert redone == 0
    stop = re.search(r"run stopped at step (\d+): preempted \(SIGTERM as SLURM requeued the job",
                     (run / "launch.log").read_text())
    assert stop and int(stop.group(1)) == resumed_after
    segments = offline_runs(run)
    assert len({run_id(s) for s in segments}) == 1
    assert history_steps(segments[-2]) == list(range(resumed_after + 1)), "the replay after the signal"
    assert history_steps(segments[-1]) == list(range(resumed_after + 1, N_STEPS + 1))
    assert tracebacks(tmp_path / "sweep") == []
    print(f"\nrequeue: preempted after step {resumed_after}, resumed with step {resumed_after + 1}, {redone} redone, "
          f"wandb run id {run_id(segments[-1])} in all {len(segments)} segments")
