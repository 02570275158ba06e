"""How sure a sweep's answer is: a 95% interval on each config's validation reward, simultaneous
comparisons of configs (against the best one and the on-policy baseline), the set of configs that
could still be the best, and the data it would take to tell two configs apart. Pure statistics over
arrays (scipy); the data and the choice of the seed variance's source come from
:mod:`analysis.aggregate`.

Each run contributes its criterion value (the mean validation reward of its last evaluations, see
``analysis.aggregate.LATE_EVALS``) and, where its ``eval_outcomes/`` files are readable, the same
mean problem by problem: a vector over the N validation problems (``ConfigData.problems``, one row
per seed). Two sources of noise: which validation problems were drawn (their difficulty), and how
the run went (the seed: data order, sampling, initialisation, and the sampled evaluation
responses). A config's value y = mu + a_seed + b_problems + e: the seed term does not cancel
between configs, the problem term does (every config is evaluated on the same problems).

**The seed variance** (:class:`SeedVariance`): the variance of one run's value between seeds of a
config, from the best source the sweep has (:func:`analysis.aggregate.rank` chooses, in this order):
``seeds`` (pooled over the configs with two or more seeds: df = runs - configs), ``additive`` (a
one-seed factorial grid: the residual mean square of the additive model of the swept keys,
:mod:`analysis.effects`; it holds any interaction too, so it errs on the safe side),
``borrowed`` (an earlier multi-seed sweep of the same model, data, problems and evaluation steps;
inflated to its upper 95% bound, :func:`upper_bound_factor`, where this sweep ran training
settings it did not),
``additive+borrowed`` (the two pooled by their df where an F test with the power to see a 2x
difference finds them in agreement; else the larger where they disagree, the grid's residual
where the test lacks that power: :func:`combine`), or ``none``. Without a usable variance (none, or 0: identical values) no
config-level verdict is given: the comparisons are **undecided**.

**Comparisons** (:func:`compare_sweep`): every pair of ranked configs evaluated on the same
problems gets a Tukey-Kramer simultaneous 95% interval (the studentized range of
``scipy.stats.studentized_range`` over the ranked configs, on the variance's df): at most 5% of
sweeps hold a false **better**/**worse** among all of them, whatever pairs the report shows.
Seed variances differ across a sweep (a config at a reward floor hardly varies), so each pair
rests on the larger of the sweep's variance and the two configs' own pooled variance, each on
its own df (:func:`pair_variance`), which keeps that 5% where one pooled variance does not. A
config **could be the best** while Hsu's constrained multiple comparisons with the best (Hsu
1996, ch. 4; :func:`best_bounds`) keep it: the simultaneous upper bound of its mean minus the
largest of the others, min over j of mean_i - mean_j + d_i se_ij, is >= 0, d_i the one-sided
Dunnett critical value of its k - 1 comparisons on the df of pair ij's variance
(:func:`mcb_critical`: the multivariate t of their correlations, which unequal seed counts
change). With probability 95% the truly best
config is in that set; its half-width is about 0.7 of Tukey's (2.87 against 4.08 standard errors
for 9 configs on 8 df), and the set is a subset of the configs Tukey's intervals do not show
worse than the best. The set is what the chain, ``promote``, the race and the report carry as
near-ties, and a verdict never disagrees with its interval. Pairs evaluated on other problems
(outcome digests or problem sets that differ) are not compared.

**A config's own interval** (:func:`estimate`): its mean over S seeds and N problems varies by
sigma_seed^2 / S + sigma_problem^2 / N + sigma_e^2 / (S N). The seed variance V1 estimates
sigma_seed^2 + sigma_e^2 / N; the variance of the per-problem means V2 estimates sigma_problem^2 +
sigma_e^2 / S; the seed-by-problem mean square V3 (pooled over configs with 2+ seeds) estimates
sigma_e^2. So the variance is V1 / S + max(V2 - V3 / S, 0) / N (the seed-by-problem term counted
once), with Satterthwaite's degrees of freedom; without V3 (no config has 2 seeds) the term is
counted twice, which errs on the wide side.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import special

ALPHA = 0.05
"""Level of every interval (95%) and of the family-wise error rate of the verdicts."""
POWER = 0.8
"""Power at which `resolve` sizes the data that would tell two configs apart."""
IDENTICAL = 1e-12
"""A seed variance at or below it (a seed sd of 1e-6 reward) is 0 up to rounding: every seed gave
the same value, a degenerate estimate."""
MANY_SEEDS = 10
"""Seeds per config beyond which `resolve` says the difference is too small to be worth it."""
MAX_RESOLVED_SEEDS = 1000
"""The most seeds per config `resolve` searches."""
Source = Literal["seeds", "additive", "borrowed", "additive+borrowed", "none"]
Verdict = Literal["better", "worse", "not distinguishable", "undecided", "no interval"]
FAMILY_TEXT = ("Tukey-Kramer simultaneous 95% intervals over every pair of ranked configs, each "
               "pair on the larger of the pooled seed variance and the two configs' own (on its "
               "own df): at most 5% of sweeps call a difference that is not there")


@dataclass(frozen=True)
class ConfigData:
    """One config's data at the compared step: ``seed_values`` each run's criterion value (S,);
    ``problems`` each run's per-problem value (S, N), None unless every run has them for the same
    problems (``digest``); ``problem_set`` names what was evaluated as the runs' configs say
    (data and number of problems: configs of different sets are not compared); ``samples``
    responses per problem per evaluation; ``n_evals`` the fewest evaluations a run averages."""

    label: str
    seed_values: np.ndarray
    problems: np.ndarray | None = None
    digest: str | None = None
    samples: int = 1
    n_evals: int = 1
    problem_set: str = ""

    @property
    def n_seeds(self) -> int:
        return len(self.seed_values)

    @property
    def n_problems(self) -> int:
        return 0 if self.problems is None else self.problems.shape[1]

    @property
    def mean(self) -> float:
        return float(np.mean(self.seed_values))


def comparable(a: ConfigData, b: ConfigData) -> bool:
    """Whether ``a`` and ``b`` were evaluated on the same problems (same problem set, and the same
    outcome digest where both have one)."""
    return a.problem_set == b.problem_set and (a.digest is None or b.digest is None
                                               or a.digest == b.digest)


@dataclass(frozen=True)
class SeedVariance:
    """The seed-to-seed variance of one run's value, its degrees of freedom ``df``, where it comes
    from (``source``, in words: ``text``) and what was found on the way (``notes``: the
    non-additivity test, the F test of agreement, why a source was not used)."""

    variance: float
    df: float
    source: Source
    text: str
    notes: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        """A variance comparisons can use: a source, degrees of freedom and a positive value."""
        return (self.source != "none" and self.df > 0 and math.isfinite(self.variance)
                and self.variance > IDENTICAL)

    @property
    def degenerate(self) -> bool:
        """Measured, but 0 up to rounding (:data:`IDENTICAL`): every seed gave the same value
        (no interval can be honest)."""
        return self.source != "none" and self.df > 0 and 0 <= self.variance <= IDENTICAL

    def describe(self) -> str:
        """``seed sd 0.0123 (variance 0.000151) from seeds in this sweep (9 df)``, or why there
        is none."""
        if self.source == "none":
            return f"none: {self.text}"
        if self.degenerate:
            return (f"seed variance 0 from {self.text} ({_df(self.df)} df): every seed gave the same "
                    "value, a degenerate estimate; no interval")
        return (f"seed sd {math.sqrt(self.variance):.4f} (variance {self.variance:.3g}) from "
                f"{self.text} ({_df(self.df)} df)")

    def with_notes(self, *notes: str) -> SeedVariance:
        return SeedVariance(self.variance, self.df, self.source, self.text, (*self.notes, *notes))

    @staticmethod
    def pooled(configs: Sequence[ConfigData]) -> SeedVariance:
        """Sum over configs of squared deviations of seed values from their config's mean, over
        the runs - configs degrees of freedom (source ``none`` when no config has two seeds)."""
        df = sum(c.n_seeds - 1 for c in configs)
        if df == 0:
            return SeedVariance.missing("one seed per config")
        squares = sum(float(np.sum((c.seed_values - c.seed_values.mean()) ** 2)) for c in configs)
        with_seeds = sum(c.n_seeds > 1 for c in configs)
        return SeedVariance(squares / df, df, "seeds",
                            f"seeds in this sweep, pooled over the {with_seeds} config"
                            f"{'s' if with_seeds != 1 else ''} with 2 or more")

    @staticmethod
    def missing(why: str) -> SeedVariance:
        return SeedVariance(math.nan, 0, "none", why)


def _df(df: float) -> str:
    return f"{df:.0f}" if float(df).is_integer() else f"{df:.1f}"


def upper_bound_factor(df: float, alpha: float = ALPHA) -> float:
    """What a variance estimated on ``df`` degrees of freedom is multiplied by to give its
    one-sided upper 1 - ``alpha`` confidence bound: df / chi2_alpha(df) (2.54 on 10 df)."""
    return float(df / special.chdtri(df, 1 - alpha))


AGREEMENT_RATIO = 2.0
"""The ratio of two seed variances the F test before pooling must be able to see (:func:`combine`)."""


def agreement_power(df_a: float, df_b: float, ratio: float = AGREEMENT_RATIO) -> float:
    """The power of the two-sided F test at ``ALPHA`` of two variances on (``df_a``, ``df_b``)
    df when one is ``ratio`` times the other, either way round (the smaller of the two powers):
    P(F > u / r) + P(F < l / r) for F on (df_a, df_b), u and l its critical values, r = ratio
    and 1 / ratio. On (4, 10) df at a ratio of 2: 14% where the first is the larger, 8.5% the
    other way round; 80% takes about 65 df each."""
    upper = special.fdtri(df_a, df_b, 1 - ALPHA / 2)
    lower = special.fdtri(df_a, df_b, ALPHA / 2)
    return float(min(special.fdtrc(df_a, df_b, upper / r) + special.fdtr(df_a, df_b, lower / r)
                     for r in (ratio, 1 / ratio)))


def combine(additive: SeedVariance, borrowed: SeedVariance) -> SeedVariance:
    """``additive`` and ``borrowed`` pooled, weighted by their degrees of freedom, only where a
    two-sided F test (their ratio on (df, df)) does not reject that they are one variance at
    ``ALPHA`` and would have seen a 2x difference at :data:`POWER` (:func:`agreement_power`).
    Where it rejects, the larger of the two (the safe side); where it has not that power, the
    grid's own residual: a test of 4 and 10 df passes a borrowed variance 4x too small in most
    sweeps (its silence is no agreement), and the larger of the two would cost power the
    residual alone keeps (``bench/borrowed_variance_calibration.py``). Each says why."""
    ratio = additive.variance / borrowed.variance
    below = float(special.fdtr(additive.df, borrowed.df, ratio))
    p = 2 * min(below, 1 - below)
    test = f"F = {ratio:.2f} on ({_df(additive.df)}, {_df(borrowed.df)}) df, p {_p(p)}"
    both = (f"the grid's additive residual ({additive.variance:.3g}) and the borrowed variance "
            f"({borrowed.variance:.3g})")
    if p < ALPHA:
        larger = max((additive, borrowed), key=lambda v: v.variance)
        return larger.with_notes(
            f"{both} disagree ({test}): the larger, from {larger.text}, is used")
    power = agreement_power(additive.df, borrowed.df)
    if power < POWER:
        return additive.with_notes(
            f"{both} are not shown to agree (the test would see a {AGREEMENT_RATIO:g}x difference "
            f"with power {power:.0%} only, under {POWER:.0%}; {test}): the grid's own residual "
            "is used")
    df = additive.df + borrowed.df
    return SeedVariance((additive.df * additive.variance + borrowed.df * borrowed.variance) / df,
                        df, "additive+borrowed", f"{additive.text} pooled with {borrowed.text}",
                        (*additive.notes, *borrowed.notes,
                         f"the two agree ({test}): pooled, weighted by their df"))


@dataclass(frozen=True)
class Estimate:
    """A config's value (``mean`` over seeds) with its 95% interval ``[lo, hi]`` (NaN: none) on
    ``df`` degrees of freedom, within the 0-1 range of a reward."""

    mean: float
    lo: float
    hi: float
    n_seeds: int
    n_problems: int
    df: float = math.nan
    seed_sd: float = math.nan
    """The sd of the config's own seeds (NaN with one seed), beside the pooled one its interval
    rests on: where the configs' sds differ, the pooled variance is their average."""

    def interval(self) -> str:
        """``[0.381, 0.443]``, or empty where there is none."""
        return "" if math.isnan(self.lo) else f"[{self.lo:.3f}, {self.hi:.3f}]"

    def describe(self) -> str:
        """``0.412 [0.381, 0.443]`` (``0.412 [no interval]``)."""
        return f"{self.mean:.3f} {self.interval() or '[no interval]'}"


def problem_error(configs: Sequence[ConfigData]) -> tuple[float, float]:
    """The seed-by-problem mean square (sigma_e^2) and its df, pooled over the configs with two or
    more seeds and per-problem outcomes: the residual of each config's seeds x problems table
    (two-way, one value a cell); (NaN, 0) where no config has them."""
    squares, df = 0.0, 0
    for c in configs:
        if c.problems is None or c.n_seeds < 2 or c.n_problems < 2:
            continue
        p = c.problems
        residual = p - p.mean(axis=1, keepdims=True) - p.mean(axis=0, keepdims=True) + p.mean()
        squares += float(np.sum(residual ** 2))
        df += (c.n_seeds - 1) * (c.n_problems - 1)
    return (squares / df, df) if df else (math.nan, 0)


def estimate(config: ConfigData, seeds: SeedVariance,
             error: tuple[float, float] = (math.nan, 0)) -> Estimate:
    """``config``'s value with a 95% interval covering the seed and the problem variance (module
    docstring; ``error``: :func:`problem_error`), on Satterthwaite's degrees of freedom; no
    interval without a usable seed variance."""
    mean, s = config.mean, config.n_seeds
    own = float(np.std(config.seed_values, ddof=1)) if s > 1 else math.nan
    if not seeds.usable:
        return Estimate(mean, math.nan, math.nan, s, config.n_problems, seed_sd=own)
    terms = [(seeds.variance / s, seeds.df)]  # (a component of the variance, its df)
    if config.problems is not None and config.n_problems > 1:
        n = config.n_problems
        between = float(np.var(config.problems.mean(axis=0), ddof=1))
        ms_error, error_df = error
        if error_df > 0 and between - ms_error / s > 0:
            terms += [(between / n, n - 1), (-ms_error / (s * n), error_df)]
        elif error_df == 0:  # sigma_e^2 unknown: counted in both components (wider)
            terms.append((between / n, n - 1))
    variance = sum(v for v, _ in terms)
    df = variance ** 2 / sum(v ** 2 / d for v, d in terms)
    half = t_quantile(df) * math.sqrt(variance)
    return Estimate(mean, max(mean - half, 0.0), min(mean + half, 1.0), s, config.n_problems, df, own)


def equal_variance_test(configs: Sequence[ConfigData]) -> str:
    """Brown-Forsythe's test that the configs with two or more seeds share one seed variance
    (``scipy.stats.levene``, median-centred), in words; why there is none where fewer than two
    configs have seeds or none of them vary."""
    from scipy import stats

    seeded = [c for c in configs if c.n_seeds > 1]
    if len(seeded) < 2 or all(np.ptp(c.seed_values) == 0 for c in seeded):
        return "no test of equal seed variances (fewer than two configs whose seeds vary)"
    with np.errstate(divide="ignore", invalid="ignore"):
        result = stats.levene(*(c.seed_values for c in seeded), center="median")
    if not math.isfinite(result.statistic):  # every seed as far from its config's median
        return "no test of equal seed variances (Brown-Forsythe is undefined for these seeds)"
    verdict = ("the configs' seed variances differ: the pooled variance is their average, too "
               "wide for some comparisons and too narrow for others" if result.pvalue < ALPHA
               else "no sign that they differ (a test of little power with few seeds)")
    return (f"equal seed variances, Brown-Forsythe over the {len(seeded)} configs with 2 or more "
            f"seeds: W = {result.statistic:.2f}, p {_p(float(result.pvalue))}: {verdict}")


@dataclass(frozen=True)
class PairTest:
    """``a`` minus ``b``: the difference, its unadjusted 95% interval, standard error and
    two-sided p-value on ``df`` degrees of freedom (the pair's variance: :func:`pair_variance`)."""

    diff: float
    lo: float
    hi: float
    se: float
    p_value: float
    df: float


def pair_variance(a: ConfigData, b: ConfigData, seeds: SeedVariance) -> tuple[float, float]:
    """The seed variance (and its df) a comparison of ``a`` and ``b`` rests on: the sweep's
    ``seeds`` (usable), or the two configs' own seed variance pooled over just the two (df
    n_a + n_b - 2) where that is larger, on its own df. Seed variances differ across a
    learning-rate sweep (configs at a floor vary little); the sweep's pool then understates the
    learning configs' and calls differences between them that are not there (9% of all-equal
    sweeps of 6 learning and 3 near-floor configs, 3 seeds each). The larger of the two, each on
    its own df, holds that at 5% and costs power only where the pair's own estimate happens to
    be the larger (``bench/unequal_variance_calibration.py``, README)."""
    if a.n_seeds > 1 and b.n_seeds > 1:
        own = SeedVariance.pooled([a, b])
        if own.variance > seeds.variance:
            return own.variance, float(own.df)
    return seeds.variance, float(seeds.df)


def pair_test(a: ConfigData, b: ConfigData, seeds: SeedVariance) -> PairTest | None:
    """``a`` minus ``b`` on the pair's seed variance (:func:`pair_variance`; Student's t); None
    when the two cannot be compared (other problems, or no usable variance)."""
    if not seeds.usable or not comparable(a, b):
        return None
    diff = a.mean - b.mean
    variance, df = pair_variance(a, b, seeds)
    se = math.sqrt(variance * (1 / a.n_seeds + 1 / b.n_seeds))
    half = t_quantile(df) * se
    p = float(2 * special.stdtr(df, -abs(diff / se)))
    return PairTest(diff, diff - half, diff + half, se, p, df)


@functools.lru_cache(maxsize=256)
def t_quantile(df: float) -> float:
    """Student's t quantile of a two-sided 95% interval on ``df`` degrees of freedom."""
    return float(special.stdtrit(df, 1 - ALPHA / 2))


@functools.lru_cache(maxsize=256)
def tukey_critical(k: int, df: float, alpha: float = ALPHA) -> float:
    """The Tukey-Kramer critical value of |difference| / its standard error for ``k`` >= 2
    configs on ``df`` degrees of freedom at family-wise error rate ``alpha``: the 1 - alpha
    quantile of the studentized range / sqrt(2) (Student's t quantile for 2)."""
    from scipy import stats  # its import costs make plots a second: only where verdicts are made

    return float(stats.studentized_range.ppf(1 - alpha, k, df)) / math.sqrt(2)


def tukey_p(t: float, k: int, df: float) -> float:
    """The Tukey-Kramer adjusted p-value of a pair's |t| among ``k`` >= 2 configs."""
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

    return float(optimize.brentq(lambda d: coverage(d) - (1 - alpha), 0.0, 50.0, xtol=1e-7))


@dataclass(frozen=True)
class BestBound:
    """Hsu's constrained multiple comparisons with the best for one config: ``upper`` the
    simultaneous upper bound of its mean minus the largest mean of the others (min over j of
    mean_i - mean_j + d se_ij), ``critical`` its one-sided critical value d, ``against`` the
    config that bound is set by. The config could be the best while ``upper`` >= 0."""

    config: str
    upper: float
    critical: float
    against: str
    alpha: float = ALPHA

    def describe(self) -> str:
        """``below the best: its mean minus the best other's is at most -0.012 (Hsu's
        comparisons with the best, simultaneous 95%, one-sided critical value 2.21)``."""
        return (f"below the best: its mean minus {self.against}'s is at most {self.upper:+.3f} "
                f"(Hsu's comparisons with the best, simultaneous {level_text(self.alpha)}, "
                f"one-sided critical value {self.critical:.2f})")


def best_bounds(configs: Sequence[ConfigData], seeds: SeedVariance,
                alpha: float = ALPHA) -> dict[str, BestBound]:
    """Each config's :class:`BestBound` against the others it can be compared with (the same
    problems), on the seed variance ``seeds`` (usable); configs with none have no bound."""
    bounds = {}
    for c in configs:
        others = [o for o in configs if o.label != c.label and comparable(c, o)]
        if not others:
            continue
        lambdas = tuple(sorted(round(math.sqrt(o.n_seeds / (c.n_seeds + o.n_seeds)), 6)
                               for o in others))
        limits = []
        for o in others:
            variance, df = pair_variance(c, o, seeds)
            d = mcb_critical(lambdas, df, alpha)
            limits.append((c.mean - o.mean + d * math.sqrt(variance * (1 / c.n_seeds + 1 / o.n_seeds)),
                           o.label, d))
        upper, against, d = min(limits)
        bounds[c.label] = BestBound(c.label, upper, d, against, alpha)
    return bounds


@dataclass(frozen=True)
class Comparison:
    """``config`` minus ``reference`` (``role``: ``best`` or ``on-policy``) at ``step``: the
    difference, its simultaneous 95% interval, its standard error, the unadjusted and the
    Tukey-adjusted p-value and the verdict, on the seed variance of ``source`` (``df``);
    ``why`` says why there is no interval (undecided or not compared); ``seeds`` and ``samples``
    as (config, reference)."""

    config: str
    reference: str
    role: str
    step: int | None
    source: Source
    df: float
    diff: float
    lo: float
    hi: float
    se: float
    p_value: float
    verdict: Verdict
    n_seeds: tuple[int, int]
    n_problems: int
    samples: tuple[int, int]
    why: str = ""
    alpha: float = ALPHA
    family: int = 2
    """The configs of the Tukey family the adjusted p-value is taken over."""

    @functools.cached_property
    def p_adjusted(self) -> float:
        """The Tukey-adjusted p-value (NaN without an interval), computed when first read:
        scipy's studentized range takes 10-30 ms a value, and most comparisons are never shown."""
        if not self.se > 0:
            return math.nan
        return tukey_p(self.diff / self.se, self.family, self.df)

    def describe(self) -> str:
        """``worse than the best config: Δ -0.031 [-0.052, -0.010] (simultaneous 95%), p 0.004
        (Tukey-adjusted 0.03)``; ``undecided against the best config: Δ -0.012 (one seed, no
        seed variance)``."""
        if self.verdict in ("undecided", "no interval"):
            head = "undecided against" if self.verdict == "undecided" else "not compared with"
            return f"{head} the {self.role} config: Δ {self.diff:+.3f} ({self.why})"
        words = {"better": f"better than the {self.role} config",
                 "worse": f"worse than the {self.role} config",
                 "not distinguishable": f"not distinguishable from the {self.role} config"}
        return (f"{words[self.verdict]}: Δ {self.diff:+.3f} [{self.lo:+.3f}, {self.hi:+.3f}] "
                f"(simultaneous {level_text(self.alpha)}), p {_p(self.p_value)} "
                f"(Tukey-adjusted {_p(self.p_adjusted)})")


def level_text(alpha: float) -> str:
    """``95%`` for alpha 0.05, ``98.3%`` for 0.05 / 3: an interval's confidence level."""
    return f"{100 * (1 - alpha):.3g}%"


def _p(p: float) -> str:
    return f"{p:.2g}" if p >= 0.001 else "<0.001"


OTHER_PROBLEMS = "evaluated on other validation problems (problem sets or outcome digests differ)"


@dataclass(frozen=True)
class SweepComparisons:
    """Every ranked config's :class:`Estimate` (``estimates``), the reported comparisons (each
    config against the best one, each off-policy config against its on-policy baseline), the
    seed variance they rest on (``seeds``), ``family`` (the configs the simultaneous intervals
    cover), ``could_be_best`` (the configs not shown worse than the best one, the best first)
    and ``resolution`` (what would tell the best config from the runner-up, when the data cannot,
    as the arithmetic of :func:`resolve`; None otherwise)."""

    seeds: SeedVariance
    estimates: dict[str, Estimate]
    comparisons: list[Comparison]
    family: int
    could_be_best: list[str]
    resolution: Resolution | None
    bounds: dict[str, BestBound] = dataclasses.field(default_factory=dict)
    """Hsu's bounds (:func:`best_bounds`) that decide ``could_be_best``; empty without a usable
    seed variance."""
    variance_test: str = ""
    """Brown-Forsythe's test of equal seed variances over the configs (:func:`equal_variance_test`)."""

    def why_out(self, label: str) -> str:
        """Why config ``label`` is not among those that could be the best."""
        return self.bounds[label].describe() if label in self.bounds else ""

    @property
    def decided(self) -> bool:
        """Whether the verdicts rest on a usable seed variance (else every one is undecided)."""
        return self.seeds.usable

    def against_best(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.role == "best"]

    def method_text(self) -> str:
        """How the verdicts are made, in a sentence (the seed variance: ``seeds.describe()``)."""
        if not self.decided:
            return f"no verdict: {self.seeds.describe()}"
        return f"{FAMILY_TEXT} ({self.family} configs)"


def compare_sweep(configs: Sequence[ConfigData], best: str, baselines: dict[str, str],
                  step: int | None, seeds: SeedVariance,
                  error: tuple[float, float] = (math.nan, 0), alpha: float = ALPHA) -> SweepComparisons:
    """Intervals and comparisons of ``configs`` (ranked, best first) on the seed variance
    ``seeds`` (see the module docstring) at family-wise error rate ``alpha`` (a race splits its
    own over its looks); ``baselines`` maps a config to its on-policy baseline config (both
    among ``configs``); ``error``: :func:`problem_error`."""
    by_label = {c.label: c for c in configs}
    estimates = {c.label: estimate(c, seeds, error) for c in configs}
    k = len(configs)
    wanted = [(c.label, best, "best") for c in configs if c.label != best]
    wanted += [(label, base, "on-policy") for label, base in baselines.items()
               if label != base and base != best]
    comparisons = [compare_pair(by_label[a], by_label[b], role, step, seeds, k, alpha)
                   for a, b, role in wanted]
    bounds = best_bounds(configs, seeds, alpha) if seeds.usable else {}
    could_be_best = [c.label for c in configs
                     if c.label == best or c.label not in bounds or bounds[c.label].upper >= 0]
    runner_up = next((c for c in comparisons if c.role == "best"), None)
    resolution = None
    if runner_up is not None and runner_up.verdict == "not distinguishable":
        resolution = resolve(runner_up, by_label[best], k, seeds)
    return SweepComparisons(seeds, estimates, comparisons, k, could_be_best, resolution, bounds,
                            equal_variance_test(configs))


def compare_pair(a: ConfigData, b: ConfigData, role: str, step: int | None, seeds: SeedVariance,
                k: int, alpha: float) -> Comparison:
    """``a`` against ``b`` within the Tukey family of ``k`` configs at family-wise rate ``alpha``."""
    nan = math.nan
    common = dict(config=a.label, reference=b.label, role=role, step=step, source=seeds.source,
                  df=seeds.df, n_seeds=(a.n_seeds, b.n_seeds),
                  n_problems=max(a.n_problems, b.n_problems), samples=(a.samples, b.samples),
                  alpha=alpha, family=k)
    diff = a.mean - b.mean + 0.0  # + 0.0: a tie reads +0.000, not -0.000
    if not comparable(a, b):
        return Comparison(**common, diff=diff, lo=nan, hi=nan, se=nan, p_value=nan,
                          verdict="no interval", why=OTHER_PROBLEMS)
    if not seeds.usable:
        return Comparison(**common, diff=diff, lo=nan, hi=nan, se=nan, p_value=nan,
                          verdict="undecided", why=seeds.describe())
    test = pair_test(a, b, seeds)
    half = tukey_critical(k, test.df, alpha) * test.se
    verdict = ("not distinguishable" if abs(diff) <= half else "better" if diff > 0 else "worse")
    return Comparison(**{**common, "df": test.df}, diff=diff, lo=diff - half, hi=diff + half,
                      se=test.se, p_value=test.p_value, verdict=verdict)


def power_against_best(diff: float, se: float, family: int, df: float,
                       alpha: float = ALPHA) -> float:
    """The power with which Hsu's comparisons with the best move a config ``diff`` (> 0) below
    the best out of the set that could be the best, ``se`` the standard error of the two
    configs' difference, among ``family`` configs of equal seeds, on ``df`` degrees of freedom:
    P(T' > d) for T' noncentral t with noncentrality diff / se, d Hsu's critical value on ``df``
    (``scipy.stats.nct``). Give it the pair's own df (2 x seeds - 2) where configs have seeds:
    the analysis judges a pair on its own variance where that is the larger (:func:`pair_variance`),
    and on the pool's df the normal approximation stated 80% where the analysis had 47-71%
    (``bench/resolve_power.py``); on the pair's df it is within 5 points from 3 seeds a config
    and conservative below. ``alpha``: the comparisons' family-wise rate (a race's look level)."""
    from scipy import stats

    lambdas = (round(math.sqrt(0.5), 6),) * max(family - 1, 1)
    critical = mcb_critical(lambdas, float(df), alpha)
    if not math.isfinite(df):
        return float(special.ndtr(diff / se - critical))
    return float(stats.nct.sf(critical, df, diff / se))


def own_df(seeds: int) -> float:
    """The df a pair of configs of ``seeds`` seeds each has of its own (:func:`pair_variance`)."""
    return float(2 * seeds - 2)


def detectable_difference(se: float, family: int, df: float, alpha: float = ALPHA) -> float:
    """The smallest difference from the best that :func:`power_against_best` finds at
    :data:`POWER` for a difference of standard error ``se`` among ``family`` configs on ``df``."""
    from scipy import optimize

    return float(optimize.brentq(lambda diff: power_against_best(diff, se, family, df, alpha)
                                 - POWER, 1e-9 * se, 100 * se, xtol=1e-6 * se))


def error_df(cells: int, levels: Sequence[int], seeds: int) -> int:
    """The degrees of freedom the main effects are tested on (``analysis.effects.main_effects``)
    in a grid of ``cells`` configs over keys of ``levels`` levels, ``seeds`` seeds a config: the
    pooled seed variance's cells x (seeds - 1); with one seed a grid of two or more keys' additive
    residual, cells - 1 - sum(levels - 1); 0 where neither exists (one key, one seed)."""
    if seeds > 1:
        return cells * (seeds - 1)
    return max(cells - 1 - sum(n - 1 for n in levels), 0) if len(levels) > 1 else 0


def power_main_effect(diff: float, sd: float, levels: int, runs_per_level: float,
                      df: float) -> float:
    """The power of a key's main-effect F test (``analysis.effects.main_effects``, at
    :data:`ALPHA`, on (``levels`` - 1, ``df``) degrees of freedom) when two of its levels differ
    by ``diff`` and the others sit at their mean: noncentral F with noncentrality
    runs_per_level x diff^2 / (2 sd^2) (the levels' squared deviations, diff^2 / 2, times the runs
    a level mean averages, over the seed variance ``sd``^2; a balanced grid, ``scipy.stats.ncf``)."""
    from scipy import stats

    critical = float(special.fdtri(levels - 1, df, 1 - ALPHA))
    return float(stats.ncf.sf(critical, levels - 1, df, runs_per_level * diff ** 2 / (2 * sd ** 2)))


def detectable_main_effect(sd: float, levels: int, runs_per_level: float, df: float) -> float:
    """The smallest difference between two of a key's levels that :func:`power_main_effect`
    finds at :data:`POWER`."""
    from scipy import optimize

    return float(optimize.brentq(
        lambda diff: power_main_effect(diff, sd, levels, runs_per_level, df) - POWER,
        1e-9 * sd, 100 * sd, xtol=1e-6 * sd))


@dataclass(frozen=True)
class Resolution:
    """What would tell two configs apart at ``POWER``: the seeds per config it takes
    (``seeds``), the factor of data that is, and ``text`` the arithmetic in words."""

    seeds: int
    factor: float
    text: str


def resolve(comparison: Comparison, best: ConfigData, family: int,
            seeds: SeedVariance) -> Resolution:
    """What would move ``comparison``'s config out of the set that could be the best (Hsu's
    bound below 0) at 80% power among ``family`` configs, if the true difference were the
    observed one: the fewest seeds per config n (both configs at n) at which
    :func:`power_against_best` reaches :data:`POWER`, its standard error se * sqrt(n0 / n), on
    the pair's own df at n seeds (:func:`own_df`): a larger design is also a better-measured one."""
    diff = abs(comparison.diff)
    if diff == 0:
        return Resolution(0, math.inf, "the observed difference is 0: no number of seeds "
                          "would resolve it")
    n0 = best.n_seeds

    def power(n: int) -> float:
        return power_against_best(diff, comparison.se * math.sqrt(n0 / n), family, own_df(n))

    lo, hi = max(n0, 1), max(n0, 1) + 1
    while power(hi) < POWER and hi < MAX_RESOLVED_SEEDS:
        lo, hi = hi, min(2 * hi, MAX_RESOLVED_SEEDS)
    if power(hi) < POWER:
        return Resolution(hi, math.inf, f"a difference of {diff:.3f} would take more than "
                          f"{MAX_RESOLVED_SEEDS} seeds per config to resolve")
    while hi - lo > 1:  # the smallest n that is enough, between lo (not) and hi (enough)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if power(mid) >= POWER else (mid, hi)
    n = hi
    se = comparison.se * math.sqrt(n0 / n)
    return Resolution(n, n / n0, (
        f"to show a difference of {diff:.3f} at {POWER:.0%} power among {family} configs: with {n} "
        f"seeds per config its standard error is {comparison.se:.4f} x sqrt({n0} / {n}) = "
        f"{se:.4f}, and Hsu's comparison with the best on the pair's own {own_df(n):g} df "
        f"(noncentral t) finds it with power {power(n):.0%}: {n} seeds per config"
        + (" (more seeds than a study usually runs)" if n > MANY_SEEDS else "")))
