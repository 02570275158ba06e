"""A confirmation of a sweep's pick (`python -m analysis confirm`): its plan (finalists, fresh
seeds, held-out problems), what it refuses in one line writing nothing, the figures of its
Confirmed section, and (slow) a tiny 3-config sweep confirmed for real."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import yaml
from omegaconf import OmegaConf
from scipy import stats

from analysis.__main__ import main
from analysis.decisions.confirm import read_confirmation
from analysis.decisions.ranking import rank
from analysis.outputs.confirm import GROUP, check_counts, plan_confirmation, same_confirmation
from analysis.outputs.confirmed import report_confirmation, section_lines
from analysis.outputs.report import build_report
from analysis.readers.collect import collect, find_latest_sweep
from analysis.readers.confirmation import (
    PLACEBO_OPTION,
    ConfirmRecord,
    Finalist,
    confirmation_dir,
    confirmed_runs,
    read_record,
)
from analysis.readers.synthetic import write_multirun, write_run
from analysis.stats.comparisons import t_quantile
from analysis.stats.critical import welch_df
from grpo.data.datasets import Example
from grpo.run.outcomes import (
    CONFIRM_DIR,
    EvalOutcomes,
    problem_fingerprints,
    problems_digest,
    write_outcomes,
)

ROOT = Path(__file__).resolve().parents[1]
STEPS = (10, 20)
QUESTIONS = [Example(f"{i}+{i}", str(2 * i)) for i in range(8)]
"""The validation file of the synthetic sweep: the first N_EVAL evaluated, the rest held out."""
N_EVAL = 4
# each config's per-problem rewards at both late steps, one row a seed (4 problems)
RIGHT = {"0.001": [[1, 1, 1, 1], [1, 0, 0, 0]], "0.0003": [[1, 0, 1, 0], [0, 1, 1, 0]],
         "0.01": [[0, 0, 1, 0], [0, 0, 0, 0]]}


def write_validation(path: Path, problems: list[Example]) -> Path:
    path.write_text("".join(json.dumps({"problem": e.question, "answer": e.answer}) + "\n"
                            for e in problems))
    return path


def write_source(sweep: Path, validation: Path, right: dict[str, list[list[int]]] = RIGHT,
                 status: str = "completed", fingerprints: bool = True,
                 reward: str | None = None) -> Path:
    """A finished sweep of 3 learning rates x 2 seeds (0, 1) on MATH-format data, each run's two
    late evaluations with per-problem outcomes over the first N_EVAL validation problems; every
    run trained on ``reward`` (None: the config's default, written as no reward section)."""
    write_multirun(sweep, [f"learning_rate={','.join(right)}", "seed=0,1"])
    evaluated = [Example(e.question, e.answer) for e in QUESTIONS[:N_EVAL]]
    job = 0
    for lr, seeds in right.items():
        for seed, problems in enumerate(seeds):
            run = sweep / str(job)
            base = {"experiment_name": "source", "seed": seed, "learning_rate": float(lr),
                    "n_grpo_steps": STEPS[-1], "model": {"name": "sim"},
                    "data": {"name": "math", "validation_path": str(validation)},
                    "eval": {"n_examples": N_EVAL, "eval_every": 10, "samples_per_problem": 1},
                    "cluster": {"gpus_per_job": 0}, **({"reward": {"name": reward}} if reward else {})}
            reward = sum(problems) / len(problems)
            rows = [{"step": 0, "eval/reward": 0.0, "time/elapsed_s": 1.0}]
            if status == "completed":
                rows += [{"step": s, "eval/reward": reward, "time/elapsed_s": float(s)} for s in STEPS]
            write_run(run, {"learning_rate": float(lr), "seed": seed}, rows,
                      {"status": status, "last_step": STEPS[-1] if status == "completed" else 0},
                      base=base)
            for step in (0, *STEPS):
                write_outcomes(run, EvalOutcomes(
                    step, 1, problems_digest(evaluated),
                    tuple(0.0 for _ in problems) if step == 0 else tuple(map(float, problems)),
                    problems=problem_fingerprints(evaluated) if fingerprints else None))
            job += 1
    return sweep


@pytest.fixture
def source(tmp_path: Path) -> Path:
    validation = write_validation(tmp_path / "validation.jsonl", QUESTIONS)
    return write_source(tmp_path / "out" / "source" / "2026-01-01_00-00-00", validation)


def test_the_plan_takes_the_ranking_s_top_configs_fresh_seeds_and_the_problems_after_those_evaluated(
        source: Path) -> None:
    ranking = rank(collect([source]))
    assert list(ranking.table.index) == ["learning_rate=0.001", "learning_rate=0.0003",
                                         "learning_rate=0.01"]
    plan = plan_confirmation(source, 2, 3, True, ["cluster.cpus_per_job=1"])
    record = plan.record
    assert [(f.rank, f.label, f.options) for f in record.finalists] == [
        (1, "learning_rate=0.001", ("top1",)), (2, "learning_rate=0.0003", ("top2",))]
    assert record.seeds == (2, 3, 4), "the smallest seeds above every seed the sweep used (0, 1)"
    assert [e.question for e in plan.heldout] == ["4+4", "5+5", "6+6", "7+7"]
    assert plan.target == confirmation_dir(source, True) == source.parent / f"{source.name}-confirm"
    assert f"+{GROUP}=top1,top2" in record.arguments and "seed=2,3,4" in record.arguments
    assert {"confirm.enabled=true", "pruning=off", "race.max_seeds=null",
            "cluster.cpus_per_job=1"} <= set(record.arguments)
    option = plan.options["top1"]
    assert "learning_rate: 0.001\n" in option and "n_grpo_steps: 20\n" in option
    assert "  n_examples: 4\n" in option and "  eval_every: 10\n" in option
    assert "seed:" not in option, "the seed is the confirmation's own"
    # a confirmation of 4 held-out problems at most
    assert len(plan_confirmation(source, 1, 1, True, ["confirm.n_examples=2"]).heldout) == 2


def test_without_retraining_each_finished_run_s_final_model_is_an_option(source: Path) -> None:
    for job in (0, 1, 2, 3):
        (source / str(job) / "final_model").mkdir()
        (source / str(job) / "final_model" / "config.json").write_text("{}")
    plan = plan_confirmation(source, 2, None, False, [])
    assert [f.options for f in plan.record.finalists] == [("top1_seed0", "top1_seed1"),
                                                           ("top2_seed0", "top2_seed1")]
    assert plan.record.seeds == () and not any(a.startswith("seed=") for a in plan.record.arguments)
    option = plan.options["top2_seed1"]
    assert "seed: 1\n" in option and f"policy_from: {(source / '3').resolve()}\n" in option
    assert "save_final_model: false" in option
    assert plan.target.name.endswith("-confirm-no-retrain")


def _refusal(args: list[str], capsys: pytest.CaptureFixture) -> str:
    with pytest.raises(SystemExit) as exited:
        main(["confirm", *args])
    message = str(exited.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    return message


def test_bad_input_is_one_line_and_writes_nothing(source: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    conf_before = sorted((ROOT / "conf").rglob("*"))
    s = str(source)
    assert "--top-k is 0" in _refusal(["--sweep", s, "--top-k", "0", "--seeds", "2"], capsys)
    assert "--seeds is 0" in _refusal(["--sweep", s, "--top-k", "1", "--seeds", "0"], capsys)
    assert "--seeds with --no-retrain" in _refusal(
        ["--sweep", s, "--top-k", "1", "--seeds", "2", "--no-retrain"], capsys)
    assert "--top-k 4, but" in _refusal(["--sweep", s, "--top-k", "4", "--seeds", "2"], capsys)
    assert "sets learning_rate itself" in _refusal(
        ["--sweep", s, "--top-k", "1", "--seeds", "2", "learning_rate=1"], capsys)
    assert _refusal(["--sweep", s, "--top-k", "1", "--seeds", "2", "confirm.n_examples=all"],
                    capsys) == ("error: confirm.n_examples=all: give a whole number (the default "
                                "is the evaluation's, eval.n_examples)")
    # a sweep with no finished run
    unfinished = write_source(tmp_path / "out" / "source" / "unfinished", tmp_path / "validation.jsonl",
                              status="running")
    assert "has no finished run of a config to rank" in _refusal(
        ["--sweep", str(unfinished), "--top-k", "1", "--seeds", "2"], capsys)
    # held-out problems that overlap the selection's: the validation file repeats problem 1 as 5
    repeated = write_validation(tmp_path / "repeated.jsonl",
                                [*QUESTIONS[:5], QUESTIONS[1], *QUESTIONS[6:]])
    overlapping = write_source(tmp_path / "out" / "source" / "overlapping", repeated)
    message = _refusal(["--sweep", str(overlapping), "--top-k", "1", "--seeds", "2"], capsys)
    assert message.startswith(f"error: 1 of the 4 held-out problems are problems {overlapping}'s "
                              f"evaluations read (fingerprint {problem_fingerprints(QUESTIONS[1:2])[0]}")
    # outcome files without per-problem fingerprints cannot show their problems apart
    unnamed = write_source(tmp_path / "out" / "source" / "unnamed", tmp_path / "validation.jsonl",
                           fingerprints=False)
    assert "do not name their problems one by one" in _refusal(
        ["--sweep", str(unnamed), "--top-k", "1", "--seeds", "2"], capsys)
    # a confirmation of a confirmation
    confirmation = confirmation_dir(source, True)
    shutil.copytree(source, confirmation)
    ConfirmRecord(source, True, (Finalist(1, "learning_rate=0.001", ("top1",)),), (2, 3), GROUP,
                  "reward", ()).write(confirmation)
    assert f"is a confirmation (of {source})" in _refusal(
        ["--sweep", str(confirmation), "--top-k", "1", "--seeds", "2"], capsys)
    shutil.rmtree(confirmation)
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")
                   if not p.is_relative_to(tmp_path / "out" / "source" / "unfinished")
                   and not p.is_relative_to(tmp_path / "out" / "source" / "overlapping")
                   and not p.is_relative_to(tmp_path / "out" / "source" / "unnamed")
                   and p != tmp_path / "repeated.jsonl")
    assert after == before, "a refusal writes nothing"
    assert not any(p.name.endswith("-confirm") for p in (tmp_path / "out" / "source").iterdir())
    assert sorted((ROOT / "conf").rglob("*")) == conf_before


PLACEBO_ARM = Finalist(1, "learning_rate=0.001 on reward=random (placebo)", (PLACEBO_OPTION,))


def write_confirmation(source: Path, seeds: dict[int, list[list[int]]], retrain: bool = True,
                       shared: bool = False, placebo: list[list[int]] | None = None,
                       placebo_curves: list[list[float]] | None = None) -> Path:
    """A finished confirmation of `source`'s top configs: finalist rank -> each fresh seed's
    per-problem rewards on the 4 held-out problems; with `placebo`, its placebo arm's (rank 0
    below), whose runs log `placebo_curves`: each seed's evaluations at steps 0, 10 and 20."""
    target = confirmation_dir(source, retrain)
    labels = ["learning_rate=0.001", "learning_rate=0.0003", "learning_rate=0.01"]
    fresh = (2, 3)
    record = ConfirmRecord(source.resolve(), retrain, tuple(
        Finalist(number, labels[number - 1], (f"top{number}",)) for number in seeds), fresh,
        GROUP, "reward", (), PLACEBO_ARM if placebo is not None else None)
    options = [f"top{number}" for number in seeds] + ([PLACEBO_OPTION] if placebo else [])
    write_multirun(target, [f"+{GROUP}={','.join(options)}", "seed=2,3"])
    record.write(target)
    held = QUESTIONS[N_EVAL:] if not shared else [QUESTIONS[0], *QUESTIONS[N_EVAL + 1:]]
    job = 0
    arms = {**seeds, **({0: placebo} if placebo is not None else {})}
    for number, rows in arms.items():
        for index, (seed, problems) in enumerate(zip(fresh, rows, strict=True)):
            run = target / str(job)
            curve = ([{"step": step, "eval/reward": value, "time/elapsed_s": float(step + 1)}
                      for step, value in zip((0, *STEPS), placebo_curves[index], strict=True)]
                     if number == 0 and placebo_curves else [])
            write_run(run, {"seed": seed}, curve, {"status": "completed", "last_step": STEPS[-1]},
                      choices={GROUP: f"top{number}" if number else PLACEBO_OPTION})
            write_outcomes(run, EvalOutcomes(STEPS[-1], 1, problems_digest(held),
                                             tuple(map(float, problems)), tuple(problems),
                                             tuple(map(float, problems)), problem_fingerprints(held)),
                           CONFIRM_DIR)
            job += 1
    return target


def test_fresh_seeds_that_all_gave_one_value_are_said_so_not_called_one_seed(source: Path) -> None:
    """2 fresh seeds a finalist, each seed's final model right on the same 1 of 4 held-out
    problems (as the demo's two seeds were, 2 of 8 each): the seed variance is measured, 0 on 2
    df, and no interval is given; the section says the seeds gave one value, not that there was
    one seed a finalist (the reason the figure had before)."""
    target = write_confirmation(source, {1: [[1, 0, 0, 0], [1, 0, 0, 0]],
                                         2: [[0, 1, 0, 0], [0, 1, 0, 0]]})
    collection = collect([source])
    conf = read_confirmation(target, read_record(target), collection, rank(collection))
    assert conf.seeds.degenerate and conf.seeds.df == 2 and not conf.seeds.usable
    text = "\n".join(section_lines(conf))
    assert "every seed gave the same value" in text and "[no interval]" in text
    assert "held-out problems, with the seed variance as measured (seed variance 0 from" in text
    assert "one fresh seed a finalist" not in text


def test_the_confirmed_figures_carry_the_seed_and_problem_variance_and_the_curse_both_noises(
        source: Path) -> None:
    target = write_confirmation(source, {1: [[1, 1, 0, 0], [1, 0, 0, 0]],
                                         2: [[1, 1, 1, 0], [1, 1, 1, 1]]})
    record = read_record(target)
    assert [r.seed for r in confirmed_runs(target, record)] == [2, 3, 2, 3]
    collection = collect([source])
    ranking = rank(collection)
    conf = read_confirmation(target, record, collection, ranking)
    first, second = conf.figures
    # the confirmed means: 0.375 and 0.875, each over 2 seeds x 4 problems
    assert first.confirmed.mean == pytest.approx(0.375) and second.confirmed.mean == pytest.approx(0.875)
    # its variance, by hand: the larger of the pooled seed variance over both finalists (seed
    # means 0.5, 0.25 and 0.75, 1.0: 0.03125 on 2 df) and its own (0.03125, 1 df) over 2 seeds,
    # plus the between-problem variance of its per-problem means (1, .5, 0, 0: var 0.229) less
    # the seed-by-problem mean square over 2 seeds, over 4 problems
    p = np.array([[1, 1, 0, 0], [1, 0, 0, 0]], float)
    residual = p - p.mean(1, keepdims=True) - p.mean(0, keepdims=True) + p.mean()
    q = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], float)
    residual_q = q - q.mean(1, keepdims=True) - q.mean(0, keepdims=True) + q.mean()
    ms_error = (np.sum(residual ** 2) + np.sum(residual_q ** 2)) / 6
    between = np.var(p.mean(0), ddof=1)
    variance = 0.03125 / 2 + between / 4 - ms_error / 8
    assert first.confirmed.variance == pytest.approx(variance)
    assert conf.seeds.variance == pytest.approx(0.03125) and conf.seeds.df == 2
    # the difference: selection (0.625: seeds 1.0, 0.25) minus confirmed, on both variances
    assert first.selection.mean == pytest.approx(0.625)
    both = first.selection.variance + first.confirmed.variance
    df = both ** 2 / (first.selection.variance ** 2 / first.selection.df
                      + first.confirmed.variance ** 2 / first.confirmed.df)
    half = float(stats.t.ppf(0.975, df)) * math.sqrt(both)
    assert first.difference.diff == pytest.approx(0.25)
    assert (first.difference.lo, first.difference.hi) == pytest.approx((0.25 - half, 0.25 + half))
    assert half > 1.3 * t_quantile(df) * math.sqrt(
        first.confirmed.variance), "the selection's noise widens it"
    # the order is not kept: the runner-up confirms higher, and the same comparison says so
    assert conf.order_kept() is False
    assert second.confirmed_verdict.reference == "learning_rate=0.001"
    assert second.confirmed_verdict.diff == pytest.approx(0.5)
    text = "\n".join(section_lines(conf))
    assert "| 1 | learning_rate=0.001 | 0.625 [" in text and "| +0.250 [" in text
    assert "the confirmed means do not keep the selection's order" in text


def test_a_placebo_arm_is_the_best_config_on_reward_random_with_the_same_fresh_seeds(
        source: Path) -> None:
    plan = plan_confirmation(source, 2, 2, True, [], placebo=True)
    record = plan.record
    assert record.placebo == PLACEBO_ARM
    assert f"+{GROUP}=top1,top2,{PLACEBO_OPTION}" in record.arguments and "seed=2,3" in record.arguments
    option = plan.options[PLACEBO_OPTION]
    assert "- override /reward: random\n" in option and "learning_rate: 0.001\n" in option
    assert "n_grpo_steps: 20\n" in option and "seed:" not in option
    assert "/reward:" not in plan.options["top1"], "the finalist itself trains on its own reward"
    # the record keeps it; a command without --placebo is another confirmation
    (source.parent / "elsewhere").mkdir()
    record.write(source.parent / "elsewhere")
    assert read_record(source.parent / "elsewhere") == record
    without = plan_confirmation(source, 2, 2, True, []).record
    assert without.placebo is None
    assert same_confirmation(record, without, OmegaConf.load(source / "0" / ".hydra" / "config.yaml")) \
        == "its placebo arm were True, this command's False"
    with pytest.raises(ValueError, match="--placebo with --no-retrain: a placebo arm is trained"):
        check_counts(1, None, False, placebo=True)


def test_each_finalist_stands_above_its_placebo_and_the_placebo_s_gain_is_run_by_run(
        source: Path) -> None:
    # held-out seed means: finalist 1 0.5, 0.25; finalist 2 1.0, 1.0; the placebo 0.0, 0.0
    target = write_confirmation(source, {1: [[1, 1, 0, 0], [1, 0, 0, 0]],
                                         2: [[1, 1, 1, 1], [1, 1, 1, 1]]},
                                placebo=[[0, 0, 0, 0], [0, 0, 0, 0]],
                                placebo_curves=[[0.25, 0.5, 0.25], [0.0, 0.5, 0.5]])
    conf, lines = report_confirmation(target)
    placebo = conf.placebo
    assert len(conf.figures) == 2, "the placebo is no finalist: not ranked, not compared"
    assert placebo.confirmed.mean == pytest.approx(0.0) and placebo.alpha == pytest.approx(0.025)
    # the pair rule, by hand: the pool over the three arms' seeds (0.03125 + 0 + 0) / 3 on 3 df
    # against the pair's own (v_c + v_p) / 2 on its Welch df (2 seeds: shrunk toward 1), the
    # larger; an own variance of 0 never is: finalist 1 rests on its own, finalist 2 on the pool
    pool = 0.03125 / 3
    for number, v_config, mean, by_own in ((1, 0.03125, 0.375, True), (2, 0.0, 1.0, False)):
        own = v_config / 2
        variance, df = (own, float(welch_df(v_config, 2, 0.0, 2))) if by_own else (pool, 3)
        assert (own >= pool > 0) == by_own
        margin = placebo.margins[number]
        assert margin.diff == pytest.approx(mean)
        assert margin.se == pytest.approx(math.sqrt(variance)) and margin.df == pytest.approx(df)
        half = float(stats.t.ppf(1 - 0.025 / 2, df)) * margin.se
        assert (margin.lo, margin.hi) == pytest.approx((margin.diff - half, margin.diff + half))
    assert placebo.margins[2].above and not placebo.margins[1].above
    # the gain: each run's late value (the mean of its evaluations after step 0) minus its step 0:
    # 0.375 - 0.25 and 0.5 - 0.0; on the larger of the late values' variance and the gains' own
    gain = placebo.gain
    assert gain.diff == pytest.approx(0.3125) and gain.df == 1
    assert gain.se == pytest.approx(math.sqrt(max(np.var([0.375, 0.5], ddof=1),
                                                  np.var([0.125, 0.5], ddof=1)) / 2))
    text = "\n".join(lines)
    assert "Placebo: learning_rate=0.001 on reward=random (placebo)" in text
    assert "97.5%, Bonferroni over the 2 finalists" in text
    assert "- learning_rate=0.0003: +1.000 [" in text and "above the placebo" in text
    assert "- learning_rate=0.001: +0.375 [" in text and "not shown above the placebo" in text
    assert "gain over the pre-RL evaluation" in text and "+0.312 [" in text


def test_a_confirmation_on_the_selection_s_problems_is_none(source: Path) -> None:
    target = write_confirmation(source, {1: [[1, 1, 0, 0], [1, 0, 0, 0]]}, shared=True)
    conf, lines = report_confirmation(target)
    assert conf.figures == [] and "not a confirmation: 1 of its held-out problems are problems " \
        "this sweep's evaluations read" in lines[2]


def test_the_sweep_s_report_and_the_confirmation_s_carry_the_confirmed_section(source: Path) -> None:
    target = write_confirmation(source, {1: [[1, 1, 0, 0], [1, 0, 0, 0]],
                                         2: [[1, 1, 1, 0], [1, 1, 1, 1]]})
    mine = build_report(collect([source]), source)
    theirs = build_report(collect([target]), target)
    head = mine.index("## Confirmed")
    assert mine.index("## How sure: comparisons") < head < mine.index("## Main effects")
    table = mine[head:].split("\n\n")[2]
    assert table.startswith("| rank | config | selection: late reward") and table in theirs
    shutil.rmtree(target)
    assert "## Confirmed" not in build_report(collect([source]), source)


def test_the_latest_sweep_is_never_a_confirmation(source: Path) -> None:
    target = write_confirmation(source, {1: [[1, 1, 0, 0], [1, 0, 0, 0]]})
    (target / "multirun.yaml").touch()  # written after the source's
    assert find_latest_sweep(source.parents[1]) == source


@pytest.mark.slow
def test_a_tiny_sweep_confirmed_for_real_and_again_trains_nothing(tmp_path: Path,
                                                                  tiny_model_dir: Path) -> None:
    """3 configs, then `confirm --top-k 2 --seeds 2`: 4 runs of seeds no run of the sweep used,
    each confirmed on toy pairs whose fingerprints none of the sweep's outcome files holds; the
    Confirmed section; the same command again trains nothing; `--no-retrain` of the best."""
    out = tmp_path / "out"
    common = ["model=tiny", "data=toy", "rollout=hf", f"model.path={tiny_model_dir}",
              "logging.wandb_mode=disabled", f"paths.output_root={out}"]
    swept = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", "experiment_name=tiny",
                            "learning_rate=3e-4,1e-3,3e-3", "n_grpo_steps=4", "eval.eval_every=2",
                            "data.holdout_size=8", *common],
                           cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert swept.returncode == 0, swept.stderr[-3000:]
    (sweep,) = (out / "tiny").iterdir()

    def confirm(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "analysis", "confirm", "--sweep", str(sweep),
                               *args, "logging.wandb_mode=disabled", f"paths.output_root={out}"],
                              cwd=ROOT, capture_output=True, text=True, timeout=900)

    done = confirm("--top-k", "2", "--seeds", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    target = confirmation_dir(sweep, True)
    runs = confirmed_runs(target, read_record(target))
    assert len(runs) == 4 and all(r.outcomes is not None for r in runs)
    assert sorted(r.seed for r in runs) == [1, 1, 2, 2], "the sweep's runs all had seed 0"
    held = {p for r in runs for p in r.outcomes.problems}
    evaluated = {p for f in sweep.glob("*/eval_outcomes/*.json") for p in json.loads(f.read_text())["problems"]}
    assert len(held) == 8 and len(evaluated) == 17 and not held & evaluated
    assert "## Confirmed" in done.stdout and "| 1 | learning_rate=0.0003 |" not in done.stdout[:0]
    section = done.stdout[done.stdout.index("## Confirmed"):]
    assert "each with 2 fresh seeds (1, 2: none of this sweep's runs used them)" in section
    assert "evaluated on 8 held-out problems (1 response each)" in section
    assert (target / "confirmed.md").read_text() in done.stdout
    logged = {r.run_dir.name: (r.run_dir / "metrics.jsonl").read_text() for r in runs}
    again = confirm("--top-k", "2", "--seeds", "2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "relaunch: 0 to submit, 0 still queued or running (followed), 4 finished (not submitted)" \
        in again.stdout
    assert {r.run_dir.name: (r.run_dir / "metrics.jsonl").read_text() for r in runs} == logged
    # the sweep's own report carries the section
    assert section.split("\n\n")[2] in build_report(collect([sweep]), sweep)
    # its own final models, not trained again: the best config's one run
    own = confirm("--top-k", "1", "--no-retrain")
    assert own.returncode == 0, own.stderr[-3000:]
    mine = confirmed_runs(confirmation_dir(sweep, False), read_record(confirmation_dir(sweep, False)))
    assert [(r.seed, r.status) for r in mine] == [(0, "completed")]
    assert not (mine[0].run_dir / "metrics.jsonl").exists(), "nothing trained"
    assert mine[0].outcomes.problems == runs[0].outcomes.problems
    # with a placebo arm: another confirmation than the first, refused beside it in one line
    refused = confirm("--top-k", "2", "--seeds", "2", "--placebo")
    assert refused.returncode != 0 and "its placebo arm were False, this command's True" in refused.stderr
    target.rename(target.with_name(f"{target.name}-first"))
    placebo = confirm("--top-k", "1", "--seeds", "2", "--placebo")
    assert placebo.returncode == 0, placebo.stderr[-3000:]
    record = read_record(target)
    arms = confirmed_runs(target, record)
    assert sorted((r.finalist == record.placebo, r.seed) for r in arms) == [
        (False, 1), (False, 2), (True, 1), (True, 2)]
    assert all(r.outcomes is not None and r.outcomes.problems == runs[0].outcomes.problems
               for r in arms), "the placebo is confirmed on the same held-out problems"
    trained = {r.finalist == record.placebo: yaml.safe_load((r.run_dir / ".hydra" / "config.yaml")
                                                             .read_text())["reward"]["name"]
               for r in arms}
    assert trained == {False: "graded", True: "random"}
    text = placebo.stdout[placebo.stdout.index("## Confirmed"):]
    best = record.finalists[0].label
    assert f"Placebo: {best} on reward=random (placebo)" in text and f"- {best}: " in text
    gain = text[text.index("gain over the pre-RL evaluation"):]
    assert re.search(r"\): [+-]\d\.\d{3} \[", gain), gain


RECORD_EDITS = [
    # (what is done to confirm.json, what the one-line error names)
    (lambda d: d.__setitem__("placebo", "placebo"),
     "its placebo is 'placebo', not a mapping of rank, label and options"),
    (lambda d: d.__setitem__("placebo", [PLACEBO_OPTION]),
     "its placebo is ['placebo'], not a mapping of rank, label and options"),
    (lambda d: d["placebo"].__setitem__("options", ["top1"]),
     "a placebo arm is rank 1's config on option 'placebo' of a confirmation that trains again"),
    (lambda d: d["placebo"].__setitem__("rank", 2), "its placebo is {'rank': 2,"),
    (lambda d: d["placebo"].__setitem__("label", "learning_rate=0.0003 on reward=random (placebo)"),
     "labelled 'learning_rate=0.001 on reward=random (placebo)'"),
    (lambda d: d["finalists"][0].__setitem__("rank", "1"), "its finalists[0].rank is '1', not a whole number"),
    (lambda d: d["finalists"][1].__setitem__("rank", 1), "its finalists' ranks are [1, 1], not 1..2 in order"),
    (lambda d: d["finalists"][0].__setitem__("rank", math.nan), "its finalists[0].rank is nan, not a whole number"),
    (lambda d: d.__setitem__("seeds", ["2", "3"]), "its seeds[0] is '2', not a whole number"),
    (lambda d: d.__setitem__("seeds", [math.nan, 3]), "its seeds[0] is nan, not a whole number"),
    (lambda d: d.__setitem__("seeds", [2, 2]), "its seeds are [2, 2]: one twice"),
    (lambda d: d.__setitem__("retrain", "false"), "its retrain is 'false', not true or false"),
    (lambda d: d.__setitem__("metric", "accuracy"), "its metric is 'accuracy', not one of reward,"),
    (lambda d: d.__setitem__("group", "promoted/other"), "its group is 'promoted/other'"),
    (lambda d: d.pop("finalists"), "its finalists is missing"),
    (lambda d: (d.pop("placebo"), d.__setitem__("arguments", [f"+{GROUP}=top1,top2,placebo"])),
     "its arguments launch options ['placebo', 'top1', 'top2'] of promoted/confirm, its "
     "finalists and placebo name ['top1', 'top2']"),
]


@pytest.fixture
def placebo_confirmation(source: Path) -> Path:
    """A finished confirmation of the source's top 2 with a placebo arm."""
    return write_confirmation(source, {1: [[1, 1, 0, 0], [1, 0, 0, 0]],
                                       2: [[1, 1, 1, 0], [1, 1, 1, 1]]},
                              placebo=[[0, 0, 0, 0], [0, 0, 0, 0]])


def _edited(target: Path, edit) -> Path:
    path = target / "confirm.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("edit", "error"), RECORD_EDITS)
def test_an_edited_record_is_refused_in_one_line_naming_the_file_and_the_field(
        placebo_confirmation: Path, edit, error: str) -> None:
    path = _edited(placebo_confirmation, edit)
    with pytest.raises(ValueError) as refused:
        read_record(placebo_confirmation)
    message = str(refused.value)
    assert message.startswith(f"{path} is unreadable or not a confirmation's record (")
    assert error in message and "\n" not in message, message


def test_an_unreadable_record_is_said_by_the_command_and_the_report(
        source: Path, placebo_confirmation: Path, capsys: pytest.CaptureFixture) -> None:
    """The command that would resume it says so in one line and writes nothing; the sweep's
    report says it where the section would be (before: no section, silently)."""
    edit, error = RECORD_EDITS[0]
    path = _edited(placebo_confirmation, edit)
    before = path.read_text()
    message = _refusal(["--sweep", str(source), "--top-k", "2", "--seeds", "2", "--placebo"], capsys)
    assert message.startswith(f"error: {path} is unreadable") and error in message
    assert path.read_text() == before
    report = build_report(collect([source]), source)
    assert f"## Confirmed\n\n{message.removeprefix('error: ')}\n" in report


@pytest.mark.parametrize("edit", [lambda d: d.pop("placebo"), lambda d: d.__setitem__("placebo", None)])
def test_a_record_that_lost_its_placebo_arm_gives_no_figure_of_its_runs(source: Path, edit) -> None:
    """The placebo's runs are there, the record names no placebo: the section says the record
    does not describe its runs (never the finalists' figures with the placebo silently gone); a
    record without the placebo entry where none ran (written before it) reads as none."""
    target = write_confirmation(source, {1: [[1, 1, 0, 0], [1, 0, 0, 0]]},
                                placebo=[[0, 0, 0, 0], [0, 0, 0, 0]])
    path = target / "confirm.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    assert read_record(target).placebo is None
    conf, lines = report_confirmation(target)
    assert conf.figures == [] and conf.placebo is None
    assert lines[2] == (f"`{target}`: not the confirmation its confirm.json says: 2 of its runs ran "
                        "an option none of its finalists nor its placebo arm names (`2` ran "
                        "promoted/confirm=placebo; the record was edited after the launch?); it is "
                        "no confirmation of this sweep's pick.")
    shutil.rmtree(target)
    target = write_confirmation(source, {1: [[1, 1, 0, 0], [1, 0, 0, 0]]})
    data = json.loads(path.read_text())
    data.pop("placebo")
    path.write_text(json.dumps(data))
    conf, _ = report_confirmation(target)
    assert conf.placebo is None and conf.figures[0].confirmed.mean == pytest.approx(0.375)


def test_a_finalist_the_sweep_does_not_rank_gives_no_figure(source: Path) -> None:
    target = write_confirmation(source, {1: [[1, 1, 0, 0], [1, 0, 0, 0]]})
    path = target / "confirm.json"
    data = json.loads(path.read_text())
    data["finalists"][0]["label"] = "learning_rate=0.5"
    path.write_text(json.dumps(data))
    conf, lines = report_confirmation(target)
    assert conf.figures == [] and lines[2].startswith(
        f"`{target}`: not a confirmation of this sweep's pick: its finalist learning_rate=0.5 is "
        "no config of this sweep")


def test_a_placebo_of_a_best_config_already_on_the_random_reward_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A sweep whose every run trained on reward=random: its best config is a placebo itself;
    --placebo is refused in one line writing nothing, a confirmation without it is planned."""
    validation = write_validation(tmp_path / "validation.jsonl", QUESTIONS)
    sweep = write_source(tmp_path / "out" / "source" / "random", validation, reward="random")
    before = sorted(tmp_path.rglob("*"))
    message = _refusal(["--sweep", str(sweep), "--top-k", "2", "--seeds", "2", "--placebo"], capsys)
    assert message == (f"error: --placebo: {sweep}'s best config learning_rate=0.001 trains on "
                       "reward=random already: it is a placebo itself, with nothing to stand "
                       "above; drop --placebo")
    assert sorted(tmp_path.rglob("*")) == before
    assert plan_confirmation(sweep, 2, 2, True, []).record.placebo is None
    # on the default reward (no reward section written) the same sweep has its placebo arm
    graded = write_source(tmp_path / "out" / "source" / "graded", validation)
    assert plan_confirmation(graded, 1, 2, True, [], placebo=True).record.placebo == PLACEBO_ARM


def test_the_same_confirmation_by_another_path_resumes_and_any_other_is_refused(
        source: Path, capsys: pytest.CaptureFixture) -> None:
    """A confirmation of the top 2 with 2 fresh seeds in place: the same command, also with the
    sweep spelt through a link or a relative path, plans the same record into the same
    directory (it resumes); a changed --top-k, --seeds, --placebo or confirm setting is another
    confirmation, refused in one line, the record untouched; --no-retrain is its own directory."""
    target = write_confirmation(source, {1: [[1, 1, 0, 0], [1, 0, 0, 0]],
                                         2: [[1, 1, 1, 0], [1, 1, 1, 1]]})
    before = (target / "confirm.json").read_text()
    old = read_record(target)
    link = source.parent / "latest"
    link.symlink_to(source.name)
    relative = Path(os.path.relpath(source))
    cfg = OmegaConf.load(source / "0" / ".hydra" / "config.yaml")
    for spelt in (source, link, relative):
        plan = plan_confirmation(spelt, 2, 2, True, [])
        assert plan.target == target and plan.record.source == source.resolve()
        assert same_confirmation(old, plan.record, cfg) is None
    # its settings given at the values they resolve to (the evaluation's: 4 problems, 1 response)
    # are the same confirmation, reached by another command line
    for given in (["confirm.n_examples=4"], ["confirm.samples_per_problem=1"],
                  ["confirm.n_examples=4", "confirm.samples_per_problem=1"]):
        plan = plan_confirmation(source, 2, 2, True, given)
        assert same_confirmation(old, plan.record, cfg) is None, given
    assert not (source.parent / "latest-confirm").exists()
    for number, (args, why) in enumerate(((["--top-k", "1", "--seeds", "2"], "its finalists were learning_rate=0.001; "
                       "learning_rate=0.0003, this command's learning_rate=0.001"),
                      (["--top-k", "3", "--seeds", "2"], "its finalists were learning_rate=0.001; "
                       "learning_rate=0.0003, this command's learning_rate=0.001; "
                       "learning_rate=0.0003; learning_rate=0.01"),
                      (["--top-k", "2", "--seeds", "3"], "its seeds were (2, 3), this command's (2, 3, 4)"),
                      (["--top-k", "2", "--seeds", "2", "--placebo"],
                       "its placebo arm were False, this command's True"),
                      (["--top-k", "2", "--seeds", "2", "confirm.n_examples=2"],
                       "its settings were confirm.n_examples=4 confirm.samples_per_problem=1, "
                       "this command's confirm.n_examples=2 confirm.samples_per_problem=1"))):
        for spelt in (source, link) if number == 0 else (link,):
            message = _refusal(["--sweep", str(spelt), *args], capsys)
            assert message == (f"error: {target} holds another confirmation of {spelt} ({why}); "
                               "run the command it was made with, or move it away to confirm anew")
    assert (target / "confirm.json").read_text() == before
    assert confirmation_dir(link, False) == confirmation_dir(source, False) != target
    # a copy of the sweep with its confirmation beside it: the record names the first sweep
    copy = source.parent / "copy"
    shutil.copytree(source, copy)
    shutil.copytree(target, confirmation_dir(copy, True))
    assert _refusal(["--sweep", str(copy), "--top-k", "2", "--seeds", "2"], capsys) == (
        f"error: {copy}-confirm holds another confirmation of {copy} (its sweep was "
        f"{source.resolve()}, this command's {copy.resolve()}); run the command it was made with, "
        "or move it away to confirm anew")


def test_a_confirmation_of_another_pick_or_another_sweep_gives_no_figure(source: Path) -> None:
    """The record's finalists no longer the sweep's top 2 in order (its ranking changed since,
    or the record was edited), or a record naming another sweep than the one it lies beside:
    the section says why, instead of confirmed figures under the wrong ranks."""
    target = write_confirmation(source, {1: [[1, 1, 0, 0], [1, 0, 0, 0]],
                                         2: [[1, 1, 1, 0], [1, 1, 1, 1]]})
    path = target / "confirm.json"
    data = json.loads(path.read_text())
    first, second = data["finalists"]
    first["label"], second["label"] = second["label"], first["label"]
    path.write_text(json.dumps(data))
    conf, lines = report_confirmation(target)
    assert conf.figures == [] and lines[2] == (
        f"`{target}`: not a confirmation of this sweep's pick: its rank 1 is learning_rate=0.0003, "
        "this sweep's ranking puts learning_rate=0.001 there now (its runs changed since, or the "
        "record was edited: move this confirmation away and confirm the sweep again); it is no "
        "confirmation of this sweep's pick.")
    other = write_source(source.parent / "other", source.parent.parent.parent / "validation.jsonl")
    first["label"], second["label"] = second["label"], first["label"]
    data["source"] = str(other)
    path.write_text(json.dumps(data))
    conf, lines = report_confirmation(target)
    assert conf.figures == [] and lines[2].startswith(
        f"`{target}`: not where a confirmation of {other} lies ({other}-confirm): its "
        "confirm.json was copied or edited")
    assert "## Confirmed" not in build_report(collect([other]), other)


@pytest.mark.slow
@pytest.mark.slurm
def test_a_tiny_slurm_sweep_confirmed_on_slurm_attached_and_detached(tmp_path: Path,
                                                                    tiny_model_dir: Path) -> None:
    """Issue 60: the confirmation trains through the sweep's launcher. A 1-step toy sweep on
    the real local SLURM cluster (cluster=slurm_cpu), then `confirm --top-k 1 --seeds 1
    cluster=slurm_cpu`: its run is a SLURM job, completed with a seed no run of the sweep used,
    on held-out pairs none of the sweep's outcome files names, and the Confirmed section is
    written; then `confirm --top-k 1 --no-retrain cluster=slurm_cpu cluster.detach=true` returns
    at once, its detached driver runs it to its end, and the same command again writes its
    section."""
    from test_detach import RETURNS_WITHIN_S, wait_gone
    from test_slurm_cluster import require_cluster
    from test_slurm_sweep import sweep_command

    from grpo.run.driver import read_driver

    require_cluster()
    name = f"grpo-confirm-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "out"
    short = ("n_grpo_steps=1", "eval.eval_every=1", "data.holdout_size=8",
             "logging.wandb_mode=disabled")
    started = time.monotonic()
    swept = subprocess.run([*sweep_command(out, tiny_model_dir, "experiment_name=tiny",
                                           "learning_rate=1e-3", *short),
                            f"hydra.launcher.name={name}"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert swept.returncode == 0, swept.stdout[-3000:] + swept.stderr[-3000:]
    (sweep,) = (out / "tiny").iterdir()
    took = {"sweep": time.monotonic() - started}
    where = ["cluster=slurm_cpu", "hydra.launcher.array_parallelism=2",
             f"hydra.launcher.name={name}", "logging.wandb_mode=disabled",
             f"paths.output_root={out}"]

    def confirm(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "analysis", "confirm", "--sweep", str(sweep),
                               *args, *where], cwd=ROOT, capture_output=True, text=True,
                              timeout=600)

    try:
        done = confirm("--top-k", "1", "--seeds", "1")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        target = confirmation_dir(sweep, True)
        took["attached confirmation"] = time.monotonic() - started - sum(took.values())
        (run,) = confirmed_runs(target, read_record(target))
        assert (run.seed, run.status) == (1, "completed"), "the sweep's runs had seed 0"
        jobs = json.loads((target / "jobs.json").read_text())["jobs"]
        assert len(jobs) == 1 and re.fullmatch(r"\d+(_0)?", jobs[0]["job_id"]), jobs
        assert json.loads((target / "jobs.json").read_text())["launcher"] == "slurm"
        held = set(run.outcomes.problems)
        evaluated = {p for f in sweep.glob("*/eval_outcomes/*.json")
                     for p in json.loads(f.read_text())["problems"]}
        assert len(held) == 8 and len(evaluated) == 17 and not held & evaluated
        section = (target / "confirmed.md").read_text()
        assert section in done.stdout and "## Confirmed" in section
        assert "with 1 fresh seed (1: none of this sweep's runs used it)" in section, section
        # detached: the command returns at once; the driver (a SLURM job) runs it to its end
        begun = time.monotonic()
        detached = confirm("--top-k", "1", "--no-retrain", "cluster.detach=true")
        assert detached.returncode == 0, detached.stdout[-3000:] + detached.stderr[-3000:]
        assert time.monotonic() - begun < RETURNS_WITHIN_S
        own = confirmation_dir(sweep, False)
        assert "Detached: the driver is SLURM job" in detached.stdout, detached.stdout[-3000:]
        assert "the confirmation has not finished" in detached.stdout
        wait_gone(own, 300)
        took["detached, to its driver's end"] = time.monotonic() - started - sum(took.values())
        again = confirm("--top-k", "1", "--no-retrain", "cluster.detach=true")
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert "no driver was started" in again.stdout
        (mine,) = confirmed_runs(own, read_record(own))
        assert (mine.seed, mine.status) == (0, "completed")
        assert set(mine.outcomes.problems) == held, "the same held-out pairs"
        assert (own / "confirmed.md").read_text() in again.stdout
        print("\nSLURM confirmation: " + ", ".join(f"{k} {v:.0f} s" for k, v in took.items())
              + f"; {time.monotonic() - started:.0f} s in all")
    finally:
        subprocess.run(["scancel", "-n", name], check=False)
        driver = read_driver(confirmation_dir(sweep, False))
        if driver is not None and driver.job_id:
            subprocess.run(["scancel", str(driver.job_id)], check=False)


@pytest.mark.parametrize("holder", ["confirm_lock", "sweep_lock"])
def test_a_confirmation_of_a_sweep_being_confirmed_or_launched_is_refused_in_one_line(
        source: Path, tmp_path: Path, capsys: pytest.CaptureFixture, holder: str) -> None:
    """Two confirmations of one sweep at once: the first holds the sweep's lock while it
    launches and waits (`grpo.run.lock.confirm_lock`, the file `sweep_lock` takes, so a
    relaunch of the sweep holds it too); the second is refused in one line naming the holder,
    and writes nothing."""
    from grpo.run import lock

    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.name != ".lock")
    with getattr(lock, holder)(source):
        message = _refusal(["--sweep", str(source), "--top-k", "1", "--seeds", "1"], capsys)
    assert message.startswith(f"error: {source} is being launched or confirmed by another "
                              f"process (pid {os.getpid()} on "), message
    assert message.endswith("; wait for it to end (make watch), or stop it first")
    assert capsys.readouterr().out == "", "the refusal is its only line"
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.name != ".lock")
    assert after == before and not confirmation_dir(source, True).exists()
    # once it is released, the same command's dry run goes on (nothing to hold for a dry run)
    assert plan_confirmation(source, 1, 1, True, []).target == confirmation_dir(source, True)
