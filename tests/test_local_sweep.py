"""The local launcher runs a whole sweep on this machine, a bounded pool at a time, each job in its
own directory with its own ports."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import pytest
import yaml
from training_runs import steps

from analysis.readers.jobs import read_jobs
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
    # not a terminal: plain progress lines, then the summary, one line per job
    lines = out.stdout.splitlines()
    assert lines[1] == f"Sweep directory: {sweep}"  # after Hydra's "Local sweep of 9 jobs"
    assert f"Sweep {sweep}: 9 runs: 9 completed" in lines
    summary = lines[lines.index(f"Sweep {sweep}: 9 runs: 9 completed") + 1:]
    assert summary[0].startswith("  #0 off_policy.epochs=1 train_batch_size=64: completed, step 2/2")
    assert summary[9] == "Resumed: none"
    assert summary[10].startswith("Best config: ") and " at step 2 " in summary[10]
    # after 2 steps at the toy's learning rate the data cannot tell the configs apart: each
    # comparison (with the best, and with the on-policy baseline) says so under the best, then
    # the seed variance it rests on: one seed a cell of a 3 x 3 grid, so the additive model's
    # residual (degenerate, so undecided, where the cells came out identical)
    report = summary.index(f"Report: `make plots SWEEP={sweep}` writes {sweep / 'report.md'} "
                           f"and {sweep / 'figures'}/")
    verdicts = [line for line in summary[11:report] if line.startswith("  off_policy.epochs=")]
    assert len(verdicts) >= 8 and all(": not distinguishable from the " in v
                                      or v.split(": ", 1)[1].startswith("undecided against the ")
                                      for v in verdicts)
    assert sum("the best config" in v for v in verdicts) == 8
    assert any(line.startswith("  Seed variance: ") and "additive model of the 3 x 3 one-seed "
               "grid" in line for line in summary[11:report])
    assert {p.name for p in sweep.iterdir()} == {*map(str, range(9)), ".submitit",
                                                   "multirun.yaml", "jobs.json", ".lock"}
    assert not [p for p in (sweep / ".submitit").iterdir() if p.is_dir()], "no %j folder"
    for run in runs:
        status = json.loads((run / "status.json").read_text())
        assert status["status"] == "completed" and status["last_step"] == 2
        overrides = yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text())
        epochs = int(next(o for o in overrides if o.startswith("off_policy.epochs=")).split("=")[1])
        tbs = int(next(o for o in overrides if o.startswith("train_batch_size=")).split("=")[1])
        records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records] == [0, 1, 2]  # 0: the evaluation before any update
        assert records[1]["train/optimizer_steps_this_grpo_step"] == epochs * 256 // tbs


@pytest.mark.slow
def test_killed_job_is_one_line_of_the_summary(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A job killed mid-run (no final status) is reported as failed in its summary line; the
    other job completes; the sweep exits with status 1 and one error line, no traceback."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "launch.py"), "-m", "model=tiny", "data=toy", "rollout=hf",
         f"model.path={tiny_model_dir}", "n_grpo_steps=30", "learning_rate=3e-4,1e-4",
         f"paths.output_root={tmp_path}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.time() + 600
        while not (logs := list(tmp_path.rglob("1/metrics.jsonl"))) or not logs[0].read_text():
            assert proc.poll() is None and time.time() < deadline, "job 1 never logged a step"
            time.sleep(0.2)
        sweep = logs[0].parents[1]
        (job,) = [j for j in json.loads((sweep / "jobs.json").read_text())["jobs"] if j["num"] == 1]
        child = only_child(int(job["job_id"]))
        os.kill(child, signal.SIGKILL)  # the job's python process, mid-run
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out[-3000:] + err[-3000:]
    assert f"Sweep {sweep}: 2 runs: 1 completed, 1 failed" in out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("  #1 learning_rate=0.0001: ")]
    assert line.startswith("  #1 learning_rate=0.0001: failed, step ")
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "error: 1 of 2 runs did not finish (1 failed); see the summary above")


@pytest.mark.slow
def test_a_second_launch_of_a_running_sweep_is_refused_and_runs_nothing(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two identical `-m` sweeps into one sweep directory: the second exits at once naming the
    first launcher; the first ends as if alone (each run logged each step once)."""
    sweep = tmp_path / "sweep"
    command = [sys.executable, str(ROOT / "launch.py"), "-m", "model=tiny", "data=toy",
               "rollout=hf", f"model.path={tiny_model_dir}", "n_grpo_steps=6",
               "learning_rate=3e-4,1e-4", f"hydra.sweep.dir={sweep}"]
    first = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        deadline = time.time() + 600
        while not (sweep / "0" / "metrics.jsonl").exists():
            assert first.poll() is None and time.time() < deadline, "job 0 never logged a step"
            time.sleep(0.2)
        first.send_signal(signal.SIGSTOP)  # the launcher, holding the lock; its jobs go on
        try:
            second = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        finally:
            first.send_signal(signal.SIGCONT)
        out, err = first.communicate(timeout=900)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 1, second.stderr[-3000:]
    assert (f"error: {sweep} is being launched by another process (pid {first.pid} on "
            f"{socket.gethostname()} since ") in second.stderr
    assert "Traceback" not in second.stderr and "Sweep directory" not in second.stdout
    assert first.returncode == 0, err[-3000:]
    assert f"Sweep {sweep}: 2 runs: 2 completed" in out
    for run in ("0", "1"):
        rows = [json.loads(x)["step"] for x in (sweep / run / "metrics.jsonl").read_text().splitlines()]
        assert rows == list(range(7))


def only_child(pid: int) -> int:
    """The one child process of ``pid`` (submitit's local controller runs the job in a child)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


@pytest.mark.slow
def test_a_relaunch_that_would_change_a_trained_run_is_refused_before_any_record_is_written(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """A finished sweep relaunched into its directory with one swept value changed: the dry run
    and the launch both refuse it naming the job, its key and both values, end with that message
    (no traceback), and leave every file of the sweep as it was (multirun.yaml, jobs.json, each
    run's record and status)."""
    sweep = tmp_path / "sweep"

    def launch(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(ROOT / "launch.py"), "-m", "model=tiny", "data=toy", "rollout=hf",
             f"model.path={tiny_model_dir}", "n_grpo_steps=1", "eval.eval_every=1",
             f"hydra.sweep.dir={sweep}", *args], cwd=ROOT, capture_output=True, text=True,
            timeout=600)

    assert launch("learning_rate=3e-4,3e-5").returncode == 0
    before = {p: p.read_bytes() for p in sorted(sweep.rglob("*"))
              if p.is_file() and "wandb" not in p.parts and p.name != ".lock"}
    for dry_run in ("true", "false"):
        out = launch("learning_rate=1e-2,3e-5", f"dry_run={dry_run}")
        assert out.returncode == 2, out.stderr[-3000:]
        assert "error: 1 of 2 jobs are invalid; nothing was submitted." in out.stderr
        assert "job #0 [learning_rate=0.01]:" in out.stderr
        assert f"refusing to resume {sweep / '0'} (checkpoint step_000001)" in out.stderr
        assert "  - learning_rate: 0.0003 -> 0.01" in out.stderr
        assert "Traceback" not in out.stderr and "job #1 [" not in out.stderr
    after = {p: p.read_bytes() for p in sorted(sweep.rglob("*"))
             if p.is_file() and "wandb" not in p.parts and p.name != ".lock"}
    assert after == before, sorted(p for p in after.keys() | before.keys() if after.get(p) != before.get(p))


def slow_step_sweep(sweep: Path, tiny_model_dir: Path, n_grpo_steps: int, parallel: int) -> list[str]:
    """`launch.py -m` of two local runs (learning_rate=3e-4,1e-4) into `sweep`, `parallel` at a
    time, whose every step ends with an evaluation of 600 x 8 responses: seconds a step, so that
    a signal finds a run in the middle of one."""
    return [sys.executable, str(ROOT / "launch.py"), "-m", "model=tiny", "data=toy", "rollout=hf",
            f"model.path={tiny_model_dir}", "logging.wandb_mode=disabled",
            f"n_grpo_steps={n_grpo_steps}", "eval.eval_every=1", "data.max_operand=30",
            "eval.n_examples=600", "eval.samples_per_problem=8", "eval.temperature=1.0",
            "learning_rate=3e-4,1e-4", f"hydra.launcher.max_parallel_jobs={parallel}",
            f"hydra.sweep.dir={sweep}"]


def interrupt_when(command: list[str], ready: Callable[[], bool], timeout: float,
                   poll_s: float, sig: int = signal.SIGINT) -> tuple[int, str]:
    """Run ``command`` as a terminal's job (its own process group), send the terminal's ``sig``
    to the group (SIGINT: Ctrl-C; SIGHUP: the terminal closed, as the shell forwards it) once
    ``ready()`` holds, polled every ``poll_s`` seconds; its exit status and output (stdout and
    stderr), within ``timeout`` seconds for each wait."""
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        deadline = time.time() + timeout
        while not ready():
            assert proc.poll() is None and time.time() < deadline, proc.stdout.read()
            time.sleep(poll_s)
        os.killpg(proc.pid, sig)
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out


def hang_up_when(command: list[str], ready: Callable[[], bool], output: str,
                 timeout: float) -> int:
    """Run ``command`` as a terminal's job whose terminal goes away once ``ready()`` holds: its
    output (stdout and stderr) is a pipe (``output="pipe"``) or a pseudo-terminal
    (``"terminal"``), read meanwhile and closed by the reader, then the group gets SIGHUP twice
    (the shell's, then the kernel's). Its exit status, within ``timeout`` seconds for each wait."""
    if output == "terminal":
        reader, writer = os.openpty()
    else:
        reader, writer = os.pipe()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=writer, stderr=writer,
                            start_new_session=True)
    os.close(writer)
    os.set_blocking(reader, False)
    try:
        deadline = time.time() + timeout
        while not ready():
            assert proc.poll() is None and time.time() < deadline, "never ready"
            with suppress(BlockingIOError):
                os.read(reader, 1 << 16)  # the terminal shows it
            time.sleep(0.05)
        os.close(reader)
        os.killpg(proc.pid, signal.SIGHUP)
        time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGHUP)  # the kernel's, as the shell that forwarded it exits
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
# the relaunch after SIGHUP is test_a_sweep_whose_terminal_is_gone_stops_its_runs_and_loses_nothing's
@pytest.mark.parametrize(("sig", "cause", "relaunch"),
                         [(signal.SIGINT, "SIGINT (Ctrl-C)", True),
                          (signal.SIGHUP, "SIGHUP (the terminal closed)", False)],
                         ids=["ctrl_c", "sighup"])
def test_ctrl_c_stops_a_local_sweep_in_one_line_and_the_same_command_resumes_it(
        tmp_path: Path, tiny_model_dir: Path, sig: signal.Signals, cause: str,
        relaunch: bool) -> None:
    """Ctrl-C at the terminal signals the launcher's whole process group (the launcher, each job's
    submitit controller, the job): no traceback from any of them; the running run finishes its
    step (seconds long here: it evaluates 600 x 8 responses) and checkpoints as `cancelled`
    (submitit's controller, interrupted, used to SIGKILL it a second later), the job not started
    is `cancelled` too, exit status 130; the same command resumes the one and runs the other.
    A closing terminal (SIGHUP, which used to kill each process at once) does all the same, with
    exit status 129 (128 + the signal, as a shell reports it); the relaunch of runs that SIGHUP
    cancelled is the closed-terminal test's."""
    sweep = tmp_path / "sweep"
    command = slow_step_sweep(sweep, tiny_model_dir, n_grpo_steps=3, parallel=1)
    # the evaluation before step 1, then step 1
    returncode, out = interrupt_when(command, lambda: len(steps(sweep / "0")) >= 2, 600, 0.05,
                                     sig)
    assert returncode == 128 + sig, out[-3000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    status = json.loads((sweep / "0" / "status.json").read_text())
    last = status["last_step"]
    assert status["status"] == "cancelled", status
    assert status["reason"].startswith(f"{cause} after step {last}; checkpointed")
    assert (sweep / "0" / "checkpoints" / "latest").read_text().strip() == f"step_{last:06d}"
    assert not (sweep / "1").exists(), "no job starts after Ctrl-C"
    lines = out.splitlines()
    assert f"Sweep {sweep}: 2 runs: 2 cancelled" in lines
    assert "  #1 learning_rate=0.0001: cancelled, step 0, cancelled before its first step" in lines
    assert lines[-1] == ("Interrupted: launch the same command again to resume the sweep "
                         "(finished runs are kept, the others resume from their checkpoints)")
    if not relaunch:
        return
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"Sweep {sweep}: 2 runs: 2 completed" in again.stdout
    assert f"Resumed: #0 from step {last + 1}" in again.stdout
    assert steps(sweep / "0") == list(range(4)) and steps(sweep / "1") == list(range(4))


@pytest.mark.slow
def test_ctrl_c_as_a_job_starts_stops_it_too(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Ctrl-C the moment job 0 is submitted, before its controller has started the job's
    process (which so never had the terminal's SIGINT): the launcher hands it the Ctrl-C, so
    the job ends at once instead of training its 200 steps while the launcher waits."""
    sweep = tmp_path / "sweep"
    command = [sys.executable, str(ROOT / "launch.py"), "-m", "model=tiny", "data=toy",
               "rollout=hf", f"model.path={tiny_model_dir}", "logging.wandb_mode=disabled",
               "n_grpo_steps=200", "learning_rate=3e-4,1e-4", "hydra.launcher.max_parallel_jobs=1",
               f"hydra.sweep.dir={sweep}"]
    returncode, out = interrupt_when(
        command, lambda: bool((jobs := read_jobs(sweep)) and jobs.jobs[0].job_id), 300, 0.002)
    assert returncode == 130 and "Traceback" not in out, out[-3000:]
    assert f"Sweep {sweep}: 2 runs: 2 cancelled" in out.splitlines(), out[-3000:]
    assert len(steps(sweep / "0")) < 200 and not (sweep / "1").exists()


@pytest.mark.slow
# the output changes only the launcher's writes; the runs' files that a relaunch resumes from are
# asserted alike after either, so the relaunch runs once, after the terminal
@pytest.mark.parametrize(("output", "relaunch"), [("pipe", False), ("terminal", True)],
                         ids=["pipe", "terminal"])
def test_a_sweep_whose_terminal_is_gone_stops_its_runs_and_loses_nothing(
        tmp_path: Path, tiny_model_dir: Path, output: str, relaunch: bool) -> None:
    """The terminal of a local sweep of two running jobs goes away: its output (a pipe, or a
    pseudo-terminal showing the live table) is closed, so every write fails (EPIPE, EIO), then
    SIGHUP reaches the process group. The launcher does not die at its first line: it waits for
    both runs, each of which checkpoints after its step as `cancelled` (no traceback in the jobs'
    logs), and exits 129; the same command completes both, every step logged once (run after the
    terminal: after a pipe the runs' files are the same, asserted alike)."""
    sweep = tmp_path / "sweep"
    command = slow_step_sweep(sweep, tiny_model_dir, n_grpo_steps=4, parallel=2)
    runs = [sweep / "0", sweep / "1"]
    # each run past the evaluation before step 1, and step 1
    returncode = hang_up_when(command, lambda: all(len(steps(r)) >= 2 for r in runs), output, 600)
    assert returncode == 129
    resumed = []
    for run in runs:
        status = json.loads((run / "status.json").read_text())
        last = status["last_step"]
        assert status["status"] == "cancelled" and last < 4, status
        assert status["reason"].startswith(f"SIGHUP (the terminal closed) after step {last}; ")
        assert (run / "checkpoints" / "latest").read_text().strip() == f"step_{last:06d}"
        assert steps(run) == list(range(last + 1))
        resumed.append(f"#{run.name} from step {last + 1}")
    logs = "".join(p.read_text() for p in (sweep / ".submitit").rglob("*.err"))
    assert "Traceback" not in logs and "KeyboardInterrupt" not in logs, logs[-3000:]
    if not relaunch:
        return
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"Sweep {sweep}: 2 runs: 2 completed" in again.stdout
    assert f"Resumed: {'; '.join(resumed)}" in again.stdout
    assert steps(runs[0]) == list(range(5)) and steps(runs[1]) == list(range(5))
