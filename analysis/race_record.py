"""A race's record (`RACE_FILE` in the sweep directory): its configs, settings and waves, each
wave's jobs, seed, price and the look after it (`analysis.race` runs races and says what they are).
Read by the race itself when it is relaunched, the report's "Race" section, the chain and the live
monitor (`make watch`), none of which needs the race's statistics."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grpo.config.race import RaceSettings
from grpo.run.files import RunFileError, atomic_write_text, read_json

RACE_FILE = "race.json"
"""The race's record in the sweep directory."""
MAX_RACE_BYTES = 4 << 20
"""Largest race record read (one of 1000 configs over 10 waves is about 200 kB)."""
ONE_LEFT = "one config remains"
MAX_SEEDS = "every config still in has max_seeds seeds"
OVER_BUDGET = "the next wave would pass the budget"


@dataclass(frozen=True)
class Decision:
    """What the look after wave `wave` decided: `alive` the configs that go on (best first),
    `left` those that left at this look and why, `end` why the race ends here (None: it goes
    on), `seed_variance` the seed variance the comparisons rest on, in words."""

    wave: int
    alive: tuple[str, ...]
    left: dict[str, str] = field(default_factory=dict)
    end: str | None = None
    seed_variance: str = ""


@dataclass
class Wave:
    """One wave: its `seed`, its jobs (job number -> config index), the GPU-hours the sweeper
    priced it at, the look after it (`decision`, None until the wave is done) and the label the
    analysis gives each config (config index -> label)."""

    seed: int
    jobs: dict[int, int]
    priced_gpu_hours: float
    decision: Decision | None = None
    labels: dict[int, str] = field(default_factory=dict)


@dataclass
class Race:
    """A race's record (`RACE_FILE`): the configs (each one's job overrides, without the seed),
    the settings, the GPU-hours of the fixed grid of `max_seeds` seeds a config, as priced, and
    the waves so far."""

    configs: list[list[str]]
    settings: RaceSettings
    grid_gpu_hours: float
    waves: list[Wave] = field(default_factory=list)
    unit: str = "GPU-hours"
    """What the prices count: GPU-hours, or CPU-hours for jobs without a GPU."""

    def next_job(self) -> int:
        """The job number the next wave starts at."""
        return sum(len(w.jobs) for w in self.waves)

    def alive(self) -> list[int]:
        """The config indices still in: those of the last wave until it is looked at, then those
        that go on to the next (all of them before wave 1)."""
        if not self.waves:
            return list(range(len(self.configs)))
        last = self.waves[-1]
        return sorted(last.jobs.values()) if last.decision is None else [
            i for i in sorted(last.jobs.values()) if last.labels.get(i) in last.decision.alive]

    def last_decision(self) -> Decision | None:
        """The look after the last wave (None: no wave yet, or the last not looked at)."""
        return self.waves[-1].decision if self.waves else None

    def spent_gpu_hours(self) -> float:
        """The GPU-hours of the waves so far, as priced."""
        return sum(w.priced_gpu_hours for w in self.waves)

    def wave_of(self) -> dict[int, int]:
        """Each job's wave (1-based), by job number."""
        return {num: n for n, wave in enumerate(self.waves, 1) for num in wave.jobs}

    def status_text(self) -> str:
        """Where the race stands, for the live monitor: ``race: wave 2 of at most 3 (seed 1, 3
        runs), not looked at yet; 3 of 3 configs in; 0.00395 of the fixed grid's 0.00593
        CPU-hours``."""
        n, decision = len(self.waves), self.last_decision()
        if not self.waves:
            where = "wave 1 not launched yet"
        elif decision is None:
            where = (f"wave {n} of at most {self.settings.max_seeds} (seed {self.waves[-1].seed}, "
                     f"{len(self.waves[-1].jobs)} runs), not looked at yet")
        elif decision.end is not None:
            where = f"ended after wave {n}: {decision.end}"
        else:
            where = f"wave {n} looked at, wave {n + 1} next"
        budget = self.settings.budget_gpu_hours
        return (f"race: {where}; {len(self.alive())} of {len(self.configs)} configs in; "
                f"{self.spent_gpu_hours():.3g} of the fixed grid's {self.grid_gpu_hours:.3g} "
                f"{self.unit}" + ("" if budget is None else f" (budget {budget:g})"))

    def write(self, sweep_dir: Path) -> None:
        """Record the race in `sweep_dir` (atomically)."""
        payload = {"version": 1, "configs": self.configs, "settings": asdict(self.settings),
                   "grid_gpu_hours": self.grid_gpu_hours, "unit": self.unit,
                   "waves": [{"seed": w.seed, "jobs": {str(n): i for n, i in w.jobs.items()},
                              "priced_gpu_hours": w.priced_gpu_hours,
                              "labels": {str(i): label for i, label in w.labels.items()},
                              "decision": None if w.decision is None else asdict(w.decision)}
                             for w in self.waves]}
        atomic_write_text(sweep_dir / RACE_FILE, json.dumps(payload, indent=1) + "\n")


def read_race(sweep_dir: Path) -> Race | None:
    """The race recorded in `sweep_dir`, or None where there is none. A record that is not one
    (crafted, torn) raises RunFileError naming the file."""
    path = sweep_dir / RACE_FILE
    if not path.exists():
        return None
    payload = read_json(path, MAX_RACE_BYTES)
    try:
        settings = RaceSettings(**payload["settings"])
        configs = [[str(o) for o in overrides] for overrides in payload["configs"]]
        waves = []
        for entry in payload["waves"]:
            decision = entry["decision"]
            waves.append(Wave(
                int(entry["seed"]), {int(n): int(i) for n, i in entry["jobs"].items()},
                float(entry["priced_gpu_hours"]),
                None if decision is None else Decision(
                    int(decision["wave"]), tuple(map(str, decision["alive"])),
                    {str(k): str(v) for k, v in decision["left"].items()},
                    None if decision["end"] is None else str(decision["end"]),
                    str(decision["seed_variance"])),
                {int(i): str(label) for i, label in entry["labels"].items()}))
        race = Race(configs, settings, float(payload["grid_gpu_hours"]), waves,
                    str(payload["unit"]))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise RunFileError(f"{path} is not a race record ({type(err).__name__}: {err})") from None
    if any(i not in range(len(configs)) for w in waves for i in w.jobs.values()) or not all(
            math.isfinite(w.priced_gpu_hours) for w in waves):
        raise RunFileError(f"{path} is not a race record (a job of a config it does not list)")
    return race
