"""What a stage of the chain has done: the state of its latest sweep and its best config.

A stage's sweeps live in ``<paths.output_root>/<experiment_name>/<timestamp>/``; the latest is
the one whose ``multirun.yaml`` was written last (:func:`analysis.readers.collect.find_latest_sweep`).
A sweep is **finished** when every one of its jobs (``jobs.json``, else its run directories)
ended as a result: ``completed``, ``collapsed``, ``diverged`` or ``pruned``
(:data:`analysis.outputs.progress.FINISHED_STATUSES`, with what the scheduler says folded in); it is
**active** while a job may still write (pending, running, preempted and requeued). A stage's
**winner** is the best config of its latest sweep by :func:`analysis.decisions.ranking.rank`, the
ranking ``promote`` and the reports use: configs with a run stopped early (pruned, collapsed,
diverged) left out, the others compared at the largest step every one of them reached; of a
race, among the configs still in at its last look as its runs say (:func:`analysis.decisions.race.looks.still_in`,
which names where the race's record says otherwise: ``Winner.race_notes``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.decisions.race.looks import still_in
from analysis.decisions.ranking import Ranking, rank
from analysis.outputs.monitor import counts_text
from analysis.outputs.progress import FINISHED_STATUSES, RunProgress, SweepProgress
from analysis.readers.collect import LABEL, collect, find_latest_sweep, run_values
from analysis.readers.jobs import scheduler_states
from grpo.run.files import RunFileError


@dataclass(frozen=True)
class SweepState:
    """The runs of one sweep directory as the monitor sees them."""

    sweep: Path
    runs: list[RunProgress]

    @property
    def finished(self) -> bool:
        """Every job ended as a result (completed, collapsed, diverged or pruned)."""
        return bool(self.runs) and all(run.status in FINISHED_STATUSES for run in self.runs)

    @property
    def active(self) -> list[RunProgress]:
        """The runs that may still write."""
        return [run for run in self.runs if run.active]

    def counts(self) -> str:
        """``3 runs: 2 completed, 1 failed``."""
        return f"{len(self.runs)} runs: {counts_text(self.runs)}" if self.runs else "no runs"


def latest_sweep(stage_root: Path) -> Path | None:
    """The latest sweep directory under ``<output_root>/<experiment_name>``, or None."""
    try:
        return find_latest_sweep(stage_root) if stage_root.is_dir() else None
    except FileNotFoundError:
        return None


def sweep_state(sweep: Path) -> SweepState:
    """The state of every job of ``sweep`` (asking the scheduler about its recorded jobs)."""
    return SweepState(sweep, SweepProgress(sweep).read(scheduler_states(sweep)))


@dataclass(frozen=True)
class Winner:
    """The best config of a sweep, the values it had for the asked keys, and its ranking
    (near-ties and the configs left out for a run stopped early)."""

    sweep: Path
    label: str
    values: dict[str, Any]
    ranking: Ranking
    race_notes: tuple[str, ...] = ()
    """Where the sweep's race record disagrees with its runs (`analysis.decisions.race.looks.still_in`)."""

    def describe(self) -> str:
        """``learning_rate=0.0003 (late_eval_reward 0.2500 [0.2210, 0.2790] at step 200, 1 of 2
        configs ranked)``: the value with its 95% interval, where there is one."""
        n = len(self.ranking.table) + len(self.ranking.excluded)
        interval = ""
        if self.ranking.uncertainty is not None:
            estimate = self.ranking.uncertainty.estimates[self.label]
            if not math.isnan(estimate.lo):
                interval = f" [{estimate.lo:.4f}, {estimate.hi:.4f}]"
        return (f"{self.label} ({self.ranking.criterion} {self.ranking.value(self.label):.4f}"
                f"{interval} at step {self.ranking.at_step}, {len(self.ranking.table)} of {n} "
                "configs ranked)")


def find_winner(sweep: Path, keys: tuple[str, ...], off_policy_only: bool = False
                ) -> Winner | str:
    """The best config of ``sweep`` (among its off-policy configs when ``off_policy_only``; of a
    race, among the configs still in at its last look, its near-ties the others of them) with
    its values of ``keys``, or why there is none."""
    try:
        collection = collect([sweep])
        kept, notes = still_in(collection)
    except (OSError, ValueError, RunFileError) as error:
        return f"its sweep {sweep} cannot be read ({error})"
    runs = collection.runs
    labels = set(runs.loc[runs["off_policy"].eq(True), LABEL]) if off_policy_only else None
    if kept is not None:
        labels = set(kept) if labels is None else labels & set(kept)
    ranking = rank(collection, labels=labels)
    if ranking.best is None:
        what = "off-policy config" if off_policy_only else "config"
        excluded = "; ".join(f"{label} ({why})" for label, why in ranking.excluded.items())
        return (f"no {what} of {sweep} has a validation reward without a run stopped early "
                "(collapsed, diverged, pruned)" + (f" (excluded: {excluded})" if excluded else ""))
    best_runs = runs[(runs[LABEL] == ranking.best) & (runs["steps_done"] > 0)]
    values = run_values(Path(best_runs["run_dir"].iloc[0]), keys)
    return Winner(sweep, ranking.best, values, ranking, tuple(notes))
