"""Successive halving across a sweep (asynchronous, ASHA-style), run by Optuna's pruners.

Each run of a sweep is one trial of one Optuna study kept in the sweep directory
(`<sweep>/pruning.journal`). At each evaluation the run reports the mean of its validation
values of `analysis.metric` (the metric the ranking reads: `eval/reward` by default, `eval/pass@k`
etc. with `eval.samples_per_problem` > 1, `grpo.run.outcomes.logged_key`; 0-1) over its last `LATE_EVALS` evaluations after step 0 (the ranking's
criterion: one evaluation's noise would stop good runs, bench/selection_calibration.py) at its
*resource*: the GRPO steps done (`pruning.resource=step`), or the
seconds of training wall-clock, evaluation excluded (`resource=train_minutes`, whose
`min_resource` is in minutes). It then asks the sweep's pruner whether to go on; a run told to
stop checkpoints and ends as `pruned` (not failed, not requeued; relaunched with `pruning=off` it
trains on from that checkpoint). Hydra's sweep still defines the jobs; the pruner only stops them.

The pruners (`PRUNERS`, one `conf/pruning/<name>.yaml` each; `pruning=off` is none):

- `successive_halving`: Optuna's SuccessiveHalvingPruner (asynchronous successive halving). Rung
  k sits at `min_resource * reduction_factor**(min_early_stopping_rate + k)`; a run that reaches
  a rung goes on only if its value is in the top 1/reduction_factor of the values of the runs
  that reached that rung before it (the first ones always go on).
- `hyperband`: Optuna's HyperbandPruner: runs are spread over brackets of successive halving
  with different first rungs, up to `n_grpo_steps` (step resource only).

Storage: Optuna's JournalStorage over a JournalFileBackend with Optuna's JournalFileOpenLock: a
lock file created with `O_CREAT | O_EXCL`, which is atomic on NFSv3 and later, so the jobs of a
SLURM array share the journal on the cluster's shared filesystem (the symlink lock is Optuna's
choice for NFSv2; `fcntl` locks, which SQLite needs, are unreliable on many NFS servers). A job
that dies holding the lock leaves the file; the others break it after Optuna's 30 s grace period.

A trial is found again by its job (the run directory's name, user attribute `job`): a requeued or
resumed run re-attaches to its RUNNING trial, whose rungs and reported values the journal kept;
a stop decided but not yet recorded when the job died is recorded on the trial first
(`pruned_at`), so a resumed run stops at the same point. A journal that cannot be read (torn,
crafted, too large) or written never stops a run: pruning is switched off for it, with a warning.

`replay` runs the same pruner over recorded or simulated runs in memory, with the launch order
and parallelism of a sweep: the dry run's cost estimate and `bench/pruning_replay.py` use it.
"""

from __future__ import annotations

import heapq
import logging
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.pruners import BasePruner, HyperbandPruner, SuccessiveHalvingPruner
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
from optuna.trial import FrozenTrial, Trial, TrialState

from grpo.run.files import planted_link
from grpo.run.outcomes import LATE_EVALS, is_reward, late_mean

log = logging.getLogger(__name__)
optuna.logging.set_verbosity(optuna.logging.WARNING)

OFF = "off"
"""`pruning.name` of `conf/pruning/off.yaml`: no pruner, every run trains to its end."""
METRIC = "eval/reward"
"""What a run reports by default: its validation reward (higher is better)."""
RESOURCES = {"step": "GRPO steps", "train_minutes": "minutes of training wall-clock"}
"""What rungs count (`pruning.resource`), in words."""
JOURNAL = "pruning.journal"
"""The study's journal file in the sweep directory."""
STUDY = "sweep"
JOB_ATTR = "job"
STOP_ATTR = "pruned_at"
EVALS_ATTR = "evals"
"""The trial's user attribute holding the run's evaluations ({step: its reported metric}), so that a
resumed run averages the same ones."""
MAX_JOURNAL_BYTES = 64 << 20
"""Largest journal read (a 480-run, 200-step sweep's is about 2 MB)."""


class PruningUnavailable(RuntimeError):
    """The sweep's study cannot be used; the run trains on without pruning."""


@dataclass(frozen=True)
class PrunerKind:
    """One registered pruner: `build(settings, n_grpo_steps)` makes the Optuna pruner; `keys`
    are the hyperparameters its `conf/pruning/<name>.yaml` holds besides `name`;
    `step_resource_only`: its rungs can only count GRPO steps."""

    name: str
    build: Callable[[PruningSettings, int], BasePruner]
    keys: tuple[str, ...]
    step_resource_only: bool = False


@dataclass(frozen=True)
class PruningSettings:
    """`cfg.pruning` of a run whose pruning is on (see the module docstring for the keys)."""

    name: str
    resource: str = "step"
    min_resource: int = 1
    reduction_factor: int = 3
    min_early_stopping_rate: int = 0
    metric: str = METRIC
    """The logged key a run reports (`grpo.run.outcomes.logged_key` of `analysis.metric`)."""

    @staticmethod
    def from_config(pruning: Mapping[str, Any], metric: str = METRIC) -> PruningSettings | None:
        """The settings of `cfg.pruning` reading the logged key `metric`, or None when it is
        `off`. Unknown names and keys are the validator's to refuse (grpo.config.validation);
        here they raise KeyError/TypeError."""
        name = str(pruning["name"])
        if name == OFF:
            return None
        kind = PRUNERS[name]
        return PruningSettings(name, **{key: pruning[key] for key in kind.keys}, metric=metric)

    @property
    def kind(self) -> PrunerKind:
        """This pruner's registry entry."""
        return PRUNERS[self.name]

    @property
    def scale(self) -> int:
        """Reported resource units per `min_resource` unit (60 seconds a minute, or 1)."""
        return 60 if self.resource == "train_minutes" else 1

    def pruner(self, n_grpo_steps: int) -> BasePruner:
        """The Optuna pruner of a sweep of `n_grpo_steps`-step runs."""
        return self.kind.build(self, n_grpo_steps)

    def first_rung(self) -> int:
        """The resource (in `resource` units) before which no run is stopped."""
        return self.min_resource * self.reduction_factor ** self.min_early_stopping_rate

    def resource_of(self, step: int, train_seconds: float) -> int:
        """What a run reports after `step` GRPO steps and `train_seconds` of training."""
        return step if self.resource == "step" else int(train_seconds)

    def describe(self, n_grpo_steps: int) -> str:
        """``pruning=successive_halving: rungs at 10, 30 GRPO steps, the top 1/3 go on`` (the
        rungs before `n_grpo_steps`, for the step resource)."""
        rungs = [self.first_rung()]
        while self.resource == "step" and rungs[-1] * self.reduction_factor < n_grpo_steps:
            rungs.append(rungs[-1] * self.reduction_factor)
        unit = RESOURCES[self.resource]
        if self.name == "hyperband":
            where = f"brackets of successive halving from {rungs[0]} {unit}"
        elif self.resource == "step":
            where = f"rungs at {', '.join(map(str, rungs))} {unit}"
        else:
            where = f"rungs at {rungs[0]} {unit} x {self.reduction_factor}^k"
        return f"pruning={self.name}: {where}, the top 1/{self.reduction_factor} go on"


def _successive_halving(settings: PruningSettings, n_grpo_steps: int) -> BasePruner:
    return SuccessiveHalvingPruner(
        min_resource=settings.min_resource * settings.scale,
        reduction_factor=settings.reduction_factor,
        min_early_stopping_rate=settings.min_early_stopping_rate,
    )


def _hyperband(settings: PruningSettings, n_grpo_steps: int) -> BasePruner:
    return HyperbandPruner(min_resource=settings.min_resource, max_resource=n_grpo_steps,
                           reduction_factor=settings.reduction_factor)


PRUNERS: dict[str, PrunerKind] = {
    kind.name: kind for kind in (
        PrunerKind("successive_halving", _successive_halving,
                   ("resource", "min_resource", "reduction_factor", "min_early_stopping_rate")),
        PrunerKind("hyperband", _hyperband, ("resource", "min_resource", "reduction_factor"),
                   step_resource_only=True),
    )
}
"""Pruner name (`pruning.name`) -> its entry; the validator, the trainer and the dry run read it."""


def _storage(path: Path) -> JournalStorage:
    """The journal at `path`, replayed; PruningUnavailable when it is a planted link, too large
    or unreadable."""
    if path.is_symlink():
        raise PruningUnavailable(str(planted_link(path)))
    if path.is_file() and path.stat().st_size > MAX_JOURNAL_BYTES:
        raise PruningUnavailable(f"{path} is larger than {MAX_JOURNAL_BYTES} bytes")
    try:
        return JournalStorage(JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path))))
    except Exception as err:  # noqa: BLE001 -- Optuna replaying a torn or crafted journal
        raise PruningUnavailable(f"{path} cannot be read ({type(err).__name__}: {err})") from None


def open_study(sweep_dir: Path, settings: PruningSettings, n_grpo_steps: int) -> optuna.Study:
    """The sweep's study (created by the first run that asks); PruningUnavailable when its
    journal is a planted link, too large or unreadable."""
    storage = _storage(sweep_dir / JOURNAL)
    try:
        return optuna.create_study(study_name=STUDY, storage=storage, direction="maximize",
                                   pruner=settings.pruner(n_grpo_steps), load_if_exists=True)
    except Exception as err:  # noqa: BLE001 -- Optuna replaying a torn or crafted journal
        raise PruningUnavailable(f"{sweep_dir / JOURNAL} cannot be read ({type(err).__name__}: "
                                 f"{err})") from None


def journal_problem(sweep_dir: Path) -> str | None:
    """Why the sweep's journal cannot be used (each run that read it trained without pruning),
    or None when it can or there is none. Reads, never writes."""
    path = sweep_dir / JOURNAL
    if not (path.is_file() or path.is_symlink()):
        return None
    try:
        _storage(path).get_all_studies()
    except PruningUnavailable as err:
        return str(err)
    except Exception as err:  # noqa: BLE001 -- Optuna on a crafted journal
        return f"{path} cannot be read ({type(err).__name__}: {err})"
    return None


def _reattach(study: optuna.Study, frozen: FrozenTrial) -> Trial:
    """A handle on `frozen`, a RUNNING trial of `study` started by an earlier process.

    Optuna internals (optuna 4-5): the `Trial(study, trial_id)` constructor and
    `FrozenTrial._trial_id`; tests/test_dependency_adapters.py checks both against the installed
    release."""
    return Trial(study, frozen._trial_id)


class RunTrial:
    """One run's trial: it reports each evaluation and learns whether to stop (`report`), and
    records how the run ended (`finish`). Every Optuna call that fails switches pruning off for
    the run with a warning (`PruningUnavailable` is never raised past it)."""

    def __init__(self, settings: PruningSettings, study: optuna.Study, trial: Trial | None,
                 frozen: FrozenTrial | None) -> None:
        self.settings = settings
        self.study = study
        self.trial = trial
        self.reported = dict(frozen.intermediate_values) if frozen is not None else {}
        kept = frozen.user_attrs.get(EVALS_ATTR) if frozen is not None else None
        self.evals = {int(step): float(value) for step, value in kept.items()
                      if str(step).isdigit() and is_reward(value)} if isinstance(kept, dict) else {}
        stop = frozen.user_attrs.get(STOP_ATTR) if frozen is not None else None
        recorded = isinstance(stop, dict) and isinstance(stop.get("resource"), int) \
            and isinstance(stop.get("reason"), str)
        self.pruned_at = stop if recorded else None  # a crafted record is no record

    @staticmethod
    def attach(settings: PruningSettings, run_dir: Path, n_grpo_steps: int) -> RunTrial | None:
        """The trial of the run in `run_dir` (its sweep is `run_dir`'s parent): the one the run
        had, re-attached, else a new one. None when the study cannot be used (a warning says
        why); a RunTrial without a trial when the run's trial already ended (it reports nothing)."""
        job = run_dir.name
        try:
            study = open_study(run_dir.parent, settings, n_grpo_steps)
            mine = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(JOB_ATTR) == job]
            if not mine:
                trial = study.ask()
                trial.set_user_attr(JOB_ATTR, job)
                return RunTrial(settings, study, trial, None)
            frozen = mine[-1]
            if frozen.state != TrialState.RUNNING:
                log.warning(f"{run_dir}: its trial of the sweep's pruner ended ({frozen.state.name}); "
                            "the run trains on without being pruned")
                return RunTrial(settings, study, None, frozen)
            return RunTrial(settings, study, _reattach(study, frozen), frozen)
        except PruningUnavailable as err:
            log.warning(f"pruning is off for {run_dir}: {err}")
        except Exception as err:  # noqa: BLE001 -- Optuna on a journal written by other processes
            log.warning(f"pruning is off for {run_dir}: the sweep's study failed "
                        f"({type(err).__name__}: {err})")
        return None

    def _off(self, err: Exception) -> None:
        log.warning(f"pruning is off for this run from now on: the sweep's study failed "
                    f"({type(err).__name__}: {err})")
        self.trial = None

    def report(self, step: int, metrics: Mapping[str, float]) -> str | None:
        """Report the evaluation logged in `metrics` after GRPO step `step` (as the mean of the
        run's last `LATE_EVALS` evaluations after step 0); the reason to stop when the pruner
        says so, else None."""
        if self.trial is None or self.settings.metric not in metrics:
            return None
        resource = self.settings.resource_of(step, metrics.get("time/elapsed_no_eval_s", 0.0))
        if self.pruned_at is not None and resource >= self.pruned_at["resource"]:
            return str(self.pruned_at["reason"])  # decided before a restart, not yet recorded
        value = float(metrics[self.settings.metric])
        try:
            if step > 0 and math.isfinite(value):
                self.evals[step] = value
                self.trial.set_user_attr(EVALS_ATTR, {str(s): v for s, v in self.evals.items()})
                value = late_mean([v for s, v in sorted(self.evals.items()) if s <= step])
            if resource not in self.reported:  # a redone step after a resume: reported already
                self.trial.report(value, resource)
                self.reported[resource] = value
            if not self.trial.should_prune():
                return None
            reason = self._reason(resource, self.reported[resource])
            self.trial.set_user_attr(STOP_ATTR, {"resource": resource, "reason": reason})
            return reason
        except Exception as err:  # noqa: BLE001 -- see the class docstring
            self._off(err)
            return None

    def _reason(self, resource: int, value: float) -> str:
        """Why the run stops, from the values the other runs reported at or past `resource`
        (the status names the step)."""
        others = []
        for trial in self.study.get_trials(deepcopy=False):
            if trial.number == self.trial.number:
                continue
            later = [s for s in trial.intermediate_values if s >= resource]
            if later:
                others.append(trial.intermediate_values[min(later)])
        rank = 1 + sum(v > value for v in others)
        where = "" if self.settings.resource == "step" else f" ({resource / 60:.1f} min of training)"
        best = f" (best {max(others):.3f})" if others else ""
        return (f"the {self.settings.name} pruner stopped it: mean {self.settings.metric} of its last "
                f"{LATE_EVALS} evaluations {value:.3f}{where} ranks "
                f"{rank} of the {len(others) + 1} runs measured this far{best}, and the top "
                f"1/{self.settings.reduction_factor} go on")

    def finish(self, status: str, value: float | None = None) -> None:
        """Record how the run ended: `completed` (with its last `value`), `pruned`, or
        `collapsed`/`diverged` (failed trials). Any other status leaves the trial running: the
        run resumes and re-attaches."""
        state = {"completed": TrialState.COMPLETE, "pruned": TrialState.PRUNED,
                 "collapsed": TrialState.FAIL, "diverged": TrialState.FAIL}.get(status)
        if self.trial is None or state is None:
            return
        try:
            if state == TrialState.COMPLETE and value is not None and math.isfinite(value):
                self.study.tell(self.trial, value)
            else:
                self.study.tell(self.trial, state=TrialState.FAIL if state == TrialState.COMPLETE
                                else state)
        except Exception as err:  # noqa: BLE001 -- see the class docstring
            self._off(err)
        self.trial = None


# ------------------------------------------------------------------------------------- replay


@dataclass(frozen=True)
class ReplayJob:
    """One job of a replayed sweep: its evaluations as (resource, value, seconds into the run
    when measured), in order, and the seconds the whole run takes."""

    reports: Sequence[tuple[int, float, float]]
    total_seconds: float


@dataclass(frozen=True)
class ReplayOutcome:
    """What the pruner let a replayed job do: stopped at `pruned_at` (resource; None: it ran to
    its end) after `seconds` of its run."""

    pruned_at: int | None
    seconds: float


def replay(settings: PruningSettings, n_grpo_steps: int, jobs: Sequence[ReplayJob],
           parallel: int) -> list[ReplayOutcome]:
    """Run `jobs` through the pruner as a sweep would: in order, `parallel` at a time, each
    starting when a slot frees; every evaluation is reported when its time comes. In memory."""
    study = optuna.create_study(study_name=STUDY, direction="maximize",
                                pruner=settings.pruner(n_grpo_steps))
    outcomes: dict[int, ReplayOutcome] = {}
    events: list[tuple[float, int, int]] = []  # (time, job, index of its next report)
    trials: dict[int, Trial] = {}
    starts: dict[int, float] = {}
    waiting = list(range(len(jobs)))[::-1]

    def start(now: float) -> None:
        index = waiting.pop()
        starts[index] = now
        trials[index] = study.ask()
        heapq.heappush(events, (now + _next_time(jobs[index], 0), index, 0))

    for _ in range(min(parallel, len(jobs))):
        start(0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a resource reported twice (equal seconds) is ignored
        while events:
            now, index, position = heapq.heappop(events)
            job, trial = jobs[index], trials[index]
            if position < len(job.reports):
                resource, value, _ = job.reports[position]
                trial.report(value, resource)
                if trial.should_prune():
                    study.tell(trial, state=TrialState.PRUNED)
                    outcomes[index] = ReplayOutcome(resource, now - starts[index])
                else:
                    heapq.heappush(events, (starts[index] + _next_time(job, position + 1),
                                            index, position + 1))
                    continue
            else:
                last = job.reports[-1][1] if job.reports else math.nan
                if math.isfinite(last):
                    study.tell(trial, last)
                else:
                    study.tell(trial, state=TrialState.FAIL)
                outcomes[index] = ReplayOutcome(None, job.total_seconds)
            if waiting:
                start(now)
    return [outcomes[i] for i in range(len(jobs))]


def _next_time(job: ReplayJob, position: int) -> float:
    """Seconds into `job` of its report at `position`, or its end after the last one."""
    return job.reports[position][2] if position < len(job.reports) else job.total_seconds
