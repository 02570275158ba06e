"""The race's calibrated boundary (analysis.decisions.race.boundary): its simulated look is the project's
rule (analysis.stats.comparisons.compare_sweep, which a race's look calls through analysis.decisions.race.looks.decide),
and its level spends the race's alpha where Bonferroni's split left much of it unspent."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from analysis.decisions.race.boundary import (
    MAX_SEEDS,
    NONE_LEFT,
    NOT_REACHED,
    ONE_LEFT,
    SIMS,
    STOPPED_EARLY,
    boundary,
    decision,
    elimination_rate,
    look,
)
from analysis.stats.comparisons import compare_sweep
from analysis.stats.variance import ConfigData, SeedVariance


def rule(values: np.ndarray, alive: np.ndarray, level: float) -> np.ndarray:
    """The configs that leave at one look of one race by the project's code: `values` (seeds,
    n_configs), `alive` (n_configs,) bool; with one seed, a known variance of 1."""
    configs = [ConfigData(str(i), values[:, i]) for i in np.flatnonzero(alive)]
    configs.sort(key=lambda c: -c.mean)
    seeds = (SeedVariance(1.0, 1e12, "borrowed", "known") if values.shape[0] == 1
             else SeedVariance.pooled(configs))
    could = compare_sweep(configs, configs[0].label, {}, None, seeds, alpha=level).could_be_best
    return alive & ~np.isin(np.arange(values.shape[1]), [int(label) for label in could])


@pytest.mark.parametrize("seeds", [1, 2, 3, 5])
def test_the_simulated_look_is_the_race_s_rule(seeds: int) -> None:
    """Configs with unequal seed variances (so that pairs' own variances are used) and some
    already out: each simulated race's leavers are those compare_sweep's Hsu bounds show worse."""
    rng = np.random.default_rng(seeds)
    values = rng.normal(0, 1, (60, seeds, 5)) * np.array([1, 1, 3, 0.3, 1]) + np.array(
        [0, -1, -2, -3, -0.5])
    alive = rng.random((60, 5)) < 0.8
    alive[:, 0] = True  # at least two in
    alive[:, 1] = True
    level = 0.03
    simulated = look(values, alive, level, first_look=True)
    by_rule = np.array([rule(values[r], alive[r], level) for r in range(60)])
    assert simulated.any() and (~simulated & alive).any()  # both outcomes occur
    np.testing.assert_array_equal(simulated, by_rule)
    # without a variance at wave 1, its look (one seed) leaves no config out
    assert not look(values[:, :1], alive, level, first_look=False).any()


def test_the_level_spends_the_race_s_alpha_where_bonferroni_left_it_unspent() -> None:
    """9 equal configs, 5 seeds: at the calibrated level 5% of configs (each truly best) leave at
    some look, within the simulation's error; at Bonferroni's 0.01 a look, 1.9% (no variance at
    wave 1) and 2.9% (a variance at wave 1, one look more)."""
    without, with_first = boundary(9, 5, 0.05, False), boundary(9, 5, 0.05, True)
    error = 3 * math.sqrt(0.05 * 0.95 / SIMS)
    for b in (without, with_first):
        assert b.rate == pytest.approx(0.05, abs=error)
        assert b.rate <= 0.05 and b.alpha / b.max_seeds < b.level < b.alpha
    assert without.level == pytest.approx(0.0277, abs=5e-4)
    assert with_first.level == pytest.approx(0.0178, abs=5e-4)
    assert without.bonferroni_rate == pytest.approx(0.0191, abs=1e-3)
    assert with_first.bonferroni_rate == pytest.approx(0.0288, abs=1e-3)
    # a fresh simulation (other random numbers) agrees with the calibration
    fresh = np.random.default_rng(12345).standard_normal((SIMS, 5, 9))
    assert elimination_rate(without.level, fresh, False) == pytest.approx(0.05, abs=error)


def test_one_look_compares_at_alpha_itself() -> None:
    """Two configs, two seeds, no variance at wave 1: one look, a one-sided t test on the pair's
    own variance, on Welch's df shrunk towards 1 for a 2-seed pair (1 to 2 here; on the former
    pooled 2 df each config left in 5.14% of races at 0.05, so the level was 0.0484; on Welch's
    df unshrunk 3.0%): the fewer df, so at alpha itself 2.3% leave and the level is alpha, which
    a look never compares above."""
    b = boundary(2, 2, 0.05, False)
    assert b.level == 0.05 and b.rate == pytest.approx(0.023, abs=0.003)
    assert "each look at 0.05, calibrated by simulation" in b.describe()
    assert "in 2.3% of 4000 simulated races" in b.describe()
    assert boundary(2, 2, 0.04, False).level <= 0.04


def test_a_look_s_decision_from_its_comparisons_in_memory() -> None:
    """`decision` on comparisons made here (no run directory): c is 0.21 below a on 6 df (out
    by Hsu's bound), b 0.01 below (in); a config with a collapsed run and one that reached no
    compared step leave outside alpha; the race ends at max_seeds, or with one config left."""
    a, b, c = (ConfigData(label, np.array(v)) for label, v in
               (("a", [0.50, 0.52, 0.54]), ("b", [0.49, 0.51, 0.53]), ("c", [0.30, 0.31, 0.32])))
    u = compare_sweep([a, b, c], "a", {}, 10, SeedVariance.pooled([a, b, c]), alpha=0.0178)
    got = decision(2, ["a", "b", "c"], u, {"d": "collapsed"}, {"e": "step 5"}, 5, 0.0178)
    assert got.alive == ("a", "b") and got.end is None and got.level == 0.0178
    assert got.left["c"].startswith("below the best: its mean minus the largest of the others' is in [")
    assert got.outside_alpha() == {"d": f"{STOPPED_EARLY} (collapsed)",
                                   "e": f"{NOT_REACHED} (step 5)"}
    assert "seeds in this sweep" in got.seed_variance and "(6 df)" in got.seed_variance
    assert decision(5, ["a", "b", "c"], u, {}, {}, 5, 0.0178).end == MAX_SEEDS
    assert decision(4, ["a", "b", "c"], u, {}, {}, 5, 0.0178).end is None
    alone = compare_sweep([a, c], "a", {}, 10, SeedVariance.pooled([a, c]), alpha=0.0178)
    assert decision(2, ["a", "c"], alone, {}, {}, 5, 0.0178).end == ONE_LEFT
    blind = decision(1, ["a", "b"], None, {}, {"c": "step 0"}, 5, 0.0178)
    assert blind.alive == ("a", "b") and blind.level is None and blind.end is None
    assert decision(1, [], None, {"a": "diverged"}, {}, 5, 0.0178).end == NONE_LEFT
    one_seed = [ConfigData(x.label, x.seed_values[:1]) for x in (a, b, c)]
    undecided = compare_sweep(one_seed, "a", {}, 10, SeedVariance.pooled(one_seed), alpha=0.0178)
    assert decision(1, ["a", "b", "c"], undecided, {}, {}, 5, 0.0178).level is None


def test_tied_best_configs_of_unequal_seed_sd_are_the_stated_limit() -> None:
    """Issue 52, item 14: the level is calibrated on equal seed variances with the race's own look
    (the pair rule included, a pair's own variance on Welch's df); a tied best pair of seed sd 1
    and 0.25 (2 configs, 5 seeds) loses each of them more often than alpha (6.8% by
    bench/race_unequal.py; 7.9% when the pair's own variance was on the pooled 2n - 2 df, where
    Bonferroni's 0.01 a look gave 5.4%): on Welch's df Bonferroni's level holds it, the
    calibrated one (raised to spend what Welch's df leave unspent under equal variances) does
    not. The racing page states the measured figure, which this simulation (other random
    numbers than the bench's) reproduces within its Monte Carlo error; the race's docstrings no
    longer say it keeps Tukey-Kramer's configs or leaves the slack."""
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs/how-to/racing.md").read_text()
    stated = float(page.split("each of them leaves at some look in ")[1].split("%")[0]) / 100
    level = boundary(2, 5, 0.05, False).level
    rng = np.random.default_rng(2024)
    races = 2000
    values = rng.standard_normal((races, 5, 2)) * np.array([1.0, 0.25])
    measured = elimination_rate(level, values, False, best=(0, 1))
    error = math.sqrt(measured * (1 - measured) / (2 * races))
    assert measured == pytest.approx(stated, abs=3 * error + 0.004)
    assert measured > 0.05 + 2 * error  # a real limit, not noise
    assert elimination_rate(0.05 / 5, values, False, best=(0, 1)) < 0.05 - 2 * error
    # the control: equal seed sds at the same level spend about alpha
    equal = rng.standard_normal((races, 5, 2))
    assert elimination_rate(level, equal, False, best=(0, 1)) == pytest.approx(0.05, abs=0.015)
    for path in ("analysis/decisions/race/looks.py", "analysis/decisions/race/boundary.py", "docs/how-to/racing.md"):
        text = " ".join((root / path).read_text().split())
        assert "simultaneous Tukey-Kramer comparisons" not in text, path
        assert "slack under equal variances is not spent" not in text, path
