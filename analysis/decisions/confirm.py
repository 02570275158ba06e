"""What a confirmation measured (:mod:`analysis.outputs.confirm` launches it): each finalist's
selection figure (the source sweep's ranking: its problems, its seeds) beside its confirmed figure
(held-out problems; fresh seeds unless it was not trained again), the difference (the winner's
curse as measured), and whether the confirmed runs keep the selection's order.

* **Confirmed figure**: the mean over a finalist's confirmed runs of each run's mean of
  ``analysis.metric`` over the held-out problems (its final policy, one evaluation), with the 95%
  interval of :func:`analysis.stats.comparisons.estimate`: the seed variance (pooled over the
  finalists' confirmed runs, each config's own where larger: ``config_variance``) and the held-out
  problems' variance. Without a seed variance of its own (one seed a finalist) a confirmation that
  was not trained again rests on the source sweep's (the same runs), a retrained one has no
  interval. pass@k and maj@k (k = ``confirm.samples_per_problem``) the same way, each on its own
  seed variance.
* **Difference**: selection minus confirmed, its interval carrying both figures' noise
  (:func:`analysis.stats.comparisons.difference`: the two variances added, Satterthwaite's df).
* **Order**: the comparisons the sweep made of each finalist against its best, made again on the
  confirmed runs (Tukey-Kramer over the finalists, each pair on its own seed variance where larger:
  ``pair_variance``), and whether the confirmed means keep the selection's order.

* **Placebo** (``--placebo``): the best finalist's config trained on ``reward=random`` with the
  same fresh seeds, confirmed on the same held-out problems; each finalist's margin above it
  (:func:`analysis.stats.placebo.above_placebo`, on the seed variance pooled over the finalists'
  and the placebo's confirmed runs, each pair's own where larger, at ``alpha`` / k for k finalists:
  Bonferroni), and the placebo's own gain over the pre-RL evaluation
  (:func:`analysis.stats.placebo.gain_over_pre_rl`: each of its runs' late value on its evaluation
  problems minus its step-0 evaluation, paired run by run, on the placebo's own seed variance).

A confirmation whose held-out problems share a fingerprint with a problem any evaluation of the
source sweep read, or whose fresh seeds one of its runs used, is said to be none (no figure); so
is one whose record does not describe it (it lies where no confirmation of the sweep it names
would, or a run of it ran an option its record names for no arm) or no longer the sweep's pick
(a finalist the sweep does not rank, or its finalists not the ranking's top k in order now).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from analysis.decisions.ranking import Ranking, run_values_at
from analysis.readers.collect import CONFIRM_RECORD, Collection, collect
from analysis.readers.confirmation import (
    ConfirmedRun,
    ConfirmRecord,
    Finalist,
    confirmation_dir,
    confirmed_runs,
    selection_fingerprints,
    stray_runs,
)
from analysis.readers.run_rows import EVAL_REWARD
from analysis.stats.comparisons import (
    Comparison,
    Difference,
    Estimate,
    SweepComparisons,
    compare_sweep,
    difference,
    estimate,
    problem_error,
)
from analysis.stats.levels import ALPHA
from analysis.stats.placebo import PlaceboInterval, above_placebo, gain_over_pre_rl
from analysis.stats.variance import ConfigData, SeedVariance
from grpo.run.outcomes import shared_problems

EXTRA_METRICS = ("pass@k", "maj@k")
"""Shown beside the confirmed figure of ``analysis.metric`` (at k = ``confirm.samples_per_problem``)."""


@dataclass(frozen=True)
class Figures:
    """One finalist: its selection estimate (the source sweep's ranking), its confirmed estimate
    of ``analysis.metric`` and of :data:`EXTRA_METRICS` (None: no confirmed run), the difference,
    the sweep's comparison of it against its best and the confirmation's (None for the best
    itself), and its runs that gave no confirmed figure (in words)."""

    finalist: Finalist
    selection: Estimate
    confirmed: Estimate | None
    extra: dict[str, Estimate]
    difference: Difference | None
    selection_verdict: Comparison | None
    confirmed_verdict: Comparison | None
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlaceboFigures:
    """A confirmation's placebo arm (``arm``): its confirmed estimate on the held-out problems
    (None: no confirmed run yet), each finalist's margin above it (finalist rank -> interval;
    None where none can be given: the finalist or the placebo has no usable seed variance), each
    at 1 - ``alpha`` two-sided with ``alpha`` = 0.05 / k for k finalists, its own gain over the
    pre-RL evaluation (None: fewer than 2 of its runs have ended), and its runs without a
    confirmed figure (in words)."""

    arm: Finalist
    confirmed: Estimate | None
    margins: dict[int, PlaceboInterval | None]
    gain: PlaceboInterval | None
    alpha: float
    n_runs: int = 0
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class Confirmation:
    """What a confirmation (``target``, its ``record``) measured of its source sweep's pick; or,
    where it cannot be read as one, why (``refusal``: problems or seeds of the selection)."""

    target: Path
    record: ConfirmRecord
    figures: list[Figures] = field(default_factory=list)
    seeds: SeedVariance | None = None
    comparisons: SweepComparisons | None = None
    n_problems: int = 0
    samples: int = 1
    seeds_used: tuple[int, ...] = ()
    refusal: str = ""
    notes: tuple[str, ...] = ()
    data_name: str = ""
    placebo: PlaceboFigures | None = None

    @property
    def finished(self) -> bool:
        """Every finalist has a confirmed figure."""
        return bool(self.figures) and all(f.confirmed is not None for f in self.figures)

    def order_kept(self) -> bool | None:
        """Whether the confirmed means keep the selection's order, ties allowed (None: a
        finalist has none)."""
        means = [f.confirmed.mean for f in self.figures if f.confirmed is not None]
        if len(means) != len(self.figures):
            return None
        return all(a >= b for a, b in zip(means, means[1:], strict=False))


def _config(label: str, runs: list[ConfirmedRun], metric: str) -> ConfigData | None:
    """The confirmed runs of one finalist as the statistics take them: each run's mean of
    ``metric`` over the held-out problems (seed values) and the values problem by problem."""
    values = [r.outcomes.per_problem(metric) for r in runs if r.outcomes is not None]
    values = [v for v in values if v is not None]
    if not values or len({len(v) for v in values}) != 1:
        return None
    first = next(r.outcomes for r in runs if r.outcomes is not None)
    matrix = np.array(values, dtype=float)
    return ConfigData(label, matrix.mean(axis=1), matrix, first.digest, first.samples_per_problem,
                      1, "held-out")


def read_confirmation(target: Path, record: ConfirmRecord, collection: Collection,
                      ranking: Ranking) -> Confirmation:
    """The confirmation in ``target`` of the sweep read as ``collection`` and ranked as
    ``ranking`` (the source's selection figures), measured (module docstring)."""
    runs = confirmed_runs(target, record)
    metric = record.metric
    trained = collection.runs[collection.runs["steps_done"] > 0]
    selection, _ = selection_fingerprints([Path(d) for d in trained["run_dir"]])
    confirmed_prints = {p for r in runs if r.outcomes is not None and r.outcomes.problems
                        for p in r.outcomes.problems}
    shared = shared_problems(confirmed_prints, selection)
    used = sorted({int(s) for s in collection.runs["seed"].dropna()
                   if isinstance(s, int | float) and not isinstance(s, bool)})
    data = next((str(v) for v in collection.runs.get("data.name", []) if v is not None), "")
    base = Confirmation(target, record, seeds_used=tuple(used), data_name=data)
    if shared:
        return Confirmation(target, record, seeds_used=tuple(used), data_name=data, refusal=(
            f"not a confirmation: {len(shared)} of its held-out problems are problems this "
            f"sweep's evaluations read (fingerprint {shared[0]}{', ...' if len(shared) > 1 else ''})"))
    if any(r.outcomes is not None and r.outcomes.problems is None for r in runs):
        return Confirmation(target, record, seeds_used=tuple(used), data_name=data, refusal=(
            "not a confirmation: its outcome files do not name their problems one by one"))
    reused = sorted(set(record.seeds) & set(used)) if record.retrain else []
    if reused:
        return Confirmation(target, record, seeds_used=tuple(used), data_name=data, refusal=(
            f"not a confirmation with fresh seeds: this sweep's runs used seed {reused[0]}"))
    if confirmation_dir(record.source, record.retrain) != target.resolve():
        return Confirmation(target, record, seeds_used=tuple(used), data_name=data, refusal=(
            f"not where a confirmation of {record.source} lies "
            f"({confirmation_dir(record.source, record.retrain)}): its {CONFIRM_RECORD} was "
            "copied or edited"))
    strays = stray_runs(target, record)
    if strays:
        return Confirmation(target, record, seeds_used=tuple(used), data_name=data, refusal=(
            f"not the confirmation its {CONFIRM_RECORD} says: {len(strays)} of its runs ran an "
            f"option none of its finalists nor its placebo arm names ({strays[0]}; the record "
            "was edited after the launch?)"))
    unranked = [f.label for f in record.finalists if f.label not in ranking.table.index]
    if unranked:
        return Confirmation(target, record, seeds_used=tuple(used), data_name=data, refusal=(
            f"not a confirmation of this sweep's pick: its finalist {unranked[0]} is "
            + ("no config this sweep ranks now" if unranked[0] in collection.configs else
               "no config of this sweep")
            + f" (its {CONFIRM_RECORD} names {len(unranked)} such)"))
    top = list(ranking.table.index)[:len(record.finalists)]
    if top != [f.label for f in record.finalists]:
        moved = next(i for i, (a, f) in enumerate(zip(top, record.finalists, strict=False))
                     if a != f.label)
        return Confirmation(target, record, seeds_used=tuple(used), data_name=data, refusal=(
            f"not a confirmation of this sweep's pick: its rank {moved + 1} is "
            f"{record.finalists[moved].label}, this sweep's ranking puts {top[moved]} there now "
            "(its runs changed since, or the record was edited: move this confirmation away and "
            "confirm the sweep again)"))
    u = ranking.uncertainty
    by_finalist = {f.rank: [r for r in runs if r.finalist == f] for f in record.finalists}
    configs = {f.rank: _config(f.label, by_finalist[f.rank], metric) for f in record.finalists}
    present = [c for c in configs.values() if c is not None]
    if not present:
        return base
    seeds = _seed_variance(present, record, ranking)
    error = problem_error(present)
    confirmed = {rank: estimate(c, seeds, error) for rank, c in configs.items() if c is not None}
    extra: dict[int, dict[str, Estimate]] = {rank: {} for rank in configs}
    for name in EXTRA_METRICS:
        theirs = {f.rank: _config(f.label, by_finalist[f.rank], name) for f in record.finalists}
        shown = [c for c in theirs.values() if c is not None]
        pooled = SeedVariance.pooled(shown) if shown else SeedVariance.missing("none")
        for rank, c in theirs.items():
            if c is not None:
                extra[rank][name] = estimate(c, pooled, problem_error(shown))
    ordered = [configs[f.rank] for f in record.finalists if configs[f.rank] is not None]
    best = record.finalists[0].label
    comparisons = (compare_sweep(ordered, best, {}, None, seeds, error)
                   if configs[record.finalists[0].rank] is not None and len(ordered) > 1 else None)
    figures = []
    for f in record.finalists:
        chosen = u.estimates.get(f.label) if u is not None else None
        selection = chosen if chosen is not None else Estimate(
            ranking.value(f.label), np.nan, np.nan, 0, 0)
        mine = confirmed.get(f.rank)
        figures.append(Figures(
            f, selection, mine, extra[f.rank],
            difference(selection, mine) if mine is not None else None,
            next((c for c in (u.comparisons if u else []) if c.config == f.label
                  and c.role == "best"), None),
            next((c for c in (comparisons.comparisons if comparisons else [])
                  if c.config == f.label), None),
            tuple(f"`{r.run_dir.name}` (seed {r.seed}): {r.problem}" for r in by_finalist[f.rank]
                  if r.outcomes is None)))
    first = next(r.outcomes for r in runs if r.outcomes is not None)
    placebo = (_placebo(target, record, runs, configs, metric)
               if record.placebo is not None else None)
    return Confirmation(target, record, figures, seeds, comparisons, len(first.reward),
                        first.samples_per_problem, tuple(used), data_name=data, placebo=placebo)


def _placebo(target: Path, record: ConfirmRecord, runs: list[ConfirmedRun],
             configs: dict[int, ConfigData | None], metric: str) -> PlaceboFigures:
    """The placebo arm's figures (:class:`PlaceboFigures`) from the confirmation's runs: its
    held-out figure and each finalist's margin above it; its gain over the pre-RL evaluation from
    the confirmation's own collection (its runs' late value and step-0 evaluation)."""
    arm = record.placebo
    assert arm is not None
    own = [r for r in runs if r.finalist == arm]
    missing = tuple(f"`{r.run_dir.name}` (seed {r.seed}): {r.problem}" for r in own
                    if r.outcomes is None)
    alpha = ALPHA / len(record.finalists)
    placebo = _config(arm.label, own, metric)
    if placebo is None:
        return PlaceboFigures(arm, None, {}, _gain(target, own, arm.label), alpha, len(own), missing)
    present = [c for c in configs.values() if c is not None]
    seeds = SeedVariance.pooled([*present, placebo])
    confirmed = estimate(placebo, seeds, problem_error([placebo]))
    margins = {rank: above_placebo(c, placebo, seeds, alpha) if c is not None else None
               for rank, c in configs.items()}
    return PlaceboFigures(arm, confirmed, margins, _gain(target, own, arm.label), alpha,
                          len(own), missing)


def _gain(target: Path, own: list[ConfirmedRun], label: str) -> PlaceboInterval | None:
    """The placebo's gain over the pre-RL evaluation (:func:`gain_over_pre_rl`) over its runs
    that have a late value and a step-0 evaluation, read as the confirmation's collection reads
    them (the late criterion of the ranking: :func:`analysis.decisions.ranking.run_values_at`),
    on the placebo's own seed variance of the late values; None with fewer than 2 such runs."""
    if len([r for r in own if r.status == "completed"]) < 2:
        return None
    collection = collect([target], borrowed=False)
    frame = collection.runs
    wanted = {r.run_dir.resolve() for r in own if r.status == "completed"}
    ids = [row.run_id for row in frame.itertuples() if Path(row.run_dir).resolve() in wanted]
    values = run_values_at(collection, math.inf)
    steps = collection.steps
    start = steps[(steps["step"] == 0) & steps["run_id"].isin(ids)].groupby("run_id")[EVAL_REWARD].first()
    pairs = [(float(values.loc[i, "late_eval_reward"]), float(start[i])) for i in ids
             if i in values.index and i in start.index
             and np.isfinite(values.loc[i, "late_eval_reward"]) and np.isfinite(start[i])]
    if len(pairs) < 2:
        return None
    late = ConfigData(label, np.array([p[0] for p in pairs]))
    return gain_over_pre_rl(late, [p[1] for p in pairs], SeedVariance.pooled([late]))


def _seed_variance(configs: list[ConfigData], record: ConfirmRecord,
                   ranking: Ranking) -> SeedVariance:
    """The confirmed runs' pooled seed variance (degenerate where every finalist's fresh seeds
    gave one value: its text says so); without one (a seed a finalist), for a confirmation of
    the sweep's own final models, the sweep's (the same runs), said so."""
    pooled = SeedVariance.pooled(configs)
    if pooled.source == "seeds":
        with_seeds = sum(c.n_seeds > 1 for c in configs)
        pooled = SeedVariance(pooled.variance, pooled.df, "seeds",
                              f"the confirmed runs' seeds, pooled over the {with_seeds} finalist"
                              f"{'s' if with_seeds != 1 else ''} with 2 or more")
    if pooled.usable or record.retrain or ranking.uncertainty is None \
            or not ranking.uncertainty.seeds.usable:
        if pooled.source == "none" and record.retrain:
            return SeedVariance.missing("one fresh seed a finalist: --seeds 2 or more measures "
                                        "the confirmed runs' seed variance")
        return pooled
    theirs = ranking.uncertainty.seeds
    return SeedVariance(theirs.variance, theirs.df, theirs.source,
                        f"the sweep's own ({theirs.text}): the confirmed runs are its runs, one "
                        "seed each", theirs.notes, theirs.inflation)
