"""Where a sweep's seed variance comes from, read from run directories on disk: its seeds, the
additive model of a one-seed grid, a sweep it borrows from (and when it may not), or none, in
which case no config-level verdict is given; and how the report, comparisons.csv and
main_effects.csv say so. Also the data checks around it: outcome files that disagree with the
logged reward, missing ones, configs evaluated on other problems, jobs that never started."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sweep_factory import write_matching_outcomes

from analysis.__main__ import main
from analysis.decisions.ranking import rank
from analysis.names.config_names import BORROW_KEY
from analysis.names.formatting import difference_interval, fmt_difference_interval
from analysis.outputs.plots import choose_layout, plot_interaction
from analysis.outputs.report import build_report, write_report
from analysis.readers.collect import collect
from analysis.readers.jobs import Job, write_jobs
from analysis.readers.synthetic import write_multirun, write_run
from analysis.stats.variance import upper_bound_factor
from grpo.run.outcomes import outcomes_path

EVAL_STEPS = (0, 10, 20, 30, 40, 50)


def write_sweep(sweep: Path, grid: Mapping[str, Sequence[Any]], seeds: Sequence[int] = (0,),
                quality: Any = None, noise: float = 0.02, rng: int = 0,
                extra: Mapping[str, Any] | None = None, problems: Any = None) -> Path:
    """A completed sweep over ``grid`` x ``seeds``: each run's evaluations at
    :data:`EVAL_STEPS` (0.3 at step 0, then ``quality(config)`` plus a run's offset of sd
    ``noise``), rounded to 1/n, with matching per-problem outcomes of n problems with digest d
    (``problems(config)``: (n, d); default 100 problems, ``"ab" * 32``); ``extra`` config values
    for every run (CPU runs: 1 CPU, no GPU; 36 s a step)."""
    quality = quality or (lambda config: 0.5)
    problems = problems or (lambda config: (100, "ab" * 32))
    generator = np.random.default_rng(rng)
    task = [f"{k}={','.join(map(str, v))}" for k, v in grid.items()]
    write_multirun(sweep, task + ([f"seed={','.join(map(str, seeds))}"] if len(seeds) > 1 else []))
    job = 0
    for values in itertools.product(*grid.values()):
        config = dict(zip(grid, values, strict=True))
        n_problems, digest = problems(config)
        for seed in seeds:
            offset = generator.normal(0.0, noise)
            rows = [{"step": s, "time/elapsed_s": 36.0 * s,
                     "eval/reward": round(0.3 if s == 0 else min(max(quality(config) + offset
                                          + generator.normal(0, 0.005), 0), 1) * n_problems)
                     / n_problems} for s in EVAL_STEPS]
            overrides = {**config, **({"seed": seed} if len(seeds) > 1 else {})}
            base = {"cluster": {"gpus_per_job": 0, "cpus_per_job": 1}, "seed": seed,
                    "n_grpo_steps": EVAL_STEPS[-1]}
            write_run(sweep / str(job), overrides, rows,
                      {"status": "completed", "last_step": EVAL_STEPS[-1]},
                      base=_merged(base, extra or {}))
            write_matching_outcomes(sweep / str(job), n_problems, digest)
            job += 1
    return sweep


def _merged(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    from analysis.readers.synthetic import BASE_CONFIG, config_with

    return config_with({**_dotted(base), **extra}, BASE_CONFIG)


def _dotted(node: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, Mapping):
            out |= _dotted(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


GRID = {"off_policy.epochs": (1, 2, 4), "train_batch_size": (64, 128, 256)}


def test_a_one_seed_grid_measures_its_seed_variance_with_the_additive_model(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path / "grid", GRID, noise=0.01,
                        quality=lambda c: 0.45 + 0.06 * (c["off_policy.epochs"] == 2))
    ranking = rank(collect([sweep]))
    seeds = ranking.uncertainty.seeds
    values = ranking.compared.pivot_table(index="off_policy.epochs", columns="train_batch_size",
                                          values="value").to_numpy()
    grand = values.mean()
    residual = (values - values.mean(axis=1, keepdims=True) - values.mean(axis=0, keepdims=True)
                + grand)
    assert (seeds.source, seeds.df) == ("additive", 4.0)
    assert seeds.variance == pytest.approx(float((residual ** 2).sum() / 4))
    assert "Tukey's one-degree-of-freedom test" in seeds.notes[0]
    assert ranking.uncertainty.decided and ranking.effects is not None
    write_report(collect([sweep]), sweep, ranking=ranking)
    report = (sweep / "report.md").read_text()
    assert "residual of the additive model of the 3 x 3 one-seed grid" in report
    assert "## Main effects" in report and "| off_policy.epochs | 2 |" in report
    csv = pd.read_csv(sweep / "comparisons.csv")
    assert set(csv["variance_source"]) == {"additive"} and set(csv["variance_df"]) == {4.0}
    effects = pd.read_csv(sweep / "main_effects.csv")
    assert list(effects.loc[effects["level"].isna(), "term"]) == ["off_policy.epochs",
                                                                 "train_batch_size"]
    # the simulated epochs effect (6 points at epochs 2, over a 1-point seed sd) is found
    epochs = effects[(effects["term"] == "off_policy.epochs") & effects["level"].isna()]
    assert float(epochs["p_value"].iloc[0]) < 0.05
    assert "at most 5% of sweeps call a difference that is not there" in report
    # the interaction figure: each cell's mean with t(4) x the seed sd (one run a cell), in 0-1
    figure = plot_interaction(collect([sweep]), sweep / "figures", ranking,
                              choose_layout(collect([sweep])))
    cells = figure.cells
    assert figure.keys == ("off_policy.epochs", "train_batch_size") and len(cells) == 9
    assert list(cells["off_policy.epochs"][:3]) == [1, 2, 4] and set(cells["n"]) == {1}
    half = stats.t.ppf(0.975, 4) * math.sqrt(seeds.variance)
    assert np.allclose(cells["hi"], np.minimum(cells["mean"] + half, 1.0))
    assert np.allclose(cells["lo"], np.maximum(cells["mean"] - half, 0.0))
    assert (sweep / "figures" / "interaction.png").is_file()


def test_a_one_dimensional_one_seed_sweep_gives_no_verdict_and_prices_the_seeds(
        tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path / "lr", {"learning_rate": (1e-5, 3e-5, 1e-4, 3e-4)},
                        quality=lambda c: 0.4 + 100 * c["learning_rate"])
    ranking = rank(collect([sweep]))
    u = ranking.uncertainty
    assert not u.decided and u.seeds.source == "none"
    assert {c.verdict for c in u.comparisons} == {"undecided"}
    assert set(ranking.near_ties) == set(ranking.table.index[1:])  # any could be the best
    assert math.isnan(u.estimates[ranking.best].lo)
    # one run is 50 steps of 36 s: 0.5 CPU-hours; a second seed for the best three: 1.5
    assert ranking.advice == (
        f"a second seed for the best 3 configs ({'; '.join(ranking.table.index[:3])}) would "
        "measure the seed variance (3 df): 3 more runs, about 1.50 CPU-hours at what their runs "
        "cost here")
    report = build_report(collect([sweep]), sweep, ranking=ranking)
    assert "No config-level verdict" in report and "**undecided**" in report
    assert "at most 5% of sweeps" not in report  # the sentence says what the method does
    assert "No ANOVA: no seed variance to test against." in report
    assert "[no interval]" in report


def test_a_one_seed_sweep_borrows_an_earlier_multi_seed_sweeps_variance(tmp_path: Path) -> None:
    lr = {"learning_rate": (1e-5, 3e-5, 1e-4)}
    earlier = write_sweep(tmp_path / "lr_sweep", lr, seeds=(0, 1, 2), rng=1)
    # settings the source ran (two of its learning rates): its variance as it is
    later = write_sweep(tmp_path / "again", {"learning_rate": (1e-5, 1e-4)}, rng=2,
                        extra={BORROW_KEY: str(earlier)})
    own = rank(collect([earlier])).uncertainty.seeds
    got = rank(collect([later]))
    seeds = got.uncertainty.seeds
    assert (seeds.source, seeds.variance, seeds.df) == ("borrowed", own.variance, own.df) == (
        "borrowed", pytest.approx(own.variance), 6)
    assert str(earlier) in seeds.text and BORROW_KEY in seeds.text and "inflated" not in seeds.text
    assert got.uncertainty.decided and got.borrowed is not None
    report = build_report(collect([later]), later, ranking=got)
    assert f"the seeds of sweep {earlier} at step 50" in report
    # another loss (a setting that changes the seed variance, which the source never ran): the
    # variance inflated to its upper 95% bound, 6 / chi2_0.05(6) = 3.67 times, saying why
    baselines = write_sweep(tmp_path / "baselines", {"loss.name": ("no_baseline", "grpo_clip")},
                            rng=2, extra={BORROW_KEY: str(earlier)})
    seeds = rank(collect([baselines])).uncertainty.seeds
    factor = 6 / stats.chi2.ppf(0.05, 6)
    assert (seeds.source, seeds.df) == ("borrowed", 6)
    assert seeds.variance == pytest.approx(own.variance * factor) and factor == pytest.approx(3.67, abs=0.01)
    assert (f"inflated x3.67 to its upper 95% confidence bound ({own.variance:.3g} measured): this "
            "sweep runs settings that change the seed variance and that sweep did not "
            "(loss.name=no_baseline, normalization.name=mean, std_norm.enabled=True, "
            "std_norm.scope=group, learning_rate=1e-05, off_policy.epochs=1)") in seeds.text
    # the command line names it too, for a sweep that recorded nothing
    plain = write_sweep(tmp_path / "plain", {"learning_rate": (1e-5, 3e-5)}, rng=3)
    assert rank(collect([plain])).uncertainty.seeds.source == "none"
    assert rank(collect([plain]), borrow=earlier).uncertainty.seeds.source == "borrowed"
    main(["plots", "--sweep", str(plain), "--seed-variance-from", str(earlier)])
    assert "the seeds of sweep" in (plain / "report.md").read_text()


def test_a_check_seed_sweep_read_with_its_stage_tests_the_borrowed_variance(tmp_path: Path) -> None:
    """A one-seed stage of another loss borrows the learning-rate study's variance (inflated);
    a second sweep runs a second seed of one of its configs, and the two are read together (as
    `make plots SWEEP="stage check"` reads them): the check seed tests the borrowed variance. Seed
    noise like the source's: the borrowed one stays, the report saying the ratio and its test;
    ten times the source's seed sd: the check seeds' own variance (1 df) replaces it."""
    earlier = write_sweep(tmp_path / "lr_sweep", {"learning_rate": (1e-5, 3e-5, 1e-4)},
                          seeds=(0, 1, 2), rng=1)
    lent = rank(collect([earlier])).uncertainty.seeds
    losses = {"loss.name": ("no_baseline", "grpo_clip")}
    for noise, source in ((0.02, "borrowed"), (0.2, "seeds")):
        stage = write_sweep(tmp_path / f"stage{noise}", losses, rng=2, noise=noise,
                            extra={BORROW_KEY: str(earlier)})
        check = write_sweep(tmp_path / f"check{noise}", {"loss.name": ("grpo_clip",)}, seeds=(1,),
                            rng=3, noise=noise, extra={BORROW_KEY: str(earlier)})
        ranking = rank(collect([stage, check]))
        seeds = ranking.uncertainty.seeds
        assert ranking.table.loc["loss.name=grpo_clip", "n_runs"] == 2
        assert seeds.source == source, seeds.notes
        assert f"F on (1, {lent.df:g}) df, one-sided p" in seeds.notes[-1]
        report = build_report(collect([stage, check]), stage, ranking=ranking)
        assert seeds.notes[-1] in report
        if source == "borrowed":
            assert seeds.variance == pytest.approx(lent.variance * upper_bound_factor(lent.df))
            assert "do not show the borrowed variance too small" in seeds.notes[-1]
        else:
            assert seeds.df == 1 and "their own variance is used" in seeds.notes[-1]


def test_a_variance_is_not_borrowed_across_designs_and_says_why(tmp_path: Path) -> None:
    earlier = write_sweep(tmp_path / "lr_sweep", {"learning_rate": (1e-5, 3e-5)}, seeds=(0, 1))
    other_problems = write_sweep(tmp_path / "a", {"loss": ("x", "y")},
                                 problems=lambda config: (100, "cd" * 32),
                                 extra={BORROW_KEY: str(earlier)})
    seeds = rank(collect([other_problems])).uncertainty.seeds
    assert seeds.source == "none" and "validation problems (outcome digests)" in seeds.text
    other_model = write_sweep(tmp_path / "b", {"loss": ("x", "y")},
                              extra={BORROW_KEY: str(earlier), "model.name": "tiny"})
    assert "its model" in rank(collect([other_model])).uncertainty.seeds.text
    one_seed = write_sweep(tmp_path / "c", {"loss": ("x", "y")}, extra={BORROW_KEY: str(tmp_path / "a")})
    assert "no config with two or more seeds" in rank(collect([one_seed])).uncertainty.seeds.text
    missing = write_sweep(tmp_path / "d", {"loss": ("x", "y")}, extra={BORROW_KEY: str(tmp_path / "no")})
    assert "cannot borrow from" in rank(collect([missing])).uncertainty.seeds.text


def test_a_named_sweep_with_a_crafted_multirun_yaml_is_read_from_its_runs(tmp_path: Path) -> None:
    """The sweep the runs name to borrow from is read with them; where its multirun.yaml is not
    shaped as Hydra writes it (``hydra.sweeper.params`` a list), its swept keys are read from its
    runs' overrides and that is said in its collection's notes: the borrow is as from the intact
    sweep, and collecting the runs goes on."""
    intact = write_sweep(tmp_path / "intact", {"learning_rate": (1e-5, 3e-5)}, seeds=(0, 1))
    broken = write_sweep(tmp_path / "broken", {"learning_rate": (1e-5, 3e-5)}, seeds=(0, 1))
    (broken / "multirun.yaml").write_text("hydra:\n  sweeper:\n    params: [1, 2]\n")
    one_seed = write_sweep(tmp_path / "one", {"learning_rate": (1e-5, 3e-5)},
                           extra={BORROW_KEY: str(broken)})
    collection = collect([one_seed])
    assert len(collection.runs) == 2
    (note,) = collection.borrowed.collection.notes
    assert "broken/multirun.yaml: hydra.sweeper.params is not a mapping" in note
    seeds = rank(collection).uncertainty.seeds
    as_intact = rank(collection, borrow=intact).uncertainty.seeds
    assert seeds.source == "borrowed" and (seeds.variance, seeds.df) == (as_intact.variance, 2)
    main(["collect", "--sweep", str(one_seed)])
    assert (one_seed / "collected.parquet").exists() or (one_seed / "collected.csv").exists()


def test_a_one_seed_grid_pools_its_residual_with_a_borrowed_variance(tmp_path: Path) -> None:
    earlier = write_sweep(tmp_path / "lr_sweep", {"learning_rate": (1e-5, 3e-5, 1e-4)},
                          seeds=(0, 1, 2), rng=4)
    grid = write_sweep(tmp_path / "grid", GRID, rng=5, extra={BORROW_KEY: str(earlier)})
    seeds = rank(collect([grid])).uncertainty.seeds
    additive = rank(collect([grid]), borrow=False).uncertainty.seeds
    borrowed = rank(collect([earlier])).uncertainty.seeds
    assert additive.source == "additive" and (additive.df, borrowed.df) == (4, 6)
    # the grid ran off-policy epochs 2 and 4, which the source did not: inflated first; then an
    # F test on (4, 6) df cannot show the two agree (it sees a 2x difference 9% of the time), so
    # the grid's own residual is used, not a pool
    lent = borrowed.variance * upper_bound_factor(borrowed.df)
    assert (seeds.source, seeds.variance, seeds.df) == ("additive", additive.variance, 4)
    assert (f"and the borrowed variance ({borrowed.variance:.3g} as measured, {lent:.3g} as lent) "
            "are not shown to agree") in seeds.notes[-1]
    assert "with power 9% only" in seeds.notes[-1]


def test_outcomes_that_disagree_with_the_logged_reward_or_are_missing_are_named(
        tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path / "s", {"learning_rate": (1e-5, 3e-5)}, seeds=(0, 1))
    crafted = outcomes_path(sweep / "0", 50)
    data = json.loads(crafted.read_text())
    data["reward"] = [1.0] * len(data["reward"])  # valid-looking, but not what was logged
    crafted.write_text(json.dumps(data))
    outcomes_path(sweep / "1", 40).unlink()
    outcomes_path(sweep / "2", 30).write_text("{")
    ranking = rank(collect([sweep]))
    run = f"{sweep.parent.name}/s"
    assert ranking.data_problems == [
        f"`{run}/0`: eval_outcomes/step_000050.json's mean reward 1.0000 is not the logged "
        f"eval/reward {_logged(sweep / '0', 50):.4f} of "
        "step 50: its outcomes are not used",
        f"`{run}/1`: eval_outcomes/step_000040.json is missing",
        f"`{run}/2`: eval_outcomes/step_000030.json: the file is not readable JSON (Expecting "
        "property name enclosed in double quotes: line 1 column 2 (char 1)): its outcomes are not "
        "used (the trainer writes none such); train the run again to compare it problem by problem"]
    section = build_report(collect([sweep]), sweep).split("## Runs with missing")[1].split("##")[0]
    assert all(f"- {line}" in section for line in ranking.data_problems)
    # the verdicts rest on the seeds, not on these files: still decided
    assert ranking.uncertainty.decided


def _logged(run: Path, step: int) -> float:
    return next(json.loads(line)["eval/reward"] for line in
                (run / "metrics.jsonl").read_text().splitlines() if json.loads(line)["step"] == step)


def test_configs_evaluated_on_other_problems_get_no_verdict(tmp_path: Path) -> None:
    """eval.n_examples=25,20 with two seeds: the seeds are a variance, but the configs' values
    are means over other problems, so the difference is not only the configs'."""
    sweep = write_sweep(tmp_path / "s", {"eval.n_examples": (25, 20)}, seeds=(0, 1),
                        problems=lambda c: (c["eval.n_examples"], "ab" * 32 if c["eval.n_examples"]
                                            == 25 else "cd" * 32))
    for job in (2, 3):  # the runs' configs say which problems they evaluated
        config = sweep / str(job) / ".hydra" / "config.yaml"
        config.write_text(config.read_text() + "eval:\n  n_examples: 20\n")
    ranking = rank(collect([sweep]))
    (c,) = ranking.uncertainty.against_best()
    assert ranking.uncertainty.seeds.source == "seeds"
    assert c.verdict == "no interval" and "other validation problems" in c.why
    assert c.config in ranking.near_ties


def test_configs_whose_outcome_files_show_the_same_problems_are_compared(tmp_path: Path) -> None:
    """eval.n_examples=25,1024 on a task of 25 validation problems (the toy task's): both configs
    evaluated the same 25 problems, and their outcome files say so (one digest). They were "not
    compared ... (evaluated on other validation problems (problem sets or outcome digests
    differ))" because their config keys differ: the files decide where both configs have them.
    Where one config's runs kept no outcome files, the keys decide, and the reason names them."""
    sweep = write_sweep(tmp_path / "s", {"eval.n_examples": (25, 1024)}, seeds=(0, 1, 2),
                        quality=lambda c: 0.5 if c["eval.n_examples"] == 25 else 0.3,
                        problems=lambda c: (25, "ab" * 32))
    (c,) = rank(collect([sweep])).uncertainty.against_best()
    assert (c.config, c.reference) == ("eval.n_examples=1024", "eval.n_examples=25")
    assert c.verdict == "worse" and c.why == ""
    for job in (3, 4, 5):  # eval.n_examples=1024's runs
        for path in (sweep / str(job) / "eval_outcomes").iterdir():
            path.unlink()
    (c,) = rank(collect([sweep])).uncertainty.against_best()
    assert c.verdict == "no interval" and c.why == (
        "evaluated on other validation problems: their configs name other problems "
        "(eval.n_examples=1024 against eval.n_examples=25) and no outcome files of both say "
        "which they evaluated")


def test_jobs_that_never_started_and_runs_without_an_evaluation_are_counted_right(
        tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path / "s", {"learning_rate": (1e-5, 3e-5)}, seeds=(0, 1, 2),
                        quality=lambda c: 0.6 if c["learning_rate"] == 1e-5 else 0.4)
    for job in (1, 2):  # two seeds of the first config failed before their first evaluation
        (sweep / str(job) / "metrics.jsonl").unlink()
        (sweep / str(job) / "status.json").write_text(json.dumps(
            {"status": "failed", "reason": "OOM", "last_step": None}))
        for path in (sweep / str(job) / "eval_outcomes").iterdir():
            path.unlink()
    overrides = [("learning_rate=1e-05", f"seed={s}") for s in (0, 1, 2)]
    overrides += [("learning_rate=3e-05", f"seed={s}") for s in (0, 1, 2)]
    overrides += [("learning_rate=1e-04", f"seed={s}") for s in (0, 1, 2)]
    write_jobs(sweep, "local", [Job(i, job) for i, job in enumerate(overrides)])
    (sweep / "8").write_text("not a run")  # a file where job 8's run directory would be
    collection = collect([sweep])
    ranking = rank(collection)
    assert ranking.best == "learning_rate=1e-05"
    assert ranking.describe_best().endswith("(mean over 1 run)")  # not 3: two never evaluated
    report = build_report(collection, sweep, ranking=ranking)
    assert "6 run(s) (4 with metrics), 2 config(s): 4 completed, 2 failed; 3 more job(s) gave no " \
           "run: never started or unreadable (listed below)." in report
    assert "- `s/6` (learning_rate=1e-04 seed=0): no run directory (the job never started)" in report
    assert "- `s/7` (learning_rate=1e-04 seed=1): no run directory (the job never started)" in report
    assert ("- `s/8` (learning_rate=1e-04 seed=2): unreadable: a file stands where its run "
            "directory should be") in report


def test_an_interval_wider_than_rewards_can_differ_is_clipped_and_said_everywhere(
        tmp_path: Path) -> None:
    """Rewards lie in [0, 1], so a difference of two lies in [-1, 1]: 3 configs x 2 seeds of seed
    sd 0.3 give simultaneous intervals of half-width well past 1 ("Δ -0.030 [-1.765, +1.705]"),
    which the report, the summary (the near-ties' text) and comparisons.csv print clipped to
    [-1, 1] and say "no information" (one formatter, analysis.names.formatting)."""
    sweep = write_sweep(tmp_path / "wide", {"learning_rate": (1e-4, 3e-4, 1e-3)}, seeds=(0, 1),
                        noise=0.3, rng=5)
    ranking = rank(collect([sweep]))
    raw = [c for c in ranking.uncertainty.comparisons if c.lo < -1 and c.hi > 1]
    assert raw, "the design must give an interval past [-1, 1] on both sides"
    write_report(collect([sweep]), sweep, ranking=ranking)
    report = (sweep / "report.md").read_text()
    csv = pd.read_csv(sweep / "comparisons.csv")
    assert csv["ci_low"].min() >= -1 and csv["ci_high"].max() <= 1
    for c in raw:
        row = csv[csv["config"] == c.config].iloc[0]
        assert (row["ci_low"], row["ci_high"]) == (-1, 1)
        assert row["why"] == "no information: wider than two rewards can differ"
        assert f"{c.lo:+.3f}" not in report and f"{c.hi:+.3f}" not in report
    assert "[-1.000, +1.000] (no information: wider than two rewards can differ)" in report
    assert ranking.near_ties  # the summary's and promote's lines
    for text in ranking.near_ties.values():
        assert "Δ " in text and "[-1.000, +1.000] (no information: wider than two rewards can " \
            "differ) (simultaneous 95%" in text
    # one end past: clipped and said; within: as it was; missing: a dash
    assert difference_interval(-1.2, 0.3) == (-1.0, 0.3, "clipped at -1 (rewards differ by at most 1)")
    assert fmt_difference_interval(-0.5, 1.7) == "[-0.500, +1.000] (clipped at +1 (rewards differ by at most 1))"
    assert fmt_difference_interval(-0.052, -0.01) == "[-0.052, -0.010]"
    assert fmt_difference_interval(math.nan, math.nan) == "–"
