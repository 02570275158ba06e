"""The report's Confirmed section: what a confirmation (``python -m analysis confirm``) measured
of a sweep's pick (:mod:`analysis.decisions.confirm`), written into the sweep's report, the
confirmation's own (``<C>/report.md``, also when ``make plots`` reads the confirmation) and
printed by the command, and the one line the study chain's summary ends with."""

from __future__ import annotations

from pathlib import Path

from analysis.decisions.confirm import EXTRA_METRICS, Confirmation, Figures, read_confirmation
from analysis.decisions.race.looks import still_in
from analysis.decisions.ranking import BEST_CRITERION, Ranking, rank
from analysis.names.formatting import MISSING, markdown_table
from analysis.readers.collect import Collection, collect
from analysis.readers.confirmation import confirmations_of, read_record
from analysis.stats.levels import ALPHA, level_text

HEADING = "## Confirmed"


def _metric_name(name: str, k: int) -> str:
    return name.replace("@k", f"@{k}")


def section_lines(conf: Confirmation) -> list[str]:
    """The Confirmed section of one confirmation (markdown lines)."""
    record, where = conf.record, f"`{conf.target}`"
    lines = [HEADING, ""]
    if conf.refusal:
        return [*lines, f"{where}: {conf.refusal}; it is no confirmation of this sweep's pick."]
    n_final = len(record.finalists)
    metric = record.metric
    if record.retrain:
        seeds = ", ".join(map(str, record.seeds))
        what = (f"The top {n_final} config{'s' if n_final != 1 else ''} of this sweep's ranking "
                f"(its order) trained again, each with {len(record.seeds)} fresh seed"
                f"{'s' if len(record.seeds) != 1 else ''} ({seeds}: none of this sweep's runs "
                f"used {'them' if len(record.seeds) != 1 else 'it'})")
    else:
        what = (f"This sweep's own final models of its top {n_final} config"
                f"{'s' if n_final != 1 else ''} (not trained again: the held-out problems remove "
                "the problems' part of the winner's curse, not the seeds', these being the seeds "
                "that chose them)")
    if not conf.figures:
        return [*lines, f"{what}: {where}, no run confirmed yet (run the same `python -m "
                        "analysis confirm` command again to resume it)."]
    k = conf.samples
    lines += [f"{what}, each final model evaluated on {conf.n_problems} held-out problems "
              f"({k} response{'s' if k != 1 else ''} each) that no evaluation of this sweep "
              f"read (their fingerprints share none with this sweep's outcome files): {where}.",
              ""]
    header = ["rank", "config", f"selection: late {metric} (this sweep's problems and seeds)",
              f"confirmed: {metric} (held-out problems, "
              + ("fresh seeds)" if record.retrain else "the same runs)"),
              *(_metric_name(m, k) for m in EXTRA_METRICS),
              "selection − confirmed (the winner's curse as measured)"]
    rows = [[f.finalist.rank, f.finalist.label, _figure(f.selection),
             _figure(f.confirmed) if f.confirmed is not None else MISSING,
             *(f.extra[m].describe() if m in f.extra else MISSING for m in EXTRA_METRICS),
             f.difference.describe() if f.difference is not None else MISSING]
            for f in conf.figures]
    lines += [markdown_table(header, rows), ""]
    seeds = conf.seeds.describe() if conf.seeds is not None else "none"
    lines.append(f"Intervals: {level_text(ALPHA)}, each figure's own; the confirmed one over the "
                 f"seeds and the held-out problems, with the seed variance as measured ({seeds}); the "
                 "difference's carries both figures' noise (their variances added, "
                 "Satterthwaite's df), the selection's and the confirmation's.")
    lines += ["", _order(conf)]
    verdicts = [f for f in conf.figures[1:] if f.selection_verdict or f.confirmed_verdict]
    if verdicts:
        lines += ["", f"The sweep's comparisons with its best ({conf.figures[0].finalist.label}), "
                      "made again on the confirmed runs (Tukey-Kramer over the finalists):"]
        lines += [f"- {f.finalist.label}: selection "
                  f"{f.selection_verdict.describe() if f.selection_verdict else MISSING}; confirmed "
                  f"{f.confirmed_verdict.describe() if f.confirmed_verdict else MISSING}"
                  for f in verdicts]
    if conf.placebo is not None:
        lines += ["", *_placebo_lines(conf, metric)]
    missing = [line for f in conf.figures for line in f.missing]
    missing += list(conf.placebo.missing) if conf.placebo is not None else []
    if missing:
        lines += ["", "Runs without a confirmed figure (the finalist's figure is over the "
                      "others; one that stopped early reads its config high):",
                  *(f"- {line}" for line in missing)]
    if conf.data_name == "toy":
        lines += ["", "On the toy task the sweep's evaluations read problems its runs train on, "
                      "the held-out ones are not trained on: the difference holds that "
                      "generalization gap as well as the winner's curse (on MATH both are "
                      "validation problems no run trains on)."]
    return lines


def _placebo_lines(conf: Confirmation, metric: str) -> list[str]:
    """The placebo arm's lines: its confirmed figure, each finalist's margin above it, and its
    own gain over the pre-RL evaluation."""
    placebo = conf.placebo
    assert placebo is not None
    head = (f"Placebo: {placebo.arm.label}, the best finalist's config trained with the same fresh "
            "seeds on a reward that carries no information (each response rewarded 1 with "
            "probability reward.p, whatever its answer), evaluated on the same held-out problems: ")
    lines = [head + (f"confirmed {metric} {_figure(placebo.confirmed)}."
                     if placebo.confirmed is not None else "no confirmed run yet.")]
    k = len(conf.record.finalists)
    if placebo.confirmed is not None:
        lines += ["", f"Each finalist above its placebo (its confirmed {metric} minus the "
                      f"placebo's, on the pair's seed variance; {level_text(placebo.alpha)}"
                      + (f", Bonferroni over the {k} finalists" if k > 1 else "") + "):"]
        for f in conf.figures:
            margin = placebo.margins.get(f.finalist.rank)
            lines.append(f"- {f.finalist.label}: " + (
                f"{margin.describe()}: " + ("above the placebo" if margin.above
                                            else "not shown above the placebo")
                if margin is not None else "no interval (a seed variance is missing: 2 or more "
                "seeds each give one)"))
    gain = placebo.gain
    lines += ["", "The placebo's own gain over the pre-RL evaluation (each of its runs' late "
                  f"{metric} on its evaluation problems minus its step-0 evaluation, run by run; "
                  f"{level_text(ALPHA)}): " + (
                      f"{gain.describe()}" if gain is not None
                      else "none yet (2 or more of its runs must complete)") + "."]
    return lines


def _figure(estimate) -> str:
    if estimate is None:
        return MISSING
    where = f" ({estimate.n_seeds} seed{'s' if estimate.n_seeds != 1 else ''}"
    where += f", {estimate.n_problems} problems)" if estimate.n_problems else ")"
    return estimate.describe() + (where if estimate.n_seeds else "")


def _order(conf: Confirmation) -> str:
    kept = conf.order_kept()
    labels = [f.finalist.label for f in conf.figures]
    if len(labels) < 2:
        return "Order: one finalist, no order to keep."
    if kept is None:
        return "Order: not every finalist has a confirmed figure yet."
    if kept:
        means = [f.confirmed.mean for f in conf.figures]
        signs = [" = " if a == b else " > " for a, b in zip(means, means[1:], strict=False)]
        shown = labels[0] + "".join(sign + label for sign, label in zip(signs, labels[1:], strict=True))
        return f"Order: the confirmed means keep the selection's order ({shown})."
    confirmed = sorted(conf.figures, key=lambda f: -f.confirmed.mean)
    return ("Order: the confirmed means do not keep the selection's order; confirmed: "
            + " > ".join(f"{f.finalist.label} (rank {f.finalist.rank})" for f in confirmed) + ".")


def summary_line(conf: Confirmation) -> str:
    """One line of the best finalist's figures: its confirmed figure (how measured), beside its
    selection figure and the difference."""
    if conf.refusal:
        return f"{conf.target}: {conf.refusal}"
    if not conf.figures or conf.figures[0].confirmed is None:
        return f"{conf.target}: its best finalist has no confirmed figure yet"
    best: Figures = conf.figures[0]
    how = (f"{len(conf.record.seeds)} fresh seed{'s' if len(conf.record.seeds) != 1 else ''}"
           if conf.record.retrain else "its own runs")
    margin = conf.placebo.margins.get(best.finalist.rank) if conf.placebo is not None else None
    return (f"{best.finalist.label}: confirmed {conf.record.metric} "
            f"{best.confirmed.describe()} on {conf.n_problems} held-out problems, {how}; "
            f"selection {best.selection.describe()}; selection − confirmed "
            f"{best.difference.describe()}"
            + (f"; above its placebo {margin.describe()}" if margin is not None else ""))


def selection_ranking(collection: Collection, ranking: Ranking | None = None) -> Ranking:
    """The ranking a confirmation of ``collection`` chose its finalists by (the late criterion,
    among the configs still in at a race's last look): ``ranking`` where it is that one."""
    kept, _ = still_in(collection)
    if ranking is not None and ranking.criterion == BEST_CRITERION and kept is None:
        return ranking
    return rank(collection, labels=kept)


def confirmed_section(collection: Collection, ranking: Ranking | None = None) -> list[str]:
    """The Confirmed sections of a report of ``collection``: of one sweep, those of its
    confirmations beside it; of a confirmation, its own (its source read); none otherwise."""
    if len(collection.sweeps) != 1:
        return []
    sweep = collection.sweeps[0].path
    try:
        record = read_record(sweep)
    except ValueError as error:
        return [HEADING, "", f"{error}"]
    if record is not None:
        try:
            source = collect([record.source])
        except (OSError, ValueError) as error:
            return [HEADING, "", f"This sweep confirms {record.source}, which cannot be read "
                                 f"({error})."]
        return section_lines(read_confirmation(sweep, record, source, selection_ranking(source)))
    found, unreadable = confirmations_of(sweep)
    lines: list[str] = []
    for error in unreadable:
        lines += [*([""] if lines else []), HEADING, "", error]
    if not found:
        return lines
    chosen = selection_ranking(collection, ranking)
    for target, theirs in found:
        lines += [*([""] if lines else []),
                  *section_lines(read_confirmation(target, theirs, collection, chosen))]
    return lines


def report_confirmation(target: Path) -> tuple[Confirmation, list[str]]:
    """The confirmation in ``target`` read against its source sweep: its figures and its
    section."""
    record = read_record(target)
    if record is None:
        raise ValueError(f"{target} holds no confirmation")
    source = collect([record.source])
    conf = read_confirmation(target, record, source, selection_ranking(source))
    return conf, section_lines(conf)
