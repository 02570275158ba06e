"""The seed variance: how much one run's value varies between seeds of a config, where it comes
from, and when another sweep's may stand in for it.

Each run contributes its criterion value (the mean validation reward of its last evaluations, see
``analysis.decisions.ranking.LATE_EVALS``) and, where its ``eval_outcomes/`` files are readable, the same
mean problem by problem: a vector over the N validation problems (``ConfigData.problems``, one row
per seed). Two sources of noise: which validation problems were drawn (their difficulty), and how
the run went (the seed: data order, sampling, initialisation, and the sampled evaluation
responses). A config's value y = mu + a_seed + b_problems + e: the seed term does not cancel
between configs, the problem term does (every config is evaluated on the same problems).

**The seed variance** (:class:`SeedVariance`): the variance of one run's value between seeds of a
config, from the best source the sweep has (:func:`seed_variance` chooses, in this order):
``seeds`` (pooled over the configs with two or more seeds: df = runs - configs; where they are
a one-seed sweep's few check seeds beside a borrowed variance, the borrowed one unless they show
it too small: :func:`check`), ``additive`` (a
one-seed factorial grid: the residual mean square of the additive model of the swept keys,
:func:`analysis.stats.effects.additive_variance`; it holds any interaction too, so it errs on the safe side),
``borrowed`` (an earlier multi-seed sweep of the same model, data, problems and evaluation steps;
inflated to its upper 95% bound, :func:`upper_bound_factor`, where this sweep ran training
settings it did not: :func:`lent`),
``additive+borrowed`` (the two pooled by their df where an F test with the power to see a 2x
difference finds them in agreement; else the larger where they disagree, the grid's residual
where the test lacks that power: :func:`combine`), or ``none``. Without a usable variance (none, or 0: identical values) no
config-level verdict is given: the comparisons are **undecided**.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import special

from analysis.stats.levels import ALPHA, POWER, p_text

IDENTICAL = 1e-12
"""A seed variance at or below it (a seed sd of 1e-6 reward) is 0 up to rounding: every seed gave
the same value, a degenerate estimate."""
Source = Literal["seeds", "additive", "borrowed", "additive+borrowed", "none"]


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


PROBLEM_SET_SEPARATOR = "; "
"""Between the ``key=value`` items of a ``problem_set``."""


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
    inflation: float = 1.0
    """What the measured variance was multiplied by (a borrowed one inflated to its upper bound,
    :func:`lent`); 1 where ``variance`` is as measured."""

    @property
    def measured(self) -> float:
        """The variance as its source measured it (before any inflation)."""
        return self.variance / self.inflation

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
            return (f"seed variance 0 from {self.text} ({df_text(self.df)} df): every seed gave the same "
                    "value, a degenerate estimate; no interval")
        return (f"seed sd {math.sqrt(self.variance):.4f} (variance {self.variance:.3g}) from "
                f"{self.text} ({df_text(self.df)} df)")

    def with_notes(self, *notes: str) -> SeedVariance:
        return SeedVariance(self.variance, self.df, self.source, self.text, (*self.notes, *notes),
                            self.inflation)

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


def df_text(df: float) -> str:
    """Degrees of freedom as written: ``9``, or ``7.4`` where not whole (Satterthwaite's)."""
    return f"{df:.0f}" if float(df).is_integer() else f"{df:.1f}"


def upper_bound_factor(df: float, alpha: float = ALPHA) -> float:
    """What a variance estimated on ``df`` degrees of freedom is multiplied by to give its
    one-sided upper 1 - ``alpha`` confidence bound: df / chi2_alpha(df) (2.54 on 10 df)."""
    return float(df / special.chdtri(df, 1 - alpha))


def lent(seeds: SeedVariance, text: str, outside: Sequence[str]) -> SeedVariance:
    """``seeds`` (a source sweep's pooled variance) as a borrowed variance, ``text`` where from:
    as it is, or inflated to its upper 95% bound where the borrowing sweep runs settings
    ``outside`` those its source ran (``analysis.decisions.ranking.SEED_VARIANCE_KEYS``)."""
    if not outside:
        return SeedVariance(seeds.variance, seeds.df, "borrowed", text)
    factor = upper_bound_factor(seeds.df)
    shown = "; ".join(outside[:3]) + (f"; and {len(outside) - 3} more" if len(outside) > 3 else "")
    return SeedVariance(seeds.variance * factor, seeds.df, "borrowed", (
        f"{text}, inflated x{factor:.2f} to its upper 95% confidence bound ({seeds.variance:.3g} "
        f"measured): this sweep runs settings that change the seed variance and that sweep did "
        f"not ({shown})"), inflation=factor)


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
    residual alone keeps (``bench/borrowed_variance_calibration.py``). Each says why. The test
    reads the borrowed variance as its source measured it (:attr:`SeedVariance.measured`: an F
    ratio of two estimates on their df), as :func:`check` does, never its upper bound; the
    variance used, pooled or taken as the larger, is the one lent (inflated where it was)."""
    ratio = additive.variance / borrowed.measured
    below = float(special.fdtr(additive.df, borrowed.df, ratio))
    p = 2 * min(below, 1 - below)
    test = f"F = {ratio:.2f} on ({df_text(additive.df)}, {df_text(borrowed.df)}) df, p {p_text(p)}"
    as_lent = f", {borrowed.variance:.3g} as lent" if borrowed.inflation != 1 else ""
    both = (f"the grid's additive residual ({additive.variance:.3g}) and the borrowed variance "
            f"({borrowed.measured:.3g} as measured{as_lent})")
    if p < ALPHA:
        larger = additive if additive.variance > borrowed.measured else borrowed
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


def check(own: SeedVariance, borrowed: SeedVariance) -> SeedVariance:
    """A one-seed sweep's check seeds against the variance it borrows: ``own`` pooled over the
    few configs that ran a second seed (at most half of them; its df fewer than ``borrowed``'s,
    :func:`analysis.stats.sources.seed_variance`), tested one-sided
    against ``borrowed`` as its source measured it (before any inflation): own / measured on
    (own df, borrowed df) df. Where the test finds the sweep's variance larger at ``ALPHA``, the
    borrowed one is too small for this sweep's settings and the check seeds' own variance is used
    (on its few df: the safe side); else ``borrowed`` as lent (inflated where the settings
    differ). The ratio and its test are in the notes either way."""
    ratio = own.variance / borrowed.measured
    p = float(special.fdtrc(own.df, borrowed.df, ratio))
    test = (f"own / borrowed = {ratio:.3g}, F on ({df_text(own.df)}, {df_text(borrowed.df)}) df, "
            f"one-sided p {p_text(p)}")
    if p < ALPHA:
        return own.with_notes(
            f"the check seeds show the borrowed variance too small for this sweep ({test}): their "
            f"own variance is used, not the {borrowed.describe()}")
    return borrowed.with_notes(
        f"the check seeds ({own.text}: {own.variance:.3g}) do not show the borrowed variance "
        f"too small ({test})")
