"""The sweep monitor: progress read from run directories, outcomes with the scheduler's word,
the live table, plain lines, the end-of-sweep summary and ``python -m analysis watch``."""

from __future__ import annotations

import io
import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from analysis.__main__ import main
from analysis.outputs.monitor import OUTPUT_LOST, MonitorConsole, SweepMonitor, make_command, table
from analysis.outputs.progress import MetricsTail, RunProgress, SweepProgress, outcome
from analysis.readers.jobs import Job, local_states, read_jobs, varying_keys, write_jobs
from analysis.readers.synthetic import write_multirun, write_run
from grpo.run.files import write_status
from hydra_plugins.grpo_sweeps.reporting import job_error


def metrics_row(step: int, dt: float = 2.0, eval_every: int = 5) -> dict:
    """A row in the trainer's layout: step 0 the evaluation of the initial policy (1 s), then
    GRPO steps of 2 s each with train reward step/100; eval reward step/50 every 5 steps."""
    row = {"step": step, "time/elapsed_s": dt * step + 1.0, "time/elapsed_no_eval_s": dt * step}
    if step > 0:
        row["train/reward_mean"] = step / 100
    if step % eval_every == 0:
        row["eval/reward"] = step / 50
    return row


def status(kind: str, last_step: int | None, n: int = 20, **extra: object) -> dict:
    return {"status": kind, "reason": None, "last_step": last_step, "n_grpo_steps": n,
            "restarts": 0, **extra}


def console(terminal: bool, height: int = 40) -> Console:
    return Console(file=io.StringIO(), force_terminal=terminal, width=160, height=height,
                   color_system=None)


def output(con: Console) -> str:
    return con.file.getvalue()


@pytest.fixture()
def sweep(tmp_path: Path) -> Path:
    """Five jobs of learning_rate x seed: running (resumed at 8), completed, collapsed, a
    status.json that is garbage, and a job that never started (listed in jobs.json only)."""
    sweep = tmp_path / "exp" / "2025-06-01_12-00-00"
    jobs = [("learning_rate=1e-5", "seed=0"), ("learning_rate=1e-5", "seed=1"),
            ("learning_rate=1e-3", "seed=0"), ("learning_rate=1e-3", "seed=1"),
            ("learning_rate=1e-4", "seed=0")]
    overrides = [dict(o.split("=") for o in job) for job in jobs]
    write_run(sweep / "0", overrides[0], [metrics_row(s) for s in range(12)],
              status("running", 11, restarts=1, resumed_from=[8]))
    write_run(sweep / "1", overrides[1], [metrics_row(s) for s in range(21)],
              status("completed", 20))
    write_run(sweep / "2", overrides[2], [metrics_row(s) for s in range(4)],
              status("collapsed", 3, reason="rollout reward 0 for 3\nconsecutive steps"))
    write_run(sweep / "3", overrides[3], [metrics_row(s) for s in range(2)])
    (sweep / "3" / "status.json").write_text('{"status": "runn')
    write_jobs(sweep, "local", [Job(i, tuple(job)) for i, job in enumerate(jobs)])
    write_multirun(sweep, ["learning_rate=1e-5,1e-3,1e-4", "seed=0,1"])
    return sweep


# ----------------------------------------------------------------------------- reading


def test_metrics_tail_reads_appended_lines_and_restarts_after_a_shrink(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    tail.update()
    assert tail.last is None and tail.seconds_per_step() is None
    path.write_text("".join(json.dumps(metrics_row(s, dt=3.0)) + "\n" for s in range(6))
                    + '{"step": 6, "tra')
    tail.update()
    assert tail.last["step"] == 5 and tail.last_eval == (5, 0.1)
    assert tail.seconds_per_step() == pytest.approx(3.0)
    with path.open("a") as f:  # the torn line is completed, then one more step
        f.write('in/reward_mean": 0.5, "time/elapsed_s": 19.0}\n')
        f.write(json.dumps(metrics_row(7, dt=3.0)) + "\n")
    tail.update()
    assert tail.last["step"] == 7 and tail.last["train/reward_mean"] == 0.07
    assert tail.seconds_per_step() == pytest.approx(3.0)
    # a resume moved steps 3.. aside: the file shrank, so it is read again from the start
    path.write_text("".join(json.dumps(metrics_row(s, dt=1.0)) + "\n" for s in range(3)))
    tail.update()
    assert tail.last["step"] == 2 and tail.last_eval == (0, 0.0)
    assert tail.seconds_per_step() == pytest.approx(1.0)


def test_sweep_progress_reads_every_job(sweep: Path) -> None:
    rows = {r.num: r for r in SweepProgress(sweep).read()}
    running, completed, collapsed, garbage, never = (rows[i] for i in range(5))
    assert running.label == "learning_rate=1e-5 seed=0"
    assert (running.status, running.steps_done, running.n_steps) == ("running", 11, 20)
    assert running.train_reward == pytest.approx(0.11)
    assert (running.eval_reward, running.eval_step) == (pytest.approx(0.2), 10)
    assert running.seconds_per_step == pytest.approx(2.0)
    assert running.eta_s == pytest.approx(2.0 * 9)
    assert (running.restarts, running.resumed_from) == (1, (8,))
    assert (completed.status, completed.steps_done, completed.eta_s) == ("completed", 20, None)
    assert collapsed.status == "collapsed" and collapsed.reason.startswith("rollout reward 0")
    # metrics but an unreadable status.json: still running as far as anyone can tell
    assert (garbage.status, garbage.steps_done, garbage.n_steps) == ("running", 1, None)
    assert (never.status, never.steps_done, never.label) == ("pending", 0, "learning_rate=1e-4 seed=0")


def test_jobs_file_merges_and_survives_garbage(tmp_path: Path) -> None:
    write_jobs(tmp_path, "slurm", [Job(0, ("a=1",)), Job(1, ("a=2",))])
    write_jobs(tmp_path, "slurm", [Job(1, ("a=2",), "77_1", "/logs/77_1.err")])
    info = read_jobs(tmp_path)
    assert info.launcher == "slurm"
    assert info.jobs == {0: Job(0, ("a=1",)), 1: Job(1, ("a=2",), "77_1", "/logs/77_1.err")}
    data = json.loads((tmp_path / "jobs.json").read_text())
    data["jobs"].append({"num": "x"})
    (tmp_path / "jobs.json").write_text(json.dumps(data))
    assert set(read_jobs(tmp_path).jobs) == {0, 1}
    (tmp_path / "jobs.json").write_text("[1, 2")
    assert read_jobs(tmp_path) is None


def test_varying_keys() -> None:
    jobs = [("lr=1", "seed=0", "+experiment=demo"), ("lr=2", "seed=0", "+experiment=demo")]
    assert varying_keys(jobs) == ["lr"]
    assert varying_keys([("lr=1", "hydra.launcher.x=2")]) == ["lr"]
    assert varying_keys([("lr=1",), ("lr=1", "seed=3")]) == ["seed"]


def test_status_json_records_each_resume(tmp_path: Path) -> None:
    def write(kind: str, last_step: int | None, restarts: int) -> dict:
        write_status(tmp_path, kind, last_step=last_step, n_grpo_steps=30, restarts=restarts)
        return json.loads((tmp_path / "status.json").read_text())

    assert write("running", None, 0)["resumed_from"] == []
    assert write("running", 9, 0)["resumed_from"] == []
    assert write("running", 9, 1)["resumed_from"] == [10]  # a restart after step 9
    assert write("running", 15, 1)["resumed_from"] == [10]
    assert write("running", None, 2)["resumed_from"] == [10, 0]  # no checkpoint: from scratch
    assert write("completed", 29, 2)["resumed_from"] == [10, 0]
    (tmp_path / "status.json").write_text("garbage")
    assert write("running", 3, 3)["resumed_from"] == [4]


# ----------------------------------------------------------------------------- outcomes


def progress(status: str, steps_done: int = 0, reason: str | None = None) -> RunProgress:
    return RunProgress(num=1, label="lr=1", run_dir=Path("r"), status=status, reason=reason,
                       steps_done=steps_done, n_steps=10)


@pytest.mark.parametrize(("run", "state", "error", "want"), [
    (progress("pending"), "CANCELLED by 0", None, ("cancelled", "cancelled before its first step")),
    (progress("running", 4), "CANCELLED", None, ("cancelled", "cancelled after step 4")),
    (progress("failed", 4, "ConnectionResetError: Connection lost"), "CANCELLED", None,
     ("cancelled", "cancelled after step 4 (the run reported failed: "
                   "ConnectionResetError: Connection lost)")),
    (progress("cancelled", 4, "signal 15 after step 4"), "CANCELLED", None,
     ("cancelled", "signal 15 after step 4")),
    (progress("completed", 10), "CANCELLED", None, ("completed", None)),
    (progress("collapsed", 4, "reward 0"), "COMPLETED", None, ("collapsed", "reward 0")),
    (progress("running", 4), "RUNNING", None, ("running", None)),
    (progress("pending"), "RUNNING", None, ("starting", None)),
    (progress("pending"), "PENDING", None, ("pending", None)),
    (progress("running", 4), "REQUEUED", None, ("running", None)),
    (progress("running", 4), "FINISHED", None,
     ("failed", "the job ended (FINISHED) without a final status")),
    (progress("pending"), None, "ImportError: no module x", ("failed", "ImportError: no module x")),
    # a queued SLURM array task that was cancelled leaves no trace in squeue or the sacct shim
    (progress("pending"), "GONE", None, ("cancelled", "never started: SLURM no longer knows its job")),
    (progress("running", 4), "GONE", None, ("failed", "SLURM no longer knows its job")),
    (progress("failed", 2, "OOM"), "FAILED", "RuntimeError: y", ("failed", "OOM")),
    (progress("preempted", 4, "signal 12"), "REQUEUED", None, ("preempted", "signal 12")),
    (progress("preempted", 4, "signal 12"), "TIMEOUT", None, ("preempted", "signal 12")),
    (progress("exploded", 4), "COMPLETED", None,
     ("exploded", "status.json holds an unknown status 'exploded'")),
])
def test_outcome_folds_in_the_scheduler(run: RunProgress, state: str | None, error: str | None,
                                        want: tuple) -> None:
    got = outcome(run, state, error)
    assert (got.status, got.reason) == want
    still_going = state in (None, "RUNNING", "PENDING", "REQUEUED") and error is None
    assert got.active == (want[0] in ("pending", "starting", "running", "preempted")
                          and still_going)


def test_job_error_keeps_the_exception_line() -> None:
    failed = RuntimeError(
        "Job (task=0) failed during processing with trace:\n----------------------\n"
        "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
        "ValueError: model.path is empty\n\n----------------------\n"
        "You can check full logs with 'job.stderr(0)'")
    assert job_error(failed) == "ValueError: model.path is empty"
    assert job_error(RuntimeError("Job 5_1 has not produced any output (state: CANCELLED)")) == \
        "Job 5_1 has not produced any output (state: CANCELLED)"
    assert job_error(RuntimeError("")) == "RuntimeError"


# ------------------------------------------------------------------------------ display


def test_plain_lines_only_when_a_run_moves_on(sweep: Path) -> None:
    con = console(terminal=False)
    clock = iter(range(0, 1000, 10)).__next__
    with SweepMonitor(SweepProgress(sweep), con, refresh_s=5.0, clock=clock) as monitor:
        monitor.update()
        first = output(con)
        monitor.update()
        assert output(con) == first, "nothing changed: nothing printed"
        write_run(sweep / "0", {}, [metrics_row(s) for s in range(15)])  # 14 of 20: a tenth on
        monitor.update()
    lines = output(con).splitlines()
    assert lines[0] == f"Sweep directory: {sweep}"
    assert lines[1] == ("#0 learning_rate=1e-5 seed=0: running (resumed @8), step 11/20, "
                        "train 0.110, eval 0.200 @10, 2.00 s/step, ETA 18s")
    assert lines[3] == ("#2 learning_rate=1e-3 seed=0: collapsed, step 3/20, train 0.030, "
                        "eval 0.000 @0, rollout reward 0 for 3 consecutive steps")
    assert lines[5] == "#4 learning_rate=1e-4 seed=0: pending, step 0"
    assert lines[6].startswith("#0 learning_rate=1e-5 seed=0: running (resumed @8), step 14/20")
    assert len(lines) == 7


def test_live_table_keeps_the_telling_rows(sweep: Path) -> None:
    rows = SweepProgress(sweep).read()
    con = console(terminal=True)
    con.print(table(rows, max_rows=3))
    text = output(con)
    shown = [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]
    assert shown == ["0", "2", "3"], "running first, then collapsed; completed and pending wait"
    assert "2 more runs not shown (1 completed, 1 collapsed, 1 pending, 2 running)" in text
    assert "11/20" in text and "0.200 @10" in text and "18s" in text


def test_live_view_on_a_terminal(sweep: Path) -> None:
    con = console(terminal=True)
    with SweepMonitor(SweepProgress(sweep), con) as monitor:
        monitor.update()
    text = output(con)
    assert "running (resumed @8)" in text and "┃ overrides" in text
    assert "#0 learning_rate" not in text, "a terminal gets the table, not plain lines"


def test_summary_names_outcomes_resumes_best_config_and_report(sweep: Path) -> None:
    con = console(terminal=False)
    monitor = SweepMonitor(SweepProgress(sweep), con)
    rows = SweepProgress(sweep).read({4: "CANCELLED"})
    lines = monitor.summary(rows)
    assert lines[0] == f"Sweep {sweep}: 5 runs: 1 completed, 1 collapsed, 1 cancelled, 2 running"
    assert lines[5] == "  #4 learning_rate=1e-4 seed=0: cancelled, step 0, cancelled before its first step"
    assert lines[6] == "Resumed: #0 from step 8"
    # the collapsed config is excluded; learning_rate=1e-5 wins, compared at step 20, where its
    # completed run ended; the running one (step 11) did not reach it and is not compared there:
    # the completed run's evaluations after step 0 average 0.25 (0.1 to 0.4), over 1 run; one
    # seed and nothing to measure the seed variance with: no interval
    assert lines[7] == ("Best config: learning_rate=1e-5: late eval reward 0.250 [no interval] "
                        "at step 20 (mean over 1 run)")
    # 74 s of 2 GPUs spent; each run that did not complete priced up to the configs' 200 steps:
    # its 1 s step-0 evaluation, then 22 s x 200/11, 6 s x 200/3 and 2 s x 200/1; the completed
    # run's 41 s: 1244 s in all
    assert lines[8] == ("Stopped early: 1 collapsed; 0.041 GPU-hours spent of an estimated 0.69 "
                        "for the full grid (6%)")
    assert lines[9] == (f"Report: `make plots SWEEP={sweep}` writes {sweep / 'report.md'} "
                        f"and {sweep / 'figures'}/")
    (sweep / "report.md").write_text("# report")
    assert monitor.summary(rows)[-1] == f"Report: {sweep / 'report.md'}"
    assert output(con).count("Best config:") == 2


def test_watch_command_shows_a_finished_sweep_and_stops(sweep: Path,
                                                        capsys: pytest.CaptureFixture,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for job in (3, 4):
        write_run(sweep / str(job), {}, None, status("completed", 20))
    write_run(sweep / "0", {}, None, status("completed", 20, restarts=1, resumed_from=[8]))
    main(["watch", str(sweep), "--interval", "0.01"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Sweep directory: {sweep}"
    assert f"Sweep {sweep}: 5 runs: 4 completed, 1 collapsed" in lines
    assert "Resumed: #0 from step 8" in lines
    main(["watch", "--sweep", str(sweep), "--once"])  # the sweep as plots takes it
    assert f"Sweep {sweep}: 5 runs: 4 completed, 1 collapsed" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="two sweeps to watch .* give it once"):
        main(["watch", str(sweep), "--sweep", str(sweep.parent), "--once"])
    with pytest.raises(SystemExit, match="two sweeps to watch .* give it once"):  # not the last
        main(["watch", "--sweep", str(sweep), "--sweep", str(sweep.parent), "--once"])
    main(["watch", "--outputs", str(sweep.parents[1]), "--once"])  # the latest sweep
    assert f"Sweep {sweep}: 5 runs: 4 completed, 1 collapsed" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no sweep .* run one first, e.g. `make demo`"):
        main(["watch", "--outputs", str(sweep / "nothing")])
    monkeypatch.chdir(sweep.parent)  # one sweep, written relative and absolute: watched
    main(["watch", sweep.name, "--sweep", str(sweep), "--once"])
    assert f"Sweep {sweep.name}: 5 runs: 4 completed, 1 collapsed" in capsys.readouterr().out


def test_watch_ends_when_the_local_launcher_is_gone(sweep: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    data = json.loads((sweep / "jobs.json").read_text())
    data["pid"] = gone.pid
    data["jobs"][0]["job_id"] = str(gone.pid)
    (sweep / "jobs.json").write_text(json.dumps(data))
    assert local_states(read_jobs(sweep)) == {0: "FINISHED", 1: "LAUNCHER_GONE",
                                             2: "LAUNCHER_GONE", 3: "LAUNCHER_GONE",
                                             4: "LAUNCHER_GONE"}
    main(["watch", str(sweep), "--interval", "0.01"])
    out = capsys.readouterr().out
    assert "#0 learning_rate=1e-5 seed=0: failed (resumed @8), step 11/20" in out
    assert "the job ended (FINISHED) without a final status" in out
    assert ("#4 learning_rate=1e-4 seed=0: cancelled, step 0, never started: "
            "its launcher is gone") in out


def test_watch_once_shows_a_running_sweep_then_its_summary(sweep: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    main(["watch", str(sweep), "--once"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Sweep directory: {sweep}"
    assert lines[1].startswith("#0 learning_rate=1e-5 seed=0: running (resumed @8), step 11/20")
    assert f"Sweep {sweep}: 5 runs: 1 completed, 1 collapsed, 1 pending, 2 running" in lines


def test_a_sweep_path_with_spaces_is_one_path_in_the_hints_and_in_make(tmp_path: Path) -> None:
    """The printed command takes a path with spaces as it is, and so does `make plots SWEEP=`
    (quoted as a shell word); a plain path keeps the short make form."""
    from sweep_factory import write_scenario

    root = Path(__file__).resolve().parents[1]
    sweep = write_scenario(tmp_path / "my sweeps" / "run 1")
    command = make_command("plots", sweep)
    assert command == f"python -m analysis plots --sweep {shlex.quote(str(sweep))}"
    assert make_command("watch", sweep) == f"python -m analysis watch {shlex.quote(str(sweep))}"
    assert make_command("plots", tmp_path / "plain") == f"make plots SWEEP={tmp_path / 'plain'}"
    out = subprocess.run([sys.executable, *shlex.split(command)[1:]], cwd=root,
                         capture_output=True, text=True)
    assert out.returncode == 0 and (sweep / "report.md").is_file(), out.stderr[-2000:]
    (sweep / "report.md").unlink()
    # -o: the venv counts as installed (a stamp older than an edited pyproject.toml would make
    # `make` reinstall it under the tests running beside this one)
    out = subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", "plots",
                          f"SWEEP={shlex.quote(str(sweep))}"],
                         cwd=root, capture_output=True, text=True)
    assert out.returncode == 0 and (sweep / "report.md").is_file(), out.stderr[-2000:]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=["ctrl_c", "sighup"])
def test_ctrl_c_stops_watching_in_one_line_and_sighup_quietly(sweep: Path, sig: signal.Signals) -> None:
    """`make watch` of a running sweep, stopped by Ctrl-C (SIGINT to its process group): one line
    naming how to follow the runs again, exit status 130, no KeyboardInterrupt traceback; whose
    terminal closes (SIGHUP): it ends at once, by the signal, saying nothing more."""
    proc = subprocess.Popen([sys.executable, "-m", "analysis", "watch", str(sweep), "--interval",
                             "0.1"], cwd=Path(__file__).resolve().parents[1],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout.readline() == f"Sweep directory: {sweep}\n"  # watching, not summing up
        assert proc.stdout.readline().startswith("#0 learning_rate=1e-5 seed=0: running")
        os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert err == "" and "Traceback" not in out, err
    if sig == signal.SIGHUP:
        assert proc.returncode == -signal.SIGHUP and "Stopped watching" not in out
    else:
        assert proc.returncode == 130
        assert out.splitlines()[-1] == (f"Stopped watching {sweep}: its runs are not affected; "
                                        f"`make watch SWEEP={sweep}` follows them again")


# ------------------------------------------------------------------------------ output gone


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "plain"])
def test_a_monitor_whose_terminal_closed_goes_quiet(sweep: Path, terminal: bool) -> None:
    """A pseudo-terminal whose other side closed (a closed terminal window: writes fail with
    EIO): the live view (or the plain lines) stop without an error; the monitor says it lost its
    output and later lines are dropped, so a launcher can go on waiting for its runs."""
    master, slave = os.openpty()
    with os.fdopen(slave, "w") as tty:
        con = MonitorConsole(file=tty, force_terminal=terminal, width=160, height=40)
        monitor = SweepMonitor(SweepProgress(sweep), con)
        with monitor:
            monitor.update()
            assert not monitor.output_lost
            os.close(master)
            with pytest.raises(OSError):  # what a write there does now
                os.write(tty.fileno(), b"x")
            monitor.update(force=True)  # the live view's write
            monitor.say("a line nobody reads")
            assert monitor.output_lost
        assert len(monitor.summary()) > 3
        os.write(tty.fileno(), b"written to /dev/null")  # its descriptor no longer fails


def test_a_monitor_whose_reader_left_goes_quiet(sweep: Path) -> None:
    """Output into a pipe whose reader closed it (`... | head`): rich would exit the process
    (SystemExit 1) at the first line; the monitor goes quiet and the caller goes on."""
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as pipe:
        monitor = SweepMonitor(SweepProgress(sweep), MonitorConsole(file=pipe))
        with monitor:
            monitor.update()
        assert monitor.output_lost
        assert len(monitor.summary()) > 3




def test_watching_into_a_closed_pipe_ends_quietly(sweep: Path) -> None:
    """`make watch | head -2`: once the reader left, the watch ends (exit status OUTPUT_LOST)
    instead of following a sweep for nobody, with nothing on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "analysis", "watch", str(sweep), "--interval",
                             "0.1"], cwd=Path(__file__).resolve().parents[1],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == f"Sweep directory: {sweep}\n"
        proc.stdout.close()
        write_run(sweep / "0", {}, [metrics_row(s) for s in range(15)])  # a line to write
        err = proc.stderr.read()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == OUTPUT_LOST and err == "", err
