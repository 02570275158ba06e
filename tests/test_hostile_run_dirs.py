"""Crafted run directories: a symbolic link planted where the run writes never sends a write
outside the run directory, and every reader of a run file survives crafted content (too deep,
too large, wrong types, not UTF-8): it falls back, skips with a warning or refuses in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from test_checkpoint import RUN_CONFIG_TEXT, trainer_state

from analysis.outputs.progress import SweepProgress
from analysis.readers.synthetic import write_grid_sweep
from grpo.models.build import read_build_info
from grpo.run.checkpoint import CheckpointManager, write_final_model
from grpo.run.files import MetricsLog, RunDirError, read_status, subdir, write_status
from grpo.run.manifest import manifest_problem, write_manifest
from grpo.run.run_config import check_resume
from grpo.run.state_files import StateFileError, load_state, save_state
from grpo.run.tracking import run_overrides
from grpo.training.evaluation import save_samples

ROOT = Path(__file__).resolve().parents[1]
DEEP_JSON = b"[" * 100_000 + b"]" * 100_000
DEEP_YAML = b"- " * 100_000 + b"1\n"  # libyaml's C constructor would overflow the stack on it


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside the run directory that a planted link points at."""
    target = tmp_path / "outside.txt"
    target.write_text("keep me")
    return target


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    path.mkdir()
    return path


# ------------------------------------------------------------------ planted symbolic links
def _metrics(run_dir: Path) -> None:
    MetricsLog(run_dir).append({"step": 1})


def _discarded(run_dir: Path) -> None:
    (run_dir / "metrics.jsonl").write_text('{"step": 0}\n{"step": 5}\n')
    MetricsLog(run_dir).truncate_after(0)


def _config_changes(run_dir: Path) -> None:
    from omegaconf import OmegaConf

    checkpoint = run_dir / "checkpoints" / "step_000001"
    checkpoint.mkdir(parents=True)
    (checkpoint / "run_config.json").write_text(json.dumps(
        {"format": "grpo-run-config/1", "config": {"n_grpo_steps": 1}, "hydra": {}}))
    check_resume(OmegaConf.create({"n_grpo_steps": 2}), run_dir, checkpoint, 1)


REFUSED_LINKS: dict[str, Callable[[Path], None]] = {
    "metrics.jsonl": _metrics,
    "metrics.discarded.jsonl": _discarded,
    "config_changes.jsonl": _config_changes,
}


@pytest.mark.parametrize("name", REFUSED_LINKS)
def test_an_appended_file_planted_as_a_link_is_refused(run_dir: Path, outside: Path, name: str) -> None:
    (run_dir / name).symlink_to(outside)
    with pytest.raises(RunDirError, match=f"{name} is a symbolic link"):
        REFUSED_LINKS[name](run_dir)
    assert outside.read_text() == "keep me"


@pytest.mark.parametrize("name", ["checkpoints", "rollouts", "wandb"])
def test_a_directory_of_the_run_planted_as_a_link_is_refused(run_dir: Path, tmp_path: Path, name: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run_dir / name).symlink_to(elsewhere)
    with pytest.raises(RunDirError, match=f"{name} is a symbolic link"):
        subdir(run_dir, name)
    assert not list(elsewhere.iterdir())


def test_a_checkpoint_into_a_linked_checkpoints_directory_is_refused(run_dir: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run_dir / "checkpoints").symlink_to(elsewhere)
    with pytest.raises(RunDirError, match="checkpoints is a symbolic link"):
        CheckpointManager(run_dir, 2).save(torch.nn.Linear(2, 2), RUN_CONFIG_TEXT, trainer_state(1))
    assert not list(elsewhere.iterdir())


def _status(run_dir: Path) -> None:
    write_status(run_dir, "running", last_step=1, n_grpo_steps=2, restarts=0)


def _eval_samples(run_dir: Path) -> None:
    save_samples(subdir(run_dir, "rollouts") / "eval_step_000000.jsonl", [{"response": "x"}])


REPLACED_LINKS: dict[str, tuple[str, Callable[[Path], None]]] = {
    # (the link planted, the write): the write replaces the link, never writes through it
    "status.json": ("status.json", _status),
    "status's old fixed temporary name": (".status.json.tmp", _status),
    "an evaluation samples file": ("rollouts/eval_step_000000.jsonl", _eval_samples),
}


@pytest.mark.parametrize("case", REPLACED_LINKS)
def test_a_replaced_file_planted_as_a_link_is_replaced_not_written_through(
        run_dir: Path, outside: Path, case: str) -> None:
    planted, write = REPLACED_LINKS[case]
    (run_dir / planted).parent.mkdir(exist_ok=True)
    (run_dir / planted).symlink_to(outside)
    write(run_dir)
    assert outside.read_text() == "keep me"
    assert not [p for p in run_dir.rglob("*") if p.is_symlink() and p.name == planted
                and not planted.startswith(".")]


def test_the_final_model_and_checkpoint_temporaries_never_follow_planted_links(
        run_dir: Path, tmp_path: Path, tiny_model_dir: Path) -> None:
    from grpo.models.loading import load_policy

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for planted in (".final_model.tmp", "checkpoints/.tmp_step_000003", "checkpoints/.del_step_000003"):
        (run_dir / planted).parent.mkdir(exist_ok=True)
        (run_dir / planted).symlink_to(elsewhere)
    model, tokenizer = load_policy({"path": str(tiny_model_dir)}, torch.device("cpu"))
    write_final_model(model, tokenizer, run_dir, torch.float32)
    manager = CheckpointManager(run_dir, 1)
    manager.save(model, RUN_CONFIG_TEXT, trainer_state(3))
    manager.save(model, RUN_CONFIG_TEXT, trainer_state(3))  # replaces step_000003 through .del_
    assert not list(elsewhere.iterdir())
    assert manifest_problem(run_dir / "final_model") is None
    assert manager.find() is not None


# ------------------------------------------------------------------ crafted files for each reader
CRAFTED_JSON = {
    "deep": DEEP_JSON,
    "not_utf8": b"\xff\xfe{\x00",
    "not_an_object": b"[1, 2, 3]",
    "too_large": b'{"status": "' + b"x" * (2 << 20) + b'"}',
    "empty": b"",
}


@pytest.mark.parametrize("content", CRAFTED_JSON.values(), ids=CRAFTED_JSON)
def test_a_crafted_status_is_read_as_none_and_rewritten(run_dir: Path, content: bytes) -> None:
    (run_dir / "status.json").write_bytes(content)
    assert read_status(run_dir) is None
    write_status(run_dir, "failed", last_step=None, n_grpo_steps=2, restarts=0, reason="x")
    assert read_status(run_dir)["status"] == "failed"


def test_status_fields_of_the_wrong_type_are_dropped(run_dir: Path) -> None:
    (run_dir / "status.json").write_text(json.dumps({
        "status": "running", "restarts": "3", "last_step": "9", "resumed_from": 5,
        "reason": ["x"], "n_grpo_steps": True}))
    assert read_status(run_dir) == {"status": "running"}
    write_status(run_dir, "failed", last_step=None, n_grpo_steps=2, restarts=1)  # no TypeError
    assert read_status(run_dir)["resumed_from"] == [0]


def test_crafted_metrics_lines_are_moved_aside_with_a_warning(
        run_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    lines = [b'{"step": 0}', b'{"nostep": 1}', b'{"step": "1"}', b'{"step": true}', b'{"step": -1}',
             b"\xff\xfe", DEEP_JSON, b"[1, 2]", b'{"step": 1}', b'{"step": 2}']
    (run_dir / "metrics.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    log = MetricsLog(run_dir)
    assert [r["step"] for r in log.read()] == [0, 1, 2]
    assert log.steps_missing(3) == [3]
    with caplog.at_level("WARNING"):
        assert log.truncate_after(1) == 8  # step 2 and the seven lines that are not records
    assert "7 lines are not metrics records" in caplog.text
    assert [r["step"] for r in log.read()] == [0, 1]
    discarded = (run_dir / "metrics.discarded.jsonl").read_text().splitlines()
    assert len(discarded) == 8 and json.loads(discarded[0]) == {"step": 2}


@pytest.mark.parametrize("content", [DEEP_JSON, b"\xff", b'{"format": "grpo-manifest/1", "files": 3}'])
def test_a_crafted_manifest_is_a_problem_not_an_error(run_dir: Path, content: bytes) -> None:
    (run_dir / "a.bin").write_bytes(b"x")
    write_manifest(run_dir)
    (run_dir / "manifest.json").write_bytes(content)
    assert isinstance(manifest_problem(run_dir), str)


@pytest.mark.parametrize("content", [DEEP_JSON, b"\xff",
                                     b'{"format": "grpo-trainer-state/1", "state": ' + b'{"a": ' * 5000
                                     + b"1" + b"}" * 5001])
def test_a_crafted_trainer_state_is_a_state_file_error(run_dir: Path, content: bytes) -> None:
    save_state({"step": 1}, run_dir / "s.json", run_dir / "s.safetensors")
    (run_dir / "s.json").write_bytes(content)
    with pytest.raises(StateFileError):
        load_state(run_dir / "s.json", run_dir / "s.safetensors")


@pytest.mark.parametrize("content", [DEEP_JSON, b"\xff", b"[]", b'{"settings": 1}'])
def test_a_crafted_build_info_is_no_build(run_dir: Path, content: bytes) -> None:
    (run_dir / "build_info.json").write_bytes(content)
    assert read_build_info(run_dir) in (None, 1)


@pytest.mark.parametrize("content", [DEEP_YAML, b"\xff\xfe\x00", b"{a: 1}", b"- 1\n- x=2\n"])
def test_crafted_overrides_give_the_string_overrides_or_none(run_dir: Path, content: bytes) -> None:
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "overrides.yaml").write_bytes(content)
    assert run_overrides(run_dir) == (["x=2"] if content.startswith(b"- 1") else [])


def test_analysis_lists_crafted_runs_as_unusable_and_reports_the_rest(tmp_path: Path) -> None:
    """In a subprocess: a reader that overflowed the C stack would kill it, not just raise."""
    sweep = tmp_path / "sweep"
    write_grid_sweep(sweep, {"learning_rate": [1e-5, 3e-5, 1e-4, 3e-4, 1e-3]}, n_steps=20, eval_every=5)
    (sweep / "0" / "status.json").write_bytes(DEEP_JSON)
    (sweep / "1" / "metrics.jsonl").write_bytes(b'{"step": "x"}\n\xff\xfe\n' + DEEP_JSON + b'\n{"step": -3}\n')
    (sweep / "2" / ".hydra" / "config.yaml").write_bytes(DEEP_YAML)
    (sweep / "2" / ".hydra" / "overrides.yaml").write_bytes(b"a: " + b"[" * 100_000)
    (sweep / "3" / "status.json").write_text('{"status": 5, "last_step": "9", "restarts": []}')
    with (sweep / "3" / "metrics.jsonl").open("a") as log:  # a step no frame holds (OverflowError)
        log.write(json.dumps({"step": 10**30, "eval/reward": 0.5}) + "\n")
    (sweep / "4" / "metrics.jsonl").unlink()
    (sweep / "4" / "metrics.jsonl").mkdir()
    (sweep / "multirun.yaml").write_bytes(b"a: " + b"[" * 100_000)  # swept keys from the runs then
    for command in (["plots", "--sweep", str(sweep)], ["watch", "--once", str(sweep)]):
        out = subprocess.run([sys.executable, "-m", "analysis", *command], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "Traceback" not in out.stderr
    report = (sweep / "report.md").read_text()
    unusable = report[report.index("## Runs with missing or unreadable data"):]
    assert "sweep/0` (status unknown): status.json is unreadable (status.json is not readable " \
           "JSON (nested too deeply))" in unusable
    assert "sweep/1`" in unusable and "metrics.jsonl holds no step" in unusable
    assert ".hydra/config.yaml is unreadable (config.yaml is nested more than 64 levels deep)" in unusable
    assert "sweep/3` (status unknown): status.json holds no status" in unusable
    assert "had 1 unparsable metrics line(s) (skipped)" in report
    assert "sweep/4`" in unusable


@pytest.mark.parametrize(("key", "text"), [("eval/reward", '"inf"'), ("eval/reward", "1.5"),
                                           ("train/reward_mean", '"nan"'), ("eval/reward", '"0.9"')])
def test_a_run_that_logged_a_reward_outside_0_1_is_unusable_not_a_result(
        tmp_path: Path, key: str, text: str) -> None:
    sweep = tmp_path / "sweep"
    write_grid_sweep(sweep, {"learning_rate": [1e-5, 3e-5, 1e-4]}, n_steps=20, eval_every=5)
    metrics = sweep / "1" / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    row = json.loads(lines[-1])
    row[key] = "__BAD__"  # the last (evaluated) step
    lines[-1] = json.dumps(row).replace('"__BAD__"', text)
    metrics.write_text("\n".join(lines) + "\n")
    out = subprocess.run([sys.executable, "-m", "analysis", "plots", "--sweep", str(sweep)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    # the live monitor counts as the report does: no reward shown for the run, the reason said
    (run,) = [r for r in SweepProgress(sweep).read() if r.num == 1]
    assert run.eval_reward is None and run.train_reward is None
    assert run.reason is not None and f"step 20 logged {key}=" in run.reason
    report = (sweep / "report.md").read_text()
    unusable = report[report.index("## Runs with missing or unreadable data"):]
    assert ("sweep/1`" in unusable and f"step 20 logged {key}=" in unusable
            and "not a reward in [0, 1]: no metric of this run is used" in unusable), unusable
    rest = "\n".join(line for line in report.splitlines() if "not a reward in [0, 1]" not in line)
    assert not any(bad in rest for bad in ("inf", "nan", "1.5", "0.9\n")), rest


# ------------------------------------------------------------------ a full disk
_FILE_SIZE_LIMIT = """
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]),) * 2)
os.execvp(sys.argv[2], sys.argv[2:])
"""


@pytest.mark.slow
@pytest.mark.parametrize(("limit", "message"), [
    (400_000, "error: cannot write checkpoint step_000005 in "),  # the 500 kB weights
    (5_000, "error: the disk is full (or over quota) writing "),  # a metrics line
], ids=["checkpoint", "metrics"])
def test_a_full_disk_stops_the_run_in_one_line_and_a_relaunch_resumes(
        tmp_path: Path, tiny_model_dir: Path, limit: int, message: str) -> None:
    """A write past RLIMIT_FSIZE fails as a full disk does (EFBIG instead of ENOSPC)."""
    from training_runs import N_STEPS, finish, launch, status, steps

    prefix = [sys.executable, "-c", _FILE_SIZE_LIMIT, str(limit)]
    returncode, output = finish(launch(tmp_path, tiny_model_dir, "logging.wandb_mode=disabled",
                                       prefix=prefix))
    assert returncode == 1, output
    (line,) = [x for x in output.splitlines() if x.startswith("error: ")]
    assert line.startswith(message) and "Traceback" not in output
    assert status(tmp_path)["status"] == "failed"
    returncode, output = finish(launch(tmp_path, tiny_model_dir, "logging.wandb_mode=disabled"))
    assert returncode == 0, output
    assert steps(tmp_path) == list(range(N_STEPS + 1))
