"""Critical values and quantiles of the distributions the comparisons use: Student's t, Tukey's
studentized range, and the one-sided Dunnett (multivariate t) value of Hsu's comparisons with the
best, by quadrature; Welch's degrees of freedom of a pair of configs (:func:`welch_df`) and the
pair rule on them (:func:`pair_rule`), which the comparisons, the power stated before launch and
the race's simulated look read alike; and
Satterthwaite's of a pooled seed variance (:func:`pooled_df`), which the main effects are tested
on."""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from analysis.stats.levels import ALPHA
from analysis.stats.variance import IDENTICAL


@functools.lru_cache(maxsize=256)
def t_quantile(df: float) -> float:
    """Student's t quantile of a two-sided 95% interval on ``df`` degrees of freedom."""
    return float(special.stdtrit(df, 1 - ALPHA / 2))


@functools.lru_cache(maxsize=256)
def tukey_critical(k: int, df: float, alpha: float = ALPHA) -> float:
    """The Tukey-Kramer critical value of |difference| / its standard error for ``k`` >= 2
    configs on ``df`` degrees of freedom at family-wise error rate ``alpha``: the 1 - alpha
    quantile of the studentized range / sqrt(2): for 2 configs Student's two-sided quantile,
    taken directly (scipy's studentized range takes 0.1 s a value at a df that is not whole)."""
    if k == 2:
        return float(special.stdtrit(df, 1 - alpha / 2))
    from scipy import stats  # its import costs make plots a second: only where verdicts are made

    return float(stats.studentized_range.ppf(1 - alpha, k, df)) / math.sqrt(2)


def tukey_p(t: float, k: int, df: float) -> float:
    """The Tukey-Kramer adjusted p-value of a pair's |t| among ``k`` >= 2 configs (for 2,
    Student's two-sided p-value)."""
    if k == 2:
        return float(2 * special.stdtr(df, -abs(t)))
    from scipy import stats

    return float(stats.studentized_range.sf(abs(t) * math.sqrt(2), k, df))


def _max_normal_cdf(x: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """P(max_j Z_j <= x) for standard normals Z_j with correlations lambda_j lambda_l (one
    normal shared, Dunnett's structure), at each x: the one-dimensional integral over the shared
    normal by Gauss-Hermite quadrature (96 nodes); equal lambdas are one factor to a power."""
    nodes, weights = _HERMITE
    values, counts = np.unique(lambdas, return_counts=True)
    spread = np.sqrt(1 - values ** 2)
    args = (x[:, None, None] - values[None, :, None] * nodes[None, None, :]) / spread[None, :, None]
    return np.prod(special.ndtr(args) ** counts[None, :, None], axis=1) @ weights


_HERMITE = (lambda n, w: (n, w / math.sqrt(2 * math.pi)))(*np.polynomial.hermite_e.hermegauss(96))
_LEGENDRE = (lambda n, w: ((n + 1) / 2, w / 2))(*np.polynomial.legendre.leggauss(256))
"""Gauss-Legendre nodes and weights on (0, 1): the t's scale is integrated over its quantiles."""


@functools.lru_cache(maxsize=1024)
def mcb_critical(lambdas: tuple[float, ...], df: float, alpha: float = ALPHA) -> float:
    """Hsu's multiple comparisons with the best: the one-sided Dunnett critical value d of one
    config's comparisons with each of the others, at family-wise error rate ``alpha`` on ``df``
    degrees of freedom: P(max_j T_j <= d) = 1 - alpha for T multivariate t whose correlations
    are lambda_j lambda_l, ``lambdas`` each other config's sqrt(n_j / (n_i + n_j)) (n: seeds;
    0.5 for every pair where seeds are equal). One comparison: Student's one-sided quantile. The
    t's mixing over its scale s = sqrt(chi2_df / df) is integrated over s's quantiles u in (0, 1)
    by Gauss-Legendre quadrature (256 nodes; within 1e-5 of adaptive quadrature from 1 df up, a
    few ms a value where adaptive quadrature took 0.3 s with 72 comparisons)."""
    from scipy import optimize, stats

    lam = np.asarray(lambdas, dtype=float)
    if len(lam) == 1:
        return float(special.stdtrit(df, 1 - alpha))
    if math.isfinite(df):
        nodes, weights = _LEGENDRE
        scales = stats.chi.ppf(nodes, df, scale=1 / math.sqrt(df))
    else:
        scales, weights = np.ones(1), np.ones(1)

    def coverage(d: float) -> float:
        return float(_max_normal_cdf(d * scales, lam) @ weights)

    # d lies between one comparison's quantile and Bonferroni's over the k - 1 (positively
    # correlated comparisons); the bracket widens only where the quadrature says otherwise
    low = float(special.stdtrit(df, 1 - alpha)) if math.isfinite(df) else float(special.ndtri(1 - alpha))
    high = (float(special.stdtrit(df, 1 - alpha / len(lam))) if math.isfinite(df)
            else float(special.ndtri(1 - alpha / len(lam))))
    def excess(d: float) -> float:
        return coverage(d) - (1 - alpha)

    try:
        return float(optimize.brentq(excess, low, high, xtol=1e-7))
    except ValueError:  # the quadrature put d just outside the bracket
        while excess(high) < 0:
            high *= 2
        return float(optimize.brentq(excess, 0.0, high, xtol=1e-7))


EXACT_DF = 30.0
"""The df up to which :func:`mcb_critical_values` takes each df's critical value exactly."""
_CURVE_DF = EXACT_DF * 2.0 ** (np.arange(41) / 4)
"""The df (30 to 30720, a quarter-octave apart) :func:`mcb_critical_values` interpolates between."""


@functools.lru_cache(maxsize=64)
def _critical_curve(lambdas: tuple[float, ...], alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """1 / df at ``_CURVE_DF`` and infinity (0), and :func:`mcb_critical` there, 1 / df rising."""
    inverse = np.append(0.0, 1 / _CURVE_DF[::-1])
    values = np.array([mcb_critical(lambdas, 1 / x if x > 0 else math.inf, alpha) for x in inverse])
    return inverse, values


def mcb_critical_values(lambdas: tuple[float, ...], dfs: ArrayLike,
                        alpha: float = ALPHA) -> np.ndarray:
    """:func:`mcb_critical` at each of ``dfs`` (an array; inf allowed), of the shape of ``dfs``:
    exact at each distinct df up to :data:`EXACT_DF`; above it linear in 1 / df between the exact
    values a quarter-octave apart and at infinite df: within 3e-5 of exact at ``alpha`` 5%, 3e-4
    at 0.1% (3 and 9 comparisons; a power moves by under a third of that), so that averaging over
    thousands of sampled df (Welch's df of a pair of 100 seeds each takes some 80 distinct
    tenths) costs some 40 quadratures once, not one a df."""
    dfs = np.asarray(dfs, dtype=float)
    distinct, where = np.unique(dfs, return_inverse=True)
    values = np.empty(len(distinct))
    small = distinct <= EXACT_DF
    values[small] = [mcb_critical(lambdas, float(df), alpha) for df in distinct[small]]
    if not small.all():
        inverse, curve = _critical_curve(lambdas, alpha)
        values[~small] = np.interp(1 / distinct[~small], inverse, curve)
    return values[where].reshape(dfs.shape)


TWO_SEED_SHRINK = 3
"""The power by which a pair with a 2-seed config shrinks Welch's df towards 1 (:func:`welch_df`)."""
THREE_SEED_SHRINK = 2
"""The power by which a pair whose smaller config has 3 seeds shrinks Welch's df towards 2 (that
config's n - 1, :func:`welch_df`), as :data:`ANOVA_SHRINK` shrinks the pool's: unshrunk, two
equal configs were called different in 5.5-5.7% of sweeps of 3 seeds each and 5.5-5.8% of 3
seeds beside 5 at seed-sd ratios 4-10 (``bench/pair_rule_scan.py``, docs/explanations/how-sure.md)."""


def welch_df(variance_a: ArrayLike, n_a: ArrayLike, variance_b: ArrayLike, n_b: ArrayLike,
             floored: bool = True) -> np.ndarray:
    """The df of a difference of two configs' means, seed variances ``variance_a`` and
    ``variance_b`` over ``n_a`` and ``n_b`` (>= 2) seeds: the Welch-Satterthwaite df w = (v_a /
    n_a + v_b / n_b)^2 / sum_i (v_i / n_i)^2 / (n_i - 1), between the smaller config's n - 1 and
    n_a + n_b - 2 (lo and hi); where the smaller config has 2 seeds, lo + (hi - lo) x ((w - lo) /
    (hi - lo))^``TWO_SEED_SHRINK``: a 2-seed variance (1 df) is so uncertain that w comes out
    large just where the t is large, and Welch's test of 2 seeds a config calls 5.8-6.0% of
    equal pairs different at sd ratios 10-20 (2.1% at 1); shrunk, 1.3-4.9% at ratios 1-100
    (``bench/unequal_variance_calibration.py --two-seeds``). Where it has 3 seeds, the same
    shrink towards 2 by ``THREE_SEED_SHRINK``: unshrunk, 5.5-5.7% of equal pairs of 3 seeds each
    at sd ratios 4-10; shrunk, 2.8-5.0% at ratios 1-10 (5.3% at 100, where the df is already 2:
    the bench's sampling error, 4.8-4.9% on three other seeds; ``bench/pair_rule_scan.py``). 4
    seeds and more: Welch's df unshrunk. Rounded down to a tenth (so that
    critical values cache) unless ``floored`` is False; elementwise over arrays (a 0-d array for
    scalars). The one rule for a pair's own df: the pair rule (:func:`pair_rule`, which the
    comparisons, the race's simulated look and the power stated before launch read) and
    ``analysis.stats.power.own_df`` read it."""
    a = np.asarray(variance_a, dtype=float) / n_a
    b = np.asarray(variance_b, dtype=float) / n_b
    n_a, n_b = np.asarray(n_a), np.asarray(n_b)
    df = (a + b) ** 2 / (a ** 2 / (n_a - 1) + b ** 2 / (n_b - 1))
    lo, hi = np.minimum(n_a, n_b) - 1, n_a + n_b - 2
    df = np.where(lo == 1, shrunk_df(df, lo, hi, TWO_SEED_SHRINK),
                  np.where(lo == 2, shrunk_df(df, lo, hi, THREE_SEED_SHRINK), df))
    return _tenth_below(df) if floored else df


def shrunk_df(df: ArrayLike, lo: ArrayLike, hi: ArrayLike, power: float) -> np.ndarray:
    """A Satterthwaite df ``df`` between its bounds ``lo`` (one config's df alone) and ``hi``
    (the configs' summed df) shrunk towards ``lo``: lo + (hi - lo) x ((df - lo) / (hi - lo))^``power``
    (``df`` where hi <= lo). An estimated df comes out large where the few-df variances it rests
    on happen to be alike, which is also where the noisier config's variance, and so the test's
    denominator, happens to be small: the test on it is liberal. The one shrink of
    :func:`welch_df` (2 and 3 seeds) and :func:`anova_df`; elementwise over arrays."""
    df, lo, hi = (np.asarray(x, dtype=float) for x in (df, lo, hi))
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.clip((df - lo) / (hi - lo), 0, 1)
    return np.where(hi > lo, lo + (hi - lo) * share ** power, df)


ANOVA_SHRINK = 2
"""The power by which :func:`anova_df` shrinks Satterthwaite's df of the pool towards the
smallest config's df (:func:`shrunk_df`): one config 10x noisier than the other two of a key calls
the key significant in 6.9% / 6.2% of equal sweeps of 2 / 3 seeds unshrunk, 4.2% / 4.7% shrunk
by 2 (``bench/main_effect_calibration.py``, docs/explanations/how-sure.md)."""


def anova_df(variances: ArrayLike, dfs: ArrayLike) -> np.ndarray:
    """The denominator df of the main effects' F tests (``analysis.stats.effects.anova_error``)
    over configs of seed variances ``variances`` (last axis) on ``dfs``: Satterthwaite's df of their
    pool (:func:`pooled_df`, unrounded) shrunk by :func:`shrunk_df` at :data:`ANOVA_SHRINK` towards
    the smallest df of a config that varies (its bound where that config's variance outweighs the
    others'), up from there to their sum; rounded down to a tenth; NaN where no config varies.
    The one rule the ANOVA and the power stated before launch
    (``analysis.stats.power.power_main_effect``) read."""
    s2 = np.asarray(variances, dtype=float)
    nu = np.broadcast_to(np.asarray(dfs, dtype=float), s2.shape)
    varying = (s2 > 0) & (nu > 0)
    lo = np.where(varying, nu, np.inf).min(axis=-1)
    hi = np.where(varying, nu, 0.0).sum(axis=-1)
    return _tenth_below(shrunk_df(pooled_df(s2, nu, floored=False), lo, hi, ANOVA_SHRINK))


def mehrotra_df(level_variances: ArrayLike) -> np.ndarray:
    """The numerator df of a key's F test in a balanced grid (Box's approximation: Mehrotra's
    1997 correction of Brown and Forsythe's test), from ``level_variances`` (last axis: a level's
    seed variance, the mean of its configs'; equal runs a level): ((L - 1) sum V)^2 /
    ((L^2 - 2L) sum V^2 + (sum V)^2) over the L levels. L - 1 where the levels' variances are
    equal, towards 1 as one level's outweighs the others'. The closed form of
    ``analysis.stats.effects.box_df`` for a balanced grid's main effect, which the power stated
    before launch reads; unrounded, elementwise over the leading axes."""
    v = np.asarray(level_variances, dtype=float)
    levels = v.shape[-1]
    total = v.sum(axis=-1)
    return ((levels - 1) * total) ** 2 / ((levels ** 2 - 2 * levels) * (v ** 2).sum(axis=-1)
                                          + total ** 2)


def pair_seed_variance(variance_a: ArrayLike, n_a: ArrayLike, variance_b: ArrayLike,
                       n_b: ArrayLike, pool: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """The pair rule's per-seed variance of two configs of seed variances ``variance_a`` and
    ``variance_b`` over ``n_a`` and ``n_b`` (>= 2) seeds, beside the sweep's pooled ``pool``:
    the larger of the pool and the pair's own (Welch's variance of the difference, v_a / n_a +
    v_b / n_b, over 1 / n_a + 1 / n_b; at n seeds each (v_a + v_b) / 2), and whether it is the
    pair's own (then on :func:`welch_df`, else on the pool's df; a tie is the pair's own; an own
    variance of 0 never is); elementwise over arrays (0-d arrays for scalars). The one rule the
    comparisons (``analysis.stats.comparisons.pair_variance``), "what would decide" and the power
    stated before launch (``analysis.stats.power.pair_power``, over sampled variances) read."""
    n_a, n_b = np.asarray(n_a, dtype=float), np.asarray(n_b, dtype=float)
    own = (np.asarray(variance_a, dtype=float) / n_a + np.asarray(variance_b, dtype=float) / n_b
           ) / (1 / n_a + 1 / n_b)
    pool = np.asarray(pool, dtype=float)
    by_own = (own > 0) & (own >= pool * (1 - 1e-9))
    return np.where(by_own, own, pool), by_own


def pair_rule(variance_a: ArrayLike, n_a: ArrayLike, variance_b: ArrayLike, n_b: ArrayLike,
              pool: ArrayLike, pool_df: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pair rule of two configs of seed variances ``variance_a`` and ``variance_b`` over
    ``n_a`` and ``n_b`` (>= 2) seeds beside the sweep's pooled ``pool`` on ``pool_df``: the
    per-seed variance a comparison of the two rests on (:func:`pair_seed_variance`), the df it
    is tested on, and whether it rests on the pair's own variance: the own on :func:`welch_df`
    (w); the pool on ``pool_df``, or on min(``pool_df``, w) where the seed counts differ. The
    pool weights each config by its df, so it underweights the config of fewer seeds: where
    that config's variance comes out small by chance (its t then large) the pool exceeds the
    pair's own and, on the pool's many df, two equal configs (2 seeds of sd 1 beside 5-seed
    configs of sd 0.25) were called different in 10.8% of sweeps; on no more than the pair's
    own df, 5.1% at most beside configs of 3 or 5 seeds (``bench/pair_rule_scan.py``,
    docs/explanations/how-sure.md). Equal seed counts (the race's looks, the power stated
    before launch) rest on the pool's df as before; so does a pair neither config of which
    varies (both variances at most ``analysis.stats.variance.IDENTICAL``: w is then 0 / 0, or
    rounding's). Elementwise over arrays (0-d arrays for scalars). The one rule the
    comparisons (``analysis.stats.comparisons.pair_variance``), the race's simulated look
    (``analysis.decisions.race.boundary.look``) and the power stated before launch
    (``analysis.stats.power.pair_power``) read."""
    variance, by_own = pair_seed_variance(variance_a, n_a, variance_b, n_b, pool)
    with np.errstate(invalid="ignore", divide="ignore"):  # no own variance: NaN, on the pool
        welch = welch_df(variance_a, n_a, variance_b, n_b)
    pool_df = np.asarray(pool_df, dtype=float)
    capped = ((np.asarray(n_a) != np.asarray(n_b))
              & ((np.asarray(variance_a) > IDENTICAL) | (np.asarray(variance_b) > IDENTICAL)))
    on_pool = np.where(capped, np.fmin(pool_df, welch), pool_df)
    return variance, np.where(by_own, welch, on_pool), by_own


def pooled_df(variances: ArrayLike, dfs: ArrayLike, floored: bool = True) -> np.ndarray:
    """Satterthwaite's df of a seed variance pooled over configs, sum_j nu_j s_j^2 / sum_j nu_j,
    from each config's own variance ``variances`` (s_j^2, one a config along the last axis) on
    ``dfs`` (nu_j = its seeds - 1; configs of one seed have 0 and count for nothing):
    (sum_j nu_j s_j^2)^2 / sum_j nu_j s_j^4, rounded down to a tenth as :func:`welch_df` is;
    elementwise over the leading axes (a 0-d array for one pool). It is the pooled df
    sum_j nu_j where the variances are equal and falls to one config's nu_j as that config's
    variance outweighs the others' (configs at a floor, s_j = 0, add nothing to it); for two
    configs of equal seeds it is Welch's df (:func:`welch_df` of 3 or more seeds; at 2 seeds
    :func:`welch_df` shrinks it towards 1, this does not). Over a balanced grid the F of a main effect
    against the pool on this df is Brown and Forsythe's (1974) test of equal means under unequal
    variances (statsmodels' ``anova_oneway(use_var="bf")``, its ``df2``, for one key). NaN where
    no config varies; unrounded where ``floored`` is False. The main effects test on it shrunk
    (:func:`anova_df`)."""
    s2 = np.asarray(variances, dtype=float)
    weighted = np.asarray(dfs, dtype=float) * s2
    squares = (weighted * s2).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(squares > 0, weighted.sum(axis=-1) ** 2 / squares, math.nan)
    return _tenth_below(df) if floored else df


def _tenth_below(df: ArrayLike) -> np.ndarray:
    """``df`` rounded down to a tenth (a hair above a tenth, as floating point gives it, kept)."""
    return np.floor(np.round(10 * np.asarray(df, dtype=float), 6)) / 10
