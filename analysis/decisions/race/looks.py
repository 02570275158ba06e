"""Racing configs across seeds: after each wave of runs, only the configs that could still be the
best get another seed (Maron and Moore's Hoeffding races, 1994; Birattari's F-Race).

Wave 1 runs every config of the grid with the race's first seed; after each wave the sweep is
read as `make plots` reads it (`analysis.readers.collect.collect`, `analysis.decisions.ranking.rank`) and the
configs that could still be the best -- those Hsu's constrained comparisons with the best
(`analysis.stats.comparisons.best_bounds`, each pair on the larger of the sweep's seed variance and
the pair's own) do not show worse than the best one -- go on to the next wave with the next seed. A config with a run stopped early (collapsed, diverged,
pruned) leaves. Where there is no seed variance yet (a one-key grid with one seed each) no
config is shown worse, so wave 2 gives every config its second seed, which measures it.

Repeated looks: the race looks after each wave, at most `max_seeds` times, and an elimination
at any look is a verdict. Every look compares at one level, calibrated by simulation so that a
truly best config leaves at some look with probability `alpha` where the configs' seed variances
are equal (`analysis.decisions.race.boundary`, whose simulated look is this one, the pair rule included;
1.8 to 2.8 times Bonferroni's `alpha / max_seeds`, which spent 1.9-2.9% of an alpha of 5% with 9
configs and 5 seeds; where tied best configs differ in seed sd the rate is higher, a limit that
module measures). The level depends on
whether wave 1's look had a seed variance (a borrowed one, or a grid's additive residual): the
first look says, and the race keeps its answer. A config that leaves because a run stopped early
(collapsed, diverged, pruned) is not a statistical elimination and spends none of `alpha`.

The race ends when one config remains, when a config has had `max_seeds` seeds, or when the
next wave would take the sweep past its budget (the sweeper prices each wave before launching
it). `race.json` in the sweep directory (`analysis.decisions.race.record`) records each wave's jobs, seed
and decision. The record summarizes, never decides: a relaunched sweeper (`RaceRunner.prepare`)
and every reader (the report's "Race" section, the chain, promote and `make watch`: `replay`,
`still_in`) replay the race from the runs themselves (`replay_looks`: each wave planned and
looked at again from the run directories, each of which must hold the run of its config and
seed), so a record that is missing, damaged or wrong is rebuilt or overruled, and where it said
otherwise the difference is said in one line (`disagreements`); a run that is missing is run
again.

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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from analysis.decisions.race.boundary import (
    NONE_LEFT,
    OVER_BUDGET,
    Boundary,
    Decision,
    boundary,
    decision,
)
from analysis.decisions.race.record import (
    RACE_FILE,
    Race,
    Wave,
    check_relaunch,
    job_numbers,
    job_refusal,
    read_race,
    short_labels,
)
from analysis.decisions.race.settings import RaceSettings
from analysis.decisions.ranking import rank
from analysis.readers.collect import LABEL, Collection, collect
from grpo.run.files import RunFileError
from grpo.run.finished import Launch, run_over


def decide(collection: Collection, alive: Sequence[str], settings: RaceSettings, wave: int,
           level: float) -> Decision:
    """The look after wave `wave` (1-based) at the configs `alive` (labels of `collection`),
    ranked as `make plots` ranks them at `level`, the race's calibrated level (`race_boundary`):
    `analysis.decisions.race.boundary.decision`."""
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
        replay_looks(self.sweep_dir, race, lambda r: self.plan(r, quiet=True),
                     lambda refusal: refuse(f"{refusal}; {MOVE_AWAY}"))
        for note in [*found.notes, *disagreements(found.record, race)] if warn else []:
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
        refusal = wave_refusal(self.sweep_dir, race, wave)
        if refusal is not None:
            refuse(f"{refusal}; {MOVE_AWAY}")

    def run_wave(self, race: Race, wave: Wave) -> None:
        """Launch the wave's jobs whose runs are not over, in runs of consecutive job numbers."""
        for nums in chunks(todo(self.sweep_dir, race, wave)):
            self.launch([[*race.configs[wave.jobs[n]], f"seed={wave.seed}"] for n in nums], nums[0])

    def look(self, race: Race, wave: Wave) -> Decision:
        """`look_at` the wave's runs as they are now."""
        return look_at(self.sweep_dir, race, wave, collect([self.sweep_dir]))


MOVE_AWAY = ("move that directory away (the race then runs that job again) or give this race its "
             "own hydra.sweep.dir")
"""The fix of a job directory that holds a run that is not its wave's."""


def wave_refusal(sweep_dir: Path, race: Race, wave: Wave) -> str | None:
    """Why a directory of `wave`'s jobs (a wave of `race`) holds a run that is not the wave's
    (`job_refusal`); None where each holds the wave's run or none yet."""
    n = race.waves.index(wave) + 1
    for num, i in sorted(wave.jobs.items()):
        refusal = job_refusal(sweep_dir / str(num), race.identities[i], wave.seed,
                              f"job {num} of wave {n} of the race")
        if refusal is not None:
            return refusal
    return None


def todo(sweep_dir: Path, race: Race, wave: Wave) -> list[int]:
    """The jobs of `wave` (a wave of `race`) whose runs a launch would train on: not over for
    their config (`grpo.run.finished.run_over`)."""
    return [num for num, i in sorted(wave.jobs.items())
            if run_over(sweep_dir / str(num), Launch.of(race.identities[i])) is None]


def look_at(sweep_dir: Path, race: Race, wave: Wave, collection: Collection) -> Decision:
    """The look after `wave` (the last of `race` so far): the race's runs of the wave's configs
    read back from `collection` (`collect` of `sweep_dir`), and which of them go on (`decide`, at
    the race's level); sets the label the analysis gives each of the wave's configs and the hours
    its finished runs measured (`Wave.labels`, `Wave.spent_hours`)."""
    configs = set(wave.jobs.values())
    jobs = {num for w in race.waves for num, i in w.jobs.items() if i in configs}
    if not set(job_numbers(sweep_dir)) & jobs:
        return Decision(len(race.waves), (), {}, NONE_LEFT, "none: no run of the wave started")
    collection = race_runs(collection, jobs)
    runs = collection.runs
    by_job = {int(job): str(label) for job, label in zip(runs["job"], runs[LABEL], strict=True)}
    wave.labels = {i: by_job[num] for num, i in wave.jobs.items() if num in by_job}
    hours = "gpu_hours" if race.unit == "GPU-hours" else "cpu_hours"
    measured = dict(zip(runs["job"].astype(int), runs[hours].astype(float), strict=True))
    wave.spent_hours = {i: measured[num] if math.isfinite(measured.get(num, math.nan)) else 0.0
                        for num, i in wave.jobs.items()}
    return decide(collection, sorted(set(wave.labels.values())), race.settings,
                  len(race.waves), race_boundary(race).level)


def replay_looks(sweep_dir: Path, race: Race, plan: Callable[[Race], Wave | None],
                 refused: Callable[[str], None]) -> None:
    """Append to `race` (its configs and settings, no wave yet) each wave `plan` gives, looked at
    from its runs in `sweep_dir`, until a wave whose runs are not all over, a look that ends the
    race, or a plan of None. `refused` is told (and must raise or exit) where a job directory
    holds a run that is not its wave's (`wave_refusal`). The looks are the runs' own: what a
    relaunched sweeper continues from (`RaceRunner.prepare`) and what every reader of a race
    shows (`replay`)."""
    collection: Collection | None = None
    while (wave := plan(race)) is not None:
        race.waves.append(wave)
        refusal = wave_refusal(sweep_dir, race, wave)
        if refusal is not None:
            refused(refusal)
        if todo(sweep_dir, race, wave):
            return
        collection = collect([sweep_dir]) if collection is None else collection
        wave.decision = look_at(sweep_dir, race, wave, collection)
        if wave.decision.end is not None:
            return


@dataclass(frozen=True)
class RaceReading:
    """A race as its runs say (`replay`): `race` its record with every wave planned and looked
    at again from the runs; `note` the one line that says where the record (`RACE_FILE`) said
    otherwise (None: it agrees)."""

    race: Race
    note: str | None

    def could_be_best(self) -> set[str] | None:
        """The configs still in at the race's last look (None: no wave looked at yet)."""
        last = self.race.last_decision()
        return None if last is None else set(last.alive)


def replay(sweep_dir: Path) -> RaceReading | None:
    """The race recorded in `sweep_dir` as its runs say (None: no record), read-only: each wave
    planned from the look before it (the configs that went on, the next job numbers, the next
    seed) and looked at from its runs, as a relaunched sweeper would (`replay_looks`); the record
    gives only what the runs cannot (the configs' order and resolved configs, each wave's price,
    and a race that ended because the next wave would pass its budget, where the record's look
    is the runs'). RunFileError where the record is damaged, a wave looked at lost a run's
    directory, or a job directory holds a run that is not its wave's, naming the command that
    rebuilds the record."""
    record = read_race(sweep_dir)
    if record is None:
        return None
    rebuild = ("relaunch the race's command (the same `launch.py -m ...`): it rebuilds the record "
               "from the runs and runs what is missing")
    present = set(job_numbers(sweep_dir))
    race = Race(record.configs, record.settings, record.grid_gpu_hours, unit=record.unit,
                identities=record.identities)

    def plan(race: Race) -> Wave | None:
        n = len(race.waves) + 1
        jobs = {race.next_job() + k: i for k, i in enumerate(race.alive())}
        said = record.waves[n - 1] if n <= len(record.waves) else None
        if said is None and not present & set(jobs):
            return None  # not launched
        seed = record.settings.seed_of(n)
        as_said = said is not None and (said.jobs, said.seed) == (jobs, seed)
        gone = [num for num in sorted(jobs) if num not in present]
        if as_said and said.decision is not None and gone:
            raise RunFileError(f"{sweep_dir / RACE_FILE} claims job {gone[0]} of wave {n}, whose "
                               f"directory is gone; {rebuild}")
        return Wave(seed, jobs, said.priced_gpu_hours if as_said else math.nan)

    def refused(refusal: str) -> NoReturn:
        raise RunFileError(f"{sweep_dir / RACE_FILE}'s race as its runs say: {refusal}; {rebuild}")

    replay_looks(sweep_dir, race, plan, refused)
    last, n = race.last_decision(), len(race.waves)
    said = record.waves[n - 1].decision if 0 < n <= len(record.waves) else None
    if last is not None and last.end is None and said is not None and said.end == OVER_BUDGET \
            and said.alive == last.alive and n == len(record.waves):
        race.waves[-1].decision = replace(last, end=OVER_BUDGET)  # the sweeper's price: its record's
    notes = disagreements(record, race)
    return RaceReading(race, f"{RACE_FILE} disagrees with its runs, which win: " + "; ".join(notes)
                       if notes else None)


def still_in(collection: Collection) -> tuple[list[str] | None, list[str]]:
    """The configs of `collection` a pick may choose from (the chain's winner, promote's top K,
    the summary's best config): those of its raced sweeps still in at their race's last look as
    the runs say (`replay`), and every config of its other sweeps; None where no sweep of it
    raced past a look. Also each race record's disagreement with its runs (`RaceReading.note`).
    RunFileError as `replay`."""
    left: set[str] = set()
    notes: list[str] = []
    raced = False
    for sweep in collection.sweeps:
        reading = replay(sweep.path)
        kept = reading.could_be_best() if reading is not None else None
        if reading is not None and reading.note:
            notes.append(f"{sweep.path}: {reading.note}")
        if kept is None:
            continue
        raced = True
        runs = collection.runs
        left |= set(runs.loc[runs["sweep"] == str(sweep.path), LABEL]) - kept
    return ([label for label in collection.labels if label not in left] if raced else None), notes


def disagreements(record: Race | None, race: Race) -> list[str]:
    """Where `record` (the record found on disk, if any) said otherwise than the runs (`race`, as
    they say): one text each."""
    if record is None:
        return []
    notes = []
    for n, (said, ran) in enumerate(zip(record.waves, race.waves, strict=False), 1):
        if said.jobs != ran.jobs or said.seed != ran.seed:
            notes.append(f"{RACE_FILE} planned wave {n} otherwise than its runs say; the runs' "
                         "plan is taken")
        elif said.decision is not None and ran.decision is None:
            notes.append(f"{RACE_FILE} recorded a look after wave {n}; its runs are not all over")
        elif said.decision is not None and ran.decision is not None and (
                said.decision.alive, said.decision.end) != (ran.decision.alive, ran.decision.end):
            notes.append(f"{RACE_FILE} recorded the look after wave {n} as {_went_on(said.decision)}; "
                         f"its runs say {_went_on(ran.decision)}: the runs' look is taken")
    if len(record.waves) > len(race.waves):
        notes.append(f"{RACE_FILE} records {len(record.waves)} waves; its runs' looks reach "
                     f"{len(race.waves)}")
    return notes


def _went_on(decision: Decision) -> str:
    """``learning_rate=1e-4 going on (the race ends: one config remains)``."""
    return (f"{', '.join(decision.alive) or 'none'} going on"
            + (f" (the race ends: {decision.end})" if decision.end else ""))


def describe(decision: Decision) -> str:
    """``3 configs go on; 6 left ...; the race ends: one config remains``."""
    text = f"{len(decision.alive)} config{'s' if len(decision.alive) != 1 else ''} go on"
    if decision.left:
        text += f"; {len(decision.left)} left"
    return text + (f"; the race ends: {decision.end}" if decision.end else "")
