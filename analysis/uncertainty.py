"""How sure a sweep's answer is: a 95% interval on each config's validation reward, paired tests of
configs against the best one and the on-policy baseline, adjusted for the number of comparisons,
and the data it would take to tell two configs apart. Pure statistics over arrays (scipy); the
data come from :mod:`analysis.aggregate`.

Each run contributes its criterion value (the mean validation reward of its last evaluations, see
``analysis.aggregate.LATE_EVALS``) and, where its ``eval_outcomes/`` files are readable, the same
mean problem by problem: a vector over the N validation problems (``ConfigData.problems``, one row
per seed). Two sources of noise: which responses were sampled on which problems (response noise,
shared problem difficulty), and how the run went (the seed: data order, sampling, initialisation).

**Which test** (one method for the whole sweep, ``Method``):

* ``seeds``: some config has two or more seeds. Each seed's value already averages over the same
  problems, so problem difficulty cancels between configs, and what is left is the seed-to-seed
  spread, response noise included. That spread is pooled over the sweep's ranked configs (the
  one-way ANOVA / Tukey assumption of one variance; ``df`` = runs - configs), and a difference is
  a t-test on seed means with that pooled variance (Student's t of scipy.special, the functions
  scipy.stats.t evaluates). Intervals are honest for
  2-3 seeds because the pooled estimate has more degrees of freedom than any one config.
* ``problems``: one seed per config. A difference is paired over the same problems
  (scipy.stats.ttest_rel: the difference's standard error over questions, clustered by problem
  when several evaluations and responses are averaged); when both configs' per-problem values
  are 0/1 (one evaluation, one response per problem) the p-value is exact McNemar
  (scipy.stats.binomtest on the discordant problems). The seed-to-seed variance is NOT in this
  interval: it is too narrow by that much, and the report says so.
* ``none``: one seed and no per-problem outcomes (runs logged before they were kept): no interval.

**Family**: every pair of ranked configs is tested, and p-values are Holm-adjusted over all of
them, so that the comparisons reported (each config against the best one, which was itself picked
by the data, and against its on-policy baseline) keep the family-wise error rate at 5%. A verdict
is ``better`` / ``worse`` when the adjusted p-value is below 0.05, else ``not distinguishable``.
The 95% interval shown is the unadjusted one of that comparison.
"""

from __future__ import annotations

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
"""Power at which `Resolution` sizes the data that would tell two configs apart."""
Method = Literal["seeds", "problems", "none"]
Verdict = Literal["better", "worse", "not distinguishable", "no interval"]
SINGLE_SEED_NOTE = ("one seed per config: the intervals cover problems and sampled responses, not "
                    "the seed-to-seed variance, so they are too narrow by that much; run 2 or more "
                    "seeds to include it")


@dataclass(frozen=True)
class ConfigData:
    """One config's data at the compared step: ``seed_values`` each run's criterion value (S,);
    ``problems`` each run's per-problem value (S, N), None unless every run has them for the same
    problems (``digest``); ``samples`` responses per problem per evaluation; ``n_evals`` the fewest
    evaluations a run averages; ``binary`` whether every per-problem value is 0 or 1."""

    label: str
    seed_values: np.ndarray
    problems: np.ndarray | None = None
    digest: str | None = None
    samples: int = 1
    n_evals: int = 1

    @property
    def n_seeds(self) -> int:
        return len(self.seed_values)

    @property
    def n_problems(self) -> int:
        return 0 if self.problems is None else self.problems.shape[1]

    @property
    def binary(self) -> bool:
        return self.problems is not None and bool(np.isin(self.problems, (0.0, 1.0)).all())

    @property
    def mean(self) -> float:
        return float(np.mean(self.seed_values))


@dataclass(frozen=True)
class SeedVariance:
    """The seed-to-seed variance of a run's value, pooled over configs, with its ``df``."""

    variance: float
    df: int

    @staticmethod
    def pooled(configs: Sequence[ConfigData]) -> SeedVariance:
        """Sum over configs of squared deviations of seed values from their config's mean, over
        the runs - configs degrees of freedom (0 when no config has two seeds)."""
        df = sum(c.n_seeds - 1 for c in configs)
        if df == 0:
            return SeedVariance(math.nan, 0)
        squares = sum(float(np.sum((c.seed_values - c.seed_values.mean()) ** 2)) for c in configs)
        return SeedVariance(squares / df, df)


@dataclass(frozen=True)
class Estimate:
    """A config's value (``mean`` over seeds) with its 95% interval ``[lo, hi]`` (NaN: none),
    within the 0-1 range of a reward."""

    mean: float
    lo: float
    hi: float
    n_seeds: int
    n_problems: int

    def interval(self) -> str:
        """``[0.381, 0.443]``, or empty where there is none."""
        return "" if math.isnan(self.lo) else f"[{self.lo:.3f}, {self.hi:.3f}]"

    def describe(self) -> str:
        """``0.412 [0.381, 0.443]`` (``0.412 [no interval]``)."""
        return f"{self.mean:.3f} {self.interval() or '[no interval]'}"


@dataclass(frozen=True)
class Comparison:
    """``config`` minus ``reference`` (``role``: ``best`` or ``on-policy``): the difference of their
    values, its unadjusted 95% interval, p-value, Holm-adjusted p-value and verdict; ``se`` the
    difference's standard error; ``seeds`` and ``samples`` as ``"a vs b"``."""

    config: str
    reference: str
    role: str
    step: int | None
    method: Method
    diff: float
    lo: float
    hi: float
    se: float
    p_value: float
    p_adjusted: float
    verdict: Verdict
    n_seeds: tuple[int, int]
    n_problems: int
    samples: tuple[int, int]

    def describe(self) -> str:
        """``worse than the best config: Δ -0.031 [-0.052, -0.010], p 0.004 (Holm-adjusted
        0.03)``; with one seed per config the caveat that the seed variance is not included."""
        if self.verdict == "no interval":
            tie = "tie with" if self.diff == 0 else "against"
            return f"{tie} the {self.role} config: Δ {self.diff:+.3f}, no interval ({NO_INTERVAL})"
        words = {"better": f"better than the {self.role} config",
                 "worse": f"worse than the {self.role} config",
                 "not distinguishable": f"not distinguishable from the {self.role} config"}
        caveat = "; one seed: seed-to-seed variance not included" if self.method == "problems" else ""
        return (f"{words[self.verdict]}: Δ {self.diff:+.3f} [{self.lo:+.3f}, {self.hi:+.3f}], "
                f"p {_p(self.p_value)} (Holm-adjusted {_p(self.p_adjusted)}{caveat})")


NO_INTERVAL = "one seed and no per-problem outcomes (eval_outcomes/)"


def _p(p: float) -> str:
    return f"{p:.2g}" if p >= 0.001 else "<0.001"


def method_of(configs: Sequence[ConfigData], pooled: SeedVariance) -> Method:
    """The test the sweep's data allow (module docstring; ``pooled``: the configs' seed
    variance)."""
    if pooled.df > 0:
        return "seeds"
    if len(configs) > 0 and all(c.problems is not None for c in configs):
        return "problems"
    return "none"


def describe_method(method: Method, configs: Sequence[ConfigData], pooled: SeedVariance) -> str:
    """What the intervals of ``method`` cover, in a sentence (``pooled``: the configs' seed
    variance)."""
    if method == "seeds":
        return (f"t-test on seed means, the seed-to-seed variance pooled over the "
                f"{len(configs)} ranked configs ({pooled.df} degrees of freedom); problem "
                "difficulty cancels between configs evaluated on the same problems")
    if method == "problems":
        n = max(c.n_problems for c in configs)
        return (f"paired over the same {n} problems (t-test over problems; exact McNemar where "
                f"both configs' outcomes are 0/1); {SINGLE_SEED_NOTE}")
    return f"no interval: {NO_INTERVAL}"


def estimate(config: ConfigData, method: Method, seeds: SeedVariance) -> Estimate:
    """``config``'s value with a 95% interval that covers problems (their difficulty and sampled
    responses) and, under the ``seeds`` method, the pooled seed-to-seed variance."""
    mean = config.mean
    none = Estimate(mean, math.nan, math.nan, config.n_seeds, config.n_problems)
    if method == "seeds":
        variance = seeds.variance / config.n_seeds
        if config.problems is not None and config.n_problems > 1:
            variance += float(np.var(config.problems.mean(axis=0), ddof=1)) / config.n_problems
        half = t_quantile(seeds.df) * math.sqrt(variance)
        return Estimate(mean, max(mean - half, 0.0), min(mean + half, 1.0), config.n_seeds,
                        config.n_problems)
    if config.problems is None or config.n_problems < 2:
        return none
    from scipy import stats  # only here and in pair_test: its import costs make plots a second

    values = config.problems.mean(axis=0)
    if config.binary and config.n_seeds == 1:  # one evaluation, one response: exact binomial
        ci = stats.binomtest(int(values.sum()), len(values)).proportion_ci(1 - ALPHA, "exact")
    elif np.ptp(values) == 0:
        return Estimate(mean, mean, mean, config.n_seeds, config.n_problems)
    else:
        ci = stats.ttest_1samp(values, 0.0).confidence_interval(1 - ALPHA)
    return Estimate(mean, max(float(ci.low), 0.0), min(float(ci.high), 1.0), config.n_seeds,
                    config.n_problems)


@dataclass(frozen=True)
class PairTest:
    diff: float
    lo: float
    hi: float
    se: float
    p_value: float


def pair_test(a: ConfigData, b: ConfigData, method: Method, seeds: SeedVariance) -> PairTest | None:
    """``a`` minus ``b`` under ``method`` (module docstring); None when the two cannot be paired
    (no interval, or per-problem outcomes of different problems)."""
    diff = a.mean - b.mean
    if method == "seeds":
        return _seed_tests([a, b], [(a.label, b.label)], seeds)[a.label, b.label]
    if method != "problems" or a.digest != b.digest or a.n_problems != b.n_problems:
        return None
    from scipy import stats

    mine, theirs = a.problems.mean(axis=0), b.problems.mean(axis=0)
    d = mine - theirs
    if np.ptp(d) == 0:
        return PairTest(diff, diff, diff, 0.0, 1.0 if diff == 0 else 0.0)
    result = stats.ttest_rel(mine, theirs)
    ci = result.confidence_interval(1 - ALPHA)
    p = float(result.pvalue)
    if a.binary and b.binary and a.n_seeds == b.n_seeds == 1:  # exact McNemar
        wins, losses = int((d > 0).sum()), int((d < 0).sum())
        p = float(stats.binomtest(wins, wins + losses, 0.5).pvalue)
    se = float(np.std(d, ddof=1) / math.sqrt(len(d)))
    return PairTest(diff, float(ci.low), float(ci.high), se, p)


@functools.lru_cache(maxsize=64)
def t_quantile(df: int) -> float:
    """Student's t quantile of a two-sided 95% interval on ``df`` degrees of freedom."""
    return float(special.stdtrit(df, 1 - ALPHA / 2))


def _seed_tests(configs: Sequence[ConfigData], pairs: Sequence[tuple[str, str]],
                seeds: SeedVariance) -> dict[tuple[str, str], PairTest]:
    """:func:`pair_test` under the ``seeds`` method for every pair at once (a sweep of 80
    configs has 3160 pairs)."""
    by_label = {c.label: c for c in configs}
    mean = np.array([[by_label[a].mean, by_label[b].mean] for a, b in pairs]).reshape(-1, 2)
    n = np.array([[by_label[a].n_seeds, by_label[b].n_seeds] for a, b in pairs]).reshape(-1, 2)
    diff = mean[:, 0] - mean[:, 1]
    se = np.sqrt(seeds.variance * (1 / n[:, 0] + 1 / n[:, 1]))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(se > 0, 2 * special.stdtr(seeds.df, -np.abs(diff / se)),
                     np.where(diff == 0, 1.0, 0.0))
    half = t_quantile(seeds.df) * se
    return {pair: PairTest(float(d), float(d - h), float(d + h), float(s), float(q))
            for pair, d, h, s, q in zip(pairs, diff, half, se, p, strict=True)}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error rate), in the order given."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class SweepComparisons:
    """Every ranked config's :class:`Estimate` (``estimates``), the reported comparisons (each
    config against the best one, each off-policy config against its on-policy baseline),
    ``method``, ``family`` (pairs the Holm adjustment counts) and ``resolution`` (what would tell
    the best config from the runner-up, when the data cannot)."""

    method: Method
    method_text: str
    estimates: dict[str, Estimate]
    comparisons: list[Comparison]
    family: int
    resolution: str | None

    def against_best(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.role == "best"]


def compare_sweep(configs: Sequence[ConfigData], best: str, baselines: dict[str, str],
                  step: int | None, greedy: bool = False) -> SweepComparisons:
    """Intervals and comparisons of ``configs`` (ranked, best first); ``baselines`` maps a config
    to its on-policy baseline config (both among ``configs``); ``greedy``: the evaluations were
    greedy (more responses per problem would repeat the same one)."""
    seeds = SeedVariance.pooled(configs)
    method = method_of(configs, seeds)
    by_label = {c.label: c for c in configs}
    estimates = {c.label: estimate(c, method, seeds) for c in configs}
    labels = [c.label for c in configs]
    pairs = [(a, b) for i, a in enumerate(labels) for b in labels[i + 1:]]
    if method == "seeds":
        tests = _seed_tests(configs, pairs, seeds)
    else:
        found = {(a, b): pair_test(by_label[a], by_label[b], method, seeds) for a, b in pairs}
        tests = {pair: test for pair, test in found.items() if test is not None}
    adjusted = dict(zip(tests, holm([t.p_value for t in tests.values()]), strict=True))
    wanted = [(label, best, "best") for label in labels if label != best]
    wanted += [(label, base, "on-policy") for label, base in baselines.items()
               if label != base and base != best]
    comparisons = [_comparison(by_label[a], by_label[b], role, step, method, tests, adjusted)
                   for a, b, role in wanted]
    resolution = None
    runner_up = next((c for c in comparisons if c.role == "best"), None)
    if runner_up is not None and runner_up.verdict in ("not distinguishable", "no interval"):
        resolution = resolve(runner_up, by_label[best], max(len(tests), 1), method, greedy)
    return SweepComparisons(method, describe_method(method, configs, seeds), estimates, comparisons,
                            len(tests), resolution)


def _comparison(a: ConfigData, b: ConfigData, role: str, step: int | None, method: Method,
                tests: dict[tuple[str, str], PairTest], adjusted: dict[tuple[str, str], float]
                ) -> Comparison:
    key, sign = ((a.label, b.label), 1.0) if (a.label, b.label) in tests else ((b.label, a.label), -1.0)
    test, p_adj = tests.get(key), adjusted.get(key, math.nan)
    if test is None:
        diff, lo, hi, se, p, verdict = a.mean - b.mean, math.nan, math.nan, math.nan, math.nan, "no interval"
    else:
        diff = sign * test.diff + 0.0  # + 0.0: a tie reads +0.000, not -0.000
        lo, hi = sorted((sign * test.lo + 0.0, sign * test.hi + 0.0))
        se, p = test.se, test.p_value
        verdict = ("not distinguishable" if p_adj >= ALPHA else "better" if diff > 0 else "worse")
    return Comparison(a.label, b.label, role, step, method, diff, lo, hi, se, p, p_adj, verdict,
                      (a.n_seeds, b.n_seeds), min(a.n_problems, b.n_problems) if method != "seeds"
                      else max(a.n_problems, b.n_problems), (a.samples, b.samples))


def resolve(comparison: Comparison, best: ConfigData, family: int, method: Method,
            greedy: bool = False) -> str:
    """What would tell ``comparison``'s two configs apart at 80% power after the Holm adjustment
    over ``family`` comparisons, if the true difference were the observed one (the arithmetic);
    more responses per problem are offered only where evaluation samples (not ``greedy``)."""
    if method == "none" or math.isnan(comparison.se):
        return ("run 2 or more seeds per config (or keep per-problem outcomes: eval_outcomes/) to "
                "get an interval at all")
    diff = abs(comparison.diff)
    if diff == 0:
        return "the observed difference is 0: no number of seeds or responses would resolve it"
    z_alpha = float(special.ndtri(1 - ALPHA / (2 * family)))
    z_power = float(special.ndtri(POWER))
    target = diff / (z_alpha + z_power)
    factor = (comparison.se / target) ** 2
    head = (f"to call a difference of {diff:.3f} at {POWER:.0%} power after Holm over {family} "
            f"comparison{'s' if family > 1 else ''}, its standard error must be {diff:.3f} / "
            f"(z {z_alpha:.2f} + z {z_power:.2f}) = {target:.4f}; it is {comparison.se:.4f} now, "
            f"so ({comparison.se:.4f} / {target:.4f})^2 = {factor:.1f} times the data")
    seeds = max(math.ceil(best.n_seeds * factor), best.n_seeds + 1)
    if method == "seeds":
        return f"{head}: {seeds} seeds per config (the seed-to-seed variance is the noise here)"
    if greedy:
        return (f"{head}: {seeds} seeds per config (evaluation is greedy: more responses per "
                "problem would repeat the same one)")
    samples = max(math.ceil(best.samples * factor), best.samples + 1)
    return (f"{head}: eval.samples_per_problem={samples} (at least: only the response noise "
            f"shrinks with it), or {seeds} seeds per config, which would also measure the "
            "seed-to-seed variance these intervals lack")
