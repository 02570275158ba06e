"""The per-problem outcomes of the runs a ranking compares: each run's ``eval_outcomes/`` files at
the evaluation steps its value averages, read once before the ranking decides, each checked
against the ``eval/reward`` the run logged at that step (a file whose mean is not the logged one
is not used, and why is said)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.readers.collect import Collection
from analysis.readers.run_rows import EVAL_REWARD
from grpo.run.outcomes import OUTCOMES_DIR, EvalOutcomes, checked_outcomes, outcomes_path

LateOutcomes = tuple[np.ndarray, str, int, int]
"""A run's per-problem rewards averaged over its late evaluations (N,), their problems' digest,
the fewest responses per problem and how many evaluations."""


def late_outcomes(collection: Collection, late_steps: pd.Series
                  ) -> dict[str, LateOutcomes | str | None]:
    """Each run's outcomes at its late steps: ``late_steps`` maps a run id (of ``collection``) to
    the evaluation steps its value averages (a tuple; anything else: None for that run); the
    result maps the same run ids to its :data:`LateOutcomes`, or what is wrong with its outcome
    files in words (:func:`_late_outcomes`)."""
    run_dirs = collection.runs.set_index("run_id")["run_dir"]
    logged = _logged_rewards(collection, late_steps.index)
    return {run_id: _late_outcomes(Path(run_dirs.loc[run_id]), steps, logged.get(run_id, {}),
                                   collection.metric)
            for run_id, steps in late_steps.items()}


OUTCOMES_TOLERANCE = 1e-5
"""How far an outcomes file's mean may be from the logged ``eval/reward`` of its step (the file's
rewards are rounded to 6 decimals)."""


def _logged_rewards(collection: Collection, run_ids: Iterable[str]) -> dict[str, dict[int, float]]:
    """Each run's logged ``eval/reward`` by step."""
    steps = collection.steps
    if EVAL_REWARD not in steps:
        return {}
    rows = steps.loc[steps["run_id"].isin(set(run_ids)) & steps[EVAL_REWARD].notna(),
                     ["run_id", "step", EVAL_REWARD]]
    return {run_id: dict(zip(part["step"].astype(int), part[EVAL_REWARD].astype(float), strict=True))
            for run_id, part in rows.groupby("run_id", sort=False)}


def _late_outcomes(run_dir: Path, steps: object, logged: dict[int, float], metric: str
                   ) -> LateOutcomes | str | None:
    """A run's per-problem values of ``metric`` (``analysis.metric``) averaged over its
    evaluations at ``steps`` (N,), their problems' digest, the fewest responses per problem and
    how many evaluations; or what is wrong with its outcome files, in words (missing,
    unreadable or crafted, naming the field: ``grpo.run.outcomes.checked_outcomes``; without the metric, of other problems, or a mean that is not the ``logged``
    value of the step: then none is used)."""
    if not isinstance(steps, tuple) or not steps:
        return None
    if not (run_dir / OUTCOMES_DIR).is_dir():
        return f"no {OUTCOMES_DIR}/: its per-problem outcomes are unknown"
    found: dict[int, EvalOutcomes] = {}
    for step in steps:
        name = outcomes_path(run_dir, step).relative_to(run_dir).as_posix()
        outcome = checked_outcomes(run_dir, step)
        if outcome is None:
            return f"{name} is missing"
        if isinstance(outcome, str):
            return (f"{name}: {outcome}: its outcomes are not used (the trainer writes none "
                    "such); train the run again to compare it problem by problem")
        found[step] = outcome
        values = outcome.per_problem(metric)
        if values is None:
            return f"{name} keeps no counts for {metric} (written before they were kept)"
        mean = float(np.mean(values))
        if step in logged and abs(mean - logged[step]) > OUTCOMES_TOLERANCE:
            return (f"{name}'s mean {metric} {mean:.4f} is not the logged "
                    f"eval/{metric} {logged[step]:.4f} of step {step}: its outcomes are not used")
    if len({(o.digest, len(o.reward)) for o in found.values()}) != 1:
        return f"{OUTCOMES_DIR}/ holds evaluations of different problems at steps {list(steps)}"
    first = found[steps[0]]
    return (np.mean([o.per_problem(metric) for o in found.values()], axis=0), first.digest,
            min(o.samples_per_problem for o in found.values()), len(found))
