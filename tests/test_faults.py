"""Fault injection on real training runs (`launch.py` subprocesses): SIGKILL at chosen points of a
checkpoint or final-model write (the `GRPO_TEST_KILL_AT` hook of grpo.run.checkpoint), corrupt and
missing checkpoint files, a read-only run directory (a crafted pickle: test_no_pickle.py). Every
test checks what the run did and that no completed step was lost: the run ends with steps
0..N logged once each (0: the evaluation before the first update) and the same losses and final
weights as an uninterrupted run. Checkpoints are named by GRPO steps done: step_000005 after the
fifth step."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from training_runs import N_STEPS, assert_same_run, copy_run, finish, latest, launch, status, steps

from grpo.run.checkpoint import KILL_AT_ENV

READ_ONLY_MOUNT = ("unshare", "--map-root-user", "--mount", "sh", "-c",
                   'mount --bind -o ro "$0" "$0" && exec "$@"')


def checkpoint_dirs(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").glob("step_*"))


def snapshot(run_dir: Path) -> dict[str, str]:
    """sha256 of every file the run wrote under `run_dir` (not Hydra's `.hydra/` and log, nor the
    run lock's holder record: every launch writes those, a refused one too)."""
    files = (p for p in sorted(run_dir.rglob("*")) if p.is_file())
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in files if p.relative_to(run_dir).parts[0] not in (".hydra", "launch.log", ".lock")}


def restart(run_dir: Path, tiny_model_dir: Path, *overrides: str) -> str:
    """Start the run again in `run_dir`, expect it to finish; its output."""
    returncode, output = finish(launch(run_dir, tiny_model_dir, *overrides))
    assert returncode == 0, output
    return output


# ----------------------------------------------------------------------------- kills
# One run killed at each point in turn; each restart resumes and runs into the next kill.
# (kill point, checkpoints/latest after the kill, checkpoint directories after the kill,
#  restarts in status.json: the last launch, of an already trained run, is killed before it
#  writes status.json)
KILLS = [
    ("step_000005/state_written", None, [], 0),
    ("step_000005/latest_written", "step_000005", ["step_000005"], 1),
    ("step_000010/model_written", "step_000005", ["step_000005"], 2),
    ("step_000010/manifest_written", "step_000005", ["step_000005"], 3),
    ("step_000010/renamed", "step_000005", ["step_000005", "step_000010"], 4),
    ("step_000015/latest_written", "step_000015", ["step_000005", "step_000010", "step_000015"], 5),
    ("final_model/written", "step_000024", ["step_000020", "step_000024"], 6),
    ("final_model/renamed", "step_000024", ["step_000020", "step_000024"], 6),
]


@pytest.mark.slow
def test_sigkill_at_every_point_of_a_checkpoint_write(
    tiny_model_dir: Path, tmp_path: Path, reference: Path
) -> None:
    for point, latest_after, dirs_after, restarts in KILLS:
        before = latest(tmp_path)
        logged_before = len(steps(tmp_path))
        discarded_before = steps(tmp_path, "metrics.discarded.jsonl")
        returncode, output = finish(launch(tmp_path, tiny_model_dir, env={KILL_AT_ENV: point}))
        assert returncode == -9, f"{point}: {output}"
        # the run resumed after the checkpoint `latest` named (or from scratch without one, its
        # step-0 evaluation set aside too) ...
        resumed = int(before[len("step_"):]) if before else -1
        new_discards = steps(tmp_path, "metrics.discarded.jsonl")[len(discarded_before):]
        assert new_discards == list(range(resumed + 1, logged_before)), point
        # ... and was killed at `point`: every step up to it logged once, the write left as listed
        last = int(point[len("step_"):point.index("/")]) if point.startswith("step_") else N_STEPS
        assert steps(tmp_path) == list(range(last + 1)), point
        assert (latest(tmp_path), checkpoint_dirs(tmp_path)) == (latest_after, dirs_after), point
        assert status(tmp_path)["status"] == "running" and status(tmp_path)["restarts"] == restarts
        assert (tmp_path / "final_model").exists() == (point == "final_model/renamed")
    output = restart(tmp_path, tiny_model_dir)
    assert "writing it again" not in output  # the renamed final model is whole: not rewritten
    assert_same_run(tmp_path, reference, restarts=7)


# ----------------------------------------------------------------------------- corrupt files
@pytest.fixture(scope="module")
def interrupted(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run killed while writing its checkpoint of step 20: steps 0..20 logged, checkpoints of
    steps 10 and 15 intact, `latest` naming step_000015. Tests work on copies."""
    run_dir = tmp_path_factory.mktemp("interrupted")
    returncode, output = finish(launch(run_dir, tiny_model_dir, env={KILL_AT_ENV: "step_000020/model_written"}))
    assert returncode == -9, output
    assert (latest(run_dir), checkpoint_dirs(run_dir)) == ("step_000015", ["step_000010", "step_000015"])
    assert steps(run_dir) == list(range(21))
    return run_dir


def truncate_model(run_dir: Path, step: int) -> None:
    path = run_dir / "checkpoints" / f"step_{step:06d}" / "model.safetensors"
    path.write_bytes(path.read_bytes()[:100_000])


def flip_a_byte(run_dir: Path) -> None:
    path = run_dir / "checkpoints" / "step_000015" / "trainer_state.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def point_outside(run_dir: Path, reference: Path) -> None:
    """`latest` names another run's (intact) checkpoint through `..`."""
    other = os.path.relpath(reference / "checkpoints" / "step_000020", run_dir / "checkpoints")
    (run_dir / "checkpoints" / "latest").write_text(other + "\n")


# (damage, checkpoint the run must resume from, what its message must say)
DAMAGE: dict[str, tuple[Callable[[Path, Path], None], int, str]] = {
    "truncated model.safetensors": (
        lambda run, ref: truncate_model(run, 15), 10,
        "step_000015: model.safetensors is 100000 bytes, manifest.json says"),
    "manifest mismatch": (
        lambda run, ref: flip_a_byte(run), 10,
        "step_000015: trainer_state.safetensors has sha256"),
    "garbage in latest": (
        lambda run, ref: (run / "checkpoints" / "latest").write_bytes(b"\x00\xffstep_9 please\n"), 15,
        "step_9 please', not the name of a checkpoint"),
    "deleted latest": (
        lambda run, ref: (run / "checkpoints" / "latest").unlink(), 15, "latest is missing"),
    "latest pointing outside": (
        point_outside, 15, "latest holds '../"),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_checkpoint_falls_back_to_the_newest_intact_one(
    damage: str, interrupted: Path, reference: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    corrupt, resumed, message = DAMAGE[damage]
    run_dir = copy_run(interrupted, tmp_path)
    corrupt(run_dir, reference)
    output = restart(run_dir, tiny_model_dir)
    assert "(the newest intact checkpoint); skipped:" in output and message in output, output
    assert f"resumed from {run_dir}/checkpoints/step_{resumed:06d} after step {resumed}" in output
    assert steps(run_dir, "metrics.discarded.jsonl") == list(range(resumed + 1, 21))
    assert_same_run(run_dir, reference)


@pytest.mark.slow
def test_no_usable_checkpoint_refuses_until_a_fresh_start_is_allowed(
    interrupted: Path, reference: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    run_dir = copy_run(interrupted, tmp_path)
    truncate_model(run_dir, 10)
    truncate_model(run_dir, 15)
    before = snapshot(run_dir)
    returncode, output = finish(launch(run_dir, tiny_model_dir))
    assert returncode == 1 and "Traceback" not in output, output
    assert "Loading weights" not in output  # refused before the model loads
    assert f"error: refusing to start {run_dir} from scratch" in output
    assert "step_000015: model.safetensors" in output and "step_000010: model.safetensors" in output
    assert "checkpoint.allow_fresh_start=true" in output
    after = snapshot(run_dir)
    assert after.pop("status.json") != before.pop("status.json") and after == before  # nothing lost
    assert status(run_dir)["status"] == "failed" and "refusing" in status(run_dir)["reason"]

    restart(run_dir, tiny_model_dir, "checkpoint.allow_fresh_start=true")
    (aside,) = run_dir.glob("checkpoints.unusable-*")
    assert sorted(p.name for p in aside.glob("step_*")) == ["step_000010", "step_000015"]
    assert steps(run_dir, "metrics.discarded.jsonl") == list(range(21))  # step 0's evaluation too
    assert_same_run(run_dir, reference)


# ----------------------------------------------------------------------------- read-only
@pytest.fixture(scope="module")
def read_only_mount() -> tuple[str, ...]:
    """A command prefix that runs a command with its first argument mounted read-only."""
    probe = subprocess.run([*READ_ONLY_MOUNT, "/tmp", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no private read-only mount here (unshare --mount): {probe.stderr.strip()}")
    return READ_ONLY_MOUNT


@pytest.mark.slow
def test_read_only_run_directory_is_refused_and_nothing_is_lost(
    read_only_mount: tuple[str, ...], interrupted: Path, reference: Path, tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    run_dir = copy_run(interrupted, tmp_path)
    before = snapshot(run_dir)
    # the checkpoint file system is read-only: refused before the model loads, in one line
    proc = launch(run_dir, tiny_model_dir, prefix=(*read_only_mount, str(run_dir / "checkpoints")))
    returncode, output = finish(proc)
    assert returncode == 1 and "Traceback" not in output, output
    assert (f"error: the run directory {run_dir} is not writable: {run_dir}/checkpoints: "
            "Read-only file system. Nothing was changed") in output
    after = snapshot(run_dir)
    assert after.pop("status.json") != before.pop("status.json") and after == before
    assert status(run_dir)["status"] == "failed" and "not writable" in status(run_dir)["reason"]
    # the whole run directory is read-only: refused at its lock, in one line; nothing changes at all
    before = snapshot(run_dir)
    returncode, output = finish(launch(run_dir, tiny_model_dir, prefix=(*read_only_mount, str(run_dir))))
    assert returncode == 1 and "Traceback" not in output, output
    assert (f"error: the run directory {run_dir} is not writable: {run_dir}/.lock: "
            "Read-only file system. Nothing was changed") in output
    assert snapshot(run_dir) == before
    # writable again: resumes from the newest checkpoint, nothing lost
    output = restart(run_dir, tiny_model_dir)
    assert f"resumed from {run_dir}/checkpoints/step_000015 after step 15" in output
    assert steps(run_dir, "metrics.discarded.jsonl") == list(range(16, 21))
    assert_same_run(run_dir, reference, restarts=1)


# ----------------------------------------------------------------------------- final model
@pytest.mark.slow
def test_restart_of_a_completed_run_repairs_a_partial_final_model(
    reference: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    run_dir = copy_run(reference, tmp_path)
    for path in (run_dir / "final_model").iterdir():
        if path.name != "config.json":
            path.unlink()  # what a kill in the middle of a non-atomic save_pretrained leaves
    output = restart(run_dir, tiny_model_dir)
    assert "final_model/: it has no manifest.json" in output and "writing it again" in output
    assert not (run_dir / "metrics.discarded.jsonl").exists()
    # same final weights as the uninterrupted run; a relaunch that trains nothing is no restart
    assert_same_run(run_dir, reference, restarts=0)
