"""The other metrics' trends the handout asks every study to comment on (entropy, response length,
gradient norm, clip fraction): per config, the metric early and late in the run, its change, and
whether the config's late value differs from the best config's beyond the seed-to-seed noise.

Early is the mean over the first ``WINDOW`` of the GRPO steps 1..``at_step`` (the compared step of
the ranking), late over the last ``WINDOW`` of them (at least ``MIN_WINDOW`` steps each); a run's
value is its mean over the window, a config's the mean over its runs. The noise is the seed
variance of a run's late value, from the same sources and in the same order as the validation
reward's (:func:`analysis.aggregate.seed_variance`): seeds in the sweep, the additive model of a
one-seed grid, the sweep the ranking borrowed from. Consecutive steps of one run are never taken
as independent samples (they are autocorrelated: a test between them calls most equal pairs
different). A config is compared with the best one by Student's t on that variance, Holm over the
configs compared for each metric; without a seed variance there is no test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from analysis.aggregate import seed_variance
from analysis.collect import LABEL, Collection
from analysis.effects import VALUE
from analysis.uncertainty import ALPHA, ConfigData, SeedVariance, pair_test, upper_bound_factor

TREND_METRICS = ("train/entropy", "train/mean_response_length", "train/grad_norm",
                 "train/clip_fraction")
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


def trends(collection: Collection, labels: Sequence[str], best: str, at_step: int,
           borrowed: Collection | None = None, inflate: bool = False) -> list[Trend]:
    """Every metric of ``TREND_METRICS`` that was logged, for each of ``labels`` (best first);
    ``borrowed``: the sweep the ranking borrowed its seed variance from, collected; ``inflate``:
    this sweep ran training settings that one did not, so its variance is taken at its upper 95%
    bound (as the ranking's, :func:`analysis.aggregate.borrow_variance`)."""
    early_steps, late_steps = windows(at_step)
    out: list[Trend] = []
    for metric in TREND_METRICS:
        runs = late_run_means(collection, labels, metric, late_steps)
        if runs.empty:
            continue
        steps = collection.steps
        early = (steps.loc[steps[LABEL].isin(labels) & steps["step"].isin(early_steps)]
                 .groupby(LABEL)[metric].mean() if metric in steps else pd.Series(dtype=float))
        # a run that logged inf or nan in the window has no late value to compare: its config
        # is said apart, and kept out of the seed variance (one such run made it nan for all)
        finite = runs[VALUE].map(math.isfinite)
        not_finite = set(runs.loc[~finite, LABEL])
        configs = [ConfigData(label, part[VALUE].to_numpy(float))
                   for label, part in runs[finite].groupby(LABEL, sort=False)
                   if label not in not_finite]
        runs = runs[finite & ~runs[LABEL].isin(not_finite)]
        other = (late_run_means(borrowed, borrowed.labels, metric, late_steps)
                 if borrowed is not None else pd.DataFrame())
        lent = None
        if not other.empty:
            theirs = SeedVariance.pooled([ConfigData(label, part[VALUE].to_numpy(float))
                                          for label, part in other.groupby(LABEL, sort=False)])
            factor = upper_bound_factor(theirs.df) if inflate else 1.0
            lent = SeedVariance(theirs.variance * factor, theirs.df, "borrowed",
                                f"the borrowed sweep's seeds ({theirs.df} df)"
                                + (f", inflated x{factor:.2f} to their upper 95% bound"
                                   if inflate else ""))
        seeds = seed_variance(configs, runs, collection.label_keys, lent)
        by_label = {c.label: c for c in configs}
        tests = {c.label: pair_test(c, by_label[best], seeds) for c in configs
                 if c.label != best and best in by_label}
        tested = {label: t.p_value for label, t in tests.items() if t is not None}
        adjusted = dict(zip(tested, holm(list(tested.values())), strict=True))
        noise = seeds.describe()
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
            out.append(Trend(label, metric, float(early.get(label, math.nan)), late, verdict, p,
                             noise))
    return out


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (statsmodels' ``multipletests``), in the order given."""
    if not p_values:
        return []
    from statsmodels.stats.multitest import multipletests

    return [float(p) for p in multipletests(list(p_values), method="holm")[1]]


def late_run_means(collection: Collection, labels: Sequence[str], metric: str,
                   late_steps: range) -> pd.DataFrame:
    """Each run's mean of ``metric`` over ``late_steps`` (runs of ``labels`` that logged it
    there): one row per run with its label, the swept keys and :data:`analysis.effects.VALUE`."""
    steps = collection.steps
    if metric not in steps:
        return pd.DataFrame()
    rows = steps.loc[steps[LABEL].isin(labels) & steps["step"].isin(late_steps)
                     & steps[metric].notna(), ["run_id", LABEL, metric]]
    if rows.empty:
        return pd.DataFrame()
    means = rows.groupby("run_id", sort=False).agg(label=(LABEL, "first"), value=(metric, "mean"))
    keys = collection.runs.set_index("run_id")[collection.label_keys].reindex(means.index)
    order = {label: i for i, label in enumerate(labels)}
    frame = pd.concat([means.rename(columns={"label": LABEL, "value": VALUE}), keys], axis=1)
    return frame.sort_values(LABEL, key=lambda s: s.map(order), kind="stable").reset_index(drop=True)
