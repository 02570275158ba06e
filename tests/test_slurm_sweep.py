"""Sweeps on the real local SLURM cluster through hydra-submitit-launcher (no mocks).

Jobs use the documented CPU preset (cluster=slurm_cpu) and wandb's default mode (offline).
Needs `scripts/slurm_cluster.sh start` (CI does it and sets GRPO_REQUIRE_SLURM=1, which turns a
missing cluster into a failure instead of a skip).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from test_relaunch import followed_refusal, record_of
from test_slurm_cluster import require_cluster
from wandb_offline import history_steps, offline_runs, run_id

from grpo.run.slurm import slurm_states

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
    """SLURM jobs (any state still known to slurmctld) with this job name, one per array task
    (`-r`: a pending array is otherwise one row, `41_[0-1%2]`)."""
    out = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-n", name, "-o", "%i"],
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
        assert logged_steps(run) == list(range(7))  # 0: the evaluation before the first update
        assert (run / ".hydra" / "overrides.yaml").exists()
    sweep = runs[0].parent
    shown = sweep.relative_to(tmp_path)  # paths below the working directory are shown relative
    assert f"Sweep {shown}: 4 runs: 4 completed" in out.stdout
    # an off-policy job that names no loss runs GRPO-Clip (grpo/sweep/job_loss.py): its overrides say so
    assert "#3 learning_rate=0.0001 off_policy.epochs=2 loss=grpo_clip: completed, step 6/6" in out.stdout
    jobs = json.loads((sweep / "jobs.json").read_text())["jobs"]
    assert [j["job_id"].split("_")[1] for j in jobs] == ["0", "1", "2", "3"]
    assert not list(sweep.rglob("%j")), "no folder named after an unexpanded %j"


def restarts(job_id: str) -> int:
    """How often SLURM has requeued the job (`scontrol show job`'s Restarts=)."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id],
                         capture_output=True, text=True, check=False)
    found = re.search(r"\bRestarts=(\d+)", out.stdout)
    return int(found.group(1)) if found else 0


def set_time_limit(name: str, minutes: int) -> None:
    """`scontrol update` the time limit of every job named `name` (counted from its start)."""
    for job in jobs_named(name):
        subprocess.run(["scontrol", "update", f"JobId={job}", f"TimeLimit={minutes}"], check=True)


def first_run_trains(tmp_path: Path, deadline: float,
                     alive: Callable[[], bool] = lambda: True) -> Path:
    """Wait until the first run directory under `tmp_path` has logged a GRPO update (step 1),
    while `alive()` and before `deadline` (time.time()); that run's directory."""
    while not (runs := run_dirs(tmp_path)) or not (runs[0] / "metrics.jsonl").exists() or \
            logged_steps(runs[0])[-1:] < [1]:
        assert alive() and time.time() < deadline, "the run never logged an update"
        time.sleep(0.5)
    return runs[0]


def run_seconds(job: str) -> int:
    """How long the job has run (`scontrol show job`'s RunTime=[D-]HH:MM:SS); 0 if unknown."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True,
                         check=False)
    found = re.search(r"\bRunTime=(?:(\d+)-)?(\d+):(\d+):(\d+)", out.stdout)
    if not found:
        return 0
    days, hours, minutes, seconds = (int(part or 0) for part in found.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def signal_soon(name: str, signal_delay_s: int) -> None:
    """Cut the time limit of every job named `name` so that SLURM's warning signal
    (`signal_delay_s` before the limit) comes within about a minute and a half, and always before
    the limit itself: the limit set leaves between `signal_delay_s` + 5 and + 65 s. A limit of 1
    minute cut on a job that has already run longer (a loaded CI host, whose job took over a
    minute to reach the point the test waits for) is past at once: slurmctld ends the job as
    TIMEOUT while its handler is still requeueing it, and the job is never requeued."""
    for job in jobs_named(name):
        minutes = -(-(run_seconds(job) + signal_delay_s + 5) // 60)
        subprocess.run(["scontrol", "update", f"JobId={job}", f"TimeLimit={minutes}"], check=True)


def test_time_limit_signal_checkpoint_requeue_resume(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A job whose run outlives its time limit: signalled, checkpointed, requeued, resumed, finished.
    The job is submitted with 30 minutes; once its run has logged an update, the test cuts the
    limit to 1 minute, and slurmctld (which checks limits every 30 s) sends the signal, asked for
    55 s before the limit, at its next check. The signal therefore meets a run that is training,
    never Python still starting up: with a 1-minute limit from submission it came 5-35 s after the
    start, and a CI host still unpickling the job (submitit's handler not yet installed) was killed
    by it, exit 1. The idle 2-core development machine trains about 5 steps a second, so 400 steps
    do not finish in the at most 30 s before the signal. Once SLURM has requeued the job, the test
    raises its limit back to 30 minutes, so the rest of the run finishes in one more incarnation
    however slow the machine (CI's host, at 3-90 steps an incarnation, once needed 40 incarnations
    for 900 steps)."""
    require_cluster()
    name = f"grpo-timelimit-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        sweep_command(tmp_path, tiny_model_dir, "n_grpo_steps=400", "rollout_batch_size=256",
                      "train_batch_size=256", "eval.eval_every=40",
                      "checkpoint.checkpoint_every=1000", "cluster.time_limit_min=30",
                      "hydra.launcher.signal_delay_s=55", "hydra.launcher.max_num_timeout=3",
                      f"hydra.launcher.name={name}"),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 900
        first_run_trains(tmp_path, deadline, alive=lambda: proc.poll() is None)
        signal_soon(name, signal_delay_s=55)
        while not any(restarts(job) for job in jobs_named(name) if "[" not in job):
            assert proc.poll() is None and time.time() < deadline, "never requeued at its limit"
            time.sleep(0.5)
        set_time_limit(name, minutes=30)
        stdout, stderr = proc.communicate(timeout=1800)
    finally:
        if proc.poll() is None:
            proc.kill()
            subprocess.run(["scancel", "-n", name], check=False)
    out = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (run,) = run_dirs(tmp_path)
    status = json.loads((run / "status.json").read_text())
    print(f"\nrequeued run: {status['restarts']} restarts (from {status['resumed_from']}), "
          f"status {status['status']}")
    assert status["status"] == "completed" and status["restarts"] >= 1
    assert logged_steps(run) == list(range(401))
    assert not (run / "metrics.discarded.jsonl").exists(), "every stop was a clean checkpoint"
    # the summary says the run resumed, and from which steps
    assert len(status["resumed_from"]) == status["restarts"]
    resumed = ", then ".join(map(str, status["resumed_from"]))
    assert f"Resumed: #0 from step {resumed}" in out.stdout
    segments = offline_runs(run)
    assert len(segments) == status["restarts"] + 1 and len({run_id(s) for s in segments}) == 1
    assert [step for s in segments for step in history_steps(s)] == list(range(401)), (
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


def test_cancelled_job_is_reported_as_cancelled(tmp_path: Path, tiny_model_dir: Path) -> None:
    """scancel one job of two mid-run: the sweep ends with a one-line report per job that names
    the cancelled one as cancelled, no traceback, exit status 1."""
    require_cluster()
    name = f"grpo-cancel-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        sweep_command(tmp_path, tiny_model_dir, "learning_rate=3e-4,1e-4", "n_grpo_steps=40",
                      "eval.eval_every=10", f"hydra.launcher.name={name}"),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 600
        while not (runs := [r for r in run_dirs(tmp_path) if r.name == "1"]) or \
                not (runs[0] / "metrics.jsonl").exists() or not logged_steps(runs[0]):
            assert proc.poll() is None and time.time() < deadline, "job 1 never logged a step"
            time.sleep(0.5)
        (job,) = [j for j in json.loads((runs[0].parent / "jobs.json").read_text())["jobs"]
                  if j["num"] == 1]
        subprocess.run(["scancel", job["job_id"]], check=True)
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
            subprocess.run(["scancel", "-n", name], check=False)
    assert proc.returncode == 1, out[-3000:] + err[-3000:]
    sweep = runs[0].parent.relative_to(tmp_path)
    assert f"Sweep {sweep}: 2 runs: 1 completed, 1 cancelled" in out
    assert "#0 learning_rate=0.0003: completed, step 40/40" in out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("  #1 learning_rate=0.0001: ")]
    assert line.startswith("  #1 learning_rate=0.0001: cancelled, step ")
    assert "Traceback" not in err and "UncompletedJobError" not in err
    assert err.strip().splitlines()[-1] == (
        "error: 1 of 2 runs did not finish (1 cancelled); see the summary above")
    # from another shell: the same view, SLURM's word (sacct) included
    watch = subprocess.run([sys.executable, "-m", "analysis", "watch", str(tmp_path / sweep)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert watch.returncode == 0, watch.stderr
    assert f"Sweep {tmp_path / sweep}: 2 runs: 1 completed, 1 cancelled" in watch.stdout


def test_scheduler_states_know_a_cancelled_queued_array_task(tmp_path: Path) -> None:
    """A queued array task that is cancelled is not pending for ever: it vanishes from squeue (and
    the sacct shim), GONE, or, where slurmctld had already split it off the array's pending record
    (seen once in four full suite runs), it is listed as CANCELLED; the running task is RUNNING
    (or still PENDING)."""
    require_cluster()
    name = f"grpo-gone-{uuid.uuid4().hex[:8]}"
    submitted = subprocess.run(
        ["sbatch", "--parsable", f"--job-name={name}", "--array=0-1%1", "--cpus-per-task=1",
         "--mem=100M", "--time=2", f"--output={tmp_path}/%A_%a.out", "--wrap=sleep 60"],
        capture_output=True, text=True, check=True)
    array = submitted.stdout.strip().split(";")[0]
    try:
        ids = {0: f"{array}_0", 1: f"{array}_1"}
        assert slurm_states(ids)[1] == "PENDING"
        subprocess.run(["scancel", ids[1]], check=True)
        deadline = time.time() + 60
        while (states := slurm_states(ids))[1] not in ("GONE", "CANCELLED"):
            assert time.time() < deadline, states
            time.sleep(1)
        assert states[0] in ("PENDING", "RUNNING")
    finally:
        subprocess.run(["scancel", "-n", name], check=False)


def test_a_pruned_array_task_ends_pruned_and_is_not_requeued(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Successive halving on SLURM: one array task at a time, so the runs reach the rung at step
    20 in job order; lr 3e-2 collapses below the run before it and is stopped there. Its task
    ends as a job that ran to its end (not failed, not requeued), and the sweep exits 0 with the
    pruned run in its summary."""
    require_cluster()
    out = slurm_sweep(tmp_path, tiny_model_dir, "learning_rate=3e-4,3e-2", "n_grpo_steps=60",
                      "eval.eval_every=20", "pruning=successive_halving", "pruning.min_resource=20",
                      "hydra.launcher.array_parallelism=1")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    pruned = next(run for run in run_dirs(tmp_path) if run.name == "1")
    status = json.loads((pruned / "status.json").read_text())
    assert (status["status"], status["last_step"], status["restarts"]) == ("pruned", 20, 0)
    assert logged_steps(pruned) == list(range(21))
    sweep = pruned.parent
    shown = sweep.relative_to(tmp_path)
    assert f"Sweep {shown}: 2 runs: 1 completed, 1 pruned" in out.stdout
    assert "  #1 learning_rate=0.03: pruned, step 20/60" in out.stdout
    assert "Stopped early: 1 pruned; " in out.stdout  # CPU jobs: priced in CPU-hours
    assert " CPU-hours spent of an estimated " in out.stdout
    jobs = json.loads((sweep / "jobs.json").read_text())["jobs"]
    ids = {j["num"]: j["job_id"] for j in jobs}
    # the sweep ends when submitit has the task's result; slurmctld may still show the task
    # RUNNING or COMPLETING for a moment (seen once on a loaded machine): wait for its end state
    deadline = time.time() + 60
    while set((states := slurm_states(ids)).values()) & {"RUNNING", "COMPLETING"} and time.time() < deadline:
        time.sleep(1)
    assert states == {0: "COMPLETED", 1: "COMPLETED"}
    log = next(p for p in job_logs(sweep) if p.name.startswith(jobs[1]["job_id"]))
    out_log = log.with_name(log.name.replace("_log.err", "_log.out")).read_text()
    assert out_log.count("Run directory: ") == 1, "one incarnation: the pruned task was not requeued"
    assert tracebacks(sweep) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=["ctrl_c", "sighup"])
def test_ctrl_c_of_a_slurm_sweep_is_one_line_and_its_jobs_keep_running(
        tmp_path: Path, tiny_model_dir: Path, sig: signal.Signals) -> None:
    """Ctrl-C at the launcher (SIGINT to its process group, as a terminal sends it) once the job
    array is submitted: one line saying the jobs keep running and how to follow them, exit status
    130, no KeyboardInterrupt traceback; the jobs are still SLURM's. Closing the terminal
    (SIGHUP, which used to kill the launcher silently) does the same, exit status 129."""
    require_cluster()
    name = f"grpo-ctrl-c-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        sweep_command(tmp_path, tiny_model_dir, "learning_rate=3e-4,1e-4", "n_grpo_steps=200",
                      f"hydra.launcher.name={name}"),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        deadline = time.time() + 300
        while not (files := list(tmp_path.rglob("jobs.json"))) or not all(
                j.get("job_id") for j in json.loads(files[0].read_text())["jobs"]):
            assert proc.poll() is None and time.time() < deadline, "the array was never submitted"
            time.sleep(0.2)
        os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=120)
        alive = jobs_named(name)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        subprocess.run(["scancel", "-n", name], check=False)
    assert proc.returncode == 128 + sig, out[-3000:] + err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    sweep = files[0].parent.relative_to(tmp_path)
    assert out.splitlines()[-1] == ("Interrupted: the SLURM jobs keep running; follow them with "
                                    f"`make watch SWEEP={sweep}`")
    assert len(alive) == 2, "the jobs were cancelled with the launcher"


def test_a_relaunch_with_a_changed_key_is_refused_while_its_tasks_are_pending_or_running(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """The launcher SIGKILLed once its 2-task array (learning_rate=3e-4, one task at a time) is
    submitted, task 0 training before its first checkpoint and task 1 pending: the same sweep
    launched with learning_rate=1e-3 is refused in one line naming the key and both values, exit
    2 (its dry run alike), no job submitted, multirun.yaml and jobs.json byte-equal. Task 0's
    trained config is its run's record, task 1's the overrides jobs.json records. It used to
    follow both ("0 to submit, 2 still queued or running (followed)") and rewrite both records
    to 0.001."""
    require_cluster()
    name = f"grpo-changed-{uuid.uuid4().hex[:8]}"
    sweep = tmp_path / "sweep"
    command = [o if o != "hydra.launcher.array_parallelism=2" else "hydra.launcher.array_parallelism=1"
               for o in sweep_command(tmp_path, tiny_model_dir, "seed=0,1", "n_grpo_steps=400",
                                      "checkpoint.checkpoint_every=1000", "eval.eval_every=100",
                                      f"hydra.launcher.name={name}", f"hydra.sweep.dir={sweep}")]
    first = subprocess.Popen([*command, "learning_rate=3e-4"], cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while not (sweep / "0" / ".hydra" / "config.yaml").exists() or not all(
                j.get("job_id") for j in json.loads((sweep / "jobs.json").read_text())["jobs"]):
            assert first.poll() is None and time.time() < deadline, "task 0 never started"
            time.sleep(0.2)
        first.kill()
        first.wait(timeout=60)
        ids = {j["num"]: j["job_id"] for j in json.loads((sweep / "jobs.json").read_text())["jobs"]}
        assert slurm_states(ids) == {0: "RUNNING", 1: "PENDING"}
        assert not (sweep / "1").exists() and not list(sweep.glob("0/checkpoints/step_*"))
        before = record_of(sweep)
        for extra in (["dry_run=true"], []):
            out = subprocess.run([*command, "learning_rate=1e-3", *extra], cwd=tmp_path,
                                 capture_output=True, text=True, timeout=300)
            assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-3000:]
            assert out.stderr.splitlines()[-1] == followed_refusal(sweep, "0.0003", "0.001")
            assert record_of(sweep) == before
        assert len(jobs_named(name)) == 2, "no job submitted"
        assert "learning_rate: 0.0003" in (sweep / "0" / ".hydra" / "config.yaml").read_text()
    finally:
        if first.poll() is None:
            first.kill()
        subprocess.run(["scancel", "-n", name], check=False)


def test_a_relaunch_follows_the_jobs_still_running_and_submits_nothing_once_finished(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """The launcher SIGKILLed once its job array is submitted (a closed terminal, a login node's
    reboot): the same command again submits no new array, follows the two jobs to their end (both
    runs completed, each step logged once, one job per run); launched once more, the finished
    sweep submits nothing at all (no new job of its name, each run's status.json byte-equal) and
    prints its summary."""
    require_cluster()
    name = f"grpo-relaunch-{uuid.uuid4().hex[:8]}"
    sweep = tmp_path / "sweep"
    # long enough that the jobs still run when the relaunch reads them: at 20 steps (8 s a run
    # on an idle cluster) they had ended before a relaunch slowed by a loaded machine started
    steps = 150
    command = sweep_command(tmp_path, tiny_model_dir, "learning_rate=3e-4,1e-4",
                            f"n_grpo_steps={steps}", "eval.eval_every=50",
                            f"hydra.launcher.name={name}", f"hydra.sweep.dir={sweep}")
    first = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while not (sweep / "jobs.json").exists() or not all(
                j.get("job_id") for j in json.loads((sweep / "jobs.json").read_text())["jobs"]):
            assert first.poll() is None and time.time() < deadline, "the array was never submitted"
            time.sleep(0.2)
        first.kill()
        first.wait(timeout=60)
        assert set(slurm_states({0: json.loads((sweep / "jobs.json").read_text())["jobs"][0]
                                 ["job_id"]}).values()) <= {"PENDING", "RUNNING"}
        again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert ("relaunch: 0 to submit, 2 still queued or running (followed), 0 finished (not "
                "submitted)") in again.stdout.splitlines()
        assert "Sweep sweep: 2 runs: 2 completed" in again.stdout
        for run in ("0", "1"):
            assert logged_steps(sweep / run) == list(range(steps + 1))
        assert len(jobs_named(name)) == 2, "one job per run"
        statuses = {run: (sweep / run / "status.json").read_bytes() for run in ("0", "1")}
        last = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert last.returncode == 0, last.stdout[-3000:] + last.stderr[-3000:]
        assert ("relaunch: 0 to submit, 0 still queued or running (followed), 2 finished (not "
                "submitted)") in last.stdout.splitlines()
        assert "Sweep sweep: 2 runs: 2 completed" in last.stdout
        assert len(jobs_named(name)) == 2, "no job submitted"
        assert {run: (sweep / run / "status.json").read_bytes() for run in ("0", "1")} == statuses
        assert tracebacks(sweep) == []
    finally:
        if first.poll() is None:
            first.kill()
        subprocess.run(["scancel", "-n", name], check=False)
