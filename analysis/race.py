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
it). `RACE_FILE` in the sweep directory records each wave's jobs, seed and decision: the
report's "Race" section reads it, and a relaunched sweeper reads it to continue.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from analysis.aggregate import rank
from analysis.collect import Collection
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
        """The config indices that go on to the next wave (all of them before wave 1)."""
        if not self.waves:
            return list(range(len(self.configs)))
        last = self.waves[-1]
        return sorted(last.jobs.values()) if last.decision is None else [
            i for i in sorted(last.jobs.values()) if last.labels.get(i) in last.decision.alive]

    def spent_gpu_hours(self) -> float:
        """The GPU-hours of the waves so far, as priced."""
        return sum(w.priced_gpu_hours for w in self.waves)

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
