"""A resume compares the config it was launched with against the one stored in the checkpoint
(grpo.run.run_config): keys that change the trained curve are refused, naming old and new values,
with nothing changed and `.hydra/` describing the trained config; keys that may change are
recorded; a metrics.jsonl that lost trained steps refuses the resume unless allowed. A launch
refused by the run's lock and a dry run pointed at a run rewrite nothing of its record (the dry run
says what the launch would refuse), and the
analysis reads what trained where a record was rewritten all the same."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from training_runs import N_STEPS, finish, launch, status, steps

from analysis.readers.collect import collect
from grpo.run.lock import run_lock
from grpo.run.run_config import compare


@pytest.fixture
def trained(reference: Path, tmp_path: Path) -> Path:
    """A copy of the completed 24-step reference run."""
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    (run_dir / ".lock").unlink(missing_ok=True)
    return run_dir


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*"))
            if p.is_file() and p.name != ".lock" and "wandb" not in p.parts}


@pytest.mark.slow
@pytest.mark.parametrize(("overrides", "refused"), [
    (["learning_rate=0.002"], ["learning_rate: 0.0003 -> 0.002"]),
    (["sampling.temperature=0.7", "loss=grpo_clip"],
     ['loss.name: "reinforce_with_baseline" -> "grpo_clip"', "sampling.temperature: 1.0 -> 0.7"]),
    ([f"n_grpo_steps={N_STEPS - 4}"], [f"n_grpo_steps: {N_STEPS} -> {N_STEPS - 4}"]),
], ids=["learning_rate", "loss_and_temperature", "fewer_steps_than_trained"])
def test_a_resume_that_changes_the_curve_is_refused_and_changes_nothing(
        trained: Path, tiny_model_dir: Path, overrides: list[str], refused: list[str]) -> None:
    before = snapshot(trained)
    returncode, output = finish(launch(trained, tiny_model_dir, *overrides))
    assert returncode == 1, output
    assert f"error: refusing to resume {trained} (checkpoint step_{N_STEPS:06d}) with a changed config" in output
    for line in refused:
        assert f"  - {line}" in output
    assert "Traceback" not in output
    assert snapshot(trained) == before, "a refused resume changed the run directory"
    assert status(trained)["status"] == "completed"


@pytest.mark.slow
def test_a_launch_refused_by_the_lock_and_a_dry_run_rewrite_nothing(trained: Path, tiny_model_dir: Path) -> None:
    before = snapshot(trained)
    with run_lock(trained):  # as the process training this directory holds it (flock)
        returncode, output = finish(launch(trained, tiny_model_dir, "learning_rate=0.002", "loss=grpo_clip"))
    assert returncode == 1 and f"error: {trained} is" in output and "Traceback" not in output, output
    # the dry run says what the launch would refuse
    returncode, output = finish(launch(trained, tiny_model_dir, "learning_rate=0.002", "dry_run=true"))
    assert returncode == 2 and "dry run: 1 job" not in output, output
    assert f"error: invalid config:\n  - refusing to resume {trained} (checkpoint step_{N_STEPS:06d})" in output
    assert "  - learning_rate: 0.0003 -> 0.002" in output and "Traceback" not in output
    returncode, output = finish(launch(trained, tiny_model_dir, "n_grpo_steps=30", "dry_run=true"))
    assert returncode == 0 and "dry run: 1 job, nothing started" in output, output
    assert snapshot(trained) == before, "a launch that did not train rewrote the run directory"
    assert yaml.safe_load((trained / ".hydra" / "config.yaml").read_text())["learning_rate"] == 0.0003


@pytest.mark.slow
def test_the_analysis_reads_what_trained_where_the_record_was_rewritten(
        trained: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "sweep" / "0"
    shutil.move(trained, run_dir)
    (record := run_dir / ".hydra" / "config.yaml").write_text(
        record.read_text().replace("learning_rate: 0.0003", "learning_rate: 0.002"))
    (run,) = collect([run_dir.parent]).runs.to_dict("records")
    assert run["learning_rate"] == 0.0003
    assert (".hydra/config.yaml differs from what trained (learning_rate): the config stored with "
            f"checkpoint step_{N_STEPS:06d}") in run["problems"]
    record.unlink()
    (run,) = collect([run_dir.parent]).runs.to_dict("records")
    assert run["learning_rate"] == 0.0003 and ".hydra/config.yaml is missing or unreadable" in run["problems"]
    (run_dir / "checkpoints").rename(run_dir / "moved")  # nothing stored: the record is all there is
    (run,) = collect([run_dir.parent]).runs.to_dict("records")
    assert run["learning_rate"] is None and ".hydra/config.yaml is missing" in run["problems"]


@pytest.mark.slow
def test_a_completed_run_relaunched_trains_nothing_and_counts_no_restart(
        trained: Path, tiny_model_dir: Path) -> None:
    before = status(trained)
    returncode, output = finish(launch(trained, tiny_model_dir))
    assert returncode == 0, output
    after = status(trained)
    assert after["status"] == "completed" and after["restarts"] == before["restarts"] == 0
    assert steps(trained) == list(range(N_STEPS + 1))


@pytest.mark.slow
def test_keys_that_may_change_are_allowed_and_recorded(trained: Path, tiny_model_dir: Path) -> None:
    returncode, output = finish(launch(trained, tiny_model_dir, f"n_grpo_steps={N_STEPS + 2}",
                                       "logging.progress_every=5", "health.zero_reward_patience=50"))
    assert returncode == 0, output
    assert steps(trained) == list(range(N_STEPS + 3))
    (record,) = [json.loads(x) for x in (trained / "config_changes.jsonl").read_text().splitlines()]
    assert record["resumed_after_step"] == N_STEPS
    assert record["changes"] == {"n_grpo_steps": [N_STEPS, N_STEPS + 2],
                                 "logging.progress_every": [25, 5],
                                 "health.zero_reward_patience": [20, 50]}  # 20: the default guard
    stored = json.loads((trained / "checkpoints" / f"step_{N_STEPS + 2:06d}" / "run_config.json").read_text())
    assert stored["config"]["n_grpo_steps"] == N_STEPS + 2  # the next resume compares with these
    assert yaml.safe_load(stored["hydra"]["config.yaml"])["n_grpo_steps"] == N_STEPS + 2


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["deleted", "emptied", "first_half"])
def test_a_metrics_file_that_lost_trained_steps_refuses_the_resume_unless_allowed(
        trained: Path, tiny_model_dir: Path, damage: str) -> None:
    metrics = trained / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    if damage == "deleted":
        metrics.unlink()
    else:
        metrics.write_text("" if damage == "emptied" else "".join(lines[len(lines) // 2:]))
    missing = N_STEPS + 1 if damage != "first_half" else len(lines) // 2
    returncode, output = finish(launch(trained, tiny_model_dir, f"n_grpo_steps={N_STEPS + 1}"))
    assert returncode == 1, output
    assert (f"metrics.jsonl has no record of {missing} of the steps 0-{N_STEPS} that checkpoint "
            f"step_{N_STEPS:06d} trained") in output
    assert "checkpoint.allow_metrics_gap=true" in output and "Traceback" not in output
    returncode, output = finish(launch(trained, tiny_model_dir, f"n_grpo_steps={N_STEPS + 1}",
                                       "checkpoint.allow_metrics_gap=true"))
    assert returncode == 0, output
    assert steps(trained)[-1] == N_STEPS + 1


def test_the_comparison_sorts_keys_into_refused_and_allowed() -> None:
    trained = {"learning_rate": 1e-5, "n_grpo_steps": 200, "seed": 0, "logging": {"wandb_mode": "offline"},
               "optimizer": {"betas": [0.9, 0.95]}, "eval": {"n_examples": 1024, "n_saved_samples": 32}}
    new = {"learning_rate": 1e-5, "n_grpo_steps": 300, "seed": 0, "logging": {"wandb_mode": "disabled"},
           "optimizer": {"betas": [0.9, 0.99]}, "eval": {"n_examples": 512, "n_saved_samples": 8},
           "extra": True}
    result = compare(trained, new, step=150)
    assert result.refused == {"optimizer.betas": ([0.9, 0.95], [0.9, 0.99]),
                              "eval.n_examples": (1024, 512), "extra": ("(absent)", True)}
    assert result.allowed == {"n_grpo_steps": (200, 300), "logging.wandb_mode": ("offline", "disabled"),
                              "eval.n_saved_samples": (32, 8)}
    assert compare(trained, {**trained, "n_grpo_steps": 149}, step=150).refused == {"n_grpo_steps": (200, 149)}
    assert compare(trained, {**trained, "n_grpo_steps": 150}, step=150).refused == {}
    assert compare(trained, {**trained, "seed": True}, step=0).refused == {"seed": (0, True)}
    assert compare(trained, {**trained, "learning_rate": 1}, step=0).refused == {"learning_rate": (1e-5, 1)}
    # a run trained before eval.samples_per_problem existed sampled one response per problem:
    # resumed with 1 it goes on; with 4 its later evaluations would mean something else
    later = {**trained, "eval": {**trained["eval"], "samples_per_problem": 1}}
    assert compare(trained, later, step=150).refused == {}
    four = {**trained, "eval": {**trained["eval"], "samples_per_problem": 4}}
    assert compare(trained, four, step=150).refused == {"eval.samples_per_problem": ("(absent)", 4)}
    # a run trained before the reward group existed trained on the graded reward: resumed with
    # reward=graded it goes on; with the placebo (reward=random) every later step would differ
    assert compare(trained, {**trained, "reward": {"name": "graded"}}, step=150).refused == {}
    placebo = {**trained, "reward": {"name": "random", "p": 0.5}}
    assert compare(trained, placebo, step=150).refused == {"reward.name": ("(absent)", "random"),
                                                          "reward.p": ("(absent)", 0.5)}
    assert compare(placebo, {**placebo, "reward": {"name": "random", "p": 0.3}},
                   step=150).refused == {"reward.p": (0.5, 0.3)}
