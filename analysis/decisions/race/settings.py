"""A race's settings (`race.*`; :mod:`analysis.decisions.race.looks` says what a race is), read by
the sweeper, its dry run and the race without pandas; and the calibration of what a race spends
(`CALIBRATION_FILE`), which the dry run prints as the race's expected case."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CALIBRATION_FILE = Path(__file__).with_name("calibration.json")
"""What `bench/race_calibration.py --record` measured: simulated races with a known truth, each
case's share of the fixed grid's GPU-hours the race spent (the dry run's expected case)."""


@dataclass(frozen=True)
class RaceSettings:
    """`race.*` of a sweep: `max_seeds` the most seeds a config gets (and the most looks),
    `alpha` the family-wise error rate of all the race's eliminations together (each look's
    level: `analysis.decisions.race.boundary`),
    `budget_gpu_hours` what the race may spend (None: no budget), `first_seed` wave 1's seed
    (wave w runs seed `first_seed + w - 1`)."""

    max_seeds: int
    alpha: float
    budget_gpu_hours: float | None = None
    first_seed: int = 0

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


@dataclass(frozen=True)
class CalibratedCase:
    """One case of the calibration: the `truth` (how the configs differ), the seed sd (points
    of reward), the race's mean spend as a `share` of the fixed grid with its Monte Carlo
    standard error `share_se`."""

    truth: str
    seed_sd_points: float
    share: float
    share_se: float


@dataclass(frozen=True)
class Calibration:
    """The calibration's setting (`n_configs` configs, `max_seeds`, `alpha`, `races` a case) and
    its cases."""

    n_configs: int
    max_seeds: int
    alpha: float
    races: int
    cases: tuple[CalibratedCase, ...]

    def expected_text(self, worst: float, unit: str, n_configs: int, settings: RaceSettings) -> str:
        """The dry run's expected case: the race's spend in each calibrated truth, at each seed
        sd, as a share of the worst case `worst` (the fixed grid, ± the calibration's Monte Carlo
        standard error) and in `unit`; says where this race's setting differs from the
        calibration's (then the shares are a rough guide)."""
        truths = {case.truth: [c for c in self.cases if c.truth == case.truth] for case in self.cases}
        spends = "; ".join(
            f"{truth}: " + ", ".join(f"{100 * c.share:.0f}% ± {100 * c.share_se:.1f} = "
                                     f"{worst * c.share:.3g} {unit} at seed sd "
                                     f"{c.seed_sd_points:g} points" for c in cases)
            for truth, cases in truths.items())
        setting = (self.n_configs, self.max_seeds, self.alpha)
        differs = "" if setting == (n_configs, settings.max_seeds, settings.alpha) else (
            f" (calibrated with {self.n_configs} configs, max_seeds {self.max_seeds}, alpha "
            f"{self.alpha:g}; this race has {n_configs}, {settings.max_seeds}, {settings.alpha:g}: "
            "a rough guide)")
        return (f"race: expected spend, as a share of the worst case, from {self.races} simulated "
                f"races a case (bench/race_calibration.py){differs}: {spends}")

    def write(self, path: Path = CALIBRATION_FILE) -> None:
        """Record the calibration in `path` (what `bench/race_calibration.py --record` does)."""
        payload = {"n_configs": self.n_configs, "max_seeds": self.max_seeds, "alpha": self.alpha,
                   "races": self.races, "cases": [vars(case) for case in self.cases]}
        path.write_text(json.dumps(payload, indent=1) + "\n")

    @staticmethod
    def read(path: Path = CALIBRATION_FILE) -> Calibration:
        """The recorded calibration (a file shipped with the project)."""
        payload = json.loads(path.read_text())
        return Calibration(int(payload["n_configs"]), int(payload["max_seeds"]),
                           float(payload["alpha"]), int(payload["races"]),
                           tuple(CalibratedCase(**case) for case in payload["cases"]))
