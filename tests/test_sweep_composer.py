"""The sweep's composition (grpo.sweep.hydra_compat.SweepComposer): each job of a sweep, composed
once for the jobs that share their config group choices and given its values on a copy, is the
config Hydra composes for that job alone, leaf for leaf (Hydra's record of the choices and the
overrides included), and changing one job's config changes no other's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import OmegaConf

from grpo.run import run_config
from grpo.sweep import hydra_compat
from grpo.sweep.job_loss import ComposedJob, compose_job

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
BASE = ["hydra.sweep.dir=/tmp/grpo-composer-test", "hydra.job.config.override_dirname.kv_sep=@"]
"""A sweep's `hydra.*` overrides, as the sweeper passes them (`hydra.overrides.hydra`)."""
SWEEPS = {
    # a preset of the experiment group (demo names its loss, toy does not: its off-policy jobs
    # get the default loss, swapped in), the prompt group, the off-policy section, plain keys
    "presets": (["+experiment=toy,demo", "prompt=toy,question_only", "off_policy.epochs=1,2",
                 "learning_rate=1e-4,3e-4", "seed=0,1"], 4, {True, False}),
    # two groups, a value added to the loss's node (+loss.note: an off-policy job is composed
    # again with the default loss, not swapped), a key deleted and a list value
    "groups": (["model=tiny", "data=toy", "rollout=hf", "normalization=mean,token", "std_norm=on,off",
                "off_policy.epochs=1,2", "+loss.note=1,2", "~eval.n_saved_samples",
                "optimizer.betas=[0.9,0.99]"], 4 + 4, {True, False}),
    # the loss group swept: every job names its loss
    "losses": (["model=tiny", "data=toy", "rollout=hf", "loss=grpo_clip,no_baseline",
                "off_policy.epochs=1,2", "sampling.temperature=0.7,1.0"], 2, {False}),
}
"""Each sweep's overrides, how many times Hydra composes for its jobs (once for each set of config
group choices) and whether its jobs get the off-policy default loss."""


def sweep_jobs(overrides: list[str]) -> list[list[str]]:
    """The jobs of the sweep `overrides`, as the validating sweeper lists them."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return [list(job) for job in hydra_compat.split_into_jobs(parsed)]


def record(job: ComposedJob) -> dict[str, Any]:
    """Everything a composed job is: its overrides, its loss rule, every leaf of its config
    (unresolved, Hydra's node included) and the flags Hydra sets."""
    cfg = job.cfg
    return {"overrides": job.overrides, "defaulted": job.loss_defaulted,
            "config": OmegaConf.to_container(cfg, resolve=False),
            "struct": OmegaConf.is_struct(cfg), "hydra_readonly": OmegaConf.is_readonly(cfg.hydra),
            "hydra_type": OmegaConf.get_type(cfg.hydra)}


def spoil(job: ComposedJob) -> None:
    """Change a job's config everywhere a shared node would show it in another job."""
    cfg = job.cfg
    cfg.learning_rate = 123.0
    cfg.loss.name = "spoiled"
    cfg.model.max_seq_len = 1
    cfg.hydra.runtime.choices.loss = "spoiled"
    cfg.hydra.overrides.task.append("spoiled=1")
    cfg.hydra.job.override_dirname = "spoiled"
    cfg.optimizer.betas[0] = 0.0


@pytest.mark.parametrize("sweep", SWEEPS)
def test_every_job_is_the_config_hydra_composes_for_it_alone(sweep: str) -> None:
    overrides, compositions, defaulted = SWEEPS[sweep]
    jobs = sweep_jobs(overrides)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        composer = hydra_compat.SweepComposer(loader)
        cached = []
        for job in jobs:  # as the sweeper does: every job, in order, through one composer
            composed = compose_job(loader, "config", job, base=BASE, composer=composer)
            cached.append(record(composed))
            spoil(composed)  # the next jobs must not see it
        again = compose_job(loader, "config", jobs[0], base=BASE, composer=composer)
        # the sample: the first and the last job of each set of config group choices (its first
        # composition and a copy made after every job between them was spoiled)
        shapes: dict[tuple, list[int]] = {}
        for i, job in enumerate(cached):
            shapes.setdefault(tuple(sorted(job["config"]["hydra"]["runtime"]["choices"].items())), []).append(i)
        sample = sorted({i for same in shapes.values() for i in (same[0], same[-1])})
        fresh = {i: record(compose_job(loader, "config", jobs[i], base=BASE)) for i in sample}
    assert composer.compositions == compositions < len(jobs)
    assert record(again) == fresh[0]
    for i in sample:
        assert cached[i] == fresh[i], f"job {jobs[i]}"
    # the sample covers what the sweep is about: defaulted and named losses, each composition
    assert {cached[i]["defaulted"] for i in sample} == defaulted
    assert len(shapes) >= compositions and all(len(same) > 1 for same in shapes.values())
    assert all("hydra.sweep.dir=/tmp/grpo-composer-test" in cached[i]["config"]["hydra"]["overrides"]["hydra"]
               for i in sample)


def test_a_value_hydra_cannot_set_fails_as_hydra_fails() -> None:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        composer = hydra_compat.SweepComposer(loader)
        composer.compose("config", ["seed=1"])
        errors = []
        for compose in (lambda o: composer.compose("config", o),
                        lambda o: loader.load_configuration("config", o, RunMode.RUN)):
            with pytest.raises(Exception) as caught:
                compose(["seed=2", "no_such_key=1"])
            errors.append((type(caught.value), str(caught.value)))
    assert errors[0] == errors[1]
    assert "Could not override 'no_such_key'" in errors[0][1]


def test_a_new_sweep_reads_the_files_again(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        first = hydra_compat.SweepComposer(loader)
        assert first.compose("config", ["seed=1"]).n_grpo_steps == 200
        root = conf / "config.yaml"
        root.write_text(root.read_text().replace("n_grpo_steps: 200", "n_grpo_steps: 7"))
        # one composer is one sweep: its files were read when it composed its first job
        assert first.compose("config", ["seed=2"]).n_grpo_steps == 200
        assert hydra_compat.SweepComposer(loader).compose("config", ["seed=2"]).n_grpo_steps == 7


def composed_configs(jobs: list[list[str]]) -> list[Any]:
    """Each job's config as the sweeper composes it (one composer for all)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        composer = hydra_compat.SweepComposer(loader)
        return [compose_job(loader, "config", job, base=BASE, composer=composer).cfg for job in jobs]


TINY = ["model=tiny", "data=toy", "rollout=hf"]


@pytest.mark.parametrize("sweep", SWEEPS)
def test_jobs_that_differ_are_not_one_run(sweep: str) -> None:
    """`repeated_runs` finds no two jobs of a sweep whose jobs all differ (the seeds of a seed
    sweep included: another seed is another run), and every pair it sorts apart by fingerprint
    differs in a key that changes a curve (`curve_differences`): the fingerprint is never finer
    than the comparison it stands in for. (The presets sweep holds toy and demo, which hold out
    8 pairs where toy holds none: not one run.)"""
    jobs = sweep_jobs(SWEEPS[sweep][0])
    cfgs = composed_configs(jobs)
    assert run_config.repeated_runs(cfgs) == []
    prints = [run_config.curve_fingerprint(cfg) for cfg in cfgs]
    assert len(set(prints)) == len(cfgs)
    configs = [run_config.resolved(cfg) for cfg in cfgs]
    for i, first in enumerate(prints):
        for j in range(i + 1, len(cfgs)):
            if prints[j] != first:
                assert run_config.curve_differences(configs[i], configs[j]), (jobs[i], jobs[j])


def test_jobs_that_compose_to_one_config_and_seed_are_one_run() -> None:
    """Jobs that differ only in what does not change a run (how it is logged, checkpointed,
    where its files go: `MAY_CHANGE`) or not at all are one run; a seed, a learning rate written
    otherwise (1e-4 and 0.0001 are one value) or a number of GRPO steps tells runs apart."""
    jobs = [[*TINY, "seed=0", "learning_rate=1e-4"],
            [*TINY, "seed=1", "learning_rate=1e-4"],
            [*TINY, "seed=0", "learning_rate=0.0001", "logging.progress_every=5"],
            [*TINY, "seed=0", "learning_rate=1e-4", "checkpoint.keep_last=3", "paths.output_root=/x"],
            [*TINY, "seed=0", "learning_rate=1e-4", "n_grpo_steps=10"],
            [*TINY, "seed=1", "learning_rate=1e-4", "loss=no_baseline"],
            [*TINY, "seed=1", "learning_rate=1e-4"]]
    assert run_config.repeated_runs(composed_configs(jobs)) == [[0, 2, 3], [1, 6]]


def test_a_sweep_of_one_run_twice_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """`+experiment=toy,demo data=toy data.holdout_size=8 off_policy.epochs=1,2 seed=0,1`: with
    toy's pairs held out as demo holds them, demo is toy with the loss an off-policy job of toy
    gets by default, so its off-policy jobs are toy's again (#1 and #5, #3 and #7: one seed each),
    refused in one line naming both sets and the command-line value that overrides what a preset
    sets; the same sweep on-policy only (`off_policy.epochs=1`: demo's loss is not toy's) is
    accepted."""
    common = [f"paths.output_root={tmp_path / 'out'}", "dry_run=true"]
    launch = [sys.executable, str(ROOT / "launch.py"), "-m", "+experiment=toy,demo", "seed=0,1",
              "data=toy", "data.holdout_size=8", *common]
    out = subprocess.run([*launch, "off_policy.epochs=1,2"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    (line,) = out.stderr.splitlines()
    assert line.startswith(
        "error: jobs #1, #5 (+experiment=toy, demo); jobs #3, #7 (+experiment=toy, demo) compose "
        "to one config and seed (each set), no key that changes a run differing "
        "(grpo.run.run_config.repeated_runs): they would be one run repeated, not more "
        "measurements: "), line
    assert ("data.holdout_size=8 on the command line overrides the data.holdout_size that "
            "+experiment=demo sets") in line and line.endswith("; nothing was submitted"), line
    out = subprocess.run([*launch, "off_policy.epochs=1"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "dry run: 4 jobs, nothing submitted" in out.stdout, out.stderr[-3000:]
    assert not (tmp_path / "out").exists(), "a dry run wrote files"


def test_one_run_twice_with_no_command_line_cause_is_refused_in_the_general_line() -> None:
    """Where no command-line value made the jobs equal, the line names the sets and says what to
    do (the end-to-end case above has a cause; this is the line without one)."""
    from grpo.sweep.plan import one_run_refusal

    jobs = [["+experiment=toy", "seed=0"], ["+experiment=demo", "seed=0"], ["+experiment=x", "seed=0"]]
    assert one_run_refusal([[0, 1]], jobs, {}) == (
        "jobs #0, #1 (+experiment=toy, demo) compose to one config and seed, no key that changes "
        "a run differing (grpo.run.run_config.repeated_runs): they would be one run repeated, not "
        "more measurements; sweep one of them, or make them differ")
