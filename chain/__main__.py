"""Run a chain of studies, stage after stage:

    python -m chain [--chain cs336] [--stages lr_sweep,baselines] [overrides ...]

Each stage is ``python launch.py -m +experiment=<stage> <carried values> <overrides>``, through
the launcher the overrides choose (``cluster=slurm`` runs each stage as a SLURM job array); the
overrides go to every stage and win over carried values. ``dry_run=true`` prints each stage's
plan (every carried key, its value and the sweep directory it came from) and its jobs with their
estimated cost, then the whole chain's estimate beside the budget of each study
(``budgets`` in the chain's yaml: the handout's H100-hours), and runs nothing. A re-run skips the finished stages (every run completed, collapsed, diverged or pruned) and
resumes at the first unfinished one: in its latest sweep directory when that sweep ran with the
same overrides (``<sweep>/chain.json``), its finished runs kept, the others resumed from their
checkpoints; else in a new sweep directory. The chain stops at a stage that does not finish.
A stage whose sweep is still running is refused, except to the chain's own detached driver run
again (requeued at its time limit or on preemption, or started anew by the same command once
the last one was gone) where the sweep ran with the same overrides: the stage is launched again
into that sweep, which follows its queued and running jobs as a sweep's relaunch does, and the
chain goes on.
A chain whose yaml ends with ``confirm: {top_k, seeds}`` confirms its last stage's pick after it
(``python -m analysis confirm``, through the same launcher with the overrides a confirmation
takes), and its summary ends with the final config's confirmed figure; a chain whose last stage
holds out no problem is refused before any stage runs, and its dry run, once the last stage has
finished, is the confirmation's own dry run (:func:`confirm_last`), its cost a row of the chain's
budget lines (:func:`budget_lines`).
With ``cluster.detach=true`` the chain's driver is not the terminal (``grpo.run.driver``): a
SLURM CPU job (``cluster=slurm``) or a process of its own session runs this same command
attached, its record and log in ``<paths.output_root>/chains/<chain>/`` (``chain_root``) and a
copy of the record in each stage's sweep directory, where ``make watch`` shows it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from analysis.outputs.confirm import (
    confirm_and_report,
    heldout_of,
    refused_overrides,
)
from analysis.outputs.confirmed import report_confirmation, summary_line
from analysis.outputs.monitor import INTERRUPTED, make_command
from analysis.readers.confirmation import confirmation_dir
from analysis.readers.jobs import override_key
from chain.plan import (
    StagePlan,
    UserOverrides,
    compose_stage,
    plan_stage,
    stage_root,
    winner_lookup,
)
from chain.results import SweepState, latest_sweep, sweep_state
from chain.stages import CONF_DIR, Chain, ConfirmStage, confirm_words, load_chain
from grpo.config.rules import value_errors
from grpo.run.driver import (
    DRIVER_LOG,
    attached_refusal,
    detach,
    driver_starter,
    under_driver,
)
from grpo.run.files import RunDirError
from grpo.run.launching import launch_sweep
from grpo.sweep.cost import ESTIMATE_FILE_ENV
from grpo.sweep.hydra_compat import parse_overrides, split_into_jobs
from grpo.sweep.overrides import check_overrides
from grpo.sweep.slurm_resources import sbatch_refusal

# keys the chain sets for each stage itself
CHAIN_KEYS = ("experiment", "experiment_name", "hydra.sweep.dir", "hydra.run.dir")
# a stage's sweep directory records the overrides it ran with here
RECORD = "chain.json"
# the timestamp of a sweep directory, as conf/config.yaml's hydra.sweep.dir writes it
TIMESTAMP = "%Y-%m-%d_%H-%M-%S"


def recorded_overrides(sweep: Path) -> list[str] | None:
    """The overrides ``sweep``'s ``chain.json`` says the stage ran with (None: no record)."""
    try:
        overrides = json.loads((sweep / RECORD).read_text())["overrides"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return [str(o) for o in overrides] if isinstance(overrides, list) else None


def new_sweep_dir(root: Path) -> Path:
    """``<root>/<now>``, a directory that does not exist yet."""
    while (path := root / datetime.now().strftime(TIMESTAMP)).exists():
        time.sleep(1)
    return path


def launch(plan: StagePlan, user: UserOverrides, sweep: Path, dry_run: bool,
           estimate_file: Path | None = None) -> int:
    """Run the stage's sweep into ``sweep`` (``launch.py -m``, :func:`grpo.run.launching.launch_sweep`,
    its record ``chain.json``); its exit status. A dry run writes its estimate to
    ``estimate_file`` (grpo.sweep.cost.ESTIMATE_FILE_ENV)."""
    overrides = [*plan.overrides(user),
                 f"hydra.sweep.dir=${{paths.output_root}}/${{experiment_name}}/{sweep.name}"]
    env = {ESTIMATE_FILE_ENV: str(estimate_file)} if estimate_file else None
    return launch_sweep(overrides, sweep, RECORD, plan.record(user), dry_run, env)


def refused(user: UserOverrides) -> list[str]:
    """Why each override the chain cannot take is refused."""
    errors = [f"{line}: the chain sets {override_key(line)} for each stage"
              for line in user.lines if override_key(line) in CHAIN_KEYS]
    return errors + check_overrides(user.lines, CONF_DIR, "config")


def run_chain(chain_name: str, stage_names: list[str], overrides: Sequence[str]) -> int:
    """Run (or with ``dry_run=true`` show) the chain's stages; the exit status."""
    chain = load_chain(chain_name)
    indices = chain.select(stage_names) if stage_names else list(range(len(chain.stages)))
    user = UserOverrides.parse(overrides)
    errors = refused(user)
    if errors:
        print("\n".join(f"error: {e}" for e in errors) + "\nnothing was run", file=sys.stderr)
        return 2
    dry_run = user.values.get("dry_run", "false").lower() == "true"
    refusal = (confirm_refusal(chain, user)
               if chain.confirm is not None and len(chain.stages) - 1 in indices else None)
    if refusal is not None:
        print(f"error: {refusal}\nnothing was run", file=sys.stderr)
        return 2
    if not dry_run and not under_driver():
        status = detached_or_refused(chain, indices, stage_names, user)
        if status is not None:
            return status
    if dry_run:
        print(f"chain {chain.name}, dry run: each stage's plan from the results on disk now; "
              "nothing is run")
    lookup = winner_lookup(chain, user)
    estimates: dict[int, dict | None] = {}
    invalid: list[str] = []  # a dry run's stages that its own dry run refused
    for index in indices:
        stage = chain.stages[index]
        head = f"stage {index + 1}/{len(chain.stages)} {stage.experiment}"
        sweep = latest_sweep(stage_root(compose_stage(stage, user)))
        state: SweepState | None = sweep_state(sweep) if sweep is not None else None
        if state is not None and state.finished:
            print(f"{head}: finished: {sweep} ({state.counts()})", flush=True)
            continue
        plan = plan_stage(chain, index, user, lookup)
        same = state is not None and recorded_overrides(state.sweep) == plan.overrides(user)
        if state is not None and state.active and not (same and under_driver() and not dry_run):
            other = f" with other overrides (see its {RECORD})" if under_driver() else ""
            print(f"error: {head}: its sweep {sweep} is still running{other} ({state.counts()}); "
                  f"follow it with `{make_command('watch', sweep)}` and run the chain again when it "
                  "has ended", file=sys.stderr)
            return 1
        print(f"{head}:", *plan.lines, sep="\n")
        target = new_sweep_dir(plan.root)
        if state is not None and same and state.active:  # the chain's driver, requeued or relaunched
            target = state.sweep
            print(f"  following its running sweep {state.sweep} ({state.counts()}): its queued and "
                  "running jobs are followed, the others resumed")
        elif state is not None and same:
            target = state.sweep
            print(f"  resuming its unfinished sweep {state.sweep} ({state.counts()})")
        elif state is not None and recorded_overrides(state.sweep) is None:
            print(f"  its latest sweep {state.sweep} is unfinished ({state.counts()}) and has no "
                  f"{RECORD} (the chain did not start it, or its record is unreadable): a new "
                  f"sweep {target}")
        elif state is not None:
            print(f"  its latest sweep {state.sweep} is unfinished ({state.counts()}) but ran "
                  f"with other overrides (see its {RECORD}): a new sweep {target}")
        if dry_run:
            with tempfile.TemporaryDirectory() as scratch:
                estimate_file = Path(scratch) / "estimate.json"
                returncode = launch(plan, user, target, dry_run, estimate_file)
                estimates[index] = read_estimate(estimate_file)
            if returncode:  # said by the stage's dry run; the chain's plan goes on
                invalid.append(f"{head} (exit {returncode})")
            continue
        returncode = launch(plan, user, target, dry_run)
        ended = sweep_state(target) if target.is_dir() else None
        if returncode or ended is None or not ended.finished:
            print(f"chain {chain.name} stopped: {head} did not finish"
                  + (f" ({ended.counts()})" if ended else "")
                  + "; run the same command again to resume it", file=sys.stderr)
            return returncode or 1
    last = len(chain.stages) - 1
    confirmation: dict | None = None  # the confirm stage's dry-run estimate
    if chain.confirm is not None and last in indices:
        with tempfile.TemporaryDirectory() as scratch:
            estimate_file = Path(scratch) / "estimate.json" if dry_run else None
            status = confirm_last(chain, user, dry_run, estimate_file)
            confirmation = read_estimate(estimate_file) if estimate_file else None
        if status and dry_run:  # said by the confirmation's dry run; the budget follows
            invalid.append(f"confirm {chain.stages[last].experiment}'s pick (exit {status})")
        elif status:
            return status
    if dry_run:
        print("\n".join(budget_lines(chain, estimates, confirmation)))
        if invalid:
            print(f"error: {len(invalid)} stage(s) would be refused as planned: "
                  f"{'; '.join(invalid)} (their errors above); nothing was run", file=sys.stderr)
            return 2
    else:
        print(f"chain {chain.name}: " + ", ".join(chain.names[i] for i in indices) + " finished")
        if chain.confirm is not None and last in indices:
            print(f"chain {chain.name}: its final config {final_confirmed(chain, user)}")
    return 0


def _last_sweep(chain: Chain, user: UserOverrides) -> Path | None:
    return latest_sweep(stage_root(compose_stage(chain.stages[-1], user)))


def confirm_what(confirm: ConfirmStage) -> str:
    """What the chain's confirm stage does, in words: the finalists, their runs, the placebo."""
    if not confirm.retrain:
        return (f"the final models of its top {confirm.top_k} config(s), not trained again (one "
                "run for each of their completed runs with a final model)")
    runs = confirm.top_k * confirm.seeds
    what = (f"its top {confirm.top_k} config(s) trained again with {confirm.seeds} fresh seed(s) "
            f"each ({runs} run{'s' if runs != 1 else ''}")
    if confirm.placebo:
        what += (f", and {confirm.seeds} of the best one's config trained on reward=random: a "
                 "placebo arm")
    return what + ")"


def confirm_overrides(user: UserOverrides, sweep: Path) -> tuple[list[str], list[str]]:
    """The chain's overrides a confirmation of ``sweep`` takes (where and how its jobs run) and
    those it does not (it trains and measures each finalist as the stage did)."""
    taken = [line for line in user.lines if not refused_overrides([line], sweep)]
    return taken, [line for line in user.lines if line not in taken
                   and override_key(line) != "dry_run"]  # its own dry run is the chain's


def planned_configs(cfg: DictConfig, user: UserOverrides) -> int | None:
    """How many configs a stage of composed config ``cfg`` plans: the distinct jobs of its
    preset's ``hydra.sweeper.params`` and the user's sweeps (a key the user sets replacing the
    preset's), seeds aside; the most its ranking can rank. None where the sweep cannot be read."""
    params = OmegaConf.select(cfg, "hydra.sweeper.params", default=None) or {}
    given = set(user.values) | set(user.swept)
    lines = [f"{key}={value}" for key, value in params.items()
             if str(key).lstrip("+") not in given]
    lines += [line for line in user.lines if override_key(line) in user.swept]
    try:
        jobs = split_into_jobs(parse_overrides(lines))
    except HydraException:  # an override Hydra's grammar refuses: the stage's own launch says it
        return None
    return len({tuple(sorted(o for o in job if override_key(o) != "seed")) for job in jobs})


def confirm_refusal(chain: Chain, user: UserOverrides) -> str | None:
    """Why the chain's confirm stage could never run, known before any stage is launched: its
    ``top_k`` above the configs the last stage plans (:func:`planned_configs`), or the last
    stage's data holds out no problem (the toy's ``data.holdout_size`` 0, a validation file with
    nothing after ``eval.n_examples``); None where it can, or where the data cannot be read yet
    (the stage's own checks say so)."""
    last = chain.stages[-1]
    cfg = compose_stage(last, user)
    planned = planned_configs(cfg, user)
    if planned is not None and chain.confirm.top_k > planned:
        return (f"the chain's confirm block confirms the top {chain.confirm.top_k} configs of "
                f"{last.experiment}, which plans {planned} config{'s' if planned != 1 else ''}: "
                f"give top_k {planned} or less in the `confirm` block of the chain's yaml")
    taken, _ = confirm_overrides(user, stage_root(cfg))
    try:
        if heldout_of(cfg, taken):
            return None
    except (OSError, ValueError):
        return None
    head = f"the chain's confirm block confirms {last.experiment}'s pick on held-out problems"
    if cfg.data.get("name") == "toy":
        return (f"{head}, but its toy data holds out no pair (data.holdout_size="
                f"{cfg.data.get('holdout_size') or 0}): give data.holdout_size=N on the chain's "
                "command line (each stage then keeps N pairs out of its training and evaluation), "
                "or drop `confirm` from the chain's yaml")
    return (f"{head}, but its validation file holds no problem after the eval.n_examples="
            f"{cfg.eval.n_examples} its evaluations read: give a smaller eval.n_examples, or drop "
            "`confirm` from the chain's yaml")


def confirm_last(chain: Chain, user: UserOverrides, dry_run: bool,
                 estimate_file: Path | None = None) -> int:
    """The chain's optional last stage (`confirm` in its yaml): the confirmation of its last
    stage's latest sweep (`analysis.outputs.confirm.confirm_and_report`), launched or resumed
    through the same launcher with the overrides a confirmation takes (where its jobs run).
    A dry run where that sweep has finished is the confirmation's own dry run (its finalists,
    fresh seeds and held-out problems, what the report will show, and its jobs priced, or its
    refusal; its estimate written to ``estimate_file``, as a stage's dry run writes its own);
    before, it says what it will confirm. Its exit status."""
    confirm = chain.confirm
    last = chain.stages[-1].experiment
    head = f"confirm {last}'s pick"
    what = f"{confirm_what(confirm)}, evaluated on held-out problems"
    sweep = _last_sweep(chain, user)
    state = sweep_state(sweep) if sweep is not None else None
    if dry_run and (state is None or not state.finished):
        print(f"{head}: {what} (`python -m analysis confirm`; planned and priced once {last} "
              "has finished)")
        return 0
    if sweep is None:
        print(f"error: {head}: {last} has no sweep to confirm", file=sys.stderr)
        return 1
    taken, left = confirm_overrides(user, sweep)
    print(f"{head}: {what}" + (f"; not passed on to it (it trains and measures each finalist as "
                               f"{last} did): {' '.join(left)}" if left else ""), flush=True)
    try:
        return confirm_and_report(sweep, confirm.top_k, confirm.seeds, confirm.retrain, taken,
                                  dry_run=dry_run, placebo=confirm.placebo,
                                  env={ESTIMATE_FILE_ENV: str(estimate_file)} if estimate_file
                                  else None)
    except ValueError as error:  # in the words of the chain's yaml: confirm.top_k, not --top-k
        print(f"error: {head}: {confirm_words(str(error))} (the `confirm` block of the chain's "
              "yaml)", file=sys.stderr)
        return 2


def final_confirmed(chain: Chain, user: UserOverrides) -> str:
    """The chain's final config's confirmed figure, in one line (`analysis.outputs.confirmed.summary_line`)."""
    sweep = _last_sweep(chain, user)
    target = confirmation_dir(sweep, chain.confirm.retrain) if sweep is not None else None
    if target is None or not target.is_dir():
        return "has no confirmation"
    return summary_line(report_confirmation(target)[0])


def detached_or_refused(chain: Chain, indices: list[int], stage_names: list[str],
                        user: UserOverrides) -> int | None:
    """Run from a terminal (not a driver, `grpo.run.driver.under_driver`): with
    `cluster.detach=true` (the first stage's composed config: the command line, a preset or the
    local config), start the chain's detached driver (`grpo.run.driver.detach`), which
    runs this command attached, and return its exit status; without, 1 where the chain's
    detached driver is still pending or running; else None (run the chain here). A value of
    that config that breaks its rule (`grpo.config.rules.value_errors`: the driver's
    `cluster.driver_time_limit_min`, `cluster.mail_user`, ...) is refused (2) before the driver
    is started, as a sweep's jobs are checked before its driver is. The chain's
    driver record and log live in `chain_root`; each stage's sweep gets a copy of the record
    (`launch`)."""
    cfg = compose_stage(chain.stages[indices[0]], user)
    root = chain_root(cfg, chain.name)
    watch = (f"`{make_command('watch', root)}` (the runs of its latest stage), "
             f"`tail -f {root / DRIVER_LOG}` (each stage's command and end)")
    # the composed value, as the sweeper reads it: a local config or a preset may set it
    if cfg.cluster.get("detach") is not True:
        refusal = attached_refusal(root, watch) if root.is_dir() else None
        if refusal is not None:
            print(f"error: {refusal}", file=sys.stderr)
            return 1
        return None
    errors = value_errors(cfg)  # the driver's options among them: refused before it is submitted
    if errors:
        print("\n".join(f"error: {e}" for e in errors) + "\nnothing was submitted", file=sys.stderr)
        return 2
    root.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "chain", "--chain", chain.name,
               *(["--stages", ",".join(stage_names)] if stage_names else []), *user.lines]
    start = driver_starter(cfg, command, root, f"chain-{chain.name}-driver", "chain", chain.name)
    try:
        return detach(root, command, start, watch)
    except RunDirError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except Exception as err:
        refusal = sbatch_refusal(err)
        if refusal is None:
            raise
        print(f"error: sbatch refused the chain's driver job: {refusal} (its options come "
              "from cluster.*)", file=sys.stderr)
        return 2


def chain_root(cfg: DictConfig, name: str) -> Path:
    """``<paths.output_root>/chains/<name>``: the chain's driver record and log."""
    return Path(str(cfg.paths.output_root)) / "chains" / name


def read_estimate(path: Path) -> dict | None:
    """A stage's dry-run estimate ({"planned", "unit"}), or None where it wrote none."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    planned = data.get("planned") if isinstance(data, dict) else None
    return data if isinstance(planned, int | float) and isinstance(data.get("unit"), str) else None


def budget_lines(chain: Chain, estimates: dict[int, dict | None],
                 confirmation: dict | None = None) -> list[str]:
    """The chain's estimate, study by study beside its budget, and in all: stages estimated
    now (`estimates`, by stage index; finished stages are not), in their unit; a chain with a
    confirm stage adds its row (`confirmation`: its own dry run's estimate, the sweep estimate
    `python -m analysis confirm --dry-run` prints; None: not priced yet, its last stage
    unfinished), which no study's budget holds but the whole chain's total does."""
    budgets = dict(chain.budgets)
    studies: dict[str, list[int]] = {}
    for index, stage in enumerate(chain.stages):
        studies.setdefault(stage.study or stage.experiment, []).append(index)
    units = {e["unit"] for e in [*estimates.values(), confirmation] if e}
    unit = units.pop() if len(units) == 1 else "hours"
    lines = [f"chain {chain.name}: estimated cost by study ({unit}; finished stages are not "
             "priced), beside the handout's budget (H100-hours)"]
    total = 0.0
    for study, indices in studies.items():
        priced = [estimates[i]["planned"] for i in indices if estimates.get(i)]
        hours = sum(priced)
        total += hours
        shown = f"{hours:8.2f}" if priced else "       -"
        budget = budgets.get(study)
        verdict = ("" if budget is None or not priced else
                   f"  {hours / budget:.1f}x the budget" if hours > budget else "  within budget")
        lines.append(f"  {study:<32}{shown}  of {'-' if budget is None else f'{budget:g}':>4}{verdict}")
    if chain.confirm is not None:
        label = f"confirm {chain.stages[-1].experiment}'s pick"
        if confirmation:
            total += confirmation["planned"]
        shown = f"{confirmation['planned']:8.2f}" if confirmation else "       -"
        lines.append(f"  {label:<32}{shown}  of    -  (in no study's budget"
                     + ("" if confirmation else "; priced once its last stage has finished") + ")")
    all_budget = sum(budgets.values())
    lines.append(f"  {'whole chain':<32}{total:8.2f}  of {all_budget:>4g}"
                 + (f"  {total / all_budget:.1f}x the budget" if all_budget and total > all_budget
                    else "  within budget" if all_budget else ""))
    if len(units) > 1 or (unit != "GPU-hours" and (estimates or confirmation)):
        lines.append("  (stages priced in CPU-hours are not comparable with the budget's GPU-hours)")
    return lines


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m chain``."""
    parser = argparse.ArgumentParser(prog="python -m chain", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chain", default="cs336",
                        help="a chain of conf/chain/ (default: cs336)")
    parser.add_argument("--stages", default="",
                        help="comma-separated stages to run or show, in chain order "
                             "(default: all)")
    parser.add_argument("overrides", nargs="*",
                        help="Hydra overrides for every stage (e.g. cluster=slurm, dry_run=true)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return run_chain(args.chain, [s for s in args.stages.split(",") if s], args.overrides)
    except (ValueError, HydraException, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("chain interrupted (Ctrl-C): its stage's runs stopped after their step, with a "
              "checkpoint; run the same command again to resume it", file=sys.stderr)
        return INTERRUPTED
    except OSError as error:  # a stage directory that cannot be made or written
        print(f"error: cannot write {error.filename or 'a stage directory'} "
              f"({error.strerror or error}): give paths.output_root's directories back their "
              "permissions, or free space, and run the same command again", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
