"""A relaunch submits only what is unfinished: the rule that says a run is over for the config a
launch gives it (`grpo.run.finished`), the plan a launcher makes of its batch
(`hydra_plugins.grpo_sweeps.relaunch`), and a finished local sweep relaunched for real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from training_runs import steps

from analysis.readers.jobs import Job, write_jobs
from grpo.run.checkpoint_names import FINAL_MODEL
from grpo.run.files import RunDirError
from grpo.run.finished import Launch, over_why, run_over
from grpo.run.lock import run_lock
from grpo.run.manifest import write_manifest
from grpo.run.run_config import RUN_CONFIG, ConfigChanged, resume_refusal, run_config_text
from grpo.training.trainer import train
from hydra_plugins.grpo_sweeps.relaunch import EarlierJob, earlier_jobs, plan_relaunch

ROOT = Path(__file__).resolve().parents[1]
STEPS = 4
PLAIN = Launch(n_grpo_steps=STEPS, prunes=False, saves_final_model=False)
"""The launch every case changes one thing of: 4 steps, no pruner, no final model."""


def status(name: str, last_step: int | None = STEPS) -> dict:
    return {"status": name, "last_step": last_step, "n_grpo_steps": STEPS}


@pytest.mark.parametrize(("name", "last_step", "launch", "over"), [
    # completed: over up to its last step; a larger n_grpo_steps trains it on
    ("completed", 4, PLAIN, True),
    ("completed", 4, Launch(3, False, False), True),
    ("completed", 4, Launch(5, False, False), False),
    ("completed", 3, PLAIN, False),
    ("completed", 4, Launch(4, True, False), True),
    # pruned: over while the sweep prunes; pruning=off trains it on
    ("pruned", 2, Launch(4, True, False), True),
    ("pruned", 2, PLAIN, False),
    ("pruned", 2, Launch(8, True, False), True),
    # collapsed and diverged: over whatever the launch (its guard would stop it again)
    ("collapsed", 2, PLAIN, True),
    ("collapsed", 2, Launch(8, True, True), True),
    ("diverged", None, PLAIN, True),
    ("diverged", 3, Launch(8, False, False), True),
    # not results: trained on by any launch
    ("running", 4, PLAIN, False),
    ("failed", 4, PLAIN, False),
    ("cancelled", 2, PLAIN, False),
    ("preempted", 2, PLAIN, False),
    ("crafted", 4, PLAIN, False),
])
def test_the_rule_says_a_run_is_over_for_the_launch_that_would_train_nothing(
        name: str, last_step: int | None, launch: Launch, over: bool) -> None:
    assert (over_why(status(name, last_step), launch) is not None) == over
    assert over_why(None, PLAIN) is None, "no status.json: a run not started"


def test_a_completed_run_is_over_only_with_its_final_model_where_the_config_saves_one(
        tmp_path: Path) -> None:
    (tmp_path / "status.json").write_text(json.dumps(status("completed")))
    saves = Launch(STEPS, False, True)
    assert run_over(tmp_path, PLAIN) is not None
    assert run_over(tmp_path, saves) is None, "no final_model/: a launch writes it"
    final = tmp_path / FINAL_MODEL
    final.mkdir()
    (final / "config.json").write_text("{}")
    (final / "model.safetensors").write_bytes(b"weights")
    write_manifest(final)
    found = run_over(tmp_path, saves)
    assert found is not None and found.name == "completed" and found.status["last_step"] == STEPS
    (final / "model.safetensors").write_bytes(b"cut")  # a partial file: its size is not the manifest's
    assert run_over(tmp_path, saves) is None


def test_a_completed_run_that_confirms_is_over_only_with_its_confirmation(tmp_path: Path) -> None:
    from grpo.run.outcomes import CONFIRM_DIR, EvalOutcomes, write_outcomes

    (tmp_path / "status.json").write_text(json.dumps(status("completed")))
    confirms = Launch(STEPS, False, False, confirms=2)
    assert run_over(tmp_path, PLAIN) is not None
    assert run_over(tmp_path, confirms) is None, "no confirmation: a launch confirms its final policy"
    write_outcomes(tmp_path, EvalOutcomes(STEPS - 1, 2, "d" * 64, (0.5,), (1,)), CONFIRM_DIR)
    assert run_over(tmp_path, confirms) is None, "a confirmation of another step"
    write_outcomes(tmp_path, EvalOutcomes(STEPS, 1, "d" * 64, (1.0,), (1,)), CONFIRM_DIR)
    assert run_over(tmp_path, confirms) is None, "one of another confirm.samples_per_problem"
    write_outcomes(tmp_path, EvalOutcomes(STEPS, 2, "d" * 64, (0.5,), (1,)), CONFIRM_DIR)
    assert run_over(tmp_path, confirms) is not None
    (tmp_path / "status.json").write_text(json.dumps(status("collapsed", 2)))
    assert run_over(tmp_path, confirms) is not None, "a collapsed run stays as it is"


def test_launch_of_reads_a_composed_config_and_names_what_a_record_lacks() -> None:
    cfg = {"n_grpo_steps": 7, "pruning": {"name": "successive_halving"},
           "checkpoint": {"save_final_model": False}}
    assert Launch.of(cfg) == Launch(7, True, False)
    assert Launch.of({**cfg, "confirm": {"enabled": True, "samples_per_problem": 4}}).confirms == 4
    assert Launch.of({**cfg, "confirm": {"enabled": False, "samples_per_problem": 4}}).confirms is None
    assert Launch.of({**cfg, "pruning": {"name": "off"}}).prunes is False
    with pytest.raises(ValueError, match="n_grpo_steps, pruning.name or checkpoint.save_final_model"):
        Launch.of({"n_grpo_steps": 7})


def write_run(run_dir: Path, name: str, last_step: int = STEPS) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "status.json").write_text(json.dumps(status(name, last_step)))


def test_the_plan_sorts_each_job_and_its_line_says_so(tmp_path: Path) -> None:
    """Jobs 0-1 finished (completed; pruned while the sweep prunes), job 2 trained by another
    process (its lock held), job 3 failed, job 4 completed with fewer steps than launched, job 5
    never started: 3 to submit, 1 followed, 2 finished; without any earlier run, nothing is said."""
    pruned = Launch(STEPS, True, False)
    write_run(tmp_path / "0", "completed")
    write_run(tmp_path / "1", "pruned", 2)
    write_run(tmp_path / "2", "running", 1)
    write_run(tmp_path / "3", "failed", 1)
    write_run(tmp_path / "4", "completed", STEPS - 1)
    launches = dict.fromkeys(range(6), pruned)
    with run_lock(tmp_path / "2"):
        plan = plan_relaunch(tmp_path, launches, "local")
        followed = EarlierJob(tmp_path / "2", ["seed=2"], None, lambda: True)
        assert not followed.done() and followed.state == "RUNNING"
    assert plan.submit == (3, 4, 5) and plan.finished == {0: "completed", 1: "pruned"}
    assert list(plan.follow) == [2] and plan.follow[2].startswith("pid ")
    assert plan.line() == ("relaunch: 3 to submit, 1 still queued or running (followed), "
                           "2 finished (not submitted)")
    assert plan.earlier
    # with pruning off the pruned run trains on; once its lock is free, job 2 is submitted
    plan = plan_relaunch(tmp_path, dict.fromkeys(range(6), PLAIN), "local")
    # compared field by field: Hydra's plugin scan re-executes hydra_plugins modules in place,
    # so a RelaunchPlan made after it is of a class other than the one imported here
    assert (plan.submit, plan.follow, plan.finished, plan.earlier) == ((1, 2, 3, 4, 5), {},
                                                                       {0: "completed"}, True)
    assert not plan_relaunch(tmp_path / "new", launches, "local").earlier
    (result,) = EarlierJob(tmp_path / "0", ["seed=0"], None).results()
    assert result.return_value == status("completed") and result.working_dir == str(tmp_path / "0")


def test_on_slurm_a_run_whose_lock_is_held_is_followed_and_an_unanswering_slurm_submits_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SLURM relaunch follows a run another process trains (its lock held) though jobs.json
    records no job of it (a local job, an array whose ids were never recorded), by its lock; and
    where SLURM cannot be asked about the jobs jobs.json records, it submits nothing (a job now
    could be a second one for a queued run) and says so."""
    write_run(tmp_path / "0", "running", 1)
    write_run(tmp_path / "1", "failed", 1)
    launches = dict.fromkeys(range(2), PLAIN)
    with run_lock(tmp_path / "0"):
        plan = plan_relaunch(tmp_path, launches, "slurm")
        assert plan.submit == (1,) and list(plan.follow) == [0]
        (followed,) = earlier_jobs(tmp_path, plan, {0: ["seed=0"], 1: ["seed=1"]}, "slurm").values()
        assert not followed.done()
    assert followed.done()  # its lock is free: the run's job has ended
    write_jobs(tmp_path, "slurm", [Job(0, ("seed=0",), "4242_0"), Job(1, ("seed=1",), "4242_1")])
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))
    with pytest.raises(RunDirError, match=r"SLURM cannot be asked .* 4242_0, 4242_1 .* nothing was submitted"):
        plan_relaunch(tmp_path, launches, "slurm")


def snapshot(sweep: Path) -> dict[Path, bytes]:
    """Every file of a sweep directory but the lock, multirun.yaml and jobs.json (which a launch
    rewrites), by path."""
    return {p: p.read_bytes() for p in sorted(sweep.rglob("*"))
            if p.is_file() and p.name not in (".lock", "multirun.yaml", "jobs.json")}


@pytest.mark.slow
def test_a_finished_local_sweep_relaunched_starts_no_job_and_a_larger_n_grpo_steps_trains_on(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """A finished 2-run sweep launched again: its dry run and the launch say 0 to submit, 2
    finished; no job starts (every file of the sweep byte-equal: each run's launch.log and
    status.json, nothing new in .submitit/), the summary is printed, exit 0, in about the dry
    run's time. Launched with n_grpo_steps one larger, both runs train on from their checkpoint."""
    sweep = tmp_path / "sweep"
    command = [sys.executable, str(ROOT / "launch.py"), "-m", "model=tiny", "data=toy",
               "rollout=hf", f"model.path={tiny_model_dir}", "logging.wandb_mode=disabled",
               "learning_rate=3e-4,1e-4", f"hydra.sweep.dir={sweep}"]

    def launch(*extra: str) -> tuple[subprocess.CompletedProcess, float]:
        start = time.perf_counter()
        out = subprocess.run([*command, *extra], cwd=ROOT, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
        return out, time.perf_counter() - start

    launch("n_grpo_steps=2")
    before = snapshot(sweep)
    assert {p.name for p in before if p.parent.name in ("0", "1")} >= {"launch.log", "status.json"}
    line = "relaunch: 0 to submit, 0 still queued or running (followed), 2 finished (not submitted)"
    dry, dry_s = launch("n_grpo_steps=2", "dry_run=true")
    again, again_s = launch("n_grpo_steps=2")
    print(f"\nfinished 2-run sweep: relaunch {again_s:.1f} s, its dry run {dry_s:.1f} s")
    assert line in dry.stdout.splitlines() and line in again.stdout.splitlines()
    assert snapshot(sweep) == before
    assert f"Sweep {sweep}: 2 runs: 2 completed" in again.stdout
    assert "Local sweep of" not in again.stdout + again.stderr
    assert again_s < dry_s + 10
    on, _ = launch("n_grpo_steps=3")
    assert ("relaunch: 2 to submit, 0 still queued or running (followed), 0 finished "
            "(not submitted)") in on.stdout.splitlines()
    for run in ("0", "1"):
        assert json.loads((sweep / run / "status.json").read_text())["resumed_from"] == [3]
        assert steps(sweep / run) == [0, 1, 2, 3]


def test_a_finished_run_launched_with_a_changed_config_is_refused_as_its_dry_run_says(
        tmp_path: Path) -> None:
    """A completed run launched alone (a sweep's jobs are refused by the sweeper first) with a
    key that changes the trained curve: `train` refuses it (ConfigChanged, the words of the dry
    run's `resume_refusal`), nothing written. It once said the run was over ("nothing to
    train") and returned the old run's status as the new config's, exit 0, while the dry run of
    the same command refused it. The same config: over, its status returned, nothing written."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["model=tiny", "data=toy", "rollout=hf",
                                            f"n_grpo_steps={STEPS}",
                                            "checkpoint.save_final_model=false"])
    run_dir = tmp_path / "run"
    write_run(run_dir, "completed")
    checkpoint = run_dir / "checkpoints" / f"step_{STEPS:06d}"
    checkpoint.mkdir(parents=True)
    (checkpoint / RUN_CONFIG).write_text(run_config_text(cfg, run_dir))
    before = snapshot(run_dir)
    changed = cfg.copy()
    changed.learning_rate = 10 * cfg.learning_rate
    refusal = resume_refusal(changed, run_dir)
    assert refusal is not None and "learning_rate" in refusal
    with pytest.raises(ConfigChanged) as caught:
        train(changed, run_dir)
    assert str(caught.value) == refusal
    assert train(cfg, run_dir) == status("completed")
    assert snapshot(run_dir) == before


def record_of(sweep: Path) -> dict[str, bytes]:
    """The sweep's own records, `multirun.yaml` and `jobs.json`, by name."""
    return {name: (sweep / name).read_bytes() for name in ("multirun.yaml", "jobs.json")}


def followed_refusal(sweep: Path, trained: str, launched: str) -> str:
    """The one line that refuses a relaunch of a 2-run sweep whose runs, both followed, train
    learning_rate `trained` while it launches `launched`."""
    return (f"error: runs this launch would follow (still queued or running in {sweep}) train "
            f"another config than it launches: all 2 jobs: learning_rate: {trained} -> {launched} "
            "(trained -> launched); a relaunch cannot change a run that is being trained: launch "
            "it again with the trained values to follow them, or launch the new values into a new "
            "sweep directory (drop hydra.sweep.dir, or change experiment_name); multirun.yaml and "
            "jobs.json are left as they are; nothing was submitted")


@pytest.mark.slow
def test_a_relaunch_with_a_changed_key_is_refused_while_its_runs_train_before_a_checkpoint(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """A 2-run local sweep (learning_rate=3e-4) whose launcher is SIGKILLed while both runs train
    and before their first checkpoint, launched again with learning_rate=1e-3: refused in one
    line naming the key and both values, exit 2, its dry run alike, multirun.yaml and jobs.json
    byte-equal and each run's record still 0.0003. It used to say "0 to submit, 2 still queued
    or running (followed)", follow them to their end with exit 0, and rewrite both records to
    0.001 while each run trained 0.0003. The same command as before follows them."""
    sweep = tmp_path / "sweep"
    command = [sys.executable, str(ROOT / "launch.py"), "-m", "model=tiny", "data=toy",
               "rollout=hf", f"model.path={tiny_model_dir}", "logging.wandb_mode=disabled",
               "n_grpo_steps=6", "checkpoint.checkpoint_every=10", "eval.eval_every=1",
               "data.max_operand=30", "eval.n_examples=600", "eval.samples_per_problem=8",
               "eval.temperature=1.0", "hydra.launcher.max_parallel_jobs=2", "seed=0,1",
               f"hydra.sweep.dir={sweep}"]
    first = subprocess.Popen([*command, "learning_rate=3e-4"], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 300
        while not all((sweep / run / ".hydra" / "config.yaml").exists() and steps(sweep / run)
                      for run in ("0", "1")):
            assert first.poll() is None and time.time() < deadline, "the runs never started"
            time.sleep(0.1)
        first.kill()  # the launcher alone: its runs train on
        first.wait(timeout=60)
        # the runs (the launcher's process group) held where they are, so that they are still
        # training, holding their run locks, whatever the machine's load, until the relaunch
        # below has planned to follow them
        os.killpg(first.pid, signal.SIGSTOP)
        assert not list(sweep.glob("*/checkpoints/step_*")), "a checkpoint already"
        before = record_of(sweep)
        configs = {run: (sweep / run / ".hydra" / "config.yaml").read_bytes() for run in ("0", "1")}
        for extra in (["dry_run=true"], []):
            out = subprocess.run([*command, "learning_rate=1e-3", *extra], cwd=ROOT,
                                 capture_output=True, text=True, timeout=300)
            assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-3000:]
            assert out.stderr.splitlines()[-1] == followed_refusal(sweep, "0.0003", "0.001")
            assert "relaunch:" not in out.stdout
            assert record_of(sweep) == before
            assert not list(sweep.glob("*/checkpoints/step_*")), "refused before a checkpoint"
        assert {run: (sweep / run / ".hydra" / "config.yaml").read_bytes()
                for run in ("0", "1")} == configs
        assert all("learning_rate: 0.0003" in text.decode() for text in configs.values())
        same = subprocess.Popen([*command, "learning_rate=3e-4"], cwd=ROOT, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert same.stdout is not None
        before_plan = []
        while not (line := same.stdout.readline()).startswith("relaunch:") and line:
            before_plan.append(line)
        plan = line.rstrip("\n")
        os.killpg(first.pid, signal.SIGCONT)
        rest = same.communicate(timeout=600)[0]
        assert same.returncode == 0, "".join(before_plan) + plan + rest[-3000:]
        assert plan == ("relaunch: 0 to submit, 2 still queued or running (followed), 0 finished "
                        "(not submitted)"), plan + rest[-3000:]
        assert f"Sweep {sweep}: 2 runs: 2 completed" in rest
    finally:
        with suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
