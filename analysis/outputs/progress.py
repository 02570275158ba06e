"""Progress of a sweep's runs, read from their directories while they run: what the live view shows.

The live monitor (:mod:`analysis.outputs.monitor`) and the launchers' end-of-sweep report read the same
:class:`RunProgress` rows. Per run directory ``<sweep>/<job>/`` only ``status.json``,
``metrics.jsonl`` (read incrementally: each poll parses the lines appended since the last one)
and ``.hydra/overrides.yaml`` are read (and, for a promoted preset's jobs, ``.hydra/config.yaml`` and
``hydra.yaml`` once written: a promoted config is named by what its option sets,
:mod:`analysis.names.config_names`); any of them may be missing, torn or garbage. The jobs the
launcher recorded (:mod:`analysis.readers.jobs`) are listed too, those that never started among
them; a race's runs show their wave, re-derived from the runs (:mod:`analysis.decisions.race`).

A run's status is its ``status.json`` status (``grpo.run.files.STATUSES``), else ``pending``;
:func:`outcome` folds in what the scheduler says (a running job without a status is
``starting``, a job cancelled before writing a status is ``cancelled``, one that died while its
status still says ``running`` is ``failed``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from analysis.decisions.race.record import RACE_FILE, Race
from analysis.names.config_names import job_labels, lists_configs
from analysis.readers.jobs import Job, override_key, read_jobs, str_or_none, varying_keys
from analysis.readers.run_rows import (
    ELAPSED,
    EVAL_REWARD,
    FINISHED_STATUSES,
    bad_reward,
    job_dirs,
    parse_line,
    read_status,
)
from grpo.run.files import STATUSES, RunFileError, read_yaml
from grpo.run.slurm import SCHEDULER_ACTIVE, UNKNOWN_TO_SLURM, state_word
from grpo.run.tracking import run_overrides
from grpo.training.batch_plan import config_value

TRAIN_REWARD = "train/reward_mean"
# statuses of a run that is still expected to write: `pending` (not started), `starting` (its
# job runs but has not written a status yet), and `preempted` runs, which are requeued
ACTIVE_STATUSES = ("pending", "starting", "running", "preempted")
# the order of the end-of-sweep counts; statuses outside it are counted after them
SUMMARY_ORDER = (*FINISHED_STATUSES, "cancelled", "failed")
# rows over which seconds per step are averaged
RATE_WINDOW = 20
# states of a job that no scheduler will run: what happened to it
GONE = {"LAUNCHER_GONE": "its launcher is gone",
        UNKNOWN_TO_SLURM: "SLURM no longer knows its job"}


class MetricsTail:
    """The last rows of a ``metrics.jsonl``, read incrementally (see the module docstring).

    A file that shrank (a resume moved uncheckpointed steps aside) is read again from the start.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._reset()

    def _reset(self) -> None:
        self.offset = 0
        self.last: dict[str, Any] | None = None
        self.last_eval: tuple[int, float] | None = None
        self.recent: deque[tuple[int, float]] = deque(maxlen=RATE_WINDOW)
        self.unusable: str | None = None  # a logged reward outside [0, 1], as collect says it

    def update(self) -> None:
        """Parse the complete lines appended since the last call."""
        try:
            size = self.path.stat().st_size
            if size < self.offset:
                self._reset()
            if size == self.offset:
                return
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read(size - self.offset)
        except OSError:
            return
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a torn last line waits for its end
        self.offset += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            row = parse_line(line)[0] if line.strip() else None
            if row is not None:
                self._add(row)

    def _add(self, row: dict[str, Any]) -> None:
        if self.recent and row["step"] <= self.recent[-1][0]:
            self.recent.clear()  # a step logged again: timing restarts
        self.last = row
        self.unusable = self.unusable or bad_reward([row])
        if _finite(row.get(EVAL_REWARD)):
            self.last_eval = (row["step"], float(row[EVAL_REWARD]))
        if _finite(row.get(ELAPSED)):
            self.recent.append((row["step"], float(row[ELAPSED])))

    def seconds_per_step(self) -> float | None:
        """Mean wall-clock seconds per step over the last rows (evaluation included)."""
        if len(self.recent) >= 2:
            (first, start), (last, end) = self.recent[0], self.recent[-1]
            return (end - start) / (last - first) if last > first else None
        if len(self.recent) == 1:
            step, elapsed = self.recent[0]
            return elapsed / step if step > 0 else None
        return None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class RunProgress:
    """One row of the monitor: a job and what its run directory says.

    ``steps_done``: GRPO steps logged; ``n_steps``: ``n_grpo_steps``; ``train_reward``: the
    last ``train/reward_mean``; ``eval_reward`` at ``eval_step``: the last validation reward;
    ``seconds_per_step``: recent wall-clock per step; ``eta_s``: seconds left at that pace;
    ``resumed_from``: the step each restart continued from; ``log``: the job's stderr file;
    ``job_ended``: the scheduler says the job is over (a ``preempted`` run whose job ended
    will not be requeued); ``wave``: the race's wave the job belongs to (None: not a race).
    """

    num: int
    label: str
    run_dir: Path
    status: str
    reason: str | None = None
    steps_done: int = 0
    n_steps: int | None = None
    train_reward: float | None = None
    eval_reward: float | None = None
    eval_step: int | None = None
    seconds_per_step: float | None = None
    eta_s: float | None = None
    restarts: int = 0
    resumed_from: tuple[int, ...] = ()
    log: str | None = None
    job_ended: bool = False
    wave: int | None = None

    @property
    def active(self) -> bool:
        """Whether the run may still write (pending, running, preempted and requeued)."""
        return self.status in ACTIVE_STATUSES and not self.job_ended


class SweepProgress:
    """Reads the progress of every job of a sweep; call :meth:`read` as often as you like.
    ``race``: the sweep's race as its runs said at the last read (``analysis.decisions.race.looks.replay``:
    the looks re-derived from the runs each time a run finishes or the record changes; None: not
    a race, or a record that cannot be read); ``race_note``: where the record (``race.json``)
    disagrees with the runs, or why it cannot be read, in one line (None: nothing to say)."""

    def __init__(self, sweep_dir: Path, jobs: Sequence[Job] | None = None) -> None:
        self.sweep_dir = Path(sweep_dir)
        self._jobs = list(jobs) if jobs is not None else None
        self._tails: dict[int, MetricsTail] = {}
        self._overrides: dict[int, tuple[str, ...]] = {}
        self._configs: dict[int, tuple[dict[str, str], dict[str, Any]]] = {}
        self.race: Race | None = None
        self.race_note: str | None = None
        self._race_key: tuple[Any, ...] | None = None

    def jobs(self) -> list[Job]:
        """The jobs given, else those of ``jobs.json``, else one per numbered run directory."""
        if self._jobs is not None:
            return self._jobs
        recorded = read_jobs(self.sweep_dir)
        found = {int(p.name): Job(int(p.name), ()) for p in _numbered_dirs(self.sweep_dir)}
        return sorted({**found, **(recorded.jobs if recorded else {})}.values(),
                      key=lambda j: j.num)

    def read(self, scheduler: Mapping[int, str] | None = None,
             errors: Mapping[int, str] | None = None) -> list[RunProgress]:
        """Every job's :class:`RunProgress`, through :func:`outcome` with the scheduler state
        (``scheduler``) and error (``errors``, of finished jobs) of each job number."""
        jobs = self.jobs()
        overrides = [self._job_overrides(job) for job in jobs]
        keys = varying_keys(overrides)
        listed = any(map(lists_configs, keys))
        labels = job_labels([[o for o in job if override_key(o) in keys] for job in overrides],
                            [self._job_config(job) if listed else None for job in jobs])
        rows = [self._read_run(job, label or "(no overrides)")
                for job, label in zip(jobs, labels, strict=True)]
        self._replay_race(rows)
        waves = self.race.wave_of() if self.race is not None else {}
        return [outcome(replace(run, wave=waves.get(job.num)), (scheduler or {}).get(job.num),
                        (errors or {}).get(job.num)) for job, run in zip(jobs, rows, strict=True)]

    def _replay_race(self, rows: Sequence[RunProgress]) -> None:
        """Set ``race`` and ``race_note``, replaying the race from its runs where a run's status
        or the record changed since the last read."""
        record = self.sweep_dir / RACE_FILE
        try:
            stat = record.stat()
        except OSError:
            self.race, self.race_note, self._race_key = None, None, None
            return
        key = (stat.st_mtime_ns, stat.st_size, tuple((run.num, run.status) for run in rows))
        if key == self._race_key:
            return
        from analysis.decisions.race.looks import replay  # the analysis: read only where a race is

        self._race_key = key
        try:
            reading = replay(self.sweep_dir)
        except (RunFileError, OSError, ValueError) as error:  # the runs are shown without waves
            self.race, self.race_note = None, f"race: not shown ({error})"
            return
        self.race = reading.race if reading is not None else None
        self.race_note = reading.note if reading is not None else None

    def _job_overrides(self, job: Job) -> tuple[str, ...]:
        if job.overrides:
            return job.overrides
        if job.num not in self._overrides:
            try:
                found = tuple(map(str, run_overrides(self.sweep_dir / str(job.num))))
            except (OSError, yaml.YAMLError, TypeError):  # garbage: no overrides to show
                found = ()
            if not found:
                return ()  # not written yet: look again next time
            self._overrides[job.num] = found
        return self._overrides[job.num]

    def _job_config(self, job: Job) -> tuple[dict[str, str], dict[str, Any]] | None:
        """The config group choices and config of job ``job``'s run, as its ``.hydra/`` record
        says, to name a promoted config by (:func:`analysis.names.config_names.job_labels`); None until
        the run wrote them (read once they are there) or where they cannot be read."""
        if job.num not in self._configs:
            hydra_dir = self.sweep_dir / str(job.num) / ".hydra"
            try:
                config = read_yaml(hydra_dir / "config.yaml")
                choices = config_value(read_yaml(hydra_dir / "hydra.yaml"), "hydra.runtime.choices")
            except (OSError, ValueError, yaml.YAMLError):  # garbage: the override is shown
                return None
            if not isinstance(config, dict) or not isinstance(choices, dict):
                return None  # not written yet: look again next time
            self._configs[job.num] = ({str(k): str(v) for k, v in choices.items()}, config)
        return self._configs[job.num]

    def _read_run(self, job: Job, label: str) -> RunProgress:
        run_dir = self.sweep_dir / str(job.num)
        tail = self._tails.setdefault(job.num, MetricsTail(run_dir / "metrics.jsonl"))
        tail.update()
        usable = tail.last is not None and tail.unusable is None  # counted as the report counts
        status, _ = read_status(run_dir, has_metrics=usable)
        name = status["status"] if isinstance(status["status"], str) else repr(status["status"])
        name = "running" if name == "unknown" else name  # metrics but no status.json yet
        n_steps = _int_or_none(status.get("n_grpo_steps"))
        steps_done = tail.last["step"] if tail.last else 0  # step 0: the evaluation before step 1
        per_step = tail.seconds_per_step()
        left = n_steps - steps_done if n_steps is not None else None
        active = name in ACTIVE_STATUSES
        return RunProgress(
            num=job.num, label=label, run_dir=run_dir, status=name,
            reason=(f"metrics unusable: {tail.unusable}" if tail.unusable
                    else str_or_none(status.get("reason"))),
            steps_done=steps_done, n_steps=n_steps,
            train_reward=_float_or_none(tail.last.get(TRAIN_REWARD)) if usable else None,
            eval_reward=tail.last_eval[1] if usable and tail.last_eval else None,
            eval_step=tail.last_eval[0] if usable and tail.last_eval else None,
            seconds_per_step=per_step,
            eta_s=per_step * left if active and per_step is not None and left else None,
            restarts=_int_or_none(status.get("restarts")) or 0,
            resumed_from=tuple(s for s in status.get("resumed_from") or () if isinstance(s, int)),
            log=job.log,
        )


def _numbered_dirs(sweep_dir: Path) -> list[Path]:
    """`job_dirs`, none where the sweep directory cannot be listed (the monitor goes on)."""
    try:
        return job_dirs(sweep_dir)
    except OSError:
        return []


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float_or_none(value: Any) -> float | None:
    return float(value) if _finite(value) else None


def outcome(run: RunProgress, scheduler: str | None, error: str | None = None) -> RunProgress:
    """``run`` with what the scheduler (and, for a finished job, its ``error``) says folded in.

    A run that completed, collapsed, diverged or was pruned stays so. A job the scheduler cancelled is
    ``cancelled``, whatever its status said (a cancelled run may have written ``failed`` or
    nothing at all). Another final status the trainer wrote stands. A job that ended while its
    status was still active is ``failed``, with the job's error or the scheduler's state as the
    reason, except a ``preempted`` one, which stays so (checkpointed, not requeued). A status
    outside ``grpo.run.files.STATUSES`` is kept and explained.
    """
    state = state_word(scheduler)
    if run.status in FINISHED_STATUSES:
        return run
    if state == "CANCELLED" or run.status == "cancelled":
        where = f"after step {run.steps_done}" if run.steps_done else "before its first step"
        said = f" (the run reported {run.status}: {run.reason})" if run.status == "failed" else ""
        reason = run.reason if run.status == "cancelled" and run.reason else f"cancelled {where}"
        return replace(run, status="cancelled", reason=reason + said, eta_s=None)
    if run.status not in STATUSES and run.status not in ACTIVE_STATUSES:
        return replace(run, reason=f"status.json holds an unknown status {run.status!r}")
    if run.status == "pending" and state == "RUNNING":
        return replace(run, status="starting")
    if state in GONE:
        status, reason = ("cancelled", f"never started: {GONE[state]}") if run.status == \
            "pending" else ("failed", GONE[state])
        return replace(run, status=status, reason=run.reason or reason, eta_s=None)
    if not run.active or state in SCHEDULER_ACTIVE or (not state and error is None):
        return run
    if run.status == "preempted":  # checkpointed, but its job will not be requeued
        return replace(run, job_ended=True, eta_s=None)
    reason = error or f"the job ended ({state}) without a final status"
    return replace(run, status="failed", reason=run.reason or reason, eta_s=None)
