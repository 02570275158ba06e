"""The detached driver's record (grpo.run.driver) and `make watch`'s driver line
(analysis.outputs.monitor.driver_lines), on real files and real processes; the SLURM driver's tests
are in tests/test_detach.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from analysis.outputs.monitor import driver_lines, stop_line
from analysis.outputs.progress import RunProgress
from analysis.readers.jobs import Job, write_jobs
from grpo.run.driver import (
    DRIVER_FILE,
    FORMAT,
    DriverRecord,
    attached_refusal,
    detach,
    driver_state,
    process_start,
    read_driver,
    same_command,
    spawn_local,
)
from grpo.run.files import RunFileError


def local_record(tmp_path: Path, pid: int, started: int | None, **extra: object) -> DriverRecord:
    """A local driver's record in `tmp_path` (its log beside it)."""
    record = DriverRecord("local", (sys.executable, "launch.py", "-m", "seed=0,1"), str(tmp_path),
                          str(tmp_path / "driver.log"), socket.gethostname(), "now", pid=pid,
                          started=started, **extra)
    record.write(tmp_path / DRIVER_FILE)
    return record


def valid() -> dict:
    return {"format": FORMAT, "kind": "slurm", "command": ["python", "launch.py", "-m"],
            "cwd": "/w", "log": "/w/driver.log", "host": "h", "submitted": "now", "job_id": "12"}


@pytest.mark.parametrize("text", [
    '{"format": "grpo-driver/1", "kind": "slu',  # torn
    "[1, 2]",
    json.dumps({**valid(), "format": "other/9"}),
    json.dumps({**valid(), "kind": "pbs"}),
    json.dumps({**valid(), "job_id": "12; rm -rf /"}),
    json.dumps({**valid(), "command": "python launch.py"}),
    json.dumps({**valid(), "command": []}),
    json.dumps({**valid(), "cwd": 3}),
    json.dumps({**valid(), "kind": "local", "pid": -1, "started": 5}),
    json.dumps({**valid(), "kind": "local", "pid": True, "started": 5}),
    json.dumps({**valid(), "scope": "everything"}),
    "[" * 100_000,  # nested too deeply
    " " * (1 << 17),  # larger than any record
    "\udcff".encode("utf-8", "surrogateescape").decode("latin-1"),  # not UTF-8
])
def test_a_torn_or_crafted_record_is_one_clear_line(tmp_path: Path, text: str) -> None:
    (tmp_path / DRIVER_FILE).write_text(text, encoding="latin-1")
    with pytest.raises(RunFileError) as caught:
        read_driver(tmp_path)
    # one line, naming the file's path and what to do
    assert "\n" not in str(caught.value) and str(caught.value).startswith(
        f"{tmp_path / DRIVER_FILE} is not a driver record (")
    assert str(caught.value).endswith("if no driver of it runs (squeue, ps), remove it and launch again")
    lines, live = driver_lines(tmp_path, [])
    assert lines == [f"driver: unknown: {caught.value}"] and not live
    # a launch of the sweep says so rather than guess whether a driver runs
    assert attached_refusal(tmp_path, "make watch") == str(caught.value)
    assert (tmp_path / DRIVER_FILE).exists()


def test_a_valid_record_reads_back(tmp_path: Path) -> None:
    (tmp_path / DRIVER_FILE).write_text(json.dumps(valid()))
    record = read_driver(tmp_path)
    assert record is not None and record.job_id == "12" and record.stop() == "scancel 12"
    assert record.resume() == "cd /w && python launch.py -m"
    assert read_driver(tmp_path / "none") is None


def test_a_local_driver_is_running_then_gone_and_a_reused_pid_is_not_it(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = process_start(proc.pid)
        assert started is not None
        record = local_record(tmp_path, proc.pid, started)
        assert driver_state(record).state == "running"
        # the same pid with another start time is another process (the pid was reused)
        assert driver_state(local_record(tmp_path, proc.pid, started + 1)).state == "gone"
        lines, live = driver_lines(tmp_path, [])
        assert lines[0].startswith(f"driver: gone (pid {proc.pid} on ") and not live
        assert attached_refusal(tmp_path, "make watch") is None  # a gone driver's record is removed
        assert not (tmp_path / DRIVER_FILE).exists()
        local_record(tmp_path, proc.pid, started)
        refusal = attached_refusal(tmp_path, "make watch")
        assert refusal is not None and f"kill -INT -- -{proc.pid}" in refusal
    finally:
        proc.kill()
        proc.wait()
    assert driver_state(record).state == "gone"
    # on another host it cannot be asked, and is not called gone
    elsewhere = DriverRecord(**{**record.__dict__, "host": "another-host"})
    assert driver_state(elsewhere).state == "unknown"


def test_a_gone_driver_says_how_it_ended_from_its_record_not_its_log(tmp_path: Path) -> None:
    """`make watch` reads how the driver ended from its record; the log's last line (here a
    run's progress line, as after a scancel) is not it; a record without the end (SIGKILL, or
    written before the end was recorded) says so and names the log."""
    record = local_record(tmp_path, os.getpid(), 1)  # this pid, another start: gone
    (tmp_path / "driver.log").write_text("--- started\n#0 seed=0: running, step 2/6\n\n")
    pending = RunProgress(0, "seed=0", tmp_path / "0", "running", steps_done=2, n_steps=6)
    gone = f"driver: gone (pid {os.getpid()} on {socket.gethostname()}: its process has ended)"
    resume = f"  resume: cd {tmp_path} && {sys.executable} launch.py -m seed=0,1"
    lines, live = driver_lines(tmp_path, [pending])
    assert not live and lines == [
        gone, "  how it ended: not recorded (killed outright, e.g. SIGKILL or a lost node, or "
        f"started before drivers recorded their end); its log: {tmp_path / 'driver.log'}", resume]
    assert record.resume() == lines[2].removeprefix("  resume: ")
    local_record(tmp_path, os.getpid(), 1, end="out of requeues", ended="2026-12-03T00:00:00+00:00",
                 reason="Job not requeued because: timed-out too many times.")
    lines, _ = driver_lines(tmp_path, [pending])
    assert lines == [gone, "  how it ended: out of requeues at 2026-12-03T00:00:00+00:00: Job not "
                     "requeued because: timed-out too many times.", resume]
    done = RunProgress(0, "seed=0", tmp_path / "0", "completed", steps_done=6, n_steps=6)
    lines, _ = driver_lines(tmp_path, [done])
    assert lines == [f"{gone}; its work is done", "  how it ended: out of requeues at "
                     "2026-12-03T00:00:00+00:00: Job not requeued because: timed-out too many times."]
    local_record(tmp_path, os.getpid(), 1, end="completed", ended="2026-12-03T00:00:00+00:00")
    lines, _ = driver_lines(tmp_path, [done])
    assert lines == [f"{gone}; its work is done"]
    # a chain's driver: the stage's runs being done is not the chain's end
    local_record(tmp_path, os.getpid(), 1, scope="chain", name="cs336")
    lines, _ = driver_lines(tmp_path, [done])
    assert lines[0].endswith("the driver of chain cs336: its process has ended)")
    assert lines[2].startswith("  resume: cd ")
    # ... a local chain's driver that recorded it completed is: its work is done
    local_record(tmp_path, os.getpid(), 1, scope="chain", name="cs336", end="completed",
                 ended="2026-12-03T00:00:00+00:00")
    lines, _ = driver_lines(tmp_path, [done])
    assert len(lines) == 1 and lines[0].endswith("its process has ended); its work is done")


def test_make_watch_s_stop_line_cancels_this_sweep_and_no_other(tmp_path: Path) -> None:
    """Issue 59, item 10: the Stop list said `scancel -n <hydra.launcher.name>`, which cancels
    every sweep of the user (every array is named `launch`). `make watch` on a live driver now
    prints the command that stops it and this sweep's job arrays, their ids from its jobs.json
    (one array a submission: a relaunch's second array is named too), and no other sweep's."""
    sweep, other = tmp_path / "sweep", tmp_path / "other"
    for directory in (sweep, other):
        directory.mkdir()
    record = DriverRecord("slurm", ("python", "launch.py", "-m"), str(tmp_path),
                          str(sweep / "driver.log"), "h", "now", job_id="12")
    assert stop_line(record, sweep) == ("  stop:   scancel 12 (the driver; it has submitted no runs "
                                        "yet; all stays resumable)")
    write_jobs(sweep, "slurm", [Job(0, ("seed=0",), "40_0"), Job(1, ("seed=1",), "40_1"),
                                Job(2, ("seed=2",), None)])
    write_jobs(sweep, "slurm", [Job(2, ("seed=2",), "41_0")])  # relaunched in an array of its own
    write_jobs(other, "slurm", [Job(0, ("seed=0",), "99_0")])
    assert stop_line(record, sweep) == ("  stop:   scancel 12 40 41 (the driver and this sweep's "
                                        "2 job array(s), from its jobs.json; all stays resumable)")
    # a live local driver (this process): its process group, which its runs are in
    local = local_record(sweep, os.getpid(), process_start(os.getpid()))
    lines, live = driver_lines(sweep, [])
    assert live and lines[1] == (f"  stop:   kill -INT -- -{local.pid} (as Ctrl-C: each run stops "
                                 "after its GRPO step, with a checkpoint; all stays resumable)")


def test_a_chain_stage_shows_how_the_chain_s_driver_ended_from_the_chain_s_record(tmp_path: Path) -> None:
    """A stage's sweep holds a copy of the chain's record, made when the stage started; the
    driver records its end in the chain root's, which is what `make watch` on the stage reads."""
    root, stage = tmp_path / "chains" / "cs336", tmp_path / "lr_sweep" / "2026-12-03_00-00-00"
    root.mkdir(parents=True)
    stage.mkdir(parents=True)
    copy = local_record(root, os.getpid(), 1, scope="chain", name="cs336")
    copy.write(stage / DRIVER_FILE)
    local_record(root, os.getpid(), 1, scope="chain", name="cs336", end="failed",
                 ended="2026-12-03T00:00:00+00:00", reason="its command ended with exit status 1: "
                 "chain cs336 stopped: stage 1/2 lr_sweep did not finish")
    lines, _ = driver_lines(stage, [])
    assert lines[1] == ("  how it ended: failed at 2026-12-03T00:00:00+00:00: its command ended "
                        "with exit status 1: chain cs336 stopped: stage 1/2 lr_sweep did not finish")
    (root / DRIVER_FILE).write_text("{")  # the chain's record torn: said, with its path
    lines, _ = driver_lines(stage, [])
    assert lines[0].startswith(f"driver: unknown: {root / DRIVER_FILE} is not a driver record")


def test_records_without_the_end_load_and_a_crafted_end_is_refused(tmp_path: Path) -> None:
    path = tmp_path / DRIVER_FILE
    path.write_text(json.dumps(valid()))  # a record written before the end was recorded
    record = read_driver(tmp_path)
    assert record is not None and (record.end, record.reason, record.ended) == (None, "", None)
    ended = DriverRecord(**{**record.__dict__, "end": "cancelled", "reason": "SIGTERM",
                            "ended": "2026-12-03T00:00:00+00:00"})
    ended.write(path)
    assert read_driver(tmp_path) == ended
    for bad in ({"end": "exploded"}, {"end": "failed", "reason": 3}, {"ended": 7},
                {"end": "failed", "reason": "exit status 1\ndriver: running"}):
        path.write_text(json.dumps({**valid(), **bad}))
        with pytest.raises(RunFileError, match=rf"^{path} is not a driver record \(.*\); if no "
                           r"driver of it runs \(squeue, ps\), remove it and launch again$"):
            read_driver(tmp_path)


def spawned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str) -> DriverRecord:
    """A local detached driver of `python -c code`, started as a detach starts it; its record."""
    monkeypatch.chdir(tmp_path)
    record = spawn_local([sys.executable, "-c", code], tmp_path)
    assert os.getsid(int(record.pid)) == record.pid
    return record


def ended(tmp_path: Path, timeout_s: float = 60) -> DriverRecord:
    """The driver's record once it says how it ended (and its process is gone)."""
    deadline = time.monotonic() + timeout_s
    while (record := read_driver(tmp_path)) is None or record.end is None or driver_state(
            record).state != "gone":
        assert time.monotonic() < deadline, (tmp_path / "driver.log").read_text()
        time.sleep(0.1)
    return record


def test_a_local_driver_records_that_it_completed_or_failed_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ok").mkdir()
    spawned(tmp_path / "ok", monkeypatch, "print('sweep done')")
    record = ended(tmp_path / "ok")
    assert (record.end, record.reason) == ("completed", "")
    assert record.ended is not None and record.ended[:4].isdigit()
    (tmp_path / "bad").mkdir()
    spawned(tmp_path / "bad", monkeypatch,
            "import sys; print('error: learning_rate=-1 is out of range'); sys.exit(2)")
    record = ended(tmp_path / "bad")
    assert (record.end, record.reason) == (
        "failed", "its command ended with exit status 2: error: learning_rate=-1 is out of range")
    lines, _ = driver_lines(tmp_path / "bad", [])
    assert lines[1].startswith("  how it ended: failed at ") and lines[1].endswith(
        ": its command ended with exit status 2: error: learning_rate=-1 is out of range")
    assert "--- driver ended " in (tmp_path / "bad" / "driver.log").read_text()


@pytest.mark.parametrize(("group", "sig", "reason"), [
    (True, signal.SIGINT, "SIGINT (kill -INT or Ctrl-C to its process group); its command ended "
                          "with SIGINT"),
    (False, signal.SIGTERM, "SIGTERM (scancel, the hard time limit or a kill); its command "
                            "ended with SIGTERM"),
])
def test_a_signalled_local_driver_records_that_it_was_cancelled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, group: bool, sig: signal.Signals,
        reason: str) -> None:
    """`kill -INT -- -<pid>` (its stop line) reaches the driver and its command (Python's
    KeyboardInterrupt, which ends it by SIGINT); a SIGTERM to the driver alone is handed on to its command.
    Either way the log's last line is the command's, the record says cancelled."""
    record = spawned(tmp_path, monkeypatch,
                     "import time; print('#0 seed=0: running, step %d/6' % 2, flush=True); time.sleep(60)")
    deadline = time.monotonic() + 30
    while "step 2/6" not in (tmp_path / "driver.log").read_text():  # the command runs
        assert time.monotonic() < deadline, (tmp_path / "driver.log").read_text()
        time.sleep(0.1)
    (os.killpg if group else os.kill)(int(record.pid), sig)
    record = ended(tmp_path)
    assert (record.end, record.reason) == ("cancelled", reason)
    lines, _ = driver_lines(tmp_path, [])
    assert lines[1].startswith("  how it ended: cancelled at ") and lines[1].endswith(reason)


def test_a_detach_while_its_driver_runs_starts_none(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The same command while the driver lives: said, exit 0; another command: refused, exit 1;
    neither starts anything."""
    record = local_record(tmp_path, os.getpid(), process_start(os.getpid()))  # alive: this process
    started: list[str] = []

    def start() -> DriverRecord:
        started.append("driver")
        return record

    monkeypatch.chdir(tmp_path)
    assert detach(tmp_path, [sys.executable, *record.command[1:]], start, "make watch") == 0
    out = capsys.readouterr().out
    assert out.startswith("a driver of this sweep is already running (pid ") and "follow: make watch" in out
    assert detach(tmp_path, [*record.command, "seed=2"], start, "make watch") == 1
    assert "it runs another command" in capsys.readouterr().err
    assert started == []
    (tmp_path / DRIVER_FILE).unlink()
    assert detach(tmp_path, list(record.command), start, "make watch") == 0 and started == ["driver"]
    assert "Detached: the driver is pid " in capsys.readouterr().out


def test_the_same_overrides_in_another_order_are_the_same_command(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """A detach of the running driver's sweep with its overrides in another order is the same
    command (said, exit 0, nothing started); a key given twice keeps the order of its values
    (the last one wins), and another value, an override dropped or another script is another
    command (refused, exit 1)."""
    running = (sys.executable, "launch.py", "-m", "seed=0,1", "+experiment=toy", "lr=1e-3",
               "hydra.sweep.dir=/s")
    record = replace(local_record(tmp_path, os.getpid(), process_start(os.getpid())),
                     command=running)
    record.write(tmp_path / DRIVER_FILE)
    started: list[str] = []

    def start() -> DriverRecord:
        started.append("driver")
        return record

    monkeypatch.chdir(tmp_path)
    reordered = ["python3", "launch.py", "-m", "hydra.sweep.dir=/s", "lr=1e-3", "+experiment=toy",
                 "seed=0,1"]
    assert detach(tmp_path, reordered, start, "make watch") == 0
    assert capsys.readouterr().out.startswith("a driver of this sweep is already running")
    assert same_command(["p", "x.py", "a=1", "a=2", "b=3"], ["p", "x.py", "b=3", "a=1", "a=2"])
    assert not same_command(["p", "x.py", "a=1", "a=2"], ["p", "x.py", "a=2", "a=1"])
    for other in (["python3", "launch.py", "-m", "hydra.sweep.dir=/s", "lr=1e-4", "+experiment=toy",
                   "seed=0,1"],
                  ["python3", "launch.py", "-m", "hydra.sweep.dir=/s", "+experiment=toy", "seed=0,1"],
                  ["python3", "other.py", "-m", "hydra.sweep.dir=/s", "lr=1e-3", "+experiment=toy",
                   "seed=0,1"]):
        assert detach(tmp_path, other, start, "make watch") == 1
        assert "it runs another command" in capsys.readouterr().err
    assert started == []


DETACH_INTO_A_GONE_READER = """
import sys
from pathlib import Path
from grpo.run.driver import DriverRecord, detach, record_path
directory = Path(sys.argv[1])
record = DriverRecord("local", ("python", "launch.py", "-m"), str(directory),
                      str(directory / "driver.log"), "h", "now", pid=1, started=1)
print("a line before", flush=True)
sys.stdin.readline()  # the reader has gone now

def start():
    record.write(record_path(directory))
    return record

sys.exit(detach(directory, list(record.command), start, "make watch"))
"""


def test_a_detach_whose_reader_has_gone_ends_quietly_with_its_driver_started(tmp_path: Path) -> None:
    """Issue 59, item 10: a detach piped to `head -1` ended in a BrokenPipeError traceback (and
    exit 1) though its driver had started. Its reader gone before it prints, it prints nothing
    more, exits 0 and its driver is recorded."""
    proc = subprocess.Popen([sys.executable, "-c", DETACH_INTO_A_GONE_READER, str(tmp_path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
    assert proc.stdout.readline() == "a line before\n"
    proc.stdout.close()  # as `head -1` exits
    proc.stdin.write("go\n")
    proc.stdin.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0 and err == ""
    assert read_driver(tmp_path) is not None


def test_a_driver_of_unknown_state_is_said_so_and_its_stop_names_its_host(tmp_path: Path) -> None:
    """A local driver recorded on another host cannot be asked from here: a launch is refused
    saying it may still be running (not "is already unknown"), and its stop command names the
    host it must be run on (a bare `kill -INT -- -<pid>` here would signal this host's
    process group of that number)."""
    record = DriverRecord("local", (sys.executable, "launch.py", "-m"), str(tmp_path),
                          str(tmp_path / "driver.log"), "another-host", "now", pid=4242, started=7)
    record.write(tmp_path / DRIVER_FILE)
    refusal = attached_refusal(tmp_path, "make watch")
    assert refusal is not None and refusal.startswith(
        "a driver of this sweep may still be running (its state is unknown: pid 4242 on "
        "another-host, it runs on another-host; ask there); nothing was submitted")
    assert record.stop() == "kill -INT -- -4242 (on another-host)"
    assert "stop it (kill -INT -- -4242 (on another-host))" in refusal
    here = DriverRecord(**{**record.__dict__, "host": socket.gethostname()})
    assert here.stop() == "kill -INT -- -4242"
