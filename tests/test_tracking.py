"""wandb tracking with the default offline mode against the real wandb service (wandb-core)."""

from __future__ import annotations

import logging
import os
import re
import signal
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from wandb_offline import history_steps, offline_runs, run_id, service_pids

from grpo.run.tracking import Tracker, scrub_secrets


def tracker_cfg():
    return OmegaConf.create({
        "experiment_name": "track", "seed": 0,
        "logging": {"wandb_mode": "offline", "wandb_project": "grpo-sweeps-tests", "wandb_entity": None,
                    "api_key": "do-not-log"},
    })


def kill_service(sig: int) -> None:
    (pid,) = service_pids()
    os.kill(pid, sig)
    deadline = time.time() + 30
    while pid in service_pids() and time.time() < deadline:
        time.sleep(0.05)


def test_secrets_are_redacted() -> None:
    assert scrub_secrets({"a": {"WANDB_API_KEY": "x", "lr": 1}, "tokens": [{"token": "t"}]}) == {
        "a": {"WANDB_API_KEY": "<redacted>", "lr": 1}, "tokens": "<redacted>"}


RESTART = re.compile(r"sending the (\d+) steps of this segment to wandb run (\w+) again")


@pytest.mark.slow
@pytest.mark.parametrize("killed_after", [3, 5], ids=["mid-segment", "before-finish"])
def test_a_killed_service_costs_no_step_and_keeps_the_run_id(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, killed_after: int
) -> None:
    """SIGTERM kills wandb-core (as SLURM's scancel does) holding steps it has not written yet:
    the tracker restarts it, resumes the same run id and sends the whole segment again.

    The first call to fail is not always the first after the kill (a write to the dead service's
    socket can still succeed once; CI has seen the failure only at `finish`), so the warning counts
    the steps held when it failed: from `killed_after + 1` to all 5."""
    run_dir = tmp_path / "sweep" / "0"
    run_dir.mkdir(parents=True)
    tracker = Tracker(tracker_cfg(), run_dir, "seg0abcd")
    steps = range(5, 10)
    for step in steps[:killed_after]:
        tracker.log({"train/loss": float(step)}, step)
    kill_service(signal.SIGTERM)
    with caplog.at_level(logging.WARNING):
        for step in steps[killed_after:]:
            tracker.log({"train/loss": float(step)}, step)
        tracker.finish()
    assert service_pids() == [], "finish stops the service"
    killed, replayed = offline_runs(run_dir)
    assert run_id(killed) == run_id(replayed) == tracker.run_id == "seg0abcd"
    assert history_steps(replayed) == list(steps)
    assert len(history_steps(killed)) < 5, "the killed service lost steps: the replay is what keeps them"
    (restart,) = RESTART.findall(caplog.text)
    assert restart[1] == "seg0abcd" and min(killed_after + 1, 5) <= int(restart[0]) <= 5, restart
    err = capfd.readouterr().err
    assert "Traceback" not in err and "socket.send() raised exception" not in err


@pytest.mark.slow
def test_sigusr2_leaves_the_service_alive_and_finish_stops_it(tmp_path: Path) -> None:
    """SLURM's time-limit warning (SIGUSR2) reaches wandb-core too, which ignores it."""
    tracker = Tracker(tracker_cfg(), tmp_path, None)
    tracker.log({"train/loss": 1.0}, 0)
    (pid,) = service_pids()
    os.kill(pid, signal.SIGUSR2)
    tracker.log({"train/loss": 2.0}, 1)
    tracker.finish()
    (run,) = offline_runs(tmp_path)
    assert history_steps(run) == [0, 1] and run_id(run) == tracker.run_id
    assert service_pids() == []
