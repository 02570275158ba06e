"""Collect one or more Hydra sweep directories into tidy pandas frames.

Data contract (written by the trainer and the launcher; this module only reads it)
-------------------------------------------------------------------------------
A sweep directory ``<outputs>/<experiment>/<timestamp>/`` holds:

* ``multirun.yaml`` -- Hydra's sweep config. The swept keys and their values are read, in
  Hydra's BasicSweeper order, from ``hydra.sweeper.params`` (``key: "v1,v2"``) and then from
  the sweep overrides of ``hydra.overrides.task`` (``key=v1,v2``); a later entry for the
  same key wins. When the file is missing, the swept keys are the override keys whose value
  differs between runs.
* one run directory per job, ``<sweep>/<job_num>/`` (``0``, ``1``, ...), holding

  - ``.hydra/config.yaml``: the run's config (``experiment_name``, ``seed``,
    ``learning_rate``, ``n_grpo_steps``, ``rollout_batch_size``, ``train_batch_size``,
    ``micro_batch_size``, ``group_size``, ``loss.name``, ``normalization.name``,
    ``std_norm.enabled``, ``std_norm.scope``, ``off_policy.epochs``, ``prompt.name``, ``model.name``,
    ``data.name``, ``cluster.gpus_per_job``, ``eval.temperature``, the evaluated problems'
    keys, ``analysis.seed_variance_from``; interpolations are resolved on read);
  - ``.hydra/overrides.yaml``: the job's overrides, a YAML list of ``key=value`` strings;
  - ``.hydra/hydra.yaml``: ``hydra.runtime.choices`` says which swept keys are config groups;
  - ``checkpoints/step_N/run_config.json``: the same three texts as they were when the newest
    checkpoint was written; where ``.hydra/config.yaml`` differs from them in a key that changes
    the curve (rewritten after it trained) or is lost, these are read instead and the run's
    ``problems`` say so;
  - ``metrics.jsonl``: append-only, one JSON object per step with ``step`` (GRPO steps done:
    0 is the evaluation of the initial policy, before any update, with ``eval/*`` only; 1..N
    the GRPO steps), ``time/elapsed_s`` (wall-clock since the start, continuing across resumes),
    ``time/elapsed_no_eval_s`` (the same without evaluation time) and the ``train/*``,
    ``time/*``, ``throughput/*``, ``memory/*`` metrics; ``eval/*`` only on eval steps. Non-finite values may be written as the strings ``"nan"``/``"inf"``/``"-inf"``
    (strict JSON) and are read back as floats. A step logged twice (a resume that replayed
    it) keeps its LAST occurrence; lines that are not JSON objects with an integer ``step``
    (the truncated last line of a killed run) are skipped and counted in ``n_bad_lines``;
    when a resume appended a row to such a line without a newline in between, that row is
    still read;
  - ``status.json``: ``{"status": "running"|"completed"|"diverged"|"collapsed"|"pruned"|"failed",
    "reason", "last_step", "n_grpo_steps", "restarts", "resumed_from", "updated_at"}``.

  Any of these may be missing or damaged. A run without a readable ``status.json`` gets status
  ``pending`` when it has no metrics and ``unknown`` when it has some; a run without metrics
  has no step rows. What a run lacks (no metrics, a missing or unreadable ``status.json`` or
  ``.hydra/`` file) is listed in its ``problems``.
  GPU-hours are ``time/elapsed_s`` (evaluation included: the GPUs are held for it) of the last
  step / 3600 x ``cluster.gpus_per_job`` (2 when absent; 0 for CPU runs); CPU-hours the same
  x ``cluster.cpus_per_job`` (1 when absent), the measure of runs without a GPU. Curves and
  comparisons against wall-clock use ``TRAIN_CLOCK`` instead, so that evaluation frequency
  does not change a config's speed (runs logged before that clock existed fall back to their
  total clock).

Output
------
:func:`collect` returns a :class:`Collection`: ``steps`` (one row per run and GRPO step: run
identity, hyperparameters, swept keys, ``config label``, ``seed``, ``status``, ``step``, every
logged metric) and ``runs`` (one row per run, pending ones included, with its summary:
``off_policy`` (``grpo.training.batch_plan.BatchPlan.off_policy`` of its batch sizes: more than one
optimizer step per rollout batch; or rollouts one step stale, ``off_policy.staleness=1``; None
when the batch sizes are missing or invalid), steps done,
wall-clock, GPU-hours, final and best ``eval/reward`` as ``analysis.metric`` reads it (:data:`EVAL_SUMMARY`; best: over the evaluations after
step 0, which is the policy before training), ``problems``). A sweep directory
without any run directory is an error. Runs that differ only in
``seed`` share a ``config label`` such as ``off_policy.epochs=2, train_batch_size=64``; the
configs of a promoted preset (``+promoted/<NAME>=top1,...``, ``python -m analysis promote``) are
labelled so too, by the values their options set that differ between the runs
(:mod:`analysis.names.config_names`, which the watch, the summary and the dry run read too).

A run is one run however it is reached: runs are identified by what they are, never by the path
given. A sweep directory named twice (a link to it, a relative and an absolute path, the same
path again) and a run directory reached twice (a job directory that links to a run already read)
are read once; two run directories of one config label and one seed (a copy of a run, or the
same config and seed launched again into another sweep) are one seed: the run that went furthest
(most steps done; of equals, the first named) is kept and the other set aside, never a second
measurement. Each is said in one line of ``Collection.notes``, which the report, ``make plots``
and the sweep's summary print; so is a ``multirun.yaml`` that is unreadable or not shaped as
Hydra writes it, whose sweep's swept keys are then read from its runs' overrides.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException

from analysis.names.config_names import BORROW_KEY, config_label, naming_keys, value_of
from analysis.names.formatting import LABEL, sort_key
from analysis.readers.run_rows import (
    ELAPSED,
    EVAL_REWARD,
    TRAIN_CLOCK,
    bad_reward,
    is_step_row,
    job_dirs,
    parse_line,
    read_status,
    with_floats,
)
from grpo.run.driver import DRIVER_FILE, DriverRecord
from grpo.run.files import (
    MAX_METRICS_BYTES,
    RunFileError,
    atomic_write,
    parse_yaml,
    read_bytes,
    read_yaml,
)
from grpo.run.outcomes import DEFAULT_METRIC, OUTCOME_METRICS
from grpo.run.run_config import RUN_CONFIG, compare, trained_record
from grpo.training.batch_plan import CONFIG_KEYS, BatchPlan, config_value

DEFAULT_GPUS_PER_JOB = 2
METRIC_KEY = "analysis.metric"
HYPERPARAMS = (
    "experiment_name",
    "seed",
    "learning_rate",
    "n_grpo_steps",
    "rollout_batch_size",
    "train_batch_size",
    "micro_batch_size",
    "group_size",
    "loss.name",
    "normalization.name",
    "std_norm.enabled",
    "std_norm.scope",
    "off_policy.epochs",
    "off_policy.staleness",
    "prompt.name",
    "model.name",
    "data.name",
    "cluster.gpus_per_job",
    "cluster.cpus_per_job",
    "eval.temperature",
    "eval.n_examples",
    "eval.samples_per_problem",
    "model.path",
    "data.train_path",
    "data.validation_path",
    "analysis.seed_variance_from",
    METRIC_KEY,
)
RUN_ID_COLUMNS = ("run_id", "run_dir", "sweep", "job", "status", LABEL)
# a JSON string that may spell a non-finite float (a cheap test before converting a whole log)
NON_FINITE_TEXT = re.compile(r'"[-+]?(?:nan|inf)', re.IGNORECASE)


@dataclass(frozen=True)
class SweepInfo:
    """One sweep directory and what it swept (key -> values as written, seed included)."""

    path: Path
    swept: dict[str, list[str]]


@dataclass(frozen=True)
class Collection:
    """Everything read from one or more sweeps.

    ``label_keys`` are the swept keys that name a config (every swept key but ``seed``);
    ``group_keys`` those of them that are Hydra config groups; ``configs`` maps each config
    label, in sorted order of the swept values, to its ``{key: value}``.
    """

    sweeps: list[SweepInfo]
    label_keys: list[str]
    group_keys: frozenset[str]
    configs: dict[str, dict[str, Any]]
    runs: pd.DataFrame
    steps: pd.DataFrame
    notes: tuple[str, ...] = ()
    """What the collection read once or set aside, one line each (see the module docstring)."""
    set_aside: frozenset[str] = frozenset()
    """The run directories (as reached) left out as another path to a run read, or a second run
    of a config and seed: accounted for in ``notes``, not runs that are missing."""
    borrowed: Borrowed | None = None
    """The sweep the runs name to borrow a seed variance from (:data:`BORROW_KEY`), read with
    them (:func:`read_borrowed`); None where they name none."""
    metric: str = DEFAULT_METRIC
    """What ``eval/reward`` of ``steps`` holds, and what the runs' outcome files are read as:
    the runs' ``analysis.metric`` (:func:`read_by_metric`)."""

    @property
    def labels(self) -> list[str]:
        """Config labels in sorted order of their swept values."""
        return list(self.configs)


@dataclass(frozen=True)
class MetricsLog:
    """Rows of one ``metrics.jsonl``, one per step in step order, and what was dropped."""

    rows: list[dict[str, Any]]
    n_bad_lines: int
    n_duplicate_steps: int


def read_metrics(path: Path) -> MetricsLog:
    """Read a ``metrics.jsonl``; keep the last occurrence of a step, skip damaged lines."""
    by_step: dict[int, dict[str, Any]] = {}
    n_bad = n_dup = 0
    try:
        text = read_bytes(path, MAX_METRICS_BYTES).decode(errors="replace") if path.is_file() else ""
    except RunFileError:
        return MetricsLog([], 1, 0)  # too large or unreadable: one bad "line", no rows
    lines = [line for line in text.splitlines() if line.strip()]
    rows = _whole_log(lines, text)
    if rows is not None:  # the common case: every line a row, read in one go
        n_dup = len(rows) - len({row["step"] for row in rows})
        by_step = {row["step"]: row for row in rows}
    else:
        for line in lines:
            row, damaged = parse_line(line)
            n_bad += damaged
            if row is not None:
                n_dup += row["step"] in by_step
                by_step[row["step"]] = row
    return MetricsLog([by_step[s] for s in sorted(by_step)], n_bad, n_dup)


def _whole_log(lines: list[str], text: str) -> list[dict[str, Any]] | None:
    """Every line as a row (non-finite spellings converted), or None if any line is not one."""
    try:
        rows = json.loads("[" + ",".join(lines) + "]")
    except (json.JSONDecodeError, RecursionError):
        return None
    if not all(map(is_step_row, rows)):
        return None
    if NON_FINITE_TEXT.search(text):
        rows = [with_floats(row) for row in rows]
    return rows


def _parse_overrides(lines: Iterable[str]) -> list[Any]:
    return OverridesParser.create().parse_overrides([str(line) for line in lines])


@functools.lru_cache(maxsize=65536)
def _override_value(line: str) -> tuple[str, str]:
    """``(key or group, value as written)`` of one override (runs of a sweep share most)."""
    (override,) = _parse_overrides([line])
    return override.key_or_group, override.get_value_element_as_str()


def _read_hydra(run_dir: Path, name: str, problems: list[str]) -> Any:
    """The plain data of ``run_dir/.hydra/<name>``, or None with the reason appended to
    ``problems``."""
    path = run_dir / ".hydra" / name
    if not path.is_file():
        problems.append(f".hydra/{name} is missing")
        return None
    try:
        return read_yaml(path)
    except (OSError, ValueError, yaml.YAMLError) as error:
        why = error if isinstance(error, RunFileError) else type(error).__name__
        problems.append(f".hydra/{name} is unreadable ({why})")
        return None


def _trained_record(run_dir: Path, problems: list[str]) -> dict[str, Any] | None:
    """The plain data of the `.hydra/` texts stored with the run's newest checkpoint
    (grpo.run.run_config.trained_record) when ``.hydra/config.yaml`` differs from them in a key
    that changes the trained curve (grpo.run.run_config.compare: it was rewritten after training,
    by an older version or by hand) or cannot be read: what trained wins, and ``problems`` says
    so. None when they agree or no checkpoint stores them."""
    found = trained_record(run_dir)
    if found is None:
        return None
    checkpoint, texts = found
    source = f"checkpoints/{checkpoint}/{RUN_CONFIG}"
    try:
        data = {name: parse_yaml(text, f"{source} ({name})") for name, text in texts.items()}
    except (ValueError, yaml.YAMLError) as error:
        problems.append(f"the config stored in {source} is unreadable ({type(error).__name__})")
        return None
    try:
        record = read_yaml(run_dir / ".hydra" / "config.yaml")
    except (ValueError, yaml.YAMLError):
        record = None
    trained = data.get("config.yaml")
    if not (isinstance(trained, dict) and isinstance(record, dict)):
        why = "is missing or unreadable"
    elif differences := compare(trained, record, step=0).refused:
        why = f"differs from what trained ({', '.join(sorted(differences)[:5])})"
    else:
        return None
    problems.append(f".hydra/config.yaml {why}: the config stored with checkpoint {checkpoint} "
                    f"({source}) is read instead")
    return data


def read_swept(sweep_dir: Path) -> dict[str, list[str]] | None:
    """Swept keys and values of a sweep from its ``multirun.yaml`` (None when it has none).

    Raises ValueError, naming the file, where it is unreadable (read as a run's YAML files are,
    bounded: `grpo.run.files.read_yaml`, its aliases never expanded) or not shaped as Hydra writes
    it (``hydra.sweeper.params`` a mapping of values or null, ``hydra.overrides.task`` a list of
    overrides: an empty file, or one without it, would say that nothing was swept)."""
    path = sweep_dir / "multirun.yaml"
    try:
        multirun = read_yaml(path)
    except (OSError, ValueError, yaml.YAMLError, RecursionError) as err:
        why = err if isinstance(err, RunFileError) else type(err).__name__
        raise ValueError(f"{path} is unreadable ({why})") from err
    if multirun is None:
        if not path.is_file():
            return None
        raise ValueError(f"{path} is empty")
    if not isinstance(multirun, dict):
        raise ValueError(f"{path} is not a mapping")
    params = config_value(multirun, "hydra.sweeper.params")
    task = config_value(multirun, "hydra.overrides.task")
    scalar = str | int | float | bool | None
    if not (params is None or isinstance(params, dict) and all(
            isinstance(k, str) and isinstance(v, scalar) for k, v in params.items())) or not (
            isinstance(task, list) and all(isinstance(o, str) for o in task)):
        raise ValueError(f"{path}: hydra.sweeper.params is not a mapping of values or "
                         "hydra.overrides.task not a list of overrides")
    lines = [f"{k}={v}" for k, v in (params or {}).items()] + task
    try:
        overrides = _parse_overrides(lines)
    except OverrideParseException as err:
        raise ValueError(f"{path} holds an override Hydra cannot parse") from err
    final: dict[str, list[str] | None] = {}
    for override in overrides:
        key = override.key_or_group
        final.pop(key, None)  # re-insert so the order follows the last mention, as Hydra does
        is_sweep = override.is_sweep_override()
        final[key] = list(override.sweep_string_iterator()) if is_sweep else None
    return {key: values for key, values in final.items() if values is not None}


CONFIRM_RECORD = "confirm.json"
"""A confirmation's record (:mod:`analysis.readers.confirmation`): the sweep directory holding it
confirms another sweep's pick."""


def find_latest_sweep(outputs: Path) -> Path:
    """The sweep directory whose ``multirun.yaml`` was written last: ``outputs`` itself, or a
    directory one (``<experiment>``) or two (``<experiment>/<timestamp>``) levels below it; never
    a confirmation (it holds :data:`CONFIRM_RECORD`): it is no study's sweep, and the latest
    sweep of a study (its report, a chain's pick) is the one it confirms."""
    candidates = [p for pattern in ("multirun.yaml", "*/multirun.yaml", "*/*/multirun.yaml")
                  for p in outputs.glob(pattern) if not (p.parent / CONFIRM_RECORD).exists()]
    if not candidates:
        raise FileNotFoundError(f"no sweep (a directory with multirun.yaml) under {outputs}")
    return max(candidates, key=lambda p: p.stat().st_mtime).parent


def chain_stage_sweep(root: Path) -> Path | None:
    """For a chain's root (``<paths.output_root>/chains/<chain>``, which holds its detached
    driver's record: :mod:`grpo.run.driver`), the sweep of the stage it started last: of the
    sweeps two levels below the output root (``<experiment>/<timestamp>``), the one whose copy
    of the chain's record (``copy_record``, written as the stage starts, naming the root's log)
    was written last. None where ``root`` holds no chain's record or no stage has started."""
    try:
        record = DriverRecord.read(root / DRIVER_FILE)
    except RunFileError:
        return None
    if record is None or record.scope != "chain":
        return None
    home = root.resolve()
    copies = []
    for path in root.parent.parent.glob(f"*/*/{DRIVER_FILE}"):
        try:
            copy = DriverRecord.read(path)
        except RunFileError:
            continue
        if (copy is not None and copy.scope == "chain" and copy.home().resolve() == home
                and path.parent.resolve() != home):
            copies.append(path)
    return max(copies, key=lambda p: p.stat().st_mtime).parent if copies else None


@dataclass(frozen=True)
class _Run:
    """What one run directory holds, before the sweep-wide label keys are known."""

    sweep: Path
    path: Path
    config: dict[str, Any] | None
    overrides: dict[str, str]
    choices: dict[str, str]
    status: dict[str, Any]
    log: MetricsLog
    problems: tuple[str, ...]

    @staticmethod
    def read(sweep: Path, path: Path) -> _Run:
        problems: list[str] = []
        trained = _trained_record(path, problems)
        if trained is not None:
            config, override_list = trained.get("config.yaml"), trained.get("overrides.yaml")
            choices = config_value(trained.get("hydra.yaml"), "hydra.runtime.choices")
        elif (path / ".hydra").is_dir():
            config = _read_hydra(path, "config.yaml", problems)
            override_list = _read_hydra(path, "overrides.yaml", problems)
            choices = config_value(_read_hydra(path, "hydra.yaml", problems), "hydra.runtime.choices")
        else:
            problems.append(".hydra/ is missing (config unknown)")
            config = override_list = choices = None
        try:
            overrides = dict(_override_value(str(line))
                             for line in (override_list if isinstance(override_list, list) else []))
        except Exception:  # noqa: BLE001 -- Hydra's parser errors: report, go on
            problems.append(".hydra/overrides.yaml holds unparsable overrides")
            overrides = {}
        log = read_metrics(path / "metrics.jsonl")
        unusable = bad_reward(log.rows)
        if unusable is not None:
            problems.append(f"metrics.jsonl: {unusable}: no metric of this run is used")
            log = MetricsLog([], log.n_bad_lines, log.n_duplicate_steps)
        elif not log.rows:
            metrics = path / "metrics.jsonl"
            problems.append("metrics.jsonl holds no step" if metrics.exists() else "no metrics.jsonl")
        status, status_problem = read_status(path, bool(log.rows))
        recorded, logged = status.get("last_step"), log.rows[-1]["step"] if log.rows else None
        if logged is not None and type(recorded) is int and recorded > logged:
            problems.append(f"metrics.jsonl ends at step {logged}, status.json says step "
                            f"{recorded} was reached: rows were lost, the run counts to step "
                            f"{logged}")
        return _Run(
            sweep=sweep,
            path=path,
            config=config if isinstance(config, dict) else None,
            overrides=overrides,
            choices={k: str(v) for k, v in (choices if isinstance(choices, dict) else {}).items()},
            status=status,
            log=log,
            problems=(*problems, *([status_problem] if status_problem else [])),
        )

    def value(self, key: str) -> Any:
        """The run's value for ``key``: group choice, else config value, else override text."""
        value = value_of(self.choices, self.config, key)
        return value if value is not None else self.overrides.get(key)

    def off_policy(self) -> bool | None:
        """``BatchPlan.off_policy`` of the run's batch sizes, or True for rollouts one step stale
        (``off_policy.staleness`` above 0; runs from before the key: 0); None when the batch
        sizes are missing or invalid."""
        plan = BatchPlan.from_config({key: self.value(key) for key in CONFIG_KEYS.values()})
        if plan.errors():
            return None
        staleness = self.value("off_policy.staleness")
        return plan.off_policy or (isinstance(staleness, int) and staleness > 0)

    def summary(self, label_keys: Sequence[str]) -> dict[str, Any]:
        """The run's row of the ``runs`` frame."""
        rows = self.log.rows
        elapsed = [v for r in rows if type(v := r.get(ELAPSED)) is float and math.isfinite(v)
                   or type(v) is int]
        wall_clock_s = max(elapsed, default=math.nan)
        gpus = self.value("cluster.gpus_per_job")
        config = {key: self.value(key) for key in label_keys}
        label = config_label(config)
        return {
            "run_id": "/".join(self.path.parts[-3:]),
            "run_dir": str(self.path),
            "sweep": str(self.sweep),
            "job": int(self.path.name),
            "status": self.status["status"],
            "reason": self.status.get("reason"),
            "last_step": self.status.get("last_step", rows[-1]["step"] if rows else None),
            "restarts": self.status.get("restarts", 0),
            "updated_at": self.status.get("updated_at"),
            LABEL: label or str(self.value("experiment_name") or "default"),
            **{key: self.value(key) for key in HYPERPARAMS},
            **config,
            "off_policy": self.off_policy(),
            "steps_done": rows[-1]["step"] if rows else 0,
            "wall_clock_s": wall_clock_s,
            "gpu_hours": gpu_hours(wall_clock_s, gpus) if elapsed else math.nan,
            "cpu_hours": wall_clock_s / 3600 * _count(self.value("cluster.cpus_per_job"), 1)
            if elapsed else math.nan,
            **dict.fromkeys(EVAL_SUMMARY, math.nan),  # of analysis.metric: eval_summary
            "n_bad_lines": self.log.n_bad_lines,
            "n_duplicate_steps": self.log.n_duplicate_steps,
            "problems": "; ".join(self.problems),
        }


def run_values(run_dir: Path, keys: Iterable[str]) -> dict[str, Any]:
    """Each of ``keys`` as the run in ``run_dir`` had it: a config group's choice (``loss``:
    ``grpo_clip``), else its config value (``learning_rate``); None where it has none."""
    run = _Run.read(run_dir.parent, run_dir)
    return {key: run.value(key) for key in keys}


def gpu_hours(elapsed_s: float, gpus_per_job: Any) -> float:
    """GPU-hours of a run after ``elapsed_s`` seconds of wall-clock on ``gpus_per_job`` GPUs
    (:data:`DEFAULT_GPUS_PER_JOB` when it is unknown: None or NaN)."""
    return elapsed_s / 3600 * _count(gpus_per_job, DEFAULT_GPUS_PER_JOB)


def _count(value: Any, default: int) -> float:
    """A number of GPUs or CPUs from a config value; ``default`` when it is missing or not a
    number (None, NaN, a crafted string)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return default
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _varying_override_keys(runs: Sequence[_Run]) -> list[str]:
    keys = list(dict.fromkeys(k for run in runs for k in run.overrides))
    return [k for k in keys if len({run.overrides.get(k) for run in runs}) > 1]


def sweep_dir_problem(path: Path) -> str | None:
    """Why `path` cannot be a sweep directory (it does not exist, or is not a directory)."""
    if path.is_dir():
        return None
    return (f"{path} is a file, not a sweep directory" if path.exists()
            else f"sweep directory {path} does not exist")


@dataclass(frozen=True)
class Borrowed:
    """The sweep (``sweep``, named by ``named_by``: the config key or the command line) a seed
    variance is borrowed from, read: its ``collection`` (without a borrowed sweep of its own), or
    None and why it could not be read (``error``)."""

    sweep: Path
    named_by: str
    collection: Collection | None
    error: str = ""


def read_borrowed(sweep: Path, named_by: str) -> Borrowed:
    """``sweep`` read as the sweep a seed variance is borrowed from (:class:`Borrowed`): an
    unreadable one (missing, no run, malformed files) gives its error in words, not an
    exception."""
    try:
        return Borrowed(sweep, named_by, collect([sweep], borrowed=False))
    except (OSError, ValueError) as error:
        return Borrowed(sweep, named_by, None, str(error))


def _named_borrowed(runs: pd.DataFrame) -> Borrowed | None:
    """The sweep ``runs`` (a run frame) name under :data:`BORROW_KEY`, read; where they name
    several, the first in sorted order (said in ``named_by``); None where they name none."""
    named = sorted({str(v) for v in runs.get(BORROW_KEY, pd.Series(dtype=object)).dropna()})
    if not named:
        return None
    by = BORROW_KEY if len(named) == 1 else (
        f"{BORROW_KEY} (the runs name {len(named)} sweeps; the first)")
    return read_borrowed(Path(named[0]), by)


def collect(sweep_dirs: Sequence[Path], borrowed: bool = True) -> Collection:
    """Read every run of ``sweep_dirs`` into a :class:`Collection` (see the module docstring):
    each sweep directory and each run directory once however it is named, one run of a config
    label and seed; with ``borrowed``, the sweep the runs name to borrow a seed variance from
    (:data:`BORROW_KEY`) too, read before anything is decided (:attr:`Collection.borrowed`)."""
    sweeps: list[SweepInfo] = []
    runs: list[_Run] = []
    notes: list[str] = []
    aside: set[str] = set()
    named: dict[Path, Path] = {}  # resolved sweep directory -> the path that first named it
    reached: dict[Path, Path] = {}  # resolved run directory -> the path it was first read at
    for sweep_dir in map(Path, sweep_dirs):
        problem = sweep_dir_problem(sweep_dir)
        if problem is not None:
            raise FileNotFoundError(problem)
        first = named.setdefault(sweep_dir.resolve(), sweep_dir)
        if first is not sweep_dir:
            same = "" if str(first) == str(sweep_dir) else f" is the sweep {first},"
            notes.append(f"{sweep_dir}{same} named twice: its runs are read once")
            continue
        paths = job_dirs(sweep_dir)
        firsts = [reached.setdefault(path.resolve(), path) for path in paths]
        again = [f"{path.name} is {first}" for path, first in zip(paths, firsts, strict=True)
                 if first is not path]
        aside |= {str(path) for path, first in zip(paths, firsts, strict=True) if first is not path}
        if again:
            notes.append(f"{sweep_dir}: run {', '.join(again)} (one run directory reached twice): "
                         "read once")
        sweep_runs = [_Run.read(sweep_dir, path)
                      for path, first in zip(paths, firsts, strict=True) if first is path]
        if not sweep_runs:
            if again:
                continue
            raise ValueError(f"sweep directory {sweep_dir} holds no run (no job directory 0/, "
                             "1/, ...): nothing to collect; pass the directory of a sweep")
        try:
            swept = read_swept(sweep_dir)
        except ValueError as err:
            notes.append(f"{err}: the swept keys are read from the runs' overrides")
            swept = None
        if swept is None:
            swept = {k: sorted({r.overrides[k] for r in sweep_runs if k in r.overrides})
                     for k in _varying_override_keys(sweep_runs)}
        sweeps.append(SweepInfo(sweep_dir, swept))
        runs += sweep_runs
    label_keys = [k for k in dict.fromkeys(k for s in sweeps for k in s.swept for k in
                                           naming_keys(k, [(r.choices, r.config) for r in runs
                                                           if r.sweep == s.path]))
                  if k != "seed"]
    group_keys = frozenset(k for k in label_keys for run in runs if k in run.choices)

    summaries = [run.summary(label_keys) for run in runs]
    kept = _one_per_seed(runs, summaries, notes)
    kept_set = frozenset(kept)
    aside |= {str(run.path) for i, run in enumerate(runs) if i not in kept_set}
    runs = [runs[i] for i in kept]
    summaries = _unique_run_ids([summaries[i] for i in kept])
    run_frame = pd.DataFrame(summaries, columns=_run_columns(label_keys))
    configs: dict[str, dict[str, Any]] = {}
    for summary in sorted(summaries, key=lambda s: [sort_key(s[k]) for k in label_keys]):
        configs.setdefault(summary[LABEL], {k: summary[k] for k in label_keys})

    identity = [*RUN_ID_COLUMNS, *HYPERPARAMS, *(k for k in label_keys if k not in HYPERPARAMS)]
    metrics = pd.DataFrame([row for run in runs for row in run.log.rows])
    owner = np.repeat(np.arange(len(runs)), [len(run.log.rows) for run in runs])
    ids = pd.DataFrame(summaries, columns=identity).iloc[owner].reset_index(drop=True)
    metric_columns = [c for c in metrics.columns if c not in identity]
    steps = pd.concat([ids, metrics[metric_columns]], axis=1)
    if ELAPSED in steps:  # runs logged before the eval-free clock existed: their total clock
        steps[TRAIN_CLOCK] = steps.get(TRAIN_CLOCK, steps[ELAPSED]).fillna(steps[ELAPSED])
    metric = _runs_metric(run_frame)
    steps = read_by_metric(steps, metric, notes)
    run_frame[list(EVAL_SUMMARY)] = eval_summary(run_frame["run_id"], steps)
    return Collection(sweeps, label_keys, group_keys, configs, run_frame, steps, tuple(notes),
                      frozenset(aside), _named_borrowed(run_frame) if borrowed else None, metric)


EVAL_SUMMARY = ("final_eval_reward", "best_eval_reward", "best_eval_step")
"""A run's summary of its evaluations, each of what ``steps``' ``eval/reward`` holds (the
collection's ``analysis.metric``): the last evaluation's value, the best after step 0 (step 0
evaluates the initial policy) and its step (ties: the first)."""


def eval_summary(run_ids: pd.Series, steps: pd.DataFrame) -> pd.DataFrame:
    """:data:`EVAL_SUMMARY` of each of ``run_ids`` (rows in their order; NaN where a run has no
    finite evaluation) from ``steps`` as :func:`read_by_metric` gives it."""
    out = pd.DataFrame(np.nan, index=run_ids.index, columns=list(EVAL_SUMMARY), dtype=object)
    if EVAL_REWARD not in steps:
        return out
    values = pd.to_numeric(steps[EVAL_REWARD], errors="coerce")
    evals = steps.loc[np.isfinite(values), ["run_id", "step"]].assign(value=values)
    final = evals.groupby("run_id", sort=False)["value"].last()
    trained = evals[evals["step"] > 0]
    best = trained.loc[trained.groupby("run_id", sort=False)["value"].idxmax()].set_index("run_id")
    out["final_eval_reward"] = run_ids.map(final).astype(float)
    out["best_eval_reward"] = run_ids.map(best["value"]).astype(float)
    out["best_eval_step"] = run_ids.map(best["step"])
    return out


def _runs_metric(runs: pd.DataFrame) -> str:
    """The ``analysis.metric`` the runs name (``reward`` where none does); a ValueError where
    they name two."""
    named = sorted({str(v) for v in runs.get(METRIC_KEY, pd.Series(dtype=object)).dropna()})
    if len(named) > 1:
        raise ValueError(f"the runs read name {len(named)} metrics ({METRIC_KEY}: "
                         f"{', '.join(named)}); analyse runs of one {METRIC_KEY} together")
    metric = named[0] if named else DEFAULT_METRIC
    if metric not in OUTCOME_METRICS:
        raise ValueError(f"{METRIC_KEY}={metric} is not a metric; choose one of "
                         f"{', '.join(OUTCOME_METRICS)}")
    return metric


def read_by_metric(steps: pd.DataFrame, metric: str, notes: list[str]) -> pd.DataFrame:
    """``steps`` with ``eval/reward`` holding ``eval/<metric>`` (``analysis.metric``): every
    figure, ranking and comparison then reads that metric with the same statistics. A run of
    one response a problem logs none of them, each being its reward; an evaluation of more
    that lacks it (logged before they were) has none, said in ``notes``."""
    if metric == DEFAULT_METRIC or EVAL_REWARD not in steps:
        return steps
    column = f"eval/{metric}"
    chosen = steps.get(column, pd.Series(np.nan, index=steps.index, dtype=float))
    one = pd.to_numeric(steps.get("eval.samples_per_problem"), errors="coerce") == 1
    out = steps.copy()
    out[EVAL_REWARD] = chosen.where(~one | chosen.notna(), steps[EVAL_REWARD])
    lacking = sorted(set(out.loc[steps[EVAL_REWARD].notna() & out[EVAL_REWARD].isna(), "run_id"]))
    if lacking:
        notes.append(f"{len(lacking)} run(s) logged no {column} ({', '.join(lacking[:5])}"
                     f"{', ...' if len(lacking) > 5 else ''}): {METRIC_KEY}={metric} leaves "
                     "their evaluations out")
    return out


def _one_per_seed(runs: Sequence[_Run], summaries: Sequence[dict[str, Any]],
                  notes: list[str]) -> list[int]:
    """The indices of the runs to keep, in order: of the runs of one config label and one seed
    (a copy of a run, or its config and seed launched again into another sweep), the one with
    the most steps done, the first named of equals; a line in ``notes`` for each run set aside.
    Runs whose config or seed is unknown are all kept."""
    groups: dict[tuple[str, Any], list[int]] = {}
    for i, (run, summary) in enumerate(zip(runs, summaries, strict=True)):
        seed = summary["seed"]
        if run.config is not None and seed is not None and not isinstance(seed, dict | list):
            groups.setdefault((summary[LABEL], seed), []).append(i)
    aside: set[int] = set()
    for (label, seed), members in groups.items():
        keep = max(members, key=lambda i: (summaries[i]["steps_done"], -i))
        for i in members:
            if i == keep:
                continue
            aside.add(i)
            differs = sorted(set(compare(runs[keep].config, runs[i].config, step=0).refused))
            notes.append(
                f"{runs[i].path} ({label}, seed {seed}) is set aside: the same config and seed as "
                f"{runs[keep].path}, which is kept (one seed is one measurement, never a second "
                "seed; kept is the run that went furthest, of equals the first named)"
                + (f"; it differs in {', '.join(differs[:5])}, which no swept key names, so no "
                   "label tells the two apart" if differs else ""))
    return [i for i in range(len(runs)) if i not in aside]


def _unique_run_ids(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``summaries`` with each ``run_id`` (the run directory's last three path parts) unique:
    where two distinct runs share one (``a/exp/s/0``, ``b/exp/s/0``), their full directories."""
    counts = pd.Series([s["run_id"] for s in summaries]).value_counts()
    return [{**s, "run_id": s["run_dir"]} if counts[s["run_id"]] > 1 else s for s in summaries]


def _run_columns(label_keys: Sequence[str]) -> list[str]:
    base = [*RUN_ID_COLUMNS[:-1], "reason", "last_step", "restarts", "updated_at", LABEL]
    summary = ["off_policy", "steps_done", "wall_clock_s", "gpu_hours", "cpu_hours", "final_eval_reward",
               "best_eval_reward", "best_eval_step", "n_bad_lines", "n_duplicate_steps",
               "problems"]
    extra = [k for k in label_keys if k not in HYPERPARAMS]
    return [*base, *HYPERPARAMS, *extra, *summary]


def save_steps(collection: Collection, stem: Path) -> Path:
    """Write the ``steps`` frame to ``<stem>.parquet`` when pyarrow is installed, else CSV;
    atomically, never through a planted link (``grpo.run.files.atomic_write``)."""
    steps = collection.steps
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        path = stem.with_suffix(".csv")
        atomic_write(path, lambda tmp: steps.to_csv(tmp, index=False))
    else:
        path = stem.with_suffix(".parquet")
        atomic_write(path, lambda tmp: steps.to_parquet(tmp, index=False))
    return path
