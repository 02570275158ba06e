"""Figures a person reads at a glance: names and units, sweep and date, distinguishable lines,
smoothed training curves, marked unstable cells, and small multiples for large sweeps. Every
check reads the data a plot function returns about what it drew."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from analysis.__main__ import main
from analysis.decisions.ranking import config_summary, rank
from analysis.outputs.curves import BAND_TEXT
from analysis.outputs.plots import (
    SMALL_SWEEP,
    STOPPED,
    TOP_K,
    choose_layout,
    plot_all,
    smooth,
)
from analysis.readers.collect import LABEL, collect
from analysis.readers.external import GRPO_STEPS, ExternalFormatError, read_external
from analysis.readers.synthetic import (
    BASE_CONFIG,
    synthetic_rows,
    write_grid_sweep,
    write_multirun,
    write_run,
)

GREEDY = {**BASE_CONFIG, "eval": {"temperature": 0.0}}
N_STEPS = 100


def ramp_rows(offset: float) -> list[dict]:
    """The trainer's layout: step 0 the evaluation of the initial policy, then GRPO steps
    1..N_STEPS with a linear entropy ramp and a +-0.1 zigzag on top; an evaluation every 10
    steps (5 s each, kept out of the training clock)."""
    rows = [{"step": 0, "time/elapsed_s": 5.0, "time/elapsed_no_eval_s": 0.0, "eval/reward": offset}]
    for step in range(1, N_STEPS + 1):
        row = {"step": step, "time/elapsed_s": 30.0 * step + 5.0 * (1 + step // 10),
               "time/elapsed_no_eval_s": 30.0 * step,
               "train/entropy": offset + step / 100 + (0.1 if step % 2 else -0.1),
               "train/reward_mean": 0.5}
        if step % 10 == 0:
            row["eval/reward"] = offset + step / 200
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A greedy-eval 2x2 sweep of 100 GRPO steps, one seed, one config collapsed at step 40."""
    sweep = tmp_path_factory.mktemp("o") / "ramp" / "2025-06-01_12-00-00"
    write_multirun(sweep, ["learning_rate=1e-5,1e-4", "off_policy.epochs=1,2"], config=GREEDY)
    job = 0
    for lr in ("1e-5", "1e-4"):
        for epochs in (1, 2):
            rows = ramp_rows(0.1 * job)
            state = {"status": "completed", "last_step": N_STEPS}
            if job == 3:
                rows, state = rows[:41], {"status": "collapsed", "last_step": 40}
            write_run(sweep / str(job), {"learning_rate": lr, "off_policy.epochs": epochs},
                      rows, state, base=GREEDY)
            job += 1
    collection = collect([sweep])
    return sweep, plot_all(collection, sweep / "figures")


def test_titles_and_axes_say_what_and_which_unit(small: tuple[Path, dict]) -> None:
    _, figures = small
    eval_fig, training = figures["eval_reward"], figures["training"]
    assert eval_fig.title == "Validation reward · ramp sweep of 2025-06-01 12:00 · 4 runs, 4 configs"
    step, clock = eval_fig.panels["step"], eval_fig.panels["wall_clock"]
    assert (step.title, step.xlabel, step.ylabel) == (
        "Validation reward vs GRPO step", "GRPO step", "Validation reward (greedy, 0-1)")
    assert (clock.xlabel, clock.unit) == ("Wall-clock training time (minutes, eval excluded)", "minutes")
    # 30 s per GRPO step on the training clock; the evaluations (5 s each) are left out
    np.testing.assert_allclose(clock.curves["learning_rate=1e-5, off_policy.epochs=1"].x,
                               np.arange(0, N_STEPS + 1, 10) * 30 / 60)
    labels = {m: p.ylabel for m, p in training.panels.items()}
    assert labels["train/entropy"] == "Entropy (nats per token)"
    assert labels["train/mean_response_length"] == "Response length (tokens)"
    assert labels["train/reward_mean"] == "Training reward (rollout mean, 0-1)"


def test_every_config_has_its_own_line_style_and_marker(small: tuple[Path, dict]) -> None:
    sweep, figures = small
    layout = choose_layout(collect([sweep]))
    shapes = [(s.linestyle, s.marker) for s in layout.styles.values()]
    assert len(set(shapes)) == len(shapes) == 4
    colors = {label: style.color for label, style in layout.styles.items()}
    # the colour tells the colour key (learning_rate), the shape tells the config
    assert layout.color_key == "learning_rate"
    assert colors["learning_rate=1e-5, off_policy.epochs=1"] == \
        colors["learning_rate=1e-5, off_policy.epochs=2"]
    assert colors["learning_rate=1e-5, off_policy.epochs=1"] != \
        colors["learning_rate=1e-4, off_policy.epochs=1"]
    legend = figures["eval_reward"].legend
    assert legend == [*layout.styles, STOPPED["X"], BAND_TEXT["ci95"]]
    assert figures["training"].legend[-1] == BAND_TEXT["range"] == "band: min-max over seeds"


def test_training_curves_are_smoothed_without_lag(small: tuple[Path, dict]) -> None:
    _, figures = small
    panel = figures["training"].panels["train/entropy"]
    label = "learning_rate=1e-5, off_policy.epochs=1"
    raw, smoothed = panel.curves[label].y, panel.smoothed[label]
    steps = np.arange(1, N_STEPS + 1)  # no training metrics at step 0 (the pre-RL evaluation)
    np.testing.assert_allclose(panel.curves[label].x, steps)
    ramp = steps / 100
    np.testing.assert_allclose(raw, ramp + np.where(steps % 2, 0.1, -0.1))
    # window 5, centred: the zigzag shrinks to +-0.02 and the ramp is not shifted
    np.testing.assert_allclose(smoothed[2:-2], ramp[2:-2], atol=0.021)
    np.testing.assert_allclose(smoothed, smooth(raw))
    assert figures["eval_reward"].panels["step"].smoothed == {}, "evaluations are not smoothed"


def test_points_are_drawn_at_the_step_they_were_measured(small: tuple[Path, dict]) -> None:
    _, figures = small
    step = figures["eval_reward"].panels["step"]
    np.testing.assert_allclose(step.curves["learning_rate=1e-5, off_policy.epochs=1"].x,
                               [*range(0, N_STEPS + 1, 10)])
    (marker,) = step.markers
    # collapsed after step 40: evaluated last at step 40, marked there with its value
    assert (marker.x, marker.y, marker.stop_step) == (40, pytest.approx(0.3 + 0.2), 40)
    (entropy_mark,) = figures["training"].panels["train/entropy"].markers
    assert (entropy_mark.x, entropy_mark.y) == (40, pytest.approx(0.3 + 0.4 - 0.1))


def test_legends_are_inside_the_figure(small: tuple[Path, dict]) -> None:
    _, figures = small
    for name in ("eval_reward", "training"):
        x0, y0, x1, y1 = figures[name].legend_box
        assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1, (name, figures[name].legend_box)
    for figure in figures.values():
        assert {p.suffix for p in figure.paths} == {".png", ".svg"}


# --------------------------------------------------------------------------- external runs

# an expert-iteration run's entropy per EI step (5 EI steps), and another GRPO run in this
# project's metrics.jsonl format: a "nan" entropy, step 20 logged twice (the last copy counts)
EI_CSV = "step,entropy\n0,1.30\n1,0.95\n2,0.80\n3,0.72\n4,0.70\n"
GRPO_JSONL = ('{"step": 0, "train/entropy": 0.9, "time/elapsed_s": 1.0}\n'
              '{"step": 10, "train/entropy": "nan"}\n'
              '{"step": 20, "train/entropy": 0.2}\n'
              '{"step": 20, "train/entropy": 0.7, "eval/reward": 0.3}\n')


@pytest.fixture(scope="module")
def overlaid(small: tuple[Path, dict], tmp_path_factory: pytest.TempPathFactory) -> tuple:
    sweep, _ = small
    folder = tmp_path_factory.mktemp("external")
    (folder / "ei.csv").write_text(EI_CSV)
    (folder / "metrics.jsonl").write_text(GRPO_JSONL)
    externals = [*read_external(folder / "ei.csv", "train/entropy", "expert iteration",
                                "EI step"),
                 *read_external(folder / "metrics.jsonl", "train/entropy", None, GRPO_STEPS)]
    return externals, plot_all(collect([sweep]), folder / "figures", externals)


def test_external_entropy_is_drawn_on_its_own_step_axis(overlaid: tuple,
                                                        small: tuple[Path, dict]) -> None:
    externals, figures = overlaid
    sweep, _ = small
    panel = figures["training"].panels["train/entropy"]
    assert panel.externals == tuple(externals)
    ei, grpo = panel.external_lines
    np.testing.assert_allclose(ei.get_xydata(), [[0, 1.3], [1, 0.95], [2, 0.8], [3, 0.72],
                                                 [4, 0.7]])
    # EI steps get a top axis of their own, scaled to the 5 EI steps, sharing the entropy axis
    assert ei.axes.get_xlabel() == "EI step" and ei.axes.xaxis.get_ticks_position() == "top"
    assert ei.axes.get_xlim()[1] < 5 and ei.axes.get_shared_y_axes().joined(ei.axes, grpo.axes)
    # the GRPO run shares the sweep's axis (0..99); nan dropped, the re-logged step 20 kept
    np.testing.assert_allclose(grpo.get_xydata(), [[0, 0.9], [20, 0.7]])
    assert grpo.axes.get_xlabel() == "GRPO step" and grpo.axes.get_xlim()[1] > 90
    # a style no config has: grey shades, dashed, thicker than a config's line (1.5)
    config_colors = {to_hex(style.color) for style in choose_layout(collect([sweep])).styles.values()}
    assert {to_hex(ei.get_color()), to_hex(grpo.get_color())}.isdisjoint(config_colors)
    assert ei.get_color() != grpo.get_color() and ei.get_linestyle() == "--"
    assert ei.get_linewidth() > 1.5
    assert figures["training"].legend[-3:] == [
        "expert iteration (external; x: EI step, top axis)",
        "metrics (external; x: GRPO step)", BAND_TEXT["range"]]
    x0, y0, x1, y1 = figures["training"].legend_box
    assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
    # the other panels and figures do not show an entropy curve
    assert all(not p.externals for m, p in figures["training"].panels.items()
               if m != "train/entropy")
    assert not any("external" in text for text in figures["eval_reward"].legend)


def test_external_files_name_their_curves_and_value_columns(tmp_path: Path) -> None:
    csv = tmp_path / "runs.csv"
    csv.write_text("step,train/entropy,label,other\n0,1.0,EI,x\n2,,EI,x\n1,0.8,EI,x\n"
                   "0,0.5,SFT,x\n\n")
    ei, sft = read_external(csv, "train/entropy")
    assert (ei.label, ei.x_label, sft.label, sft.x_label) == ("EI", "EI step", "SFT", "SFT step")
    np.testing.assert_allclose(np.column_stack([ei.step, ei.value]), [[0, 1.0], [1, 0.8]])
    np.testing.assert_allclose(sft.value, [0.5])
    with pytest.raises(ExternalFormatError, match=r"holds the curves \['EI', 'SFT'\]"):
        read_external(csv, "train/entropy", "mine")
    (only,) = read_external(csv, "train/entropy", x_label=GRPO_STEPS)[:1]
    assert only.x_label is None
    jsonl = tmp_path / "eval.jsonl"
    jsonl.write_text('{"step": 3, "reward": 0.2}\n{"step": 1, "reward": 0.1, "label": "paper"}\n')
    first, second = read_external(jsonl, "eval/reward")
    assert (first.label, second.label) == ("eval", "paper")


@pytest.mark.parametrize(("name", "content", "message"), [
    ("a.csv", "step,entropy\n0,1.0\n1,0.9,7\n", r"a\.csv:3: 3 cells, the header has 2"),
    ("b.csv", "step,entropy\n0,high\n", r"b\.csv:2: entropy is 'high', not a number"),
    ("c.csv", "epoch,entropy\n0,1\n", r"c\.csv:1: the header names no 'step' column"),
    ("d.csv", "step,loss\n0,1\n", r"d\.csv: no row has a value for 'train/entropy'"),
    ("e.csv", "step,entropy\n,1\n", r"e\.csv:2: no finite step"),
    ("f.jsonl", '{"step": 0, "train/entropy": 1}\n{"step": 1, "train/en\n',
     r"f\.jsonl:2: not a JSON object with an integer 'step'"),
    ("g.jsonl", '{"step": 0, "entropy": true}\n', r"g\.jsonl:1: entropy is True, not a number"),
    ("h.jsonl", '\n[1, 2]\n', r"h\.jsonl:2: not a JSON object"),
    ("i.txt", "step,entropy\n", r"i\.txt: an external curve is a \.csv or \.jsonl file"),
])
def test_malformed_external_files_are_named_with_their_line(tmp_path: Path, name: str,
                                                             content: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ExternalFormatError, match=message):
        read_external(path, "train/entropy")


def test_cli_reports_a_malformed_external_file_in_one_line(small: tuple[Path, dict],
                                                           tmp_path: Path) -> None:
    sweep, _ = small
    bad = tmp_path / "ei.csv"
    bad.write_text("step,entropy\n0,1.0\n1,oops\n")
    with pytest.raises(SystemExit) as exit_:
        main(["plots", "--sweep", str(sweep), "--external", str(bad), "--no-report"])
    assert str(exit_.value) == f"error: {bad}:3: entropy is 'oops', not a number"


# ------------------------------------------------------------------------------- large sweeps

GRID = {"learning_rate": [1e-5, 1e-4, 1e-3], "off_policy.epochs": [1, 2, 4], "loss": ["a", "b"]}
# configs (in grid order) whose runs collapse: both losses of learning_rate=1e-3, epochs=4
UNSTABLE = {16: "collapsed", 17: "collapsed", 3: "diverged"}


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    sweep = tmp_path_factory.mktemp("o") / "grid" / "2025-06-02_08-30-00"
    write_grid_sweep(sweep, GRID, n_steps=60, eval_every=10, n_seeds=2, unstable=UNSTABLE)
    collection = collect([sweep])
    return collection, plot_all(collection, sweep / "figures")


def test_synthetic_rewards_stay_within_zero_and_one(large: tuple) -> None:
    collection, _ = large
    for column in ("eval/reward", "train/reward_mean"):
        values = collection.steps[column].dropna()
        assert values.between(0, 1).all() and values.max() > 0.5, column
    rows = synthetic_rows(200, 10, quality=0.9, seed=3)
    # the trainer's layout: step 0 the pre-RL evaluation alone, then GRPO steps 1..200
    assert [r["step"] for r in rows] == list(range(201))
    assert not any(k.startswith("train/") for k in rows[0]) and "eval/reward" in rows[0]
    assert [r["step"] for r in rows if "eval/reward" in r] == list(range(0, 201, 10))
    assert max(r["train/reward_mean"] for r in rows[1:]) <= 1.0
    # the training clock leaves out every evaluation (30 s each), the total keeps them
    assert rows[-1]["time/elapsed_s"] - rows[-1]["time/elapsed_no_eval_s"] == pytest.approx(21 * 30)
    assert len(collection.runs) == 36 and set(collection.runs["status"]) == {
        "completed", "collapsed", "diverged"}


def test_large_sweep_is_faceted_coloured_and_highlights_the_top(large: tuple) -> None:
    collection, figures = large
    assert len(collection.labels) > SMALL_SWEEP
    layout = choose_layout(collection)
    assert (layout.color_key, layout.facet_key) == ("learning_rate", "off_policy.epochs")
    assert layout.top == list(rank(collection, "best_eval_reward").table.index[:TOP_K])
    ranks = {label: s.rank for label, s in layout.styles.items() if not s.muted}
    assert ranks == {label: i + 1 for i, label in enumerate(layout.top)}
    panels = figures["eval_reward"].panels
    assert list(panels) == ["step/1", "step/2", "step/4", "wall_clock"]
    for name, epochs in (("step/1", 1), ("step/2", 2), ("step/4", 4)):
        assert panels[name].facet == ("off_policy.epochs", epochs)
        assert {collection.configs[lb]["off_policy.epochs"] for lb in panels[name].curves} == {epochs}
        assert len(panels[name].curves) == 6
    assert len(panels["wall_clock"].curves) == 18
    for label in layout.top:  # seeds as bands around the mean
        curve = panels["wall_clock"].curves[label]
        assert curve.n_runs == 2 and (curve.lo <= curve.y).all() and (curve.y <= curve.hi).all()
    legend = figures["eval_reward"].legend
    assert legend[:3] == ["learning_rate=1e-05", "learning_rate=0.0001", "learning_rate=0.001"]
    assert legend[3:8] == [f"#{i + 1} {label}" for i, label in enumerate(layout.top)]
    assert legend[8:] == ["other configs (faint)", STOPPED["X"], BAND_TEXT["ci95"]]
    x0, y0, x1, y1 = figures["eval_reward"].legend_box
    assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
    assert [p.suffix for p in figures["eval_reward"].paths] == [".png"]


def test_large_sweep_heatmap_shows_the_best_config_per_cell(large: tuple) -> None:
    collection, figures = large
    grid = figures["heatmaps"].grids["late_eval_reward"]
    marks = figures["heatmaps"].marks["late_eval_reward"]
    assert list(grid.index) == [1, 2, 4] and list(grid.columns) == [1e-5, 1e-4, 1e-3]
    summary = config_summary(collection)
    configs = pd.DataFrame([{**c, "best": summary.at[label, "late_eval_reward"], LABEL: label}
                            for label, c in collection.configs.items()])
    stable = configs[~configs[LABEL].isin(summary.index[summary["stopped"]])]
    want = stable.groupby(["off_policy.epochs", "learning_rate"])["best"].max()
    for (epochs, lr), value in want.items():
        assert grid.at[epochs, lr] == pytest.approx(value)
        assert marks.at[epochs, lr] == ""
    # every config of the cell collapsed: the cell is marked, never shown as a result
    assert marks.at[4, 1e-3] == "collapsed"
    assert (marks != "").to_numpy().sum() == 1


def test_small_sweep_of_three_keys_gets_a_heatmap_of_two(tmp_path: Path) -> None:
    grid = {"learning_rate": [1e-5, 1e-4], "loss": ["a", "b"], "off_policy.epochs": [1, 2]}
    sweep = tmp_path / "three" / "2025-06-03_09-00-00"
    write_grid_sweep(sweep, grid, n_steps=20, eval_every=5)
    collection = collect([sweep])
    assert len(collection.labels) == 8 <= SMALL_SWEEP
    heatmaps = plot_all(collection, sweep / "figures")["heatmaps"]
    grid_ = heatmaps.grids["late_eval_reward"]
    # colour key learning_rate (first of the keys with most values) as columns, loss as rows,
    # each cell the best config over off_policy.epochs
    assert list(grid_.columns) == [1e-5, 1e-4] and list(grid_.index) == ["a", "b"]
    summary = config_summary(collection)
    for (loss, lr), value in grid_.stack().items():
        labels = [lb for lb, c in collection.configs.items()
                  if c["loss"] == loss and c["learning_rate"] == lr]
        assert value == pytest.approx(summary.loc[labels, "late_eval_reward"].max())
