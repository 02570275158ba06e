"""The other metrics' trends the handout asks every study to comment on (entropy, response length,
gradient norm, clip fraction), read from a sweep: each run's mean of a metric over the early and
the late window of the compared steps, which :mod:`analysis.stats.trends` tests between configs."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from analysis.readers.collect import LABEL, Collection
from analysis.stats.effects import VALUE
from analysis.stats.trends import Trend, metric_trends, windows

TREND_METRICS = ("train/entropy", "train/mean_response_length", "train/grad_norm",
                 "train/clip_fraction")


def trends(collection: Collection, labels: Sequence[str], best: str, at_step: int,
           borrowed: Collection | None = None, outside: Sequence[str] = ()) -> list[Trend]:
    """Every metric of ``TREND_METRICS`` that was logged, for each of ``labels`` (best first);
    ``borrowed``: the sweep the ranking borrowed its seed variance from, collected; ``outside``:
    the training settings this sweep ran and that one did not (its variance is then taken at
    its upper 95% bound, as the ranking's: :func:`analysis.decisions.ranking.borrow_variance`)."""
    early_steps, late_steps = windows(at_step)
    out: list[Trend] = []
    for metric in TREND_METRICS:
        runs = late_run_means(collection, labels, metric, late_steps)
        if runs.empty:
            continue
        steps = collection.steps
        early = (steps.loc[steps[LABEL].isin(labels) & steps["step"].isin(early_steps)]
                 .groupby(LABEL)[metric].mean() if metric in steps else pd.Series(dtype=float))
        other = (late_run_means(borrowed, borrowed.labels, metric, late_steps)
                 if borrowed is not None else pd.DataFrame())
        out += metric_trends(metric, labels, best, early, runs, collection.label_keys, other,
                             outside)
    return out


def late_run_means(collection: Collection, labels: Sequence[str], metric: str,
                   late_steps: range) -> pd.DataFrame:
    """Each run's mean of ``metric`` over ``late_steps`` (runs of ``labels`` that logged it
    there): one row per run with its label, the swept keys and :data:`analysis.stats.effects.VALUE`."""
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
