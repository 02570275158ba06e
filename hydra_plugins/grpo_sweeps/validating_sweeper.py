"""A Hydra sweeper that composes and checks every job of a sweep before launching any.

It is Hydra's BasicSweeper (cartesian product of the swept values, `hydra.sweeper.params` from
presets, command-line values winning) with a gate in front of the launcher: each job's config is
composed and passed through `grpo.config.validation.check_config`, and a `cluster=slurm` job is
checked against what its partition's nodes offer (the scheduler is asked once per sweep); one bad
job stops the whole submission, each message printed once with the jobs it concerns ("all 9 jobs",
"jobs #3-#8", or one job's swept values), warnings alike, and `dry_run=true` lists the jobs and
launches nothing. Two jobs that compose to one config and seed (`grpo.run.run_config.repeated_runs`:
no key that changes a run differs, e.g. a command-line `loss=cispo` over every variant's loss)
are refused in one line, naming them and the command-line override that set what their options
set, where there is one. A job whose run directory holds a run trained with values that change its curve
is such a bad job (`grpo.run.run_config.resume_refusal`): a relaunch into a trained sweep is refused
before any file of the sweep (multirun.yaml, jobs.json, a run's record) is written, and so is a
relaunch whose config differs from what a run it would follow (still queued or running, before
its first checkpoint too) trains (`_followed_refusal`), before its driver starts. The dry run also prices every job and the sweep (`grpo.sweep.cost`: the full grid,
and with pruning on the sweep replayed through its pruner), and a sweep that plans to spend more
than `budget.gpu_hours` is refused before anything is submitted. The sweep directory's lock (`grpo.run.lock.sweep_lock`) is held from the
submission until the launcher has every job's result, so a second launch of the same sweep
directory exits at once naming the first. A submission that sbatch still refuses ends in one line with sbatch's message.
A relaunch submits only what is unfinished: the plan of every job (finished, still queued or
running, to submit: `hydra_plugins.grpo_sweeps.relaunch`) is made once when the sweep starts,
its line printed by the dry run and the launch alike, and handed to the launcher.
With `cluster.detach=true`, once every job is checked, the sweep's driver is started apart from
the terminal (`grpo.run.driver`: a SLURM CPU job, or locally a process of its own session) and
runs this same command attached, its sweep directory pinned; a launch while it is pending or
running starts nothing, and one that would leave it nothing to run (every run over) runs here.
Jobs are composed by `grpo.sweep.job_loss.compose_job`, which gives an off-policy job that names
no loss `loss=grpo_clip`: the listing shows each job's loss, and the launched job lists are those
composed ones (`get_job_batch`), so what is listed and validated is what runs.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.utils import filter_overrides
from hydra.errors import HydraException
from omegaconf import OmegaConf

from analysis.decisions.launch_stats import power_lines
from analysis.decisions.race import pricing
from analysis.decisions.race.record import check_relaunch, short_labels, without_seed
from analysis.decisions.race.settings import Calibration, RaceSettings
from analysis.names.config_names import job_labels, lists_configs
from analysis.outputs.monitor import make_command
from analysis.readers.jobs import JobsFile, override_key, read_jobs
from grpo.config.rules import CHECK_SEEDS, RULES, SEED_MAX
from grpo.config.validation import check_config, check_installed
from grpo.run.driver import (
    DriverRecord,
    attached_refusal,
    detach,
    driver_starter,
    live_driver,
    under_driver,
)
from grpo.run.driver import sweep_command as driver_sweep_command
from grpo.run.files import RunDirError, RunFileError
from grpo.run.finished import Launch
from grpo.run.lock import sweep_lock
from grpo.run.run_config import (
    curve_differences,
    describe_differences,
    repeated_runs,
    resolved,
    resume_refusal,
    sweepable,
    trained_config,
)
from grpo.sweep.cost import ESTIMATE_FILE_ENV, SweepEstimate, estimate, memory_lines, write_estimate
from grpo.sweep.hydra_compat import (
    BasicSweeper,
    SweepComposer,
    get_job_batch,
    group_overrides,
    interpolations_parsed_once,
    option_sets,
    parse_overrides,
    preset_overrides,
    split_into_jobs,
)
from grpo.sweep.job import describe_job, output_refusal, output_root_note, raw_list
from grpo.sweep.job_loss import ComposedJob, compose_job
from grpo.sweep.slurm_resources import ResourceCheck, sbatch_refusal
from hydra_plugins.grpo_sweeps.pooled_local_launcher import pool_size
from hydra_plugins.grpo_sweeps.relaunch import (
    Relaunch,
    RelaunchPlan,
    launcher_kind,
    plan_relaunch,
)

JOB_SUBDIR = "${hydra.job.num}"
"""The run directories of a sweep as the monitor, the summary, the analysis and a race read them:
`<sweep>/<job number>`; a sweep with another `hydra.sweep.subdir` is refused."""
SWEEP_WIDE = ("pruning", "budget", "race")
"""Config groups and sections that hold for a whole sweep (one pruner, one budget, one race):
never swept."""


def _choices_and_config(cfg: Any) -> tuple[dict[str, str], dict[str, Any]]:
    """A composed job's config group choices and its config as plain data (Hydra's node left
    out), as a run's `.hydra/` record holds them: what names a promoted config
    (`analysis.names.config_names.job_labels`)."""
    config = OmegaConf.to_container(cfg, resolve=False)
    config.pop("hydra", None)
    choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
    return {str(k): str(v) for k, v in choices.items()}, config


@contextmanager
def kept_out_of_collection() -> Iterator[Callable[[], None]]:
    """A block that makes many objects meant to live on (a sweep's composed configs, some 1,400
    objects a job, all kept until the sweep is priced and launched). Calling what it gives moves
    every object made so far out of the cyclic garbage collector's reach (`gc.freeze`): its full
    passes would otherwise scan every config made so far each time more are made (8 passes, 1.3
    to 1.9 s of a 480-job dry run, bench/dry_run_scale.py), and now scan only the newest. The
    block's end hands them all back (`gc.unfreeze`); garbage among them is collected then."""
    try:
        yield gc.freeze
    finally:
        gc.unfreeze()


def job_set(nums: list[int], labels: dict[int, str]) -> str:
    """The jobs a message concerns: one job by its label (`job #3 [lr=1e-4]`), all of them
    (`all 9 jobs`), else their numbers in runs (`jobs #0, #3-#8`). `labels`: every job's."""
    if len(nums) == 1:
        return labels[nums[0]]
    if len(nums) == len(labels):
        return f"all {len(nums)} jobs"
    runs: list[list[int]] = []
    for num in sorted(nums):
        if runs and num == runs[-1][1] + 1:
            runs[-1][1] = num
        else:
            runs.append([num, num])
    return "jobs " + ", ".join(f"#{a}" if a == b else f"#{a}-#{b}" for a, b in runs)


def repeated_values(overrides: Sequence[Override]) -> list[str]:
    """One line per swept override that gives a value more than once (`learning_rate=3e-4,0.0003`:
    numbers compared as numbers): the jobs of that value would be one run repeated."""
    problems = []
    for override in overrides:
        if not override.is_sweep_override():
            continue
        try:
            pairs = list(zip(override.sweep_string_iterator(), override.sweep_iterator(), strict=True))
        except HydraException:  # a sweep it cannot list (an interval): Hydra's sweeper refuses it
            continue
        first: dict[Any, str] = {}  # each value (numbers as numbers) -> its first text
        repeated: list[str] = []
        for text, value in pairs:
            same = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else text
            if same in first and first[same] not in repeated:
                repeated.append(first[same])
            first.setdefault(same, text)
        if repeated:
            problems.append(f"{override.input_line}: {' and '.join(repeated)} "
                            f"{'is' if len(repeated) == 1 else 'are'} given more than once: the jobs "
                            "of one value would be one run repeated (the same config and seed), "
                            "not more measurements (seeds of a config: sweep seed=0,1); give each "
                            "value once")
    return problems


def _jobs_named(nums: Sequence[int], jobs: Sequence[Sequence[str]]) -> str:
    """The jobs `nums` (of `jobs`, each job's overrides), each named by the overrides it alone
    has: `jobs #0, #1 (variants/field_axes=base, gspo)`, or `jobs #0 [a=1 b=2], #3 [a=2]`."""
    differing = {num: [o for o in jobs[num] if not all(o in jobs[m] for m in nums)] for num in nums}
    keys = {o.split("=", 1)[0] for own in differing.values() for o in own}
    if len(keys) == 1 and all(len(own) == 1 for own in differing.values()):
        return (f"jobs {', '.join(f'#{num}' for num in nums)} ({keys.pop()}="
                + ", ".join(differing[num][0].split("=", 1)[1] for num in nums) + ")")
    return "jobs " + ", ".join(f"#{num} [{' '.join(differing[num]) or 'no swept keys'}]" for num in nums)


def one_run_refusal(sets: Sequence[Sequence[int]], jobs: Sequence[Sequence[str]],
                    overridden: dict[str, tuple[str, list[str]]]) -> str:
    """The line that refuses the sets of jobs `sets` (`grpo.run.run_config.repeated_runs`, of
    `jobs`, each job's overrides) as one run each, with `overridden`: each command-line override
    that made them equal -> the key it sets and the swept options that set that key too
    (`ValidatingSweeper._one_run_causes`)."""
    line = (f"{'; '.join(_jobs_named(nums, jobs) for nums in sets)} compose to one config and seed"
            f"{' (each set)' if len(sets) > 1 else ''}, no key that changes a run differing "
            "(grpo.run.run_config.repeated_runs): they would be one run repeated, not more "
            "measurements")
    if not overridden:
        return line + "; sweep one of them, or make them differ"

    def of(options: list[str]) -> str:  # variants/field_axes=gspo, cispo
        key = options[0].split("=", 1)[0]
        if all(o.split("=", 1)[0] == key for o in options):
            return f"{key}=" + ", ".join(o.split("=", 1)[1] for o in options)
        return ", ".join(options)

    causes = ", ".join(f"{cause} on the command line overrides the {key} that {of(options)} "
                       f"set{'s' if len(options) == 1 else ''}"
                       for cause, (key, options) in overridden.items())
    return (f"{line}: {causes} (a command-line value wins over every option's); drop "
            f"{' and '.join(overridden)}: each option sets its own")


def seed_swept(swept: set[str]) -> bool:
    """Whether the seed is among the swept keys, however written (`seed`, `+seed`, `++seed`)."""
    return any(key.lstrip("+") == "seed" for key in swept)


def refuse(problems: list[str]) -> None:
    """Exit 2 with the sweep's problems in one line, where there are any."""
    if problems:
        print("error: " + "; ".join(problems) + "; nothing was submitted", file=sys.stderr)
        sys.exit(2)


class ValidatingSweeper(BasicSweeper):
    """BasicSweeper that validates all jobs first; see the module docstring."""

    composed: dict[tuple[str, ...], ComposedJob]
    """Each job's composition, by its overrides before `compose_job` (filled by `sweep()`)."""
    composer: SweepComposer
    """The sweep's jobs' configs, composed by Hydra once for each set of config group choices."""
    check_jobs: list[Sequence[str]] = []
    """The check seeds' jobs (`_check_jobs`), launched after the grid's."""
    _launches: dict[tuple[str, ...], Launch] | None = None
    """Each composed job's launch by its overrides less the seed (`_launch_of`)."""

    def _all_jobs(self, arguments: list[str]) -> tuple[list[Sequence[str]], set[str]]:
        """Every job's override list, and the keys that take several values; exit 2 where a
        swept key repeats a value (`repeated_values`)."""
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides(preset_overrides(self) + list(arguments))
        swept = {o.get_key_element() for o in overrides if o.is_sweep_override()}
        refuse(repeated_values(overrides))
        return split_into_jobs(overrides), swept

    def _compose(self, overrides: Sequence[str]) -> ComposedJob:
        """One job composed as the launcher will run it (`grpo.sweep.job_loss.compose_job`)."""
        job = compose_job(self.hydra_context.config_loader, self.config.hydra.job.config_name,
                          list(overrides), base=raw_list(self.config.hydra.overrides.hydra),
                          composer=self.composer)
        self.composed[tuple(overrides)] = job
        return job

    def get_job_batch(self) -> Sequence[Sequence[str]]:
        """BasicSweeper's next batch, each job with the overrides it was validated with; the
        check seeds' jobs after the last batch of the grid."""
        batch = [*get_job_batch(self), *(self.check_jobs if self.is_done() else [])]
        return [list(self.composed[tuple(o)].overrides) for o in batch]

    def _check_jobs(self, jobs: list[Sequence[str]], swept: set[str], racing: bool) -> list[Sequence[str]]:
        """`analysis.check_seeds` = n: the first n configs again with seed `seed` + 1, jobs of
        this sweep after the grid's, whose seeds test a borrowed seed variance
        (`analysis.stats.variance.check`); exit 2 where the key is swept or its value breaks its
        rule (`grpo.config.rules.RULES`), where they mean nothing (a race, seeds swept, more than
        half the configs) or where the seed would be out of range."""
        if any(key.lstrip("+") == CHECK_SEEDS for key in swept):
            refuse([f"{CHECK_SEEDS} cannot be swept: it is how many configs of the sweep get a "
                    f"second seed, one number for the whole sweep; give one value ({CHECK_SEEDS}=1, "
                    "or 0 for none)"])
        value = OmegaConf.select(self.config, CHECK_SEEDS, default=0)
        rule = RULES[CHECK_SEEDS]
        if (problem := rule.problem(value)) is not None:
            refuse([rule.message(CHECK_SEEDS, value, problem)])
        n = int(value)
        if n == 0:
            return []
        seed = int(self.config.seed) + 1
        problems = []
        if racing:
            problems.append("analysis.check_seeds with race.max_seeds: a race gives its configs "
                            "their seeds itself; drop one of them")
        if seed_swept(swept):
            problems.append("analysis.check_seeds with seed swept: every config has seeds of its "
                            "own already; drop analysis.check_seeds")
        if 2 * n > len(jobs):
            problems.append(f"analysis.check_seeds={n} for {len(jobs)} configs: check seeds are "
                            f"for at most half the configs ({len(jobs) // 2} here); for seeds of "
                            "every config sweep seed=0,1")
        if seed > SEED_MAX:
            problems.append(f"analysis.check_seeds with seed={seed - 1}: the check seed {seed} is "
                            f"past the largest seed {SEED_MAX}")
        refuse(problems)
        return [[*without_seed(job), f"seed={seed}"] for job in jobs[:n]]

    def _one_run_causes(self, sets: Sequence[Sequence[int]], jobs: Sequence[Sequence[str]],
                        arguments: Sequence[str]) -> dict[str, tuple[str, list[str]]]:
        """Each override of the command line `arguments` (not swept) that sets a config group or
        key that a config group option sets where the jobs of a set of `sets` (of `jobs`) do not
        share that option (`hydra_compat.option_sets`: `loss=cispo` for
        `variants/field_axes=gspo`, whose defaults list chooses the loss) -> that key and those
        options: the command line's value wins over each option's, which may be why the jobs
        compose to one config."""
        loader = self.hydra_context.config_loader
        own = list(dict.fromkeys(o for nums in sets for num in nums for o in jobs[num]
                                 if not all(o in jobs[m] for m in nums)))
        given = [o for o in parse_overrides(list(arguments))
                 if not o.is_sweep_override() and not o.is_hydra_override()]
        causes: dict[str, tuple[str, list[str]]] = {}
        for text, option in zip(own, parse_overrides(own), strict=True):
            if text not in group_overrides(loader, [text]) or not isinstance(option.value(), str):
                continue
            chosen = option_sets(loader, option.key_or_group, option.value())
            for cause in given:
                key = cause.key_or_group
                if any(s == key or s.startswith(key + ".") for s in chosen):
                    causes.setdefault(cause.input_line, (key, []))[1].append(text)
        return {cause: (key, list(dict.fromkeys(options))) for cause, (key, options) in causes.items()}

    def _parallel(self, n_jobs: int) -> int:
        """How many jobs the launcher runs at once: a SLURM array's `array_parallelism`, else
        the local pool's size (1 where this machine lacks the GPUs the jobs ask for)."""
        launcher = self.config.hydra.launcher
        if "array_parallelism" in launcher:
            return max(1, min(n_jobs, int(launcher.array_parallelism)))
        try:
            return pool_size(int(launcher.gpus_per_job), int(launcher.cpus_per_job),
                             launcher.max_parallel_jobs)
        except RuntimeError:
            return 1

    def _launch_of(self, overrides: Sequence[str]) -> Launch:
        """The launch of the job of `overrides` (`grpo.run.finished.Launch`): a job of this sweep,
        or of a race's wave (its config's overrides and the wave's seed, which none of the
        launch's keys depends on)."""
        if self._launches is None:  # once the jobs are composed
            self._launches = {tuple(without_seed(job.overrides)): Launch.of(job.cfg)
                              for job in self.composed.values()}
        return self._launches[tuple(without_seed(overrides))]

    def _relaunch_plan(self, race: RaceSettings | None, sweep_dir: Path, labels: dict[int, str],
                       say: bool = True) -> RelaunchPlan:
        """What the launch does with each job it knows of now (`relaunch.plan_relaunch`): the
        sweep's jobs, or every job of a race's waves as its runs say (`RaceRunner.prepare`);
        exit 2 where a followed job trains another config than its job's (`_followed_refusal`);
        with `say`, its line is printed where the sweep directory holds an earlier launch.
        `labels`: each job's (`job_set`)."""
        if race is None:
            numbered = dict(enumerate(job.overrides for job in self.composed.values()))
        else:
            state = self._race_runner(race, sweep_dir).prepare(warn=False)
            numbered = {num: [*state.configs[i], f"seed={wave.seed}"]
                        for wave in state.waves for num, i in wave.jobs.items()}
        try:
            plan = plan_relaunch(sweep_dir, {num: self._launch_of(o) for num, o in numbered.items()},
                                 launcher_kind(self.launcher))
        except RunDirError as err:  # SLURM cannot say whether an earlier job still runs
            print(f"error: {err}", file=sys.stderr)
            sys.exit(1)
        if race is None:  # a race's runs are checked against its waves (`check_relaunch`)
            refuse([refusal] if (refusal := self._followed_refusal(plan, sweep_dir, labels)) else [])
        if say and plan.earlier:
            print(plan.line(), flush=True)
        return plan

    def _followed_differences(self, num: int, job: ComposedJob, recorded: JobsFile | None,
                              sweep_dir: Path) -> str | None:
        """How the config the followed job `num` trains differs from its launch now (`job`), in
        the keys that change its curve or in `n_grpo_steps` (`describe_differences` of
        `curve_differences`), None where it does not or nothing says (the run's own resume check
        has the last word). What it trains: its run's config (`trained_config`: its newest
        checkpoint's, else its `.hydra/` record), else, for a job that has not started (a
        pending SLURM task, a run whose record is not yet written), the overrides `jobs.json`
        records for it, composed now."""
        trained = trained_config(sweep_dir / str(num))
        if trained is None:
            earlier = recorded.jobs.get(num) if recorded is not None else None
            if earlier is None or list(earlier.overrides) == list(job.overrides):
                return None
            try:
                trained = resolved(compose_job(
                    self.hydra_context.config_loader, self.config.hydra.job.config_name,
                    earlier.overrides, base=raw_list(self.config.hydra.overrides.hydra),
                    composer=self.composer).cfg)
            except HydraException as err:  # an override of an older version that composes no more
                return f"its recorded overrides ({' '.join(earlier.overrides)}) compose no more: {err}"
        differences = curve_differences(trained, resolved(job.cfg))
        return describe_differences(differences) if differences else None

    def _followed_refusal(self, plan: RelaunchPlan, sweep_dir: Path,
                          labels: dict[int, str]) -> str | None:
        """The one line that refuses a relaunch whose config differs from what a run it would
        follow (still queued or running) trains, in a key that changes the curve or in
        `n_grpo_steps` (`curve_differences`): followed, the run would train its own values while
        `multirun.yaml` and `jobs.json` said the launched ones; None where every followed run
        trains its job's config. A run's checkpoint is checked for every job (`resume_refusal`)."""
        jobs = list(self.composed.values())
        recorded = read_jobs(sweep_dir)
        differing: dict[str, list[int]] = {}  # the differences -> the jobs that have them
        for num in plan.follow:
            if (differences := self._followed_differences(num, jobs[num], recorded, sweep_dir)):
                differing.setdefault(differences, []).append(num)
        if not differing:
            return None
        return (f"runs this launch would follow (still queued or running in {sweep_dir}) train "
                "another config than it launches: "
                + "; ".join(f"{job_set(nums, labels)}: {text}" for text, nums in differing.items())
                + " (trained -> launched); a relaunch cannot change a run that is being trained: "
                "launch it again with the trained values to follow them, or launch the new values "
                "into a new sweep directory (drop hydra.sweep.dir, or change experiment_name); "
                "multirun.yaml and jobs.json are left as they are")

    def _nothing_to_drive(self, race: RaceSettings | None, sweep_dir: Path,
                          labels: dict[int, str]) -> bool:
        """Whether a detached driver of this launch would have nothing to do but print the
        summary: an earlier launch's runs are all over (`_relaunch_plan`: none to submit, none
        to follow; a race: its last look ended it) and no driver of the sweep is pending or
        running (`grpo.run.driver.live_driver`; an unreadable record is left to `detach`).
        `labels`: each job's (`job_set`)."""
        if race is not None:
            last = self._race_runner(race, sweep_dir).prepare(warn=False).last_decision()
            if last is None or last.end is None:
                return False
        plan = self._relaunch_plan(race, sweep_dir, labels, say=False)
        if not plan.earlier or plan.submit or plan.follow:
            return False
        try:
            return live_driver(sweep_dir) is None
        except RunFileError:
            return False

    def _race_runner(self, settings: RaceSettings, sweep_dir: Path) -> Any:
        """The race of this sweep's jobs in `sweep_dir` (`analysis.decisions.race.looks.RaceRunner`), each wave
        priced by the cost model and launched by the sweep's launcher."""
        # imported here: the race reads the sweep back with the analysis (pandas), which the
        # sweeper's other work and every dry run do without
        from analysis.decisions.race.looks import RaceRunner

        jobs = list(self.composed.values())
        parallel = self._parallel(len(jobs))
        unit = estimate([jobs[0].cfg], parallel)[0].unit

        def price(indices: Sequence[int]) -> float:
            return float(estimate([jobs[i].cfg for i in indices], parallel)[0].full_grid)

        configs, identities = self._race_configs()
        return RaceRunner(sweep_dir, settings, configs, identities,
                          lambda batch, start: self.launcher.launch(batch, initial_job_idx=start),
                          price, unit)

    def _power_lines(self, cfg: Any, cost: SweepEstimate) -> list[str]:
        """The dry run's power (`analysis.decisions.launch_stats.power_lines`) from `cfg`'s
        `analysis.*` and `race.*`, the composed jobs and the sweep's `cost`."""
        assumed = OmegaConf.select(cfg, "analysis.assumed_seed_sd", default=None)
        source = OmegaConf.select(cfg, "analysis.seed_variance_from", default=None)
        borrowed = None
        if source is not None:
            # imported here: reading a sweep takes the analysis (pandas), only where one is named
            from analysis.decisions.ranking import launch_variance

            borrowed = launch_variance(Path(str(source)), [job.cfg for job in self.composed.values()])
        return power_lines([without_seed(job.overrides) for job in self.composed.values()],
                           None if assumed is None else float(assumed), borrowed,
                           source is not None, len(self.check_jobs), cost.full_grid, cost.unit,
                           OmegaConf.select(cfg, "race.max_seeds", default=None),
                           cfg.race.alpha)

    def _race_configs(self) -> tuple[list[list[str]], list[dict[str, Any]]]:
        """The race's configs: each job's overrides without its seed, and its resolved config
        (what its runs must train with)."""
        jobs = list(self.composed.values())
        return [without_seed(job.overrides) for job in jobs], [resolved(job.cfg) for job in jobs]

    def _price_race(self, settings: RaceSettings, cfgs: list[Any], cost: SweepEstimate | None) -> None:
        """With dry_run, the race's plan (`analysis.decisions.race.pricing.plan_line`), its
        expected case (the calibration's share of the worst case in each of its cases) and what
        a launch would find in its sweep directory (`check_relaunch`: a refusal exits 2); refuse
        (exit 2) a budget that cannot pay for wave 1. `cost`: the grid's estimate where `_price`
        made one (wave 1 is the grid)."""
        if cost is None:
            cost, _ = estimate(cfgs, self._parallel(len(cfgs)))
        one, unit = cost.full_grid, cost.unit
        if self.config.dry_run:
            worst = pricing.worst_case(settings, one)
            print(pricing.plan_line(settings, len(cfgs), one, unit))
            print(Calibration.read().expected_text(worst, unit, len(cfgs), settings))
            if os.environ.get(ESTIMATE_FILE_ENV):  # the race plans its worst case
                write_estimate(Path(os.environ[ESTIMATE_FILE_ENV]), worst, worst, unit)
            configs, identities = self._race_configs()
            found = check_relaunch(Path(self.config.hydra.sweep.dir), settings, identities,
                                   short_labels(configs))
            if isinstance(found, str):
                print(f"error: {found}", file=sys.stderr)
                sys.exit(2)
            for note in found.notes:
                print(f"warning: {note}", file=sys.stderr)
        refusal = pricing.wave_one_refusal(settings, len(cfgs), one, unit)
        if refusal is not None:
            print(f"error: {refusal}", file=sys.stderr)
            sys.exit(2)

    def _race(self, settings: RaceSettings, sweep_dir: Path) -> list[Any]:
        """Run the race (`analysis.decisions.race.looks.RaceRunner`) and print where it ended."""
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        race = self._race_runner(settings, sweep_dir).run()
        last = race.last_decision()
        if last is not None:
            print(f"race over after {len(race.waves)} waves ({last.end}): "
                  f"{', '.join(last.alive) or 'no config'} could be the best; "
                  f"{race.spent_gpu_hours():.3g} {race.unit} spent, measured, of the fixed grid's "
                  f"{race.fixed_grid_hours():.3g} at the runs' measured rates; report: "
                  f"`make plots SWEEP={sweep_dir}`")
        return []

    def _price(self, cfgs: list[Any], lines: list[str], race: RaceSettings | None) -> SweepEstimate | None:
        """With dry_run, print each job's line (`lines`) with its estimated cost, the rates and
        the sweep's total (grpo.sweep.cost); exit 2 when the sweep would spend more than
        budget.gpu_hours (a `race`: its worst case). Nothing is estimated when neither is asked
        for (None); else returns the estimate."""
        budget = cfgs[0].budget.gpu_hours
        if not self.config.dry_run and budget is None:
            return None
        cost, rates = estimate(cfgs, self._parallel(len(cfgs)))
        if self.config.dry_run:
            print(f"dry run: {len(cfgs)} jobs, nothing submitted")
            print("\n".join(f"{line}; ~{job.describe()}"
                            for line, job in zip(lines, cost.jobs, strict=True)))
            print("\n".join(f"cost rates: {r.describe()}" for r in dict.fromkeys(rates)))
            print("\n".join([*memory_lines(cfgs), *cost.lines()]))
            if os.environ.get(ESTIMATE_FILE_ENV):
                cost.write(Path(os.environ[ESTIMATE_FILE_ENV]))
        refusal = cost.over_budget(budget, None if race is None else race.max_seeds)
        if refusal is not None:
            print(f"error: {refusal}", file=sys.stderr)
            sys.exit(2)
        return cost

    def _detached_or_refused(self, sweep_dir: Path, race: RaceSettings | None,
                             labels: dict[int, str]) -> bool:
        """Launched from a terminal (not a driver, `grpo.run.driver.under_driver`): with
        `cluster.detach=true`, start the sweep's detached driver (`grpo.run.driver.detach`: a
        SLURM job, or a process of its own session) unless an attached launch holds the sweep
        (RunDirLocked) and say so (True: this process is done), or, where it would have nothing
        to do (`_nothing_to_drive`: a finished sweep relaunched), say so and run here (False: the
        relaunch line and the summary here, nothing submitted); without, exit 1 where the
        sweep's detached driver is still pending or running."""
        watch = make_command("watch", sweep_dir)
        if self.config.cluster.get("detach", False) and self._nothing_to_drive(race, sweep_dir, labels):
            print("cluster.detach=true: every run of this sweep is over; no driver was started "
                  "(the relaunch and its summary here)", flush=True)
            return False
        if not self.config.cluster.get("detach", False):
            refusal = attached_refusal(sweep_dir, watch)
            if refusal is not None:
                print(f"error: {refusal}", file=sys.stderr)
                sys.exit(1)
            return False
        command = driver_sweep_command(sweep_dir)
        name = OmegaConf.select(self.config, "hydra.launcher.name", default="launch")
        start_driver = driver_starter(self.config, command, sweep_dir,
                                      f"{name}-driver-{sweep_dir.name}")

        def start() -> DriverRecord:
            with sweep_lock(sweep_dir):  # an attached launch of it: refused, naming it
                pass
            return start_driver()

        status = detach(sweep_dir, command, start, watch)
        if status:
            sys.exit(status)
        return True

    def sweep(self, arguments: list[str]) -> Any:
        note = output_root_note(self.config.hydra)
        if note:
            print(f"warning: {note}", file=sys.stderr)
        jobs, swept = self._all_jobs(arguments)
        wide = sorted(k for k in swept if k.split(".")[0].split("/")[0] in SWEEP_WIDE)
        if wide:
            print(f"error: {', '.join(wide)} cannot be swept: pruning, budget and race hold for "
                  "the whole sweep (one pruner compares its runs); give one value; nothing was "
                  "submitted", file=sys.stderr)
            sys.exit(2)
        how_run = sorted(k for k in swept if k.lstrip("+") != CHECK_SEEDS and not sweepable(k))
        if how_run:
            they = "they say" if len(how_run) > 1 else "it says"
            print(f"error: {', '.join(how_run)} cannot be swept: {they} how a config is run, "
                  "measured, logged or stopped, not what it is (grpo.run.run_config.sweepable): "
                  "each config would be trained again under each value, the same runs under other "
                  "names, and their seeds counted twice; give one value; nothing was submitted",
                  file=sys.stderr)
            sys.exit(2)
        racing = self.config.race.get("max_seeds") is not None
        if racing and seed_swept(swept):
            print("error: seed cannot be swept in a race (race.max_seeds is set): the race gives "
                  "wave w seed `seed` + w - 1; set seed to the first one; nothing was submitted",
                  file=sys.stderr)
            sys.exit(2)
        subdir = OmegaConf.to_container(self.config.hydra.sweep, resolve=False).get("subdir")
        if subdir != JOB_SUBDIR:
            refuse([f"hydra.sweep.subdir={subdir}: the live monitor, the summary, the report and a "
                    f"race read a sweep's runs from <sweep>/<job number> (hydra.sweep.subdir="
                    f"{JOB_SUBDIR}, the default); runs elsewhere would be called failed, and two "
                    "jobs could share one directory (a check seed and its config); drop the "
                    "hydra.sweep.subdir override"])
        self.check_jobs = self._check_jobs(jobs, swept, racing)
        n_grid = len(jobs)
        jobs = [*jobs, *self.check_jobs]
        self.composed = {}
        self.composer = SweepComposer(self.hydra_context.config_loader)
        lines: list[str] = []
        labels: dict[int, str] = {}
        warnings: dict[str, list[int]] = {}  # message -> the jobs it concerns, in order
        errors: dict[str, list[int]] = {}
        resources = ResourceCheck()
        sweep_dir = Path(self.config.hydra.sweep.dir)  # resolved once, not once a job
        with kept_out_of_collection() as settle, interpolations_parsed_once():
            composed = []
            for overrides in jobs:
                composed.append(self._compose(overrides))
                settle()
            shown = [[o for o in filter_overrides(overrides) if o.split("=", 1)[0] in swept]
                     for overrides in jobs]
            listed = any(lists_configs(override_key(key)) for key in swept)
            names = job_labels(shown, [_choices_and_config(job.cfg) if listed else None
                                       for job in composed])
            for num, (overrides, job) in enumerate(zip(jobs, composed, strict=True)):
                cfg = job.cfg
                check = f" {overrides[-1]}: check seed" if num >= n_grid else ""
                labels[num] = f"job #{num} [{names[num] or 'no swept keys'}{check}]"
                report = check_config(cfg).include(check_installed(cfg))
                report.errors += resources.refusals(cfg)
                # a race checks its job directories against its own waves (check_relaunch)
                if not report.errors and not racing and (
                        refusal := resume_refusal(cfg, sweep_dir / str(num))) is not None:
                    report.errors.append(refusal)
                for message in report.warnings:
                    warnings.setdefault(message, []).append(num)
                for message in report.errors:
                    errors.setdefault(message, []).append(num)
                if not report.errors:
                    lines.append(f"{labels[num]} {job.describe_loss()}, {describe_job(cfg)}")
                settle()
            repeated = [] if errors else repeated_runs([job.cfg for job in composed])
        for message, nums in warnings.items():
            print(f"warning: {job_set(nums, labels)}: {message}", file=sys.stderr)
        if errors:
            bad = {num for nums in errors.values() for num in nums}
            by_jobs: dict[tuple[int, ...], list[str]] = {}
            for message, nums in errors.items():
                by_jobs.setdefault(tuple(nums), []).append(message)
            print(f"error: {len(bad)} of {len(jobs)} jobs are invalid; nothing was submitted.\n"
                  + "\n".join(f"{job_set(list(nums), labels)}:\n" + "\n".join(f"  - {m}" for m in messages)
                              for nums, messages in sorted(by_jobs.items())),
                  file=sys.stderr)
            sys.exit(2)
        if repeated:
            refuse([one_run_refusal(repeated, jobs, self._one_run_causes(repeated, jobs, arguments))])
        cfgs = [job.cfg for job in self.composed.values()]
        race = RaceSettings.from_config(cfgs[0].race, int(cfgs[0].seed)) if racing else None
        if race is not None:
            refuse(pricing.misuse_problems(race, len(cfgs), cfgs[0].pruning.name))
        cost = self._price(cfgs, lines, race)
        if race is not None:
            self._price_race(race, cfgs, cost)
        if self.config.dry_run:
            if cost is not None:
                print("\n".join(self._power_lines(cfgs[0], cost)))
            self._relaunch_plan(race, sweep_dir, labels)
            return []
        refusal = output_refusal(sweep_dir)
        if refusal is not None:
            print(f"error: {refusal}", file=sys.stderr)
            sys.exit(1)
        if race is None:  # before anything is written (planned again under the lock)
            self._relaunch_plan(race, sweep_dir, labels, say=False)
        if race is not None:  # refused before anything is written (runs again under the lock)
            self._race_runner(race, sweep_dir).prepare(warn=False)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        try:
            if not under_driver() and self._detached_or_refused(sweep_dir, race, labels):
                return []
            with sweep_lock(sweep_dir):
                self.launcher.relaunch = Relaunch(self._relaunch_plan(race, sweep_dir, labels),
                                                self._launch_of)
                if race is not None:
                    return self._race(race, sweep_dir)
                return super().sweep(arguments)
        except RunDirError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(1)
        except Exception as err:
            refusal = sbatch_refusal(err)
            if refusal is None:
                raise
            print(f"error: sbatch refused the job array: {refusal} (its options come from "
                  "cluster.* and hydra.launcher.*)", file=sys.stderr)
            sys.exit(2)
