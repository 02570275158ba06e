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
from grpo.config.keys import PROMOTED_GROUP
from grpo.grading.rewards import PLACEBO
from grpo.run.files import RunFileError, atomic_write_text, read_json, read_yaml
from grpo.run.finished import read_run_status
from grpo.run.outcomes import (
    CONFIRM_DIR,
    OUTCOME_METRICS,
    OUTCOMES_DIR,
    EvalOutcomes,
    checked_outcomes,
)

FORMAT = "grpo-confirm/1"
SUFFIXES = {True: "-confirm", False: "-confirm-no-retrain"}
"""The confirmation's directory beside the sweep it confirms, by whether it trains again."""
MAX_RECORD_BYTES = 1 << 20
PLACEBO_OPTION = "placebo"
"""The option of a confirmation's group that runs its placebo arm (``--placebo``)."""
def placebo_arm(best: str) -> Finalist:
    """The placebo arm of a confirmation whose best finalist is ``best`` (its label): rank 1's
    config on ``reward=random``, run by option :data:`PLACEBO_OPTION`."""
    return Finalist(1, f"{best} on reward={PLACEBO} (placebo)", (PLACEBO_OPTION,))


GROUP = f"{PROMOTED_GROUP}/confirm"
"""The config group of a confirmation's finalists, in ``<C>/conf/``: a promoted group, so that its
configs are named by the values their options set (:mod:`analysis.names.config_names`)."""


def confirmation_dir(sweep: Path, retrain: bool) -> Path:
    """Where the confirmation of ``sweep`` is: ``<sweep>-confirm`` (fresh seeds, trained again)
    or ``<sweep>-confirm-no-retrain`` (the sweep's own final models), beside the directory
    ``sweep`` names (its links followed: a sweep spelt through a link has the one confirmation)."""
    sweep = sweep.resolve()
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


class _Bad(ValueError):
    """A field of a confirmation's record that is not what :meth:`ConfirmRecord.to_json` writes."""


def _whole(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"its {field} is {value!r}, not a whole number")
    return value


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise _Bad(f"its {field} is {value!r}, not a name")
    return value


def _items(value: Any, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise _Bad(f"its {field} is {value!r}, not a list")
    return value


def _finalist(data: Any, field: str) -> Finalist:
    if not isinstance(data, dict) or set(data) != {"rank", "label", "options"}:
        raise _Bad(f"its {field} is {data!r}, not a mapping of rank, label and options")
    options = tuple(_text(o, f"{field}.options[{i}]")
                    for i, o in enumerate(_items(data["options"], f"{field}.options")))
    if not options:
        raise _Bad(f"its {field}.options is empty")
    return Finalist(_whole(data["rank"], f"{field}.rank"), _text(data["label"], f"{field}.label"),
                    options)


def _launched_options(arguments: tuple[str, ...], group: str) -> set[str] | None:
    """The options of ``group`` the launch's ``arguments`` sweep (``+<group>=a,b``; None: they
    name none, a record written by hand)."""
    given = [a.split("=", 1)[1] for a in arguments if a.startswith(f"+{group}=")]
    return {o for line in given for o in line.split(",")} if given else None


def _checked(data: Any) -> ConfirmRecord:
    """``confirm.json``'s data as :class:`ConfirmRecord`; _Bad naming the field that is not as
    :meth:`ConfirmRecord.to_json` writes it (every field typed as written, the finalists ranked
    1..k in order, each option of the group one arm's, the placebo arm rank 1's on option
    :data:`PLACEBO_OPTION`, the seeds distinct and given exactly where it retrains)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _Bad(f"its format is not {FORMAT!r}")
    missing = sorted({"source", "retrain", "finalists", "seeds", "group", "metric",
                      "arguments"} - set(data))
    if missing:
        raise _Bad(f"its {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing")
    retrain = data["retrain"]
    if not isinstance(retrain, bool):
        raise _Bad(f"its retrain is {retrain!r}, not true or false")
    finalists = tuple(_finalist(f, f"finalists[{i}]")
                      for i, f in enumerate(_items(data["finalists"], "finalists")))
    if not finalists:
        raise _Bad("its finalists are none")
    ranks = [f.rank for f in finalists]
    if ranks != list(range(1, len(finalists) + 1)):
        raise _Bad(f"its finalists' ranks are {ranks}, not 1..{len(finalists)} in order")
    seeds = tuple(_whole(s, f"seeds[{i}]") for i, s in enumerate(_items(data["seeds"], "seeds")))
    if len(set(seeds)) != len(seeds) or retrain != bool(seeds):
        raise _Bad(f"its seeds are {list(seeds)}: " + (
            "one twice" if len(set(seeds)) != len(seeds) else
            "none, for a confirmation that trains again" if retrain else
            "fresh seeds, for one that evaluates the sweep's own final models"))
    group, metric = _text(data["group"], "group"), _text(data["metric"], "metric")
    if group != GROUP:
        raise _Bad(f"its group is {group!r}, not {GROUP!r}")
    if metric not in OUTCOME_METRICS:
        raise _Bad(f"its metric is {metric!r}, not one of {', '.join(OUTCOME_METRICS)}")
    arguments = tuple(_text(a, f"arguments[{i}]")
                      for i, a in enumerate(_items(data["arguments"], "arguments")))
    placebo = data.get("placebo")
    arm = None if placebo is None else _finalist(placebo, "placebo")
    if arm is not None and (arm != placebo_arm(finalists[0].label) or not retrain):
        raise _Bad(f"its placebo is {placebo!r}: a placebo arm is rank 1's config on option "
                   f"{PLACEBO_OPTION!r} of a confirmation that trains again, labelled "
                   f"{placebo_arm(finalists[0].label).label!r}")
    options = [o for f in (*finalists, *([arm] if arm else [])) for o in f.options]
    if len(set(options)) != len(options):
        raise _Bad(f"its options {options} name one twice")
    launched = _launched_options(arguments, group)
    if launched is not None and launched != set(options):
        raise _Bad(f"its arguments launch options {sorted(launched)} of {group}, its finalists "
                   f"and placebo name {sorted(options)}")
    return ConfirmRecord(Path(_text(data["source"], "source")), retrain, finalists, seeds, group,
                         metric, arguments, arm)


def read_record(sweep: Path) -> ConfirmRecord | None:
    """``sweep``'s ``confirm.json`` (None: there is none, ``sweep`` is no confirmation);
    ValueError, in one line naming the file and the field, where it is unreadable or not as
    :meth:`ConfirmRecord.to_json` writes it (:func:`_checked`). A record without ``placebo`` (one
    written before the placebo arm) has none, unless its arguments launched one."""
    path = sweep / CONFIRM_RECORD
    if not path.exists():
        return None
    try:
        return _checked(read_json(path, MAX_RECORD_BYTES))
    except (RunFileError, ValueError) as error:
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


def stray_runs(sweep: Path, record: ConfirmRecord) -> list[str]:
    """The job directories of the confirmation in ``sweep`` that ran an option of ``record``'s
    group that none of its finalists (nor its placebo arm) names, in words: a record edited
    after the launch (:func:`confirmed_runs` reads no such run)."""
    options = record.option_finalist()
    return [f"`{run_dir.name}` ran {record.group}={option}" for run_dir in job_dirs(sweep)
            if (option := _choices(run_dir).get(record.group)) is not None
            and option not in options]


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


def confirmations_of(sweep: Path) -> tuple[list[tuple[Path, ConfirmRecord]], list[str]]:
    """The confirmations of ``sweep`` beside it (retrained first), each with its record (those
    whose record names another sweep are not its), and the one-line errors of those whose
    record cannot be read (:func:`read_record`)."""
    found, unreadable = [], []
    for retrain in (True, False):
        target = confirmation_dir(sweep, retrain)
        try:
            record = read_record(target)
        except ValueError as error:
            unreadable.append(str(error))
            continue
        if record is not None and record.source.resolve() == sweep.resolve():
            found.append((target, record))
    return found, unreadable
