"""The other metrics' trends (analysis.decisions.trends): tested between seeds (or against a one-seed grid's
seed variance), never between the autocorrelated steps of one run; numbers worked out by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.decisions.trends import trends
from analysis.names.formatting import LABEL
from analysis.readers.collect import collect
from analysis.readers.synthetic import write_multirun, write_run
from analysis.stats.effects import VALUE
from analysis.stats.trends import NOT_FINITE, holm, metric_trends, windows

LABELS = ["learning_rate=0.001", "learning_rate=0.0001", "learning_rate=0.0002"]


def test_holm_is_statsmodels_step_down_in_the_order_given() -> None:
    # sorted 0.005 x 4, 0.01 x 3, 0.03 x 2, 0.04 x 1 -> 0.02, 0.03, 0.06, max(0.06, 0.04)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.7, 0.8]) == [1.0, 1.0]
    assert holm([]) == []


def test_windows_cover_a_tenth_of_the_steps_and_at_least_three() -> None:
    assert windows(200) == (range(1, 21), range(181, 201))
    assert windows(10) == (range(1, 4), range(8, 11))
    assert windows(2) == (range(1, 3), range(1, 3))


def entropy_sweep(sweep: Path, seeds: tuple[int, ...], late: dict[float, list[float]]) -> None:
    """30 steps per run; entropy 1.0 early, then each run's late value (``late[lr][seed]``) at
    steps 28-30 plus an autocorrelated wiggle the test must not take for samples."""
    write_multirun(sweep, ["learning_rate=0.001,0.0001,0.0002"]
                   + ([f"seed={','.join(map(str, seeds))}"] if len(seeds) > 1 else []))
    job = 0
    for lr, values in late.items():
        for seed in seeds:
            wiggle = 0.001 * np.sin(np.arange(31) / 3)
            rows = [{"step": 0, "eval/reward": 0.1}] + [
                {"step": s, "train/entropy": (1.0 if s < 28 else values[seed]) + wiggle[s],
                 "eval/reward": 0.5 if lr == 0.001 else 0.3} for s in range(1, 31)]
            write_run(sweep / str(job), {"learning_rate": lr, "seed": seed}, rows,
                      {"status": "completed"})
            job += 1


def test_late_values_are_compared_between_seeds_with_the_pooled_variance(tmp_path: Path) -> None:
    late = {0.001: [0.60, 0.64], 0.0001: [0.95, 0.99], 0.0002: [0.62, 0.68]}
    entropy_sweep(tmp_path / "s", (0, 1), late)
    got = {t.label: t for t in trends(collect([tmp_path / "s"]), LABELS, LABELS[0], at_step=30)}
    wiggle = {seed: 0.001 * np.sin(np.arange(28, 31) / 3).mean() for seed in (0, 1)}
    means = {lr: [v + wiggle[s] for s, v in enumerate(values)] for lr, values in late.items()}
    # pooled over the three configs: squares 0.0008 + 0.0008 + 0.0018 on 3 df
    pooled = sum(float(np.sum((np.array(v) - np.mean(v)) ** 2)) for v in means.values()) / 3
    assert pooled == pytest.approx(0.0034 / 3)
    # each pair on the larger of the pool and its own two configs' variance, on its own df:
    # 1e-4 with 1e-3 (0.0016 / 2) on the pool, 2e-4 with 1e-3 (0.0026 / 2) on its own, on the
    # Welch-Satterthwaite df 0.0013^2 / (0.0009^2 + 0.0004^2) = 1.74, shrunk towards 1 for a
    # 2-seed pair (1 + 0.74^3 = 1.405) and rounded down to 1.4
    own = {lr: sum(float(np.sum((np.array(means[x]) - np.mean(means[x])) ** 2))
                   for x in (lr, 0.001)) / 2 for lr in (0.0001, 0.0002)}
    assert own[0.0001] < pooled < own[0.0002]
    squares = [float(np.sum((np.array(means[x]) - np.mean(means[x])) ** 2)) / 2 for x in (0.0002, 0.001)]
    welch = sum(squares) ** 2 / sum(q ** 2 for q in squares)
    assert welch == pytest.approx(1.74, abs=0.01)
    variance = {0.0001: (pooled, 3), 0.0002: (own[0.0002], math.floor(10 * (1 + (welch - 1) ** 3)) / 10)}
    p = {lr: 2 * stats.t.sf(abs(np.mean(means[lr]) - np.mean(means[0.001]))
                            / math.sqrt(v * (1 / 2 + 1 / 2)), df)
         for lr, (v, df) in variance.items()}
    assert p[0.0001] < p[0.0002]  # Holm: the smaller times 2, the larger at least that
    assert got[LABELS[1]].p_adjusted == pytest.approx(2 * p[0.0001])
    assert got[LABELS[2]].p_adjusted == pytest.approx(max(2 * p[0.0001], p[0.0002]))
    assert got[LABELS[1]].versus_best == "higher" and got[LABELS[2]].versus_best == "within noise"
    assert got[LABELS[0]].versus_best == ""
    assert got[LABELS[1]].late == pytest.approx(np.mean(means[0.0001]))
    assert got[LABELS[1]].early == pytest.approx(1.0 + 0.001 * np.sin(np.arange(1, 4) / 3).mean())
    assert got[LABELS[1]].change == pytest.approx(got[LABELS[1]].late - got[LABELS[1]].early)
    assert "seeds in this sweep" in got[LABELS[1]].noise and "(3 df)" in got[LABELS[1]].noise


def test_one_seed_and_one_swept_key_gives_no_test_between_steps(tmp_path: Path) -> None:
    """One seed: the late window's steps are autocorrelated, not samples; without a seed
    variance there is no test, however far apart the late values are."""
    entropy_sweep(tmp_path / "s", (0,), {0.001: [0.6], 0.0001: [0.99], 0.0002: [0.61]})
    got = {t.label: t for t in trends(collect([tmp_path / "s"]), LABELS, LABELS[0], at_step=30)}
    assert {got[label].versus_best for label in LABELS[1:]} == {"no test"}
    assert all(math.isnan(got[label].p_adjusted) for label in LABELS[1:])
    assert got[LABELS[1]].noise.startswith("none: one seed per config")


def test_a_run_that_logged_an_infinite_value_is_said_apart_not_a_nan_for_all(tmp_path: Path) -> None:
    """One run's infinite entropy in the late window once made the pooled variance, and so every
    config's comparison, nan: that config is said apart, the others are compared as before."""
    late = {0.001: [0.60, 0.64], 0.0001: [0.95, 0.99], 0.0002: [0.62, math.inf]}
    entropy_sweep(tmp_path / "s", (0, 1), late)
    got = {t.label: t for t in trends(collect([tmp_path / "s"]), LABELS, LABELS[0], at_step=30)}
    assert got[LABELS[2]].versus_best == NOT_FINITE and math.isnan(got[LABELS[2]].late)
    assert got[LABELS[1]].versus_best == "higher" and math.isfinite(got[LABELS[1]].p_adjusted)
    assert "seeds in this sweep" in got[LABELS[1]].noise and "(2 df)" in got[LABELS[1]].noise
    assert "nan" not in got[LABELS[1]].noise


def test_a_borrowed_variance_is_inflated_for_the_trends_as_for_the_ranking(tmp_path: Path) -> None:
    """A one-seed sweep borrows its trend tests' seed variance from a two-seed sweep of the same
    learning rates: pooled over its three configs (squares 0.0008 + 0.0008 + 0.0018 on 3 df);
    where the ranking found settings the source did not run, times 3 / chi2_0.05(3)."""
    entropy_sweep(tmp_path / "source", (0, 1),
                  {0.001: [0.60, 0.64], 0.0001: [0.95, 0.99], 0.0002: [0.62, 0.68]})
    entropy_sweep(tmp_path / "one", (0,), {0.001: [0.6], 0.0001: [0.99], 0.0002: [0.61]})
    source, one = collect([tmp_path / "source"]), collect([tmp_path / "one"])
    plain = {t.label: t for t in trends(one, LABELS, LABELS[0], 30, source)}
    inflated = {t.label: t for t in trends(one, LABELS, LABELS[0], 30, source, ("loss.name=grpo_clip",))}
    factor = 3 / stats.chi2.ppf(0.05, 3)
    variance = float(plain[LABELS[1]].noise.split("(variance ")[1].split(")")[0])
    assert variance == pytest.approx(0.0034 / 3, rel=0.05)  # the wiggle moves it a little
    assert float(inflated[LABELS[1]].noise.split("(variance ")[1].split(")")[0]) == pytest.approx(
        variance * factor, rel=1e-2)
    assert "inflated x8.53 to its upper 95% confidence bound" in inflated[LABELS[1]].noise
    assert "loss.name=grpo_clip" in inflated[LABELS[1]].noise
    assert plain[LABELS[2]].p_adjusted < inflated[LABELS[2]].p_adjusted


def test_metric_trends_on_frames_in_memory_against_hand_t_tests() -> None:
    """`metric_trends` on a frame made here: a and b seeds 0.2 apart, c 0.4 (pooled variance
    (0.02 + 0.02 + 0.08) / 3 = 0.04 on 3 df); b 1.0 above a on the pool (its own pair's 0.02 is
    smaller), c 0.1 above a on the pair's own, Welch's (0.02 + 0.08) / 2 = 0.05 (larger than the
    pool) on the Welch-Satterthwaite df 0.05^2 / (0.01^2 + 0.04^2) = 1.47, shrunk towards 1 for
    a 2-seed pair (lo 1, hi 2: 1 + 0.47^3 = 1.104) and rounded down to 1.1; Student's t, Holm
    over the two; early means passed through as given."""
    runs = pd.DataFrame({LABEL: ["a", "a", "b", "b", "c", "c"], "lr": [1, 1, 2, 2, 3, 3],
                         VALUE: [1.0, 1.2, 2.0, 2.2, 1.0, 1.4]})
    early = pd.Series({"a": 0.5, "b": 0.7, "c": 0.6})
    got = {t.label: t for t in metric_trends("train/entropy", ["a", "b", "c"], "a", early, runs,
                                             ["lr"], pd.DataFrame())}
    p_b = 2 * stats.t.sf(1.0 / math.sqrt(0.04), 3)
    p_c = 2 * stats.t.sf(0.1 / math.sqrt(0.05), 1.1)
    assert got["b"].p_adjusted == pytest.approx(2 * p_b) and got["b"].versus_best == "higher"
    assert got["c"].p_adjusted == pytest.approx(max(2 * p_b, p_c))
    assert got["c"].versus_best == "within noise" and got["a"].versus_best == ""
    assert got["b"].change == pytest.approx(2.1 - 0.7) and got["a"].late == pytest.approx(1.1)
    assert "(3 df)" in got["a"].noise and "variance 0.04)" in got["a"].noise
    lower = runs.assign(**{VALUE: [1.0, 1.2, 0.0, 0.2, 1.0, 1.4]})
    assert metric_trends("m", ["a", "b"], "a", early, lower, ["lr"], pd.DataFrame())[1].versus_best \
        == "lower"
