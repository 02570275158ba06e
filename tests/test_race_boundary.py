"""The race's calibrated boundary (analysis.decisions.race.boundary): its simulated look is the project's
rule (analysis.stats.comparisons.compare_sweep, which a race's look calls through analysis.decisions.race.looks.decide),
and its level spends the race's alpha where Bonferroni's split left much of it unspent."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from analysis.decisions.race.boundary import (
    ALL_TIED_RATIO,
    MAX_SEEDS,
    NONE_LEFT,
    NOT_REACHED,
    ONE_LEFT,
    SIMS,
    STOPPED_EARLY,
    all_tied_values,
    boundary,
    decision,
    elimination_rate,
    look,
    tied_pair_values,
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
    """9 configs, 5 seeds: at the calibrated level 5% of the truly best configs leave at some look
    in the least favourable of the calibration's cases (every config tied, alternately of seed sd
    1 and 0.01, with and without a wave-1 variance: 0.0157 and 0.0184 (0.0185 before the 3-seed
    look's Welch df was shrunk towards 2), where the cases before
    issue 59's remaining items gave 0.0178 and 0.0215 and lost 6.4% there), within the
    simulation's error, and fewer where every config is equal; at Bonferroni's 0.01 a look, 1.9%
    (no variance at wave 1) and 2.9% (a variance at wave 1, one look more) of equal configs."""
    without, with_first = boundary(9, 5, 0.05, False), boundary(9, 5, 0.05, True)
    error = 3 * math.sqrt(0.05 * 0.95 / SIMS)
    for b in (without, with_first):
        assert b.rate == pytest.approx(0.05, abs=error)
        assert b.rate <= 0.05 and b.alpha / b.max_seeds < b.level < b.alpha
    assert without.level == pytest.approx(0.0184, abs=5e-4) and without.ratio == 100
    assert with_first.level == pytest.approx(0.0157, abs=5e-4) and with_first.ratio == 100
    assert without.all_tied and with_first.all_tied
    assert without.bonferroni_rate == pytest.approx(0.0191, abs=1e-3)
    assert with_first.bonferroni_rate == pytest.approx(0.0288, abs=1e-3)
    # fresh simulations (other random numbers) agree with the calibration: every config tied,
    # alternately of seed sd 1 and 0.01, loses 5.5% and 5.4% at the levels (the calibration's
    # own numbers 5.0%), 6.0% and 5.8% at the former 0.0215 and 0.0178
    rng = np.random.default_rng(12345)
    fresh = all_tied_values(9, 5, ALL_TIED_RATIO, SIMS, rng)
    for b, former in ((without, 0.0215), (with_first, 0.0178)):
        now = elimination_rate(b.level, fresh, b.first_look)
        assert now == pytest.approx(0.05, abs=error)
        assert elimination_rate(former, fresh, b.first_look) > now + 0.003
    pair = tied_pair_values(9, 5, 4.0, SIMS, rng)
    assert elimination_rate(without.level, pair, False, (0, 1)) <= 0.05 + error
    equal = rng.standard_normal((SIMS, 5, 9))
    assert elimination_rate(without.level, equal, False) < 0.05


def test_one_look_compares_under_alpha_where_a_tied_pair_differs_in_spread() -> None:
    """Two configs, two seeds, no variance at wave 1: one look, a one-sided t test on the pair's
    own variance, on Welch's df shrunk towards 1 for a 2-seed pair (1 to 2 here). On Welch's df
    unshrunk a tied pair of seed sds 10 apart lost more than alpha at alpha itself, so the level
    was 0.0456; shrunk, no case of the calibration loses more than alpha at alpha, so the level
    is alpha, which a look never compares above."""
    b = boundary(2, 2, 0.05, False)
    assert b.level == 0.05 and b.rate <= 0.05
    assert "each look at 0.05, calibrated by simulation" in b.describe()
    assert "in at most 5.0% of 4000 simulated races of 2 configs" in b.describe()
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


def welch_rate(level: float, values: np.ndarray) -> float:
    """The share of two tied configs that leave a race of looks at 2..max_seeds seeds where each
    look is scipy's one-sided Welch t test at `level` (a config leaves where its mean is below
    the other's, and the race ends): `values` (races, max_seeds, 2). With two configs a look's
    Hsu bound on the pair's own variance is this test (the race's rounds Welch's df down)."""
    gone = np.zeros((values.shape[0], 2), bool)
    for n in range(2, values.shape[1] + 1):
        p = stats.ttest_ind(values[:, :n, 0], values[:, :n, 1], axis=1, equal_var=False,
                            alternative="less").pvalue
        over = gone.any(axis=1)
        gone[:, 0] |= ~over & (p < level)
        gone[:, 1] |= ~over & (1 - p < level)
    return float(gone.mean())


@pytest.mark.parametrize("ratio", [1, 2, 4, 10, 100])
def test_tied_best_configs_of_unequal_seed_sd_leave_in_at_most_alpha(ratio: float) -> None:
    """Issue 59, item 4: a tied best pair of seed sd 1 and 1/ratio, 2 configs, 5 seeds. The level
    calibrated where every config has one seed sd (0.0252) lost each of them in 7.2% of races at
    a ratio of 10; the level is now the least that holds alpha at every ratio (0.0155), and
    the race's look and scipy's Welch test (fresh random numbers) lose at most alpha + MC
    error at each ratio (4.7% and 5.5% at 10; the binding ratio is 100), 7.2% at 10 at the
    former level."""
    level = boundary(2, 5, 0.05, False).level
    assert level == pytest.approx(0.0155, abs=3e-4)
    races = 8000
    values = np.random.default_rng(59 + ratio).standard_normal((races, 5, 2)) * [1.0, 1.0 / ratio]
    error = math.sqrt(0.05 * 0.95 / (2 * races))
    race, welch = elimination_rate(level, values, False, best=(0, 1)), welch_rate(level, values)
    # the level's own Monte Carlo error (4000 races) and this simulation's: 3 of this one's
    assert race <= 0.05 + 3 * error and welch <= 0.05 + 3 * error
    # the race's look is Welch's test, its df a tenth lower and shrunk towards 1 at the 2-seed
    # look and towards 2 at the 3-seed look (analysis.stats.critical.welch_df): it loses 0.8
    # points fewer at a ratio of 10 (0.7 before the 3-seed shrink)
    assert -0.010 < race - welch < 0.002
    if ratio == 10:  # the former level does not hold here
        assert elimination_rate(0.0252, values, False, best=(0, 1)) > 0.05 + 4 * error


def test_the_race_s_texts_no_longer_claim_the_former_rules() -> None:
    """Issue 52, item 14: the race's docstrings and page no longer say it keeps Tukey-Kramer's
    configs or leaves the slack."""
    root = Path(__file__).resolve().parents[1]
    for path in ("analysis/decisions/race/looks.py", "analysis/decisions/race/boundary.py",
                 "docs/how-to/racing.md"):
        text = " ".join((root / path).read_text().split())
        assert "simultaneous Tukey-Kramer comparisons" not in text, path
        assert "slack under equal variances is not spent" not in text, path
