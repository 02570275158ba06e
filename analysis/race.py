"""Racing configs across seeds: after each wave of runs, only the configs that could still be the
best get another seed (Maron and Moore's Hoeffding races, 1994; Birattari's F-Race).

Wave 1 runs every config of the grid with the race's first seed; after each wave the sweep is
read as `make plots` reads it (`analysis.collect.collect`, `analysis.aggregate.rank`) and the
configs that could still be the best -- those the simultaneous Tukey-Kramer comparisons of
`analysis.stats.comparisons` do not show worse than the best one, on the sweep's seed variance -- go on
to the next wave with the next seed. A config with a run stopped early (collapsed, diverged,
pruned) leaves. Where there is no seed variance yet (a one-key grid with one seed each) no
config is shown worse, so wave 2 gives every config its second seed, which measures it.

Repeated looks: the race looks after each wave, at most `max_seeds` times, and an elimination
at any look is a verdict. Every look compares at one level, calibrated by simulation so that a
truly best config leaves at some look with probability `alpha` (`analysis.stats.race`; 1.8 to
2.8 times Bonferroni's `alpha / max_seeds`, which spent 1.9-2.9% of an alpha of 5% with 9 configs
and 5 seeds). The level depends on
whether wave 1's look had a seed variance (a borrowed one, or a grid's additive residual): the
first look says, and the race keeps its answer. A config that leaves because a run stopped early
(collapsed, diverged, pruned) is not a statistical elimination and spends none of `alpha`.

The race ends when one config remains, when a config has had `max_seeds` seeds, or when the
next wave would take the sweep past its budget (the sweeper prices each wave before launching
it). `race.json` in the sweep directory (`analysis.race_record`) records each wave's jobs, seed
and decision: the report's "Race" section and `make watch` read it. The record is a cache of what
the runs say: a relaunched sweeper replays the race from the runs themselves (each wave planned
and looked at again from the run directories, each of which must hold the run of its config and
seed, `analysis.race_record.check_relaunch`), so a record that is missing, damaged or wrong is
rebuilt, and a run that is missing is run again.

`RaceRunner` runs a race for the validating sweeper (hydra_plugins.grpo_sweeps): each wave goes
through the sweep's launcher like any batch of jobs (the local pool, or one SLURM job array a
wave), numbered on from the waves before it, each job an ordinary run in the sweep directory
with the wave's seed. The record is written before each wave is launched and after each look; a
sweeper killed or timed out and relaunched with the same command (or any command that composes
the same configs) continues: a wave's runs that finished are not launched again, and the looks
are made again from the runs, which give the same decisions. A look reads only the race's own
runs of the configs still in; the spend is what the finished runs measured (`collect`'s GPU- or
CPU-hours), the cost model's price only for the runs still to come.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from analysis.aggregate import rank
from analysis.collect import LABEL, Collection, collect
from analysis.race_record import (
    RACE_FILE,
    Race,
    Relaunch,
    Wave,
    check_relaunch,
    job_numbers,
    job_refusal,
    short_labels,
)
from analysis.run_rows import FINISHED_STATUSES
from analysis.stats.race import NONE_LEFT, OVER_BUDGET, Boundary, Decision, boundary, decision
from grpo.config.race import RaceSettings
from grpo.run.files import read_status


def decide(collection: Collection, alive: Sequence[str], settings: RaceSettings, wave: int,
           level: float) -> Decision:
    """The look after wave `wave` (1-based) at the configs `alive` (labels of `collection`),
    ranked as `make plots` ranks them at `level`, the race's calibrated level (`race_boundary`):
    `analysis.stats.race.decision`."""
    ranking = rank(collection, labels=alive, alpha=level)
    return decision(wave, list(ranking.table.index), ranking.uncertainty, ranking.excluded,
                    ranking.not_compared, settings.max_seeds, level)


def first_look(race: Race) -> bool | None:
    """Whether the look after wave 1 had a seed variance (None: wave 1 not looked at yet)."""
    first = race.waves[0].decision if race.waves else None
    return None if first is None else first.level is not None


def race_boundary(race: Race) -> Boundary:
    """The calibrated level of `race`'s looks (`decide`'s; as if wave 1 had a seed variance
    until its look says)."""
    look = first_look(race)
    return boundary(len(race.configs), race.settings.max_seeds, race.settings.alpha,
                    True if look is None else look)


def chunks(nums: Sequence[int]) -> list[list[int]]:
    """`nums` (sorted) cut into runs of consecutive numbers: each is one launch."""
    runs: list[list[int]] = []
    for num in nums:
        if runs and num == runs[-1][-1] + 1:
            runs[-1].append(num)
        else:
            runs.append([num])
    return runs


def race_runs(collection: Collection, jobs: set[int]) -> Collection:
    """`collection` (one sweep's) with only the runs of job numbers `jobs` and their configs."""
    runs = collection.runs[collection.runs["job"].isin(jobs)]
    kept = set(runs[LABEL])
    return replace(collection, runs=runs, steps=collection.steps[collection.steps["job"].isin(jobs)],
                   configs={label: v for label, v in collection.configs.items() if label in kept})


def refuse(message: str) -> NoReturn:
    """Print `message` as the one-line error of a race that cannot go on, and exit 2."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


class RaceRunner:
    """Runs one race in `sweep_dir` (the validating sweeper's racing mode): `configs` each
    config's job overrides (without the seed), `identities` their resolved configs (what their
    runs must train with, `grpo.run.run_config.resolved`), `launch(overrides, initial_job_idx)`
    the sweep's launcher, `price(config indices)` the hours of one run of each of those configs
    to its last step (the sweeper's cost model), in `unit` (GPU-hours, or CPU-hours for CPU
    jobs)."""

    def __init__(self, sweep_dir: Path, settings: RaceSettings, configs: list[list[str]],
                 identities: list[dict[str, Any]], launch: Callable[[list[list[str]], int], Any],
                 price: Callable[[Sequence[int]], float], unit: str = "GPU-hours") -> None:
        self.sweep_dir, self.settings, self.configs = sweep_dir, settings, configs
        self.identities, self.launch, self.price, self.unit = identities, launch, price, unit

    def prepare(self, warn: bool = True) -> Race:
        """The race as its runs say, read-only: the sweep directory checked (`check_relaunch`:
        another race, or a run that is not the race's, exits 2 naming it, before anything is
        written), then every wave replayed from the runs up to the first one not over. What
        the record said otherwise is printed as a warning (`warn`): the runs win."""
        found = check_relaunch(self.sweep_dir, self.settings, self.identities,
                               short_labels(self.configs))
        if isinstance(found, str):
            refuse(found)
        self.order = found.order  # the race's config i is this launch's config order[i]
        race = Race([self.configs[j] for j in self.order], self.settings,
                    self.price(self.order) * self.settings.max_seeds, unit=self.unit,
                    identities=[self.identities[j] for j in self.order])
        while (wave := self.plan(race, quiet=True)) is not None:
            race.waves.append(wave)
            self.check_wave(race, wave)
            if self.todo(wave):
                break
            wave.decision = self.look(race, wave)
            if wave.decision.end is not None:
                break
        for note in [*found.notes, *disagreements(found, race)] if warn else []:
            print(f"warning: {note}", file=sys.stderr)
        return race

    def price_of(self, indices: Sequence[int]) -> float:
        """`price` of the race's configs `indices` (the race's order, `prepare`)."""
        return self.price([self.order[i] for i in indices])

    def run(self) -> Race:
        """Wave after wave until the race ends (module docstring); returns the record."""
        race = self.prepare()
        self.write(race)
        while race.waves:
            wave = race.waves[-1]
            if wave.decision is not None:
                if wave.decision.end is not None:
                    return race
                wave = self.plan(race)
                if wave is None:
                    break
                race.waves.append(wave)
                self.check_wave(race, wave)
                self.write(race)
            self.run_wave(race, wave)
            wave.decision = self.look(race, wave)
            self.write(race)
            print(f"race: wave {len(race.waves)} (seed {wave.seed}, {len(wave.jobs)} runs): "
                  + describe(wave.decision))
        self.write(race)
        return race

    def write(self, race: Race) -> None:
        """Record the race; a record that cannot be written ends the race in one line (what ran
        stays: the same command continues it)."""
        try:
            race.write(self.sweep_dir)
        except OSError as err:
            print(f"error: cannot write the race record {self.sweep_dir / RACE_FILE} "
                  f"({err.strerror or err}): free space or give the directory back its "
                  "permissions, then launch the same command again (finished runs are not run "
                  "again)", file=sys.stderr)
            sys.exit(1)

    def plan(self, race: Race, quiet: bool = False) -> Wave | None:
        """The next wave, or None where it would pass the budget (recorded on the last look)."""
        alive = race.alive()
        priced = self.price_of(alive)
        budget = self.settings.budget_gpu_hours
        if budget is not None and race.spent_gpu_hours() + priced > budget:
            previous = race.last_decision()
            if previous is not None:
                race.waves[-1].decision = replace(previous, end=OVER_BUDGET)
            if not quiet:
                print(f"race: {OVER_BUDGET}: {race.spent_gpu_hours():.3g} {race.unit} spent + "
                      f"{priced:.3g} for wave {len(race.waves) + 1} > race.budget_gpu_hours={budget}")
            return None
        start = race.next_job()
        return Wave(self.settings.seed_of(len(race.waves) + 1),
                    {start + k: i for k, i in enumerate(alive)}, priced)

    def check_wave(self, race: Race, wave: Wave) -> None:
        """Exit 2 where a directory of the wave's jobs holds a run that is not the wave's."""
        n = race.waves.index(wave) + 1
        for num, i in sorted(wave.jobs.items()):
            refusal = job_refusal(self.sweep_dir / str(num), race.identities[i], wave.seed,
                                  f"job {num} of wave {n} of the race")
            if refusal is not None:
                refuse(f"{refusal}; move that directory away (the race then runs that job "
                       "again) or give this race its own hydra.sweep.dir")

    def todo(self, wave: Wave) -> list[int]:
        """The wave's jobs whose runs are not over."""
        return [num for num in sorted(wave.jobs) if (status := read_status(
            self.sweep_dir / str(num))) is None or status.get("status") not in FINISHED_STATUSES]

    def run_wave(self, race: Race, wave: Wave) -> None:
        """Launch the wave's jobs whose runs are not over, in runs of consecutive job numbers."""
        for nums in chunks(self.todo(wave)):
            self.launch([[*race.configs[wave.jobs[n]], f"seed={wave.seed}"] for n in nums], nums[0])

    def look(self, race: Race, wave: Wave) -> Decision:
        """Read the race's runs of the wave's configs back and decide which of them go on;
        record what the wave's finished runs measured."""
        configs = set(wave.jobs.values())
        jobs = {num for w in race.waves for num, i in w.jobs.items() if i in configs}
        if not set(job_numbers(self.sweep_dir)) & jobs:
            return Decision(len(race.waves), (), {}, NONE_LEFT, "none: no run of the wave started")
        collection = race_runs(collect([self.sweep_dir]), jobs)
        runs = collection.runs
        by_job = {int(job): str(label) for job, label in zip(runs["job"], runs[LABEL], strict=True)}
        wave.labels = {i: by_job[num] for num, i in wave.jobs.items() if num in by_job}
        hours = "gpu_hours" if self.unit == "GPU-hours" else "cpu_hours"
        measured = dict(zip(runs["job"].astype(int), runs[hours].astype(float), strict=True))
        wave.spent_hours = {i: measured[num] if math.isfinite(measured.get(num, math.nan)) else 0.0
                            for num, i in wave.jobs.items()}
        return decide(collection, sorted(set(wave.labels.values())), self.settings,
                      len(race.waves), race_boundary(race).level)


def disagreements(found: Relaunch, race: Race) -> list[str]:
    """Where the record found on disk (if any) said otherwise than the runs: each a warning."""
    record = found.record
    if record is None:
        return []
    notes = []
    for n, (said, ran) in enumerate(zip(record.waves, race.waves, strict=False), 1):
        if said.jobs != ran.jobs or said.seed != ran.seed:
            notes.append(f"{RACE_FILE} planned wave {n} otherwise than its runs say; the runs' "
                         "plan is taken")
        elif said.decision is not None and ran.decision is not None and (
                said.decision.alive, said.decision.end) != (ran.decision.alive, ran.decision.end):
            notes.append(f"{RACE_FILE} recorded the look after wave {n} as "
                         f"{', '.join(said.decision.alive) or 'none'} going on; its runs say "
                         f"{', '.join(ran.decision.alive) or 'none'}: the runs' look is taken")
    return notes


def describe(decision: Decision) -> str:
    """``3 configs go on; 6 left ...; the race ends: one config remains``."""
    text = f"{len(decision.alive)} config{'s' if len(decision.alive) != 1 else ''} go on"
    if decision.left:
        text += f"; {len(decision.left)} left"
    return text + (f"; the race ends: {decision.end}" if decision.end else "")
