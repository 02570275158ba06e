"""grpo.run.checkpoint (with grpo.run.manifest and grpo.run.state_files) in-process on a small torch model:
what a checkpoint holds, which `latest` is refused, what a resume skips, what pruning keeps."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from grpo.run.checkpoint import (
    CheckpointError,
    CheckpointManager,
    TrainerState,
    rng_state,
    set_rng_state,
)
from grpo.run.checkpoint_names import checkpoint_step
from grpo.run.manifest import manifest_problem, write_manifest


def model_with(value: float) -> torch.nn.Module:
    model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)
    return model


RUN_CONFIG_TEXT = '{"format": "grpo-run-config/1", "config": {"learning_rate": 0.001}, "hydra": {}}\n'


def trainer_state(step: int, optimizer: torch.optim.Optimizer | None = None) -> TrainerState:
    return TrainerState(
        step=step, optimizer=optimizer.state_dict() if optimizer else {}, scheduler={"last_epoch": step},
        sampler={"epoch": 0, "position": step}, rng=rng_state(), elapsed_s=1.5 * step,
        elapsed_no_eval_s=1.0 * step, optimizer_steps=2 * step, health={"zero_reward_streak": 0,
                                                                         "short_streak": 1},
        wandb_run_id="abc123",
    )


def save(run_dir: Path, *steps: int, keep_last: int = 5) -> CheckpointManager:
    """Checkpoints of `steps` whose weights all equal the step number."""
    manager = CheckpointManager(run_dir, keep_last)
    for step in steps:
        manager.save(model_with(float(step)), RUN_CONFIG_TEXT, trainer_state(step))
    return manager


def resumed_weight(manager: CheckpointManager) -> float | None:
    """The weight value of the checkpoint `manager` resumes from (None: a fresh start)."""
    model = model_with(-1.0)
    found = manager.find()
    if found is None:
        return None
    path, state = found
    assert checkpoint_step(path) == state.step
    manager.load_weights(path, model)
    return float(model.weight.detach()[0, 0])


def step_dirs(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").glob("step_*"))


def test_checkpoint_round_trips_bit_equal_without_pickle(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    state = trainer_state(7, optimizer)
    draws = (random.random(), np.random.rand(), torch.rand(3))
    path = CheckpointManager(tmp_path, 2).save(model, RUN_CONFIG_TEXT, state)

    assert sorted(p.name for p in path.iterdir()) == [
        "manifest.json", "model.safetensors", "run_config.json", "trainer_state.json",
        "trainer_state.safetensors"]
    assert json.loads((path / "trainer_state.json").read_text())["format"] == "grpo-trainer-state/1"

    copy = torch.nn.Linear(4, 3)
    found, back = CheckpointManager(tmp_path, 2).find()
    CheckpointManager.load_weights(found, copy)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), copy.parameters(), strict=True))
    assert back.optimizer["param_groups"] == state.optimizer["param_groups"]  # betas stay a tuple
    for key, values in state.optimizer["state"][0].items():
        assert torch.equal(back.optimizer["state"][0][key], values) and back.optimizer["state"][0][key].dtype == values.dtype
    assert (back.step, back.elapsed_s, back.health, back.wandb_run_id) == (7, 10.5, state.health, "abc123")
    set_rng_state(back.rng)
    assert (random.random(), np.random.rand()) == draws[:2] and torch.equal(torch.rand(3), draws[2])


@pytest.fixture
def other_run(tmp_path: Path) -> Path:
    """Another run directory with an intact checkpoint of step 9 (weights 9)."""
    save(tmp_path / "other", 9)
    return tmp_path / "other"


def escape_absolute(ckpt: Path, other: Path) -> None:
    (ckpt / "latest").write_text(str(other / "checkpoints" / "step_000009"))


def escape_dotdot(ckpt: Path, other: Path) -> None:
    (ckpt / "latest").write_text("step_000004/../../../other/checkpoints/step_000009\n")


def escape_symlinked_dir(ckpt: Path, other: Path) -> None:
    (ckpt / "step_000099").symlink_to(other / "checkpoints" / "step_000009")
    (ckpt / "latest").write_text("step_000099\n")


def escape_symlinked_latest(ckpt: Path, other: Path) -> None:
    (ckpt / "latest").unlink()
    (ckpt / "latest").symlink_to(other / "checkpoints" / "latest")


def escape_symlinked_file(ckpt: Path, other: Path) -> None:
    """model.safetensors becomes a link to an identical copy outside: its sha256 still matches."""
    model = ckpt / "step_000004" / "model.safetensors"
    outside = other / "copy.safetensors"
    shutil.copy(model, outside)
    model.unlink()
    model.symlink_to(outside)


@pytest.mark.parametrize("escape, reason", [
    (escape_absolute, "latest holds '/"),
    (escape_dotdot, "latest holds 'step_000004/../../../other"),
    (escape_symlinked_dir, "latest names step_000099, which is a symbolic link; refused"),
    (escape_symlinked_latest, "latest is a symbolic link (to "),
    (escape_symlinked_file, "step_000004: model.safetensors is a symbolic link (to "),
])
def test_latest_must_name_a_checkpoint_inside_this_run(
    escape, reason: str, other_run: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    manager = save(run_dir, 2, 4)
    escape(run_dir / "checkpoints", other_run)
    with caplog.at_level(logging.WARNING):
        weight = resumed_weight(manager)
    # never the other run's step 9; step 4 itself unless its model file is the link
    assert weight == (2.0 if escape is escape_symlinked_file else 4.0)
    assert reason in caplog.text


def test_undecodable_or_mislabelled_state_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    manager = save(tmp_path, 4, 9, 14)
    crafted = tmp_path / "checkpoints" / "step_000014"
    (crafted / "trainer_state.json").write_text(json.dumps(
        {"format": "grpo-trainer-state/1", "state": {"$pickle": "gASV..."}}))
    write_manifest(crafted)  # a consistent manifest: only decoding can tell
    relabelled = tmp_path / "checkpoints" / "step_000009"
    text = (relabelled / "trainer_state.json").read_text()
    (relabelled / "trainer_state.json").write_text(text.replace('"step": 9', '"step": 5'))
    write_manifest(relabelled)
    with caplog.at_level(logging.WARNING):
        assert resumed_weight(manager) == 4.0
    assert "step_000014: trainer_state.json does not decode into a trainer state" in caplog.text
    assert "step_000009: trainer_state.json holds step 5, not 9" in caplog.text


def test_pickle_format_checkpoint_is_never_unpickled(tmp_path: Path) -> None:
    marker = tmp_path / "pickle_was_executed"

    class WritesMarker:
        def __reduce__(self) -> tuple:
            return (open, (str(marker), "w"))

    legacy = tmp_path / "checkpoints" / "step_000009"
    legacy.mkdir(parents=True)
    torch.save(WritesMarker(), legacy / "trainer_state.pt")
    (tmp_path / "checkpoints" / "latest").write_text("step_000009\n")
    with pytest.raises(CheckpointError, match=r"step_000009: it is in the pickle format of earlier"):
        resumed_weight(CheckpointManager(tmp_path, 2))
    assert not marker.exists()


def test_prune_keeps_the_newest_intact_checkpoints(tmp_path: Path) -> None:
    manager = save(tmp_path, 4, 9, keep_last=2)
    broken = tmp_path / "checkpoints" / "step_000009" / "model.safetensors"
    broken.write_bytes(broken.read_bytes()[:10])
    (tmp_path / "checkpoints" / ".tmp_step_000012").mkdir()  # left by a kill mid-write
    manager.save(model_with(14.0), RUN_CONFIG_TEXT, trainer_state(14))
    # the damaged step 9 does not count as one of the two kept, so intact step 4 stays
    assert step_dirs(tmp_path) == ["step_000004", "step_000014"]
    assert not (tmp_path / "checkpoints" / ".tmp_step_000012").exists()
    manager.save(model_with(19.0), RUN_CONFIG_TEXT, trainer_state(19))
    assert step_dirs(tmp_path) == ["step_000014", "step_000019"]


def test_checkpoints_of_an_abandoned_later_segment_are_not_pruned(tmp_path: Path) -> None:
    manager = save(tmp_path, 4, 9, 14, keep_last=1)  # only step 14 is left
    save(tmp_path, 19)
    (tmp_path / "checkpoints" / "latest").write_text("step_000014\n")  # resumed from 14 ...
    manager.save(model_with(15.0), RUN_CONFIG_TEXT, trainer_state(15))  # ... and checkpointed 15: 19 stays
    assert step_dirs(tmp_path) == ["step_000015", "step_000019"]


def test_fresh_start_only_when_no_checkpoint_exists_or_it_is_allowed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "checkpoints" / ".tmp_step_000004").mkdir(parents=True)  # a kill in the first write
    assert resumed_weight(CheckpointManager(tmp_path, 2)) is None

    save(tmp_path, 4)
    shutil.rmtree(tmp_path / "checkpoints" / "step_000004")  # `latest` remains, its checkpoint gone
    with pytest.raises(CheckpointError) as refused:
        resumed_weight(CheckpointManager(tmp_path, 2))
    assert str(refused.value).startswith(f"refusing to start {tmp_path} from scratch")
    assert "latest names step_000004, which is missing" in str(refused.value)
    assert "checkpoint.allow_fresh_start=true" in str(refused.value)
    assert (tmp_path / "checkpoints" / "latest").exists()  # nothing touched

    with caplog.at_level(logging.WARNING):
        assert resumed_weight(CheckpointManager(tmp_path, 2, allow_fresh_start=True)) is None
    (aside,) = tmp_path.glob("checkpoints.unusable-*")
    assert (aside / "latest").read_text() == "step_000004\n" and not (tmp_path / "checkpoints").exists()
    assert "checkpoint.allow_fresh_start=true: moved them to" in caplog.text


def test_manifest_catches_missing_resized_changed_and_foreign_files(tmp_path: Path) -> None:
    (tmp_path / "a.bin").write_bytes(b"0123456789")
    (tmp_path / "b.bin").write_bytes(b"abc")
    write_manifest(tmp_path)
    assert manifest_problem(tmp_path, ("a.bin",)) is None
    (tmp_path / "extra").write_text("not listed: ignored")
    assert manifest_problem(tmp_path) is None
    assert manifest_problem(tmp_path, ("c.bin",)) == "manifest.json does not list c.bin"
    (tmp_path / "a.bin").write_bytes(b"0123456780")
    assert manifest_problem(tmp_path, hashes=False) is None
    assert manifest_problem(tmp_path).startswith("a.bin has sha256 ")
    (tmp_path / "a.bin").write_bytes(b"012")
    assert manifest_problem(tmp_path) == "a.bin is 3 bytes, manifest.json says 10"
    os.remove(tmp_path / "b.bin")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["files"] = {"b.bin": manifest["files"]["b.bin"]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert manifest_problem(tmp_path) == "b.bin is missing"
    manifest["files"] = {"../b.bin": manifest["files"]["b.bin"]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert manifest_problem(tmp_path) == "manifest.json names '../b.bin', which is not a file of the directory"
    (tmp_path / "manifest.json").write_text("{trunc")
    assert manifest_problem(tmp_path).startswith("manifest.json is not readable JSON")
