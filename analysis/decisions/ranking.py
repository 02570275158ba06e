"""The ranking of a sweep's configs: per-config summaries, the ranking, what a sweep spent and its
on-policy baselines (the per-config curves: :mod:`analysis.outputs.curves`).

Ranking (:func:`rank`, what the report, the sweep summary, ``promote`` and the study chain pick
by): configs with a run stopped early (collapsed, diverged, pruned: ``STOPPED_STATUSES``) are left
out; the others are compared at the largest GRPO step every one of them reached (the step every
completed run reached; while none has completed, every run so far), each run's criterion taken
over its evaluations up to that step, so that a config is never ranked above another for steps
the other did not get to train. A run that did not reach that step (failed, cancelled, preempted
or still running) is not compared there: it is left out of its config's value and named, with the
step it reached, and a config none of whose runs reached it is not ranked.

The criterion is ``late_eval_reward``: the mean of a run's last ``LATE_EVALS`` evaluations up to
the compared step, step 0 (the policy before training) never counted. The maximum over
evaluations (``best_eval_reward``, kept as a descriptive column) is the winner's curse: under
noise alone it sits well above the config's true reward and favours configs evaluated more often;
the final evaluation alone is one noisy draw. ``python bench/selection_calibration.py`` measures
both against the late mean (docs/explanations/how-sure.md). The ranking carries each
config's 95% interval and the comparisons with the best config and the on-policy baseline
(:mod:`analysis.stats.comparisons`) on the seed variance of the best source the sweep has
(:func:`seed_variance`: its seeds, the additive model of a one-seed grid, a sweep it borrows from),
the ANOVA of the swept keys (:mod:`analysis.stats.effects`), and the runs' per-problem outcomes
(``eval_outcomes/``) checked against their logged rewards. Everything is read before anything is
decided: the sweep and the one it borrows from by :func:`analysis.readers.collect.collect`, the
outcome files by :func:`analysis.readers.outcomes.late_outcomes`; the seed variance is decided
once (:func:`analysis.stats.sources.seed_variance`) and handed to the ANOVA and the comparisons.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from analysis.names.config_names import BORROW_KEY
from analysis.readers.collect import LABEL, Borrowed, Collection, read_borrowed
from analysis.readers.outcomes import LateOutcomes, late_outcomes
from analysis.readers.run_rows import ELAPSED, EVAL_REWARD, STOPPED_STATUSES
from analysis.stats.comparisons import SweepComparisons, compare_sweep, problem_error
from analysis.stats.effects import VALUE, MainEffects, main_effects
from analysis.stats.levels import ALPHA
from analysis.stats.sources import seed_variance
from analysis.stats.variance import PROBLEM_SET_SEPARATOR, ConfigData, SeedVariance, lent
from grpo.run.outcomes import LATE_EVALS, late_steps, problems_digest
from grpo.run.run_config import ADDED

Criterion = Literal["late_eval_reward", "best_eval_reward", "final_eval_reward"]
CRITERIA: tuple[Criterion, ...] = ("late_eval_reward", "best_eval_reward", "final_eval_reward")
# what "best" means wherever a config is picked (report, sweep summary, promote, the study chain):
# the highest mean over seeds of each run's mean validation reward over its last LATE_EVALS
# evaluations after step 0 (bench/selection_calibration.py: why not the maximum)
BEST_CRITERION: Criterion = "late_eval_reward"
CRITERION_TEXT = {
    "late_eval_reward": f"mean eval reward of each run's last {LATE_EVALS} evaluations after step 0",
    "best_eval_reward": "best eval reward of each run after step 0",
    "final_eval_reward": "final eval reward of each run",
}


def config_summary(collection: Collection) -> pd.DataFrame:
    """One row per config label (in sorted order): runs, runs with metrics (``n_with_data``),
    seeds, statuses and mean outcomes over each run's whole curve (over the runs that have them)."""
    runs = collection.runs
    grouped = runs.groupby(LABEL, sort=False)
    late = run_values_at(collection, math.inf).groupby(LABEL)["late_eval_reward"].mean()
    summary = pd.DataFrame({
        "n_runs": grouped.size(),
        "n_with_data": grouped["steps_done"].agg(lambda s: int((s > 0).sum())),
        "seeds": grouped["seed"].agg(lambda s: ", ".join(str(v) for v in sorted(s.dropna()))),
        "statuses": grouped["status"].agg(lambda s: ", ".join(sorted(set(s)))),
        "stopped": grouped["status"].agg(lambda s: bool(s.isin(STOPPED_STATUSES).any())),
        "late_eval_reward": late.reindex(grouped.size().index),
        "final_eval_reward": grouped["final_eval_reward"].mean(),
        "best_eval_reward": grouped["best_eval_reward"].mean(),
        "wall_clock_s": grouped["wall_clock_s"].mean(),
        "gpu_hours": grouped["gpu_hours"].sum(min_count=1),
    })
    return summary.reindex(collection.labels)


def run_values_at(collection: Collection, step: float) -> pd.DataFrame:
    """Each run's criteria over its evaluations at GRPO steps up to ``step``: one row per run
    that has one (index ``run_id``, with its label): ``late_eval_reward`` (the mean of the last
    ``LATE_EVALS`` after step 0, at ``late_steps``), ``best_eval_reward`` (after step 0) and
    ``final_eval_reward``; a run evaluated only at step 0 has only the last."""
    steps = collection.steps
    if EVAL_REWARD not in steps:
        return pd.DataFrame(columns=[LABEL, *CRITERIA, "late_steps"])
    rows = steps.loc[steps[EVAL_REWARD].notna() & (steps["step"] <= step),
                     ["run_id", LABEL, "step", EVAL_REWARD]].sort_values(["run_id", "step"], kind="stable")
    grouped = rows.groupby("run_id", sort=False)
    late = rows[rows["step"] > 0].groupby("run_id", sort=False).tail(LATE_EVALS).groupby("run_id", sort=False)
    trained = rows[rows["step"] > 0].groupby("run_id", sort=False)
    return pd.DataFrame({LABEL: grouped[LABEL].first(),
                         "late_eval_reward": late[EVAL_REWARD].mean(),
                         "best_eval_reward": trained[EVAL_REWARD].max(),
                         "final_eval_reward": grouped[EVAL_REWARD].last(),
                         "late_steps": late["step"].agg(tuple)})


@dataclass(frozen=True)
class Design:
    """What a sweep's seed variance is a variance of: the model and training data of its runs,
    the validation problems (outcome digests), the responses per problem and the evaluation
    steps a run's value averages. Another sweep's variance can be borrowed only where these are
    the same (:func:`borrow_variance`)."""

    model: frozenset[str]
    data: frozenset[str]
    digests: frozenset[str]
    samples: frozenset[int]
    late_steps: frozenset[tuple[int, ...]]
    training: frozenset[str] = frozenset()
    """Each compared run's values of :data:`SEED_VARIANCE_KEYS` (``key=value, ...``)."""

    def settings_outside(self, source: Design) -> list[str]:
        """This (the borrowing) sweep's training settings that ``source`` never ran, sorted."""
        return sorted(self.training - source.training)

    def mismatch(self, other: Design) -> str | None:
        """What differs from ``other`` (the borrowing sweep's design), in words; None: nothing."""
        for name, mine, theirs in (("model", self.model, other.model),
                                   ("training data", self.data, other.data),
                                   ("validation problems (outcome digests)", self.digests,
                                    other.digests),
                                   ("responses per problem", self.samples, other.samples),
                                   ("evaluation steps averaged", self.late_steps, other.late_steps)):
            if mine != theirs:
                return (f"its {name} {_listed(mine)} differ from this sweep's {_listed(theirs)}")
        return None


SEED_VARIANCE_KEYS = ("loss.name", "normalization.name", "std_norm.enabled", "std_norm.scope",
                      "learning_rate", "off_policy.epochs")
"""The config keys that change a run's seed variance, measured (the seed sd grows from 0.040 to
0.214 with the learning rate on real runs, ``bench/seed_noise.py``) or expected (the loss, the
length and std normalizations, the off-policy epochs): a borrowed variance is taken as it is only
for settings its source ran (:func:`borrow_variance`)."""


def training_text(values: Mapping[str, Any]) -> str:
    """A run's :data:`SEED_VARIANCE_KEYS` in words (``loss.name=grpo_clip, ...``): what
    :attr:`Design.training` holds, for a finished run or a job about to launch. A key a run was
    trained before (absent, or NaN in a frame) reads as the value that does what such runs did
    (``grpo.run.run_config.ADDED``: ``std_norm.scope=group``)."""
    def value(key: str) -> Any:
        found = values.get(key)
        absent = found is None or (isinstance(found, float) and math.isnan(found))
        return ADDED[key] if absent and key in ADDED else found

    return ", ".join(f"{key}={value(key)}" for key in SEED_VARIANCE_KEYS)


def planned_design(cfgs: Sequence[Any]) -> tuple[Design, int]:
    """The :class:`Design` and compared step a sweep about to launch will have, from its jobs'
    composed configs (``cfgs``, OmegaConf): model and data as :func:`config_data` reads them from
    runs, the digest of the validation problems each job will evaluate
    (:func:`grpo.data.datasets.run_data_config`, as the trainer reads them), the responses per
    problem, its training settings, and the evaluation steps a run's value will average at the
    compared step (the fewest ``n_grpo_steps``: where every run completes, the report's)."""
    from omegaconf import OmegaConf

    from grpo.data.datasets import load_examples, run_data_config

    def value(cfg: Any, key: str) -> Any:
        return OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)

    def text(cfg: Any, keys: Sequence[str]) -> str:
        return "|".join(str(value(cfg, key)) for key in keys)

    at_step = min(int(value(cfg, "n_grpo_steps")) for cfg in cfgs)
    digests = set()
    for cfg in cfgs:
        try:
            data = run_data_config(OmegaConf.to_container(cfg.data, resolve=True),
                                   int(value(cfg, "eval.n_examples")))
            digests.add(problems_digest(load_examples(data, "validation")))
        except (OSError, ValueError):  # the job's own validation names unreadable data
            continue
    return Design(frozenset(text(cfg, MODEL_KEYS) for cfg in cfgs),
                  frozenset(text(cfg, DATA_KEYS) for cfg in cfgs), frozenset(digests),
                  frozenset(int(value(cfg, "eval.samples_per_problem") or 1) for cfg in cfgs),
                  frozenset(late_steps(int(value(cfg, "n_grpo_steps")),
                                       int(value(cfg, "eval.eval_every")), at_step)
                            for cfg in cfgs),
                  frozenset(training_text({key: value(cfg, key) for key in SEED_VARIANCE_KEYS})
                            for cfg in cfgs)), at_step


def launch_variance(sweep: Path, cfgs: Sequence[Any]) -> SeedVariance:
    """The seed variance a sweep about to launch (its jobs' composed configs ``cfgs``) would
    borrow from ``sweep``: :func:`borrow_variance` on the :func:`planned_design`, so that the dry
    run and the chain refuse where the report will (another model, data, validation problems,
    responses per problem, evaluation steps or compared step), and inflate where it will."""
    design, at_step = planned_design(cfgs)
    return borrow_variance(read_borrowed(sweep, BORROW_KEY), BEST_CRITERION, at_step, design)[0]


def _seeded_source(source: Borrowed, head: str,
                   criterion: Criterion) -> tuple[Ranking, Collection] | SeedVariance:
    """The sweep ``source`` read, ranked by ``criterion`` without borrowing, and its collection,
    where a config of it has two or more seeds; else a variance of source ``none`` saying why
    (unreadable, or no seeds), after ``head``."""
    collection = source.collection
    if collection is None:
        return SeedVariance.missing(f"{head}: {source.error}")
    theirs = rank(collection, criterion, borrow=False)
    if theirs.uncertainty is None or theirs.uncertainty.seeds.source != "seeds":
        return SeedVariance.missing(f"{head}: it has no config with two or more seeds")
    return theirs, collection


def _listed(values: frozenset) -> str:
    shown = sorted(map(str, values))
    return "{" + ", ".join(shown[:3]) + (", ..." if len(shown) > 3 else "") + "}"


@dataclass(frozen=True)
class Ranking:
    """The configs of a sweep ranked by ``criterion`` at GRPO step ``at_step`` (the largest step
    every ranked config's runs reached; None when none is ranked), best first: ``table`` is
    :func:`config_summary`'s rows with the criteria taken at that step and ``n_used`` (the runs
    the value averages). ``excluded`` are the configs left out because a run was stopped early
    (label -> statuses); ``not_compared`` the configs none of whose runs reached ``at_step``
    (label -> where they stopped) and ``unreached`` every run left out for that, in words;
    ``near_ties`` the configs that could still be the best besides it (label -> the comparison
    in words); ``uncertainty`` the intervals and comparisons of :mod:`analysis.stats.comparisons`;
    ``effects`` the ANOVA of the swept keys (:mod:`analysis.stats.effects`); ``data_problems`` the
    per-problem outcome files that could not be used, by run; ``advice`` what would decide an
    undecided or unclear pick, priced; ``design`` what the seed variance measures (for
    :func:`borrow_variance`); ``borrowed`` the sweep a variance was borrowed from, collected;
    ``compared`` one row per compared run: the swept keys and its value (:data:`VALUE`)."""

    criterion: Criterion
    table: pd.DataFrame
    excluded: dict[str, str]
    near_ties: dict[str, str]
    at_step: int | None = None
    uncertainty: SweepComparisons | None = None
    not_compared: dict[str, str] = field(default_factory=dict)
    unreached: list[str] = field(default_factory=list)
    effects: MainEffects | None = None
    data_problems: list[str] = field(default_factory=list)
    advice: str | None = None
    design: Design | None = None
    borrowed: Collection | None = None
    compared: pd.DataFrame = field(default_factory=pd.DataFrame)
    borrowed_outside: tuple[str, ...] = ()
    """This sweep's training settings the borrowed sweep never ran (its variance is inflated)."""

    @property
    def best(self) -> str | None:
        """The best config's label (the first in sorted config order on an exact tie)."""
        return None if self.table.empty else str(self.table.index[0])

    def value(self, label: str) -> float:
        """``label``'s value of the criterion (mean over seeds)."""
        return float(self.table.loc[label, self.criterion])

    def describe_best(self) -> str:
        """``lr=3e-4: late eval reward 0.412 [0.381, 0.443] at step 200 (mean over 2 runs)``, the
        best config's value with its interval (empty when none is ranked)."""
        if self.best is None:
            return ""
        value = f"{self.value(self.best):.3f}"
        if self.uncertainty is not None:
            value = self.uncertainty.estimates[self.best].describe()
        n = int(self.table.iloc[0]["n_used"])
        return (f"{self.best}: {self.criterion.replace('_', ' ')} {value} at step {self.at_step} "
                f"(mean over {n} run{'s' if n != 1 else ''})")

    def verdict_lines(self) -> list[str]:
        """How sure the pick is, one line each: the seed variance and what it rests on, then
        the configs that could still be the best and what would decide it."""
        u = self.uncertainty
        if u is None or not u.comparisons:
            return []
        lines = [f"Seed variance: {u.seeds.describe()}.", *(f"  {note}." for note in u.seeds.notes)]
        if not u.decided:
            lines.append("Undecided: no config-level verdict without a seed variance"
                         + (f"; {self.advice}." if self.advice else "."))
            return lines
        lines.append(f"Verdicts: {u.method_text()}.")
        if len(u.could_be_best) > 1:
            lines.append(f"Could still be the best ({len(u.could_be_best)} configs, 95%, Hsu's "
                         "comparisons with the best): "
                         + "; ".join(u.could_be_best)
                         + (f". What would decide: {self.advice}." if self.advice else "."))
        return lines


def rank(collection: Collection, criterion: Criterion = BEST_CRITERION,
         labels: Iterable[str] | None = None, borrow: Path | bool = True,
         alpha: float = ALPHA) -> Ranking:
    """The configs (of ``labels`` only, when given) without a run stopped early, ranked by
    ``criterion`` at the largest step every one of them reached (see the module docstring; a run
    that did not reach it is left out and named), with each config's interval and the
    comparisons of :func:`analysis.stats.comparisons.compare_sweep` on the seed variance of the best
    source the sweep has (:func:`seed_variance`; ``borrow``: a sweep to borrow from, True for the
    one the runs' ``analysis.seed_variance_from`` names, False for none); ``near_ties`` are the
    configs that could still be the best besides the first (at family-wise error rate ``alpha``)."""
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, not {criterion!r}")
    summary = config_summary(collection)
    if labels is not None:
        summary = summary[summary.index.isin(set(labels))]
    excluded = summary.loc[summary["stopped"], "statuses"].to_dict()
    candidates = summary[~summary["stopped"]]
    runs = collection.runs[collection.runs[LABEL].isin(candidates.index)
                           & (collection.runs["steps_done"] > 0)]
    completed = runs[runs["status"] == "completed"]
    reached = (completed if not completed.empty else runs)["steps_done"]
    at_step = int(reached.min()) if not reached.empty else None
    short = runs[runs["steps_done"] < (at_step or 0)]
    unreached = [f"`{r['run_id']}` ({r[LABEL]}, seed {r['seed']}): {r['status']} at step "
                 f"{r['steps_done']} of {_step_text(r['n_grpo_steps'])}: not compared at step "
                 f"{at_step}" for r in short.to_dict("records")]
    values = run_values_at(collection, at_step if at_step is not None else -1)
    values = values[values[LABEL].isin(candidates.index) & values[criterion].notna()
                    & ~values.index.isin(short["run_id"])]
    not_compared = {label: "; ".join(f"run {r['run_id']} {r['status']} at step {r['steps_done']}"
                                     for r in short[short[LABEL] == label].to_dict("records"))
                    for label in set(short[LABEL]) - set(values[LABEL])}
    means = values.groupby(LABEL)[list(CRITERIA)].mean()
    table = candidates.assign(**{name: means[name] for name in CRITERIA},
                              n_used=values.groupby(LABEL).size())
    ranked = table[table[criterion].notna()].sort_values(criterion, ascending=False, kind="stable")
    if ranked.empty:
        return Ranking(criterion, ranked, excluded, {}, None, not_compared=not_compared,
                       unreached=unreached)
    outcomes = late_outcomes(collection, values["late_steps"]) if criterion == "late_eval_reward" else {}
    data, problems, design = config_data(collection, values, list(ranked.index), criterion, outcomes)
    frame = _run_frame(collection, values, criterion)
    baselines = {label: base for label in ranked.index
                 if (base := on_policy_baseline(collection, label, list(ranked.index))) is not None}
    source = _borrowed_sweep(collection, borrow)
    borrowed = (borrow_variance(source, criterion, at_step, design, collection.runs["run_dir"])
                if source is not None else None)
    seeds = seed_variance(data, frame, collection.label_keys,
                          borrowed[0] if borrowed is not None else None,
                          f"nothing borrowed ({BORROW_KEY} is not set)")
    # a grid's residual (its check seeds' df included) holds the interaction: not tested apart
    effects = main_effects(frame, collection.label_keys, seeds,
                           replicated=bool((ranked["n_used"] > 1).any())
                           and seeds.source not in ("additive", "additive+borrowed"))
    uncertainty = compare_sweep(data, str(ranked.index[0]), baselines, at_step, seeds,
                                problem_error(data), alpha)
    near = {c.config: c.describe() for c in uncertainty.against_best()
            if c.config in uncertainty.could_be_best}
    return Ranking(criterion, ranked, excluded, near, at_step, uncertainty, not_compared,
                   unreached, effects, problems, _advice(collection, ranked, uncertainty), design,
                   borrowed[1] if borrowed is not None else None, frame,
                   borrowed[2] if borrowed is not None else ())


def _step_text(value: Any) -> str:
    number = pd.to_numeric(value, errors="coerce")
    return "?" if pd.isna(number) else str(int(number))


def _run_frame(collection: Collection, values: pd.DataFrame, criterion: Criterion) -> pd.DataFrame:
    """One row per compared run: the swept keys' values and the run's ``criterion`` as
    :data:`analysis.stats.effects.VALUE` (the frame of :mod:`analysis.stats.effects`)."""
    keys = collection.runs.set_index("run_id")[collection.label_keys].reindex(values.index)
    return keys.assign(**{VALUE: values[criterion]}).reset_index(drop=True)


def _borrowed_sweep(collection: Collection, borrow: Path | bool) -> Borrowed | None:
    """The sweep to borrow a seed variance from, read: none (``borrow`` False), the one
    ``borrow`` names (the command line), or the one the runs name, read with them
    (:attr:`analysis.readers.collect.Collection.borrowed`)."""
    if borrow is False:
        return None
    if borrow is not True:
        return read_borrowed(Path(borrow), "the command line")
    return collection.borrowed


def borrow_variance(source: Borrowed, criterion: Criterion, at_step: int,
                    design: Design, own_runs: Iterable[str] = ()
                    ) -> tuple[SeedVariance, Collection | None, tuple[str, ...]]:
    """The pooled seed variance of the sweep ``source`` read (:class:`Borrowed`) at ``at_step``
    (source ``borrowed``), where its
    runs have two or more seeds a config, none of them is one of the borrowing sweep's
    (``own_runs``: their run directories; a shared run would count its seeds twice) and its
    :class:`Design` matches ``design``, inflated to its upper 95% bound where ``design`` ran
    training settings it did not (returned third); else a variance of source ``none`` saying
    why it was not borrowed (:func:`analysis.stats.sources.seed_variance` says it beside
    whatever the sweep rests on)."""
    sweep, named_by = source.sweep, source.named_by
    head = f"cannot borrow from {sweep} (named by {named_by})"
    seeded = _seeded_source(source, head, criterion)
    if isinstance(seeded, SeedVariance):
        return seeded, None, ()
    theirs, other = seeded
    shared = {_resolved(d) for d in other.runs["run_dir"]} & {_resolved(d) for d in own_runs}
    if shared:
        return SeedVariance.missing(
            f"{head}: {len(shared)} of its runs are this sweep's own (their seeds are counted "
            "here already; a variance borrowed from them would count them twice)"), None, ()
    if theirs.at_step != at_step:
        return SeedVariance.missing(f"{head}: its compared step is {theirs.at_step}, this "
                                    f"sweep's {at_step}"), None, ()
    mismatch = theirs.design.mismatch(design)
    if mismatch is not None:
        return SeedVariance.missing(f"{head}: {mismatch}"), None, ()
    outside = design.settings_outside(theirs.design)
    return (lent(theirs.uncertainty.seeds,
                 f"the seeds of sweep {sweep} at step {at_step} (named by {named_by})", outside),
            other, tuple(outside))


def _resolved(run_dir: str) -> str:
    return str(Path(run_dir).resolve())


def _advice(collection: Collection, ranked: pd.DataFrame, u: SweepComparisons) -> str | None:
    """What would decide: for an undecided sweep, a second seed for its best three configs; for
    a best config the data cannot tell from the runner-up, the seeds :func:`resolve` asks for;
    each priced at what the configs' runs cost here."""
    if not u.decided:
        if len(ranked) < 2:
            return None
        if u.seeds.degenerate:
            return ("the seeds measured a variance of 0 (every seed of a config gave the same "
                    "value: a floor or ceiling, such as reward 0 or 1 on every problem): more seeds "
                    "of these configs measure nothing more; compare the configs where they differ "
                    "(another step, a criterion that is not at its bound, or more evaluation "
                    "problems, eval.n_examples)")
        top = list(ranked.index[:3])
        return (f"a second seed for the best {len(top)} configs ({'; '.join(top)}) would measure "
                f"the seed variance ({len(top)} df): {_price(collection, dict.fromkeys(top, 1))}")
    if u.resolution is None or not math.isfinite(u.resolution.factor):
        return None if u.resolution is None else u.resolution.text
    pair = [u.could_be_best[0], u.against_best()[0].config]
    extra = {label: max(u.resolution.seeds - int(ranked.loc[label, "n_used"]), 0) for label in pair}
    return f"{u.resolution.text}: {_price(collection, extra)} for these two"


def _price(collection: Collection, extra_runs: dict[str, int]) -> str:
    """``1.20 GPU-hours`` for ``extra_runs`` more runs of each config, at the mean cost of its
    runs here (CPU-hours for runs without a GPU)."""
    runs = collection.runs[collection.runs["steps_done"] > 0]
    on_gpus = bool((runs["gpu_hours"] > 0).any())
    cost = runs.groupby(LABEL)["gpu_hours" if on_gpus else "cpu_hours"].mean()
    total = sum(n * float(cost.get(label, math.nan)) for label, n in extra_runs.items())
    runs_text = sum(extra_runs.values())
    return (f"{runs_text} more run{'s' if runs_text != 1 else ''}, about {_hours(total)} "
            f"{'GPU' if on_gpus else 'CPU'}-hours at what their runs cost here")


def config_data(collection: Collection, values: pd.DataFrame, labels: Sequence[str],
                criterion: Criterion, outcomes: Mapping[str, LateOutcomes | str | None]
                ) -> tuple[list[ConfigData], list[str], Design]:
    """Each of ``labels``' :class:`analysis.stats.variance.ConfigData` (its runs' ``criterion``
    values, ``values``: :func:`run_values_at`, and their per-problem outcomes averaged over the
    same evaluations, ``outcomes``: :func:`analysis.readers.outcomes.late_outcomes` by run, read
    for the late criterion only: None for a config where a run lacks usable ones); the outcome
    files that could not be used, one line per run; and the sweep's :class:`Design`."""
    runs = collection.runs.set_index("run_id")
    by_label = dict(tuple(values.groupby(LABEL, sort=False)))
    configs, problems, digests, samples = [], [], set(), set()
    for label in labels:
        own = by_label[label]
        late = []
        for run_id in own.index:
            found = outcomes.get(run_id)
            if isinstance(found, str):
                problems.append(f"`{run_id}`: {found}")
                found = None
            late.append(found)
        usable = all(o is not None for o in late) and len({o[1] for o in late}) == 1
        first = runs.loc[own.index[0]]
        problem_set = PROBLEM_SET_SEPARATOR.join(f"{k}={first.get(k)}" for k in PROBLEM_SET_KEYS)
        configs.append(ConfigData(
            label, own[criterion].to_numpy(float),
            np.vstack([o[0] for o in late]) if usable else None, late[0][1] if usable else None,
            min(o[2] for o in late) if usable else 1, min(o[3] for o in late) if usable else 1,
            problem_set))
        digests |= {o[1] for o in late if o is not None}
        samples |= {o[2] for o in late if o is not None}
    compared = runs.loc[values.index]
    def texts(keys: Sequence[str]) -> frozenset[str]:
        return frozenset("|".join(map(str, row)) for row in compared[list(keys)].itertuples(index=False))

    training = frozenset(training_text(dict(zip(SEED_VARIANCE_KEYS, row, strict=True)))
                         for row in compared.reindex(columns=list(SEED_VARIANCE_KEYS))
                         .itertuples(index=False))
    design = Design(texts(MODEL_KEYS), texts(DATA_KEYS),
                    frozenset(digests), frozenset(samples),
                    frozenset(tuple(int(s) for s in steps) for steps in values["late_steps"]
                              if isinstance(steps, tuple)), training)
    return configs, problems, design


MODEL_KEYS = ("model.name", "model.path")
"""The config keys that say which model a run trained (a :class:`Design`'s ``model``)."""
DATA_KEYS = ("data.name", "data.train_path")
"""The config keys that say which training data a run read (a :class:`Design`'s ``data``)."""
PROBLEM_SET_KEYS = ("data.name", "data.validation_path", "eval.n_examples")
"""The config keys that say which validation problems a run evaluated where its outcome files do
not (a config without one digest over its runs): such configs that differ in one are not
compared (analysis.stats.comparisons.problems_apart)."""
@dataclass(frozen=True)
class Spend:
    """What a sweep's runs spent (``spent``) against what its full grid would have
    (``full_grid``: each run that did not complete priced at its own pace up to its
    ``n_grpo_steps``, see :func:`spend`), in ``unit`` (GPU-hours, or CPU-hours for runs without a GPU), and how many
    runs stopped early, by status (``stopped``)."""

    spent: float
    full_grid: float
    unit: str
    stopped: dict[str, int]

    def describe(self) -> str:
        """``2 pruned, 1 collapsed; 0.02 CPU-hours spent of an estimated 0.03 for the full grid
        (63%)``."""
        counts = ", ".join(f"{n} {status}" for status, n in self.stopped.items()) or "none"
        share = f" ({self.spent / self.full_grid:.0%})" if self.full_grid > 0 else ""
        return (f"{counts}; {_hours(self.spent)} {self.unit} spent of an estimated "
                f"{_hours(self.full_grid)} for the full grid{share}")


def _hours(hours: float) -> str:
    """``12.34``, or two significant digits below 0.1 (a CPU sweep's ``0.0014``)."""
    return f"{hours:.2f}" if hours >= 0.1 else f"{hours:.2g}"


def spend(collection: Collection) -> Spend:
    """The sweep's :class:`Spend`, over the runs that have metrics. A run that did not complete
    is priced at its own pace: its step-0 evaluation once, then its GRPO steps so far scaled up
    to its n_grpo_steps."""
    runs = collection.runs[collection.runs["steps_done"] > 0].set_index("run_id")
    on_gpus = (runs["gpu_hours"] > 0).any()
    hours = runs["gpu_hours" if on_gpus else "cpu_hours"].fillna(0.0)
    planned = pd.to_numeric(runs["n_grpo_steps"], errors="coerce")
    short = (runs["status"] != "completed") & (planned > runs["steps_done"])
    steps = collection.steps
    if runs.empty or "step" not in steps:  # no run has metrics (none started, or none usable)
        return Spend(0.0, 0.0, "CPU-hours", {})
    start = steps[steps["step"] == 0].set_index("run_id")[ELAPSED].reindex(runs.index).fillna(0.0)
    first = hours * (start / runs["wall_clock_s"]).clip(0, 1).fillna(0.0)  # the step-0 evaluation
    scaled = first + (hours - first) * (planned / runs["steps_done"])
    counts = runs.loc[runs["status"].isin(STOPPED_STATUSES), "status"].value_counts()
    return Spend(float(hours.sum()), float(scaled.where(short, hours).fillna(hours).sum()),
                 "GPU-hours" if on_gpus else "CPU-hours",
                 {status: int(counts[status]) for status in STOPPED_STATUSES if status in counts})


def on_policy_labels(collection: Collection) -> list[str]:
    """Labels of the on-policy configs: one optimizer step per rollout batch (one epoch and
    ``train_batch_size == rollout_batch_size``; ``BatchPlan.off_policy`` is False) whose
    rollouts are not stale (``off_policy.staleness`` 0: the ``off_policy`` column of the runs)."""
    runs = collection.runs
    labels = set(runs.loc[runs["off_policy"].eq(False), LABEL])
    return [label for label in collection.labels if label in labels]


def on_policy_baseline(collection: Collection, label: str,
                       among: Sequence[str] | None = None) -> str | None:
    """The on-policy config (of ``among`` only, when given) sharing most swept values with
    ``label`` (first in order on ties)."""
    config = collection.configs[label]

    def shared(candidate: str) -> int:
        return sum(collection.configs[candidate].get(k) == v for k, v in config.items())

    candidates = [c for c in on_policy_labels(collection) if among is None or c in among]
    return max(candidates, key=shared, default=None)
