"""``report.md`` of a collected sweep: ranges swept, runs, the runs stopped early (pruned,
collapsed, diverged: at which step and why, and the GPU-hours spent against the full grid's),
failures, runs with missing or unreadable data, best config with each config's 95% interval,
how sure the comparisons are (each config against the best one and the on-policy baseline:
difference, interval, p-values, verdict; also written to ``comparisons.csv``), whether the best
config reaches the handout's validation-accuracy bar (at which step and GPU-hour), the comparison
with the on-policy run at equal steps and at equal wall-clock, the other metrics' trends, and
links to the figures."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.decisions.race.looks import race_boundary, replay
from analysis.decisions.ranking import (
    BEST_CRITERION,
    CRITERION_TEXT,
    Criterion,
    Ranking,
    config_summary,
    on_policy_baseline,
    on_policy_labels,
    rank,
    spend,
)
from analysis.decisions.trends import trends
from analysis.names.formatting import (
    MISSING,
    difference_interval,
    fmt_difference_interval,
    fmt_duration,
    fmt_number,
    is_missing,
    markdown_table,
)
from analysis.names.metric_names import metric_name
from analysis.outputs.confirmed import confirmed_section
from analysis.outputs.curves import SweepCurves, compare_with, first_reaching
from analysis.readers.collect import LABEL, Collection
from analysis.readers.jobs import read_jobs
from analysis.readers.run_rows import ELAPSED, EVAL_REWARD, STOPPED_STATUSES, TRAIN_CLOCK
from analysis.stats.comparisons import FAMILY_TEXT, Comparison, Estimate
from analysis.stats.trends import WINDOW, Trend, windows
from analysis.stats.variance import df_text
from grpo.config.rules import BUDGET_UNIT
from grpo.run.files import RunFileError, atomic_write, atomic_write_text
from grpo.run.outcomes import DEFAULT_METRIC

# the CS336 handout's deliverable: "a model that achieves validation accuracy of at least 25%
# on MATH"; validation accuracy is eval/reward (1 only when formatted and correct)
ACCURACY_BAR = 0.25


def _ranges(collection: Collection) -> list[str]:
    lines = ["## Ranges swept", ""]
    for sweep in collection.sweeps:
        lines.append(f"- `{sweep.path}`")
        lines += [f"  - `{key}`: {', '.join(values)}" for key, values in sweep.swept.items()]
        if not sweep.swept:
            lines.append("  - nothing swept (single run)")
    return lines


def _runs(collection: Collection) -> list[str]:
    keys = collection.label_keys
    name = collection.metric  # what every evaluation is read as (analysis.metric)
    header = ["run", *keys, "seed", "status", "steps done", f"final eval {name}",
              f"best eval {name} (step)", "wall-clock", "GPU-hours", "restarts"]
    rows = []
    for run in collection.runs.to_dict("records"):
        best = fmt_number(run["best_eval_reward"])
        if not is_missing(run["best_eval_step"]):
            best += f" ({int(run['best_eval_step'])})"
        rows.append([
            f"`{run['run_id']}`", *(run[k] for k in keys), run["seed"], run["status"],
            f"{run['steps_done']}/{_fmt_step(run['n_grpo_steps'])}",
            fmt_number(run["final_eval_reward"]),
            best, fmt_duration(run["wall_clock_s"]), fmt_number(run["gpu_hours"], 2),
            run["restarts"],
        ])
    return ["## Runs", "", markdown_table(header, rows)]


def _run_line(run: Mapping[str, Any]) -> str:
    """``- `run` (label, seed 0): **status** at step N: reason``."""
    return (f"- `{run['run_id']}` ({run[LABEL]}, seed {run['seed']}): **{run['status']}** "
            f"{_where(_stop_step(run))}: "
            f"{'no reason given' if is_missing(run['reason']) else ' '.join(run['reason'].split())}")


def _stopped(collection: Collection) -> list[str]:
    """The runs the sweep's pruner or a health guard stopped, and what the sweep spent."""
    runs = collection.runs
    stopped = runs[runs["status"].isin(STOPPED_STATUSES)]
    lines = ["## Runs stopped early", ""]
    if stopped.empty:
        return [*lines, "None: every run that ended ran to its last step."]
    spent = spend(collection)
    return [*lines, f"Stopped early: {spent.describe()}. The full grid's estimate prices each "
            "run that did not complete at its own pace up to its n_grpo_steps. Configs with a run "
            "stopped early are not ranked.", "", *map(_run_line, stopped.to_dict("records"))]


def _race(collection: Collection) -> list[str]:
    """Each raced sweep's waves as its runs say (`analysis.decisions.race.looks.replay`; the record,
    `analysis.decisions.race.record.RACE_FILE`, where it disagrees, in one line): the runs of each, the
    configs that left and why, and the GPU-hours spent against the budget and the fixed grid;
    nothing for a sweep that was not a race."""
    lines: list[str] = []
    for sweep in collection.sweeps:
        try:
            reading = replay(sweep.path)
        except RunFileError as err:
            lines += ["## Race", "", f"`{sweep.path.name}`'s race record is unusable: {err}."]
            continue
        if reading is None:
            continue
        race = reading.race
        s = race.settings
        lines += ["## Race", "", (
            f"`{sweep.path.name}` raced {len(race.configs)} configs across seeds (docs/how-to/"
            f"racing.md): up to {s.max_seeds} seeds a config, wave w running seed "
            f"{s.first_seed} + w - 1; after each wave the configs not shown worse than the best "
            f"one went on (Hsu's comparisons with the best), "
            f"{race_boundary(race).describe()}."), ""]
        if reading.note:
            lines += [f"Warning: {reading.note}.", ""]
        rows = []
        for n, wave in enumerate(race.waves, start=1):
            d = wave.decision
            left = "; ".join(f"{label}: {why}" for label, why in d.left.items()) if d else ""
            measured = MISSING if wave.spent_hours is None else f"{sum(wave.spent_hours.values()):.3g}"
            priced = MISSING if is_missing(wave.priced_gpu_hours) else f"{wave.priced_gpu_hours:.3g}"
            rows.append([n, wave.seed, ", ".join(f"#{num}" for num in sorted(wave.jobs)),
                         len(wave.jobs), priced, measured,
                         "(not looked at yet)" if d is None else ", ".join(d.alive) or "none",
                         left or MISSING])
        lines.append(markdown_table(["wave", "seed", "runs", "n", f"{race.unit} priced",
                                     f"{race.unit} measured", "could still be the best after it",
                                     "left, and why"], rows))
        last = race.last_decision()
        spent, grid = race.spent_gpu_hours(), race.fixed_grid_hours()
        budget = (f" of its budget of {s.budget_gpu_hours:g}" if s.budget_gpu_hours is not None
                  else " (no budget)")
        share = spent / grid if grid > 0 else math.nan
        lines += ["", (f"Ended: {last.end}." if last is not None and last.end else
                       "Not over: relaunch the sweep's command to go on."),
                  f"Spent {spent:.3g} {race.unit} ({BUDGET_UNIT}; measured by the finished runs, "
                  f"priced for a wave not looked at yet){budget}; the fixed grid of "
                  f"{s.max_seeds} seeds a config would spend {grid:.3g} at the same rates: "
                  f"{share:.0%} of it."]
        if last is not None:
            lines.append(f"Seed variance at the last look: {last.seed_variance}.")
        departures = [f"{label} (after wave {n}: {why})" for n, wave in enumerate(race.waves, 1)
                      if wave.decision is not None
                      for label, why in wave.decision.outside_alpha().items()]
        if departures:
            lines.append("Left because of their runs, not by a comparison (outside the race's "
                         f"alpha, which bounds only the comparisons): {'; '.join(departures)}.")
    return lines


def _failures(collection: Collection) -> list[str]:
    runs = collection.runs
    lines = ["## Failures", ""]
    lines += [_run_line(run) for run in runs[runs["status"] == "failed"].to_dict("records")
              ] or ["None."]
    noisy = runs[(runs["n_bad_lines"] > 0) | (runs["n_duplicate_steps"] > 0)]
    lines += [
        f"- note: `{run['run_id']}` had {run['n_bad_lines']} unparsable metrics line(s) "
        f"(skipped) and {run['n_duplicate_steps']} repeated step(s) (last kept)"
        for run in noisy.to_dict("records")
    ]
    return lines


def _why_missing(path: Path) -> str:
    """Why the job directory ``path`` gave no run: absent, or what stands there instead."""
    if path.is_symlink():
        return "unreadable: a symbolic link stands where its run directory should be"
    if path.exists() and not path.is_dir():
        return "unreadable: a file stands where its run directory should be"
    if path.exists():
        return "unreadable: its run directory holds nothing the analysis can read"
    return "no run directory (the job never started)"


def missing_jobs(collection: Collection) -> list[str]:
    """The jobs a sweep's ``jobs.json`` lists that gave no run: never started, or their
    directory replaced or unreadable; one line each with their overrides. A job whose run the
    collection set aside (``Collection.set_aside``: read at another path, or a second run of a
    config and seed) is said in its notes instead."""
    lines = []
    for sweep in collection.sweeps:
        jobs = read_jobs(sweep.path)
        if jobs is None:
            continue
        present = set(collection.runs.loc[collection.runs["sweep"] == str(sweep.path), "job"])
        lines += [f"`{sweep.path.name}/{num}` ({' '.join(job.overrides) or 'no overrides'}): "
                  + _why_missing(sweep.path / str(num))
                  for num, job in sorted(jobs.jobs.items()) if num not in present
                  and str(sweep.path / str(num)) not in collection.set_aside]
    return lines


def _unusable(collection: Collection, ranking: Ranking) -> list[str]:
    runs = collection.runs
    entries = [
        f"- `{run['run_id']}` (status {run['status']}): {run['problems']}"
        for run in runs[runs["problems"] != ""].to_dict("records")
    ]
    entries += [f"- {line}" for line in missing_jobs(collection)]
    entries += [f"- {line}" for line in ranking.data_problems]
    return ["## Runs with missing or unreadable data", "",
            *(entries or ["None: every run has its config, status, metrics and per-problem "
                          "outcomes."])]


def _best(collection: Collection, ranking: Ranking) -> list[str]:
    criterion = ranking.criterion
    lines = ["## Best config", ""]
    at = ("" if ranking.at_step is None
          else f" at GRPO step {ranking.at_step}, the largest step every ranked config's runs "
               "reached (the step every completed run reached)")
    rule = (f"Ranked by `{criterion}` ({CRITERION_TEXT[criterion]}, mean over seeds) of each "
            f"evaluation's {collection.metric} (`analysis.metric={collection.metric}`){at}; "
            "configs with a run stopped early (collapsed, diverged, pruned) are excluded, and a "
            "run that did not reach the compared step is not compared there. "
            f"`best eval {collection.metric}` (the maximum over evaluations after step 0) is descriptive only: "
            "the maximum of noisy evaluations sits above a config's true reward.")
    estimates = ranking.uncertainty.estimates if ranking.uncertainty else {}
    if ranking.best is None:
        lines += [rule, "", "No config has an evaluation after step 0 yet.", ""]
    else:
        ties = ([f"Could still be the best (Hsu's comparisons with the best do not put it below "
                 f"the best; 95%): {len(ranking.near_ties)} "
                 "other config(s):", *(f"- {label}: {why}" for label, why in ranking.near_ties.items())]
                if ranking.near_ties else [])
        lines += [rule, "", f"**Best: {ranking.describe_best()}**.", "", *ties,
                  *([""] if ties else [])]
    if ranking.unreached:
        lines += ["Not compared (did not reach the compared step):",
                  *(f"- {line}" for line in ranking.unreached), ""]
    summary = config_summary(collection)
    used = ranking.table["n_used"] if "n_used" in ranking.table else pd.Series(dtype=float)
    header = ["config", "runs", "with metrics", "compared", "seeds", "statuses",
              f"{criterion} at step {_fmt_step(ranking.at_step)} [95% interval]", "seed sd",
              f"mean final eval {collection.metric}", f"mean best eval {collection.metric}",
              "mean wall-clock", "GPU-hours"]
    rows = [
        [label, s["n_runs"], s["n_with_data"], int(used.get(label, 0)), s["seeds"], s["statuses"],
         estimates[label].describe() if label in estimates else MISSING,
         fmt_number(estimates[label].seed_sd) if label in estimates else MISSING,
         fmt_number(s["final_eval_reward"]),
         fmt_number(s["best_eval_reward"]), fmt_duration(s["wall_clock_s"]),
         fmt_number(s["gpu_hours"], 2)]
        for label, s in summary.iterrows()
    ]
    return [*lines, markdown_table(header, rows)]


COMPARISON_COLUMNS = ("config", "reference", "role", "step", "variance_source", "variance_df",
                      "seeds_config", "seeds_reference", "seed_sd_config", "seed_sd_reference",
                      "problems", "samples_per_problem_config",
                      "samples_per_problem_reference", "difference", "ci_low", "ci_high",
                      "p_value", "p_adjusted", "verdict", "why")


def comparison_frame(ranking: Ranking) -> pd.DataFrame:
    """One row per comparison of the ranking (:data:`COMPARISON_COLUMNS`): ``comparisons.csv``."""
    u = ranking.uncertainty
    comparisons = u.comparisons if u else []
    return pd.DataFrame([_comparison_row(c, u.estimates) for c in comparisons],
                        columns=list(COMPARISON_COLUMNS))


def _comparison_row(c: Comparison, estimates: dict[str, Estimate]) -> list[Any]:
    sd = {label: estimates[label].seed_sd if label in estimates else math.nan
          for label in (c.config, c.reference)}
    lo, hi, note = difference_interval(c.lo, c.hi)  # within [-1, 1], as the report writes it
    return [c.config, c.reference, c.role, c.step, c.source, c.df, c.n_seeds[0], c.n_seeds[1],
            sd[c.config], sd[c.reference], c.n_problems, c.samples[0], c.samples[1], c.diff, lo,
            hi, c.p_value, c.p_adjusted, c.verdict, c.why or note]


def _comparisons(ranking: Ranking) -> list[str]:
    lines = ["## How sure: comparisons", ""]
    if ranking.uncertainty is None or not ranking.uncertainty.comparisons:
        return [*lines, "Nothing to compare: fewer than two configs are ranked."]
    u = ranking.uncertainty
    lines += [f"**Seed variance**: {u.seeds.describe()}.",
              *(f"- {note}." for note in u.seeds.notes),
              f"- {u.variance_test}.", ""]
    if u.decided:
        lines += [
            f"Each config against the best one and against its on-policy baseline, on "
            f"`{ranking.criterion}` at GRPO step {ranking.at_step}: the difference (config minus "
            f"reference), its {FAMILY_TEXT} ({u.family} configs; each verdict's df in the table: the "
            "seed variance's, or the pair's own where it rests on its own variance), "
            "so each interval is wider than a lone pair's; the unadjusted and the Tukey-adjusted "
            "p-value. A verdict of better or worse needs the interval to exclude 0; a config not "
            "shown worse than the best one could still be the best (the list above). The "
            "false-verdict rate and the intervals' coverage were checked by simulation (docs/"
            "explanations/how-sure.md). Also in `comparisons.csv`.", ""]
    else:
        lines += [
            "No config-level verdict: without a seed variance nothing says how much of a "
            "difference the seeds alone would make, so every comparison is **undecided** and "
            "the differences are point estimates"
            + (f". What would decide it: {ranking.advice}." if ranking.advice else "."), ""]
    header = ["config", "reference", "seeds", "problems", "responses per problem",
              "Δ", "95% interval (simultaneous)", "df", "p", "Tukey p", "verdict"]
    rows = [[c.config, f"{c.reference} ({c.role})", f"{c.n_seeds[0]} vs {c.n_seeds[1]}",
             c.n_problems or MISSING, f"{c.samples[0]} vs {c.samples[1]}", f"{c.diff:+.3f}",
             fmt_difference_interval(c.lo, c.hi),
             (df_text(c.df) + (" (the pair's own)" if c.own_df_text else "")
              if c.se > 0 else MISSING),
             fmt_p(c.p_value), fmt_p(c.p_adjusted),
             f"**{c.verdict}**" + (f" ({c.why})" if c.verdict == "no interval" else "")]
            for c in u.comparisons]
    lines.append(markdown_table(header, rows))
    if u.decided and u.resolution is not None:
        lines += ["", f"**Unclear**: the data cannot tell the best config from the runner-up "
                  f"({u.against_best()[0].config}). The ranking still picks the best point "
                  f"estimate. What would resolve it: {ranking.advice}."]
    return lines


def _effects(ranking: Ranking) -> list[str]:
    """The ANOVA of the swept keys with each level's effect (also ``main_effects.csv``)."""
    lines = ["## Main effects", ""]
    effects = ranking.effects
    if effects is None:
        why = ("no swept key varies among the ranked configs" if ranking.uncertainty is None
               or ranking.uncertainty.decided else "no seed variance to test against")
        return [*lines, f"No ANOVA: {why}."]
    keys = list(dict.fromkeys(e.key for e in effects.levels))
    lines += [
        f"Does each swept key matter, averaged over the others? An ANOVA of `{ranking.criterion}` "
        f"at GRPO step {ranking.at_step} over {', '.join(f'`{k}`' for k in keys)} ({effects.model} "
        f"model, type II sums of squares, statsmodels), each F against the seed variance "
        f"({effects.error.source}, {effects.error.df:g} df{_floors(ranking)}). A main effect "
        "averages over the other keys, so it has power where a cell-against-cell comparison has "
        "little. Also in `main_effects.csv`.", "",
        markdown_table(["term", "df", "sum of squares", "F", "p"],
                       [[t.name, f"{t.df:g}" + (f" (tested on {t.numerator_df:g}: Box's, the "
                                                 "configs' spreads differ)"
                                                 if t.numerator_df != t.df else ""),
                         f"{t.sum_sq:.3g}", f"{t.f:.2f}", fmt_p(t.p)]
                        for t in effects.terms]), "",
        "Each level's least-squares effect (sum-to-zero contrasts of the fitted model: in an "
        "unbalanced grid not its marginal mean minus the grand mean), with a 95% interval.", "",
        markdown_table(["key", "level", "effect", "95% interval", "runs"],
                       [[e.key, e.level, f"{e.effect:+.3f}", fmt_difference_interval(e.lo, e.hi),
                         e.n_runs] for e in effects.levels])]
    if effects.missing:
        lines += ["", f"Cells of the grid with no ranked run: {'; '.join(effects.missing)}."]
    if effects.model == "additive, interaction against cell means":
        lines += ["", "Seeds, but cells missing: the full factorial model cannot be fitted, so the "
                  "effects come from the additive model and the interaction is tested as the "
                  "cell-means model against it (its row above)."]
    elif effects.model == "additive" and len(keys) > 1:
        lines += ["", "One seed a cell: the interaction of the keys cannot be told from the seed "
                  "noise here (it is in the residual); run 2 or more seeds to test it."]
    left = {**{label: f"a run stopped early ({why})" for label, why in ranking.excluded.items()},
            **{label: f"no run reached step {ranking.at_step}" for label in ranking.not_compared}}
    if left:
        lines += ["", "Left out of the ANOVA: " + "; ".join(f"{label} ({why})" for label, why in left.items()) + "."]
    return lines


def _floors(ranking: Ranking) -> str:
    """The notes of an ANOVA whose seed variance leaves out configs at a floor or rests on
    Satterthwaite's df, where it does (:func:`analysis.stats.effects.anova_error`)."""
    seeds = ranking.uncertainty.seeds if ranking.uncertainty is not None else None
    effects = ranking.effects
    if seeds is None or effects is None or effects.error.notes == seeds.notes:
        return ""
    return "".join(f"; {note}" for note in effects.error.notes[len(seeds.notes):])


def fmt_p(p: float) -> str:
    """A p-value as shown: two significant digits, ``<0.001`` below that, a dash when missing."""
    if is_missing(p):
        return MISSING
    return "<0.001" if p < 0.001 else f"{p:.2g}"


def _versus_best(trend: Trend) -> str:
    if not trend.versus_best:
        return "(best)"
    if trend.versus_best == "no test":
        return f"no test ({trend.noise})"
    return f"{trend.versus_best} (Holm p {fmt_p(trend.p_adjusted)})"


def _trends(collection: Collection, ranking: Ranking) -> list[str]:
    lines = ["## Other metrics' trends", ""]
    if ranking.best is None or not ranking.at_step:
        return [*lines, "No ranked config yet."]
    found = trends(collection, list(ranking.table.index), ranking.best, ranking.at_step,
                   ranking.borrowed, ranking.borrowed_outside)
    if not found:
        return [*lines, "No training metrics logged."]
    early, late = windows(ranking.at_step)
    lines += [f"Each metric's mean over the first {WINDOW:.0%} of GRPO steps (early: "
              f"{early.start}-{early.stop - 1}) and the last {WINDOW:.0%} up to the compared step "
              f"(late: {late.start}-{late.stop - 1}), over seeds, and whether a config's late value "
              "differs from the best config's beyond the seed-to-seed noise of a run's late value "
              "(its variance from the same sources as the reward's: the sweep's seeds, the additive "
              "model of a one-seed grid, a borrowed sweep; Student's t, Holm over configs). "
              "Consecutive steps are not independent samples: without a seed variance, no test.",
              ""]
    header = ["metric", "config", "early", "late", "change", "late vs the best config"]
    rows = [[metric_name(t.metric).name, t.label, fmt_number(t.early), fmt_number(t.late),
             fmt_number(t.change), _versus_best(t)] for t in found]
    noise = {metric_name(t.metric).name: t.noise for t in found}
    return [*lines, markdown_table(header, rows), "",
            *(f"- {name}: {text}." for name, text in noise.items())]


def _bar(collection: Collection, ranking: Ranking, bar: float) -> list[str]:
    """Whether the best config's runs reach ``bar``, at which step and GPU-hour first; else the
    run that reaches it first, or the best value any run saw."""
    lines = ["## Validation-accuracy bar", "",
             f"The handout asks for a validation accuracy (`{EVAL_REWARD}`) of at least "
             f"{bar:g}. Best config as ranked above; a run reaches the bar at its first "
             "evaluation at or above it; GPU-hours and wall-clock are the run's at that step.",
             ""]
    runs = collection.runs
    if runs["best_eval_reward"].isna().all():
        return [*lines, "No run has an evaluation yet."]
    reached = first_reaching(collection, bar).set_index("run_id")
    best = ranking.best
    if best is not None:
        own = runs[(runs[LABEL] == best) & (runs["steps_done"] > 0)]
        hits = [r for r in own["run_id"] if r in reached.index]
        verdict = "**Reached**" if hits else "**Not reached**"
        lines.append(f"{verdict} by the best config **{best}** ({len(hits)} of {len(own)} "
                     f"run(s) with metrics reach {bar:g}):")
        lines += [f"- {_reaching(reached, run, bar)}" for run in own.to_dict("records")]
        if hits:
            return lines
        lines.append("")
    if not reached.empty:
        first = reached.iloc[0]
        run = runs.set_index("run_id").loc[reached.index[0]]
        return [*lines, f"First run of the sweep to reach {bar:g}: "
                f"`{reached.index[0]}` ({first[LABEL]}, seed {run['seed']}, {run['status']}) "
                f"at {_crossing(first)}."]
    top = runs.loc[runs["best_eval_reward"].idxmax()]
    return [*lines, f"No run reaches {bar:g}; the best value seen is "
            f"{fmt_number(top['best_eval_reward'])} (`{top['run_id']}`, {top[LABEL]}, seed "
            f"{top['seed']}, {top['status']}, at GRPO step {_fmt_step(top['best_eval_step'])})."]


def _reaching(reached: pd.DataFrame, run: Mapping[str, Any], bar: float) -> str:
    """One run of the best config: where it first reached ``bar``, or its best value."""
    name = f"`{run['run_id']}` (seed {run['seed']})"
    if run["run_id"] in reached.index:
        return f"{name}: {_crossing(reached.loc[run['run_id']])}"
    return (f"{name}: not reached; best {fmt_number(run['best_eval_reward'])} at GRPO step "
            f"{_fmt_step(run['best_eval_step'])}")


def _crossing(first: Mapping[str, Any]) -> str:
    """``GRPO step 6, 0.13 GPU-hours (3m30s wall-clock), eval reward 0.270``; at step 0 it says
    that the bar was met before training."""
    if first["step"] == 0:
        return (f"GRPO step 0, before any training (the initial policy already meets the bar), "
                f"eval reward {fmt_number(first[EVAL_REWARD])}")
    return (f"GRPO step {_fmt_step(first['step'])}, {fmt_number(first['gpu_hours'], 2)} "
            f"GPU-hours ({fmt_duration(first[ELAPSED])} wall-clock), eval reward "
            f"{fmt_number(first[EVAL_REWARD])}")


def _comparison(collection: Collection) -> list[str]:
    lines = ["## Comparison with the on-policy run", ""]
    baselines = on_policy_labels(collection)
    if not baselines:
        return [*lines, "No on-policy run (`off_policy.epochs == 1` and "
                "`train_batch_size == rollout_batch_size`, `off_policy.staleness == 0`) in this "
                "sweep; nothing to compare."]
    rule = ("(`off_policy.epochs == 1`, `train_batch_size == rollout_batch_size`, "
            "`off_policy.staleness == 0`)")
    if len(baselines) == 1:
        lines.append(f"On-policy config: **{baselines[0]}** {rule}.")
    else:
        lines.append(f"On-policy configs {rule}: {'; '.join(f'**{b}**' for b in baselines)}. "
                     "Each config is compared with the one sharing most of its swept values.")
    lines += ["", "Eval reward (mean over seeds) at the last evaluation at or before the compared "
              "point; the point is the smaller of the two configs' last step (training wall-clock, "
              "evaluation excluded).", ""]
    several = len(baselines) > 1
    header = ["config", *(["on-policy config"] if several else []), "at step", "reward at step",
              "on-policy at step", "Δ at step", "at wall-clock", "reward at wall-clock",
              "on-policy at wall-clock", "Δ at wall-clock"]
    rows = []
    curves = SweepCurves(collection.steps)
    for label in collection.labels:
        baseline = on_policy_baseline(collection, label)
        if label in baselines or baseline is None:
            continue
        c = compare_with(curves, label, baseline)
        cells = [label, *([baseline] if several else [])]
        for axis, fmt in (("step", _fmt_step), (TRAIN_CLOCK, fmt_duration)):
            mine, theirs = c[f"config@{axis}"], c[f"baseline@{axis}"]
            cells += [fmt(c[axis]), fmt_number(mine), fmt_number(theirs),
                      fmt_number(mine - theirs)]
        rows.append(cells)
    return [*lines, markdown_table(header, rows)] if rows else [*lines, "No other config."]


def _fmt_step(step: float | None) -> str:
    return MISSING if is_missing(step) else str(int(step))


def _where(step: float | None) -> str:
    return "before the first step" if is_missing(step) else f"at step {int(step)}"


def _stop_step(run: Mapping[str, Any]) -> float | None:
    """The step a run stopped at: ``last_step`` of its status, else its last logged step."""
    if not is_missing(run["last_step"]):
        return float(run["last_step"])
    return float(run["steps_done"] - 1) if run["steps_done"] else None


def _figures(figures: Mapping[str, Sequence[Path]], report_dir: Path) -> list[str]:
    def link(path: Path) -> str:
        return Path(os.path.relpath(path, report_dir)).as_posix()

    lines = ["## Figures", ""]
    for name, paths in figures.items():
        pngs = [p for p in paths if p.suffix == ".png"]
        others = ", ".join(f"[{p.suffix[1:]}]({link(p)})" for p in paths if p.suffix != ".png")
        lines += [f"### {name.replace('_', ' ')}", "",
                  *(f"![{name}]({link(p)})" for p in pngs), "", others, ""]
    return lines if figures else [*lines, "None written."]


def build_report(collection: Collection, report_dir: Path,
                 figures: Mapping[str, Sequence[Path]] | None = None,
                 criterion: Criterion = BEST_CRITERION, bar: float = ACCURACY_BAR,
                 ranking: Ranking | None = None) -> str:
    """The markdown text of the report; figure links are relative to ``report_dir``; ``bar``
    the validation accuracy the best config is checked against; ``ranking`` the collection's
    by ``criterion`` (computed when not given)."""
    names = ", ".join(f"`{s.path.name}`" for s in collection.sweeps)
    counts = collection.runs["status"].value_counts()
    status_line = ", ".join(f"{n} {status}" for status, n in counts.items())
    with_data = int((collection.runs["steps_done"] > 0).sum())
    ranking = ranking or rank(collection, criterion)
    never = len(missing_jobs(collection))
    sections = [
        [f"# Sweep report: {names}", "",
         f"{len(collection.runs)} run(s) ({with_data} with metrics), {len(collection.labels)} "
         f"config(s): {status_line}"
         + (f"; {never} more job(s) gave no run: never started or unreadable (listed below)."
            if never else "."),
         *([] if collection.metric == DEFAULT_METRIC else
           ["", f"Every evaluation is read as its {collection.metric} (analysis.metric="
                f"{collection.metric}: `eval/{collection.metric}` and the outcome files' "
                f"per-problem {collection.metric}), not its mean reward."]),
         *([""] if collection.notes else []), *(f"- {note}" for note in collection.notes)],
        _ranges(collection),
        _runs(collection),
        _stopped(collection),
        _race(collection),
        _failures(collection),
        _unusable(collection, ranking),
        _best(collection, ranking),
        _comparisons(ranking),
        *([confirmed] if (confirmed := confirmed_section(collection, ranking)) else []),
        _effects(ranking),
        _bar(collection, ranking, bar),
        _comparison(collection),
        _trends(collection, ranking),
        _figures(figures or {}, report_dir),
    ]
    return "\n\n".join("\n".join(section) for section in sections) + "\n"


def write_report(collection: Collection, report_dir: Path,
                 figures: Mapping[str, Sequence[Path]] | None = None,
                 criterion: Criterion = BEST_CRITERION, bar: float = ACCURACY_BAR,
                 ranking: Ranking | None = None) -> Path:
    """Write ``report_dir/report.md`` and ``comparisons.csv`` beside it (``ranking``: the
    collection's by ``criterion``, computed when not given), each atomically and never through
    a planted link (``grpo.run.files.atomic_write``); return the report's path."""
    ranking = ranking or rank(collection, criterion)
    path = report_dir / "report.md"
    atomic_write_text(path, build_report(collection, report_dir, figures, criterion, bar, ranking))
    comparisons = comparison_frame(ranking)
    atomic_write(report_dir / "comparisons.csv", lambda tmp: comparisons.to_csv(tmp, index=False))
    if ranking.effects is not None:
        effects = ranking.effects.frame()
        atomic_write(report_dir / "main_effects.csv", lambda tmp: effects.to_csv(tmp, index=False))
    return path
