"""A race's settings (`race.*`; `analysis.race` says what a race is), read by the sweeper, its
dry run and the analysis without either's imports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RaceSettings:
    """`race.*` of a sweep: `max_seeds` the most seeds a config gets (and the most looks),
    `alpha` the family-wise error rate of all the race's eliminations together,
    `budget_gpu_hours` what the race may spend (None: no budget), `first_seed` wave 1's seed
    (wave w runs seed `first_seed + w - 1`)."""

    max_seeds: int
    alpha: float
    budget_gpu_hours: float | None = None
    first_seed: int = 0

    @property
    def alpha_per_look(self) -> float:
        """Each look's family-wise error rate: `alpha / max_seeds` (Bonferroni over the looks)."""
        return self.alpha / self.max_seeds

    def seed_of(self, wave: int) -> int:
        """The seed wave `wave` (1-based) runs."""
        return self.first_seed + wave - 1

    @staticmethod
    def from_config(race: Mapping[str, Any], seed: int) -> RaceSettings | None:
        """The settings of `cfg.race` (None when `race.max_seeds` is null: no race); `seed` the
        run's `seed`, wave 1's."""
        if race.get("max_seeds") is None:
            return None
        budget = race.get("budget_gpu_hours")
        return RaceSettings(int(race["max_seeds"]), float(race["alpha"]),
                            None if budget is None else float(budget), int(seed))
