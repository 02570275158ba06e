"""How sure a sweep's answer is: a 95% interval on each config's value, simultaneous comparisons of
configs (against the best one and the on-policy baseline) and the set of configs that could still
be the best, on a seed variance (:mod:`analysis.stats.variance`).

**Comparisons** (:func:`compare_sweep`): every pair of ranked configs evaluated on the same
problems gets a Tukey-Kramer simultaneous 95% interval (the studentized range of
``scipy.stats.studentized_range`` over the ranked configs, on the variance's df): at most 5% of
sweeps hold a false **better**/**worse** among all of them, whatever pairs the report shows.
Seed variances differ across a sweep (a config at a reward floor hardly varies), so each pair
rests on the larger of the sweep's variance and the two configs' own (Welch's), each on
its own df (:func:`pair_variance`), which keeps that 5% where one pooled variance does not. A
config **could be the best** while Hsu's constrained multiple comparisons with the best (Hsu
1996, ch. 4; :func:`best_bounds`) keep it: the simultaneous upper bound of its mean minus the
largest of the others, min over j of mean_i - mean_j + d_i se_ij, is >= 0, d_i the one-sided
Dunnett critical value of its k - 1 comparisons on the df of pair ij's variance
(:func:`analysis.stats.critical.mcb_critical`: the multivariate t of their correlations, which unequal seed counts
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
once), with Satterthwaite's degrees of freedom, V1 the larger of the sweep's seed variance and the
config's own on its own n - 1 df (:func:`config_variance`); without V3 (no config has 2 seeds) the term is
counted twice, which errs on the wide side.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import special

from analysis.names.formatting import DIFFERENCE_SPAN, fmt_difference_interval
from analysis.stats.critical import (
    mcb_critical,
    pair_rule,
    t_quantile,
    tukey_critical,
    tukey_p,
)
from analysis.stats.levels import ALPHA, level_text, p_text
from analysis.stats.power import Resolution, resolve
from analysis.stats.variance import (
    IDENTICAL,
    PROBLEM_SET_SEPARATOR,
    ConfigData,
    SeedVariance,
    Source,
    df_text,
)

Verdict = Literal["better", "worse", "not distinguishable", "undecided", "no interval"]
FAMILY_TEXT = ("Tukey-Kramer simultaneous 95% intervals over every pair of ranked configs, each "
               "pair on the larger of the pooled seed variance and the two configs' own (on its "
               "own df): at most 5% of sweeps call a difference that is not there")


def comparable(a: ConfigData, b: ConfigData) -> bool:
    """Whether ``a`` and ``b`` were evaluated on the same problems (:func:`problems_apart`)."""
    return problems_apart(a, b) is None

OTHER_PROBLEMS = "evaluated on other validation problems"
"""How a comparison refused for other problems begins (:func:`problems_apart` says why)."""


def problems_apart(a: ConfigData, b: ConfigData) -> str | None:
    """Why ``a`` and ``b`` were not evaluated on the same problems, in words, or None where they
    were. Their outcome files decide where both configs have them (``digest``: a fingerprint of
    the questions and answers evaluated), whatever their configs say: two configs whose
    ``eval.n_examples`` both exceed a dataset's size, or that name one file by two paths,
    evaluated the same problems. Only where a config has no such digest do its config keys
    (``problem_set``) decide."""
    if a.digest is not None and b.digest is not None:
        return None if a.digest == b.digest else (
            f"{OTHER_PROBLEMS}: their outcome files' problem digests differ "
            f"({a.digest[:12]}... against {b.digest[:12]}...)")
    if a.problem_set == b.problem_set:
        return None
    mine, theirs = (c.problem_set.split(PROBLEM_SET_SEPARATOR) for c in (a, b))
    differ = [(x, y) for x, y in zip(mine, theirs, strict=False) if x != y] or [(a.problem_set,
                                                                                 b.problem_set)]
    return (f"{OTHER_PROBLEMS}: their configs name other problems "
            f"({'; '.join(f'{x} against {y}' for x, y in differ)}) and no outcome files of both "
            "say which they evaluated")


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
    """The sd of the config's own seeds (NaN with one seed): its interval rests on the larger of
    it and the sweep's pooled one (:func:`config_variance`)."""
    variance: float = math.nan
    """The variance of ``mean`` the interval rests on (seeds and problems, before the interval is
    cut to the 0-1 range; NaN: no interval): what a difference of two estimates adds
    (:func:`difference`)."""

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


def config_variance(config: ConfigData, seeds: SeedVariance) -> tuple[float, float]:
    """The seed variance (and its df) ``config``'s own interval rests on: the larger of the
    sweep's ``seeds`` (usable) and the config's own seeds' variance, on the config's own n - 1 df
    where it has two or more seeds (the sweep's df with one seed). The pool averages the
    configs' variances: beside configs at a floor it understates a learning config's, and an
    interval on it held the true mean of the noisiest of the real runs' seed sds (0.04, 0.125,
    0.214 beside two floors, 3 seeds) in 68% of sweeps; the larger of the two on the pool's df
    where the pool is the larger, 91-94% (its df trust the pool for a config whose own estimate
    came out small by chance); this rule 94.1% or more for every config of the real-run design
    and 93.8-100% in the other calibration designs (``bench/config_interval_calibration.py``)."""
    if config.n_seeds < 2:
        return seeds.variance, float(seeds.df)
    return (max(seeds.variance, float(np.var(config.seed_values, ddof=1))),
            float(config.n_seeds - 1))


VarianceRule = Callable[[ConfigData, SeedVariance], tuple[float, float]]
"""A rule giving the seed variance (and its df) a config's interval rests on: the analysis's is
:func:`config_variance`; bench/config_interval_calibration.py passes the alternatives it measures."""


def estimate(config: ConfigData, seeds: SeedVariance,
             error: tuple[float, float] = (math.nan, 0),
             variance_rule: VarianceRule = config_variance) -> Estimate:
    """``config``'s value with a 95% interval covering the seed and the problem variance (module
    docstring; ``error``: :func:`problem_error`; the seed variance by ``variance_rule``), on
    Satterthwaite's degrees of freedom; no interval without a usable seed variance."""
    mean, s = config.mean, config.n_seeds
    own = float(np.std(config.seed_values, ddof=1)) if s > 1 else math.nan
    if not seeds.usable:
        return Estimate(mean, math.nan, math.nan, s, config.n_problems, seed_sd=own)
    variance, variance_df = variance_rule(config, seeds)
    terms = [(variance / s, variance_df)]  # (a component of the variance, its df)
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
    return Estimate(mean, max(mean - half, 0.0), min(mean + half, 1.0), s, config.n_problems, df,
                    own, variance)


@dataclass(frozen=True)
class Difference:
    """``a`` minus ``b`` of two independent estimates: the difference, its 95% interval
    ``[lo, hi]`` (NaN: none) and Satterthwaite's ``df``."""

    diff: float
    lo: float
    hi: float
    df: float = math.nan

    def describe(self) -> str:
        """``+0.051 [-0.012, +0.114]`` (``+0.051 [no interval]``)."""
        if math.isnan(self.lo):
            return f"{self.diff:+.3f} [no interval]"
        return f"{self.diff:+.3f} {fmt_difference_interval(self.lo, self.hi)}"


def difference(a: Estimate, b: Estimate) -> Difference:
    """``a.mean - b.mean`` with a 95% interval carrying both estimates' noise: their variances
    added (independent measurements: other seeds, other problems; where they share seeds, the
    sum errs on the wide side for positively correlated ones), on Satterthwaite's df of the two;
    no interval where either has none."""
    diff = a.mean - b.mean + 0.0
    if not (a.variance > 0 and b.variance > 0 and a.df > 0 and b.df > 0):
        return Difference(diff, math.nan, math.nan)
    variance = a.variance + b.variance
    df = variance ** 2 / (a.variance ** 2 / a.df + b.variance ** 2 / b.df)
    half = t_quantile(df) * math.sqrt(variance)
    return Difference(diff, diff - half, diff + half, df)

@dataclass(frozen=True)
class PairTest:
    """``a`` minus ``b``: the difference, its unadjusted 95% interval, standard error and
    two-sided p-value on ``df`` degrees of freedom (the pair's variance: :func:`pair_variance`;
    ``own``: the pair's own variance, not the sweep's)."""

    diff: float
    lo: float
    hi: float
    se: float
    p_value: float
    df: float
    own: bool = False


def pair_variance(a: ConfigData, b: ConfigData, seeds: SeedVariance) -> tuple[float, float]:
    """:func:`pair_source`'s variance and df."""
    return pair_source(a, b, seeds)[:2]


def pair_source(a: ConfigData, b: ConfigData,
                seeds: SeedVariance) -> tuple[float, float, bool]:
    """The seed variance (its df, and whether it is the pair's own) a comparison of ``a`` and
    ``b`` rests on, per seed: the
    difference's standard error is sqrt(variance x (1 / n_a + 1 / n_b)). The sweep's ``seeds``
    (usable; where the seed counts differ, on no more df than the pair's Welch df), or the two
    configs' own where that is at least as large (:func:`~analysis.stats.critical.pair_rule`,
    the one rule): Welch's, the variance of
    the difference s_a^2 / n_a + s_b^2 / n_b over (1 / n_a + 1 / n_b), on the
    Welch-Satterthwaite df (:func:`~analysis.stats.critical.welch_df`: Games-Howell's, rounded
    down to a tenth), between the smaller config's n - 1 and n_a + n_b - 2. Seed variances differ across a learning-rate sweep
    (configs at a floor vary little); the sweep's pool then understates the learning configs'
    and calls differences between them that are not there (9% of all-equal sweeps of 6 learning
    and 3 near-floor configs, 3 seeds each); and where one config of a pair varies much less
    than the other, their difference has nearly the noisier one's n - 1 df, not n_a + n_b - 2
    (2 equal configs x 3 seeds of seed sd 0.04 and 0.001: 11% false on 4 df). The larger of the
    two, the pair's own on Welch's df, holds both at 5% and costs power only where the pair's
    own estimate happens to be the larger (``bench/unequal_variance_calibration.py``,
    docs/explanations/how-sure.md); the pool's df capped where the counts differ costs a 2-seed
    config's comparisons with configs of more seeds most of their power at equal spread
    (``bench/pair_rule_scan.py``)."""
    if a.n_seeds > 1 and b.n_seeds > 1:
        var_a, var_b = (float(np.var(c.seed_values, ddof=1)) for c in (a, b))
        variance, df, own = pair_rule(var_a, a.n_seeds, var_b, b.n_seeds, seeds.variance,
                                      seeds.df)
        return float(variance), float(df), bool(own)
    return seeds.variance, float(seeds.df), False


def pair_test(a: ConfigData, b: ConfigData, seeds: SeedVariance) -> PairTest | None:
    """``a`` minus ``b`` on the pair's seed variance (:func:`pair_variance`; Student's t); None
    when the two cannot be compared (other problems, or no usable variance)."""
    if not seeds.usable or not comparable(a, b):
        return None
    diff = a.mean - b.mean
    variance, df, own = pair_source(a, b, seeds)
    se = math.sqrt(variance * (1 / a.n_seeds + 1 / b.n_seeds))
    half = t_quantile(df) * se
    p = float(2 * special.stdtr(df, -abs(diff / se)))
    return PairTest(diff, diff - half, diff + half, se, p, df, own)


@dataclass(frozen=True)
class BestBound:
    """Hsu's constrained multiple comparisons with the best for one config: ``upper`` the
    unconstrained upper bound of its mean minus the largest mean of the others (min over j of
    mean_i - mean_j + d se_ij), ``critical`` its one-sided critical value d, ``against`` the
    config that bound is set by. The config could be the best while ``upper`` >= 0. Where it is
    below 0 the procedure's simultaneous 95% interval of mean_i - max_{j != i} mean_j is
    [``lower``, 0] (Hsu 1996, ch. 4, constrained MCB: the upper end is max(0, upper), never the
    negative ``upper`` itself, which is false in 19.5% of all-equal sweeps of 9 configs x 3
    seeds); ``lower`` the min over the configs j that could be the best of mean_i - mean_j - d_j
    se_ij (d_j: j's critical value), -inf where none of them is compared with it, NaN for a
    config that could be the best."""

    config: str
    upper: float
    critical: float
    against: str
    alpha: float = ALPHA
    lower: float = math.nan

    def describe(self) -> str:
        """What the procedure licenses of a config out of the set: ``below the best: its mean
        minus the largest of the others' is in [-0.250, 0]; a's is above it (Hsu's comparisons
        with the best, simultaneous 95%, one-sided critical value 2.21)``; without a
        lower bound, or one below -1 (more than two rewards can differ:
        :data:`~analysis.names.formatting.DIFFERENCE_SPAN`), ``below the best: its mean is below the
        largest of the others'; ...``."""
        where = (f"its mean minus the largest of the others' is in [{self.lower:+.3f}, 0]"
                 if self.lower >= -DIFFERENCE_SPAN else "its mean is below the largest of the others'")
        return (f"below the best: {where}; {self.against}'s is above it (Hsu's comparisons "
                f"with the best, simultaneous {level_text(self.alpha)}, one-sided "
                f"critical value {self.critical:.2f})")


def best_bounds(configs: Sequence[ConfigData], seeds: SeedVariance,
                alpha: float = ALPHA) -> dict[str, BestBound]:
    """Each config's :class:`BestBound` against the others it can be compared with (the same
    problems), on the seed variance ``seeds`` (usable); configs with none have no bound. Each
    pair's term: the difference, its standard error on :func:`pair_variance` and the critical
    value of the config's k - 1 comparisons on that pair's df."""
    terms: dict[str, dict[str, tuple[float, float, float]]] = {}  # i -> j -> (diff, se, d_i)
    for c in configs:
        others = [o for o in configs if o.label != c.label and comparable(c, o)]
        if not others:
            continue
        lambdas = tuple(sorted(round(math.sqrt(o.n_seeds / (c.n_seeds + o.n_seeds)), 6)
                               for o in others))
        terms[c.label] = {}
        for o in others:
            variance, df = pair_variance(c, o, seeds)
            terms[c.label][o.label] = (c.mean - o.mean, math.sqrt(
                variance * (1 / c.n_seeds + 1 / o.n_seeds)), mcb_critical(lambdas, df, alpha))
    uppers = {i: min((diff + d * se, j, d) for j, (diff, se, d) in row.items())
              for i, row in terms.items()}
    could = {c.label for c in configs if c.label not in uppers or uppers[c.label][0] >= 0}
    bounds = {}
    for i, (upper, against, d) in uppers.items():
        lower = math.nan
        if upper < 0:  # [lower, 0]: j's own critical value d_j of its comparison with i
            lower = min((diff - terms[j][i][2] * se for j, (diff, se, _) in terms[i].items()
                         if j in could), default=-math.inf)
            lower = min(lower, 0.0)
        bounds[i] = BestBound(i, upper, d, against, alpha, lower)
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
    seed_df: float = math.nan
    """The df of the sweep's seed variance (the report's seed-variance line); ``df`` differs
    where the pair rests on its own variance, on Welch's df, or on the sweep's at no more than
    Welch's df (seed counts that differ: :func:`~analysis.stats.critical.pair_rule`)."""
    own_variance: bool = False
    """Whether the pair rests on its own variance (else the sweep's)."""

    @property
    def own_df_text(self) -> str:
        """``, on the pair's own variance (1.2 df)`` (or ``, on the seed variance at the pair's
        own df (3.6 df)``) where the verdict's df is not the seed variance's, else empty."""
        if math.isnan(self.seed_df) or self.df == self.seed_df or not self.se > 0:
            return ""
        if not self.own_variance:
            return f", on the seed variance at the pair's own df ({df_text(self.df)} df)"
        return f", on the pair's own variance ({df_text(self.df)} df)"

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
        return (f"{words[self.verdict]}: Δ {self.diff:+.3f} {fmt_difference_interval(self.lo, self.hi)} "
                f"(simultaneous {level_text(self.alpha)}{self.own_df_text}), p {p_text(self.p_value)} "
                f"(Tukey-adjusted {p_text(self.p_adjusted)})")


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
        mine, theirs = by_label[runner_up.config], by_label[best]
        own = ((float(np.var(mine.seed_values, ddof=1)), float(np.var(theirs.seed_values, ddof=1)))
               if mine.n_seeds > 1 and theirs.n_seeds > 1 else None)
        resolution = resolve(runner_up.diff, runner_up.n_seeds, k, seeds.variance, seeds.df, own)
    return SweepComparisons(seeds, estimates, comparisons, k, could_be_best, resolution, bounds,
                            equal_variance_test(configs))


def compare_pair(a: ConfigData, b: ConfigData, role: str, step: int | None, seeds: SeedVariance,
                k: int, alpha: float) -> Comparison:
    """``a`` against ``b`` within the Tukey family of ``k`` configs at family-wise rate ``alpha``."""
    nan = math.nan
    common = dict(config=a.label, reference=b.label, role=role, step=step, source=seeds.source,
                  df=seeds.df, n_seeds=(a.n_seeds, b.n_seeds),
                  n_problems=max(a.n_problems, b.n_problems), samples=(a.samples, b.samples),
                  alpha=alpha, family=k, seed_df=seeds.df)
    diff = a.mean - b.mean + 0.0  # + 0.0: a tie reads +0.000, not -0.000
    apart = problems_apart(a, b)
    if apart is not None:
        return Comparison(**common, diff=diff, lo=nan, hi=nan, se=nan, p_value=nan,
                          verdict="no interval", why=apart)
    if not seeds.usable:
        return Comparison(**common, diff=diff, lo=nan, hi=nan, se=nan, p_value=nan,
                          verdict="undecided", why=seeds.describe())
    test = pair_test(a, b, seeds)
    half = tukey_critical(k, test.df, alpha) * test.se
    verdict = ("not distinguishable" if abs(diff) <= half else "better" if diff > 0 else "worse")
    return Comparison(**{**common, "df": test.df}, diff=diff, lo=diff - half, hi=diff + half,
                      se=test.se, p_value=test.p_value, verdict=verdict, own_variance=test.own)


def equal_variance_test(configs: Sequence[ConfigData]) -> str:
    """Brown-Forsythe's test that the configs with two or more seeds share one seed variance
    (``scipy.stats.levene``, median-centred), in words; why there is none where fewer than two
    configs have seeds, none of them vary, or the test cannot be made: W divides the spread of
    the seeds' distances from their config's median between configs by their spread within a
    config, which is 0 (up to rounding: a variance at most :data:`IDENTICAL`) where in every
    config each seed lies as far from its median as the others: always with 2 seeds a config,
    and where a config's seeds gave one value (W would be a division by 0, p meaningless)."""
    from scipy import stats

    seeded = [c for c in configs if c.n_seeds > 1]
    if len(seeded) < 2 or all(np.ptp(c.seed_values) == 0 for c in seeded):
        return "no test of equal seed variances (fewer than two configs whose seeds vary)"
    distances = [np.abs(c.seed_values - np.median(c.seed_values)) for c in seeded]
    within = sum(float(np.sum((d - d.mean()) ** 2)) for d in distances)
    if within / (sum(map(len, distances)) - len(distances)) <= IDENTICAL:
        return ("no test of equal seed variances: Brown-Forsythe cannot be made here: in each "
                f"of the {len(seeded)} configs with 2 or more seeds every seed lies as far from "
                f"the config's median as the others ({_why_equidistant(seeded)}), so the test has "
                "no spread within a config to measure against (its W would divide by 0)")
    result = stats.levene(*(c.seed_values for c in seeded), center="median")
    verdict = ("the configs' seed variances differ: the pooled variance is their average, too "
               "wide for some comparisons and too narrow for others" if result.pvalue < ALPHA
               else "no sign that they differ (a test of little power with few seeds)")
    return (f"equal seed variances, Brown-Forsythe over the {len(seeded)} configs with 2 or more "
            f"seeds: W = {result.statistic:.2f}, p {p_text(float(result.pvalue))}: {verdict}")


def _why_equidistant(seeded: Sequence[ConfigData]) -> str:
    """Why each config's seeds lie equally far from its median, in words: two seeds (always),
    one value (a floor or ceiling), or values in two equal halves."""
    two = sum(c.n_seeds == 2 for c in seeded)
    same = [c.label for c in seeded if c.n_seeds > 2 and np.ptp(c.seed_values) <= math.sqrt(IDENTICAL)]
    halves = len(seeded) - two - len(same)
    parts = [*([f"{two} config{'s' if two != 1 else ''} of 2 seeds: two seeds always are; 3 or "
                "more seeds in a config make the test possible"] if two else []),
             *([f"{len(same)} whose seeds all gave one value ({'; '.join(same)})"] if same else []),
             *([f"{halves} whose seeds split into two equal halves at two values"] if halves else [])]
    return "; ".join(parts)
