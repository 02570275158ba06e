"""The detached driver's record (grpo.run.driver) and `make watch`'s driver line
(analysis.outputs.monitor.driver_lines), on real files and real processes; the SLURM driver's tests
are in tests/test_detach.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.outputs.monitor import driver_lines
from analysis.outputs.progress import RunProgress
from grpo.run.driver import (
    DRIVER_FILE,
    FORMAT,
    DriverRecord,
    attached_refusal,
    detach,
    driver_state,
    process_start,
    read_driver,
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
    assert "\n" not in str(caught.value) and DRIVER_FILE in str(caught.value)
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


def test_a_gone_driver_shows_its_last_log_line_and_resume_where_work_is_left(tmp_path: Path) -> None:
    record = local_record(tmp_path, os.getpid(), 1)  # this pid, another start: gone
    (tmp_path / "driver.log").write_text("--- started\n#0 seed=0: running, step 2/6\n\n")
    pending = RunProgress(0, "seed=0", tmp_path / "0", "running", steps_done=2, n_steps=6)
    lines, live = driver_lines(tmp_path, [pending])
    assert not live and lines == [
        f"driver: gone (pid {os.getpid()} on {socket.gethostname()}: its process has ended)",
        "  its last log line: #0 seed=0: running, step 2/6",
        f"  resume: cd {tmp_path} && {sys.executable} launch.py -m seed=0,1"]
    assert record.resume() == lines[2].removeprefix("  resume: ")
    done = RunProgress(0, "seed=0", tmp_path / "0", "completed", steps_done=6, n_steps=6)
    lines, _ = driver_lines(tmp_path, [done])
    assert lines == [f"driver: gone (pid {os.getpid()} on {socket.gethostname()}: its process "
                     "has ended); its work is done"]
    # a chain's driver: the stage's runs being done is not the chain's end
    local_record(tmp_path, os.getpid(), 1, scope="chain", name="cs336")
    lines, _ = driver_lines(tmp_path, [done])
    assert lines[0].endswith("the driver of chain cs336: its process has ended)")
    assert lines[2].startswith("  resume: cd ")


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
