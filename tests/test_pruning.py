"""The sweep's pruner (grpo.run.pruning): Optuna's successive halving decides as the algorithm
says, a run's trial lives in the sweep directory's journal and is found again after a restart,
and a journal that cannot be used never stops a run."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from rich.console import Console

from analysis.outputs.monitor import SweepMonitor
from analysis.outputs.progress import SweepProgress
from grpo.run.pruning import (
    JOURNAL,
    STOP_ATTR,
    PruningSettings,
    ReplayJob,
    ReplayOutcome,
    RunTrial,
    journal_problem,
    open_study,
    replay,
)

ROOT = Path(__file__).resolve().parents[1]
SH = PruningSettings("successive_halving", "step", min_resource=10, reduction_factor=3)


def constant_job(value: float, n_steps: int = 50, every: int = 10) -> ReplayJob:
    """A job evaluated every `every` steps before its last, always at `value`; one second a step."""
    return ReplayJob([(s, value, float(s)) for s in range(every, n_steps, every)], float(n_steps))


def test_settings_of_the_config_groups() -> None:
    assert PruningSettings.from_config({"name": "off"}) is None
    settings = PruningSettings.from_config({"name": "successive_halving", "resource": "step",
                                            "min_resource": 10, "reduction_factor": 3,
                                            "min_early_stopping_rate": 1})
    assert settings.first_rung() == 30
    assert settings.describe(300) == ("pruning=successive_halving: rungs at 30, 90, 270 GRPO "
                                      "steps, the top 1/3 go on")
    minutes = PruningSettings("successive_halving", "train_minutes", 2, 3)
    assert minutes.resource_of(40, 185.7) == 185 and SH.resource_of(40, 185.7) == 40
    assert minutes.pruner(100)._min_resource == 120  # seconds: rungs count training minutes


def test_successive_halving_keeps_the_top_third_of_each_rung_in_launch_order() -> None:
    # one job at a time; rungs at steps 10 and 30. A job goes on when its value is in the top
    # 1/3 of the values seen at the rung (the top one while fewer than 6 have reached it):
    # job 1 (0.3 < 0.5), job 3 (0.7 < 0.9) and job 4 (0.8 < 0.9) stop at 10; job 5 (0.85) is
    # second of six at 10, in the top 2, but below 0.9 at 30
    values = [0.5, 0.3, 0.9, 0.7, 0.8, 0.85]
    outcomes = replay(SH, 50, [constant_job(v) for v in values], parallel=1)
    assert outcomes == [ReplayOutcome(None, 50.0), ReplayOutcome(10, 10.0), ReplayOutcome(None, 50.0),
                        ReplayOutcome(10, 10.0), ReplayOutcome(10, 10.0), ReplayOutcome(30, 30.0)]
    # a reduction factor of 2 (rungs 10, 20, 40) keeps the top half: job 3 (0.7) is second of
    # four at 10 but below 0.9 of three at 20; job 4 (0.8) is second of five at 10 and of four at
    # 20, then below 0.9 of three at 40; job 5 (0.85) is in the top half at every rung
    halving = PruningSettings("successive_halving", "step", min_resource=10, reduction_factor=2)
    assert [o.pruned_at for o in replay(halving, 50, [constant_job(v) for v in values], 1)] == [
        None, 10, None, 20, 40, None]


def test_replay_runs_jobs_side_by_side_and_starts_the_next_when_a_slot_frees() -> None:
    # two at a time: jobs 0 and 1 reach step 10 together (job 0 first), job 1 stops there and
    # job 2 starts at second 10, reaching step 10 at second 20; job 3 starts when job 2 stops
    jobs = [constant_job(0.5), constant_job(0.4), constant_job(0.1), constant_job(0.6)]
    outcomes = replay(SH, 50, jobs, parallel=2)
    assert [o.pruned_at for o in outcomes] == [None, 10, 10, None]
    assert sum(o.seconds for o in outcomes) == 50 + 10 + 10 + 50


def test_hyperband_stops_runs_within_its_brackets() -> None:
    hyperband = PruningSettings("hyperband", "step", min_resource=10, reduction_factor=3)
    # worse and worse jobs: in each bracket the first goes on and the later ones stop at one of
    # the bracket's rungs (10 and 30 in the first bracket, 30 in the second; the third's only
    # rung is the end)
    jobs = [constant_job(1 - v / 20, n_steps=90) for v in range(20)]
    outcomes = replay(hyperband, 90, jobs, parallel=1)
    stopped = [o.pruned_at for o in outcomes if o.pruned_at is not None]
    assert len(stopped) >= 10 and set(stopped) <= {10, 30}
    assert outcomes[0].pruned_at is None


ATTACH = """
import json, sys
from pathlib import Path
from grpo.run.pruning import PruningSettings, RunTrial
settings = PruningSettings("successive_halving", "step", min_resource=10, reduction_factor=3)
trial = RunTrial.attach(settings, Path(sys.argv[1]), 50)
print(json.dumps([trial.trial.number, trial.report(10, {"eval/reward": float(sys.argv[2])})]))
"""


def attach_in_a_process(run_dir: Path, value: float) -> list:
    out = subprocess.run([sys.executable, "-c", ATTACH, str(run_dir), str(value)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_restarted_run_reattaches_to_its_trial_in_the_sweep_journal(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    (sweep / "0").mkdir(parents=True)
    (sweep / "1").mkdir()
    assert attach_in_a_process(sweep / "0", 0.5) == [0, None]  # the first at a rung goes on
    assert attach_in_a_process(sweep / "1", 0.6) == [1, None]  # the best of two goes on
    # job 0 again (a requeue): the same trial, its step-10 report kept, not a third trial
    again = RunTrial.attach(SH, sweep / "0", 50)
    assert again.trial.number == 0 and again.reported == {10: 0.5}
    study = open_study(sweep, SH, 50)
    assert [t.user_attrs["job"] for t in study.trials] == ["0", "1"]
    # a third job below both at step 10 is stopped, and says why
    (sweep / "2").mkdir()
    third = RunTrial.attach(SH, sweep / "2", 50)
    reason = third.report(10, {"eval/reward": 0.1})
    assert reason == ("the successive_halving pruner stopped it: mean eval/reward of its last 5 "
                      "evaluations 0.100 ranks 3 of the 3 runs measured this far (best 0.600), "
                      "and the top 1/3 go on")
    third.finish("pruned")
    assert open_study(sweep, SH, 50).trials[2].state == optuna.trial.TrialState.PRUNED
    assert RunTrial.attach(SH, sweep / "2", 50).trial is None  # ended: it reports nothing more
    again.finish("completed", 0.7)
    assert open_study(sweep, SH, 50).trials[0].value == 0.7


def test_a_stop_decided_before_a_crash_holds_after_the_restart(tmp_path: Path) -> None:
    run_dir = tmp_path / "sweep" / "0"
    run_dir.mkdir(parents=True)
    first = RunTrial.attach(SH, run_dir, 50)
    first.trial.set_user_attr(STOP_ATTR, {"resource": 30, "reason": "the pruner stopped it"})
    restarted = RunTrial.attach(SH, run_dir, 50)
    assert restarted.report(20, {"eval/reward": 0.9}) is None
    assert restarted.report(30, {"eval/reward": 0.9}) == "the pruner stopped it"
    # a crafted record is no record: the run reports and goes on as the pruner says
    crafted = run_dir.parent / "1"
    crafted.mkdir()
    RunTrial.attach(SH, crafted, 50).trial.set_user_attr(STOP_ATTR, {"resource": "30", "reason": 7})
    again = RunTrial.attach(SH, crafted, 50)
    assert again.pruned_at is None and again.report(30, {"eval/reward": 0.95}) is None


@pytest.mark.parametrize("damage", ["garbage", "deep", "link"])
def test_an_unusable_journal_switches_pruning_off_with_a_warning(
        tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    sweep = tmp_path / "sweep"
    (sweep / "0").mkdir(parents=True)
    journal = sweep / JOURNAL
    outside = tmp_path / "outside.txt"
    outside.write_text("not the run's\n")
    if damage == "garbage":
        journal.write_bytes(b'{"op_code": 0, "worker_id": "x", "study_name": 7}\n\xff\xfe\n{}\n')
    elif damage == "deep":
        journal.write_text("[" * 100_000 + "\n")
    else:
        os.symlink(outside, journal)
    with caplog.at_level(logging.WARNING):
        assert RunTrial.attach(SH, sweep / "0", 50) is None
    assert "pruning is off for" in caplog.text
    assert outside.read_text() == "not the run's\n"
    # the sweep's summary says it too (not only the job's log), and reading changes nothing
    before = journal.read_bytes() if damage != "link" else None
    problem = journal_problem(sweep)
    assert problem is not None and str(journal) in problem
    assert (journal.read_bytes() if damage != "link" else None) == before
    lines = SweepMonitor(SweepProgress(sweep), Console(file=io.StringIO())).summary([])
    assert f"Pruning: off for every run that read the journal: {problem}" in lines


def test_a_sound_journal_is_no_problem(tmp_path: Path) -> None:
    RunTrial.attach(SH, tmp_path / "0", 50)
    assert (tmp_path / JOURNAL).is_file() and journal_problem(tmp_path) is None
    assert journal_problem(tmp_path / "elsewhere") is None


def test_a_run_reports_the_mean_of_its_last_evaluations_and_keeps_them_across_a_restart(
        tmp_path: Path) -> None:
    """One evaluation's noise would stop good runs (bench/selection_calibration.py): a run
    reports the mean of its last 5 evaluations after step 0, the ranking's criterion."""
    run_dir = tmp_path / "sweep" / "0"
    run_dir.mkdir(parents=True)
    trial = RunTrial.attach(SH, run_dir, 100)
    assert trial.report(0, {"eval/reward": 0.05}) is None  # step 0 counts only for itself
    for step, reward in ((10, 0.2), (20, 0.4), (30, 0.9)):
        assert trial.report(step, {"eval/reward": reward}) is None
    assert trial.reported == pytest.approx({0: 0.05, 10: 0.2, 20: 0.3, 30: 0.5})
    again = RunTrial.attach(SH, run_dir, 100)  # a restart: the evaluations come from the journal
    assert again.evals == pytest.approx({10: 0.2, 20: 0.4, 30: 0.9})
    for step, reward in ((40, 0.1), (50, 0.6), (60, 1.0)):
        again.report(step, {"eval/reward": reward})
    # step 60: the last 5 of 0.2, 0.4, 0.9, 0.1, 0.6, 1.0
    assert again.reported[40] == pytest.approx(0.4)
    assert again.reported[60] == pytest.approx((0.4 + 0.9 + 0.1 + 0.6 + 1.0) / 5)


def test_the_pruner_reads_the_metric_the_ranking_reads(tmp_path: Path) -> None:
    """With analysis.metric=pass@k and 4 responses a problem a run reports its late eval/pass@k
    (the ranking's criterion), not its mean reward; with one response a problem (no pass@k
    logged: each metric is its reward) it reports eval/reward. (An unknown metric is refused at
    config validation, grpo.config.rules.)"""
    from test_config import _compose

    from grpo.run.outcomes import logged_key

    cfg = _compose(["pruning=successive_halving", "analysis.metric=pass@k", "eval.samples_per_problem=4"])
    for k, expected in ((4, {10: 0.8, 20: 0.7}), (1, {10: 0.2, 20: 0.3})):
        settings = PruningSettings.from_config(cfg.pruning, logged_key(str(cfg.analysis.metric), k))
        run_dir = tmp_path / f"k{k}" / "0"
        run_dir.mkdir(parents=True)
        trial = RunTrial.attach(settings, run_dir, 100)
        trial.report(10, {"eval/reward": 0.2, "eval/pass@k": 0.8})
        trial.report(20, {"eval/reward": 0.4, "eval/pass@k": 0.6})
        assert trial.reported == pytest.approx(expected)  # late means: (0.8 + 0.6) / 2 = 0.7
        assert trial._reason(20, 0.7).startswith(f"the successive_halving pruner stopped it: mean "
                                                 f"{'eval/pass@k' if k == 4 else 'eval/reward'} of")
