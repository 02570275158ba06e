"""Seed aggregation: per-config curves and summaries, ranking, on-policy baselines.

Runs sharing a ``config label`` (they differ only in seed) are reduced to one curve: at each
step the mean, min and max of the metric over the seeds that logged it, against the step or
against the mean training wall-clock (evaluation excluded, ``TRAIN_CLOCK``) of those seeds at
that step.

Ranking (:func:`rank`, what the report, the sweep summary, ``promote`` and the study chain pick
by): configs with a run stopped early (collapsed, diverged, pruned: ``STOPPED_STATUSES``) are left
out; the others are compared at the largest GRPO step every one of them reached (the step every
completed run reached; while none has completed, every run so far), each run's criterion taken
over its evaluations up to that step, so that a config is never ranked above another for steps
the other did not get to train. Runs that did not complete (running, failed, cancelled) count
with what they logged up to that step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from analysis.collect import (
    ELAPSED,
    EVAL_REWARD,
    LABEL,
    STOPPED_STATUSES,
    TRAIN_CLOCK,
    Collection,
    gpu_hours,
)

Criterion = Literal["best_eval_reward", "final_eval_reward"]
CRITERIA: tuple[Criterion, ...] = ("best_eval_reward", "final_eval_reward")
# what "best" means wherever a config is picked (report, sweep summary, promote, the study chain):
# the highest mean over seeds of each run's best validation reward
BEST_CRITERION: Criterion = "best_eval_reward"
# a config within this much validation reward (0-1) of the best one is a near-tie, reported with it
NEAR_TIE = 0.01


@dataclass(frozen=True)
class Curve:
    """One config's curve: mean ``y`` over ``n_runs`` seeds with its min-max band."""

    x: np.ndarray
    y: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    n_runs: int


EMPTY = Curve(np.empty(0), np.empty(0), np.empty(0), np.empty(0), 0)


def label_curves(steps: pd.DataFrame, metric: str, x: str = "step") -> dict[str, Curve]:
    """The seed-aggregated curve of ``metric`` for every label, against ``step`` or ``TRAIN_CLOCK``
    (the mean wall-clock of the seeds at each step), in one pass over the frame."""
    if metric not in steps or x not in steps:
        return {}
    rows = steps.loc[steps[metric].notna(), list(dict.fromkeys([LABEL, "step", "run_id", metric, x]))]
    stats = rows.groupby([LABEL, "step"], sort=True)[metric].agg(["mean", "min", "max"])
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


def value_at(curve: Curve, x: float) -> float:
    """The curve's ``y`` at its last point (in step order) at or before ``x``, else NaN.

    Mean wall-clock need not grow with the step when seeds stop at different steps, so the
    points are not assumed sorted by ``x``.
    """
    before = np.flatnonzero(curve.x <= x)
    return float(curve.y[before[-1]]) if len(before) else math.nan


def config_summary(collection: Collection) -> pd.DataFrame:
    """One row per config label (in sorted order): runs, runs with metrics (``n_with_data``),
    seeds, statuses and mean outcomes (over the runs that have them)."""
    runs = collection.runs
    grouped = runs.groupby(LABEL, sort=False)
    summary = pd.DataFrame({
        "n_runs": grouped.size(),
        "n_with_data": grouped["steps_done"].agg(lambda s: int((s > 0).sum())),
        "seeds": grouped["seed"].agg(lambda s: ", ".join(str(v) for v in sorted(s.dropna()))),
        "statuses": grouped["status"].agg(lambda s: ", ".join(sorted(set(s)))),
        "stopped": grouped["status"].agg(lambda s: bool(s.isin(STOPPED_STATUSES).any())),
        "final_eval_reward": grouped["final_eval_reward"].mean(),
        "best_eval_reward": grouped["best_eval_reward"].mean(),
        "wall_clock_s": grouped["wall_clock_s"].mean(),
        "gpu_hours": grouped["gpu_hours"].sum(min_count=1),
    })
    return summary.reindex(collection.labels)


def run_values_at(collection: Collection, step: float) -> pd.DataFrame:
    """Each run's ``best_eval_reward`` and ``final_eval_reward`` over its evaluations at GRPO
    steps up to ``step``: one row per run that has one (index ``run_id``, with its label)."""
    steps = collection.steps
    if EVAL_REWARD not in steps:
        return pd.DataFrame(columns=[LABEL, *CRITERIA])
    rows = steps.loc[steps[EVAL_REWARD].notna() & (steps["step"] <= step),
                     ["run_id", LABEL, "step", EVAL_REWARD]].sort_values(["run_id", "step"], kind="stable")
    grouped = rows.groupby("run_id", sort=False)
    return pd.DataFrame({LABEL: grouped[LABEL].first(),
                         "best_eval_reward": grouped[EVAL_REWARD].max(),
                         "final_eval_reward": grouped[EVAL_REWARD].last()})


@dataclass(frozen=True)
class Ranking:
    """The configs of a sweep ranked by ``criterion`` at GRPO step ``at_step`` (the largest step
    every ranked config reached; None when none is ranked), best first: ``table`` is
    :func:`config_summary`'s rows with both criteria taken at that step. ``excluded`` are the
    configs left out because a run was stopped early (label -> statuses); ``near_ties`` the
    configs that tie or nearly tie with the best one (label -> why)."""

    criterion: Criterion
    table: pd.DataFrame
    excluded: dict[str, str]
    near_ties: dict[str, str]
    at_step: int | None = None

    @property
    def best(self) -> str | None:
        """The best config's label (the first in sorted config order on an exact tie)."""
        return None if self.table.empty else str(self.table.index[0])

    def value(self, label: str) -> float:
        """``label``'s value of the criterion (mean over seeds)."""
        return float(self.table.loc[label, self.criterion])


def _seed_range(runs: pd.DataFrame, label: str, criterion: Criterion) -> tuple[float, float, int]:
    """Min and max of ``criterion`` over the ``runs`` (seeds) of ``label``, and how many have it."""
    values = runs.loc[runs[LABEL] == label, criterion].dropna()
    return float(values.min()), float(values.max()), len(values)


def rank(collection: Collection, criterion: Criterion = BEST_CRITERION,
         labels: Iterable[str] | None = None, tolerance: float = NEAR_TIE) -> Ranking:
    """The configs (of ``labels`` only, when given) without a run stopped early, ranked by
    ``criterion`` at the largest step every one of them reached (see the module docstring), with
    what was left out and the near-ties of the best config: a config whose value is within
    ``tolerance`` of the best one, or whose range over seeds overlaps the best one's when both
    have two or more seeds."""
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, not {criterion!r}")
    summary = config_summary(collection)
    if labels is not None:
        summary = summary[summary.index.isin(set(labels))]
    excluded = summary.loc[summary["stopped"], "statuses"].to_dict()
    candidates = summary[~summary["stopped"] & summary[criterion].notna()]
    runs = collection.runs[collection.runs[LABEL].isin(candidates.index)
                           & collection.runs[criterion].notna()]
    completed = runs[runs["status"] == "completed"]
    reached = (completed if not completed.empty else runs)["steps_done"]
    at_step = int(reached.min()) if not reached.empty else None
    values = run_values_at(collection, at_step if at_step is not None else -1)
    values = values[values[LABEL].isin(candidates.index)]
    means = values.groupby(LABEL)[list(CRITERIA)].mean()
    table = candidates.assign(**{name: means[name] for name in CRITERIA})
    ranked = table[table[criterion].notna()].sort_values(criterion, ascending=False, kind="stable")
    near: dict[str, str] = {}
    if not ranked.empty:
        best = ranked.index[0]
        top = ranked.iloc[0][criterion]
        lo, hi, n = _seed_range(values, best, criterion)
        for label, value in ranked[criterion].iloc[1:].items():
            other_lo, other_hi, other_n = _seed_range(values, label, criterion)
            if value == top:
                near[label] = f"tie: {criterion} {value:.4f} equals the best config's"
            elif top - value <= tolerance:
                near[label] = (f"near-tie: {criterion} {value:.4f} is within {tolerance:g} of "
                               f"the best config's {top:.4f}")
            elif n > 1 and other_n > 1 and other_hi >= lo and other_lo <= hi:
                near[label] = (f"near-tie: its seeds' {criterion} {other_lo:.4f}-{other_hi:.4f} "
                               f"overlap the best config's {lo:.4f}-{hi:.4f}")
    return Ranking(criterion, ranked, excluded, near, at_step if not ranked.empty else None)


@dataclass(frozen=True)
class Spend:
    """What a sweep's runs spent (``spent``) against what its full grid would have
    (``full_grid``: each run that did not complete priced at its own pace up to its
    ``n_grpo_steps``, see :func:`spend`), in ``unit`` (GPU-hours, or CPU-hours for runs without a GPU), and how many
    runs stopped early, by status (``stopped``)."""

    spent: float
    full_grid: float
    unit: str
    stopped: dict[str, int]

    def describe(self) -> str:
        """``2 pruned, 1 collapsed; 0.02 CPU-hours spent of an estimated 0.03 for the full grid
        (63%)``."""
        counts = ", ".join(f"{n} {status}" for status, n in self.stopped.items()) or "none"
        share = f" ({self.spent / self.full_grid:.0%})" if self.full_grid > 0 else ""
        return (f"{counts}; {_hours(self.spent)} {self.unit} spent of an estimated "
                f"{_hours(self.full_grid)} for the full grid{share}")


def _hours(hours: float) -> str:
    """``12.34``, or two significant digits below 0.1 (a CPU sweep's ``0.0014``)."""
    return f"{hours:.2f}" if hours >= 0.1 else f"{hours:.2g}"


def spend(collection: Collection) -> Spend:
    """The sweep's :class:`Spend`, over the runs that have metrics. A run that did not complete
    is priced at its own pace: its step-0 evaluation once, then its GRPO steps so far scaled up
    to its n_grpo_steps."""
    runs = collection.runs[collection.runs["steps_done"] > 0].set_index("run_id")
    on_gpus = (runs["gpu_hours"] > 0).any()
    hours = runs["gpu_hours" if on_gpus else "cpu_hours"].fillna(0.0)
    planned = pd.to_numeric(runs["n_grpo_steps"], errors="coerce")
    short = (runs["status"] != "completed") & (planned > runs["steps_done"])
    steps = collection.steps
    start = steps[steps["step"] == 0].set_index("run_id")[ELAPSED].reindex(runs.index).fillna(0.0)
    first = hours * (start / runs["wall_clock_s"]).clip(0, 1).fillna(0.0)  # the step-0 evaluation
    scaled = first + (hours - first) * (planned / runs["steps_done"])
    counts = runs.loc[runs["status"].isin(STOPPED_STATUSES), "status"].value_counts()
    return Spend(float(hours.sum()), float(scaled.where(short, hours).fillna(hours).sum()),
                 "GPU-hours" if on_gpus else "CPU-hours",
                 {status: int(counts[status]) for status in STOPPED_STATUSES if status in counts})


def on_policy_labels(collection: Collection) -> list[str]:
    """Labels of the on-policy configs: one optimizer step per rollout batch (one epoch and
    ``train_batch_size == rollout_batch_size``; ``BatchPlan.off_policy`` is False)."""
    runs = collection.runs
    labels = set(runs.loc[runs["off_policy"].eq(False), LABEL])
    return [label for label in collection.labels if label in labels]


def on_policy_baseline(collection: Collection, label: str) -> str | None:
    """The on-policy config sharing most swept values with ``label`` (first in order on ties)."""
    config = collection.configs[label]

    def shared(candidate: str) -> int:
        return sum(collection.configs[candidate].get(k) == v for k, v in config.items())

    return max(on_policy_labels(collection), key=shared, default=None)


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
    ``time/elapsed_s`` and ``gpu_hours`` at that step, as :func:`analysis.collect.gpu_hours`
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
