"""When a run is over: the one rule that says a launch would train nothing for a run directory.

A run is over for a launch when its `status.json` says it ended as a result and the launched
config would not take it further:

- `completed` with `last_step` >= the launch's `n_grpo_steps` (a larger `n_grpo_steps` trains it
  on from its last checkpoint), and, where the config saves a final model, a `final_model/` whose
  manifest lists what is there (sizes only, no hashing: a launch of a completed run whose final
  model is missing or partial writes it again); where it confirms (`confirm.enabled`), a readable
  confirmation of its last step at the launch's `confirm.samples_per_problem` (a launch of a
  completed run without one evaluates its final policy on the held-out problems);
- `pruned` while the launch prunes (`pruning=off` trains it on from the checkpoint of its step);
- `collapsed` or `diverged` (a health guard stopped it: its last checkpoint is from before the
  stop, and training on from there would meet the same stop; a new run directory trains the
  config again).

Every status that is not a result (`running`, `failed`, `cancelled`, `preempted`, none yet) trains
on. The sweeper does not submit a run that is over (it is in the sweep's summary as it is), the
trainer trains nothing for one (`grpo.training.trainer.train`: its files are left as they are),
a race's wave launches only the runs that are not (`analysis.decisions.race.looks.todo`), and a chain's stage is
finished when each of its runs ended as a result. The status names every reader shares live here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grpo.run.checkpoint_names import FINAL_MODEL
from grpo.run.files import MAX_STATUS_BYTES, RunFileError, read_json, typed_status_fields
from grpo.run.manifest import manifest_problem
from grpo.run.outcomes import CONFIRM_DIR, read_outcomes

UNSTABLE_STATUSES = ("diverged", "collapsed")
"""Runs a health guard stopped: their curves are no result."""
STOPPED_STATUSES = (*UNSTABLE_STATUSES, "pruned")
"""Runs stopped before their last step, by a health guard or by the sweep's pruner: a config with
one is not ranked (its curve ends early), and the figures mark where each one stopped."""
FINISHED_STATUSES = ("completed", *STOPPED_STATUSES)
"""Runs that ended as a result, good or bad: they ran to their end, or a health guard or the
sweep's pruner stopped them."""


@dataclass(frozen=True)
class Launch:
    """What of a launched config decides whether a run trains on: its `n_grpo_steps`, whether
    its sweep prunes (`pruning.name` other than `off`) and whether it saves a final model
    (`checkpoint.save_final_model`)."""

    n_grpo_steps: int
    prunes: bool
    saves_final_model: bool
    confirms: int | None = None
    """The responses per held-out problem of the launch's confirmation (`confirm.enabled`,
    `confirm.samples_per_problem`); None: it confirms nothing."""

    @classmethod
    def of(cls, cfg: Mapping[str, Any]) -> Launch:
        """The launch of config `cfg` (a composed DictConfig or its resolved plain dict);
        ValueError where it lacks one of the keys (a config without `confirm`, from before it
        existed, confirms nothing)."""
        from grpo.run.pruning import OFF  # optuna: imported where a config is read, not by readers

        try:
            confirm = cfg.get("confirm") or {}
            return cls(int(cfg["n_grpo_steps"]), str(cfg["pruning"]["name"]) != OFF,
                       bool(cfg["checkpoint"]["save_final_model"]),
                       int(confirm["samples_per_problem"]) if confirm.get("enabled") else None)
        except (KeyError, TypeError, ValueError) as err:  # a crafted record's config
            raise ValueError(f"a config without a usable n_grpo_steps, pruning.name or "
                             f"checkpoint.save_final_model ({type(err).__name__}: {err})") from None


@dataclass(frozen=True)
class Over:
    """A run that a launch would train nothing for: its `status.json` (`status`) and why, in
    words (`why`)."""

    status: dict[str, Any]
    why: str

    @property
    def name(self) -> str:
        """The run's status (`completed`, `pruned`, ...)."""
        return str(self.status["status"])


def over_why(status: Mapping[str, Any] | None, launch: Launch) -> str | None:
    """Why a run whose `status.json` says `status` (None: it has none) is over for `launch`, or
    None where the launch trains it on. The final model is not looked at (`run_over`)."""
    name = (status or {}).get("status")
    last = (status or {}).get("last_step")
    last = last if isinstance(last, int) and not isinstance(last, bool) else 0
    if name == "completed":
        if last >= launch.n_grpo_steps:
            return (f"completed at step {last} of n_grpo_steps={launch.n_grpo_steps} (a larger "
                    "n_grpo_steps trains it on)")
        return None
    if name == "pruned":
        return (f"stopped by the pruner after step {last}; it stays pruned (launch it with "
                "pruning=off to train it on)") if launch.prunes else None
    if name in UNSTABLE_STATUSES:
        return (f"{name} after step {last}, stopped by a health guard: training on from its last "
                "checkpoint would meet the same stop (a new run directory trains the config again)")
    return None


def read_run_status(run_dir: Path) -> dict[str, Any] | None:
    """`run_dir/status.json`'s known fields (`typed_status_fields`), or None where it is missing,
    unreadable or not a JSON object; warns about nothing (the run, when launched, does)."""
    try:
        status = read_json(run_dir / "status.json", MAX_STATUS_BYTES)
    except RunFileError:
        return None
    return typed_status_fields(status) if isinstance(status, dict) else None


def run_over(run_dir: Path, launch: Launch) -> Over | None:
    """The run in `run_dir` if a launch `launch` would train nothing for it (`over_why`; a
    completed run whose config saves a final model also needs a `final_model/` that holds what its
    manifest lists, and one that confirms its confirmation: `confirmed`), else None. Reads only."""
    status = read_run_status(run_dir)
    why = over_why(status, launch)
    if why is None or status is None:
        return None
    if status["status"] == "completed" and launch.saves_final_model and manifest_problem(
            run_dir / FINAL_MODEL, ("config.json",), hashes=False) is not None:
        return None
    if (status["status"] == "completed" and launch.confirms is not None
            and not confirmed(run_dir, int(status.get("last_step") or 0), launch.confirms)):
        return None
    return Over(status, why)


def confirmed(run_dir: Path, step: int, samples_per_problem: int) -> bool:
    """Whether the run in `run_dir` holds a readable confirmation of GRPO step `step` (its final
    policy on the held-out problems, `grpo.run.outcomes.CONFIRM_DIR`) of `samples_per_problem`
    responses a problem."""
    found = read_outcomes(run_dir, step, CONFIRM_DIR)
    return found is not None and found.samples_per_problem == samples_per_problem
