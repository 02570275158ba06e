"""A confirmation read back: its record and each of its runs' confirmed outcomes.

A confirmation (``python -m analysis confirm``, :mod:`analysis.outputs.confirm`) is a sweep of its
own beside the sweep it confirms, ``<S>-confirm`` (``<S>-confirm-no-retrain`` for S's own final
models), holding ``confirm.json`` (:class:`ConfirmRecord`: the sweep it confirms, each finalist's
rank, label and config options, the fresh seeds, the launch's arguments, the placebo arm where
there is one) and one run directory
per job, each with its final policy's outcomes on the held-out problems in
``confirm_outcomes/step_XXXXXX.json`` (:data:`grpo.run.outcomes.CONFIRM_DIR`). Nothing else reads
those files: a confirmation's problems play no part in any ranking, race, pruner, promote or
chain pick. The selection's problems are read here too, problem by problem
(:func:`selection_fingerprints`: every fingerprint the sweep's outcome files name), so that a
confirmation whose problems overlap them is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.names.config_names import value_of
from analysis.readers.collect import CONFIRM_RECORD
from analysis.readers.run_rows import job_dirs
from grpo.run.files import RunFileError, atomic_write_text, read_json, read_yaml
from grpo.run.finished import read_run_status
from grpo.run.outcomes import CONFIRM_DIR, OUTCOMES_DIR, EvalOutcomes, checked_outcomes

FORMAT = "grpo-confirm/1"
SUFFIXES = {True: "-confirm", False: "-confirm-no-retrain"}
"""The confirmation's directory beside the sweep it confirms, by whether it trains again."""
MAX_RECORD_BYTES = 1 << 20
PLACEBO_OPTION = "placebo"
"""The option of a confirmation's group that runs its placebo arm (``--placebo``)."""


def confirmation_dir(sweep: Path, retrain: bool) -> Path:
    """Where the confirmation of ``sweep`` is: ``<sweep>-confirm`` (fresh seeds, trained again)
    or ``<sweep>-confirm-no-retrain`` (the sweep's own final models)."""
    return sweep.parent / f"{sweep.name}{SUFFIXES[retrain]}"


@dataclass(frozen=True)
class Finalist:
    """One confirmed config: its ``rank`` in the source sweep's ranking, its ``label`` there, and
    the options of the confirmation's config group that run it (``top1``; without retraining one
    per source run, ``top1_seed0``, ...)."""

    rank: int
    label: str
    options: tuple[str, ...]


@dataclass(frozen=True)
class ConfirmRecord:
    """``confirm.json``: the sweep confirmed (``source``), whether its finalists are trained again
    with fresh ``seeds`` (``retrain``) or its own final models evaluated, the finalists, the config
    group that holds their options (``group``: ``promoted/confirm``), the metric the selection
    read, the launch's ``arguments`` (the same command again launches the same ones) and the
    placebo arm (``--placebo``: the best finalist's config trained on ``reward=random`` with the
    same fresh seeds, option :data:`PLACEBO_OPTION`; None: none)."""

    source: Path
    retrain: bool
    finalists: tuple[Finalist, ...]
    seeds: tuple[int, ...]
    group: str
    metric: str
    arguments: tuple[str, ...]
    placebo: Finalist | None = None

    def to_json(self) -> str:
        return json.dumps({
            "format": FORMAT, "source": str(self.source), "retrain": self.retrain,
            "finalists": [_finalist_json(f) for f in self.finalists],
            "seeds": list(self.seeds), "group": self.group, "metric": self.metric,
            "arguments": list(self.arguments),
            "placebo": None if self.placebo is None else _finalist_json(self.placebo)},
            indent=1) + "\n"

    def write(self, sweep: Path) -> None:
        atomic_write_text(sweep / CONFIRM_RECORD, self.to_json())

    def option_finalist(self) -> dict[str, Finalist]:
        """Each option of the group -> the finalist (or the placebo arm) it runs."""
        arms = (*self.finalists, *([self.placebo] if self.placebo is not None else []))
        return {option: f for f in arms for option in f.options}


def _finalist_json(finalist: Finalist) -> dict[str, Any]:
    return {"rank": finalist.rank, "label": finalist.label, "options": list(finalist.options)}


def _finalist(data: Any) -> Finalist:
    return Finalist(int(data["rank"]), str(data["label"]), tuple(str(o) for o in data["options"]))


def read_record(sweep: Path) -> ConfirmRecord | None:
    """``sweep``'s ``confirm.json`` (None: there is none, ``sweep`` is no confirmation);
    ValueError, naming the file, where it is unreadable or not one."""
    path = sweep / CONFIRM_RECORD
    if not path.exists():
        return None
    try:
        data = read_json(path, MAX_RECORD_BYTES)
        finalists = tuple(_finalist(f) for f in data["finalists"])
        if data.get("format") != FORMAT or not finalists:
            raise ValueError("not a confirmation's record")
        placebo = data.get("placebo")
        return ConfirmRecord(Path(str(data["source"])), bool(data["retrain"]), finalists,
                             tuple(int(s) for s in data["seeds"]), str(data["group"]),
                             str(data["metric"]), tuple(str(a) for a in data["arguments"]),
                             None if placebo is None else _finalist(placebo))
    except (RunFileError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path} is unreadable or not a confirmation's record ({error}); move "
                         "the directory away and confirm again") from None


@dataclass(frozen=True)
class ConfirmedRun:
    """One run of a confirmation: its directory, the finalist it runs, its seed, status and last
    step, and its confirmed outcomes (its final policy on the held-out problems), or what is
    wrong with them in words (missing: the run has not confirmed yet, or stopped early)."""

    run_dir: Path
    finalist: Finalist
    seed: int | None
    status: str
    last_step: int | None
    outcomes: EvalOutcomes | None
    problem: str = ""


def _choices(run_dir: Path) -> dict[str, str]:
    try:
        hydra = read_yaml(run_dir / ".hydra" / "hydra.yaml")
    except (OSError, ValueError, RunFileError):
        return {}
    choices = (((hydra or {}).get("hydra") or {}).get("runtime") or {}).get("choices") \
        if isinstance(hydra, dict) else None
    return {str(k): str(v) for k, v in choices.items()} if isinstance(choices, dict) else {}


def _config(run_dir: Path) -> dict[str, Any] | None:
    try:
        config = read_yaml(run_dir / ".hydra" / "config.yaml")
    except (OSError, ValueError, RunFileError):
        return None
    return config if isinstance(config, dict) else None


def confirmed_runs(sweep: Path, record: ConfirmRecord) -> list[ConfirmedRun]:
    """Each run of the confirmation in ``sweep`` (one per job directory whose record names an
    option of ``record``'s group), in job order."""
    options = record.option_finalist()
    runs = []
    for run_dir in job_dirs(sweep):
        option = _choices(run_dir).get(record.group)
        if option not in options:
            continue
        seed = value_of({}, _config(run_dir), "seed")
        status = read_run_status(run_dir) or {}
        last = status.get("last_step")
        last = last if isinstance(last, int) and not isinstance(last, bool) else None
        found = checked_outcomes(run_dir, last, CONFIRM_DIR) if last is not None else None
        problem = "" if isinstance(found, EvalOutcomes) else (
            found if isinstance(found, str) else
            f"no confirmation yet ({status.get('status', 'not started')}"
            + (f" at step {last}" if last is not None else "") + ")")
        runs.append(ConfirmedRun(run_dir, options[option], seed if isinstance(seed, int) else None,
                                 str(status.get("status", "pending")), last,
                                 found if isinstance(found, EvalOutcomes) else None, problem))
    return runs


def selection_fingerprints(run_dirs: list[Path]) -> tuple[set[str], list[str]]:
    """Every problem the evaluations of the runs in ``run_dirs`` read (each outcome file's
    per-problem fingerprints), and the runs whose outcome files do not name their problems one
    by one (written before they were kept, or none at all), in words."""
    found: set[str] = set()
    unnamed = []
    for run_dir in run_dirs:
        files = sorted((run_dir / OUTCOMES_DIR).glob("step_*.json"))
        named = 0
        for path in files:
            step = path.stem.removeprefix("step_")
            outcome = checked_outcomes(run_dir, int(step), OUTCOMES_DIR) if step.isdigit() else None
            if isinstance(outcome, EvalOutcomes) and outcome.problems is not None:
                found |= set(outcome.problems)
                named += 1
        if files and named < len(files):
            unnamed.append(f"{run_dir} ({len(files) - named} of its {len(files)} outcome files)")
        elif not files:
            unnamed.append(f"{run_dir} (no {OUTCOMES_DIR}/)")
    return found, unnamed


def confirmations_of(sweep: Path) -> list[tuple[Path, ConfirmRecord]]:
    """The confirmations of ``sweep`` beside it (retrained first), each with its record; those
    whose record names another sweep are not its."""
    found = []
    for retrain in (True, False):
        target = confirmation_dir(sweep, retrain)
        try:
            record = read_record(target)
        except ValueError:
            continue
        if record is not None and record.source.resolve() == sweep.resolve():
            found.append((target, record))
    return found
