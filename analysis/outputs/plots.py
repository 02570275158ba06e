"""Figures of a collected sweep, written headless as PNG and SVG into ``<sweep>/figures/``.

Every plotting function returns the data it drew (:class:`CurveFigure` or
:class:`HeatmapFigure`) so that tests can check it against the collected frame.

* ``eval_reward``: validation reward against the GRPO step and against wall-clock;
* ``training``: entropy, response length, gradient norm, clip fraction and training reward
  against the step, each a smoothed curve (centred rolling mean) over its faint raw one;
* ``heatmaps`` (two or more swept keys): final and late validation reward (the ranking's criterion)
  over two swept keys;
  a cell whose config had a run stopped early (collapsed, diverged or pruned) is hatched grey and
  named, not coloured as if its number were a genuine result;
* ``interaction`` (two or more swept keys): the ranking's compared value of each cell of the first
  two keys (averaged over the others and over seeds) against the first key, one line per level of
  the second, with the 95% interval of each cell's mean on the sweep's seed variance (none without
  one): parallel lines are additive effects, crossing ones an interaction.

Titles and axes name the metric and its unit (:mod:`analysis.names.metric_names`); each figure
names the sweep(s) and their date. Runs sharing a config label are drawn as their mean with a
band: for the validation reward the 95% interval of the mean (t over seeds; one seed: the exact
binomial interval over the evaluation's responses), for training metrics the min-max over seeds,
as the legend says; the colour says the value of the colour key, and every config has its
own line style and marker, so equal curves stay apart and no line is told by colour alone. A point is drawn at the step it was
measured; a diverged or collapsed run gets an X at its last measured point, a run stopped by the
sweep's pruner a bar at its last evaluation.

External curves (:mod:`analysis.readers.external`: an expert-iteration run's entropy, say) are drawn
on the panel of their metric against the step, thick, grey and dashed, named in the legend
with what their x axis counts: on the GRPO-step axis when their steps are GRPO steps, else on
a top x axis of their own (one per kind of step), scaled to their own steps.

A sweep of more than :data:`SMALL_SWEEP` configs is drawn as small multiples: one panel per
value of the facet key, colour by the colour key, the top configs of the report's ranking
highlighted (thick, marked, with their seed band and rank) and the others thin and faint.
The legend then lists the colours, the top configs and the markers: it stays short and is
placed outside the axes in space reserved for it, so it is never cut.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator

from analysis.decisions.ranking import (
    BEST_CRITERION,
    LATE_EVALS,
    VALUE,
    Ranking,
    config_summary,
    rank,
)
from analysis.names.formatting import format_value, sort_key
from analysis.names.metric_names import metric_name
from analysis.outputs.curves import BAND_TEXT, Curve, label_curves
from analysis.readers.collect import LABEL, Collection
from analysis.readers.external import External
from analysis.readers.run_rows import EVAL_REWARD, STOPPED_STATUSES, TRAIN_CLOCK
from analysis.stats.critical import t_quantile
from analysis.stats.effects import varying_keys
from grpo.run.files import atomic_write, subdir

TRAINING_METRICS = (
    "train/entropy",
    "train/mean_response_length",
    "train/grad_norm",
    "train/clip_fraction",
    "train/reward_mean",
)
FORMATS = ("png", "svg")
# a large sweep's figures are PNG only (an SVG of hundreds of curves is slow to write and view)
LARGE_FORMATS = ("png",)
# up to this many configs every config is drawn in full with its own legend entry
SMALL_SWEEP = 10
# configs highlighted in a large sweep
TOP_K = 5
# a curve with at most this many points shows them all (evaluations)
SPARSE_POINTS = 40
# the smoothing window is this fraction of a curve's points
SMOOTH_FRACTION = 0.05
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "*", "h")
STOP_MARKS = {"collapsed": "X", "diverged": "X", "pruned": "|"}
"""The mark at the point where a run stopped early, by its status (STOPPED_STATUSES)."""
# legend labels in a grid cell are wrapped at this many characters
WRAP = 52
STOPPED = {"X": "run stopped: collapsed / diverged (at its last measured point)",
           "|": "run stopped by the sweep's pruner (at its last measured point)"}
# external curves: grey shades and line styles of their own, thicker than a config's line
EXTERNAL_COLORS = ("black", "0.45", "0.65")
EXTERNAL_STYLES = ((0, (6, 2)), (0, (6, 2, 1, 2)), (0, (1, 1.5)))
# vertical offset (axes fractions) between the top x axes of externals that count other steps
EXTERNAL_AXIS_OFFSET = 0.16
SWEEP_TIME = "%Y-%m-%d_%H-%M-%S"


@dataclass(frozen=True)
class Marker:
    """The last measured point of a panel's metric (panel units) of a run stopped early."""

    run_id: str
    label: str
    status: str
    x: float
    y: float
    stop_step: int


@dataclass(frozen=True)
class Style:
    """How one config is drawn: ``muted`` ones thin and faint; ``rank`` of a highlighted one."""

    color: tuple[float, ...]
    linestyle: str
    marker: str
    muted: bool = False
    rank: int | None = None


@dataclass(frozen=True)
class Layout:
    """How a sweep is drawn: ``color_key`` picks colours, ``facet_key`` (large sweeps) the panel;
    ``top`` are the highlighted labels, best first; ``styles`` every label's :class:`Style`."""

    color_key: str | None
    facet_key: str | None
    top: list[str]
    styles: dict[str, Style]

    @property
    def large(self) -> bool:
        """Whether configs are muted and panels faceted (more than SMALL_SWEEP configs)."""
        return any(style.muted for style in self.styles.values())


@dataclass(frozen=True)
class Panel:
    """What one axes shows: ``metric`` against ``x`` (``step``, or wall-clock in ``unit``).

    ``curves`` are the seed means with their bands as drawn; ``smoothed`` the smoothed means
    drawn over faint raw ones (training metrics); ``facet`` the ``(key, value)`` the panel is
    restricted to in a large sweep; ``externals`` the external curves drawn and
    ``external_lines`` their line artists, in the same order (on the panel's axes, or on the
    top axes of their ``x_label``).
    """

    metric: str
    x: str
    unit: str
    curves: dict[str, Curve]
    markers: list[Marker]
    externals: tuple[External, ...] = ()
    smoothed: dict[str, np.ndarray] = field(default_factory=dict)
    facet: tuple[str, object] | None = None
    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    external_lines: tuple[Line2D, ...] = ()


@dataclass(frozen=True)
class CurveFigure:
    """A saved figure of line panels, keyed by panel name; ``title`` names the sweep;
    ``legend`` its texts and ``legend_box`` where it ended up, ``(x0, y0, x1, y1)`` as fractions
    of the figure (all within [0, 1] when nothing is cut)."""

    paths: list[Path]
    panels: dict[str, Panel] = field(default_factory=dict)
    title: str = ""
    legend: list[str] = field(default_factory=list)
    legend_box: tuple[float, float, float, float] | None = None


@dataclass(frozen=True)
class HeatmapFigure:
    """A saved figure of heatmaps: ``grids[name]`` has the row key as index; ``marks[name]``
    holds, per cell, the statuses of the runs stopped early (``collapsed``, ``diverged``,
    ``pruned``) of the config shown."""

    paths: list[Path]
    grids: dict[str, pd.DataFrame]
    marks: dict[str, pd.DataFrame] = field(default_factory=dict)


# ------------------------------------------------------------------------------ layout


def sweep_title(collection: Collection) -> str:
    """``demo sweep of 2025-06-01 12:00 · 4 runs, 4 configs`` (several sweeps joined by +)."""
    names = []
    for sweep in collection.sweeps:
        try:
            when = datetime.strptime(sweep.path.name, SWEEP_TIME).strftime("%Y-%m-%d %H:%M")
            names.append(f"{sweep.path.parent.name} sweep of {when}")
        except ValueError:
            names.append(f"sweep {sweep.path.name}")
    return (f"{' + '.join(names)} · {len(collection.runs)} runs, "
            f"{len(collection.labels)} configs")


def eval_detail(collection: Collection) -> str:
    """How validation responses were sampled: ``greedy``, ``sampled at T=1``, or mixed."""
    temperatures = set(pd.to_numeric(collection.runs["eval.temperature"], errors="coerce")
                       .dropna())
    if len(temperatures) != 1:
        return "" if not temperatures else "sampling differs between runs"
    (temperature,) = temperatures
    return "greedy" if temperature == 0 else f"sampled at T={temperature:g}"


def _key_values(collection: Collection, key: str) -> list[object]:
    return sorted({config[key] for config in collection.configs.values()}, key=sort_key)


def _keys_by_size(collection: Collection) -> list[str]:
    """Swept keys, the one with the most values first (ties in sweep order)."""
    return sorted(collection.label_keys, key=lambda k: -len(_key_values(collection, k)))


def choose_layout(collection: Collection, facet_key: str | None = None,
                  color_key: str | None = None, top_k: int = TOP_K,
                  ranking: Ranking | None = None) -> Layout:
    """Colour, facet and highlight choices (see the module docstring); the highlighted configs
    are the top of ``ranking`` (the report's; computed when not given).

    By default the swept key with the most values colours the lines and, in a large sweep,
    the key with the next most values picks the panel.
    """
    keys = _keys_by_size(collection)
    for given in (facet_key, color_key):
        if given is not None and given not in collection.label_keys:
            raise ValueError(f"{given!r} is not a swept key; choose one of "
                             f"{collection.label_keys}")
    color_key = color_key or next((k for k in keys if k != facet_key), None)
    large = len(collection.labels) > SMALL_SWEEP
    if large:
        facet_key = facet_key or next((k for k in keys if k != color_key), None)
    else:
        facet_key = None
    ranked = list((ranking or rank(collection, BEST_CRITERION)).table.index) if large else []
    top = ranked[:top_k]
    colors = _palette(_key_values(collection, color_key) if color_key else collection.labels)
    styles = {}
    for index, label in enumerate(collection.labels):
        config = collection.configs[label]
        color = colors[config[color_key] if color_key else label]
        if large:
            place = top.index(label) + 1 if label in top else None
            styles[label] = (Style(color, "-", "", muted=True) if place is None else
                             Style(color, *line_shape(place - 1), rank=place))
        else:
            styles[label] = Style(color, *line_shape(index))
    return Layout(color_key, facet_key, top, styles)


def line_shape(index: int) -> tuple[str, str]:
    """Line style and marker of the ``index``-th config: no two of the first 32 share both."""
    return (LINESTYLES[index % len(LINESTYLES)],
            MARKERS[(index + index // len(MARKERS)) % len(MARKERS)])


def _palette(values: Sequence[object]) -> dict[object, tuple[float, ...]]:
    cmap = colormaps["tab10"] if len(values) <= 10 else colormaps["viridis"].resampled(len(values))
    return {value: tuple(cmap(i)) for i, value in enumerate(values)}


# ------------------------------------------------------------------------------- curves


def wall_clock_unit(collection: Collection) -> tuple[str, float]:
    """Minutes when the longest run is under two hours, else hours: (unit, seconds per unit)."""
    longest = collection.runs["wall_clock_s"].max()
    return ("hours", 3600.0) if longest >= 7200 else ("minutes", 60.0)


def smooth(y: np.ndarray) -> np.ndarray:
    """Centred rolling mean over :data:`SMOOTH_FRACTION` of the points (odd window, >= 1);
    near the ends the window holds the points there are."""
    half = max(1, int(len(y) * SMOOTH_FRACTION) // 2 * 2 + 1) // 2
    padded = np.concatenate([np.zeros(1), np.cumsum(y)])
    index = np.arange(len(y))
    lo, hi = np.maximum(index - half, 0), np.minimum(index + half + 1, len(y))
    return (padded[hi] - padded[lo]) / (hi - lo)


def _stop_markers(collection: Collection, metric: str, x: str, scale: float) -> list[Marker]:
    """The last measured point of ``metric`` of each run stopped early (STOPPED_STATUSES)."""
    runs = collection.runs[collection.runs["status"].isin(STOPPED_STATUSES)]
    if metric not in collection.steps or runs.empty:
        return []
    steps = collection.steps
    rows = steps[steps["run_id"].isin(runs["run_id"]) & steps[metric].notna()]
    last = rows.groupby("run_id", sort=False).tail(1).set_index("run_id")
    stopped = steps[steps["run_id"].isin(runs["run_id"])].groupby("run_id")["step"].max()
    return [Marker(run["run_id"], run[LABEL], run["status"],
                   float(last.at[run["run_id"], x]) / scale,
                   float(last.at[run["run_id"], metric]), int(stopped[run["run_id"]]))
            for run in runs.to_dict("records") if run["run_id"] in last.index]


@dataclass(frozen=True)
class _PanelSpec:
    """A panel to draw: ``metric`` against ``x``, restricted to ``labels``."""

    metric: str
    x: str
    labels: list[str]
    facet: tuple[str, object] | None = None


def draw_panel(ax: Axes, collection: Collection, layout: Layout, spec: _PanelSpec,
               curves: dict[str, Curve], markers: list[Marker],
               externals: Sequence[External] = ()) -> Panel:
    """Draw ``spec`` on ``ax`` from the precomputed ``curves`` and ``markers``; see the module
    docstring for what is drawn how."""
    unit, scale = wall_clock_unit(collection) if spec.x == TRAIN_CLOCK else ("step", 1.0)
    dense = spec.metric in TRAINING_METRICS
    drawn: dict[str, Curve] = {}
    smoothed: dict[str, np.ndarray] = {}
    muted_lines, muted_colors = [], []
    for label in spec.labels:
        curve = curves.get(label)
        if curve is None or not len(curve.x):
            continue
        curve = Curve(curve.x / scale, curve.y, curve.lo, curve.hi, curve.n_runs)
        drawn[label] = curve
        style = layout.styles[label]
        y = curve.y
        if dense and len(y) > SPARSE_POINTS:
            y = smoothed[label] = smooth(curve.y)
        if style.muted:
            muted_lines.append(np.column_stack([curve.x, y]))
            muted_colors.append((*style.color[:3], 0.35))
            continue
        _draw_curve(ax, curve, y, style, label in smoothed)
    if muted_lines:
        ax.add_collection(LineCollection(muted_lines, colors=muted_colors, linewidths=0.7,
                                         zorder=1, rasterized=True, in_layout=False))
        ax.autoscale_view()
    shown = [m for m in markers if m.label in drawn]
    for mark in dict.fromkeys(STOP_MARKS[m.status] for m in shown):  # one artist per kind of mark
        group = [m for m in shown if STOP_MARKS[m.status] == mark]
        filled = mark != "|"
        ax.scatter([m.x for m in group], [m.y for m in group], marker=mark,
                   c=[layout.styles[m.label].color for m in group],
                   s=[(36 if layout.styles[m.label].muted else 81) * (1 if filled else 2.5)
                      for m in group],
                   edgecolors="black" if filled else None, linewidths=0.6 if filled else 2.5,
                   zorder=4, in_layout=False)
    if not layout.large:
        _say_where_runs_stopped(ax, shown)
    shown_externals = tuple(e for e in externals if e.metric == spec.metric) \
        if spec.x == "step" else ()
    external_lines = _draw_externals(ax, shown_externals, externals)
    name = metric_name(spec.metric)
    ylabel = name.axis_label(eval_detail(collection) if spec.metric.startswith("eval/") else "")
    xlabel = "GRPO step" if spec.x == "step" else metric_name(TRAIN_CLOCK).axis_label(unit)
    title = f"{name.name} vs {'GRPO step' if spec.x == 'step' else 'wall-clock'}"
    if spec.facet is not None:
        title = f"{spec.facet[0]}={format_value(spec.facet[1])}"
    if name.bounds is not None:
        ax.set_ylim(name.bounds[0] - 0.03, name.bounds[1] + 0.03)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    return Panel(spec.metric, spec.x, unit, drawn, shown, shown_externals, smoothed, spec.facet,
                 title, xlabel, ylabel, external_lines)


def external_style(index: int) -> dict[str, object]:
    """Colour, dash pattern and width of the ``index``-th external curve (of all given)."""
    return {"color": EXTERNAL_COLORS[index % len(EXTERNAL_COLORS)],
            "ls": EXTERNAL_STYLES[index % len(EXTERNAL_STYLES)], "lw": 2.0}


def external_legend(external: External) -> str:
    """``EI (external; x: EI step, top axis)`` or ``paper (external; x: GRPO step)``."""
    where = "GRPO step" if external.x_label is None else f"{external.x_label}, top axis"
    return f"{external.label} (external; x: {where})"


def _draw_externals(ax: Axes, shown: Sequence[External],
                    every: Sequence[External]) -> tuple[Line2D, ...]:
    """Draw ``shown`` (a subset of ``every``, which fixes each one's style): a curve counting
    GRPO steps on ``ax``, the others on a top x axis per distinct ``x_label``, sharing ``ax``'s
    y axis and scaled to their own steps. Returns the lines drawn."""
    tops: dict[str, Axes] = {}
    lines = []
    for external in shown:
        target = ax
        if external.x_label is not None:
            if external.x_label not in tops:
                top = tops[external.x_label] = ax.twiny()
                top.spines["top"].set_position(("axes", 1 + EXTERNAL_AXIS_OFFSET * (len(tops) - 1)))
                top.set_xlabel(external.x_label)
                if np.array_equal(external.step, np.round(external.step)):
                    top.xaxis.set_major_locator(MaxNLocator(integer=True))
            target = tops[external.x_label]
        (line,) = target.plot(external.step, external.value, zorder=3, **external_style(
            next(i for i, e in enumerate(every) if e is external)))
        lines.append(line)
    return tuple(lines)


def _say_where_runs_stopped(ax: Axes, markers: Sequence[Marker]) -> None:
    """Next to the stop marks: ``collapsed at step 15`` (``2 runs ...`` for marks of the same
    value and stop, which sit on or next to each other)."""
    groups: dict[tuple[float, str], list[Marker]] = {}
    for m in markers:
        groups.setdefault((round(m.y, 3), f"{m.status} at step {m.stop_step}"), []).append(m)
    for (_, what), group in groups.items():
        text = f"{len(group)} runs {what}" if len(group) > 1 else what
        ax.annotate(text, (group[0].x, group[0].y), xytext=(7, 5), textcoords="offset points",
                    fontsize="x-small")


def _draw_curve(ax: Axes, curve: Curve, y: np.ndarray, style: Style, smoothed: bool) -> None:
    """One highlighted (or small-sweep) config: band, faint raw curve under a smoothed one.

    Data artists stay inside the axes: they are left out of the layout computation
    (``in_layout=False``), which otherwise measures every path of a large sweep."""
    width = 2.2 if style.rank is not None else 1.5
    if np.any(curve.hi > curve.lo):  # a band: seeds, or one seed's interval over its responses
        ax.fill_between(curve.x, curve.lo, curve.hi, color=style.color, alpha=0.15, lw=0,
                        zorder=2, in_layout=False)
    if smoothed:
        ax.plot(curve.x, curve.y, color=style.color, lw=0.7, alpha=0.3, zorder=2, in_layout=False)
    every = None if len(curve.x) <= SPARSE_POINTS else max(1, len(curve.x) // 8)
    ax.plot(curve.x, y, color=style.color, ls=style.linestyle, lw=width, marker=style.marker,
            ms=5, markevery=every, mec="white", mew=0.5, zorder=3, in_layout=False)
    if style.rank is not None:
        ax.annotate(str(style.rank), (curve.x[-1], y[-1]), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize="small",
                    fontweight="bold", color=style.color)


# ------------------------------------------------------------------------------ figures


def _legend(fig: Figure, slot: Axes | None, collection: Collection, layout: Layout,
            marks: Sequence[str], externals: Sequence[External | None], band: str) -> list[str]:
    """The legend: in the grid's free ``slot`` when there is one (labels wrapped to fit), else
    below the axes, where :func:`_figure` reserved room for it. Returns its texts."""
    handles: list[object] = []
    texts: list[str] = []

    def add(handle: object, text: str) -> None:
        handles.append(handle)
        texts.append(text)

    if layout.large:
        values = _key_values(collection, layout.color_key)
        colors = _palette(values)
        for value in values:
            add(Patch(color=colors[value]), f"{layout.color_key}={format_value(value)}")
        for label in layout.top:
            style = layout.styles[label]
            add(Line2D([], [], color=style.color, ls=style.linestyle, marker=style.marker,
                       lw=2.2), f"#{style.rank} {label}")
        add(Line2D([], [], color="gray", lw=0.7, alpha=0.5), "other configs (faint)")
    else:
        for label in collection.labels:
            style = layout.styles[label]
            add(Line2D([], [], color=style.color, ls=style.linestyle, marker=style.marker,
                       lw=1.5), label)
    for mark in marks:
        edge = {"mec": "black", "mew": 0.6} if mark != "|" else {"mew": 2.5}
        add(Line2D([], [], ls="", marker=mark, color="gray", ms=9, **edge), STOPPED[mark])
    for index, external in enumerate(externals):  # None: not drawn in this figure
        if external is not None:
            add(Line2D([], [], **external_style(index)), external_legend(external))
    add(Patch(color="gray", alpha=0.15), band)
    if slot is not None:
        wrapped = [textwrap.fill(t, WRAP, subsequent_indent="    ") for t in texts]
        slot.legend(handles, wrapped, loc="upper left", fontsize="small", frameon=False)
    elif handles:
        fig.legend(handles, texts, loc="outside lower center", ncols=_legend_columns(texts),
                   fontsize="small", frameon=False)
    return texts


def _legend_columns(texts: Sequence[str]) -> int:
    longest = max((len(t) for t in texts), default=1)
    return max(1, min(4, 130 // max(longest, 1), len(texts)))


def _figure(n_panels: int, n_cols: int, panel_w: float, panel_h: float, legend_texts: int,
            title: str) -> tuple[Figure, list[Axes], Axes | None]:
    """A constrained-layout grid for ``n_panels``; the legend goes into a free cell (returned
    as the slot) or, when there is none, below, with the figure made taller by its rows."""
    n_rows = math.ceil(n_panels / n_cols)
    free = n_rows * n_cols > n_panels
    legend_h = 0 if free else 0.25 * math.ceil(legend_texts / 2) + 0.3
    fig = Figure(figsize=(panel_w * n_cols, panel_h * n_rows + legend_h + 0.4),
                 layout="constrained")
    fig.suptitle(title, fontsize="large")
    axes = list(fig.subplots(n_rows, n_cols, squeeze=False).flat)
    for ax in axes[n_panels:]:
        ax.set_axis_off()
    return fig, axes[:n_panels], axes[n_panels] if free else None


def _legend_size(collection: Collection, layout: Layout, n_externals: int) -> int:
    """How many entries the legend will have (an upper bound: every kind of stop mark)."""
    marks = len(STOPPED) + 1  # and the band's entry
    if layout.large:
        return (len(_key_values(collection, layout.color_key)) + len(layout.top) + 1 + marks
                + n_externals)
    return len(collection.labels) + marks + n_externals


def _save(fig: Figure, out_dir: Path, name: str, layout: Layout) -> list[Path]:
    """Write ``fig`` in every format (:data:`LARGE_FORMATS` for a large sweep), each atomically and
    never through a planted link (``grpo.run.files``); the layout is computed once, for the
    first."""
    out_dir = subdir(out_dir.parent, out_dir.name)  # never a planted link
    formats = LARGE_FORMATS if layout.large else FORMATS
    paths = [out_dir / f"{name}.{fmt}" for fmt in formats]
    for path in paths:
        fmt = path.suffix[1:]
        atomic_write(path, lambda tmp, fmt=fmt: fig.savefig(
            tmp, format=fmt, dpi=110, **({"pil_kwargs": {"compress_level": 1}} if fmt == "png" else {})))
        fig.set_layout_engine("none")
    return paths


def _legend_box(fig: Figure) -> tuple[float, float, float, float] | None:
    """Where the figure's legend was drawn, in figure fractions (None without a legend)."""
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    if not legends:
        return None
    box = legends[0].get_window_extent().transformed(fig.transFigure.inverted())
    return (float(box.x0), float(box.y0), float(box.x1), float(box.y1))


def _finish(fig: Figure, slot: Axes | None, collection: Collection, layout: Layout,
            panels: dict[str, Panel], stem: Path, title: str,
            externals: Sequence[External], band: str) -> CurveFigure:
    """Add the legend (stop marks and external curves only when some panel shows them, and
    what the ``band`` is), save the figure as ``stem.<format>`` and say what was drawn."""
    marks = list(dict.fromkeys(STOP_MARKS[m.status] for p in panels.values() for m in p.markers))
    shown = {id(e) for p in panels.values() for e in p.externals}
    legend = _legend(fig, slot, collection, layout, marks,
                     [e if id(e) in shown else None for e in externals], band)
    paths = _save(fig, stem.parent, stem.name, layout)
    return CurveFigure(paths, panels, title, legend, _legend_box(fig))


def plot_eval_reward(collection: Collection, out_dir: Path,
                     externals: Sequence[External] = (),
                     layout: Layout | None = None) -> CurveFigure:
    """Validation reward against the step and wall-clock (``eval_reward.*``); a large sweep
    gets one panel per facet value against the step, then the whole sweep against wall-clock."""
    layout = layout or choose_layout(collection)
    title = f"Validation reward · {sweep_title(collection)}"
    step_curves = label_curves(collection.steps, EVAL_REWARD, "step", "ci95")
    clock_curves = label_curves(collection.steps, EVAL_REWARD, TRAIN_CLOCK, "ci95")
    unit_scale = wall_clock_unit(collection)[1]
    step_marks = _stop_markers(collection, EVAL_REWARD, "step", 1.0)
    clock_marks = _stop_markers(collection, EVAL_REWARD, TRAIN_CLOCK, unit_scale)
    labels = collection.labels
    specs = [("step", _PanelSpec(EVAL_REWARD, "step", labels))]
    if layout.large and layout.facet_key is not None:
        specs = [(f"step/{format_value(value)}",
                  _PanelSpec(EVAL_REWARD, "step",
                             [lb for lb in labels
                              if collection.configs[lb][layout.facet_key] == value],
                             (layout.facet_key, value)))
                 for value in _key_values(collection, layout.facet_key)]
    specs.append(("wall_clock", _PanelSpec(EVAL_REWARD, TRAIN_CLOCK, labels)))
    n_cols = min(len(specs), 3 if layout.large else 2)
    fig, axes, slot = _figure(len(specs), n_cols, 5.2 if layout.large else 6.0, 4.0,
                              _legend_size(collection, layout, len(externals)), title)
    panels = {}
    for ax, (name, spec) in zip(axes, specs, strict=True):
        curves, marks = (step_curves, step_marks) if spec.x == "step" else \
            (clock_curves, clock_marks)
        panels[name] = draw_panel(ax, collection, layout, spec, curves, marks, externals)
    return _finish(fig, slot, collection, layout, panels, out_dir / "eval_reward", title,
                   externals, BAND_TEXT["ci95"])


def plot_training(collection: Collection, out_dir: Path, externals: Sequence[External] = (),
                  layout: Layout | None = None) -> CurveFigure:
    """Entropy, response length, gradient norm, clip fraction, train reward (``training.*``)."""
    layout = layout or choose_layout(collection)
    title = f"Training · {sweep_title(collection)}"
    fig, axes, slot = _figure(len(TRAINING_METRICS), 3, 5.0, 3.8,
                              _legend_size(collection, layout, len(externals)), title)
    panels = {}
    for ax, metric in zip(axes, TRAINING_METRICS, strict=True):
        curves = label_curves(collection.steps, metric, "step")
        marks = _stop_markers(collection, metric, "step", 1.0)
        spec = _PanelSpec(metric, "step", collection.labels)
        panels[metric] = draw_panel(ax, collection, layout, spec, curves, marks, externals)
    return _finish(fig, slot, collection, layout, panels, out_dir / "training", title,
                   externals, BAND_TEXT["range"])


def heatmap_cells(collection: Collection, rows_key: str, cols_key: str,
                  name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (rows_key, cols_key) cell: ``name`` (mean over seeds) of the cell's best config,
    preferring configs without a run stopped early, and the statuses of that config's runs
    stopped early (``""`` when it had none). With two swept keys a cell is one config."""
    summary = config_summary(collection)
    stopped = (collection.runs[collection.runs["status"].isin(STOPPED_STATUSES)]
                .groupby(LABEL)["status"].agg(lambda s: ", ".join(sorted(set(s)))))
    cells: dict[tuple[object, object], tuple[bool, float, str]] = {}
    for label, config in collection.configs.items():
        value = float(summary.at[label, name])
        status = stopped.get(label, "")
        candidate = (not status, -math.inf if math.isnan(value) else value, status)
        key = (config[rows_key], config[cols_key])
        if key not in cells or candidate[:2] > cells[key][:2]:
            cells[key] = candidate
    frame = pd.DataFrame([{rows_key: r, cols_key: c, "value": v if v > -math.inf else math.nan,
                           "mark": mark} for (r, c), (_, v, mark) in cells.items()])
    order = {"index": sorted(frame[rows_key].unique().tolist(), key=sort_key),
             "columns": sorted(frame[cols_key].unique().tolist(), key=sort_key)}
    grid = frame.pivot(index=rows_key, columns=cols_key, values="value").reindex(**order)
    marks = frame.pivot(index=rows_key, columns=cols_key, values="mark").reindex(**order)
    return grid, marks.fillna("")


def plot_heatmaps(collection: Collection, out_dir: Path,
                  layout: Layout | None = None) -> HeatmapFigure | None:
    """The ranking's late and the final validation reward over two swept keys (``heatmaps.*``):
    the two keys of a
    2-D sweep, else the facet and colour keys with the best config over the other keys;
    None for a 1-D sweep."""
    if len(collection.label_keys) < 2:
        return None
    layout = layout or choose_layout(collection)
    if len(collection.label_keys) == 2:
        rows_key, cols_key = collection.label_keys
        over = ""
    else:
        cols_key = layout.color_key
        rows_key = layout.facet_key or next(k for k in _keys_by_size(collection) if k != cols_key)
        others = [k for k in collection.label_keys if k not in (rows_key, cols_key)]
        over = f", best config over {', '.join(others)}"
    fig = Figure(figsize=(12, 5), layout="constrained")
    fig.suptitle(f"Validation reward by config · {sweep_title(collection)}", fontsize="large")
    detail = eval_detail(collection)
    grids, all_marks = {}, {}
    for ax, name in zip(fig.subplots(1, 2), ("final_eval_reward", BEST_CRITERION), strict=True):
        grid, marks = heatmap_cells(collection, rows_key, cols_key, name)
        grids[name], all_marks[name] = grid, marks
        _draw_heatmap(fig, ax, grid, marks)
        ax.set_xlabel(cols_key)
        ax.set_ylabel(rows_key)
        which = "Final" if name.startswith("final") else f"Late (last {LATE_EVALS} evaluations)"
        ax.set_title(f"{which} validation reward ({', '.join(p for p in (detail, '0-1') if p)})"
                     f"\nmean over seeds{over}", fontsize="medium")
    return HeatmapFigure(_save(fig, out_dir, "heatmaps", layout), grids, all_marks)


def _draw_heatmap(fig: Figure, ax: Axes, grid: pd.DataFrame, marks: pd.DataFrame) -> None:
    values = grid.to_numpy(float)
    marked = marks.to_numpy(str) != ""
    image = ax.imshow(np.ma.masked_array(values, marked | np.isnan(values)), cmap="viridis",
                      aspect="auto")
    ax.set_xticks(range(grid.shape[1]), [format_value(c) for c in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [format_value(i) for i in grid.index])
    for (i, j), value in np.ndenumerate(values):
        number = "n/a" if np.isnan(value) else f"{value:.3f}"
        if marked[i, j]:
            ax.add_patch(_hatched_cell(i, j))
            ax.text(j, i, f"{marks.iat[i, j]}\n({number})", ha="center", va="center",
                    fontsize="small", color="black",
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1.5})
        else:
            dark = np.isnan(value) or image.norm(value) < 0.5
            ax.text(j, i, number, ha="center", va="center", fontsize="small",
                    color="white" if dark else "black")
    fig.colorbar(image, ax=ax)


def _hatched_cell(i: int, j: int) -> Rectangle:
    """A grey hatched square over cell (i, j): the number there is no genuine result."""
    return Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="0.85", edgecolor="0.4",
                     hatch="///", lw=0)


@dataclass(frozen=True)
class InteractionFigure:
    """A saved interaction plot: ``cells`` has one row per (x level, line level) with the mean of
    the compared value, its 95% interval (``lo``, ``hi``; NaN without a seed variance) and runs."""

    paths: list[Path]
    cells: pd.DataFrame
    keys: tuple[str, str]


def interaction_cells(ranking: Ranking, x_key: str, line_key: str) -> pd.DataFrame:
    """The ranking's compared runs averaged per (``x_key``, ``line_key``) cell: ``mean``, ``n``
    runs and the 95% interval of the mean on the ranking's seed variance."""
    frame = ranking.compared
    cells = (frame.groupby([x_key, line_key], sort=False)[VALUE].agg(["mean", "count"])
             .rename(columns={"count": "n"}).reset_index())
    seeds = ranking.uncertainty.seeds if ranking.uncertainty else None
    if seeds is not None and seeds.usable:
        half = t_quantile(seeds.df) * np.sqrt(seeds.variance / cells["n"].to_numpy(float))
    else:
        half = np.full(len(cells), np.nan)
    cells["lo"] = (cells["mean"] - half).clip(0.0, 1.0)  # a reward's mean stays in 0-1
    cells["hi"] = (cells["mean"] + half).clip(0.0, 1.0)
    order = {key: {v: i for i, v in enumerate(sorted(set(frame[key]), key=sort_key))}
             for key in (x_key, line_key)}
    return cells.sort_values([line_key, x_key], key=lambda s: s.map(order[s.name])).reset_index(drop=True)


def plot_interaction(collection: Collection, out_dir: Path, ranking: Ranking,
                     layout: Layout) -> InteractionFigure | None:
    """``interaction.*``: the compared value over the first two swept keys that vary among the
    ranked configs (see the module docstring); None with fewer than two."""
    keys = [] if ranking.compared.empty else varying_keys(ranking.compared, collection.label_keys)
    if len(keys) < 2:
        return None
    x_key, line_key = keys[:2]
    cells = interaction_cells(ranking, x_key, line_key)
    levels = sorted(set(ranking.compared[x_key]), key=sort_key)
    fig = Figure(figsize=(7.5, 5), layout="constrained")
    ax = fig.subplots()
    seeds = ranking.uncertainty.seeds
    for index, (level, part) in enumerate(cells.groupby(line_key, sort=False)):
        x = [levels.index(v) for v in part[x_key]]
        dash, marker = line_shape(index)
        line = ax.plot(x, part["mean"], marker=marker, linestyle=dash,
                       label=f"{line_key}={format_value(level)}")[0]
        if seeds.usable:
            ax.fill_between(x, part["lo"], part["hi"], color=line.get_color(), alpha=0.15, lw=0)
    ax.set_xticks(range(len(levels)), [format_value(v) for v in levels])
    ax.set_xlabel(x_key)
    ax.set_ylabel(f"{ranking.criterion.replace('_', ' ')} at step {ranking.at_step} (0-1)")
    others = keys[2:]
    band = (f"bands: 95% interval of each cell's mean on the seed variance ({seeds.source}, "
            f"{seeds.df:g} df)" if seeds.usable else "no bands: no seed variance")
    title = (f"Interaction of {x_key} and {line_key} · {sweep_title(collection)}. {band}"
             + (f"; averaged over {', '.join(others)}" if others else ""))
    ax.set_title("\n".join(textwrap.wrap(title, 80)), fontsize="medium")
    ax.legend(fontsize="small")
    return InteractionFigure(_save(fig, out_dir, "interaction", layout), cells, (x_key, line_key))


def plot_all(collection: Collection, out_dir: Path, externals: Sequence[External] = (),
             facet_key: str | None = None, color_key: str | None = None,
             ranking: Ranking | None = None
             ) -> dict[str, CurveFigure | HeatmapFigure | InteractionFigure]:
    """Every figure that applies to ``collection``, keyed by figure name; a large sweep
    highlights the top of ``ranking`` (the report's; computed when not given)."""
    for external in externals:
        if external.metric not in (EVAL_REWARD, *TRAINING_METRICS):
            raise ValueError(f"no panel plots {external.metric!r} against the step; "
                             f"choose one of {[EVAL_REWARD, *TRAINING_METRICS]}")
    ranking = ranking or rank(collection)  # once: the highlights and the interaction plot
    layout = choose_layout(collection, facet_key, color_key, ranking=ranking)
    figures: dict[str, CurveFigure | HeatmapFigure | InteractionFigure] = {
        "eval_reward": plot_eval_reward(collection, out_dir, externals, layout),
        "training": plot_training(collection, out_dir, externals, layout),
    }
    heatmaps = plot_heatmaps(collection, out_dir, layout)
    if heatmaps is not None:
        figures["heatmaps"] = heatmaps
    interaction = plot_interaction(collection, out_dir, ranking, layout)
    if interaction is not None:
        figures["interaction"] = interaction
    return figures
