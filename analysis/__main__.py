"""Command line: ``python -m analysis {collect,plots,promote,confirm,watch} ...``.

* ``collect``: save the tidy per-step frame of the sweep(s) (parquet with pyarrow, else CSV);
* ``plots``: figures into ``<sweep>/figures/``, ``report.md`` (with ``comparisons.csv`` and
  ``main_effects.csv``) into the sweep and the collected frame next to it (``--no-report`` skips
  the report); an overlay of several sweeps writes all of them into its own directory beside the
  first sweep, ``overlay_<sweep>+<sweep>...`` (:func:`output_dir`), never over a sweep's own;
  ``--external`` overlays runs made elsewhere (an expert-iteration run's entropy, by default); ``--seed-variance-from`` names a sweep to borrow a
  seed variance from (else the runs' ``analysis.seed_variance_from``);
* ``promote``: write ``<conf>/experiment/promoted/<NAME>.yaml`` (and ``<conf>/promoted/<NAME>/*.yaml``)
  sweeping the top-K configs plus the on-policy baseline; run it with
  ``-m +experiment=promoted/<NAME>`` (``--overwrite`` replaces an earlier promotion of that name);
* ``confirm``: train the top-K configs of a sweep's ranking again with fresh seeds (or, with
  ``--no-retrain``, take its own final models) and evaluate each final model on held-out problems
  no evaluation of the sweep read, as a sweep of its own beside it (``<sweep>-confirm``), then
  print its Confirmed section (:mod:`analysis.outputs.confirm`); ``--dry-run`` prices it;
* ``watch``: the live monitor of a running or finished sweep (one row per run, refreshed in
  place; plain lines when stdout is not a terminal), then its summary; given a detached chain's
  root, the sweep of the stage it started last.

Without ``--sweep`` the latest sweep under ``--outputs`` is used (default: ``$GRPO_OUTPUT_ROOT``,
else ``outputs``, as in ``conf/config.yaml``'s ``paths.output_root``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from analysis.decisions.ranking import BEST_CRITERION, CRITERIA, rank
from analysis.names.config_names import BORROW_KEY
from analysis.outputs.report import ACCURACY_BAR, write_report
from analysis.readers.collect import (
    LABEL,
    Collection,
    chain_stage_sweep,
    collect,
    find_latest_sweep,
    save_steps,
    sweep_dir_problem,
)
from analysis.readers.external import GRPO_STEPS
from analysis.readers.run_rows import job_dirs
from grpo.run.driver import DRIVER_FILE, DRIVER_LOG
from grpo.run.files import RunDirError, subdir

DEFAULT_OUTPUTS = os.environ.get("GRPO_OUTPUT_ROOT", "outputs")


def latest_sweep(outputs: Path) -> Path:
    """The latest sweep under ``outputs``; before any sweep, an error that says how to make one."""
    try:
        return find_latest_sweep(outputs)
    except FileNotFoundError as error:
        raise FileNotFoundError(f"{error}; run one first, e.g. `make demo` (a 4-run CPU sweep) "
                                "or `python launch.py -m ...`") from error


def _collect(args: argparse.Namespace, ranks: bool) -> Collection:
    """The sweeps of ``--sweep`` and ``--sweeps``, else the latest under ``--outputs``,
    collected; what the collection read once or set aside is printed, a line each. The sweep
    the runs name to borrow a seed variance from is read with them only where the command
    ranks them (``ranks``)."""
    sweeps = [*args.sweep, *map(Path, shlex.split(args.sweeps or ""))]
    borrow = getattr(args, "seed_variance_from", None)
    if borrow is not None and (problem := sweep_dir_problem(borrow)) is not None:
        raise FileNotFoundError(f"--seed-variance-from: {problem}")
    collection = collect(sweeps or [latest_sweep(args.outputs)], borrowed=ranks)
    for note in collection.notes:
        print(note)
    return collection


OVERLAY_PREFIX = "overlay_"
MAX_OVERLAY_NAME = 100
"""Longest overlay directory name made of its sweeps' names (longer: the first and a digest)."""


def output_dir(collection: Collection) -> Path:
    """Where the analysis of ``collection`` writes: its sweep's directory; for an overlay of
    several sweeps its own directory beside the first, ``overlay_<name>+<name>...`` (the first
    name, how many more and a digest of their paths where names repeat or run long), created if
    missing; a ValueError where that directory is a sweep (an overlay never writes over a
    sweep's own report)."""
    paths = [s.path for s in collection.sweeps]
    if len(paths) == 1:
        return paths[0]
    names = [p.resolve().name for p in paths]
    name = "+".join(names)
    if len(set(names)) < len(names) or len(name) > MAX_OVERLAY_NAME:
        digest = hashlib.sha256("\n".join(str(p.resolve()) for p in paths).encode()).hexdigest()
        name = f"{names[0][:MAX_OVERLAY_NAME // 2]}+{len(names) - 1}more_{digest[:8]}"
    out = paths[0].parent / f"{OVERLAY_PREFIX}{name}"
    if (out / "multirun.yaml").exists() or (out.is_dir() and job_dirs(out)):
        raise ValueError(f"the overlay of {len(paths)} sweeps writes into {out}, which is a sweep; "
                         "rename that sweep directory or overlay from copies elsewhere")
    return subdir(out.parent, out.name)


def cmd_collect(args: argparse.Namespace) -> None:
    """Save the collected frame and print a one-line summary per run."""
    collection = _collect(args, ranks=False)
    path = save_steps(collection, args.out or output_dir(collection) / "collected")
    print(collection.runs[["run_id", LABEL, "seed", "status", "steps_done"]]
          .to_string(index=False))
    print(f"wrote {path}")


def cmd_plots(args: argparse.Namespace) -> None:
    """Write the figures, the collected frame and (unless ``--no-report``) the report."""
    from analysis.outputs.plots import plot_all
    from analysis.readers.external import read_external

    if not 0 < args.bar <= 1:
        raise ValueError(f"--bar is {args.bar}; give a validation accuracy in (0, 1], e.g. 0.25")
    paths = args.external
    labels = _per_file(args.external_label, paths, "--external-label", share=False)
    axes = _per_file(args.external_x, paths, "--external-x", share=True)
    externals = [curve for path, label, x in zip(paths, labels, axes, strict=True)
                 for curve in read_external(path, args.external_metric, label, x)]
    collection = _collect(args, ranks=True)
    sweep = output_dir(collection)
    if len(collection.sweeps) > 1:
        print(f"overlay of {len(collection.sweeps)} sweeps: written into {sweep}/ (each sweep's "
              "own report stays as it was)")
    ranking = rank(collection, args.criterion, borrow=args.seed_variance_from or True)
    figures = plot_all(collection, sweep / "figures", externals, args.facet, args.color, ranking)
    for figure in figures.values():
        print("wrote " + ", ".join(map(str, figure.paths)))
    print(f"wrote {save_steps(collection, sweep / 'collected')}")
    if not args.no_report:
        paths = {name: figure.paths for name, figure in figures.items()}
        print(f"wrote {write_report(collection, sweep, paths, args.criterion, args.bar, ranking)}")


def _per_file(values: list[str], paths: list[Path], option: str,
              share: bool) -> list[str | None]:
    """One value of ``option`` per ``--external`` file: none given (None each), one per file,
    or (``share``) a single one for all."""
    if not values:
        return [None] * len(paths)
    if share and len(values) == 1:
        return values * len(paths)
    if len(values) != len(paths):
        raise ValueError(f"{option} is given {len(values)} time(s) for {len(paths)} --external "
                         f"file(s); give it once per file, in the same order"
                         + (" (or once for all)" if share else ""))
    return list(values)


def cmd_promote(args: argparse.Namespace) -> None:
    """Write the promoted experiment preset and its option files."""
    from analysis.outputs.promote import check_arguments, promote

    check_arguments(args.name, args.top_k, args.steps)  # before the sweep is read
    collection = _collect(args, ranks=True)
    promotion = promote(collection, args.top_k, args.criterion, args.name, args.steps,
                        args.conf_dir, borrow=args.seed_variance_from or True,
                        overwrite=args.overwrite)
    print(f"wrote {promotion.preset} (run it: python launch.py -m +experiment=promoted/{args.name})")
    for path, text in zip(promotion.options, promotion.descriptions, strict=True):
        print(f"  {path}: {text}")
    for label, why in promotion.near_ties.items():
        print(f"warning: {label}: {why} (top1)")
    for line in promotion.verdicts:
        print(line)


def cmd_confirm(args: argparse.Namespace) -> None:
    """Launch (or resume) the confirmation of a sweep's pick, then print its Confirmed section."""
    from analysis.outputs.confirm import check_counts, confirm_and_report

    check_counts(args.top_k, args.seeds, not args.no_retrain, args.placebo)  # before the sweep is read
    status = confirm_and_report(args.sweep, args.top_k, args.seeds, not args.no_retrain,
                                args.overrides, args.dry_run, args.placebo)
    if status:
        sys.exit(status)


def cmd_watch(args: argparse.Namespace) -> None:
    """Follow a sweep until no run is active (or once), then print its summary."""
    from analysis.outputs.monitor import watch

    given = [p for p in (args.sweep_dir, *args.sweep) if p is not None]
    if len({p.resolve() for p in given}) > 1:  # one sweep may be spelt two ways
        raise SystemExit(f"error: two sweeps to watch ({' and '.join(map(str, given))}): "
                         "watch follows one; give it once, as SWEEP_DIR or --sweep")
    sweep = given[0] if given else latest_sweep(args.outputs)
    if (problem := sweep_dir_problem(sweep)) is not None:
        raise FileNotFoundError(problem)
    if (sweep / DRIVER_FILE).exists() and not (sweep / "multirun.yaml").exists():
        sweep = chain_stage(sweep)
    watch(sweep, once=args.once, interval_s=args.interval)


def chain_stage(root: Path) -> Path:
    """The sweep `watch` follows for a chain's root: its latest stage's (`chain_stage_sweep`),
    said in a line; an error where it has none (not a chain's root, or no stage started)."""
    stage = chain_stage_sweep(root)
    if stage is None:
        raise SystemExit(f"error: {root} holds a driver record but no multirun.yaml: not a "
                         "sweep, nor a chain whose driver has started a stage yet; the driver's "
                         f"log: {root / DRIVER_LOG}")
    print(f"chain {root.name}: its latest stage's sweep {stage}", flush=True)
    return stage


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m analysis``."""
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    outputs = argparse.ArgumentParser(add_help=False)
    outputs.add_argument("--outputs", type=Path, default=Path(DEFAULT_OUTPUTS),
                         help="where to look for the latest sweep "
                              "(default: $GRPO_OUTPUT_ROOT or outputs)")
    common = argparse.ArgumentParser(add_help=False, parents=[outputs])
    common.add_argument("--sweep", action="append", type=Path, default=[],
                        help="sweep directory (repeatable); default: latest under --outputs")
    common.add_argument("--sweeps", metavar="'DIR [DIR ...]'",
                        help="sweep directories in one argument, split as a shell splits words "
                             "(quote a path with spaces): what `make plots SWEEP=...` passes")
    criterion = argparse.ArgumentParser(add_help=False)
    criterion.add_argument("--criterion", choices=CRITERIA, default=BEST_CRITERION,
                           help=f"how configs are ranked (default: {BEST_CRITERION})")
    criterion.add_argument("--seed-variance-from", type=Path, metavar="SWEEP",
                           help="a sweep with 2+ seeds a config whose seed variance a one-seed "
                                "sweep's verdicts borrow (default: the runs' "
                                f"{BORROW_KEY}, if set)")

    sub = commands.add_parser("collect", parents=[common], help="save the collected frame")
    sub.add_argument("--out", type=Path, help="output path stem (default: <sweep>/collected; an "
                                            "overlay's: overlay_<sweep>+<sweep>.../collected)")
    sub.set_defaults(func=cmd_collect)

    sub = commands.add_parser("plots", parents=[common, criterion],
                              help="figures + report.md into the sweep directory (an overlay of "
                                   "several: into its own, overlay_<sweep>+<sweep>...)")
    sub.add_argument("--external", action="append", type=Path, default=[],
                     help="a run made outside the sweep (e.g. expert iteration) to overlay: "
                          ".csv or .jsonl with step, the metric and optionally label "
                          "(repeatable; format: analysis/readers/external.py)")
    sub.add_argument("--external-metric", default="train/entropy",
                     help="metric of the --external files, named as in metrics.jsonl or by its "
                          "short name in the file (default: train/entropy)")
    sub.add_argument("--external-label", action="append", default=[],
                     help="legend name of each --external file, in order (default: the file's "
                          "label column, else its name)")
    sub.add_argument("--external-x", action="append", default=[],
                     help="what an --external file's steps count, e.g. 'EI step' (own top "
                          f"axis), or '{GRPO_STEPS}' (the sweep's axis); once for all or once "
                          "per file (default: '<label> step')")
    sub.add_argument("--bar", type=float, default=ACCURACY_BAR,
                     help="validation accuracy the report checks the best config against "
                          f"(default: the handout's {ACCURACY_BAR:g})")
    sub.add_argument("--no-report", action="store_true", help="do not write report.md")
    sub.add_argument("--facet", help="swept key with one panel per value (large sweeps; "
                                     "default: the key with the second most values)")
    sub.add_argument("--color", help="swept key that colours the lines "
                                     "(default: the key with the most values)")
    sub.set_defaults(func=cmd_plots)

    sub = commands.add_parser("promote", parents=[common, criterion],
                              help="write a Hydra preset sweeping the top-K configs")
    sub.add_argument("--top-k", type=int, required=True, help="how many configs to promote")
    sub.add_argument("--name", required=True, help="experiment name of the preset")
    sub.add_argument("--steps", type=int, default=200, help="n_grpo_steps (default: 200)")
    sub.add_argument("--conf-dir", type=Path, default=Path("conf"),
                     help="Hydra config directory (default: conf)")
    sub.add_argument("--overwrite", action="store_true",
                     help="replace an earlier promotion of the same --name")
    sub.set_defaults(func=cmd_promote)

    sub = commands.add_parser("confirm",
                              help="train a sweep's top-K configs again with fresh seeds and "
                                   "evaluate them on held-out problems (a sweep beside it)")
    sub.add_argument("--sweep", type=Path, required=True, help="the sweep whose pick to confirm")
    sub.add_argument("--top-k", type=int, required=True,
                     help="how many configs of its ranking to confirm (its best first)")
    sub.add_argument("--seeds", type=int,
                     help="fresh seeds a finalist is trained with (none of the sweep's runs used "
                          "them); not with --no-retrain")
    sub.add_argument("--placebo", action="store_true",
                     help="also train the best finalist's config on reward=random (a placebo) with "
                          "the same fresh seeds: the report says how far each finalist stands "
                          "above it; not with --no-retrain")
    sub.add_argument("--no-retrain", action="store_true",
                     help="evaluate the sweep's own final models on the held-out problems alone "
                          "(removes the problems' part of the winner's curse, not the seeds')")
    sub.add_argument("--dry-run", action="store_true",
                     help="print its jobs and what they cost; write and run nothing")
    sub.add_argument("overrides", nargs="*",
                     help="Hydra overrides for its jobs: where they run (cluster=slurm, "
                          "cluster.detach=true, paths.*) and confirm.n_examples, "
                          "confirm.samples_per_problem")
    sub.set_defaults(func=cmd_confirm)

    sub = commands.add_parser("watch", parents=[outputs],
                              help="live view of a running or finished sweep")
    sub.add_argument("sweep_dir", nargs="?", type=Path,
                     help="sweep directory, or a detached chain's root (<paths.output_root>/"
                          "chains/<chain>): the sweep of its latest stage; default: latest "
                          "under --outputs")
    sub.add_argument("--sweep", action="append", type=Path, default=[],
                     help="the sweep directory, as plots takes it (the same as SWEEP_DIR)")
    sub.add_argument("--once", action="store_true", help="show the runs once and stop")
    sub.add_argument("--interval", type=float, default=2.0,
                     help="seconds between refreshes (default: 2)")
    sub.set_defaults(func=cmd_watch)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command line."""
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (FileNotFoundError, ValueError, RunDirError) as error:
        sys.exit(f"error: {error}")
    except OSError as error:  # a sweep directory it may read but not write, a full disk
        sys.exit(f"error: cannot write {error.filename or 'the analysis'}: {error.strerror}; nothing "
                 "of the runs was changed. Make the sweep directory writable (e.g. `chmod -R u+w "
                 "<sweep>`) or free space, and run it again")


if __name__ == "__main__":
    main()
