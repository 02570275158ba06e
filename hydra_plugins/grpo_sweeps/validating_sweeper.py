"""A Hydra sweeper that composes and checks every job of a sweep before launching any.

It is Hydra's BasicSweeper (cartesian product of the swept values, `hydra.sweeper.params` from
presets, command-line values winning) with a gate in front of the launcher: each job's config is
composed (`grpo.sweep.job_loss.compose_job`, which gives an off-policy job that names no loss
`loss=grpo_clip`; the launched job lists are those composed ones, `get_job_batch`) and passed
through `grpo.config.validation.check_config`, and a `cluster=slurm` job is checked against what
its partition's nodes offer (the scheduler is asked once per sweep); one bad job stops the whole
submission, each message printed once with the jobs it concerns (`grpo.sweep.plan.SweepPlan`),
warnings alike. What a sweep may not sweep, the check seeds' jobs and the refusal of jobs that
are one run (`grpo.run.run_config.repeated_runs`) are `grpo.sweep.plan`'s. A job whose run
directory holds a run trained with values that change its curve is a bad job
(`grpo.run.run_config.resume_refusal`), and so is a relaunch whose config differs from what a
run it would follow trains (`_followed_refusal`), both before any file of the sweep is written.
`dry_run=true` lists and prices the jobs (`grpo.sweep.cost`), the race's plan
(`analysis.decisions.race.pricing`) and the sweep's power (`analysis.decisions.launch_stats`),
and launches nothing; a sweep that plans to spend more than `budget.gpu_hours` is refused.
The sweep directory's lock (`grpo.run.lock.sweep_lock`) is held from the submission until the
launcher has every job's result; a submission that sbatch refuses ends in one line with sbatch's
message. A relaunch submits only what is unfinished (`hydra_plugins.grpo_sweeps.relaunch`: the
plan made once when the sweep starts, its line printed by the dry run and the launch alike).
With `cluster.detach=true`, once every job is checked, the sweep's driver is started apart from
the terminal (`grpo.run.driver`) and runs this same command attached, its sweep directory pinned.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import filter_overrides
from hydra.errors import HydraException
from omegaconf import OmegaConf

from analysis.decisions.launch_stats import power_lines
from analysis.decisions.race import pricing
from analysis.decisions.race.record import check_relaunch, short_labels
from analysis.decisions.race.settings import Calibration, RaceSettings
from analysis.names.config_names import job_labels, lists_configs
from analysis.outputs.monitor import make_command
from analysis.readers.jobs import JobsFile, override_key, read_jobs
from grpo.config.rules import CHECK_SEEDS
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
    trained_config,
    without_seed,
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
    swept_values,
)
from grpo.sweep.job import describe_job, output_refusal, output_root_note, raw_list
from grpo.sweep.job_loss import ComposedJob, compose_job
from grpo.sweep.plan import (
    SweepPlan,
    check_seed_jobs,
    kept_out_of_collection,
    one_run_causes,
    one_run_refusal,
    own_options,
    refuse,
    repeated_values,
    swept_key_problem,
)
from grpo.sweep.slurm_resources import ResourceCheck, sbatch_refusal
from hydra_plugins.grpo_sweeps.pooled_local_launcher import pool_size
from hydra_plugins.grpo_sweeps.relaunch import (
    Relaunch,
    RelaunchPlan,
    launcher_kind,
    plan_relaunch,
)


class ValidatingSweeper(BasicSweeper):
    """BasicSweeper that validates all jobs first; see the module docstring."""

    composed: dict[tuple[str, ...], ComposedJob]
    """Each job's composition, by its overrides before `compose_job` (filled by `sweep()`)."""
    composer: SweepComposer
    """The sweep's jobs' configs, composed by Hydra once for each set of config group choices."""
    check_jobs: list[Sequence[str]] = []
    """The check seeds' jobs (`grpo.sweep.plan.check_seed_jobs`), launched after the grid's."""
    plan: SweepPlan
    """The checked jobs' labels and listing lines (filled by `_checked`)."""
    _launches: dict[tuple[str, ...], Launch] | None = None
    """Each composed job's launch by its overrides less the seed (`_launch_of`)."""

    def sweep(self, arguments: list[str]) -> Any:
        note = output_root_note(self.config.hydra)
        if note:
            print(f"warning: {note}", file=sys.stderr)
        jobs, swept = self._all_jobs(arguments)
        racing = self.config.race.get("max_seeds") is not None
        refuse(swept_key_problem(swept, racing, OmegaConf.to_container(
            self.config.hydra.sweep, resolve=False).get("subdir")))
        self.check_jobs = check_seed_jobs(jobs, swept, racing,
                                          OmegaConf.select(self.config, CHECK_SEEDS, default=0),
                                          self.config.seed)
        sweep_dir = Path(self.config.hydra.sweep.dir)  # resolved once, not once a job
        self.plan = self._checked(jobs, swept, racing, sweep_dir, arguments)
        cfgs = [job.cfg for job in self.composed.values()]
        race = RaceSettings.from_config(cfgs[0].race, int(cfgs[0].seed)) if racing else None
        if race is not None:
            refuse(pricing.misuse_problems(race, len(cfgs), cfgs[0].pruning.name))
        cost = self._price(cfgs, self.plan.lines, race)
        if race is not None:
            self._price_race(race, cfgs, cost)
        if self.config.dry_run:
            if cost is not None:
                print("\n".join(self._power_lines(cfgs[0], cost)))
            self._relaunch_plan(race, sweep_dir)
            return []
        return self._launch(arguments, race, sweep_dir)

    def _all_jobs(self, arguments: list[str]) -> tuple[list[Sequence[str]], set[str]]:
        """Every job's override list, and the keys that take several values; exit 2 where a
        swept key repeats a value (`grpo.sweep.plan.repeated_values`)."""
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides(preset_overrides(self) + list(arguments))
        swept = {o.get_key_element() for o in overrides if o.is_sweep_override()}
        refuse(repeated_values(swept_values(overrides)))
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

    def _checked(self, grid: list[Sequence[str]], swept: set[str], racing: bool, sweep_dir: Path,
                 arguments: Sequence[str]) -> SweepPlan:
        """Every job of the `grid` and the check seeds composed and checked (its config, what it
        needs installed, its SLURM resources, its run directory in `sweep_dir` but in a race,
        which checks its own waves: `check_relaunch`), each message printed once with the jobs
        it concerns; exit 2 where a job is invalid or jobs are one run (`repeated_runs`)."""
        jobs = [*grid, *self.check_jobs]
        self.composed = {}
        self.composer = SweepComposer(self.hydra_context.config_loader)
        plan = SweepPlan()
        resources = ResourceCheck()
        with kept_out_of_collection() as settle, interpolations_parsed_once():
            composed = []
            for overrides in jobs:
                composed.append(self._compose(overrides))
                settle()
            shown = [[o for o in filter_overrides(overrides) if o.split("=", 1)[0] in swept]
                     for overrides in jobs]
            listed = any(lists_configs(override_key(key)) for key in swept)
            names = job_labels(shown, [job.choices_and_config() if listed else None
                                       for job in composed])
            for num, (overrides, job) in enumerate(zip(jobs, composed, strict=True)):
                label = plan.label(num, names[num], overrides[-1] if num >= len(grid) else None)
                report = check_config(job.cfg).include(check_installed(job.cfg))
                report.errors += resources.refusals(job.cfg)
                if not report.errors and not racing and (
                        refusal := resume_refusal(job.cfg, sweep_dir / str(num))) is not None:
                    report.errors.append(refusal)
                if plan.add(num, report.warnings, report.errors):
                    plan.lines.append(f"{label} {job.describe_loss()}, {describe_job(job.cfg)}")
                settle()
            repeated = [] if plan.errors else repeated_runs([job.cfg for job in composed])
        for line in plan.warning_lines():
            print(line, file=sys.stderr)
        if (errors := plan.error_text(len(jobs))) is not None:
            print(errors, file=sys.stderr)
            sys.exit(2)
        if repeated:
            refuse([one_run_refusal(repeated, jobs, self._one_run_causes(repeated, jobs, arguments))])
        return plan

    def _one_run_causes(self, sets: Sequence[Sequence[int]], jobs: Sequence[Sequence[str]],
                        arguments: Sequence[str]) -> dict[str, tuple[str, list[str]]]:
        """`grpo.sweep.plan.one_run_causes` of the command line `arguments` (not swept) and the
        config group options the jobs of a set of `sets` (of `jobs`) do not share, each with
        the keys it sets (`hydra_compat.option_sets`)."""
        loader = self.hydra_context.config_loader
        own = own_options(sets, jobs)
        given = [(o.input_line, o.key_or_group) for o in parse_overrides(list(arguments))
                 if not o.is_sweep_override() and not o.is_hydra_override()]
        chosen = {text: option_sets(loader, option.key_or_group, option.value())
                  for text, option in zip(own, parse_overrides(own), strict=True)
                  if text in group_overrides(loader, [text]) and isinstance(option.value(), str)}
        return one_run_causes(chosen, given)

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

    def _relaunch_plan(self, race: RaceSettings | None, sweep_dir: Path,
                       say: bool = True) -> RelaunchPlan:
        """What the launch does with each job it knows of now (`relaunch.plan_relaunch`): the
        sweep's jobs, or every job of a race's waves as its runs say (`RaceRunner.prepare`);
        exit 2 where a followed job trains another config than its job's (`_followed_refusal`);
        with `say`, its line is printed where the sweep directory holds an earlier launch."""
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
            refuse([refusal] if (refusal := self._followed_refusal(plan, sweep_dir)) else [])
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

    def _followed_refusal(self, plan: RelaunchPlan, sweep_dir: Path) -> str | None:
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
        return self.plan.followed_refusal(differing, sweep_dir)

    def _nothing_to_drive(self, race: RaceSettings | None, sweep_dir: Path) -> bool:
        """Whether a detached driver of this launch would have nothing to do but print the
        summary: an earlier launch's runs are all over (`_relaunch_plan`: none to submit, none
        to follow; a race: its last look ended it) and no driver of the sweep is pending or
        running (`grpo.run.driver.live_driver`; an unreadable record is left to `detach`)."""
        if race is not None:
            last = self._race_runner(race, sweep_dir).prepare(warn=False).last_decision()
            if last is None or last.end is None:
                return False
        plan = self._relaunch_plan(race, sweep_dir, say=False)
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

    def _detached_or_refused(self, sweep_dir: Path, race: RaceSettings | None) -> bool:
        """Launched from a terminal (not a driver, `grpo.run.driver.under_driver`): with
        `cluster.detach=true`, start the sweep's detached driver (`grpo.run.driver.detach`: a
        SLURM job, or a process of its own session) unless an attached launch holds the sweep
        (RunDirLocked) and say so (True: this process is done), or, where it would have nothing
        to do (`_nothing_to_drive`: a finished sweep relaunched), say so and run here (False: the
        relaunch line and the summary here, nothing submitted); without, exit 1 where the
        sweep's detached driver is still pending or running."""
        watch = make_command("watch", sweep_dir)
        if self.config.cluster.get("detach", False) and self._nothing_to_drive(race, sweep_dir):
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


    def _launch(self, arguments: list[str], race: RaceSettings | None, sweep_dir: Path) -> Any:
        """The checked sweep launched under its directory's lock (`sweep_lock`), or its detached
        driver started (`_detached_or_refused`); exit 1 where the output root or the sweep
        directory refuses it, 2 where sbatch refuses the job array."""
        refusal = output_refusal(sweep_dir)
        if refusal is not None:
            print(f"error: {refusal}", file=sys.stderr)
            sys.exit(1)
        if race is None:  # before anything is written (planned again under the lock)
            self._relaunch_plan(race, sweep_dir, say=False)
        if race is not None:  # refused before anything is written (runs again under the lock)
            self._race_runner(race, sweep_dir).prepare(warn=False)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        try:
            if not under_driver() and self._detached_or_refused(sweep_dir, race):
                return []
            with sweep_lock(sweep_dir):
                self.launcher.relaunch = Relaunch(self._relaunch_plan(race, sweep_dir),
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
