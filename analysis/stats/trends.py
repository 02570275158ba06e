"""Tests of the other metrics' late values (entropy, response length, gradient norm, clip
fraction) between configs: a config's late value against the best config's, beyond the
seed-to-seed noise, on frames of one row a run (:mod:`analysis.decisions.trends` reads them from a sweep).

Early is the mean over the first ``WINDOW`` of the GRPO steps 1..``at_step`` (the compared step of
the ranking), late over the last ``WINDOW`` of them (at least ``MIN_WINDOW`` steps each); a run's
value is its mean over the window, a config's the mean over its runs. The noise is the seed
variance of a run's late value, from the same sources and in the same order as the validation
reward's (:func:`analysis.stats.sources.seed_variance`): seeds in the sweep, the additive model
of a one-seed grid, the sweep the ranking borrowed from. Consecutive steps of one run are never
taken as independent samples (they are autocorrelated: a test between them calls most equal
pairs different). A config is compared with the best one by Student's t on that variance, Holm
over the configs compared for each metric; without a seed variance there is no test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from analysis.names.formatting import LABEL
from analysis.stats.comparisons import pair_test
from analysis.stats.effects import VALUE
from analysis.stats.levels import ALPHA
from analysis.stats.sources import seed_variance
from analysis.stats.variance import ConfigData, SeedVariance, lent

NOT_FINITE = "no late value: a run logged a non-finite value"
"""The verdict of a config one of whose runs logged inf or nan in the late window."""
WINDOW = 0.1
"""Share of the compared steps the early and the late window each cover..."""
MIN_WINDOW = 3
"""...and the fewest steps they cover (all of them in a shorter run)."""


@dataclass(frozen=True)
class Trend:
    """``metric`` of config ``label``: mean ``early`` and ``late`` (over its runs and the window's
    steps), the change, and against the best config's late value: ``versus_best`` (``higher``,
    ``lower``, ``within noise``, ``no test``, :data:`NOT_FINITE`; empty for the best config itself), the
    Holm-adjusted p-value and the seed variance the test used (``noise``, in words)."""

    label: str
    metric: str
    early: float
    late: float
    versus_best: str
    p_adjusted: float
    noise: str

    @property
    def change(self) -> float:
        return self.late - self.early


def windows(at_step: int) -> tuple[range, range]:
    """The early and the late window of GRPO steps 1..``at_step``."""
    width = max(MIN_WINDOW, math.ceil(WINDOW * at_step))
    return range(1, min(width, at_step) + 1), range(max(1, at_step - width + 1), at_step + 1)


def metric_trends(metric: str, labels: Sequence[str], best: str, early: pd.Series,
                  runs: pd.DataFrame, keys: Sequence[str], borrowed: pd.DataFrame,
                  outside: Sequence[str] = ()) -> list[Trend]:
    """``metric``'s :class:`Trend` for each of ``labels`` (best first) that has runs: ``early``
    each config's early mean (by label), ``runs`` a row a run with its ``LABEL``, the swept
    ``keys`` and its late mean as ``VALUE``; ``borrowed`` the same frame of the sweep the ranking
    borrowed its seed variance from (empty: none), inflated to its upper 95% bound where this
    sweep ran training settings ``outside`` those it ran (:func:`analysis.stats.variance.lent`)."""
    # a run that logged inf or nan in the window has no late value to compare: its config
    # is said apart, and kept out of the seed variance (one such run made it nan for all)
    finite = runs[VALUE].map(math.isfinite)
    not_finite = set(runs.loc[~finite, LABEL])
    configs = [ConfigData(label, part[VALUE].to_numpy(float))
               for label, part in runs[finite].groupby(LABEL, sort=False)
               if label not in not_finite]
    runs = runs[finite & ~runs[LABEL].isin(not_finite)]
    theirs = None
    if not borrowed.empty:
        pooled = SeedVariance.pooled([ConfigData(label, part[VALUE].to_numpy(float))
                                      for label, part in borrowed.groupby(LABEL, sort=False)])
        theirs = lent(pooled, f"the borrowed sweep's seeds ({pooled.df} df)", outside)
    seeds = seed_variance(configs, runs, keys, theirs)
    by_label = {c.label: c for c in configs}
    tests = {c.label: pair_test(c, by_label[best], seeds) for c in configs
             if c.label != best and best in by_label}
    tested = {label: t.p_value for label, t in tests.items() if t is not None}
    adjusted = dict(zip(tested, holm(list(tested.values())), strict=True))
    noise = seeds.describe()
    out: list[Trend] = []
    for label in labels:
        if label in not_finite:
            out.append(Trend(label, metric, float(early.get(label, math.nan)), math.nan,
                             NOT_FINITE, math.nan, noise))
            continue
        if label not in by_label:
            continue
        late = by_label[label].mean
        p = adjusted.get(label, math.nan)
        if label == best:
            verdict = ""
        elif math.isnan(p):
            verdict = "no test"
        elif p >= ALPHA:
            verdict = "within noise"
        else:
            verdict = "higher" if late > by_label[best].mean else "lower"
        out.append(Trend(label, metric, float(early.get(label, math.nan)), late, verdict, p, noise))
    return out


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (statsmodels' ``multipletests``), in the order given."""
    if not p_values:
        return []
    from statsmodels.stats.multitest import multipletests

    return [float(p) for p in multipletests(list(p_values), method="holm")[1]]
