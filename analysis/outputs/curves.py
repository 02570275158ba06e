"""The per-config curves of a sweep, for its figures and report: runs sharing a config label (they
differ only in seed) reduced to one curve, at each step the mean of the metric over the seeds that
logged it with a band (the min-max over seeds, or a 95% interval of the mean), against the step or
against the mean training wall-clock (evaluation excluded, ``TRAIN_CLOCK``) of those seeds at that
step; where two configs stopped (:func:`label_end`), their rewards at equal steps and equal
wall-clock (:func:`compare_with`), and each run's first evaluation reaching a bar
(:func:`first_reaching`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy import special

from analysis.readers.collect import LABEL, Collection, gpu_hours
from analysis.readers.run_rows import ELAPSED, EVAL_REWARD, TRAIN_CLOCK
from analysis.stats.levels import ALPHA

Band = Literal["range", "ci95"]
BAND_TEXT = {"range": "band: min-max over seeds",
             "ci95": "band: 95% interval of the mean (t over seeds, their variance pooled over "
                     "configs; one seed: exact binomial over the evaluated responses)"}


@dataclass(frozen=True)
class Curve:
    """One config's curve: mean ``y`` over ``n_runs`` seeds with its band ``lo``-``hi``
    (:data:`BAND_TEXT`)."""

    x: np.ndarray
    y: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    n_runs: int


EMPTY = Curve(np.empty(0), np.empty(0), np.empty(0), np.empty(0), 0)


def label_curves(steps: pd.DataFrame, metric: str, x: str = "step",
                 band: Band = "range") -> dict[str, Curve]:
    """The seed-aggregated curve of ``metric`` for every label, against ``step`` or ``TRAIN_CLOCK``
    (the mean wall-clock of the seeds at each step), in one pass over the frame; ``band``
    ``range`` is the min-max over seeds, ``ci95`` the 95% interval of the mean of a 0-1 reward:
    Student's t with the seed variance at that step pooled over the configs (where some config
    has two or more seeds there: the comparisons' assumption of one seed variance), else the
    exact (Clopper-Pearson) binomial interval over the step's ``eval/n_responses`` (or
    ``eval/n_examples``) responses with 0/1 rewards (no band where neither is known)."""
    if metric not in steps or x not in steps:
        return {}
    sizes = [c for c in ("eval/n_responses", "eval/n_examples") if c in steps]
    rows = steps.loc[steps[metric].notna(),
                     list(dict.fromkeys([LABEL, "step", "run_id", metric, x, *sizes]))]
    stats = rows.groupby([LABEL, "step"], sort=True)[metric].agg(["mean", "min", "max"])
    if band == "ci95":
        responses = (rows[sizes].bfill(axis=1).iloc[:, 0] if sizes
                     else pd.Series(np.nan, index=rows.index))
        grouped = rows.assign(responses=responses).groupby([LABEL, "step"], sort=True)
        count = grouped[metric].count()
        # the seed variance at a step, pooled over the configs there (as the comparisons pool it)
        squares = ((count - 1) * grouped[metric].var().fillna(0.0)).groupby(level=1).sum()
        df = (count - 1).groupby(level=1).sum()
        at = stats.index.get_level_values(1)
        stats["min"], stats["max"] = _interval_of_mean(
            stats["mean"].to_numpy(float), (squares / df).reindex(at).to_numpy(float),
            df.reindex(at).to_numpy(float), count.to_numpy(float),
            grouped["responses"].first().to_numpy(float))
    if x != "step":
        stats["x"] = rows.groupby([LABEL, "step"], sort=True)[x].mean()
    n_runs = rows.groupby(LABEL)["run_id"].nunique()
    curves = {}
    for label, part in stats.groupby(level=0, sort=False):
        steps_of = part.index.get_level_values(1).to_numpy(float)
        curves[label] = Curve(
            x=steps_of if x == "step" else part["x"].to_numpy(float),
            y=part["mean"].to_numpy(float), lo=part["min"].to_numpy(float),
            hi=part["max"].to_numpy(float), n_runs=int(n_runs[label]),
        )
    return curves


def _interval_of_mean(mean: np.ndarray, variance: np.ndarray, df: np.ndarray, n: np.ndarray,
                      responses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """95% bounds of each point, the mean of ``n`` seeds (see :func:`label_curves`): t on ``df``
    degrees of freedom with the pooled seed ``variance`` where ``df`` > 0, else the exact
    binomial over ``responses`` for one seed; clipped to 0-1; the mean itself where there is
    neither."""
    with np.errstate(divide="ignore", invalid="ignore"):
        half = special.stdtrit(np.maximum(df, 1), 1 - ALPHA / 2) * np.sqrt(variance / n)
        k = np.round(mean * responses)  # Clopper-Pearson: quantiles of Beta(k, n-k+1), Beta(k+1, n-k)
        lo_binomial = np.where(k > 0, special.betaincinv(k, responses - k + 1, ALPHA / 2), 0.0)
        hi_binomial = np.where(k < responses, special.betaincinv(k + 1, responses - k, 1 - ALPHA / 2), 1.0)
    seeds = df > 0
    single = ~seeds & np.isfinite(responses) & (responses > 0)
    lo = np.where(seeds, mean - half, np.where(single, lo_binomial, mean))
    hi = np.where(seeds, mean + half, np.where(single, hi_binomial, mean))
    return np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)


def value_at(curve: Curve, x: float) -> float:
    """The curve's ``y`` at its last point (in step order) at or before ``x``, else NaN.

    Mean wall-clock need not grow with the step when seeds stop at different steps, so the
    points are not assumed sorted by ``x``.
    """
    before = np.flatnonzero(curve.x <= x)
    return float(curve.y[before[-1]]) if len(before) else math.nan


class SweepCurves:
    """:func:`label_curves` of one steps frame, each (metric, x) computed once when first asked."""

    def __init__(self, steps: pd.DataFrame) -> None:
        self.steps = steps
        self._cache: dict[tuple[str, str], dict[str, Curve]] = {}

    def curve(self, label: str, metric: str, x: str = "step") -> Curve:
        """The curve of ``label`` (empty when it has none)."""
        if (metric, x) not in self._cache:
            self._cache[metric, x] = label_curves(self.steps, metric, x)
        return self._cache[metric, x].get(label, EMPTY)


def label_end(curves: SweepCurves, label: str) -> dict[str, float]:
    """Where ``label`` stopped: ``{"step": last step, TRAIN_CLOCK: mean wall-clock at it}``."""
    curve = curves.curve(label, TRAIN_CLOCK, "step")
    if not len(curve.x):
        return {"step": math.nan, TRAIN_CLOCK: math.nan}
    return {"step": float(curve.x[-1]), TRAIN_CLOCK: float(curve.y[-1])}


def compare_with(curves: SweepCurves, label: str, baseline: str) -> dict[str, float]:
    """Mean eval reward of ``label`` and ``baseline`` at equal steps and at equal wall-clock.

    For each axis (``"step"``, ``TRAIN_CLOCK``) the compared point is where the first of the two
    stopped (:func:`label_end`), and each side's reward is its last evaluation at or before
    it: keys ``axis``, ``"config@" + axis`` and ``"baseline@" + axis``.
    """
    ends = [label_end(curves, label), label_end(curves, baseline)]
    out: dict[str, float] = {}
    for axis in ("step", TRAIN_CLOCK):
        point = math.nan if any(math.isnan(e[axis]) for e in ends) else min(e[axis] for e in ends)
        out[axis] = point
        for side, name in (("config", label), ("baseline", baseline)):
            out[f"{side}@{axis}"] = value_at(curves.curve(name, EVAL_REWARD, axis), point)
    return out


def first_reaching(collection: Collection, bar: float) -> pd.DataFrame:
    """Each run's first evaluation with ``eval/reward`` at or above ``bar``: one row per run
    that reaches it (``run_id``, config label, ``seed``, ``step``, ``eval/reward``,
    ``time/elapsed_s`` and ``gpu_hours`` at that step, as :func:`analysis.readers.collect.gpu_hours`
    counts them), the earliest in GPU-hours (then steps) first."""
    columns = ["run_id", LABEL, "seed", "step", EVAL_REWARD, ELAPSED, "cluster.gpus_per_job"]
    steps = collection.steps
    if EVAL_REWARD not in steps:
        return pd.DataFrame(columns=[*columns[:-1], "gpu_hours"])
    rows = steps.loc[steps[EVAL_REWARD] >= bar, [c for c in columns if c in steps]]
    first = rows.sort_values(["run_id", "step"], kind="stable").groupby("run_id").head(1)
    first = first.reindex(columns=columns)
    first["gpu_hours"] = [gpu_hours(elapsed, gpus) for elapsed, gpus in
                          zip(first[ELAPSED], first["cluster.gpus_per_job"], strict=True)]
    return (first.drop(columns="cluster.gpus_per_job")
            .sort_values(["gpu_hours", "step"], kind="stable").reset_index(drop=True))
