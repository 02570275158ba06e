"""Racing configs across seeds (analysis.decisions.race, run for the sweeper by hydra_plugins.grpo_sweeps.validating_sweeper):
the look after each wave on run directories written to disk at the race's calibrated level, the
record a relaunched sweeper continues from, and the budget."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from rich.console import Console
from sweep_factory import write_matching_outcomes

from analysis.decisions.race.boundary import (
    MAX_SEEDS,
    NONE_LEFT,
    ONE_LEFT,
    OVER_BUDGET,
    Decision,
    boundary,
)
from analysis.decisions.race.looks import RaceRunner, chunks, decide, first_look, race_boundary
from analysis.decisions.race.record import (
    RACE_FILE,
    Race,
    Wave,
    read_race,
)
from analysis.decisions.race.settings import Calibration, RaceSettings
from analysis.outputs.monitor import plain_line, table, watch
from analysis.outputs.progress import SweepProgress
from analysis.outputs.promote import promote
from analysis.outputs.report import build_report
from analysis.readers.collect import collect
from analysis.readers.synthetic import config_with, write_multirun, write_run
from chain.results import find_winner
from grpo.run.files import RunFileError
from grpo.run.run_config import without_seed

ROOT = Path(__file__).resolve().parents[1]
EVAL_STEPS = (0, 10, 20, 30, 40, 50)
LRS = ("1e-4", "3e-4", "1e-3")


RUN_BASE = {"cluster": {"gpus_per_job": 0, "cpus_per_job": 1}, "n_grpo_steps": EVAL_STEPS[-1],
            "experiment_name": "race", "pruning": {"name": "off"},
            "checkpoint": {"save_final_model": False}}
"""The config every synthetic race run shares (a CPU job: its spend is in CPU-hours; no final
model: a completed run is over without one, `grpo.run.finished`)."""
RUN_HOURS = 36.0 * EVAL_STEPS[-1] / 3600
"""What each synthetic run measured: 0.5 CPU-hours (36 s a step, 50 steps, 1 CPU)."""


def identity(lr: str) -> dict:
    """The resolved config of a race run of `learning_rate=lr` (what `write_race_run` writes)."""
    return OmegaConf.to_container(OmegaConf.create(config_with({"learning_rate": lr, "seed": 0}, RUN_BASE)))


def write_race_run(run_dir: Path, lr: str, seed: int, value: float, status: str = "completed") -> None:
    """One run of `learning_rate=lr` with seed `seed` (completed, or ended with `status`) whose
    late evaluations are `value` (0.3 at step 0), on 100 problems."""
    rows = [{"step": s, "time/elapsed_s": 36.0 * s, "eval/reward": 0.3 if s == 0 else value}
            for s in EVAL_STEPS]
    write_run(run_dir, {"learning_rate": lr, "seed": seed}, rows,
              {"status": status, "last_step": EVAL_STEPS[-1]}, base={**RUN_BASE, "seed": seed})
    write_matching_outcomes(run_dir, 100, "ab" * 32)


class Truth:
    """A launcher that 'trains' each job by writing its run directory: config `learning_rate=lr`
    reaches `means[lr]` plus a seed effect of sd `sd` (fixed per (lr, seed)); it records every
    job it was asked to run and can stop (a killed sweeper) after `stop_after` jobs."""

    def __init__(self, sweep: Path, means: dict[str, float], sd: float, stop_after: int | None = None):
        self.sweep, self.means, self.sd, self.stop_after = sweep, means, sd, stop_after
        self.launched: list[int] = []

    def __call__(self, batch: list[list[str]], start: int) -> None:
        for num, overrides in enumerate(batch, start=start):
            if self.stop_after is not None and len(self.launched) >= self.stop_after:
                raise KeyboardInterrupt("the sweeper was killed")
            values = dict(o.split("=", 1) for o in overrides)
            lr, seed = values["learning_rate"], int(values["seed"])
            offset = np.random.default_rng([LRS.index(lr), seed]).normal(0, self.sd)
            value = round(min(max(self.means[lr] + offset, 0), 1), 2)
            write_race_run(self.sweep / str(num), lr, seed, value)
            self.launched.append(num)


def runner(sweep: Path, settings: RaceSettings, launch: Truth, price: float = 1.0,
           lrs: tuple[str, ...] = LRS) -> RaceRunner:
    """The race of `lrs` in `sweep`, each run priced at `price` CPU-hours."""
    write_multirun(sweep, [f"learning_rate={','.join(lrs)}"])
    return RaceRunner(sweep, settings, [[f"learning_rate={lr}"] for lr in lrs],
                      [identity(lr) for lr in lrs], launch, lambda indices: price * len(indices),
                      "CPU-hours")


def test_a_clearly_worse_config_leaves_at_the_first_look_with_a_seed_variance(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    write_multirun(sweep, [f"learning_rate={','.join(LRS)}", "seed=0,1"])
    values = {"1e-4": (0.30, 0.32), "3e-4": (0.60, 0.61), "1e-3": (0.59, 0.62)}
    for job, (lr, seed) in enumerate((lr, s) for lr in LRS for s in (0, 1)):
        write_race_run(sweep / str(job), lr, seed, values[lr][seed])
    settings = RaceSettings(max_seeds=3, alpha=0.05)
    every = [f"learning_rate={lr}" for lr in LRS]
    level = boundary(3, 3, 0.05, False).level  # 3 configs, no variance at wave 1
    decision = decide(collect([sweep]), every, settings, wave=2, level=level)
    assert set(decision.alive) == {"learning_rate=3e-4", "learning_rate=1e-3"}
    assert list(decision.left) == ["learning_rate=1e-4"] and decision.end is None
    # it leaves by Hsu's comparisons with the best at the race's calibrated level: 0.0371 for 3
    # configs and 3 seeds with no variance at wave 1, set by a tied best pair of seed sds 100
    # apart (0.0467 calibrated on equal seed sds alone; Bonferroni's would be 0.0167; before the
    # 3-seed look's Welch df was shrunk towards 2, 0.0349 set at 10 apart, and 0.0456)
    assert decision.level == boundary(3, 3, 0.05, False).level == pytest.approx(0.0371, abs=5e-4)
    assert decision.left["learning_rate=1e-4"].startswith("below the best: its mean minus ")
    assert "(Hsu's comparisons with the best, simultaneous 96.3%" in decision.left["learning_rate=1e-4"]
    assert "seeds in this sweep" in decision.seed_variance
    # at the last look the race ends whatever is left; with one config left it ends at once
    assert decide(collect([sweep]), every, settings, wave=3, level=level).end == MAX_SEEDS
    assert decide(collect([sweep]), ["learning_rate=3e-4"], settings, wave=2,
                  level=level).end == ONE_LEFT


def test_without_a_seed_variance_no_config_leaves(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    write_multirun(sweep, [f"learning_rate={','.join(LRS)}"])
    for job, (lr, value) in enumerate(zip(LRS, (0.1, 0.5, 0.9), strict=True)):
        write_race_run(sweep / str(job), lr, 0, value)
    decision = decide(collect([sweep]), [f"learning_rate={lr}" for lr in LRS],
                      RaceSettings(max_seeds=3, alpha=0.05), wave=1,
                      level=boundary(3, 3, 0.05, True).level)
    assert len(decision.alive) == 3 and decision.left == {} and decision.end is None
    assert decision.seed_variance.startswith("none") and decision.level is None


def test_wave_1_looks_with_a_borrowed_variance_where_one_is_named(tmp_path: Path) -> None:
    """One seed a config and one swept key: nothing in wave 1 measures the seed variance, but
    with analysis.seed_variance_from naming a two-seed sweep of the same settings the first look
    borrows it (as it is) and a clearly worse config leaves at wave 1; a source that ran another
    loss lends its variance inflated to its upper 95% bound."""
    def sweep_of(path: Path, lrs: tuple[str, ...], seeds: tuple[int, ...],
                 values: dict[str, tuple[float, ...]], extra: dict) -> Path:
        write_multirun(path, [f"learning_rate={','.join(lrs)}"]
                       + ([f"seed={','.join(map(str, seeds))}"] if len(seeds) > 1 else []))
        for job, (lr, seed) in enumerate((lr, s) for lr in lrs for s in seeds):
            rows = [{"step": s, "time/elapsed_s": 36.0 * s,
                     "eval/reward": 0.3 if s == 0 else values[lr][seed]} for s in EVAL_STEPS]
            write_run(path / str(job), {"learning_rate": lr, "seed": seed, **extra}, rows,
                      {"status": "completed", "last_step": EVAL_STEPS[-1]},
                      base={**RUN_BASE, "seed": seed})
            write_matching_outcomes(path / str(job), 100, "ab" * 32)
        return path

    source = sweep_of(tmp_path / "source", LRS, (0, 1),
                      {"1e-4": (0.40, 0.42), "3e-4": (0.60, 0.62), "1e-3": (0.58, 0.61)}, {})
    wave_1 = {"1e-4": (0.30,), "3e-4": (0.60,), "1e-3": (0.61,)}
    race = sweep_of(tmp_path / "race", LRS, (0,), wave_1,
                    {"analysis.seed_variance_from": str(source)})
    every = [f"learning_rate={lr}" for lr in LRS]
    decision = decide(collect([race]), every, RaceSettings(max_seeds=3, alpha=0.05), wave=1,
                      level=boundary(3, 3, 0.05, True).level)
    # wave 1 looked: the race's level is the one calibrated with a look at wave 1
    assert decision.level == boundary(3, 3, 0.05, True).level
    assert f"the seeds of sweep {source}" in decision.seed_variance
    assert "inflated" not in decision.seed_variance
    assert list(decision.left) == ["learning_rate=1e-4"]
    other = sweep_of(tmp_path / "other", LRS, (0, 1),
                     {"1e-4": (0.40, 0.42), "3e-4": (0.60, 0.62), "1e-3": (0.58, 0.61)},
                     {"loss.name": "no_baseline"})
    race = sweep_of(tmp_path / "race2", LRS, (0,), wave_1, {"analysis.seed_variance_from": str(other)})
    decision = decide(collect([race]), every, RaceSettings(max_seeds=3, alpha=0.05), wave=1,
                      level=boundary(3, 3, 0.05, True).level)
    assert "inflated x8.53 to its upper 95% confidence bound" in decision.seed_variance  # 3 df


def test_a_race_runs_waves_until_one_config_remains_and_records_them(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    truth = Truth(sweep, {"1e-4": 0.2, "3e-4": 0.6, "1e-3": 0.45}, sd=0.01)
    race = runner(sweep, RaceSettings(max_seeds=4, alpha=0.05), truth).run()
    # wave 1 (seed 0): all three, no seed variance; wave 2 (seed 1): all three again, which
    # measures it; then only the best goes on, and the race ends with one config left
    assert [sorted(w.jobs) for w in race.waves] == [[0, 1, 2], [3, 4, 5]]
    assert [w.seed for w in race.waves] == [0, 1]
    assert race.waves[0].decision.left == {} and race.waves[-1].decision.end == ONE_LEFT
    assert race.waves[-1].decision.alive == ("learning_rate=3e-4",)
    assert truth.launched == [0, 1, 2, 3, 4, 5]
    recorded = read_race(sweep)
    assert recorded.configs == race.configs and recorded.settings == race.settings
    assert [w.decision for w in recorded.waves] == [w.decision for w in race.waves]
    # the spend is what the finished runs measured (0.5 CPU-hours each), not the price (1.0)
    assert recorded.spent_gpu_hours() == 6 * RUN_HOURS == 3.0 and recorded.grid_gpu_hours == 12.0
    assert recorded.fixed_grid_hours() == 4 * 3 * RUN_HOURS
    report = build_report(collect([sweep]), sweep)
    race_section = report[report.index("## Race"):report.index("## Failures")]
    assert ("each look at 0.0233, calibrated by simulation so that a truly best config leaves "
            "at some look of waves 2 on (no seed variance at wave 1) in at most 5.0% of 4000 "
            "simulated races of 3 configs, all equal or a tied best pair of seed sds 2 to 100 "
            "times apart, or every config tied with seed sds alternately 100 times apart (the "
            "least favourable: 100 times;") in race_section
    assert "Left because of their runs" not in race_section  # both left by a comparison
    assert race.waves[-1].decision.outside_alpha() == {}
    assert [w.decision.level for w in race.waves] == [None, boundary(3, 4, 0.05, False).level]
    assert "| 1 | 0 | #0, #1, #2 | 3 | 3 | 1.5 |" in race_section
    assert "| 2 | 1 | #3, #4, #5 | 3 | 3 | 1.5 | learning_rate=3e-4 | learning_rate=" in race_section
    assert "Ended: one config remains." in race_section
    assert "Spent 3 CPU-hours (GPU-hours, or CPU-hours for jobs without a GPU" in race_section
    assert "the fixed grid of 4 seeds a config would spend 6 at the same rates: 50% of it." in race_section
    (sweep / RACE_FILE).write_text("{")
    assert "race record is unusable" in build_report(collect([sweep]), sweep)


def test_a_killed_race_continues_from_its_record_and_trains_no_run_twice(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    means = {"1e-4": 0.5, "3e-4": 0.52, "1e-3": 0.2}
    settings = RaceSettings(max_seeds=3, alpha=0.05)
    killed = Truth(sweep, means, sd=0.02, stop_after=4)  # dies in wave 2, after one of its jobs
    with pytest.raises(KeyboardInterrupt):
        runner(sweep, settings, killed).run()
    assert killed.launched == [0, 1, 2, 3]
    assert read_race(sweep).waves[-1].decision is None  # wave 2 planned, not looked at
    relaunched = Truth(sweep, means, sd=0.02)
    race = runner(sweep, settings, relaunched).run()
    assert relaunched.launched[:2] == [4, 5], "wave 2's finished run 3 is not launched again"
    assert sorted(killed.launched + relaunched.launched) == sorted(
        num for w in race.waves for num in w.jobs)
    # a relaunch of the finished race runs nothing
    again = Truth(sweep, means, sd=0.02)
    runner(sweep, settings, again).run()
    assert again.launched == []


def test_the_monitor_shows_each_run_s_wave_and_where_the_race_stands(tmp_path: Path) -> None:
    """`make watch` (analysis.outputs.monitor over analysis.outputs.progress) reads the race record: each run's
    wave, and a line with the wave, the configs still in and the spend; a torn record is shown
    without waves, not a crash."""
    sweep = tmp_path / "sweep"
    means = {"1e-4": 0.5, "3e-4": 0.52, "1e-3": 0.2}
    settings = RaceSettings(max_seeds=3, alpha=0.05)
    with pytest.raises(KeyboardInterrupt):  # killed during wave 2, after its first run
        runner(sweep, settings, Truth(sweep, means, sd=0.02, stop_after=4)).run()
    progress = SweepProgress(sweep)
    rows = progress.read()
    assert [(r.num, r.wave) for r in rows] == [(0, 1), (1, 1), (2, 1), (3, 2)]
    assert progress.race.status_text() == (
        "race: wave 2 of at most 3 (seed 1, 3 runs), not looked at yet; 3 of 3 configs in; "
        "4.5 of the fixed grid's 4.5 CPU-hours")  # wave 1 measured (1.5), wave 2 priced (3)
    assert plain_line(rows[3]).startswith("#3 (wave 2) learning_rate=1e-4")
    console = Console(record=True, width=200)
    console.print(table(rows))
    shown = console.export_text().splitlines()
    (header,) = [line.split("┃")[1:3] for line in shown if "┃" in line]
    cells = [line.split("│")[1:3] for line in shown if "│" in line]
    assert [c.strip() for c in header] == ["#", "wave"]
    assert [[c.strip() for c in row] for row in cells] == [["0", "1"], ["1", "1"], ["2", "1"], ["3", "2"]]

    runner(sweep, settings, Truth(sweep, means, sd=0.02)).run()
    output = io.StringIO()
    rows = watch(sweep, console=Console(file=output, width=300))
    said = output.getvalue()
    last = read_race(sweep)
    assert f"race: ended after wave {len(last.waves)}: {last.waves[-1].decision.end}" in said
    assert all(r.wave is not None for r in rows) and f"#{rows[-1].num} (wave {len(last.waves)}) " in said

    (sweep / RACE_FILE).write_text('{"configs": [')  # torn
    assert [r.wave for r in progress.read()] == [None] * len(rows) and progress.race is None


def test_the_next_wave_is_not_launched_past_the_budget(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    truth = Truth(sweep, {"1e-4": 0.5, "3e-4": 0.5, "1e-3": 0.5}, sd=0.02)
    race = runner(sweep, RaceSettings(max_seeds=5, alpha=0.05, budget_gpu_hours=5.0), truth).run()
    # wave 2: 1.5 measured + 3 priced <= 5; a third: 3 measured + 3 priced > 5 (priced alone, the
    # race would have stopped after wave 1: 3 + 3 > 5)
    assert len(race.waves) == 2 and race.spent_gpu_hours() == 3.0
    assert race.waves[-1].decision.end == OVER_BUDGET
    assert read_race(sweep).waves[-1].decision.end == OVER_BUDGET


class Fixed(Truth):
    """A launcher whose run of `learning_rate=lr` with seed `seed` reaches `values[lr][seed]`."""

    def __init__(self, sweep: Path, values: dict[str, tuple[float, ...]]):
        super().__init__(sweep, {}, 0.0)
        self.values = values

    def __call__(self, batch: list[list[str]], start: int) -> None:
        for num, overrides in enumerate(batch, start=start):
            values = dict(o.split("=", 1) for o in overrides)
            lr, seed = values["learning_rate"], int(values["seed"])
            write_race_run(self.sweep / str(num), lr, seed, self.values[lr][seed])
            self.launched.append(num)


LUCKY = {"1e-4": (0.45, 0.46), "3e-4": (0.60, 0.62, 0.20, 0.20), "1e-3": (0.58, 0.60, 0.20, 0.20)}
"""1e-4 is shown worse at wave 2 and leaves; the two others' later seeds fall below its mean."""


def test_the_chain_carries_the_race_s_winner_among_the_configs_still_in(tmp_path: Path) -> None:
    """An eliminated config may end with the highest mean (here 1e-4, which left after wave 2 with
    0.455, above the others' 0.405 and 0.395 at 4 seeds); the race's winner is the best of the
    configs still in at its last look, for the chain and promote alike."""
    sweep = tmp_path / "sweep"
    race = runner(sweep, RaceSettings(max_seeds=4, alpha=0.05), Fixed(sweep, LUCKY)).run()
    assert list(race.waves[1].decision.left) == ["learning_rate=1e-4"]
    assert race.waves[-1].decision.end == MAX_SEEDS and len(race.waves) == 4
    winner = find_winner(sweep, ("learning_rate",))
    assert winner.label == "learning_rate=3e-4" and winner.values == {"learning_rate": "3e-4"}
    assert winner.race_notes == ()
    (sweep / RACE_FILE).unlink()
    assert find_winner(sweep, ("learning_rate",)).label == "learning_rate=1e-4"


def test_a_sweep_dir_of_another_race_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = tmp_path / "sweep"
    runner(sweep, RaceSettings(max_seeds=2, alpha=0.05), Truth(sweep, dict.fromkeys(LRS, 0.5), 0.02)).run()
    with pytest.raises(SystemExit) as exit_info:
        runner(sweep, RaceSettings(max_seeds=3, alpha=0.05), Truth(sweep, {}, 0.0)).run()
    said = capsys.readouterr().err
    assert exit_info.value.code == 2 and "holds a race of other settings (race.max_seeds: 2 -> 3;" in said


@pytest.mark.parametrize("payload", [
    "not json", json.dumps({"settings": {"max_seeds": 3}}), json.dumps([1, 2]),
    json.dumps({"configs": [["a=1"]], "settings": {"max_seeds": 2, "alpha": 0.05},
                "grid_gpu_hours": 1.0,
                "waves": [{"seed": 0, "jobs": {"0": 7}, "priced_gpu_hours": 1.0, "labels": {},
                           "decision": None}]}),
])
def test_a_crafted_race_record_is_named_not_obeyed(tmp_path: Path, payload: str) -> None:
    (tmp_path / RACE_FILE).write_text(payload)
    with pytest.raises(RunFileError, match=RACE_FILE):
        read_race(tmp_path)


def test_a_race_s_level_is_chosen_by_its_first_look() -> None:
    """Before wave 1 is looked at, the level of a race whose wave 1 has a seed variance (the
    smaller); then the one its first look's variance says: none (a recorded level of None) gives
    the level of looks from wave 2 on."""
    settings = RaceSettings(max_seeds=3, alpha=0.05)
    race = Race([["learning_rate=1e-4"], ["learning_rate=3e-4"], ["learning_rate=1e-3"]],
                settings, 3.0, [Wave(0, {0: 0, 1: 1, 2: 2}, 3.0)])
    with_first, without = boundary(3, 3, 0.05, True), boundary(3, 3, 0.05, False)
    assert with_first.level < without.level
    assert first_look(race) is None and race_boundary(race) == with_first
    race.waves[0].decision = Decision(1, ("learning_rate=3e-4",), level=None)
    assert first_look(race) is False and race_boundary(race) == without
    race.waves[0].decision = Decision(1, ("learning_rate=3e-4",), level=with_first.level)
    assert first_look(race) is True and race_boundary(race) == with_first


def test_seeds_are_the_race_s_and_launches_are_runs_of_consecutive_jobs() -> None:
    assert without_seed(["lr=1", "seed=3", "+seed=4", "x=seed=1"]) == ["lr=1", "x=seed=1"]
    assert chunks([3, 4, 5, 8, 10, 11]) == [[3, 4, 5], [8], [10, 11]]
    settings = RaceSettings.from_config(OmegaConf.create(
        {"max_seeds": 4, "alpha": 0.1, "budget_gpu_hours": None}), seed=7)
    assert settings == RaceSettings(4, 0.1, None, 7)
    assert settings.seed_of(3) == 9
    assert RaceSettings.from_config({"max_seeds": None, "alpha": 0.05}, seed=0) is None



def launch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", "model=tiny", "data=toy",
                           "rollout=hf", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_a_race_is_checked_and_priced_before_anything_runs(tmp_path: Path) -> None:
    out = launch("learning_rate=1e-4,3e-4", "race.max_seeds=3", f"paths.output_root={tmp_path}",
                 "dry_run=true")
    assert out.returncode == 0, out.stderr
    # 2 configs: their pair is always compared on its own variance on Welch's df (shrunk towards
    # 1 at 2 seeds, towards 2 at 3); the levels are the least that hold alpha over equal configs
    # and tied pairs of seed sds 2 to 100 apart (100 apart binds both; before the 3-seed shrink
    # equal configs bound with a wave-1 variance at 0.0254, Bonferroni's spending 3.2% and 1.4%)
    assert ("race: waves of seeds 0, 1, ... up to 3 seeds a config; each look at 0.0267 where "
            "wave 1 has a seed variance (borrowed, or a grid's additive residual), 0.0288 where it "
            "has none (one level for every look, calibrated by simulation to alpha 0.05 over the "
            "looks; Bonferroni's 0.05 / 3 a look would spend 3.1% and 1.3% of it); wave 1 ") in out.stdout
    # the expected case: each calibrated case's share of the worst case, which the line names
    calibration = Calibration.read()
    worst = float(out.stdout.split("(every config to max_seeds, the fixed grid) ")[1].split()[0])
    (expected,) = [line for line in out.stdout.splitlines() if line.startswith("race: expected")]
    assert "(calibrated with 9 configs, max_seeds 5, alpha 0.05; this race has 2, 3, 0.05" in expected
    for case in calibration.cases:  # the worst case as printed is rounded to 3 digits
        said = expected.split(f"{case.truth}: ")[1].split(";")[0]
        share, spend = said.split(f" at seed sd {case.seed_sd_points:g} points")[0].split(", ")[-1].split(" = ")
        assert share == f"{100 * case.share:.0f}% ± {100 * case.share_se:.1f}", case
        assert float(spend.split()[0]) == pytest.approx(worst * case.share, rel=0.01), case
    assert {case.truth for case in calibration.cases} >= {
        "all configs equal", "one config 3 points better", "configs 2 points apart"}
    for args, message in [
        (["seed=0,1", "race.max_seeds=3"], "error: seed cannot be swept in a race"),
        (["++seed=0,1", "race.max_seeds=3"], "error: seed cannot be swept in a race"),
        (["race.max_seeds=2,3"], "error: race.max_seeds cannot be swept"),
        (["race.max_seeds=1"], "race.max_seeds=1 is out of range: the most seeds a config gets in "
                               "a race must be null or an integer in [2, 100]"),
        (["race.max_seeds=3", "race.budget_gpu_hours=1e-9"], "error: race wave 1 (2 runs) is priced at"),
        # a value the rules refuse is one line, before the race's settings are read
        (["seed=abc"], "seed='abc' is not a number: the run's seed must be an integer"),
        (["seed=abc", "race.max_seeds=3"], "seed='abc' is not a number"),
        (["race.max_seeds=nan"], "race.max_seeds=nan is not an integer"),
        (["race.max_seeds=abc"], "race.max_seeds='abc' is not a number"),
        (["race.max_seeds=3", "race.alpha=null"], "race.alpha=null is null"),
        (["race.max_seeds=3", "race.alpha=abc"], "race.alpha='abc' is not a number"),
        (["race.max_seeds=3", "race.budget_gpu_hours=abc"], "race.budget_gpu_hours='abc' is not a number"),
        (["race.foo=1"], "race.foo=1: no config or config group defines 'race.foo'; race has "
                         "race.alpha, race.budget_gpu_hours, race.max_seeds"),
        # every wave's seed in range, not only wave 1's
        (["race.max_seeds=3", "seed=4294967294"], "wave 3 would run seed 4294967296, past the "
                                                  "largest seed 4294967295; set seed to at most 4294967293"),
        # race keys where they mean nothing
        (["race.max_seeds=3", "pruning=successive_halving", "pruning.min_resource=50"],
         "race.max_seeds with pruning=successive_halving: the pruner would stop configs outside"),
        (["race.max_seeds=3", "hydra.sweep.subdir=run_${hydra.job.num}"],
         "error: hydra.sweep.subdir=run_${hydra.job.num}: the live monitor, the summary, the "
         "report and a race read a sweep's runs from <sweep>/<job number>"),
        # budget.gpu_hours prices a race's worst case, in the race's unit (here CPU-hours)
        (["race.max_seeds=3", f"budget.gpu_hours={2 * worst / 3:.3g}"],
         "CPU-hours (a race's worst case: every config to race.max_seeds=3 seeds) exceed budget.gpu_hours="),
    ]:
        out = launch("learning_rate=1e-4,3e-4", *args, f"paths.output_root={tmp_path}",
                     "dry_run=true")
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr[-2000:])
        assert "Traceback" not in out.stderr, (args, out.stderr[-2000:])
    # the budget that refuses the race's worst case lets the grid of wave 1 through
    assert launch("learning_rate=1e-4,3e-4", f"budget.gpu_hours={2 * worst / 3:.3g}",
                  f"paths.output_root={tmp_path}", "dry_run=true").returncode == 0
    one = launch("race.max_seeds=3", f"paths.output_root={tmp_path}", "dry_run=true")
    assert one.returncode == 2 and "race.max_seeds is set but the sweep has one config" in one.stderr
    single = subprocess.run([sys.executable, str(ROOT / "launch.py"), "model=tiny", "data=toy",
                             "rollout=hf", "race.max_seeds=3", f"paths.output_root={tmp_path}"],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert single.returncode == 2 and "race.max_seeds=3: a race runs waves of a sweep's configs " \
        "across seeds; a single run has nothing to race" in single.stderr
    assert not list(tmp_path.rglob("*"))


@pytest.mark.slow
def test_a_cpu_race_runs_its_waves_through_the_local_launcher(tmp_path: Path,
                                                              tiny_model_dir: Path) -> None:
    sweep = tmp_path / "race"
    out = launch("learning_rate=3e-4,1", "race.max_seeds=2", "n_grpo_steps=4", "eval.eval_every=2",
                 f"model.path={tiny_model_dir}", f"hydra.sweep.dir={sweep}")
    assert out.returncode == 0, out.stderr[-3000:]
    race = read_race(sweep)
    # one key, one seed each: no seed variance after wave 1, so both get their second seed
    assert [sorted(w.jobs) for w in race.waves] == [[0, 1], [2, 3]]
    assert race.waves[-1].decision.end == MAX_SEEDS and race.unit == "CPU-hours"
    assert "race: wave 1 (seed 0, 2 runs): 2 configs go on" in out.stdout
    for num, seed in ((0, 0), (1, 0), (2, 1), (3, 1)):
        status = json.loads((sweep / str(num) / "status.json").read_text())
        config = OmegaConf.load(sweep / str(num) / ".hydra" / "config.yaml")
        assert status["status"] == "completed" and status["restarts"] == 0 and config.seed == seed
    # a relaunch of the finished race launches nothing
    again = launch("learning_rate=3e-4,1", "race.max_seeds=2", "n_grpo_steps=4",
                   "eval.eval_every=2", f"model.path={tiny_model_dir}", f"hydra.sweep.dir={sweep}")
    assert again.returncode == 0 and "Local sweep of" not in again.stdout + again.stderr
    # the same configs spelled otherwise (another order, a key that changes no curve) are the
    # same race; a lost or damaged record is rebuilt from the runs; nothing runs again
    original = looks(race)
    for damage in ("none", "deleted", "junk"):
        if damage == "deleted":
            (sweep / RACE_FILE).unlink()
        elif damage == "junk":
            (sweep / RACE_FILE).write_text('{"configs": [')
        same = launch("eval.eval_every=2", "logging.progress_every=3", "race.max_seeds=2",
                      "learning_rate=1,3e-4", "n_grpo_steps=4", f"model.path={tiny_model_dir}",
                      f"hydra.sweep.dir={sweep}")
        assert same.returncode == 0, (damage, same.stderr[-3000:])
        assert "Local sweep of" not in same.stdout + same.stderr, damage
        assert looks(read_race(sweep)) == original, damage
    # another race in the same directory is refused before anything is written, by its dry run
    # too, naming what differs
    before = tree(sweep)
    for dry in ([], ["dry_run=true"]):
        other = launch("learning_rate=3e-4,0.1", "race.max_seeds=2", "n_grpo_steps=4",
                       "eval.eval_every=2", f"model.path={tiny_model_dir}",
                       f"hydra.sweep.dir={sweep}", *dry)
        assert other.returncode == 2, other.stderr[-3000:]
        assert (f"error: {sweep} holds a race of other configs: the recorded config "
                "[learning_rate=1] is not launched") in other.stderr, other.stderr[-3000:]
        assert ("the launched config [learning_rate=0.1] is not in the record (the nearest "
                "recorded, [learning_rate=0.0003]: learning_rate: 0.0003 -> 0.1) (recorded -> "
                "launched)") in other.stderr
        assert tree(sweep) == before


MEANS = {"1e-4": 0.5, "3e-4": 0.52, "1e-3": 0.2}


def finished_race(sweep: Path) -> Race:
    """A race of LRS up to 3 seeds run to its end in `sweep` (1e-3 far behind the two others)."""
    return runner(sweep, RaceSettings(max_seeds=3, alpha=0.05), Truth(sweep, MEANS, sd=0.02)).run()


def looks(race: Race) -> list[tuple]:
    """Each wave's jobs, seed and look, as the readers use them."""
    return [(w.jobs, w.seed, w.decision.alive, w.decision.end, w.labels) for w in race.waves]


def tree(sweep: Path) -> dict[str, bytes]:
    """Every file under `sweep`, by relative path, with its bytes."""
    return {str(p.relative_to(sweep)): p.read_bytes() for p in sorted(sweep.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("damage", ["deleted", "junk", "torn", "format 1", "a wrong look"])
def test_a_missing_or_damaged_record_is_rebuilt_from_the_runs(
        tmp_path: Path, damage: str, capsys: pytest.CaptureFixture) -> None:
    """The record is a cache of what the runs say: a relaunch replays the race's looks from the
    run directories, so a lost, damaged, outdated or wrong record gives the original race's
    decisions back (and the chain the original winner), and no run is launched again."""
    sweep = tmp_path / "sweep"
    original = finished_race(sweep)
    assert original.waves[0].decision.alive and len(original.waves) >= 2
    record = sweep / RACE_FILE
    payload = json.loads(record.read_text())
    if damage == "deleted":
        record.unlink()
    elif damage == "junk":
        record.write_text("{")
    elif damage == "torn":
        record.write_text(record.read_text()[:200])
    elif damage == "format 1":
        record.write_text(json.dumps({**payload, "version": 1, "identities": None}))
    else:  # the look after wave 1 rewritten: only 1e-3, the worst config, goes on
        payload["waves"][0]["decision"]["alive"] = ["learning_rate=1e-3"]
        record.write_text(json.dumps(payload))
    capsys.readouterr()
    again = Truth(sweep, MEANS, sd=0.02)
    rebuilt = runner(sweep, RaceSettings(max_seeds=3, alpha=0.05), again).run()
    assert again.launched == [] and looks(rebuilt) == looks(original)
    assert looks(read_race(sweep)) == looks(original)
    said = capsys.readouterr().err
    if damage == "deleted":
        assert f"{record} is missing beside 9 job directories: the race is rebuilt" in said
    if damage in ("junk", "torn", "format 1"):
        assert "is not a race record" in said or "not readable JSON" in said
        assert "the race is rebuilt from its runs' own configs" in said
    if damage == "a wrong look":
        assert ("race.json recorded the look after wave 1 as learning_rate=1e-3 going on; its "
                "runs say") in said and "the runs' look is taken" in said
    winner = find_winner(sweep, ("learning_rate",))
    assert winner.label in original.waves[-1].decision.alive


def test_a_relaunch_that_composes_the_same_configs_is_the_same_race(tmp_path: Path) -> None:
    """The race's identity is what its runs train with, not the spelling of the command: the
    same configs in another order continue the race (in its recorded order), launching
    nothing; another config is refused, naming what differs, before anything is written."""
    sweep = tmp_path / "sweep"
    original = finished_race(sweep)
    before = tree(sweep)
    again = Truth(sweep, MEANS, sd=0.02)
    reordered = runner(sweep, RaceSettings(max_seeds=3, alpha=0.05), again, lrs=tuple(reversed(LRS))).run()
    assert again.launched == [] and looks(reordered) == looks(original)
    assert reordered.configs == original.configs
    before = tree(sweep)
    other = ("1e-4", "3e-4", "3e-3")
    with pytest.raises(SystemExit) as refused:
        RaceRunner(sweep, RaceSettings(max_seeds=3, alpha=0.05), [[f"learning_rate={lr}"] for lr in other],
                   [identity(lr) for lr in other], Truth(sweep, {}, 0.0), lambda i: 1.0).prepare()
    assert refused.value.code == 2 and tree(sweep) == before


def test_a_run_that_is_not_the_wave_s_is_refused_naming_its_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A relaunch checks each job directory's trained config and seed against the wave that
    claims it (a finished run of another config is not taken as the wave's), and a run no wave
    claims must be one of the race's configs and seeds; a refusal names the directory and the
    keys that differ, and writes nothing."""
    sweep = tmp_path / "sweep"
    finished_race(sweep)
    shutil.rmtree(sweep / "1")
    shutil.copytree(sweep / "2", sweep / "1")  # job 1 (3e-4, seed 0) now holds 1e-3's run
    for record in (True, False):
        if not record:
            (sweep / RACE_FILE).unlink()
        before = tree(sweep)
        again = Truth(sweep, MEANS, sd=0.02)
        with pytest.raises(SystemExit) as refused:
            runner(sweep, RaceSettings(max_seeds=3, alpha=0.05), again).run()
        said = capsys.readouterr().err
        assert refused.value.code == 2 and again.launched == [] and tree(sweep) == before
        # without the record, wave 1's order is read from its directories: 1e-3 is found at
        # job 1, so job 2 (1e-3's too) is the one that is not its wave's
        job = 1 if record else 2
        assert (f"{sweep / str(job)} holds a run that is not job {job} of wave 1 of the race's: "
                "learning_rate: \"1e-3\" -> \"3e-4\" (trained -> expected)") in said, said
        assert "move that directory away (the race then runs that job again)" in said
    shutil.rmtree(sweep / "1")
    write_race_run(sweep / "40", "1e-4", 7, 0.9)  # a config of the race, a seed of none of its waves
    with pytest.raises(SystemExit):
        runner(sweep, RaceSettings(max_seeds=3, alpha=0.05), Truth(sweep, MEANS, sd=0.02)).run()
    assert (f"{sweep / '40'} holds a run that is not one of this race's: its seed 7 is not one of "
            "the race's seeds (0-2)") in capsys.readouterr().err


def test_a_look_reads_only_the_race_s_runs_and_a_deleted_run_is_run_again(tmp_path: Path) -> None:
    """A run that no wave claims (here job 50, a config and seed of the race with an extreme
    value) is not read by any look; a run of a wave already looked at that was deleted is run
    again, and the looks are made again with it."""
    sweep = tmp_path / "sweep"
    original = finished_race(sweep)
    write_race_run(sweep / "50", "1e-3", 1, 1.0)
    shutil.rmtree(sweep / "0")
    again = Truth(sweep, MEANS, sd=0.02)
    race = runner(sweep, RaceSettings(max_seeds=3, alpha=0.05), again).run()
    assert again.launched == [0] and looks(race) == looks(original)


def test_a_record_that_claims_runs_that_are_gone_is_not_reported_as_run(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    original = finished_race(sweep)
    last_job = max(original.waves[-1].jobs)
    shutil.rmtree(sweep / str(last_job))
    report = build_report(collect([sweep]), sweep)
    assert (f"race.json claims job {last_job} of wave {len(original.waves)}, whose directory is "
            "gone; relaunch the race's command (the same `launch.py -m ...`): it rebuilds the "
            "record from the runs and runs what is missing") in report
    assert "| 1 | 0 | #0, #1, #2 |" not in report
    assert "cannot be read" in find_winner(sweep, ("learning_rate",))


class Collapsing(Truth):
    """A launcher whose runs of `collapsed` configs end collapsed (a health guard's stop)."""

    def __init__(self, sweep: Path, collapsed: set[str]):
        super().__init__(sweep, dict.fromkeys(LRS, 0.5), 0.02)
        self.collapsed = collapsed

    def __call__(self, batch: list[list[str]], start: int) -> None:
        for num, overrides in enumerate(batch, start=start):
            values = dict(o.split("=", 1) for o in overrides)
            lr = values["learning_rate"]
            write_race_run(self.sweep / str(num), lr, int(values["seed"]), 0.0 if lr in self.collapsed else 0.5,
                           "collapsed" if lr in self.collapsed else "completed")
            self.launched.append(num)


def test_a_race_whose_configs_all_stopped_early_says_none_remains(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    truth = Collapsing(sweep, set(LRS))
    race = runner(sweep, RaceSettings(max_seeds=3, alpha=0.05), truth).run()
    assert truth.launched == [0, 1, 2] and len(race.waves) == 1
    decision = race.waves[0].decision
    assert decision.alive == () and decision.end == NONE_LEFT != ONE_LEFT
    assert all(why.startswith("a run stopped early (collapsed") for why in decision.left.values())
    assert decision.outside_alpha() == decision.left and decision.level is None
    report = build_report(collect([sweep]), sweep)
    assert f"Ended: {NONE_LEFT}." in report
    # said apart from the comparisons: these departures spend none of the race's alpha
    assert ("Left because of their runs, not by a comparison (outside the race's alpha, which "
            "bounds only the comparisons): learning_rate=") in report
    assert "(after wave 1: a run stopped early (collapsed" in report


def test_a_race_record_that_cannot_be_written_ends_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep = tmp_path / "sweep"
    (sweep / RACE_FILE).mkdir(parents=True)  # what a full disk or a read-only file makes of it
    truth = Truth(sweep, MEANS, sd=0.02)
    with pytest.raises(SystemExit) as ended:
        runner(sweep, RaceSettings(max_seeds=3, alpha=0.05), truth).run()
    said = capsys.readouterr().err
    assert ended.value.code == 1 and truth.launched == []
    assert f"error: cannot write the race record {sweep / RACE_FILE} (" in said
    assert "then launch the same command again (finished runs are not run again)" in said


def test_a_look_after_a_config_left_compares_only_the_configs_still_in(tmp_path: Path) -> None:
    """After 1e-3 leaves (at wave 3 here), the next wave's look reads only the other two
    configs' runs (a collection that still listed 1e-3 without runs once failed to rank)."""
    sweep = tmp_path / "sweep"
    truth = Truth(sweep, {"1e-4": 0.5, "3e-4": 0.502, "1e-3": 0.2}, sd=0.01)
    race = runner(sweep, RaceSettings(max_seeds=4, alpha=0.05), truth).run()
    assert list(race.waves[2].decision.left) == ["learning_rate=1e-3"]
    assert [sorted(w.jobs.values()) for w in race.waves[3:]] == [[0, 1]] * (len(race.waves) - 3)
    assert len(race.waves) == 4 and race.waves[-1].decision.end == MAX_SEEDS
    assert set(race.waves[-1].decision.alive) == {"learning_rate=1e-4", "learning_rate=3e-4"}


def test_an_edited_record_is_said_and_the_runs_decide(tmp_path: Path) -> None:
    """A record summarizes, never decides: race.json edited so that the look after wave 2 keeps
    only the worst config (1e-4; the runs keep 3e-4) is named in one line by every reader, and
    each shows the race as its runs say: the report's Race section, the chain's winner, promote's
    top config and `make watch`. A record cut short (the race ended after wave 1 with only the
    worst config) is read on from the runs of the waves it no longer lists."""
    sweep = tmp_path / "sweep"
    race = runner(sweep, RaceSettings(max_seeds=4, alpha=0.05),
                  Truth(sweep, {"1e-4": 0.2, "3e-4": 0.6, "1e-3": 0.45}, sd=0.01)).run()
    assert [w.decision.alive for w in race.waves][-1] == ("learning_rate=3e-4",)
    record = sweep / RACE_FILE
    payload = json.loads(record.read_text())
    look = payload["waves"][1]["decision"]
    look["alive"], look["left"] = ["learning_rate=1e-4"], {
        "learning_rate=3e-4": "below the best", "learning_rate=1e-3": "below the best"}
    record.write_text(json.dumps(payload))
    said = ("race.json disagrees with its runs, which win: race.json recorded the look after wave "
            "2 as learning_rate=1e-4 going on (the race ends: one config remains); its runs say "
            "learning_rate=3e-4 going on (the race ends: one config remains): the runs' look is "
            "taken")
    report = build_report(collect([sweep]), sweep)
    section = report[report.index("## Race"):report.index("## Failures")]
    assert f"Warning: {said}." in section
    assert "| 2 | 1 | #3, #4, #5 | 3 | 3 | 1.5 | learning_rate=3e-4 | learning_rate=" in section
    assert "learning_rate=3e-4: below the best;" not in section  # the record's forged look
    assert "Ended: one config remains." in section
    winner = find_winner(sweep, ("learning_rate",))
    assert winner.label == "learning_rate=3e-4" and winner.race_notes == (f"{sweep}: {said}",)
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf, ignore=shutil.ignore_patterns("local", "promoted"))
    promotion = promote(collect([sweep]), 2, "final_eval_reward", "raced", conf_dir=conf)
    assert promotion.descriptions[0].startswith("learning_rate=3e-4  [")
    assert f"warning: {sweep}: {said}" in promotion.verdicts
    preset = promotion.preset.read_text()
    assert f"# warning: {sweep}: {said}" in preset
    assert ("# Left by the race at its looks (as its runs say), not ranked: learning_rate=1e-3, "
            "learning_rate=1e-4") in preset
    output = io.StringIO()
    watch(sweep, console=Console(file=output, width=400))
    assert f"warning: {said}" in output.getvalue()
    assert "race: ended after wave 2: one config remains; 1 of 3 configs in" in output.getvalue()
    assert "Best config: learning_rate=3e-4: " in output.getvalue()
    progress = SweepProgress(sweep)
    progress.read()
    assert progress.race_note == said

    # cut short: the record ends the race after wave 1, keeping only the worst config
    payload["waves"] = payload["waves"][:1]
    payload["waves"][0]["decision"].update(alive=["learning_rate=1e-4"], end=ONE_LEFT)
    record.write_text(json.dumps(payload))
    winner = find_winner(sweep, ("learning_rate",))
    assert winner.label == "learning_rate=3e-4"
    (note,) = winner.race_notes
    assert ("race.json recorded the look after wave 1 as learning_rate=1e-4 going on (the race "
            "ends: one config remains); its runs say learning_rate=3e-4, learning_rate=1e-3, "
            "learning_rate=1e-4 going on: the runs' look is taken") in note
    section = build_report(collect([sweep]), sweep).split("## Race")[1].split("## Failures")[0]
    assert "| 2 | 1 | #3, #4, #5 | 3 | – | 1.5 | learning_rate=3e-4 |" in section
    assert "Ended: one config remains." in section
