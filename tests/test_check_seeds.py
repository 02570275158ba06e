"""Check seeds in the sweep itself (`analysis.check_seeds`): the first configs of a one-seed sweep
run again with seed + 1, as jobs after the grid's, listed and priced by the dry run, refused where
they mean nothing, and read back as a second seed of their config."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from launching import launch

from analysis.decisions.ranking import rank
from analysis.readers.collect import LABEL, collect

TOY = ("model=tiny", "data=toy", "rollout=hf")
STAGE = ("-m", *TOY, "loss=no_baseline,reinforce_with_baseline,grpo_clip")


def test_the_dry_run_lists_and_prices_the_check_seed_after_the_grid(tmp_path: Path) -> None:
    out = launch(*STAGE, "seed=4", "analysis.check_seeds=1", f"paths.output_root={tmp_path}",
                 "dry_run=true")
    assert out.returncode == 0, out.stderr
    jobs = [line for line in out.stdout.splitlines() if line.startswith("job #")]
    assert [line.split("] ")[0] + "]" for line in jobs] == [
        "job #0 [loss=no_baseline]", "job #1 [loss=reinforce_with_baseline]",
        "job #2 [loss=grpo_clip]", "job #3 [loss=no_baseline seed=5: check seed]"]
    assert "dry run: 4 jobs, nothing submitted" in out.stdout
    assert "cost: 4 jobs" in out.stdout
    assert not list(tmp_path.rglob("*"))


@pytest.mark.parametrize(("extra", "said"), [
    (("race.max_seeds=3",), "analysis.check_seeds with race.max_seeds: a race gives its configs "
                            "their seeds itself"),
    (("seed=0,1",), "analysis.check_seeds with seed swept"),
    (("++seed=0,1",), "analysis.check_seeds with seed swept"),  # else a check seed repeats a job
    (("analysis.check_seeds=2",), "analysis.check_seeds=2 for 3 configs: check seeds are for at "
                                  "most half the configs (1 here)"),
    (("seed=4294967295",), "the check seed 4294967296 is past the largest seed 4294967295"),
])
def test_check_seeds_where_they_mean_nothing_are_refused(tmp_path: Path, extra: tuple[str, ...],
                                                         said: str) -> None:
    out = launch(*STAGE, "analysis.check_seeds=1", *extra, f"paths.output_root={tmp_path}",
                 "dry_run=true")
    assert out.returncode == 2 and said in out.stderr, out.stderr
    assert out.stderr.rstrip().endswith("nothing was submitted")


def test_a_check_seed_runs_as_the_second_seed_of_its_config(tmp_path: Path,
                                                            tiny_model_dir: Path) -> None:
    sweep = tmp_path / "stage"
    command = ("-m", *TOY, f"model.path={tiny_model_dir}", "loss=no_baseline,reinforce_with_baseline",
               "analysis.check_seeds=1", "n_grpo_steps=4", "eval.eval_every=2", "eval.n_examples=16",
               "logging.wandb_mode=disabled", f"hydra.sweep.dir={sweep}")
    out = launch(*command)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Sweep" in out.stdout and "3 runs: 3 completed" in out.stdout
    overrides = yaml.safe_load((sweep / "2" / ".hydra" / "overrides.yaml").read_text())
    assert "seed=1" in overrides and "loss=no_baseline" in overrides
    runs = collect([sweep]).runs
    assert sorted(runs.groupby(LABEL)["seed"].apply(sorted).to_dict().items()) == [
        ("loss=no_baseline", [0, 1]), ("loss=reinforce_with_baseline", [0])]
    seeds = rank(collect([sweep])).uncertainty.seeds
    assert (seeds.source, seeds.df) == ("seeds", 1)
    # the same command again runs nothing: every job, the check seed's too, is finished
    written = {job: (sweep / job / "metrics.jsonl").stat().st_mtime_ns for job in "012"}
    again = launch(*command)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "3 runs: 3 completed" in again.stdout
    assert {job: (sweep / job / "metrics.jsonl").stat().st_mtime_ns for job in "012"} == written


@pytest.fixture(scope="module")
def source_sweep(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """S of issue 52: a finished 2 x 2-seed learning-rate sweep of the tiny model, 20 steps."""
    sweep = tmp_path_factory.mktemp("source") / "S"
    out = launch("-m", *TOY, f"model.path={tiny_model_dir}", "logging.wandb_mode=disabled",
                 "n_grpo_steps=20", "eval.eval_every=5", "learning_rate=3e-4,1e-3", "seed=0,1",
                 f"hydra.sweep.dir={sweep}")
    assert out.returncode == 0, out.stderr[-3000:]
    return sweep


@pytest.mark.slow
@pytest.mark.parametrize(("extra", "refused"), [
    ((), None),
    (("data.max_operand=9",), "its validation problems (outcome digests)"),
    (("n_grpo_steps=40",), "its compared step is 20, this sweep's 40"),
    (("eval.n_examples=10",), "its validation problems (outcome digests)"),
])
def test_the_dry_run_borrows_only_where_the_report_will(tmp_path: Path, tiny_model_dir: Path,
                                                        source_sweep: Path,
                                                        extra: tuple[str, ...],
                                                        refused: str | None) -> None:
    """Issue 52, item 8: the dry run's power borrows through the report's own check
    (analysis.decisions.ranking.borrow_variance on the jobs' planned design): another task, another
    compared step or other validation problems are refused there as the report refuses them,
    and no check seed is offered for a variance that will not be borrowed."""
    out = launch("-m", *TOY, f"model.path={tiny_model_dir}", "n_grpo_steps=20", "eval.eval_every=5",
                 "loss=no_baseline,reinforce_with_baseline",
                 f"analysis.seed_variance_from={source_sweep}", *extra,
                 f"paths.output_root={tmp_path}", "dry_run=true")
    assert out.returncode == 0, out.stderr
    power = [line for line in out.stdout.splitlines() if line.startswith("power")]
    if refused is None:
        assert power[0].startswith("power (borrowed: seed sd") and "at step 20" in power[0]
        assert "check seed: the borrowed variance was measured on other settings" in out.stdout
        return
    assert power == [line for line in power if "nothing to borrow" in line] and len(power) == 1
    assert f"cannot borrow from {source_sweep}" in power[0] and refused in power[0]
    assert "check seed" not in out.stdout


@pytest.mark.slow
def test_a_check_sweep_without_its_own_seed_is_one_seed_and_said(tmp_path: Path,
                                                                 tiny_model_dir: Path) -> None:
    """The separate check-seed recipe run without `seed=1` (issue 52 item 2): the check sweep's run
    is the stage's config and seed again, so it is set aside and said, not a second seed (it made
    seeds 0, 0 and a check of 'own / borrowed = 0 ... p 1' that could not fail); the stage named
    again through a link is read once (item 1)."""
    common = ("-m", *TOY, f"model.path={tiny_model_dir}", "n_grpo_steps=4", "eval.eval_every=2",
              "eval.n_examples=16", "logging.wandb_mode=disabled")
    stage, check, link = tmp_path / "stage", tmp_path / "check", tmp_path / "link"
    for sweep, swept in ((stage, "loss=no_baseline,reinforce_with_baseline"), (check, "loss=no_baseline")):
        out = launch(*common, swept, f"hydra.sweep.dir={sweep}")
        assert out.returncode == 0, out.stderr[-3000:]
    link.symlink_to(stage, target_is_directory=True)
    collection = collect([stage, check, link])
    assert collection.runs.groupby(LABEL)["seed"].apply(list).to_dict() == {
        "loss=no_baseline": [0], "loss=reinforce_with_baseline": [0]}
    assert collection.notes == (
        f"{link} is the sweep {stage}, named twice: its runs are read once",
        f"{check / '0'} (loss=no_baseline, seed 0) is set aside: the same config and seed as "
        f"{stage / '0'}, which is kept (one seed is one measurement, never a second seed; kept is "
        "the run that went furthest, of equals the first named)")
    seeds = rank(collection).uncertainty.seeds
    assert seeds.source == "none" and not any("check seeds" in note for note in seeds.notes)


@pytest.mark.parametrize(("given", "said"), [
    # swept: the base value (0) used to hide the sweep, which then ran duplicate same-seed runs
    ("analysis.check_seeds=0,1", "analysis.check_seeds cannot be swept: it is how many configs of "
                                 "the sweep get a second seed, one number for the whole sweep; "
                                 "give one value (analysis.check_seeds=1, or 0 for none)"),
    ("analysis.check_seeds=-1", "analysis.check_seeds=-1 is out of range: the configs of a one-seed "
                                "sweep that get a second seed must be an integer in [0, 100]"),
    ("analysis.check_seeds=nan", "analysis.check_seeds=nan is not an integer"),
    ("analysis.check_seeds=inf", "analysis.check_seeds=inf is not an integer"),
    ("analysis.check_seeds=abc", "analysis.check_seeds='abc' is not a number"),
])
def test_a_bad_check_seeds_is_one_line_naming_the_key_and_its_range(tmp_path: Path, given: str,
                                                                     said: str) -> None:
    out = launch(*STAGE, given, f"paths.output_root={tmp_path}", "dry_run=true")
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith(f"error: {said}") and lines[0].endswith("nothing was submitted")
    if "=" in said.split(" ")[0]:  # a value out of its rule: the fix names the range
        assert "set analysis.check_seeds to an integer in [0, 100] (0 = none" in lines[0]
    assert "dry run:" not in out.stdout and not list(tmp_path.rglob("*"))


@pytest.mark.parametrize("dry_run", ["true", "false"])
def test_check_seeds_in_a_single_run_are_refused(tmp_path: Path, dry_run: str) -> None:
    """Without -m there are no configs to give a second seed: said, not silently ignored."""
    out = launch(*TOY, "analysis.check_seeds=1", "n_grpo_steps=1", "logging.wandb_mode=disabled",
                 f"paths.output_root={tmp_path}", f"dry_run={dry_run}")
    assert out.returncode == 2, out.stderr[-2000:]
    assert ("analysis.check_seeds=1: check seeds are jobs of a sweep (its first configs again with "
            "seed + 1); a single run has no configs to check. Launch the configs as a sweep (-m "
            "key=a,b analysis.check_seeds=1), or drop analysis.check_seeds") in out.stderr
    assert "Traceback" not in out.stderr and not list(tmp_path.rglob("*"))


def test_a_run_directory_other_than_the_job_number_is_refused_before_submission(
        tmp_path: Path) -> None:
    """`hydra.sweep.subdir=${loss.name}` put the check seed in its config's directory (refused at
    run time) and every run where the summary and report do not look (all called failed)."""
    sweep = tmp_path / "stage"
    for dry_run in ("true", "false"):
        out = launch(*STAGE, "analysis.check_seeds=1", "hydra.sweep.subdir=${loss.name}",
                     "n_grpo_steps=1", f"hydra.sweep.dir={sweep}", f"dry_run={dry_run}")
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]
        assert lines[0].startswith("error: hydra.sweep.subdir=${loss.name}: the live monitor, the "
                                   "summary, the report and a race read a sweep's runs from "
                                   "<sweep>/<job number>")
        assert lines[0].endswith("drop the hydra.sweep.subdir override; nothing was submitted")
        assert not sweep.exists()
