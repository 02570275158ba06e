"""What a design can detect: the power of Hsu's comparisons with the best and of a key's main-effect F
test, the smallest difference each finds at :data:`~analysis.stats.levels.POWER`, and the seeds
that would tell two configs apart (:func:`resolve`, the report's "what would decide"). Where the
configs have seeds, the comparisons' power is the pair rule's averaged over the sample variances it
will read (:func:`pair_power`); on a variance of fixed df (a grid's residual, a borrowed one) the
noncentral t (:func:`power_against_best`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from analysis.stats.critical import (
    anova_df,
    mcb_critical,
    mcb_critical_values,
    mehrotra_df,
    pair_rule,
    pair_seed_variance,
    welch_df,
)
from analysis.stats.levels import ALPHA, POWER

MANY_SEEDS = 10
"""Seeds per config beyond which `resolve` says the difference is too small to be worth it."""
MAX_RESOLVED_SEEDS = 1000
"""The most seeds per config `resolve` searches."""


def power_against_best(diff: float, se: float, family: int, df: float,
                       alpha: float = ALPHA) -> float:
    """The power with which Hsu's comparisons with the best move a config ``diff`` (> 0) below
    the best out of the set that could be the best, ``se`` the standard error of the two
    configs' difference, among ``family`` configs of equal seeds, on a seed variance of fixed
    ``df`` degrees of freedom (a grid's additive residual, a borrowed variance; inf: known):
    P(T' > d) for T' noncentral t with noncentrality diff / se, d Hsu's critical value on ``df``
    (``scipy.stats.nct``). ``alpha``: the comparisons' family-wise rate (a race's look level).
    Configs with seeds are judged by the pair rule, whose variance and df are those of the
    sample variances drawn: :func:`pair_power` (the noncentral t at the rule's mean df,
    :func:`own_df`, stated 80% where the analysis had 76.8% ± 2.1 at 2 seeds a config among 9,
    ``bench/resolve_power.py``)."""
    from scipy import stats

    lambdas = (round(math.sqrt(0.5), 6),) * max(family - 1, 1)
    critical = mcb_critical(lambdas, float(df), alpha)
    if not math.isfinite(df):
        return float(special.ndtr(diff / se - critical))
    return float(stats.nct.sf(critical, df, diff / se))


PAIR_POINTS = 2 ** 14
"""The scrambled Sobol points of the three sample variances :func:`pair_power` averages over
(within 0.05 points of 2 million random draws at 2-5 seeds a config among 3-9 configs)."""


@functools.lru_cache(maxsize=32)  # 0.4 MB each: a resolve search visits some 20 seed counts
def _sampled_variances(seeds: int, rest_df: float) -> np.ndarray:
    """(3, PAIR_POINTS): chi-square quantiles over their df at fixed scrambled Sobol points
    (``scipy.stats.qmc``, seed 0): the two configs' sample variances on ``seeds`` - 1 df and the
    rest of the pool's on ``rest_df`` (1 where it is infinite, 0 where it is 0), each over its
    true variance."""
    from scipy import stats
    from scipy.stats import qmc

    u = qmc.Sobol(3, scramble=True, seed=0).random(PAIR_POINTS).T
    pair = stats.chi2.ppf(u[:2], seeds - 1) / (seeds - 1)
    if rest_df == 0 or math.isinf(rest_df):
        rest = np.full(PAIR_POINTS, 0.0 if rest_df == 0 else 1.0)
    else:
        rest = stats.chi2.ppf(u[2], rest_df) / rest_df
    drawn = np.vstack([pair, rest])
    drawn.setflags(write=False)
    return drawn


def pair_power(diff: float, seeds: int, family: int, variances: tuple[float, float],
               rest: tuple[float, float], alpha: float = ALPHA) -> float:
    """The power with which Hsu's comparisons with the best move a config ``diff`` (> 0) below
    the best out of the set that could be the best, the two configs of ``seeds`` (>= 2) seeds
    each of true seed variances ``variances``, among ``family`` configs, the sweep's pool being
    their seeds pooled with ``rest`` (the variance and df of the other configs' seeds): the mean,
    over :data:`PAIR_POINTS` fixed quasi-random draws of the two sample variances (chi-square on
    ``seeds`` - 1 df) and of the rest's (on its df), of the chance that the difference of means,
    normal about ``diff`` with variance (v_a + v_b) / seeds and independent of them, passes Hsu's
    critical value times the standard error the pair rule takes on that draw
    (:func:`~analysis.stats.critical.pair_rule`: the pair's own variance on its
    :func:`~analysis.stats.critical.welch_df` where that is at least the pool, else the pool on
    its df). The power thus averages over the df the rule will use (at 2 seeds Welch's df shrunk
    towards 1, 1.0-1.9, or the pool's) and over the variance beside it, not the noncentral t at
    the mean df (:func:`own_df`), which stated 80% where the analysis had 76.8% ± 2.1 at 2 seeds
    a config among 9: the critical value is convex in the df, steeply so near 1 df. It leaves out
    the runner-up's comparisons with the configs other than the best (which can only add power)."""
    var_a, var_b = variances
    rest_variance, rest_df = rest
    drawn = _sampled_variances(int(seeds), float(rest_df))
    s_a, s_b = var_a * drawn[0], var_b * drawn[1]
    nu = seeds - 1
    if math.isinf(rest_df):
        pool, pool_df = np.full(PAIR_POINTS, float(rest_variance)), math.inf
    else:
        pool_df = 2 * nu + rest_df
        pool = (nu * (s_a + s_b) + rest_df * rest_variance * drawn[2]) / pool_df
    variance, df, _ = pair_rule(s_a, seeds, s_b, seeds, pool, pool_df)
    critical = mcb_critical_values((round(math.sqrt(0.5), 6),) * max(family - 1, 1), df, alpha)
    margin = diff - critical * np.sqrt(variance * 2 / seeds)  # the mean difference must pass it
    spread = math.sqrt((var_a + var_b) / seeds)
    if spread == 0:
        return float(np.mean(margin > 0))
    return float(np.mean(special.ndtr(margin / spread)))


def detectable_with_seeds(sd: float, seeds: int, family: int, alpha: float = ALPHA) -> float:
    """The smallest difference from the best that :func:`pair_power` finds at :data:`POWER`
    where each of ``family`` configs has ``seeds`` (>= 2) seeds of seed sd ``sd``: the pool is the
    pair's seeds with the other family - 2 configs' (family - 2)(seeds - 1) df at that variance
    (17.14 seed sds at 2 seeds among 9 configs, 4.54 at 3, 2.48 at 5; on the noncentral t at the
    mean df 14.70, 4.53 and 2.49; at 3 seeds 4.23 and 4.26 before the 3-seed shrink of Welch's
    df, :data:`analysis.stats.critical.THREE_SEED_SHRINK`)."""
    variance = sd ** 2
    return _smallest_found(
        lambda diff: pair_power(diff, seeds, family, (variance, variance),
                                (variance, (family - 2) * (seeds - 1)), alpha),
        sd * math.sqrt(2 / seeds))


OWN_DF_NODES = 512
"""Quantiles of the two sample variances' ratio `own_df` averages Welch's df over."""


@functools.lru_cache(maxsize=4096)
def own_df(seeds: int, ratio: float = 1.0) -> float:
    """The mean df a pair of configs of ``seeds`` seeds each rests on of its own
    (:func:`analysis.stats.comparisons.pair_variance`): Welch's df
    (:func:`analysis.stats.critical.welch_df`, the pair rule's) averaged over the ratio of the two
    sample variances where the true ones stand in ``ratio`` (the smaller over the larger, 0-1:
    ``ratio`` times F on (n - 1, n - 1) df, ``OWN_DF_NODES`` quantiles), floored to a tenth. At
    equal variances 1.2, 2.8, 4.9 and 6.8 at 2, 3, 4 and 5 seeds (Welch's shrunk at 2 and 3),
    not 2n - 2; fewer as ``ratio``
    falls, down to n - 1 where one config hardly varies (0: 1, 2, 3 and 4); 0 for one seed. What
    "what would decide" says the pair rests on; its power averages over the df's spread
    (:func:`pair_power`), not at this mean."""
    if seeds < 2:
        return 0.0
    if not 0 <= ratio <= 1:
        raise ValueError(f"own_df: the variance ratio {ratio!r} must be the smaller over the "
                         "larger, between 0 and 1")
    sampled = ratio * special.fdtri(seeds - 1, seeds - 1,
                                    (np.arange(OWN_DF_NODES) + 0.5) / OWN_DF_NODES)
    return float(math.floor(10 * float(np.mean(welch_df(sampled, seeds, 1.0, seeds,
                                                         floored=False)))) / 10)


def _smallest_found(power: Callable[[float], float], scale: float) -> float:
    """The smallest difference (in the units of ``scale``, a standard error or a seed sd > 0) at
    which ``power``, increasing in the difference, reaches :data:`POWER`: the bracket starts at
    100 x ``scale`` and grows tenfold until the power passes :data:`POWER` (on the 1.3 df of a
    pair of two-seed configs Hsu's critical value at a race's look level can pass 100 standard
    errors), up to 10^12 x ``scale``."""
    from scipy import optimize

    low, high = 1e-9 * scale, 100 * scale
    while power(high) < POWER:
        if high > 1e12 * scale:
            raise ValueError(f"no difference up to {high / scale:.3g} x {scale:g} reaches "
                             f"{POWER:.0%} power")
        low, high = high, 10 * high
    return float(optimize.brentq(lambda diff: power(diff) - POWER, low, high, xtol=1e-6 * scale))


def detectable_difference(se: float, family: int, df: float, alpha: float = ALPHA) -> float:
    """The smallest difference from the best that :func:`power_against_best` finds at
    :data:`POWER` for a difference of standard error ``se`` among ``family`` configs on ``df``."""
    return _smallest_found(lambda diff: power_against_best(diff, se, family, df, alpha), se)


def error_df(cells: int, levels: Sequence[int], seeds: int) -> int:
    """The degrees of freedom the main effects are tested on (``analysis.stats.effects.main_effects``)
    in a grid of ``cells`` configs over keys of ``levels`` levels, ``seeds`` seeds a config: the
    pooled seed variance's cells x (seeds - 1); with one seed a grid of two or more keys' additive
    residual, cells - 1 - sum(levels - 1); 0 where neither exists (one key, one seed)."""
    if seeds > 1:
        return cells * (seeds - 1)
    return max(cells - 1 - sum(n - 1 for n in levels), 0) if len(levels) > 1 else 0


def power_main_effect(diff: float, sd: float, levels: int, runs_per_level: float,
                      df: float, cells: int = 0) -> float:
    """The power of a key's main-effect F test (``analysis.stats.effects.main_effects``, at
    :data:`ALPHA`, on (``levels`` - 1, ``df``) degrees of freedom) when two of its levels differ
    by ``diff`` and the others sit at their mean, in a balanced grid: noncentral F with
    noncentrality runs_per_level x diff^2 / (2 sd^2) (the levels' squared deviations, diff^2 / 2,
    times the runs a level mean averages, over the seed variance ``sd``^2; ``scipy.stats.ncf``).
    With ``cells`` (> 0: the configs whose seeds the pool averages, each on ``df`` / ``cells``)
    the test is on the df the ANOVA reads from the configs' sample variances
    (:func:`~analysis.stats.critical.anova_df`, Satterthwaite's df of the pool shrunk, and Box's
    numerator df, :func:`~analysis.stats.critical.mehrotra_df` of the levels' mean variances,
    the cells dealt to the levels in turn), which vary with those variances even where their seed
    sd is one: the power is then the mean over :data:`DRAWS` fixed draws of those variances of
    the noncentral chi-square's chance to pass (levels - 1) x pool x the F's critical value on
    that draw's df (the key's sum of squares is independent of the configs' variances); on the
    pooled df it states 80% where the test has 39% (3 configs x 2 seeds;
    ``bench/main_effect_power.py``)."""
    from scipy import stats

    ncp = runs_per_level * diff ** 2 / (2 * sd ** 2)
    if cells <= 0:
        critical = float(special.fdtri(levels - 1, df, 1 - ALPHA))
        return float(stats.ncf.sf(critical, levels - 1, df, ncp))
    return float(np.mean(stats.ncx2.sf(_passing_sums(levels, cells, df / cells), levels - 1, ncp)))


DRAWS = 4000
"""The draws of the configs' sample variances :func:`power_main_effect` averages over (the
power's Monte Carlo error under 0.8 points)."""


@functools.lru_cache(maxsize=64)
def _passing_sums(levels: int, cells: int, nu: float) -> np.ndarray:
    """(DRAWS,): the key's sum of squares over the seed variance that passes the F test on each
    of :data:`DRAWS` fixed draws of ``cells`` configs' sample variances on ``nu`` df each (seed
    variance 1): (levels - 1) x the pool x the F's critical value on that draw's df (Box's
    numerator df, the shrunk Satterthwaite denominator df: the ANOVA's)."""
    s2 = np.random.default_rng(0).chisquare(nu, (DRAWS, cells)) / nu
    denominator = anova_df(s2, np.full(cells, nu))
    by_level = np.stack([s2[:, level::levels].mean(axis=1) for level in range(levels)], axis=1)
    numerator = np.minimum(np.floor(np.round(10 * mehrotra_df(by_level), 6)) / 10, levels - 1)
    return (levels - 1) * s2.mean(axis=1) * special.fdtri(numerator, denominator, 1 - ALPHA)


def detectable_main_effect(sd: float, levels: int, runs_per_level: float, df: float,
                           cells: int = 0) -> float:
    """The smallest difference between two of a key's levels that :func:`power_main_effect`
    finds at :data:`POWER`."""
    return _smallest_found(
        lambda diff: power_main_effect(diff, sd, levels, runs_per_level, df, cells), sd)


@dataclass(frozen=True)
class Resolution:
    """What would tell two configs apart at ``POWER``: the seeds per config it takes
    (``seeds``), the factor of the two configs' runs that is (2 x seeds over the runs they
    have), and ``text`` the arithmetic in words."""

    seeds: int
    factor: float
    text: str


def resolve(diff: float, seeds: tuple[int, int], family: int, pool: float, pool_df: float,
            own: tuple[float, float] | None = None) -> Resolution:
    """What would move a config ``diff`` from the best (the two configs of ``seeds`` seeds) out
    of the set that could be the best (Hsu's bound below 0) at 80% power among ``family``
    configs, if the true difference and seed variances were the observed ones: the fewest seeds
    per config n (both configs at n, at least as many as either has) at which
    :func:`pair_power` reaches :data:`POWER`: the pair's true variances the two configs' own
    ``own`` (their sample variances; None where either has one seed: the pool for both), their
    n seeds each pooled with the sweep's pooled seed variance ``pool`` on its ``pool_df`` as it
    stands (which counts the pair's present seeds twice: a sweep's pool is not told apart from a
    borrowed one here), the pair rule (:func:`~analysis.stats.critical.pair_seed_variance`) on
    each draw of the sample variances. The text states the rule at the observed variances: the
    larger of that pool and (s_a^2 + s_b^2) / 2 at n seeds each, so the standard error is
    sqrt(that x 2 / n).
    Scaling today's standard error by sqrt((2 / n) / (1 / n_a + 1 / n_b)) instead is right only
    for one variance over both: a 2-seed config of sd 0.01 beside a 4-seed one of sd 0.10 weights
    the noisy one by 1/4 today and 1/2 at n each, which named 73 seeds where the analysis had 62%
    power and 108 are needed (``bench/resolve_power.py``). A larger design is also a
    better-measured one: Welch's df grows with n."""
    diff = abs(diff)
    if diff == 0:
        return Resolution(0, math.inf, "the observed difference is 0: no number of seeds "
                          "would resolve it")
    n_a, n_b = seeds
    var_a, var_b = own if own is not None else (pool, pool)
    ratio = min(var_a, var_b) / max(var_a, var_b) if max(var_a, var_b) > 0 else 1.0

    def rule(n: int) -> tuple[float, bool, float]:
        """The pair rule at n seeds each at the observed variances: its variance, whether the
        pair's own, and the pool then (the pair's seeds pooled with the sweep's as it stands)."""
        joined = pool if math.isinf(pool_df) else (
            ((n - 1) * (var_a + var_b) + pool_df * pool) / (2 * (n - 1) + pool_df))
        variance, by_own = pair_seed_variance(var_a, n, var_b, n, joined)
        return float(variance), bool(by_own), joined

    def scaled(n: int) -> float:
        return math.sqrt(rule(n)[0] * 2 / n)

    @functools.cache
    def power(n: int) -> float:
        return pair_power(diff, n, family, (var_a, var_b), (pool, pool_df))

    # lo: a design known not to be enough (equal seeds: today's; unequal: one seed short of
    # the larger count, so that the larger count itself is tried); 2 seeds at the least
    lo = max(n_a, n_b, 2) - (n_a != n_b and max(n_a, n_b) > 2)
    hi = lo + 1
    while power(hi) < POWER and hi < MAX_RESOLVED_SEEDS:
        lo, hi = hi, min(2 * hi, MAX_RESOLVED_SEEDS)
    if power(hi) < POWER:
        return Resolution(hi, math.inf, f"a difference of {diff:.3f} would take more than "
                          f"{MAX_RESOLVED_SEEDS} seeds per config to resolve")
    while hi - lo > 1:  # the smallest n that is enough, between lo (not) and hi (enough)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if power(mid) >= POWER else (mid, hi)
    n = hi
    variance, rests_on_own, joined = rule(n)
    if own is None:
        source = "the pooled seed variance: a config of one seed has no own"
    elif rests_on_own:
        source = (f"the two configs' own seed variances {var_a:.3g} and {var_b:.3g} averaged, "
                  f"not below the pool's {joined:.3g} at {n} seeds each")
    else:
        source = (f"the pool's at {n} seeds each (their seeds pooled with the sweep's "
                  f"{pool:.3g}), larger than the two configs' own {var_a:.3g} and {var_b:.3g} "
                  "averaged")
    return Resolution(n, 2 * n / (n_a + n_b), (
        f"to show a difference of {diff:.3f} at {POWER:.0%} power among {family} configs: with {n} "
        f"seeds per config its standard error is sqrt({variance:.3g} x 2 / {n}) = "
        f"{scaled(n):.4f} ({source}), and Hsu's comparison with the best finds it with power "
        f"{power(n):.0%} (the pair rule averaged over the sample variances at {n} seeds each: "
        f"the pair's own on Welch's df, {own_df(n, ratio):g} on average, or the pool where "
        f"larger): {n} seeds per config"
        + (" (more seeds than a study usually runs)" if n > MANY_SEEDS else "")))
