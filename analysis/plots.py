"""Figures of a collected sweep, written headless as PNG and SVG into ``<sweep>/figures/``.

Every plotting function returns the data it drew (:class:`CurveFigure` or
:class:`HeatmapFigure`) so that tests can check it against the collected frame.

* ``eval_reward``: validation reward against the GRPO step and against wall-clock;
* ``training``: entropy, mean response length, gradient norm, clip fraction and training
  reward against the step;
* ``heatmaps`` (2-D sweeps only): final and best validation reward over the two swept keys.

Runs sharing a config label are drawn as their mean with a min-max band over seeds; diverged
and collapsed runs get an X where they stopped; an optional external curve (a CSV with a
``step`` column and the metric) is drawn on the panel of that metric against the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis.aggregate import Curve, config_summary, label_curve
from analysis.collect import (
    ELAPSED,
    EVAL_REWARD,
    LABEL,
    UNSTABLE_STATUSES,
    Collection,
    sort_key,
)

TRAINING_METRICS = (
    "train/entropy",
    "train/mean_response_length",
    "train/grad_norm",
    "train/clip_fraction",
    "train/reward_mean",
)
FORMATS = ("png", "svg")
SPARSE_POINTS = 40
STOPPED = "run diverged / collapsed here"


@dataclass(frozen=True)
class External:
    """A reference curve from a CSV: ``metric`` against ``step``, drawn as ``label``."""

    label: str
    metric: str
    step: np.ndarray
    value: np.ndarray

    @staticmethod
    def read(path: Path, metric: str, label: str) -> External:
        """Read ``step`` and ``metric`` columns of the CSV at ``path``."""
        frame = pd.read_csv(path)
        missing = {"step", metric} - set(frame.columns)
        if missing:
            raise ValueError(f"{path} lacks column(s) {sorted(missing)}")
        frame = frame[["step", metric]].dropna().sort_values("step")
        return External(label, metric, frame["step"].to_numpy(float), frame[metric].to_numpy(float))


@dataclass(frozen=True)
class Marker:
    """Where a diverged or collapsed run stopped, in a panel's coordinates."""

    run_id: str
    label: str
    status: str
    x: float
    y: float


@dataclass(frozen=True)
class Panel:
    """What one axes shows: ``metric`` against ``x`` (``step``, or wall-clock in ``unit``)."""

    metric: str
    x: str
    unit: str
    curves: dict[str, Curve]
    markers: list[Marker]
    external: External | None = None


@dataclass(frozen=True)
class CurveFigure:
    """A saved figure of line panels, keyed by panel name."""

    paths: list[Path]
    panels: dict[str, Panel] = field(default_factory=dict)


@dataclass(frozen=True)
class HeatmapFigure:
    """A saved figure of heatmaps: ``grids[name]`` has the first swept key as index."""

    paths: list[Path]
    grids: dict[str, pd.DataFrame]


def _colors(labels: list[str]) -> dict[str, tuple]:
    many = len(labels) > 10
    cmap = colormaps["viridis"].resampled(len(labels)) if many else colormaps["tab10"]
    return {label: cmap(i) for i, label in enumerate(labels)}


def wall_clock_unit(collection: Collection) -> tuple[str, float]:
    """Minutes when the longest run is under two hours, else hours: (unit, seconds per unit)."""
    longest = collection.runs["wall_clock_s"].max()
    return ("h", 3600.0) if longest >= 7200 else ("min", 60.0)


def _stop_markers(collection: Collection, metric: str, x: str, scale: float) -> list[Marker]:
    steps = collection.steps
    unstable = collection.runs[collection.runs["status"].isin(UNSTABLE_STATUSES)]
    markers = []
    for run in unstable.to_dict("records"):
        rows = steps[steps["run_id"] == run["run_id"]]
        known = rows[rows[metric].notna()]
        if len(known):
            # at the step the run stopped, at the last value the metric had
            markers.append(Marker(run["run_id"], run[LABEL], run["status"],
                                  float(rows.iloc[-1][x]) / scale, float(known.iloc[-1][metric])))
    return markers


def draw_panel(ax: Axes, collection: Collection, metric: str, x: str = "step",
               external: External | None = None) -> Panel:
    """Draw ``metric`` against ``x`` (``step`` or ``ELAPSED``) for every config on ``ax``."""
    unit, scale = wall_clock_unit(collection) if x == ELAPSED else ("step", 1.0)
    colors = _colors(collection.labels)
    curves: dict[str, Curve] = {}
    if metric in collection.steps:
        for label in collection.labels:
            curve = label_curve(collection.steps, label, metric, x)
            if not len(curve.x):
                continue
            curve = Curve(curve.x / scale, curve.y, curve.lo, curve.hi, curve.n_runs)
            curves[label] = curve
            sparse = len(curve.x) <= SPARSE_POINTS  # e.g. evaluations: show the points
            ax.plot(curve.x, curve.y, color=colors[label], label=label, lw=1.4,
                    marker="o" if sparse else None, ms=3)
            if curve.n_runs > 1:
                ax.fill_between(curve.x, curve.lo, curve.hi, color=colors[label], alpha=0.2, lw=0)
    markers = _stop_markers(collection, metric, x, scale) if metric in collection.steps else []
    for marker in markers:
        ax.plot(marker.x, marker.y, "X", color=colors[marker.label], ms=9, mec="black", mew=0.6)
    if markers:
        ax.plot([], [], "X", color="gray", ms=9, mec="black", mew=0.6, label=STOPPED)
    shown = external if external and external.metric == metric and x == "step" else None
    if shown is not None:
        ax.plot(shown.step, shown.value, "k--", lw=1.4, label=shown.label)
    ax.set_xlabel("GRPO step" if x == "step" else f"wall-clock ({unit})")
    ax.set_ylabel(metric)
    ax.set_title(metric if x == "step" else f"{metric} vs wall-clock")
    ax.grid(alpha=0.3)
    return Panel(metric, x, unit, curves, markers, shown)


def _save(fig: Figure, out_dir: Path, name: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.{fmt}" for fmt in FORMATS]
    for path in paths:
        fig.savefig(path, dpi=110)
    return paths


def _legend(fig: Figure, axes: list[Axes]) -> None:
    handles: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="outside lower center",
                   ncols=min(3, len(handles)), fontsize="small")


def plot_eval_reward(collection: Collection, out_dir: Path,
                     external: External | None = None) -> CurveFigure:
    """Validation reward against the step and against wall-clock (``eval_reward.*``)."""
    fig = Figure(figsize=(12, 5 + 0.2 * len(collection.labels)), layout="constrained")
    ax_step, ax_time = fig.subplots(1, 2)
    panels = {
        "step": draw_panel(ax_step, collection, EVAL_REWARD, "step", external),
        "wall_clock": draw_panel(ax_time, collection, EVAL_REWARD, ELAPSED),
    }
    _legend(fig, [ax_step, ax_time])
    return CurveFigure(_save(fig, out_dir, "eval_reward"), panels)


def plot_training(collection: Collection, out_dir: Path,
                  external: External | None = None) -> CurveFigure:
    """Entropy, response length, gradient norm, clip fraction, train reward (``training.*``)."""
    fig = Figure(figsize=(15, 8 + 0.2 * len(collection.labels)), layout="constrained")
    axes = list(fig.subplots(2, 3).flat)
    panels = {
        metric: draw_panel(ax, collection, metric, "step", external)
        for ax, metric in zip(axes, TRAINING_METRICS, strict=False)
    }
    axes[-1].set_axis_off()
    _legend(fig, axes)
    return CurveFigure(_save(fig, out_dir, "training"), panels)


def plot_heatmaps(collection: Collection, out_dir: Path) -> HeatmapFigure | None:
    """Final and best validation reward over a 2-D sweep (``heatmaps.*``); None otherwise."""
    if len(collection.label_keys) != 2:
        return None
    rows_key, cols_key = collection.label_keys
    summary = config_summary(collection)
    cells = pd.DataFrame([
        {rows_key: config[rows_key], cols_key: config[cols_key],
         **summary.loc[label, ["final_eval_reward", "best_eval_reward"]].to_dict()}
        for label, config in collection.configs.items()
    ])
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    grids = {}
    for ax, name in zip(fig.subplots(1, 2), ("final_eval_reward", "best_eval_reward"), strict=True):
        grid = cells.pivot(index=rows_key, columns=cols_key, values=name)
        grid = grid.reindex(index=sorted(grid.index, key=sort_key),
                            columns=sorted(grid.columns, key=sort_key))
        grids[name] = grid
        image = ax.imshow(grid.to_numpy(float), cmap="viridis", aspect="auto")
        ax.set_xticks(range(grid.shape[1]), [str(c) for c in grid.columns])
        ax.set_yticks(range(grid.shape[0]), [str(i) for i in grid.index])
        ax.set_xlabel(cols_key)
        ax.set_ylabel(rows_key)
        ax.set_title(f"{name.replace('_', ' ')} (mean over seeds)")
        for (i, j), value in np.ndenumerate(grid.to_numpy(float)):
            dark = np.isnan(value) or image.norm(value) < 0.5
            ax.text(j, i, "n/a" if np.isnan(value) else f"{value:.3f}", ha="center",
                    va="center", color="white" if dark else "black", fontsize="small")
        fig.colorbar(image, ax=ax)
    return HeatmapFigure(_save(fig, out_dir, "heatmaps"), grids)


def plot_all(collection: Collection, out_dir: Path, external: External | None = None
             ) -> dict[str, CurveFigure | HeatmapFigure]:
    """Every figure that applies to ``collection``, keyed by figure name."""
    if external is not None and external.metric not in (EVAL_REWARD, *TRAINING_METRICS):
        raise ValueError(f"no panel plots {external.metric!r} against the step; "
                         f"choose one of {[EVAL_REWARD, *TRAINING_METRICS]}")
    figures: dict[str, CurveFigure | HeatmapFigure] = {
        "eval_reward": plot_eval_reward(collection, out_dir, external),
        "training": plot_training(collection, out_dir, external),
    }
    heatmaps = plot_heatmaps(collection, out_dir)
    if heatmaps is not None:
        figures["heatmaps"] = heatmaps
    return figures
