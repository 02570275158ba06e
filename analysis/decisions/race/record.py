"""A race's record (`RACE_FILE` in the sweep directory): its configs, settings and waves, each
wave's jobs, seed, price, measured spend and the look after it (`analysis.decisions.race.looks` runs races and
says what they are). Read by the race itself when it is relaunched, the report's "Race" section,
the chain, promote and the live monitor (`make watch`).

The record is a cache of what the runs say, never a second truth: each config is recorded with
its resolved config (`identities`), and `job_refusal` checks a job directory's trained config and
seed against the wave that claims it (`grpo.run.run_config.curve_differences`: the keys that
change a curve, not the spelling of a command line). `check_relaunch` is the check a relaunch
(and its dry run) makes before anything is written. A relaunched race and every reader of one
(the report, the chain, promote, `make watch`) replay its looks from the runs
(`analysis.decisions.race.looks.replay_looks`): the record says which configs raced, in which order, and what the
sweeper priced; where it says otherwise than the runs, the runs win and the difference is said."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from analysis.decisions.race.boundary import Decision
from analysis.decisions.race.settings import RaceSettings
from analysis.readers.run_rows import FINISHED_STATUSES, job_dirs
from grpo.run.files import RunFileError, atomic_write_text, read_json, read_status
from grpo.run.run_config import RACE_SEED, curve_differences, describe_differences, trained_config

RACE_FILE = "race.json"
"""The race's record in the sweep directory."""
MAX_RACE_BYTES = 64 << 20
"""Largest race record read (one of 1000 configs, each with its resolved config of about 5 kB,
over 10 waves is about 6 MB)."""
VERSION = 2
"""The record's format: 2 records each config's resolved config (1 did not: rebuilt)."""
@dataclass
class Wave:
    """One wave: its `seed`, its jobs (job number -> config index), the hours (the race's unit)
    the sweeper priced it at, the look after it (`decision`, None until the wave is done), the
    label the analysis gives each config (config index -> label) and the hours each config's run
    measured (`spent_hours`, config index -> hours, set at the look; None before)."""

    seed: int
    jobs: dict[int, int]
    priced_gpu_hours: float
    decision: Decision | None = None
    labels: dict[int, str] = field(default_factory=dict)
    spent_hours: dict[int, float] | None = None


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
    identities: list[dict[str, Any]] = field(default_factory=list)
    """Each config's resolved config (its seed wave 1's): what its runs must have trained with."""

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
        """The hours (`unit`) of the waves so far: as their finished runs measured them, as priced
        for a wave not looked at yet."""
        return sum(w.priced_gpu_hours if w.spent_hours is None else sum(w.spent_hours.values())
                   for w in self.waves)

    def fixed_grid_hours(self) -> float:
        """What the fixed grid (every config to max_seeds seeds) would spend: each config's
        measured hours a run (its runs' mean) times max_seeds, the price where none measured."""
        measured: dict[int, list[float]] = {}
        for wave in self.waves:
            for i, hours in (wave.spent_hours or {}).items():
                measured.setdefault(i, []).append(hours)
        if not measured:
            return self.grid_gpu_hours
        per_run = self.grid_gpu_hours / self.settings.max_seeds / max(1, len(self.configs))
        return self.settings.max_seeds * sum(
            sum(measured[i]) / len(measured[i]) if i in measured else per_run
            for i in range(len(self.configs)))

    def label(self, index: int) -> str:
        """Config `index` in words: its overrides that not every config shares."""
        return short_labels(self.configs)[index]

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
                f"{self.spent_gpu_hours():.3g} of the fixed grid's {self.fixed_grid_hours():.3g} "
                f"{self.unit}" + ("" if budget is None else f" (budget {budget:g})"))

    def write(self, sweep_dir: Path) -> None:
        """Record the race in `sweep_dir` (atomically)."""
        payload = {"version": VERSION, "configs": self.configs, "settings": asdict(self.settings),
                   "grid_gpu_hours": self.grid_gpu_hours, "unit": self.unit,
                   "identities": self.identities,
                   "waves": [{"seed": w.seed, "jobs": {str(n): i for n, i in w.jobs.items()},
                              "priced_gpu_hours": w.priced_gpu_hours,
                              "spent_hours": None if w.spent_hours is None else {
                                  str(i): h for i, h in w.spent_hours.items()},
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
                    str(decision["seed_variance"]),
                    None if decision.get("level") is None else float(decision["level"])),
                {int(i): str(label) for i, label in entry["labels"].items()},
                None if entry["spent_hours"] is None else {
                    int(i): float(h) for i, h in entry["spent_hours"].items()}))
        identities = payload["identities"]
        if payload["version"] != VERSION or not (
                isinstance(identities, list) and len(identities) == len(configs)
                and all(isinstance(i, dict) for i in identities)):
            raise ValueError(f"a record of format {payload['version']}, not {VERSION}, or without "
                             "each config's resolved config")
        race = Race(configs, settings, float(payload["grid_gpu_hours"]), waves,
                    str(payload["unit"]), identities)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise RunFileError(f"{path} is not a race record ({type(err).__name__}: {err})") from None
    numbers = [num for w in waves for num in w.jobs]
    if any(i not in range(len(configs)) for w in waves for i in w.jobs.values()) or not all(
            math.isfinite(h) for w in waves for h in [w.priced_gpu_hours, *(w.spent_hours or {}).values()]) or len(set(numbers)) != len(numbers) \
            or any(num < 0 for num in numbers):
        raise RunFileError(f"{path} is not a race record (a job of a config it does not list, or "
                           "a job in two waves)")
    return race


def job_refusal(run_dir: Path, identity: dict[str, Any], seed: int, claim: str) -> str | None:
    """Why the run in `run_dir` is not the run of config `identity` (a resolved config) with seed
    `seed` that `claim` (words: `wave 2 of the race`) expects; None where it is, or where it has
    not trained yet (no readable config and no finished status: the run itself resumes or starts
    it). A finished run without a readable config is refused: what trained it is unknown."""
    trained = trained_config(run_dir)
    if trained is None:
        status = read_status(run_dir) if run_dir.is_dir() else None
        if status is not None and status.get("status") in FINISHED_STATUSES:
            return (f"{run_dir} holds a finished run whose config cannot be read (no checkpoint "
                    f"stores it and .hydra/config.yaml is missing or unreadable); {claim} "
                    "cannot tell what trained it")
        return None
    expected = {**identity, RACE_SEED: seed}
    differences = curve_differences(trained, expected)
    if not differences:
        return None
    return (f"{run_dir} holds a run that is not {claim}'s: {describe_differences(differences)} "
            "(trained -> expected)")


def match_configs(recorded: Race, identities: list[dict[str, Any]], labels: list[str]) -> list[int] | str:
    """For each config of `recorded`, the index of the config of this launch (`identities` its
    resolved configs, `labels` their overrides in words) that gives the same curves
    (`curve_differences`, seed aside); or, where the two sets differ, the refusal naming each
    config of one without a twin in the other and what sets it apart from its nearest one."""
    def differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
        return curve_differences({**a, RACE_SEED: 0}, {**b, RACE_SEED: 0})

    order: list[int] = []
    free = list(range(len(identities)))
    missing: list[int] = []
    for i, identity in enumerate(recorded.identities):
        twin = next((j for j in free if not differences(identity, identities[j])), None)
        if twin is None:
            missing.append(i)
        else:
            free.remove(twin)
            order.append(twin)
    if not missing and not free:
        return order

    def nearest(a: dict[str, Any], among: list[dict[str, Any]]) -> int:
        return min(range(len(among)), key=lambda k: len(differences(a, among[k])))

    lines = []
    for i in missing:
        j = nearest(recorded.identities[i], identities)
        lines.append(f"the recorded config [{recorded.label(i)}] is not launched (the nearest "
                     f"launched, [{labels[j]}]: "
                     f"{describe_differences(differences(recorded.identities[i], identities[j]))})")
    for j in free:
        i = nearest(identities[j], recorded.identities)
        lines.append(f"the launched config [{labels[j]}] is not in the record (the nearest "
                     f"recorded, [{recorded.label(i)}]: "
                     f"{describe_differences(differences(recorded.identities[i], identities[j]))})")
    return "; ".join(lines) + " (recorded -> launched)"


@dataclass
class Relaunch:
    """What a race's launch found in its sweep directory (`relaunch_refusal` found nothing to
    refuse): `order` the launched config of each position of the race (the record's order, else
    wave 1's job directories'), `record` the record where it is usable, `notes` what was rebuilt
    and why."""

    order: list[int]
    record: Race | None
    notes: list[str] = field(default_factory=list)


def short_labels(configs: Sequence[Sequence[str]]) -> list[str]:
    """Each config's overrides that not every config of `configs` shares, in words."""
    shared = set(configs[0]).intersection(*configs[1:]) if len(configs) > 1 else set()
    return [" ".join(o for o in overrides if o not in shared) or "(no overrides)" for overrides in configs]


def job_numbers(sweep_dir: Path) -> list[int]:
    """The job numbers of the sweep directory's job directories (`run_rows.job_dirs`); none
    where there is no sweep directory yet."""
    return [int(p.name) for p in job_dirs(sweep_dir)] if sweep_dir.is_dir() else []


def _settings_differences(recorded: RaceSettings, settings: RaceSettings) -> str:
    """The settings of two races that make them different races (the budget may change)."""
    pairs = [("race.max_seeds", recorded.max_seeds, settings.max_seeds),
             ("race.alpha", recorded.alpha, settings.alpha),
             ("seed (wave 1's)", recorded.first_seed, settings.first_seed)]
    return ", ".join(f"{key}: {old} -> {new}" for key, old, new in pairs if old != new)


def check_relaunch(sweep_dir: Path, settings: RaceSettings, identities: list[dict[str, Any]],
                   labels: list[str]) -> Relaunch | str:
    """What a launch of a race of the configs `identities` (resolved, their seed wave 1's;
    `labels` their overrides in words) with `settings` finds in `sweep_dir`, or the refusal (one
    text naming what differs and the fix) where the directory holds another race or a run that
    is not one of this race's. Reads only: the dry run and the launch ask it before anything is
    written. A missing or damaged record is no refusal: the race is rebuilt from its runs."""
    fix = ("; relaunch it with the command that started it, or give this race its own "
           "hydra.sweep.dir; nothing was submitted")
    notes: list[str] = []
    try:
        record = read_race(sweep_dir)
    except RunFileError as err:
        record = None
        notes.append(f"{err}: the race is rebuilt from its runs' own configs")
    if record is not None:
        differs = _settings_differences(record.settings, settings)
        if differs:
            return f"{sweep_dir} holds a race of other settings ({differs}; recorded -> launched){fix}"
        order = match_configs(record, identities, labels)
        if isinstance(order, str):
            return f"{sweep_dir} holds a race of other configs: {order}{fix}"
    else:
        order = _order_from_runs(sweep_dir, settings, identities)
        if not notes and (found := job_numbers(sweep_dir)):
            notes.append(f"{sweep_dir / RACE_FILE} is missing beside {len(found)} job "
                         "directories: the race is rebuilt from its runs' own configs")
    claims = {} if record is None else {
        num: (order[i], wave.seed, f"job {num} of wave {n} of the race")
        for n, wave in enumerate(record.waves, 1) for num, i in wave.jobs.items()}
    seeds = range(settings.first_seed, settings.first_seed + settings.max_seeds)
    for num in job_numbers(sweep_dir):
        run_dir = sweep_dir / str(num)
        if num in claims:
            j, seed, claim = claims[num]
            refusal = job_refusal(run_dir, identities[j], seed, claim)
        else:
            refusal = _stray_refusal(run_dir, identities, labels, seeds)
        if refusal is not None:
            return refusal + ("; move that directory away (the race then runs that job again) "
                              "or give this race its own hydra.sweep.dir; nothing was submitted")
    return Relaunch(order, record, notes)


def _order_from_runs(sweep_dir: Path, settings: RaceSettings, identities: list[dict[str, Any]]) -> list[int]:
    """Without a record, the race's order of the configs: wave 1's job directories' (job j holds
    the run of the j-th config with the first seed), the launched order where they say nothing."""
    free = list(range(len(identities)))
    found: dict[int, int] = {}
    for num in range(len(identities)):
        trained = trained_config(sweep_dir / str(num))
        if trained is None:
            continue
        twin = next((j for j in free if not curve_differences(
            trained, {**identities[j], RACE_SEED: settings.first_seed})), None)
        if twin is not None:
            found[num] = twin
            free.remove(twin)
    return [found[num] if num in found else free.pop(0) for num in range(len(identities))]


def _stray_refusal(run_dir: Path, identities: list[dict[str, Any]], labels: list[str],
                   seeds: range) -> str | None:
    """Why the run in `run_dir`, which no record claims, cannot be one of the race's (a config
    of `identities` with a seed of `seeds`); None where it can, or has not trained."""
    trained = trained_config(run_dir)
    if trained is None:
        return job_refusal(run_dir, identities[0], seeds.start, "this race")
    seed = trained.get(RACE_SEED)
    differences = [curve_differences(trained, {**identity, RACE_SEED: seed}) for identity in identities]
    nearest = min(range(len(identities)), key=lambda j: len(differences[j]))
    if differences[nearest]:
        why = (f"{describe_differences(differences[nearest])} (trained -> the nearest config of "
               f"this race, [{labels[nearest]}])")
    elif seed not in seeds:
        why = f"its seed {seed} is not one of the race's seeds ({seeds.start}-{seeds.stop - 1})"
    else:
        return None
    return f"{run_dir} holds a run that is not one of this race's: {why}"
