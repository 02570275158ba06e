"""The statistics of analysis.uncertainty against hand-computed numbers (inputs chosen so that a
flipped sign, a changed bound, a wrong degree of freedom or a dropped clamp changes them), and
the per-problem outcomes read from real run directories, crafted ones included."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from analysis.aggregate import rank
from analysis.collect import collect
from analysis.report import write_report
from analysis.synthetic import write_multirun, write_run
from analysis.uncertainty import (
    ConfigData,
    SeedVariance,
    compare_sweep,
    estimate,
    holm,
    pair_test,
    resolve,
)
from grpo.run.outcomes import EvalOutcomes, outcomes_path, read_outcomes, write_outcomes

DIGEST = "ab" * 32


def test_holm_steps_down_keeps_order_and_clamps_at_one() -> None:
    # sorted 0.005 x 4, 0.01 x 3, 0.03 x 2, 0.04 x 1 -> 0.02, 0.03, 0.06, max(0.06, 0.04)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.7, 0.8]) == [1.0, 1.0]
    assert holm([]) == []


def test_seed_means_are_compared_with_the_seed_variance_pooled_over_configs() -> None:
    a = ConfigData("a", np.array([0.50, 0.54]))
    b = ConfigData("b", np.array([0.40, 0.42, 0.47]))
    c = ConfigData("c", np.array([0.30]))  # one seed: in the pool with 0 degrees of freedom
    pooled = SeedVariance.pooled([a, b, c])
    # (0.02^2 x 2 + 0.03^2 + 0.01^2 + 0.04^2) / (1 + 2 + 0)
    assert (pooled.variance, pooled.df) == (pytest.approx(0.0034 / 3), 3)
    test = pair_test(a, b, "seeds", pooled)
    se = math.sqrt(0.0034 / 3 * (1 / 2 + 1 / 3))  # 0.030732
    assert test.se == pytest.approx(se) and test.diff == pytest.approx(0.09)
    assert test.p_value == pytest.approx(2 * stats.t.sf(0.09 / se, 3))
    assert 0.06 < test.p_value < 0.065
    assert (test.lo, test.hi) == pytest.approx((0.09 - 3.18245 * se, 0.09 + 3.18245 * se), abs=1e-5)
    flipped = pair_test(b, a, "seeds", pooled)
    assert (flipped.diff, flipped.lo) == pytest.approx((-0.09, -test.hi))
    # c's value alone, with the pooled seed variance and no per-problem outcomes
    one = estimate(c, "seeds", pooled)
    half = 3.18245 * math.sqrt(0.0034 / 3)
    assert (one.lo, one.hi) == pytest.approx((0.30 - half, 0.30 + half), abs=1e-5)
    # a config near 0 is not given an interval below 0
    assert estimate(ConfigData("z", np.array([0.01])), "seeds", pooled).lo == 0.0


def binary_pair() -> tuple[ConfigData, ConfigData]:
    """40 problems, one 0/1 outcome each: a wins 10, loses 2, both right 14, both wrong 14."""
    a = np.array([1] * 10 + [0] * 2 + [1] * 14 + [0] * 14, float)
    b = np.array([0] * 10 + [1] * 2 + [1] * 14 + [0] * 14, float)
    return (ConfigData("a", np.array([a.mean()]), a[None], DIGEST),
            ConfigData("b", np.array([b.mean()]), b[None], DIGEST))


def test_one_seed_is_paired_over_problems_with_an_exact_mcnemar_p() -> None:
    a, b = binary_pair()
    none = SeedVariance.pooled([a, b])
    assert none.df == 0
    test = pair_test(a, b, "problems", none)
    assert test.diff == pytest.approx(0.2)
    # McNemar: 10 of 12 discordant problems: 2 x (C(12,10) + C(12,11) + C(12,12)) / 2^12
    assert test.p_value == pytest.approx(2 * (66 + 12 + 1) / 4096)
    # the interval: paired t over problems, sd of the differences sqrt(10.4 / 39)
    se = math.sqrt(10.4 / 39) / math.sqrt(40)
    assert test.se == pytest.approx(se)
    assert (test.lo, test.hi) == pytest.approx((0.2 - 2.02269 * se, 0.2 + 2.02269 * se), abs=1e-5)
    # other problems cannot be paired
    other = ConfigData("c", b.seed_values, b.problems, "cd" * 32)
    assert pair_test(a, other, "problems", none) is None
    # a's own value: 24 of 40 right, the exact (Clopper-Pearson) binomial interval
    own = estimate(a, "problems", none)
    assert (own.lo, own.hi) == pytest.approx(
        (stats.beta.ppf(0.025, 24, 17), stats.beta.ppf(0.975, 25, 16)))
    assert 0.43 < own.lo < 0.44 and 0.75 < own.hi < 0.76


def test_averaged_outcomes_use_the_t_interval_over_problems() -> None:
    values = np.array([0.2, 0.4, 0.6, 0.8, 1.0])  # means of 5 evaluations
    config = ConfigData("a", np.array([0.6]), values[None], DIGEST, n_evals=5)
    got = estimate(config, "problems", SeedVariance.pooled([config]))
    half = 2.77645 * np.std(values, ddof=1) / math.sqrt(5)
    assert (got.lo, got.hi) == pytest.approx((0.6 - half, min(0.6 + half, 1.0)), abs=1e-5)


def test_the_sweep_verdicts_are_adjusted_over_every_pair() -> None:
    """Three configs on the same 400 problems, each right on a problem with the problem's
    probability (shared difficulty) plus its own shift."""
    rng = np.random.default_rng(1)  # best 0.575, same 0.535, worse 0.365 of 400 problems
    truth = rng.uniform(0.1, 0.9, 400)
    outcomes = {label: (rng.uniform(size=400) < truth + shift).astype(float)
                for label, shift in (("best", 0.1), ("same", 0.1), ("worse", -0.15))}
    configs = [ConfigData(label, np.array([o.mean()]), o[None], DIGEST)
               for label, o in outcomes.items()]
    result = compare_sweep(configs, "best", {"best": "worse"}, step=50)
    assert result.method == "problems" and result.family == 3
    verdicts = {(c.config, c.reference, c.role): c.verdict for c in result.comparisons}
    assert verdicts == {("same", "best", "best"): "not distinguishable",
                        ("worse", "best", "best"): "worse",
                        ("best", "worse", "on-policy"): "better"}
    worse = result.against_best()[1]
    assert worse.diff < 0 and worse.hi < 0 and worse.p_adjusted >= worse.p_value
    # the runner-up cannot be told apart: what would resolve it is said, with the arithmetic
    assert result.resolution is not None and "times the data" in result.resolution


def test_the_data_a_difference_needs_is_worked_out() -> None:
    a, b = binary_pair()
    result = compare_sweep([a, b], "a", {}, step=10)
    runner_up = result.comparisons[0]
    text = resolve(runner_up, a, family=8, method="problems")
    # z for 0.05 / (2 x 8) is 2.734, for 80% power 0.842: target se 0.2 / 3.576 = 0.0559
    target = 0.2 / (stats.norm.ppf(1 - 0.05 / 16) + stats.norm.ppf(0.8))
    factor = (runner_up.se / target) ** 2
    assert f"= {target:.4f}" in text and f"= {factor:.1f} times the data" in text
    assert f"eval.samples_per_problem={math.ceil(factor)}" in text
    zero = resolve(runner_up.__class__(**{**runner_up.__dict__, "diff": 0.0}), a, 8, "problems")
    assert zero.startswith("the observed difference is 0")


def outcome_run(run_dir: Path, seed: int, rewards_by_step: dict[int, list[float]],
                lr: float) -> None:
    rows = [{"step": s, "time/elapsed_s": 10.0 * (s + 1), "eval/reward": float(np.mean(r)),
             "eval/n_examples": float(len(r))} for s, r in sorted(rewards_by_step.items())]
    write_run(run_dir, {"learning_rate": lr, "seed": seed}, rows,
              {"status": "completed", "last_step": max(rewards_by_step)})
    for step, rewards in rewards_by_step.items():
        write_outcomes(run_dir, EvalOutcomes(step, 1, DIGEST, tuple(rewards)))


def test_outcomes_of_run_directories_are_paired_and_crafted_ones_refused(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    write_multirun(sweep, ["learning_rate=0.001,0.0001"])
    good = [1.0] * 30 + [0.0] * 10
    weak = [1.0] * 12 + [0.0] * 28
    outcome_run(sweep / "0", 0, {0: weak, 1: good, 2: good}, 1e-3)
    outcome_run(sweep / "1", 0, {0: weak, 1: weak, 2: weak}, 1e-4)
    ranking = rank(collect([sweep]))
    u = ranking.uncertainty
    assert ranking.best == "learning_rate=0.001" and u.method == "problems"
    (c,) = u.comparisons
    # 18 problems right for 1e-3 only, none the other way, over the late evaluations 1 and 2
    assert (c.verdict, c.n_problems, c.diff) == ("worse", 40, pytest.approx(-0.45))
    assert c.p_value == pytest.approx(2 * 0.5 ** 18)
    write_report(collect([sweep]), sweep)
    csv = (sweep / "comparisons.csv").read_text().splitlines()
    assert csv[0].startswith("config,reference,role,step,method,seeds_config,seeds_reference,"
                             "problems,samples_per_problem_config,samples_per_problem_reference,"
                             "difference,ci_low,ci_high,p_value,p_adjusted,verdict")
    assert csv[1].endswith(",worse") and len(csv) == 2

    # crafted outcome files: each makes its run's outcomes unusable, never crashes a reader
    path = outcomes_path(sweep / "1", 2)
    for text in ("{", "[]", json.dumps({"step": 2, "samples_per_problem": 1, "problems_digest":
                                        DIGEST, "reward": [2.0] * 40}),
                 json.dumps({"step": 3, "samples_per_problem": 1, "problems_digest": DIGEST,
                             "reward": weak}),
                 json.dumps({"step": 2, "samples_per_problem": True, "problems_digest": DIGEST,
                             "reward": weak}),
                 '{"step": 2, "samples_per_problem": 1, "problems_digest": "' + DIGEST
                 + '", "reward": [NaN]}', "[" * 100000 + "]" * 100000, "x" * (4 << 20)):
        path.write_text(text)
        assert read_outcomes(sweep / "1", 2) is None
        crafted = rank(collect([sweep]))
        assert crafted.uncertainty.method == "none"
        assert crafted.uncertainty.comparisons[0].verdict == "no interval"
    # a link planted at a run's outcome file is refused at write time
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.json")
    write_outcomes(sweep / "1", EvalOutcomes(2, 1, DIGEST, tuple(weak)))
    assert not path.is_symlink() and not (tmp_path / "elsewhere.json").exists()
    # outcomes of different problems are not paired
    write_outcomes(sweep / "1", EvalOutcomes(2, 1, "cd" * 32, tuple(weak)))
    assert rank(collect([sweep])).uncertainty.method == "none"


def test_one_seed_reward_band_is_the_exact_binomial_interval() -> None:
    """One run: 24 of 40 responses right at step 10 is Clopper-Pearson's (0.433, 0.751)."""
    import pandas as pd

    from analysis.aggregate import label_curves
    from analysis.collect import LABEL
    steps = pd.DataFrame({LABEL: ["a", "a"], "run_id": ["r", "r"], "step": [0, 10],
                          "eval/reward": [0.0, 0.6], "eval/n_responses": [40.0, 40.0]})
    curve = label_curves(steps, "eval/reward", "step", "ci95")["a"]
    assert (curve.lo[1], curve.hi[1]) == pytest.approx(
        (stats.beta.ppf(0.025, 24, 17), stats.beta.ppf(0.975, 25, 16)))
    assert (curve.lo[0], curve.hi[0]) == pytest.approx((0.0, stats.beta.ppf(0.975, 1, 40)))


def test_greedy_evaluation_is_not_told_to_sample_more_responses() -> None:
    a, b = binary_pair()
    runner_up = compare_sweep([a, b], "a", {}, step=10).comparisons[0]
    greedy = resolve(runner_up, a, family=8, method="problems", greedy=True)
    assert "samples_per_problem" not in greedy and "seeds per config (evaluation is greedy" in greedy
