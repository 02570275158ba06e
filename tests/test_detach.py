"""`cluster.detach=true`: the sweep's driver apart from the terminal (grpo.run.driver), on the
real local SLURM cluster (a CPU job, requeued at its time limit) and locally (a process of its
own session), followed from another shell by `python -m analysis watch`."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from test_chain import CPU as CHAIN_CPU
from test_chain import chain
from test_slurm_cluster import require_cluster
from test_slurm_sweep import (
    first_run_trains,
    jobs_named,
    logged_steps,
    restarts,
    run_dirs,
    set_time_limit,
    signal_soon,
    sweep_command,
    tracebacks,
)

from analysis.decisions.race.record import read_race
from analysis.decisions.ranking import rank
from analysis.readers.collect import collect
from analysis.readers.jobs import read_jobs
from chain.__main__ import chain_root, detached_or_refused
from chain.__main__ import main as chain_main
from chain.plan import UserOverrides, compose_stage
from chain.stages import load_chain
from grpo.run.driver import (
    DRIVER_SIGNAL_DELAY_S,
    DriverRecord,
    driver_state,
    process_start,
    read_driver,
    record_path,
)
from grpo.run.files import read_status
from grpo.run.slurm import SCHEDULER_ACTIVE, slurm_states

ROOT = Path(__file__).resolve().parents[1]
SHORT = ("n_grpo_steps=3", "eval.eval_every=3", "eval.n_examples=16")
RETURNS_WITHIN_S = 60.0
"""A detach composes and checks the jobs and submits one job: seconds (3 s idle); generous for
a loaded CI host."""


def detach(tmp_path: Path, command: list[str]) -> tuple[subprocess.CompletedProcess, float]:
    """Run the detaching command to its end; it and its time."""
    start = time.monotonic()
    out = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    return out, time.monotonic() - start


def the_sweep(tmp_path: Path) -> Path:
    (record,) = tmp_path.rglob("driver.json")
    return record.parent


def wait_gone(sweep: Path, timeout_s: float = 600) -> DriverRecord:
    """Poll the sweep's driver until it is gone; its record."""
    record = read_driver(sweep)
    assert record is not None
    deadline = time.time() + timeout_s
    while driver_state(record).state != "gone":
        assert time.time() < deadline, f"the driver never ended; its log:\n{Path(record.log).read_text()[-3000:]}"
        time.sleep(1)
    return record


def watch_once(sweep: Path) -> str:
    return subprocess.run([sys.executable, "-m", "analysis", "watch", str(sweep), "--once"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout


def processes_naming(path: Path) -> list[str]:
    """The command lines of this host's processes that name `path`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in text:
            found.append(text)
    return found


def statuses(tmp_path: Path) -> list[str]:
    return [(read_status(run) or {}).get("status") for run in run_dirs(tmp_path)]


@pytest.mark.slow
@pytest.mark.slurm
def test_a_detached_slurm_sweep_returns_at_once_is_stopped_resumed_and_completes(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """Detached: the command returns within seconds; the same command again submits no second
    driver; `watch` shows it; scancelled (with its runs) it is gone, with the command that
    resumes it; resumed, both runs complete and no process of the sweep is left."""
    require_cluster()
    name = f"grpo-detach-{uuid.uuid4().hex[:8]}"
    # 300 steps a run (about 20 s on an idle host): the runs must still have work left when the
    # stop line cancels them a few seconds after they are recorded (3 steps ended first on CI)
    command = sweep_command(tmp_path, tiny_model_dir, "seed=0,1", "n_grpo_steps=300",
                            "eval.eval_every=100", "eval.n_examples=16",
                            f"hydra.launcher.name={name}", "cluster.detach=true")
    sweep = None
    try:
        out, took = detach(tmp_path, command)
        assert out.returncode == 0, out.stderr[-3000:]
        print(f"\ndetach returned in {took:.1f} s")
        assert took < RETURNS_WITHIN_S
        sweep = the_sweep(tmp_path)
        record = read_driver(sweep)
        assert record is not None and record.kind == "slurm"
        assert f"Detached: the driver is SLURM job {record.job_id}; its log: {sweep}/driver.log" in out.stdout
        assert f"stop:   scancel {record.job_id}" in out.stdout
        assert f"hydra.sweep.dir={sweep}" in record.command[-1]
        # the resume command again, while the driver is pending or running: no second driver
        again = subprocess.run(record.resume(), shell=True, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        assert "a driver of this sweep is already" in again.stdout and "nothing was submitted" in again.stdout
        assert read_driver(sweep) == record
        deadline = time.time() + 300
        while not (jobs := recorded_jobs(sweep)):
            assert time.time() < deadline, f"no run submitted; driver log:\n{driver_log(record)}"
            time.sleep(0.5)
        shown = watch_once(sweep)
        assert re.search(rf"^driver: (pending|running) \(SLURM job {record.job_id}: ", shown, re.M), shown
        # stopped with work left by watch's stop line (the driver and this sweep's array, from
        # its jobs.json): gone, how it ended (its record, not its log's last line: a run's
        # progress line) and the resume command
        stop = re.search(r"^  stop:   (scancel [0-9 ]+) \(the driver and this sweep's 1 job "
                         r"array\(s\), from its jobs.json", shown, re.M)
        arrays = sorted({job_id.split("_")[0] for job_id in jobs.values()})
        assert stop is not None and stop[1].split() == ["scancel", record.job_id, *arrays], shown
        subprocess.run(stop[1].split(), check=True)
        wait_gone(sweep, 120)
        while any(state.split(" ")[0] in SCHEDULER_ACTIVE for state in slurm_states(jobs).values()):
            assert time.time() < deadline + 120, slurm_states(jobs)
            time.sleep(1)
        shown = watch_once(sweep)
        assert f"driver: gone (SLURM job {record.job_id}: CANCELLED" in shown, shown
        cancelled = read_driver(sweep)
        assert cancelled is not None and cancelled.end == "cancelled", driver_log(record)[-3000:]
        assert cancelled.reason.startswith("SIGTERM (scancel, the hard time limit or a kill)")
        assert f"  how it ended: cancelled at {cancelled.ended}: SIGTERM (scancel" in shown, shown
        assert f"  resume: {record.resume()}" in shown
        # resumed: a new driver that finishes the sweep
        out, _ = detach(tmp_path, list(record.command))
        assert out.returncode == 0, out.stderr[-3000:]
        resumed = wait_gone(sweep)
        assert resumed.job_id != record.job_id
        assert driver_state(resumed).detail == "COMPLETED", Path(resumed.log).read_text()[-3000:]
        assert read_driver(sweep).end == "completed"
        assert statuses(tmp_path) == ["completed", "completed"]
        assert processes_naming(sweep) == []
        assert "its work is done" in watch_once(sweep)
    finally:
        subprocess.run(["scancel", "-n", name], check=False)
        if sweep is not None:
            subprocess.run(["scancel", "-n", f"{name}-driver-{sweep.name}"], check=False)


@pytest.mark.slow
@pytest.mark.slurm
def test_a_detached_driver_at_its_time_limit_is_requeued_and_finishes(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """Once the run trains, the run's job is suspended (`scontrol suspend`:
    it cannot finish before the driver is signalled, however fast the host trains) and the driver
    job's limit is cut so that SLURM signals it within about a minute and a half, never after
    the limit (`signal_soon`). The driver ends its command and is requeued; the run is resumed,
    and the driver runs the same command again, which follows the run to its end."""
    require_cluster()
    name = f"grpo-drvlimit-{uuid.uuid4().hex[:8]}"
    command = sweep_command(tmp_path, tiny_model_dir, "n_grpo_steps=300", "eval.eval_every=100",
                            "eval.n_examples=16", f"hydra.launcher.name={name}",
                            "cluster.detach=true", "cluster.driver_time_limit_min=30")
    driver = None
    try:
        out, _ = detach(tmp_path, command)
        assert out.returncode == 0, out.stderr[-3000:]
        sweep = the_sweep(tmp_path)
        record = read_driver(sweep)
        driver = f"{name}-driver-{sweep.name}"
        log = Path(record.log)
        deadline = time.time() + 300
        run = first_run_trains(tmp_path, deadline)
        # once it trains: a job suspended before its step has started trains on unstopped
        (run_job,) = jobs_named(name)
        subprocess.run(["scontrol", "suspend", run_job], check=True)
        signal_soon(driver, DRIVER_SIGNAL_DELAY_S)
        deadline = time.time() + 300  # its own: a loaded cluster may take minutes to launch
        while not restarts(str(record.job_id)):
            assert driver_state(record).state != "gone", log.read_text()[-3000:]
            assert time.time() < deadline, "the driver was never requeued at its limit"
            time.sleep(0.5)
        assert logged_steps(run)[-1] < 300, "the suspended run trained on"
        set_time_limit(driver, minutes=30)
        # the run stays suspended until the requeued driver has run its command again and found
        # the run held: resumed earlier, a fast host finishes the run before the driver restarts
        while not re.search(r"restart 1\)\n(?:.*\n)*?relaunch: ", log.read_text()):
            assert driver_state(record).state != "gone", log.read_text()[-3000:]
            assert time.time() < deadline, "the requeued driver never ran its command again"
            time.sleep(0.5)
        subprocess.run(["scontrol", "resume", run_job], check=True)
        wait_gone(sweep)
        text = log.read_text()
        assert driver_state(record).detail == "COMPLETED", text[-3000:]
        assert text.count("--- driver started") >= 2 and "--- driver requeued" in text
        assert "relaunch: 0 to submit, 1 still queued or running (followed)" in text, text[-3000:]
        assert statuses(tmp_path) == ["completed"]
        assert read_driver(sweep).end == "completed", text[-3000:]
    finally:
        subprocess.run(["scancel", "-n", name], check=False)
        if driver:
            subprocess.run(["scancel", "-n", driver], check=False)


DRIVER_LIMIT_MIN = 10
"""submitit calls a signal at a time limit of T minutes a time-out (which spends a requeue)
once the job has run min(0.8 T, T - 10) minutes (a preemption before): at once at 10 minutes."""


@pytest.mark.slow
@pytest.mark.slurm
def test_a_detached_driver_out_of_requeues_records_so_and_watch_says_it(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """`hydra.launcher.max_num_timeout=0`: the driver, asked for `DRIVER_LIMIT_MIN` minutes, is
    sent SLURM's time-limit signal (SIGUSR2 to its steps) once its sweep is launched; submitit
    counts a time-out and does not requeue it ("timed-out too many times"). Its record says out
    of requeues, `watch` shows that with the resume command, and its log does not say requeued."""
    require_cluster()
    name = f"grpo-drvnoreq-{uuid.uuid4().hex[:8]}"
    command = sweep_command(tmp_path, tiny_model_dir, "n_grpo_steps=3000", "eval.eval_every=1000",
                            "eval.n_examples=16", f"hydra.launcher.name={name}",
                            "hydra.launcher.max_num_timeout=0", "cluster.detach=true",
                            f"cluster.driver_time_limit_min={DRIVER_LIMIT_MIN}")
    driver = None
    try:
        out, _ = detach(tmp_path, command)
        assert out.returncode == 0, out.stderr[-3000:]
        sweep = the_sweep(tmp_path)
        record = read_driver(sweep)
        driver = f"{name}-driver-{sweep.name}"
        log = Path(record.log)
        deadline = time.time() + 300
        while "SLURM sweep of 1 jobs" not in (log.read_text() if log.exists() else ""):
            assert time.time() < deadline, "the driver never launched its sweep"
            time.sleep(0.5)
        subprocess.run(["scancel", "--signal=USR2", str(record.job_id)], check=True)
        ended = wait_gone(sweep, 300)
        text = log.read_text()
        ended = read_driver(sweep)
        assert ended is not None and ended.end == "out of requeues", text[-3000:]
        assert ended.reason.startswith("Job not requeued because: timed-out too many times.")
        assert restarts(str(record.job_id)) == 0
        assert "--- driver requeued" not in text and "--- driver ended " in text
        shown = watch_once(sweep)
        assert (f"  how it ended: out of requeues at {ended.ended}: Job not requeued because: "
                "timed-out too many times.") in shown, shown
        assert f"  resume: {record.resume()}" in shown
    finally:
        subprocess.run(["scancel", "-n", name], check=False)
        if driver:
            subprocess.run(["scancel", "-n", driver], check=False)


@pytest.mark.slow
def test_a_local_detached_sweep_completes_after_its_terminal_is_gone(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """cluster=local: the driver runs in a session of its own; the detaching process has
    exited, a second detach starts none, and the runs complete."""
    command = [sys.executable, str(ROOT / "launch.py"), "-m", "model=tiny", "data=toy",
               "rollout=hf", f"model.path={tiny_model_dir}", f"paths.output_root={tmp_path}",
               "seed=0,1", *SHORT, "cluster.detach=true"]
    out, took = detach(tmp_path, command)
    assert out.returncode == 0 and took < RETURNS_WITHIN_S, out.stderr[-3000:]
    sweep = the_sweep(tmp_path)
    record = read_driver(sweep)
    assert record is not None and record.kind == "local"
    assert os.getsid(int(record.pid)) == record.pid  # a session of its own: no terminal's SIGHUP
    again = subprocess.run(list(record.command), cwd=record.cwd, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0 and "a driver of this sweep is already running" in again.stdout
    assert read_driver(sweep) == record
    wait_gone(sweep, 300)
    assert statuses(tmp_path) == ["completed", "completed"], Path(record.log).read_text()[-3000:]
    assert processes_naming(sweep) == []


@pytest.mark.slow
@pytest.mark.parametrize("cluster", ["local", pytest.param("slurm_cpu", marks=pytest.mark.slurm)])
def test_a_detached_relaunch_of_a_finished_sweep_starts_no_driver_and_says_its_plan_here(
        tmp_path: Path, tiny_model_dir: Path, cluster: str) -> None:
    """Issue 59, item 10: a detached relaunch of a finished sweep started a driver (a SLURM
    job) that only printed the summary, into its log (the terminal never saw the `relaunch:`
    line). It is decided before: nothing to run, no driver; the relaunch line and the summary
    here, exit 0, no run trained again."""
    sweep = tmp_path / "done"
    name = f"grpo-done-{uuid.uuid4().hex[:8]}"
    if cluster == "slurm_cpu":
        require_cluster()
    command = [sys.executable, str(ROOT / "launch.py"), "-m", f"cluster={cluster}", "model=tiny",
               "data=toy", "rollout=hf", f"model.path={tiny_model_dir}",
               f"paths.output_root={tmp_path}", f"hydra.sweep.dir={sweep}", "seed=0,1", *SHORT,
               *([f"hydra.launcher.name={name}"] if cluster == "slurm_cpu" else [])]
    first = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert statuses(tmp_path) == ["completed", "completed"]
    steps = [logged_steps(sweep / run) for run in ("0", "1")]
    out, took = detach(tmp_path, [*command, "cluster.detach=true"])
    assert out.returncode == 0 and took < RETURNS_WITHIN_S, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[:2] == [
        "cluster.detach=true: every run of this sweep is over; no driver was started (the "
        "relaunch and its summary here)",
        "relaunch: 0 to submit, 0 still queued or running (followed), 2 finished (not submitted)"]
    assert "Sweep done: 2 runs: 2 completed" in lines  # the summary (the path from its cwd)
    assert not (sweep / "driver.json").exists() and not (sweep / "driver.log").exists()
    assert [logged_steps(sweep / run) for run in ("0", "1")] == steps
    if cluster == "slurm_cpu":
        assert not jobs_named(f"{name}-driver-{sweep.name}"), "no driver job was submitted"


@pytest.mark.slow
@pytest.mark.slurm
def test_a_detached_race_whose_driver_is_scancelled_mid_race_and_relaunched_trains_each_run_once(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """A race of 2 configs up to 2 seeds (waves [0, 1] and [2, 3]), detached; its driver job is
    scancelled once wave 1's jobs run; the same command again starts a new driver, which
    follows wave 1's jobs or finds them finished (no second job for them: on a loaded machine
    wave 1 may end, and wave 2 be planned, before the scancel lands) and runs wave 2. Each run is trained once:
    its own logs say it (every step logged once, no restart, one start in launch.log), and SLURM
    ran one job per run across both drivers."""
    require_cluster()
    name = f"grpo-racekill-{uuid.uuid4().hex[:8]}"
    sweep = tmp_path / "race"
    command = sweep_command(tmp_path, tiny_model_dir, "learning_rate=3e-4,1", "race.max_seeds=2",
                            *SHORT, f"hydra.launcher.name={name}", f"hydra.sweep.dir={sweep}",
                            "cluster.detach=true")
    start = time.monotonic()
    try:
        out, _ = detach(tmp_path, command)
        assert out.returncode == 0, out.stderr[-3000:]
        first = read_driver(sweep)
        deadline = time.time() + 600
        while not (jobs := recorded_jobs(sweep)) or len(jobs) < 2 or not any(
                (sweep / str(num) / "metrics.jsonl").exists() for num in jobs):
            assert time.time() < deadline, f"wave 1 never ran; driver log:\n{driver_log(first)}"
            time.sleep(0.5)
        subprocess.run(["scancel", str(first.job_id)], check=True)
        wait_gone(sweep, 120)
        killed_at = dict(jobs)
        again, _ = detach(tmp_path, command)
        assert again.returncode == 0, again.stderr[-3000:]
        second = wait_gone(sweep)
        assert second.job_id != first.job_id
        log = driver_log(second)
        print(f"\nrace relaunched after scancel: {time.monotonic() - start:.0f} s; killed with "
              f"{killed_at}\n{log}")
        assert driver_state(second).detail == "COMPLETED", log[-3000:]
        relaunched = log.split(f"(SLURM job {second.job_id}, restart 0)")[1]
        plan = re.search(r"^relaunch: (\d+) to submit, (\d+) still queued or running "
                         r"\(followed\), (\d+) finished \(not submitted\)$", relaunched, re.M)
        assert plan is not None, relaunched[-3000:]
        submit, followed, finished = map(int, plan.groups())
        # wave 1 is taken over (followed, or finished where it ended before the scancel); wave 2's
        # jobs, where the first driver had planned it, are submitted once
        assert followed + finished >= 2 and submit <= 2, relaunched[-3000:]
        race = read_race(sweep)
        assert [sorted(w.jobs) for w in race.waves] == [[0, 1], [2, 3]]
        runs = [sweep / str(num) for num in range(4)]
        for run in runs:
            status = read_status(run)
            assert (status["status"], status["restarts"], status["resumed_from"]) == (
                "completed", 0, []), (run, status)
            assert logged_steps(run) == list(range(4)), run
            assert (run / "launch.log").read_text().count("CPU numerics: ") == 1, (
                "one training start in the run's log")
        ids = recorded_jobs(sweep)
        assert {num: ids[num] for num in killed_at} == killed_at, "wave 1's jobs were followed"
        assert sorted(jobs_named(name)) == sorted(ids.values()) and len(set(ids.values())) == 4, (
            "one job per run")
        assert tracebacks(sweep) == []
        assert processes_naming(sweep) == []
    finally:
        subprocess.run(["scancel", "-n", name], check=False)
        subprocess.run(["scancel", "-n", f"{name}-driver-{sweep.name}"], check=False)


def recorded_jobs(sweep: Path) -> dict[int, str]:
    """The SLURM job ids `jobs.json` records for the sweep's submitted jobs, by job number."""
    recorded = read_jobs(sweep)
    return {num: job.job_id for num, job in (recorded.jobs if recorded else {}).items() if job.job_id}


def running_jobs(name: str) -> list[str]:
    """The SLURM jobs named `name` that are running (one per array task)."""
    out = subprocess.run(["squeue", "-h", "-r", "-t", "RUNNING", "-n", name, "-o", "%i"],
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def driver_log(record: DriverRecord) -> str:
    log = Path(record.log)
    return log.read_text() if log.exists() else ""


@pytest.mark.slow
@pytest.mark.slurm
def test_a_detached_two_stage_chain_completes_after_its_submitting_process_exited(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """`python -m chain --stages baselines,length_norm cluster=slurm_cpu
    cluster.detach=true` returns within seconds, its process gone; the chain's driver (a SLURM
    job) runs both stages, two runs each, to their end, and stage 2's runs train stage 1's
    winner (its best loss, as `rank` reads stage 1's runs)."""
    require_cluster()
    name = f"grpo-chain-{uuid.uuid4().hex[:8]}"
    out_root = tmp_path / "out"
    root = out_root / "chains" / "cs336"
    record = None
    try:
        start = time.monotonic()
        out = chain("--stages", "baselines,length_norm", *CHAIN_CPU, f"model.path={tiny_model_dir}",
                    *SHORT, f"paths.output_root={out_root}", f"hydra.launcher.name={name}",
                    "cluster=slurm_cpu", "cluster.detach=true", cwd=tmp_path)
        took = time.monotonic() - start
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert took < RETURNS_WITHIN_S
        record = read_driver(root)
        assert record is not None and (record.kind, record.scope) == ("slurm", "chain")
        assert f"Detached: the driver is {record.describe()}; its log: {record.log}" in out.stdout
        record = wait_gone(root)
        log = driver_log(record)
        print(f"\ndetached chain: returned in {took:.1f} s, finished in "
              f"{time.monotonic() - start:.0f} s\n{log}")
        assert driver_state(record).detail == "COMPLETED", log[-3000:]
        assert "chain cs336: baselines, length_norm finished" in log.splitlines()
        (first,) = (out_root / "baselines").iterdir()
        (second,) = (out_root / "length_norm").iterdir()
        assert statuses(out_root) == ["completed"] * 4
        best = rank(collect([first])).best
        (carried,) = json.loads((second / "chain.json").read_text())["carried"]
        assert carried == {"key": "loss", "value": carried["value"], "stage": "baselines",
                           "sweep": str(first)}
        assert best == f"loss={carried['value']}"
        for run in ("0", "1"):
            overrides = (second / run / ".hydra" / "overrides.yaml").read_text()
            assert f"- loss={carried['value']}\n" in overrides, overrides
        assert read_driver(second) == record, "make watch on a stage shows the chain's driver"
        assert processes_naming(out_root) == []
    finally:
        subprocess.run(["scancel", "-n", name], check=False)
        if record is not None:
            subprocess.run(["scancel", str(record.job_id)], check=False)
@pytest.mark.slow
@pytest.mark.slurm
def test_a_detached_chain_whose_driver_is_requeued_while_its_stage_runs_follows_it_and_goes_on(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """`python -m chain --stages baselines,length_norm cluster=slurm_cpu cluster.detach=true`:
    once stage 1's first run trains, that run's job is suspended (it cannot finish while the
    driver is away, however fast the host) and the driver is sent SLURM's requeue signal
    (SIGUSR2 to its steps, as SLURM sends it before a time limit or at a preemption; the time
    limit's own path is test_a_detached_driver_at_its_time_limit_is_requeued_and_finishes's).
    It ends its command and is requeued; the run is resumed once the driver runs again and has
    followed stage 1's jobs (no second job for them). It then runs stage 2: the chain's driver
    ends COMPLETED with both stages done, and each run was trained once (every step logged once,
    no restart, one start in its launch.log)."""
    require_cluster()
    name = f"grpo-chainreq-{uuid.uuid4().hex[:8]}"
    out_root = tmp_path / "out"
    root = out_root / "chains" / "cs336"
    # one run at a time (array_parallelism=1): the CPU the requeued driver frees is not taken
    # by the array's next run (the local cluster has 2 CPUs), so the driver starts again at once
    steps = 40
    record = None
    try:
        out = chain("--stages", "baselines,length_norm", *CHAIN_CPU, f"model.path={tiny_model_dir}",
                    f"n_grpo_steps={steps}", "eval.eval_every=20", "eval.n_examples=16",
                    "hydra.launcher.array_parallelism=1", f"paths.output_root={out_root}", f"hydra.launcher.name={name}",
                    "cluster=slurm_cpu", "cluster.detach=true",
                    "cluster.driver_time_limit_min=30", cwd=tmp_path)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        record = read_driver(root)
        assert record is not None and (record.kind, record.scope) == ("slurm", "chain")
        deadline = time.time() + 300
        while "SLURM sweep of 2 jobs" not in driver_log(record):
            assert time.time() < deadline, f"stage 1 never launched:\n{driver_log(record)[-3000:]}"
            time.sleep(0.5)
        (first,) = (out_root / "baselines").iterdir()
        while len(submitted := recorded_jobs(first)) < 2:
            assert time.time() < deadline, "stage 1's jobs were never recorded"
            time.sleep(0.5)
        first_run_trains(first, deadline)
        held = running_jobs(name)
        assert len(held) == 1, held
        for job in held:
            subprocess.run(["scontrol", "suspend", job], check=True)
        subprocess.run(["scancel", "--signal=USR2", str(record.job_id)], check=True)
        deadline = time.time() + 300
        while not re.search(r"restart 1\)\n(?:.*\n)*?relaunch: ", driver_log(record)):
            assert driver_state(record).state != "gone", driver_log(record)[-3000:]
            assert time.time() < deadline, "the chain's driver was never requeued and run again"
            time.sleep(0.5)
        for job in held:
            subprocess.run(["scontrol", "resume", job], check=True)
        wait_gone(root, 1200)
        ended = read_driver(root)
        log = driver_log(record)
        print(f"\nchain driver requeued while stage 1 ran\n{log}")
        assert driver_state(record).detail == "COMPLETED", log[-3000:]
        assert ended is not None and ended.end == "completed", log[-3000:]
        assert "--- driver requeued" in log and "chain cs336: baselines, length_norm finished" in log
        again = log.split("(SLURM job " + str(record.job_id) + ", restart 1)")[1]
        assert f"  following its running sweep {first} " in again, again[-3000:]
        plan = re.search(r"^relaunch: (\d+) to submit, (\d+) still queued or running "
                         r"\(followed\), (\d+) finished \(not submitted\)$", again, re.M)
        assert plan is not None and plan.group(1) == "0", again[-3000:]
        assert int(plan.group(2)) >= 1, "the requeued driver found stage 1 still running"
        assert recorded_jobs(first) == submitted, "stage 1's jobs were followed, none resubmitted"
        (second,) = (out_root / "length_norm").iterdir()
        runs = [sweep / str(num) for sweep in (first, second) for num in range(2)]
        for run in runs:
            status = read_status(run)
            assert (status["status"], status["restarts"], status["resumed_from"]) == (
                "completed", 0, []), (run, status)
            assert logged_steps(run) == list(range(steps + 1)), run
            assert (run / "launch.log").read_text().count("CPU numerics: ") == 1, (
                "one training start in the run's log")
        ids = {*recorded_jobs(first).values(), *recorded_jobs(second).values()}
        assert sorted(jobs_named(name)) == sorted(ids) and len(ids) == 4, "one job per run"
        assert processes_naming(out_root) == []
    finally:
        subprocess.run(["scancel", "-n", name], check=False)
        if record is not None:
            subprocess.run(["scancel", str(record.job_id)], check=False)


@pytest.fixture
def local_config_detaching(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A user's local config (`GRPO_LOCAL_CONFIG` names it) that sets `cluster.detach: true`,
    as a user who always detaches on their cluster writes it beside `cluster.account`."""
    name = f"test-detach-{uuid.uuid4().hex[:8]}"
    path = ROOT / "conf" / "local" / f"{name}.yaml"
    path.write_text("# @package _global_\ncluster:\n  detach: true\n")
    monkeypatch.setenv("GRPO_LOCAL_CONFIG", name)
    try:
        yield
    finally:
        path.unlink()


def test_a_chain_detaches_where_its_composed_config_says_so(
        tmp_path: Path, local_config_detaching: None, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """The chain reads `cluster.detach` from its composed config, as a plain sweep does (the
    sweeper's), not from the command line's text: with a local config saying true, the chain
    goes to its detached driver; its driver of the same command being alive (this process),
    it says so and starts nothing (exit 0). It once ran attached: refused here for the live
    driver, and with none each stage's sweep detached itself and the chain stopped at its
    first stage. `cluster.detach=false` on the command line still wins."""
    monkeypatch.chdir(tmp_path)
    chain = load_chain("cs336")
    user = UserOverrides.parse([f"paths.output_root={tmp_path}", "model=tiny", "data=toy",
                                "rollout=hf"])
    root = chain_root(compose_stage(chain.stages[0], user), chain.name)
    root.mkdir(parents=True)
    command = [sys.executable, "-m", "chain", "--chain", chain.name, *user.lines]
    DriverRecord("local", tuple(command), str(tmp_path), str(root / "driver.log"),
                 socket.gethostname(), "now", pid=os.getpid(), started=process_start(os.getpid()),
                 scope="chain", name=chain.name).write(record_path(root))
    assert detached_or_refused(chain, [0], [], user) == 0
    assert capsys.readouterr().out.startswith("a driver of this chain is already running")
    attached = UserOverrides.parse([*user.lines, "cluster.detach=false"])
    assert detached_or_refused(chain, [0], [], attached) == 1
    assert "before launching it attached" in capsys.readouterr().err


def test_a_detached_chain_s_follow_line_names_its_root_and_watch_follows_its_latest_stage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Issue 59, item 10: with `paths.output_root` set, a detached chain said "`make watch` (the
    latest sweep)", which looks under outputs/ and shows another sweep. It names its root now,
    and `python -m analysis watch <root>` (`make watch SWEEP=<root>`) follows the sweep of the
    stage the chain started last (its copy of the chain's record written last), not a later
    sweep of the same output root nor another chain's stage."""
    from analysis.__main__ import main as analysis_main
    from analysis.outputs.monitor import make_command, shown_path
    from analysis.readers.collect import chain_stage_sweep

    monkeypatch.chdir(tmp_path)
    chain = load_chain("cs336")
    out = tmp_path / "elsewhere"
    user = UserOverrides.parse([f"paths.output_root={out}", "model=tiny", "data=toy", "rollout=hf",
                                "cluster.detach=true"])
    root = chain_root(compose_stage(chain.stages[0], user), chain.name)
    root.mkdir(parents=True)
    command = [sys.executable, "-m", "chain", "--chain", chain.name, *user.lines]
    record = DriverRecord("local", tuple(command), str(tmp_path), str(root / "driver.log"),
                          socket.gethostname(), "now", pid=os.getpid(),
                          started=process_start(os.getpid()), scope="chain", name=chain.name)
    record.write(record_path(root))
    assert detached_or_refused(chain, [0], [], user) == 0  # its driver (this process) runs
    follow = f"  follow: `{make_command('watch', root)}` (the runs of its latest stage), `tail -f "
    assert follow in capsys.readouterr().out
    assert chain_stage_sweep(root) is None  # no stage started yet
    with pytest.raises(SystemExit, match="not a sweep, nor a chain whose driver has started a stage"):
        analysis_main(["watch", str(root), "--once"])
    stages = [out / "baselines" / "2026-12-03_00-00-00", out / "length_norm" / "2026-12-03_01-00-00"]
    others = [out / "sweep" / "2026-12-03_02-00-00", out / "other_chain" / "2026-12-03_03-00-00"]
    for when, sweep in enumerate([*stages, *others]):
        sweep.mkdir(parents=True)
        (sweep / "multirun.yaml").write_text("hydra: {}\n")
        copy = record if sweep in stages else replace(
            record, scope="sweep" if sweep == others[0] else "chain",
            log=str(sweep / "driver.log"))
        copy.write(record_path(sweep))
        os.utime(record_path(sweep), (1e9 + when, 1e9 + when))
    assert chain_stage_sweep(root) == stages[1]
    analysis_main(["watch", str(root), "--once"])
    shown = capsys.readouterr().out.splitlines()
    assert shown[:2] == [f"chain cs336: its latest stage's sweep {stages[1]}",
                         f"Sweep directory: {shown_path(stages[1])}"]


@pytest.mark.parametrize(("override", "error"), [
    ("cluster.driver_time_limit_min=abc", "error: cluster.driver_time_limit_min='abc' is not a number"),
    ("cluster.driver_time_limit_min=nan", "error: cluster.driver_time_limit_min=nan is not an integer"),
    ("cluster.driver_time_limit_min=0", "error: cluster.driver_time_limit_min=0 is out of range"),
    ("cluster.mail_user='a b@c'", "error: cluster.mail_user='a b@c': the address SLURM mails"),
])
def test_a_chain_s_bad_driver_option_is_refused_before_its_driver_is_submitted(
        tmp_path: Path, capsys: pytest.CaptureFixture, override: str, error: str) -> None:
    """A detached chain's driver job takes its options from the first stage's `cluster.*`: a
    value that breaks its rule is one line naming the key and what to set, exit 2, and no
    driver record (nothing submitted). It once raised int()'s own words (`invalid literal for
    int() with base 10: 'abc'`), and 0 (SLURM: no time limit) went to sbatch."""
    code = chain_main(["model=tiny", "data=toy", "rollout=hf", f"paths.output_root={tmp_path}",
                       "cluster=slurm_cpu", "cluster.detach=true", override])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(error) and f"set {override.split('=')[0]} to " in err, err
    assert err.endswith("nothing was submitted\n")
    assert list(tmp_path.rglob("driver.json")) == []


def test_a_single_run_with_cluster_detach_is_refused(tmp_path: Path) -> None:
    """`cluster.detach=true` detaches a sweep's (or a chain's) driver; a single run has none (its
    process is the run): refused in one line saying how to detach it (a sweep of one job), its
    dry run as its launch, nothing written. It was once accepted and ran in the terminal."""
    for extra in ("dry_run=true", "dry_run=false"):
        out = subprocess.run([sys.executable, str(ROOT / "launch.py"), "model=tiny", "data=toy",
                              "rollout=hf", "cluster.detach=true", f"paths.output_root={tmp_path}",
                              extra], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert out.returncode == 2, (extra, out.stdout[-2000:], out.stderr[-2000:])
        assert ("  - cluster.detach=true: a single run has no driver to detach (its process is "
                "the run); launch it as a sweep of one job (python launch.py -m ... "
                "cluster.detach=true), or set cluster.detach=false to run it here") in out.stderr.splitlines(), out.stderr
        assert "Traceback" not in out.stderr
    assert not list(tmp_path.rglob("*"))
