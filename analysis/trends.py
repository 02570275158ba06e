"""The other metrics' trends the handout asks every study to comment on (entropy, response length,
gradient norm, clip fraction): per config, the metric early and late in the run, its change, and
whether the config's late value differs from the best config's beyond the noise.

Early is the mean over the first ``WINDOW`` of the GRPO steps 1..``at_step`` (the compared step of
the ranking), late over the last ``WINDOW`` of them (at least ``MIN_WINDOW`` steps each). The noise is the
spread between seeds where both configs have two or more runs with values there (Welch's t-test
on the runs' late means), else between the steps of the late window (Welch's t-test on the
per-step means over runs; steps are autocorrelated, so this is the weaker test, and says so).
p-values are Holm-adjusted over the configs compared for each metric.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special

from analysis.collect import LABEL, Collection
from analysis.uncertainty import ALPHA, holm

TREND_METRICS = ("train/entropy", "train/mean_response_length", "train/grad_norm",
                 "train/clip_fraction")
WINDOW = 0.1
"""Share of the compared steps the early and the late window each cover..."""
MIN_WINDOW = 3
"""...and the fewest steps they cover (all of them in a shorter run)."""


@dataclass(frozen=True)
class Trend:
    """``metric`` of config ``label``: mean ``early`` and ``late`` (over its runs and the window's
    steps), the change, and against the best config's late value: ``versus_best`` (``higher``,
    ``lower``, ``within noise``; empty for the best config itself), the Holm-adjusted p-value and
    the noise the test used (``seeds`` or ``steps``)."""

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


def trends(collection: Collection, labels: Sequence[str], best: str, at_step: int) -> list[Trend]:
    """Every metric of ``TREND_METRICS`` that was logged, for each of ``labels`` (best first)."""
    steps = collection.steps
    early_steps, late_steps = windows(at_step)
    rows = steps[steps[LABEL].isin(labels)]
    out: list[Trend] = []
    for metric in TREND_METRICS:
        if metric not in rows or rows[metric].notna().sum() == 0:
            continue
        values = rows.loc[rows[metric].notna(), [LABEL, "run_id", "step", metric]]
        early = values[values["step"].isin(early_steps)].groupby(LABEL)[metric].mean()
        late_rows = values[values["step"].isin(late_steps)]
        late = late_rows.groupby(LABEL)[metric].mean()
        tests = _tests(late_rows, metric, [lb for lb in labels if lb != best and lb in late.index],
                       best) if best in late.index else {}
        tested = {label: t for label, t in tests.items() if not math.isnan(t[0])}
        adjusted = dict(zip(tested, holm([p for p, _ in tested.values()]), strict=True))
        for label in labels:
            if label not in late.index:
                continue
            p = adjusted.get(label, math.nan)
            noise = tests.get(label, (math.nan, ""))[1]
            if label == best:
                verdict = ""
            elif math.isnan(p):
                verdict = "no test"
            elif p >= ALPHA:
                verdict = "within noise"
            else:
                verdict = "higher" if late[label] > late[best] else "lower"
            out.append(Trend(label, metric, float(early.get(label, math.nan)), float(late[label]),
                             verdict, p, noise))
    return out


def _tests(late_rows: pd.DataFrame, metric: str, labels: Sequence[str], best: str
           ) -> dict[str, tuple[float, str]]:
    """Each of ``labels``' p-value against ``best`` and the noise it used: Welch's t-test
    (every label at once: Welch's t and degrees of freedom, Student's t of scipy.special; the
    tests check it against scipy.stats.ttest_ind) on the runs' late means where both have two or
    more runs, else on the late window's per-step means over runs; NaN where a side has fewer
    than 2 values or neither varies."""
    spread = {noise: late_rows.groupby([LABEL, key])[metric].mean().groupby(level=0)
              .agg(["mean", "std", "count"]) for noise, key in (("seeds", "run_id"), ("steps", "step"))}
    runs = spread["seeds"]["count"]
    noise = ["seeds" if runs.get(label, 0) > 1 and runs.get(best, 0) > 1 else "steps"
             for label in labels]
    if not labels:
        return {}
    # (labels, 3): mean, std, count of each label's values and of the best config's
    mine = np.array([spread[n].loc[label].to_numpy(float) for n, label in zip(noise, labels, strict=True)])
    theirs = np.array([spread[n].loc[best].to_numpy(float) for n in noise])
    with np.errstate(divide="ignore", invalid="ignore"):
        v1, v2 = mine[:, 1] ** 2 / mine[:, 2], theirs[:, 1] ** 2 / theirs[:, 2]
        df = (v1 + v2) ** 2 / (v1 ** 2 / (mine[:, 2] - 1) + v2 ** 2 / (theirs[:, 2] - 1))
        p = 2 * special.stdtr(df, -np.abs(mine[:, 0] - theirs[:, 0]) / np.sqrt(v1 + v2))
    testable = ((mine[:, 2] > 1) & (theirs[:, 2] > 1)
                & (np.maximum(mine[:, 1], theirs[:, 1]) > 1e-9))
    return {label: (float(q) if ok else math.nan, n)
            for label, q, ok, n in zip(labels, np.asarray(p), testable, noise, strict=True)}
