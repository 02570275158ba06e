"""Run a chain of studies, stage after stage:

    python -m grpo.chain [--chain cs336] [--stages lr_sweep,baselines] [overrides ...]

Each stage is ``python launch.py -m +experiment=<stage> <carried values> <overrides>``, through
the launcher the overrides choose (``cluster=slurm`` runs each stage as a SLURM job array); the
overrides go to every stage and win over carried values. ``dry_run=true`` prints each stage's
plan (every carried key, its value and the sweep directory it came from) and its jobs, and runs
nothing. A re-run skips the finished stages (every run completed, collapsed, diverged or pruned) and
resumes at the first unfinished one: in its latest sweep directory when that sweep ran with the
same overrides (``<sweep>/chain.json``), its finished runs kept, the others resumed from their
checkpoints; else in a new sweep directory. The chain stops at a stage that does not finish.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from hydra.errors import HydraException

from analysis.progress import override_key
from grpo.chain.plan import (
    StagePlan,
    UserOverrides,
    compose_stage,
    plan_stage,
    stage_root,
    winner_lookup,
)
from grpo.chain.results import SweepState, latest_sweep, sweep_state
from grpo.chain.stages import CONF_DIR, load_chain
from grpo.run.files import atomic_write_text
from grpo.sweep.overrides import check_overrides

LAUNCH = CONF_DIR.parent / "launch.py"
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


def launch(plan: StagePlan, user: UserOverrides, sweep: Path, dry_run: bool) -> int:
    """Run the stage's sweep into ``sweep`` (``launch.py -m``); its exit status."""
    overrides = [*plan.overrides(user),
                 f"hydra.sweep.dir=${{paths.output_root}}/${{experiment_name}}/{sweep.name}"]
    print("  $ python launch.py -m " + " ".join(map(shlex.quote, overrides)), flush=True)
    if not dry_run:
        sweep.mkdir(parents=True, exist_ok=True)
        atomic_write_text(sweep / RECORD, plan.record(user))
    returncode = subprocess.run([sys.executable, str(LAUNCH), "-m", *overrides]).returncode
    if not dry_run and not (sweep / "multirun.yaml").exists():  # nothing ran: leave no trace
        (sweep / RECORD).unlink(missing_ok=True)
        if not any(sweep.iterdir()):
            sweep.rmdir()
    return returncode


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
    if dry_run:
        print(f"chain {chain.name}, dry run: each stage's plan from the results on disk now; "
              "nothing is run")
    lookup = winner_lookup(chain, user)
    for index in indices:
        stage = chain.stages[index]
        head = f"stage {index + 1}/{len(chain.stages)} {stage.experiment}"
        sweep = latest_sweep(stage_root(compose_stage(stage, user)))
        state: SweepState | None = sweep_state(sweep) if sweep is not None else None
        if state is not None and state.finished:
            print(f"{head}: finished: {sweep} ({state.counts()})", flush=True)
            continue
        if state is not None and state.active:
            print(f"error: {head}: its sweep {sweep} is still running ({state.counts()}); "
                  f"follow it with `make watch SWEEP={sweep}` and run the chain again when it "
                  "has ended", file=sys.stderr)
            return 1
        plan = plan_stage(chain, index, user, lookup)
        print(f"{head}:", *plan.lines, sep="\n")
        target = new_sweep_dir(plan.root)
        if state is not None and recorded_overrides(state.sweep) == plan.overrides(user):
            target = state.sweep
            print(f"  resuming its unfinished sweep {state.sweep} ({state.counts()})")
        elif state is not None:
            print(f"  its latest sweep {state.sweep} is unfinished ({state.counts()}) but ran "
                  f"with other overrides (see its {RECORD}): a new sweep {target}")
        returncode = launch(plan, user, target, dry_run)
        if dry_run:
            if returncode:
                return returncode
            continue
        ended = sweep_state(target) if target.is_dir() else None
        if returncode or ended is None or not ended.finished:
            print(f"chain {chain.name} stopped: {head} did not finish"
                  + (f" ({ended.counts()})" if ended else "")
                  + "; run the same command again to resume it", file=sys.stderr)
            return returncode or 1
    if not dry_run:
        print(f"chain {chain.name}: " + ", ".join(chain.names[i] for i in indices) + " finished")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m grpo.chain``."""
    parser = argparse.ArgumentParser(prog="python -m grpo.chain", description=__doc__,
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


if __name__ == "__main__":
    sys.exit(main())
