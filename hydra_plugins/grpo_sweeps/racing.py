"""The validating sweeper's racing mode (`race.max_seeds` set; `analysis.race` decides).

Each wave goes through the sweep's launcher like any batch of jobs (the local pool, or one SLURM
job array a wave), numbered on from the waves before it, each job an ordinary run in the sweep
directory with the wave's seed. Before a wave is launched it is priced by the cost model
(`grpo.sweep.cost.estimate`) and refused when it would take the race past
`race.budget_gpu_hours`; after it, the sweep is read back and the configs that could still be the
best go on. The record (`analysis.race.RACE_FILE`) is written before each wave is launched and
after each look, so a sweeper killed or timed out and relaunched with the same command continues
from it: a wave's runs that finished are not launched again, and the looks are made again from
the runs, which give the same decisions.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from analysis.collect import LABEL, collect
from analysis.race import OVER_BUDGET, Decision, Race, RaceSettings, Wave, decide, read_race
from grpo.run.files import read_status
from grpo.sweep.cost import estimate

FINISHED = ("completed", "collapsed", "diverged", "pruned")
"""Statuses of a run that is over: its job is not launched again."""


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
    """Runs one race in `sweep_dir`: `configs` each config's job overrides (without the seed),
    `cfgs` their composed configs, `launch(overrides, initial_job_idx)` the sweep's launcher,
    `parallel` jobs at once (for pricing)."""

    def __init__(self, sweep_dir: Path, settings: RaceSettings, configs: list[list[str]],
                 cfgs: list[Any], launch: Callable[[list[list[str]], int], Any], parallel: int) -> None:
        self.sweep_dir, self.settings, self.configs, self.cfgs = sweep_dir, settings, configs, cfgs
        self.launch, self.parallel = launch, parallel
        self.unit = "GPU-hours"

    def price(self, indices: Sequence[int]) -> float:
        """GPU-hours (CPU-hours for CPU jobs: `unit`) of one run of each config of `indices`,
        each to its last step (the cost model's full grid)."""
        cost, _ = estimate([self.cfgs[i] for i in indices], self.parallel)
        self.unit = cost.unit
        return float(cost.full_grid)

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
            if not race.waves or race.waves[-1].decision is not None:
                last = race.waves[-1].decision if race.waves else None
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
            if race.waves:
                previous = race.waves[-1].decision
                assert previous is not None
                race.waves[-1].decision = Decision(previous.wave, previous.alive, previous.left,
                                                   OVER_BUDGET, previous.seed_variance)
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
            self.sweep_dir / str(num))) is None or status.get("status") not in FINISHED]
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
