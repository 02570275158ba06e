"""Racing configs across seeds: after each wave of runs, only the configs that could still be the
best get another seed (Maron and Moore's Hoeffding races, 1994; Birattari's F-Race).

Wave 1 runs every config of the grid with the race's first seed; after each wave the sweep is
read as `make plots` reads it (`analysis.collect.collect`, `analysis.aggregate.rank`) and the
configs that could still be the best -- those the simultaneous Tukey-Kramer comparisons of
`analysis.uncertainty` do not show worse than the best one, on the sweep's seed variance -- go on
to the next wave with the next seed. A config with a run stopped early (collapsed, diverged,
pruned) leaves. Where there is no seed variance yet (a one-key grid with one seed each) no
config is shown worse, so wave 2 gives every config its second seed, which measures it.

Repeated looks: the race looks after each wave, at most `max_seeds` times, and an elimination
at any look is a verdict. The family-wise error rate `alpha` is split over the looks
(Bonferroni): each look compares at `alpha / max_seeds`, so the chance that a truly best config
leaves at any look is at most `alpha` (conservative: the looks are positively correlated).

The race ends when one config remains, when a config has had `max_seeds` seeds, or when the
next wave would take the sweep past its budget (the sweeper prices each wave before launching
it). `race.json` in the sweep directory (`analysis.race_record`) records each wave's jobs, seed
and decision: the report's "Race" section and `make watch` read it, and a relaunched sweeper
reads it to continue.

`RaceRunner` runs a race for the validating sweeper (hydra_plugins.grpo_sweeps): each wave goes
through the sweep's launcher like any batch of jobs (the local pool, or one SLURM job array a
wave), numbered on from the waves before it, each job an ordinary run in the sweep directory
with the wave's seed. The record is written before each wave is launched and after each look, so
a sweeper killed or timed out and relaunched with the same command continues from it: a wave's
runs that finished are not launched again, and the looks are made again from the runs, which
give the same decisions.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from analysis.aggregate import rank
from analysis.collect import LABEL, Collection, collect
from analysis.progress import FINISHED_STATUSES
from analysis.race_record import MAX_SEEDS, ONE_LEFT, OVER_BUDGET, Decision, Race, Wave, read_race
from grpo.config.race import RaceSettings
from grpo.run.files import read_status


def decide(collection: Collection, alive: Sequence[str], settings: RaceSettings,
           wave: int) -> Decision:
    """The look after wave `wave` (1-based) at the configs `alive` (labels of `collection`):
    which of them could still be the best at `settings.alpha_per_look` (module docstring)."""
    ranking = rank(collection, labels=alive, alpha=settings.alpha_per_look)
    left = {label: f"a run stopped early ({statuses})" for label, statuses in ranking.excluded.items()}
    left.update({label: f"no run reached the compared step ({where})"
                 for label, where in ranking.not_compared.items()})
    u = ranking.uncertainty
    if u is None:
        could = [str(label) for label in ranking.table.index]
        variance = "none: no config was compared"
    else:
        could = list(u.could_be_best)
        variance = u.seeds.describe()
        left.update({c.config: c.describe() for c in u.against_best() if c.config not in could})
    end = (ONE_LEFT if len(could) <= 1 else MAX_SEEDS if wave >= settings.max_seeds else None)
    return Decision(wave, tuple(could), left, end, variance)


def without_seed(overrides: Sequence[str]) -> list[str]:
    """A job's overrides less any `seed=` (the race gives each wave its seed)."""
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+") != "seed"]


def chunks(nums: Sequence[int]) -> list[list[int]]:
    """`nums` (sorted) cut into runs of consecutive numbers: each is one launch."""
    runs: list[list[int]] = []
    for num in nums:
        if runs and num == runs[-1][-1] + 1:
            runs[-1].append(num)
        else:
            runs.append([num])
    return runs


class RaceRunner:
    """Runs one race in `sweep_dir` (the validating sweeper's racing mode): `configs` each
    config's job overrides (without the seed), `launch(overrides, initial_job_idx)` the sweep's
    launcher, `price(config indices)` the GPU-hours of one run of each of those configs to its
    last step (the sweeper's cost model), in `unit` (GPU-hours, or CPU-hours for CPU jobs)."""

    def __init__(self, sweep_dir: Path, settings: RaceSettings, configs: list[list[str]],
                 launch: Callable[[list[list[str]], int], Any],
                 price: Callable[[Sequence[int]], float], unit: str = "GPU-hours") -> None:
        self.sweep_dir, self.settings, self.configs = sweep_dir, settings, configs
        self.launch, self.price, self.unit = launch, price, unit

    def start(self) -> Race:
        """The race recorded in the sweep directory, or a new one; exits 2 where the record is
        another race's (other configs or settings)."""
        race = read_race(self.sweep_dir)
        if race is None:
            grid = self.price(range(len(self.configs))) * self.settings.max_seeds
            return Race(self.configs, self.settings, grid, unit=self.unit)
        if race.configs != self.configs or race.settings != self.settings:
            print(f"error: {self.sweep_dir} holds a race of other configs or race settings "
                  f"({race.settings}); relaunch it with the command that started it, or give the "
                  "new race its own hydra.sweep.dir; nothing was submitted", file=sys.stderr)
            sys.exit(2)
        return race

    def run(self) -> Race:
        """Wave after wave until the race ends (module docstring); returns the record."""
        race = self.start()
        while True:
            last = race.last_decision()
            if not race.waves or last is not None:
                if last is not None and last.end is not None:
                    return race
                wave = self.plan(race)
                if wave is None:
                    return race
                race.waves.append(wave)
                race.write(self.sweep_dir)
            wave = race.waves[-1]
            self.run_wave(wave)
            wave.decision = self.look(race, wave)
            race.write(self.sweep_dir)
            print(f"race: wave {len(race.waves)} (seed {wave.seed}, {len(wave.jobs)} runs): "
                  + describe(wave.decision))

    def plan(self, race: Race) -> Wave | None:
        """The next wave, or None where it would pass the budget (recorded on the last look)."""
        alive = race.alive()
        priced = self.price(alive)
        budget = self.settings.budget_gpu_hours
        if budget is not None and race.spent_gpu_hours() + priced > budget:
            previous = race.last_decision()
            if previous is not None:
                race.waves[-1].decision = replace(previous, end=OVER_BUDGET)
                race.write(self.sweep_dir)
            print(f"race: {OVER_BUDGET}: {race.spent_gpu_hours():.3g} {race.unit} spent + "
                  f"{priced:.3g} for wave {len(race.waves) + 1} > race.budget_gpu_hours={budget}")
            return None
        start = race.next_job()
        return Wave(self.settings.seed_of(len(race.waves) + 1),
                    {start + k: i for k, i in enumerate(alive)}, priced)

    def run_wave(self, wave: Wave) -> None:
        """Launch the wave's jobs whose runs are not over, in runs of consecutive job numbers."""
        todo = [num for num in sorted(wave.jobs) if (status := read_status(
            self.sweep_dir / str(num))) is None or status.get("status") not in FINISHED_STATUSES]
        for nums in chunks(todo):
            self.launch([[*self.configs[wave.jobs[n]], f"seed={wave.seed}"] for n in nums], nums[0])

    def look(self, race: Race, wave: Wave) -> Decision:
        """Read the sweep back and decide which of the wave's configs go on."""
        collection = collect([self.sweep_dir])
        by_job = {Path(str(run)).name: str(label) for run, label in
                  zip(collection.runs["run_dir"], collection.runs[LABEL], strict=True)}
        wave.labels = {i: by_job[str(num)] for num, i in wave.jobs.items() if str(num) in by_job}
        return decide(collection, sorted(set(wave.labels.values())), self.settings,
                      len(race.waves))


def describe(decision: Decision) -> str:
    """``3 configs go on; 6 left ...; the race ends: one config remains``."""
    text = f"{len(decision.alive)} config{'s' if len(decision.alive) != 1 else ''} go on"
    if decision.left:
        text += f"; {len(decision.left)} left"
    return text + (f"; the race ends: {decision.end}" if decision.end else "")
