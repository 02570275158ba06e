"""Auto-resume: a run killed by a real signal and restarted in its directory continues its curves
(steps 0..N once each, 0 being the evaluation before the first update) and ends with the same weights as an uninterrupted run."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import pytest
from training_runs import assert_same_run, finish, kill_after, latest, launch, steps


@pytest.mark.slow
def test_sigkill_mid_run_then_restart(tiny_model_dir: Path, tmp_path: Path, reference: Path) -> None:
    proc = launch(tmp_path, tiny_model_dir)
    kill_after(proc, tmp_path, 13, signal.SIGKILL)
    logged = steps(tmp_path)
    checkpointed = int(latest(tmp_path)[len("step_"):])
    assert len(logged) >= 13 and checkpointed in (10, 15) and len(logged) > checkpointed + 1
    returncode, output = finish(launch(tmp_path, tiny_model_dir))
    assert returncode == 0, output
    assert steps(tmp_path, "metrics.discarded.jsonl") == list(range(checkpointed + 1, len(logged)))
    assert_same_run(tmp_path, reference)
    resumed = json.loads((tmp_path / "status.json").read_text())["resumed_from"]
    assert resumed == [checkpointed + 1], "status.json says where the restart continued"


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "cause"), [(signal.SIGTERM, "SIGTERM from scancel"),
                                            (signal.SIGINT, "SIGINT (Ctrl-C) after step"),
                                            (signal.SIGHUP, "SIGHUP (the terminal closed) after")],
                         ids=["sigterm", "ctrl_c", "sighup"])
def test_sigterm_or_ctrl_c_checkpoints_then_restart(
        tiny_model_dir: Path, tmp_path: Path, reference: Path, sig: int, cause: str) -> None:
    proc = launch(tmp_path, tiny_model_dir)
    kill_after(proc, tmp_path, 7, sig)
    output = proc.stdout.read()
    assert proc.returncode == -sig, "the signal is handed on once the work is safe"
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output[-3000:]
    status = json.loads((tmp_path / "status.json").read_text())
    last = status["last_step"]
    assert status["status"] == "cancelled" and status["reason"].startswith(cause), status
    assert latest(tmp_path) == f"step_{last:06d}"
    assert steps(tmp_path) == list(range(last + 1))
    returncode, output = finish(launch(tmp_path, tiny_model_dir))
    assert returncode == 0, output
    assert not (tmp_path / "metrics.discarded.jsonl").exists()
    assert_same_run(tmp_path, reference)
    assert json.loads((tmp_path / "status.json").read_text())["resumed_from"] == [last + 1]


@pytest.mark.slow
def test_a_second_launch_of_a_running_run_is_refused_and_nothing_is_logged_twice(
        tiny_model_dir: Path, tmp_path: Path, reference: Path) -> None:
    first = launch(tmp_path, tiny_model_dir)
    deadline = time.time() + 240
    while len(steps(tmp_path)) < 3:  # training, past its step-0 evaluation
        assert first.poll() is None and time.time() < deadline, first.stdout.read()
        time.sleep(0.05)
    first.send_signal(signal.SIGSTOP)  # paused mid-run, holding the lock, however fast it is
    try:
        returncode, output = finish(launch(tmp_path, tiny_model_dir))
        assert first.poll() is None, "the refused launch stopped nothing"
    finally:
        first.send_signal(signal.SIGCONT)
    assert returncode == 1, output
    assert (f"error: {tmp_path} is being trained by another process (pid {first.pid} on "
            f"{socket.gethostname()} since ") in output
    returncode, output = finish(first)
    assert returncode == 0, output
    assert_same_run(tmp_path, reference, restarts=0)
    # the lock file names its last holder; nobody holds it now, so a relaunch resumes at once
    assert json.loads((tmp_path / ".lock").read_text())["pid"] == first.pid
    returncode, output = finish(launch(tmp_path, tiny_model_dir))
    assert returncode == 0, output
