"""Collect, plots, report and CLI of ``analysis`` on the hand-built sweep of ``sweep_factory``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sweep_factory import (
    BASE,
    EVAL_STEPS,
    rows,
    write_matching_outcomes,
    write_scenario,
    write_simple_sweep,
)

from analysis.__main__ import main
from analysis.decisions.ranking import rank
from analysis.names.formatting import format_value
from analysis.outputs.curves import BAND_TEXT
from analysis.outputs.plots import plot_all, plot_heatmaps
from analysis.outputs.report import ACCURACY_BAR, build_report, missing_jobs
from analysis.readers.collect import (
    LABEL,
    Collection,
    collect,
    find_latest_sweep,
    read_metrics,
    read_swept,
    save_steps,
)
from analysis.readers.external import GRPO_STEPS, External, read_external
from analysis.readers.jobs import Job, write_jobs
from analysis.readers.synthetic import write_multirun, write_run

ON_POLICY = "off_policy.epochs=1, train_batch_size=128"
OFF_128 = "off_policy.epochs=2, train_batch_size=128"
OFF_64 = "off_policy.epochs=2, train_batch_size=64"
SMALL = "off_policy.epochs=1, train_batch_size=64"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_scenario(tmp_path_factory.mktemp("outputs") / "exp" / "2025-06-01_12-00-00")


@pytest.fixture(scope="module")
def coll(sweep: Path) -> Collection:
    return collect([sweep])


@pytest.fixture(scope="module")
def figures(coll: Collection, sweep: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    csv = tmp_path_factory.mktemp("external") / "paper.csv"
    pd.DataFrame({"step": [0, 5, 9], "eval/reward": [0.1, 0.3, 0.5]}).to_csv(csv, index=False)
    external = read_external(csv, "eval/reward", "paper", GRPO_STEPS)
    return plot_all(coll, sweep / "figures", external)


def run(coll: Collection, job: int) -> dict:
    return coll.runs.set_index("job").loc[job].to_dict()


def second_sweep(root: Path) -> Path:
    """A sweep without multirun.yaml: two completed runs differing in train_batch_size."""
    for job, tbs in enumerate((384, 512)):
        write_run(root / str(job), {"train_batch_size": tbs}, rows(0, range(4)),
                  {"status": "completed", "last_step": 3})
    return root


# ----------------------------------------------------------------------------- collect


def test_runs_frame_summarises_each_run(coll: Collection) -> None:
    runs = coll.runs.set_index("job")
    assert list(runs["status"]) == ["completed", "completed", "diverged", "completed",
                                    "running", "failed", "pending", "collapsed"]
    assert list(runs["steps_done"]) == [9, 9, 4, 9, 7, 2, 0, 3]  # GRPO steps; row 0 is the eval
    assert list(runs["n_bad_lines"]) == [0, 0, 0, 1, 2, 0, 0, 0]
    assert list(runs["n_duplicate_steps"]) == [0, 0, 0, 1, 0, 0, 0, 0]
    assert list(runs["restarts"]) == [0, 0, 0, 1, 1, 0, 0, 0]
    assert list(runs["seed"]) == [0, 1, 0, 0, 1, 0, 1, 1]
    # the stale copy of step 6 (eval/reward 0.99) was replaced by the re-logged one
    assert run(coll, 3)["best_eval_reward"] == pytest.approx(0.63)
    assert run(coll, 3)["best_eval_step"] == 9
    assert run(coll, 4)["final_eval_reward"] == pytest.approx(0.67)  # step 6, the glued row
    assert run(coll, 2)["reason"] == "loss is nan"
    assert run(coll, 0)["wall_clock_s"] == 600
    assert run(coll, 0)["gpu_hours"] == pytest.approx(600 / 3600 * 2)
    assert run(coll, 5)["gpu_hours"] == pytest.approx((80 + 15) / 3600 * 1)  # eval included
    pending = run(coll, 6)
    assert np.isnan(pending["wall_clock_s"]) and np.isnan(pending["best_eval_reward"])
    assert pending[LABEL] == SMALL


def test_steps_frame_holds_every_logged_row(coll: Collection) -> None:
    expected_rows = {0: 10, 1: 10, 2: 5, 3: 10, 4: 8, 5: 3, 7: 4}  # step 0 (pre-RL eval) and on
    for job, n in expected_rows.items():
        got = coll.steps[coll.steps["job"] == job].reset_index(drop=True)
        want = pd.DataFrame(rows(job, range(n)))
        pd.testing.assert_frame_equal(got[want.columns], want, check_dtype=False)
        assert (got["status"] == run(coll, job)["status"]).all()
        assert (got[LABEL] == run(coll, job)[LABEL]).all()
    assert 6 not in set(coll.steps["job"])
    assert {"off_policy.epochs", "train_batch_size", "seed", "sweep", "run_dir"} <= set(
        coll.steps.columns)


def test_labels_name_swept_values_and_ignore_seed(coll: Collection, sweep: Path) -> None:
    assert coll.label_keys == ["off_policy.epochs", "train_batch_size"]
    assert coll.labels == [SMALL, ON_POLICY, OFF_64, OFF_128]
    assert coll.configs[OFF_64] == {"off_policy.epochs": 2, "train_batch_size": 64}
    assert set(coll.runs.loc[coll.runs["job"].isin([0, 1]), LABEL]) == {ON_POLICY}
    assert coll.sweeps[0].swept == {"seed": ["0", "1"], "off_policy.epochs": ["1", "2"],
                                    "train_batch_size": ["64", "128"]}
    assert coll.runs.loc[0, "run_id"] == "exp/2025-06-01_12-00-00/0"


def test_several_sweeps_and_missing_multirun_yaml(sweep: Path, tmp_path: Path) -> None:
    other = second_sweep(tmp_path / "other")
    assert read_swept(other) is None
    both = collect([sweep, other])
    assert both.sweeps[1].swept == {"train_batch_size": ["384", "512"]}
    assert both.labels == [SMALL, ON_POLICY, "off_policy.epochs=1, train_batch_size=384",
                           "off_policy.epochs=1, train_batch_size=512", OFF_64, OFF_128]
    assert len(both.runs) == 10


@pytest.mark.parametrize("text", ["- a list", "hydra: {sweeper: {params: [1, 2]}}",
                                  "hydra: {overrides: {task: 'x=1'}}",
                                  "hydra: {overrides: {task: ['==']}}", "hydra: {{",
                                  # nothing said swept: the two configs would be one, one set aside
                                  "", "hydra: {}", "hydra: {overrides: {task: null}}",
                                  "hydra: {overrides: {task: [[train_batch_size=1]]}}"])
def test_a_crafted_multirun_yaml_is_said_and_the_runs_overrides_read(tmp_path: Path,
                                                                     text: str) -> None:
    sweep = second_sweep(tmp_path / "crafted")
    (sweep / "multirun.yaml").write_text(text + "\n")
    with pytest.raises(ValueError, match="multirun.yaml"):
        read_swept(sweep)
    coll = collect([sweep])
    assert coll.sweeps[0].swept == {"train_batch_size": ["384", "512"]}
    (note,) = coll.notes
    assert "multirun.yaml" in note and "read from the runs' overrides" in note


def test_a_multirun_yaml_of_nested_aliases_is_read_without_expanding_them(tmp_path: Path) -> None:
    """A 1 kB file of aliases nine deep (10^9 strings once expanded) held OmegaConf.load, and
    with it collect, plots and watch, for as long as memory lasted: read as plain YAML its aliases
    stay shared, and the swept keys are read at once."""
    sweep = second_sweep(tmp_path / "bomb")
    levels = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]'] + [
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    (sweep / "multirun.yaml").write_text("\n".join(
        [*levels, "hydra: {overrides: {task: ['train_batch_size=384,512']}}"]) + "\n")
    code = ("import sys; from pathlib import Path; from analysis.readers.collect import read_swept; "
            "print(read_swept(Path(sys.argv[1])))")
    done = subprocess.run([sys.executable, "-c", code, str(sweep)], capture_output=True, text=True,
                          cwd=Path(__file__).parents[1], timeout=60)
    assert done.stdout.strip() == "{'train_batch_size': ['384', '512']}", done.stderr[-2000:]


def test_command_line_override_replaces_sweeper_param(tmp_path: Path) -> None:
    write_multirun(tmp_path, ["seed=3", "learning_rate=1e-5,2e-5"], params={"seed": "0,1"})
    assert read_swept(tmp_path) == {"learning_rate": ["1e-05", "2e-05"]}


def test_read_metrics_tolerates_missing_and_garbage(tmp_path: Path) -> None:
    assert read_metrics(tmp_path / "absent.jsonl").rows == []
    log = tmp_path / "metrics.jsonl"
    log.write_text('[1, 2]\n\n{"no_step": 1}\n{"step": 0, "x": 1}\n{"step": 0, "x": 2}\n'
                   '{"step": 1, "x": "nan", "y": "-inf", "z": "text"}\n{"st')
    metrics = read_metrics(log)
    assert metrics.rows[0] == {"step": 0, "x": 2}
    assert np.isnan(metrics.rows[1]["x"]) and metrics.rows[1]["y"] == -np.inf
    assert metrics.rows[1]["z"] == "text"
    assert (metrics.n_bad_lines, metrics.n_duplicate_steps) == (3, 1)


def test_find_latest_sweep_and_save(sweep: Path, coll: Collection, tmp_path: Path) -> None:
    older = tmp_path / "exp" / "old"
    write_multirun(older, ["seed=0,1"])
    newer = tmp_path / "exp" / "new"
    write_multirun(newer, ["seed=0,1"])
    os.utime(older / "multirun.yaml", (1, 1))
    assert find_latest_sweep(tmp_path) == newer
    with pytest.raises(FileNotFoundError):
        find_latest_sweep(tmp_path / "nothing")
    path = save_steps(coll, tmp_path / "collected")
    back = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    assert back.shape == coll.steps.shape
    assert back["eval/reward"].sum() == pytest.approx(coll.steps["eval/reward"].sum())


# ------------------------------------------------------------------------------- plots


def test_eval_reward_curves_are_seed_means_with_bands(figures: dict) -> None:
    panel = figures["eval_reward"].panels["step"]
    assert list(panel.curves) == [SMALL, ON_POLICY, OFF_64, OFF_128]
    steps = np.array(EVAL_STEPS, dtype=float)
    on_policy = panel.curves[ON_POLICY]
    np.testing.assert_allclose(on_policy.x, steps)
    np.testing.assert_allclose(on_policy.y, 0.35 + 0.02 * steps)
    # the band is the 95% interval of the mean over its 2 seeds (0.30 and 0.40 + 0.02 step), the
    # seed variance pooled over the configs at that step: at step 6 epochs 2 / batch 128 has 2
    # seeds 0.1 apart too, variance 0.005 on 2 df: 0.47 -+ 4.303 x sqrt(0.005 / 2); at step 9
    # on-policy alone has 2 seeds: 1 df, 12.71 x 0.05 = 0.635 either side, clipped to 0-1
    assert (on_policy.lo[2], on_policy.hi[2]) == pytest.approx(
        stats.t.interval(0.95, 2, loc=0.47, scale=0.05))
    assert 0.2548 < on_policy.lo[2] < 0.2549
    assert (on_policy.lo[3], on_policy.hi[3]) == (0.0, 1.0)
    # one seed at step 9 (job 4 stopped at 7) beside a 2-seed config: the pooled variance too
    assert panel.curves[OFF_128].hi[3] == 1.0
    assert on_policy.n_runs == 2
    # job 4 stopped at step 7: the step-9 point is job 3's alone
    np.testing.assert_allclose(panel.curves[OFF_128].y, [0.50, 0.56, 0.62, 0.63])

    clock = figures["eval_reward"].panels["wall_clock"]
    assert clock.unit == "minutes"
    # the training clock, evaluation excluded: 70 s (mean of 60 and 80) per GRPO step
    assert clock.xlabel == "Wall-clock training time (minutes, eval excluded)"
    np.testing.assert_allclose(clock.curves[ON_POLICY].x, 70 * steps / 60)
    np.testing.assert_allclose(clock.curves[ON_POLICY].y, on_policy.y)


def test_every_panel_plots_the_collected_series(figures: dict, coll: Collection) -> None:
    for name in ("eval_reward", "training"):
        for panel in figures[name].panels.values():
            for label, curve in panel.curves.items():
                rows_ = coll.steps[(coll.steps[LABEL] == label) & coll.steps[panel.metric].notna()]
                stats = rows_.groupby("step")[panel.metric].agg(["mean", "min", "max"])
                x_col = "step" if panel.x == "step" else "time/elapsed_no_eval_s"
                x = rows_.groupby("step")[x_col].mean() / (60 if panel.unit == "minutes" else 1)
                np.testing.assert_allclose(curve.x, x.to_numpy(float))
                np.testing.assert_allclose(curve.y, stats["mean"].to_numpy(float))
                if name == "training":  # eval reward bands: test_eval_reward_curves_are_...
                    np.testing.assert_allclose(curve.lo, stats["min"].to_numpy(float))
                    np.testing.assert_allclose(curve.hi, stats["max"].to_numpy(float))
    assert set(figures["training"].panels) == {
        "train/entropy", "train/mean_response_length", "train/grad_norm",
        "train/clip_fraction", "train/reward_mean"}


def test_unstable_runs_are_marked_at_their_last_measured_point(figures: dict) -> None:
    marks = {(m.run_id[-1], m.status, m.x, m.stop_step): m.y
             for m in figures["eval_reward"].panels["step"].markers}
    # run 2 was evaluated at step 3 and stopped after step 4: its last eval point stays at 3
    assert marks == pytest.approx({("2", "diverged", 3, 4): 0.56, ("7", "collapsed", 3, 3): 0.16})
    clock = {m.run_id[-1]: m.x for m in figures["eval_reward"].panels["wall_clock"].markers}
    # evaluated last at step 3: 30 s per GRPO step, evaluation excluded
    assert clock == pytest.approx({"2": 90 / 60, "7": 90 / 60})
    panel = figures["training"].panels["train/entropy"]
    entropy = {(m.run_id[-1], m.x): m.y for m in panel.markers}
    assert entropy == pytest.approx({("2", 4): 0.8, ("7", 3): 0.85})


def test_heatmaps_hold_seed_means_and_mark_unstable_configs(figures: dict,
                                                             coll: Collection) -> None:
    grids = figures["heatmaps"].grids
    # late: the mean of each run's evaluations after step 0 (at most 5), then over seeds: epochs 1,
    # tbs 128 is (0.42 + 0.52) / 2; epochs 1, tbs 64 was evaluated only at step 0 (n/a)
    want = {"late_eval_reward": [[np.nan, 0.47], [0.36, 0.605]],
            "final_eval_reward": [[0.20, 0.53], [0.36, 0.65]]}
    for name, values in want.items():
        assert list(grids[name].index) == [1, 2] and list(grids[name].columns) == [64, 128]
        np.testing.assert_allclose(grids[name].to_numpy(float), values)
        # epochs 2, tbs 64: runs 2 (diverged) and 7 (collapsed); its 0.36 is no genuine result
        assert figures["heatmaps"].marks[name].to_numpy().tolist() == [
            ["", ""], ["collapsed, diverged", ""]]
    one_d = collect([second_sweep(Path(coll.sweeps[0].path).parent / "one_d")])
    assert plot_heatmaps(one_d, Path("unused")) is None


def test_external_curve_and_files(figures: dict, coll: Collection, tmp_path: Path) -> None:
    (external,) = figures["eval_reward"].panels["step"].externals
    np.testing.assert_allclose(external.step, [0, 5, 9])
    np.testing.assert_allclose(external.value, [0.1, 0.3, 0.5])
    (line,) = figures["eval_reward"].panels["step"].external_lines
    np.testing.assert_allclose(line.get_xydata(), [[0, 0.1], [5, 0.3], [9, 0.5]])
    assert line.axes.get_xlabel() == "GRPO step", "GRPO steps share the sweep's axis"
    assert figures["eval_reward"].legend[-2:] == ["paper (external; x: GRPO step)", BAND_TEXT["ci95"]]
    assert figures["eval_reward"].panels["wall_clock"].externals == ()
    assert all(p.externals == () for p in figures["training"].panels.values())
    assert not any("paper" in text for text in figures["training"].legend)
    for figure in figures.values():
        assert {p.suffix for p in figure.paths} == {".png", ".svg"}
        assert all(p.stat().st_size > 1000 for p in figure.paths)
    other = External("x", "train/loss", np.zeros(1), np.zeros(1))
    with pytest.raises(ValueError, match="train/loss"):
        plot_all(coll, tmp_path, [other])


# ------------------------------------------------------------------------------ report


def table(text: str, header: str) -> list[dict[str, str]]:
    """The rows of the first markdown table with a column named ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("|") and f"| {header} |" in line)
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in lines[start:end]]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[2:]]


@pytest.fixture(scope="module")
def report(coll: Collection, sweep: Path, figures: dict) -> str:
    return build_report(coll, sweep, {name: f.paths for name, f in figures.items()})


def test_report_runs_table(report: str) -> None:
    runs = {row["run"].strip("`")[-1]: row for row in table(report, "run")}
    assert runs["3"] == {
        "run": "`exp/2025-06-01_12-00-00/3`", "off_policy.epochs": "2",
        "train_batch_size": "128", "seed": "0", "status": "completed", "steps done": "9/9",
        "final eval reward": "0.630", "best eval reward (step)": "0.630 (9)",
        "wall-clock": "8m30s", "GPU-hours": "0.28", "restarts": "1"}  # 9 x 50 s + 4 evals x 15 s
    assert runs["5"]["GPU-hours"] == "0.03" and runs["5"]["status"] == "failed"
    assert (runs["6"]["status"], runs["6"]["steps done"], runs["6"]["final eval reward"]) == (
        "pending", "0/9", "–")
    assert "- `seed`: 0, 1" in report and "- `train_batch_size`: 64, 128" in report


def test_report_failures_and_best(report: str) -> None:
    assert "`exp/2025-06-01_12-00-00/2` (off_policy.epochs=2, train_batch_size=64, seed 0): " \
           "**diverged** at step 4: loss is nan" in report
    assert "**failed** at step 2: CUDA out of memory" in report
    assert "**collapsed** at step 3: reward collapsed" in report
    assert "`exp/2025-06-01_12-00-00/4` had 2 unparsable metrics line(s)" in report
    # compared at step 9, where the completed runs ended: run 4 (still running at step 7) did not
    # reach it and is not compared there; run 3's late evaluations (0.51, 0.57, 0.63) average 0.57;
    # the seed variance is the on-policy config's (0.42, 0.52): 0.005 on 1 df, 0.57 -+ 12.71 x
    # sqrt(0.005), clipped to 0-1
    assert (f"**Best: {OFF_128}: late eval reward 0.570 [0.000, 1.000] at step 9 (mean over 1 "
            "run)**") in report
    assert (f"- `exp/2025-06-01_12-00-00/4` ({OFF_128}, seed 1): running at step 7 of 9: not "
            "compared at step 9") in report
    configs = {row["config"]: row for row in table(report, "mean best eval reward")}
    assert configs[OFF_64]["mean best eval reward"] == "0.360"
    assert configs[ON_POLICY]["seeds"] == "0, 1"


def test_report_compares_with_on_policy(report: str) -> None:
    assert f"On-policy config: **{ON_POLICY}**" in report
    rows_ = {row["config"]: list(row.values())[1:]
             for row in table(report, "Δ at step")}
    assert set(rows_) == {SMALL, OFF_64, OFF_128}
    # wall-clock: the training clock (evaluation excluded) where the first of the two stopped
    assert rows_[OFF_128] == ["9", "0.630", "0.530", "0.100", "7m30s", "0.630", "0.470", "0.160"]
    assert rows_[SMALL] == ["2", "0.200", "0.350", "-0.150", "1m20s", "0.200", "0.350", "-0.150"]
    assert rows_[OFF_64] == ["4", "0.360", "0.410", "-0.050", "2m00s", "0.360", "0.350", "0.010"]


def test_report_links_figures_and_handles_no_baseline(report: str, sweep: Path,
                                                      tmp_path: Path) -> None:
    for link in ("figures/eval_reward.png", "figures/training.svg", "figures/heatmaps.png"):
        assert f"({link})" in report
        assert (sweep / link).is_file()
    text = build_report(collect([second_sweep(tmp_path / "b")]), tmp_path)
    assert "No on-policy run" in text and "None written." in text


def test_report_failure_before_the_first_step(tmp_path: Path) -> None:
    write_run(tmp_path / "s" / "0", {"seed": 0}, None,
              {"status": "failed", "reason": "KeyError: x\n  in y", "last_step": None})
    text = build_report(collect([tmp_path / "s"]), tmp_path / "s")
    assert "**failed** before the first step: KeyError: x in y" in text
    assert "No config has an evaluation after step 0 yet." in text


def test_report_compares_each_config_with_its_closest_on_policy_run(tmp_path: Path) -> None:
    jobs = [{"loss": loss, "off_policy.epochs": e}
            for loss in ("grpo_clip", "no_baseline") for e in (1, 2)]
    sweep = write_simple_sweep(tmp_path / "s", jobs, [[0.2], [0.3], [0.4], [0.8]], ["loss"])
    text = build_report(collect([sweep]), sweep)
    assert "On-policy configs" in text
    got = {row["config"]: (row["on-policy config"], row["Δ at step"])
           for row in table(text, "Δ at step")}
    assert got == {"loss=grpo_clip, off_policy.epochs=2": ("loss=grpo_clip, off_policy.epochs=1",
                                                           "0.100"),
                   "loss=no_baseline, off_policy.epochs=2": (
                       "loss=no_baseline, off_policy.epochs=1", "0.400")}


# ------------------------------------------------------------ the handout's accuracy bar

# eval/reward per step (30 min per step); lr 1e-5 is the best config by best eval reward and
# reaches 0.25 exactly at step 3; lr 1e-4 (1 GPU) is the best by final reward and reaches it at
# step 5; lr 1e-3 reaches 0.40 at step 1 but collapsed, so it is never the best config
BAR_EVALS = {"1e-5": (0.05, 0.15, 0.24, 0.25, 0.31, 0.20),
             "1e-4": (0.05, 0.10, 0.12, 0.20, 0.22, 0.28),
             "1e-3": (0.05, 0.40)}
BEST_BY_PEAK = "learning_rate=1e-5"


@pytest.fixture(scope="module")
def bar_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sweep = tmp_path_factory.mktemp("bar") / "lr" / "2025-06-03_09-00-00"
    write_multirun(sweep, ["learning_rate=" + ",".join(BAR_EVALS)])
    for job, (lr, evals) in enumerate(BAR_EVALS.items()):
        metrics = [{"step": s, "time/elapsed_s": 1800.0 * (s + 1), "eval/reward": r}
                   for s, r in enumerate(evals)]
        last = len(evals) - 1
        state = {"status": "collapsed" if lr == "1e-3" else "completed", "last_step": last}
        gpus = {"cluster.gpus_per_job": 1} if lr == "1e-4" else {}
        write_run(sweep / str(job), {"learning_rate": lr, **gpus}, metrics, state)
    return sweep


def bar_section(text: str) -> list[str]:
    """The lines of the report's validation-accuracy section after its explanation."""
    lines = text.split("## Validation-accuracy bar\n\n", 1)[1].split("\n\n## ", 1)[0]
    return lines.split("\n\n", 1)[1].splitlines()


def test_report_says_at_which_step_and_gpu_hour_the_best_config_reaches_the_bar(
        bar_sweep: Path) -> None:
    assert ACCURACY_BAR == 0.25
    text = build_report(collect([bar_sweep]), bar_sweep)
    assert "validation accuracy (`eval/reward`) of at least 0.25" in text
    # step 3 ends after 4 x 30 min on 2 GPUs: 4 GPU-hours; the collapsed run, earlier and
    # higher, is not the best config
    assert bar_section(text) == [
        f"**Reached** by the best config **{BEST_BY_PEAK}** (1 of 1 run(s) with metrics "
        "reach 0.25):",
        "- `lr/2025-06-03_09-00-00/0` (seed 0): GRPO step 3, 4.00 GPU-hours "
        "(2h00m wall-clock), eval reward 0.250"]
    # ranked by final reward, lr 1e-4 is the best: step 5 after 3 h on its 1 GPU
    by_final = build_report(collect([bar_sweep]), bar_sweep, criterion="final_eval_reward")
    assert bar_section(by_final)[1] == ("- `lr/2025-06-03_09-00-00/1` (seed 0): GRPO step 5, "
                                        "3.00 GPU-hours (3h00m wall-clock), eval reward 0.280")


def test_report_says_when_the_best_config_misses_the_bar(bar_sweep: Path) -> None:
    coll = collect([bar_sweep])
    assert bar_section(build_report(coll, bar_sweep, bar=0.35)) == [
        f"**Not reached** by the best config **{BEST_BY_PEAK}** (0 of 1 run(s) with metrics "
        "reach 0.35):",
        "- `lr/2025-06-03_09-00-00/0` (seed 0): not reached; best 0.310 at GRPO step 4",
        "",
        "First run of the sweep to reach 0.35: `lr/2025-06-03_09-00-00/2` "
        "(learning_rate=1e-3, seed 0, collapsed) at GRPO step 1, 2.00 GPU-hours "
        "(1h00m wall-clock), eval reward 0.400."]
    assert bar_section(build_report(coll, bar_sweep, bar=0.5))[-1] == (
        "No run reaches 0.5; the best value seen is 0.400 (`lr/2025-06-03_09-00-00/2`, "
        "learning_rate=1e-3, seed 0, collapsed, at GRPO step 1).")


def test_cli_bar_option(bar_sweep: Path) -> None:
    main(["plots", "--sweep", str(bar_sweep), "--bar", "0.3"])
    assert "- `lr/2025-06-03_09-00-00/0` (seed 0): GRPO step 4, 5.00 GPU-hours" in (
        bar_sweep / "report.md").read_text()
    with pytest.raises(SystemExit, match=r"--bar is 25.0; give a validation accuracy in \(0, 1\]"):
        main(["plots", "--sweep", str(bar_sweep), "--bar", "25"])


# --------------------------------------------------------------------------------- CLI


def test_cli_plots_latest_sweep_with_external(sweep: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture) -> None:
    outputs = tmp_path / "outputs"
    latest = write_scenario(outputs / "exp" / "latest")
    csv = tmp_path / "ref.csv"
    csv.write_text("step,train/entropy\n0,1.0\n9,0.5\n")
    main(["plots", "--outputs", str(outputs), "--external", str(csv),
          "--external-label", "reference"])
    assert (latest / "figures" / "training.svg").is_file()
    text = (latest / "report.md").read_text()
    assert "![eval_reward](figures/eval_reward.png)" in text
    assert text.count("| `exp/latest/") == 8
    assert "wrote " + str(latest / "collected") in capsys.readouterr().out
    main(["collect", "--sweep", str(sweep), "--out", str(tmp_path / "frame")])
    assert "frame" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no sweep"):
        main(["plots", "--outputs", str(tmp_path / "empty")])
    with pytest.raises(SystemExit, match=r"--external-label is given 2 time\(s\) for 1"):
        main(["plots", "--sweep", str(sweep), "--external", str(csv),
              "--external-label", "a", "--external-label", "b"])


# ------------------------------------------------------------------ what could not be used


def test_a_completed_run_whose_log_lost_its_last_rows_is_named_where_the_compared_step_moves(
        tmp_path: Path) -> None:
    """A completed run whose metrics.jsonl ends before the step its status.json records moves the
    step every config is compared at: the report names it and says so, never silently."""
    sweep = tmp_path / "s"
    write_multirun(sweep, ["seed=0,1,2"])
    for job in range(3):
        write_run(sweep / str(job), {"seed": job}, rows(0, range(10 if job else 7)),
                  {"status": "completed", "last_step": 9})
    coll = collect([sweep])
    problems = dict(zip(coll.runs["job"], coll.runs["problems"], strict=True))
    assert problems == {0: "metrics.jsonl ends at step 6, status.json says step 9 was reached: "
                           "rows were lost, the run counts to step 6", 1: "", 2: ""}
    assert rank(coll).at_step == 6
    section = build_report(coll, sweep).split("## Runs with missing or unreadable data")[1]
    assert f"- `{sweep.parent.name}/s/0` (status completed): metrics.jsonl ends at step 6" in section


def test_report_lists_runs_it_could_not_use_and_counts_only_runs_with_data(tmp_path: Path) -> None:
    sweep = tmp_path / "s"
    write_multirun(sweep, ["seed=0,1,2,3,4"])
    done = {"status": "completed", "last_step": 3}
    for job in range(5):  # evaluated at steps 0 and 3
        write_run(sweep / str(job), {"seed": job},
                  None if job == 1 else rows(0, range(4)), None if job == 1 else done)
    (sweep / "2" / "status.json").write_text('{"status": "compl')
    shutil.rmtree(sweep / "3" / ".hydra")
    (sweep / "4" / "metrics.jsonl").write_text('{"step": "zero"}\n{"st')
    (sweep / "4" / ".hydra" / "overrides.yaml").write_text("- seed=4\n- [unclosed\n")

    coll = collect([sweep])
    problems = dict(zip(coll.runs["job"], coll.runs["problems"], strict=True))
    assert problems[0] == ""
    assert problems[1] == "no metrics.jsonl"
    assert problems[2].startswith("status.json is unreadable (")
    assert problems[3] == ".hydra/ is missing (config unknown)"
    assert problems[4] == ".hydra/overrides.yaml is unreadable (ParserError); metrics.jsonl holds no step"
    assert list(coll.runs["status"]) == ["completed", "pending", "unknown", "completed", "completed"]

    text = build_report(coll, sweep)
    assert "5 run(s) (3 with metrics)" in text
    section = text.split("## Runs with missing or unreadable data")[1].split("##")[0]
    assert f"- `{sweep.parent.name}/s/1` (status pending): no metrics.jsonl" in section
    assert f"- `{sweep.parent.name}/s/2` (status unknown): status.json is unreadable" in section
    assert f"- `{sweep.parent.name}/s/3` (status completed): .hydra/ is missing" in section
    # the three runs with metrics kept no per-problem outcomes: each is named, not left silent
    outcomes = [f"- `{sweep.parent.name}/s/{job}`: no eval_outcomes/" for job in (0, 2, 3)]
    assert all(line in section for line in outcomes)
    assert section.count("\n- ") == 4 + 3
    # jobs 0, 1, 2 and 4 share the config label; only 0 and 2 have metrics
    configs = {row["config"]: row for row in table(text, "mean best eval reward")}
    assert (configs["synthetic"]["runs"], configs["synthetic"]["with metrics"]) == ("4", "2")
    assert "(mean over 2 runs)**" in text
    second = second_sweep(tmp_path / "b")
    for job in (0, 1):
        write_matching_outcomes(second / str(job))
    clean = build_report(collect([second]), tmp_path)
    assert "None: every run has its config, status, metrics and per-problem outcomes." in clean


@pytest.mark.parametrize("content", ["empty", "multirun.yaml only"])
def test_cli_refuses_a_sweep_without_runs(content: str, tmp_path: Path) -> None:
    sweep = tmp_path / "exp" / "ts"
    sweep.mkdir(parents=True)
    if content != "empty":
        write_multirun(sweep, ["seed=0,1"])
    for command in ("plots", "collect"):
        done = subprocess.run([sys.executable, "-m", "analysis", command, "--sweep", str(sweep)],
                              capture_output=True, text=True, cwd=Path(__file__).parents[1])
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip() == (f"error: sweep directory {sweep} holds no run (no job "
                                       "directory 0/, 1/, ...): nothing to collect; pass the "
                                       "directory of a sweep")
    assert sorted(p.name for p in sweep.iterdir()) == ([] if content == "empty" else ["multirun.yaml"])


def test_stale_rollouts_are_not_the_on_policy_baseline(tmp_path: Path) -> None:
    steps = [{"step": s, "eval/reward": 0.2 + 0.1 * s, "time/elapsed_no_eval_s": 10.0 * s}
             for s in range(3)]
    write_multirun(tmp_path, ["off_policy.staleness=0,1"])
    for staleness in (0, 1):
        write_run(tmp_path / str(staleness), {"off_policy.staleness": staleness}, steps,
                  {"status": "completed"})
    runs = collect([tmp_path]).runs
    off_policy = dict(zip(runs["off_policy.staleness"], runs["off_policy"], strict=True))
    assert off_policy == {0: False, 1: True}


def test_the_analysis_writes_only_inside_the_sweep(tmp_path: Path) -> None:
    """Links planted where the analysis writes (report.md, comparisons.csv, the collected frame,
    figures/) are replaced, never written through: the files they point at keep their bytes; a
    linked figures/ directory is refused naming it; a file it cannot write is one line."""
    sweep = write_scenario(tmp_path / "outputs" / "exp" / "s")
    outside = tmp_path / "outside"
    outside.mkdir()
    targets = {}
    for name in ("report.md", "comparisons.csv", "collected.parquet", "collected.csv"):
        targets[name] = outside / name
        targets[name].write_text("not the analysis's")
        (sweep / name).symlink_to(targets[name])
    (sweep / "figures").symlink_to(outside, target_is_directory=True)
    with pytest.raises(SystemExit, match=f"error: {sweep / 'figures'} is a symbolic link"):
        main(["plots", "--sweep", str(sweep)])
    (sweep / "figures").unlink()
    main(["plots", "--sweep", str(sweep)])
    assert all(t.read_text() == "not the analysis's" for t in targets.values())
    assert sorted(p.name for p in outside.iterdir()) == sorted(targets)
    for name in ("report.md", "comparisons.csv"):
        assert not (sweep / name).is_symlink() and (sweep / name).stat().st_size > 100
    assert (sweep / "figures" / "eval_reward.png").is_file()
    # a file it cannot replace (here a directory where the frame goes; a read-only sweep alike)
    for name in ("collected.parquet", "collected.csv"):
        (sweep / name).unlink()
        (sweep / name).mkdir()
    with pytest.raises(SystemExit, match=r"error: cannot write .*collected\.(parquet|csv): Is a "
                                         r"directory; nothing of the runs was changed"):
        main(["plots", "--sweep", str(sweep)])


def test_labels_keep_apart_values_that_a_short_format_would_merge(tmp_path: Path) -> None:
    """Two learning rates equal under %g (1e-05, 1.000001e-05) once shared a label, which broke
    every per-config table ("Categorical categories must be unique")."""
    assert format_value(1e-5) == "1e-05" and format_value(1.000001e-5) == "1.000001e-05"
    assert format_value(0.5) == "0.5" and format_value(float("nan")) == "nan"
    sweep = tmp_path / "sweep"
    write_multirun(sweep, ["learning_rate=1e-05,1.000001e-05"])
    for job, lr in enumerate((1e-5, 1.000001e-5)):
        write_run(sweep / str(job), {"learning_rate": lr}, rows(job, range(0, 11)), {"status": "completed"})
    collection = collect([sweep])
    assert collection.labels == ["learning_rate=1e-05", "learning_rate=1.000001e-05"]
    assert list(rank(collection).table.index) != []


def test_a_borrowed_variance_that_is_not_a_sweep_directory_is_named(tmp_path: Path) -> None:
    sweep = write_scenario(tmp_path / "exp" / "sweep")
    with pytest.raises(SystemExit, match=r"--seed-variance-from: sweep directory .*missing does not exist"):
        main(["plots", "--sweep", str(sweep), "--seed-variance-from", str(tmp_path / "missing")])
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit, match=r"--seed-variance-from: .*file is a file, not a sweep directory"):
        main(["plots", "--sweep", str(sweep), "--seed-variance-from", str(tmp_path / "file")])
    with pytest.raises(SystemExit, match=r".*file is a file, not a sweep directory"):
        main(["plots", "--sweep", str(tmp_path / "file")])


def test_seeds_that_measure_a_variance_of_0_do_not_ask_for_a_second_seed(tmp_path: Path) -> None:
    """Where configs have 2 seeds each that gave the same value (a reward floor), the advice is
    not "a second seed would measure the seed variance": it was measured, and it is 0."""
    sweep = tmp_path / "sweep"
    write_multirun(sweep, ["learning_rate=1e-05,0.001", "seed=0,1"])
    for job, (lr, seed) in enumerate((lr, s) for lr in (1e-5, 1e-3) for s in (0, 1)):
        evals = [{"step": s, "eval/reward": 0.0 if lr == 1e-3 else 0.25} for s in (0, 10)]
        write_run(sweep / str(job), {"learning_rate": lr, "seed": seed}, evals, {"status": "completed"})
    lines = rank(collect([sweep])).verdict_lines()
    said = " ".join(lines)
    assert "a degenerate estimate" in said and "a second seed" not in said
    assert "more seeds of these configs measure nothing more" in said


def test_the_main_effects_section_says_its_variance_leaves_out_a_floor(tmp_path: Path) -> None:
    """A config whose two seeds gave one value (no learning) beside two whose seeds vary: the
    ANOVA's seed variance is the varying configs' (2 df, not 3), tested on Satterthwaite's df of
    it (their variances 0.03125 and 0.0703: (0.03125 + 0.0703)^2 / (0.03125^2 + 0.0703^2) = 1.74)
    shrunk towards one config's 1 (1 + (1.74 - 1)^2 = 1.55, down to a tenth 1.5) and the key on
    Box's numerator df (1.9 of its 2, the floor at the pool's variance), and the report says so."""
    sweep = tmp_path / "sweep"
    write_multirun(sweep, ["learning_rate=1e-05,0.0003,0.001", "seed=0,1"])
    rewards = {1e-5: (0.25, 0.25), 3e-4: (0.5, 0.75), 1e-3: (0.25, 0.625)}
    for job, (lr, seed) in enumerate((lr, s) for lr in rewards for s in (0, 1)):
        evals = [{"step": s, "eval/reward": 0.25 if s == 0 else rewards[lr][seed]} for s in (0, 10)]
        write_run(sweep / str(job), {"learning_rate": lr, "seed": seed}, evals, {"status": "completed"})
    ranking = rank(collect([sweep]))
    assert ranking.uncertainty.seeds.df == 3 and ranking.effects.error.df == 1.5
    (term,) = ranking.effects.terms
    text = build_report(collect([sweep]), sweep, ranking=ranking)
    assert ("each F against the seed variance (seeds, 1.5 df; the ANOVA's seed variance leaves out 1 "
            "config whose seeds all gave one value (a floor or ceiling: learning_rate=1e-05): "
            "pooled over the 2 whose seeds vary, on their 2 df; tested on 1.5 df, not the pool's 2: "
            "the configs' seed variances differ (Brown and Forsythe's test: Satterthwaite's df of "
            "the pool shrunk towards one config's, and Box's numerator df where they differ))") in text
    assert term.tested_df == 1.9
    assert "| learning_rate | 2 (tested on 1.9: Box's, the configs' spreads differ) |" in text


def test_the_main_effects_section_names_the_configs_it_leaves_out(tmp_path: Path) -> None:
    sweep = write_scenario(tmp_path / "exp" / "sweep")
    text = build_report(collect([sweep]), sweep)
    section = text[text.index("## Main effects"):text.index("## Validation-accuracy bar")]
    assert ("Left out of the ANOVA: off_policy.epochs=2, train_batch_size=64 (a run stopped early "
            "(collapsed, diverged)); off_policy.epochs=1, train_batch_size=64 (no run reached step 9).") in section
    assert "Each level's least-squares effect (sum-to-zero contrasts" in section


# ------------------------------------------------------- a run is one run however it is reached


def test_a_sweep_named_twice_is_read_once_and_said(sweep: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A link to the sweep, a relative and an absolute path, the identical path twice (a
    TypeError traceback before): each run once, the seeds of a config 0, 1 (not 0, 0, 1, 1), the
    seed variance on the same df as the sweep alone, and one line that says so."""
    link = tmp_path / "link"
    link.symlink_to(sweep, target_is_directory=True)
    monkeypatch.chdir(sweep.parent)
    alone = rank(collect([sweep])).uncertainty
    for second in (link, sweep, Path(sweep.name)):
        both = collect([sweep, second])
        assert list(both.runs["run_dir"]) == [str(sweep / str(job)) for job in range(8)]
        assert both.runs.groupby(LABEL)["seed"].apply(list)[ON_POLICY] == [0, 1]
        assert both.notes == (f"{second}{'' if second == sweep else f' is the sweep {sweep},'} "
                              "named twice: its runs are read once",)
        again = rank(both).uncertainty
        assert (again.seeds.variance, again.seeds.df) == (alone.seeds.variance, alone.seeds.df)
    text = build_report(collect([sweep, link]), sweep)
    assert f"- {link} is the sweep {sweep}, named twice: its runs are read once" in text
    assert "8 run(s) (7 with metrics)" in text


def test_a_run_directory_reached_twice_is_read_once(sweep: Path, tmp_path: Path) -> None:
    """Another sweep whose job 0 is a link to this sweep's run 1: read once, at its first path,
    and not listed as a job of the other sweep that gave no run; a sweep all of whose runs were
    read elsewhere is no sweep of the collection."""
    other = tmp_path / "other"
    (other / "0").parent.mkdir()
    (other / "0").symlink_to(sweep / "1", target_is_directory=True)
    alone = collect([sweep, other])
    assert len(alone.runs) == 8 and [s.path for s in alone.sweeps] == [sweep]
    write_run(other / "1", {"seed": 5, "off_policy.epochs": 1, "train_batch_size": 128},
              rows(0, range(10)), {"status": "completed"}, base=BASE)
    write_jobs(other, "local", [Job(0, ("seed=1",)), Job(1, ("seed=5",))])
    both = collect([sweep, other])
    assert len(both.runs) == 9 and [s.path for s in both.sweeps] == [sweep, other]
    assert both.notes == (f"{other}: run 0 is {sweep / '1'} (one run directory reached twice): "
                          "read once",)
    assert missing_jobs(both) == []


def test_the_same_config_and_seed_in_two_sweeps_is_one_seed(sweep: Path, tmp_path: Path) -> None:
    """A copy of run 0 (on-policy, seed 0) in another sweep is not a second seed: it is set aside
    and said, and the seed variance is the sweep's alone (not 0 on one more df); of two copies
    the one that ran further is kept whichever is named first; a copy that differs in a key no
    swept key names (eval.n_examples) is set aside naming it."""
    alone = rank(collect([sweep])).uncertainty.seeds
    other = tmp_path / "other"
    shutil.copytree(sweep / "0", other / "0")
    write_jobs(other, "local", [Job(0, ("off_policy.epochs=1", "train_batch_size=128", "seed=0"))])
    both = collect([sweep, other])
    assert both.runs.groupby(LABEL)["seed"].apply(list)[ON_POLICY] == [0, 1]
    assert missing_jobs(both) == []  # said as set aside, not as a job that gave no run
    assert both.notes == (
        f"{other / '0'} ({ON_POLICY}, seed 0) is set aside: the same config and seed as "
        f"{sweep / '0'}, which is kept (one seed is one measurement, never a second seed; kept is "
        "the run that went furthest, of equals the first named)",)
    seeds = rank(both).uncertainty.seeds
    assert (seeds.variance, seeds.df) == (alone.variance, alone.df)
    assert collect([other, sweep]).runs.set_index("job").loc[0, "run_dir"] == str(other / "0")
    # run 4 (running at step 7) and a copy that went on to step 9: the copy is kept
    further = tmp_path / "further"
    shutil.copytree(sweep / "4", further / "0")
    with (further / "0" / "metrics.jsonl").open("a") as log:
        log.write("\n" + "".join(json.dumps(r) + "\n" for r in rows(4, range(8, 10))))
    kept = collect([sweep, further]).runs
    assert str(further / "0") in set(kept["run_dir"]) and str(sweep / "4") not in set(kept["run_dir"])
    differs = tmp_path / "differs"
    write_run(differs / "0", {"seed": 0, "off_policy.epochs": 1, "train_batch_size": 128},
              rows(0, range(10)), {"status": "completed"}, base=BASE | {"eval": {"n_examples": 10}})
    (note,) = collect([sweep, differs]).notes
    assert note.endswith("; it differs in eval.n_examples, which no swept key names, so no label "
                         "tells the two apart")


def test_distinct_runs_at_the_same_trailing_path_keep_distinct_ids(tmp_path: Path) -> None:
    """Two sweeps a/exp/s and b/exp/s of other seeds: run ids of their last three path parts
    would collide (and break every per-run lookup); their full directories tell them apart."""
    for root, seed in (("a", 0), ("b", 1)):
        write_multirun(tmp_path / root / "exp" / "s", ["seed=0"])
        write_run(tmp_path / root / "exp" / "s" / "0", {"seed": seed}, rows(0, range(10)),
                  {"status": "completed"})
    both = collect([tmp_path / "a" / "exp" / "s", tmp_path / "b" / "exp" / "s"])
    assert list(both.runs["run_id"]) == [str(tmp_path / r / "exp" / "s" / "0") for r in "ab"]
    assert rank(both).table.loc["synthetic", "n_used"] == 2


def test_an_overlay_writes_into_its_own_directory_never_over_a_sweeps_report(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`make plots SWEEP="a b"` once rewrote a/report.md and a/figures/ with the combined report:
    an overlay writes into overlay_a+b/ beside a and says so; a's own report keeps its bytes. Two
    sweeps of one name get the first name, a count and a digest; an overlay directory that is a
    sweep is refused in one line."""
    a = write_scenario(tmp_path / "exp" / "a")
    b = second_sweep(tmp_path / "exp" / "b")
    main(["plots", "--sweep", str(a)])
    own = {p: p.read_bytes() for p in [a / "report.md", *a.glob("collected.*"),
                                      *sorted((a / "figures").iterdir())]}
    capsys.readouterr()
    main(["plots", "--sweeps", f"{a} {b}"])
    out = tmp_path / "exp" / "overlay_a+b"
    printed = capsys.readouterr().out
    assert f"overlay of 2 sweeps: written into {out}/ (each sweep's own report stays as it was)" in printed
    assert f"wrote {out / 'report.md'}" in printed and f"wrote {out / 'figures' / 'eval_reward.png'}" in printed
    assert {p: p.read_bytes() for p in own} == own
    assert (out / "report.md").read_text().startswith("# Sweep report: `a`, `b`\n\n10 run(s)")
    assert (out / "comparisons.csv").is_file() and list(out.glob("collected.*"))
    main(["collect", "--sweeps", f"{a} {b}"])
    assert f"wrote {out / 'collected'}" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in own} == own
    # two sweeps called s: the first name, how many more, a digest of their paths
    first, second = (second_sweep(tmp_path / root / "s") for root in ("x", "y"))
    main(["plots", "--sweeps", f"{first} {second}", "--no-report"])
    (made,) = (tmp_path / "x").glob("overlay_*")
    assert made.name.startswith("overlay_s+1more_") and len(made.name) == len("overlay_s+1more_") + 8
    assert not (first / "figures").exists()
    # an overlay directory that is a sweep
    write_multirun(tmp_path / "exp" / "overlay_a+b+s", ["seed=0,1"])
    with pytest.raises(SystemExit, match=r"error: the overlay of 3 sweeps writes into .*overlay_a\+b\+s, "
                                         "which is a sweep; rename that sweep directory"):
        main(["plots", "--sweeps", f"{a} {b} {first}"])
