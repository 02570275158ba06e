"""What one Hydra job does: check its config, take its own ports, run GRPO in its directory, and
say where that directory is when it starts and when it ends; and, before Hydra starts, what a
single run's command line needs (`prepare_single_run`): a location it can write, and for a dry
run, which writes nothing, a throw-away directory for Hydra to make in place of the run's."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from grpo.config.rules import CHECK_SEEDS, RULES
from grpo.config.validation import check_config, check_installed
from grpo.core.specs import LOSS_SPECS
from grpo.run.files import RunDirError, is_disk_full, read_status
from grpo.run.pruning import OFF
from grpo.run.run_config import resume_refusal
from grpo.sweep.cost import estimate, memory_lines
from grpo.sweep.job_loss import ComposedJob
from grpo.training.batch_plan import BatchPlan, MicroBatching
from grpo.training.zero_variance import ZeroVariance

DRY_RUN_DIR_ENV = "GRPO_DRY_RUN_DIR"
"""The run directory a single run's dry run stands for; Hydra makes a throw-away one instead."""


def unwritable(directory: Path) -> str | None:
    """Why `directory` cannot be made and written in (its nearest existing ancestor is not a
    writable directory: a read-only file system, a file in the way), else None; makes nothing."""
    existing = Path(os.path.abspath(directory))
    while not os.path.lexists(existing):
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable (a read-only file system, or its permissions)"
    return None


def output_refusal(directory: Path) -> str | None:
    """The one-line refusal of a run or sweep directory that cannot be made, or None."""
    problem = unwritable(directory)
    return None if problem is None else (
        f"cannot make {directory}: {problem}; set paths.output_root (or hydra.run.dir / "
        "hydra.sweep.dir) to a writable place; nothing was run")


def prepare_single_run(argv: Sequence[str], job: ComposedJob | None) -> list[str]:
    """A single run's command line (`job`: its composition, None with -m) before Hydra starts:
    exit 1 with one line when its run directory, not there yet, cannot be made; a dry run gets a
    throw-away `hydra.run.dir` (removed at exit) and `DRY_RUN_DIR_ENV`, so it makes nothing
    where it points and works on a read-only location."""
    if job is None:
        return list(argv)
    run_dir = Path(str(job.cfg.hydra.run.dir))
    if job.cfg.dry_run:
        throwaway = tempfile.mkdtemp(prefix="grpo-dry-run-")
        atexit.register(shutil.rmtree, throwaway, ignore_errors=True)
        os.environ[DRY_RUN_DIR_ENV] = str(run_dir)
        return [*(a for a in argv if not a.lstrip("+").startswith("hydra.run.dir=")),
                f"hydra.run.dir={throwaway}"]
    # a run directory that exists is the run's to check (its lock and files, in one line each)
    refusal = None if os.path.lexists(run_dir) else output_refusal(run_dir)
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        sys.exit(1)
    return list(argv)


def drop_if_empty(run_dir: Path, root: Path) -> None:
    """Remove `run_dir` when it is empty (Hydra made it for a run that did not start), then each
    parent inside `root` that this leaves empty."""
    for directory in (run_dir, *run_dir.parents):
        if directory != run_dir and (directory == root or not directory.is_relative_to(root)):
            return
        try:
            directory.rmdir()
        except OSError:  # not empty (or not ours to remove)
            return


def free_port() -> int:
    """A TCP port that no process on this host is listening on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def assign_job_ports() -> dict[str, str]:
    """Give this job its own torch-distributed and vLLM ports, so jobs sharing a node never collide.

    Ports already set in the environment (by the user or the cluster) are kept.
    """
    ports = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "VLLM_PORT": str(free_port())}
    for key, value in ports.items():
        os.environ.setdefault(key, value)
    return {key: os.environ[key] for key in ports}


def describe_job(cfg: DictConfig) -> str:
    """One line: the batch plan (gradient accumulation or token budget, optimizer steps), whether
    zero-advantage sequences are left out, the divisor of the `microbatch` and `prompt`
    normalizations and of `std_norm=batch`, the overlong filter and punishment and the KL term
    where on, and the resources."""
    cluster = cfg.cluster
    resources = f"{cluster.name}: {cluster.gpus_per_job} GPU, {cluster.cpus_per_job} CPU"
    if cluster.name == "slurm":
        resources += f", {cluster.mem_gb} GB, {cluster.time_limit_min} min, partition={cluster.partition}"
    micro = MicroBatching.from_config(cfg, LOSS_SPECS[cfg.loss.name].zero_at_zero_advantage)
    training = f"{BatchPlan.from_config(cfg).describe(micro)}, {micro.describe_skip()}"
    if cfg.normalization.name == "microbatch":
        training += ", normalization=microbatch divides by the optimizer step's longest response"
    zero_variance = ZeroVariance.from_config(cfg)
    if zero_variance.mode != "keep":
        training += f", {zero_variance.describe()}"
    if OmegaConf.select(cfg, "retire.pass_rate", default=None) is not None:
        training += f", prompts retired at pass rate >= {cfg.retire.pass_rate:g}"
    overlong = cfg.get("overlong", {})
    if overlong.get("filter", False):
        training += ", responses cut at sampling.max_new_tokens left out of the loss"
    if overlong.get("buffer", 0):
        training += (f", overlong punishment over the last {overlong.buffer} of "
                     f"{cfg.sampling.max_new_tokens} tokens")
    if cfg.get("kl", {}).get("beta", 0):
        training += f", KL to the initial policy (kl.beta={cfg.kl.beta}: a reference model)"
    if cfg.normalization.name == "prompt":
        training += (", normalization=prompt averages each prompt's response tokens in the "
                     "optimizer step, then the prompts")
    if cfg.std_norm.enabled and cfg.std_norm.scope == "batch":
        training += (f", std_norm=batch divides by the reward std of all "
                     f"{cfg.rollout_batch_size} rollouts")
    return f"{training}, n_grpo_steps={cfg.n_grpo_steps} | {resources}"


def raw_list(node: Any) -> list[str]:
    """The strings of a list node as written, unresolved (Hydra's override lists: an override
    like ``hydra.sweep.subdir=run_${hydra.job.num}`` is text, not an interpolation to resolve)."""
    return [str(item) for item in OmegaConf.to_container(node, resolve=False)]


def output_root_note(hydra_cfg: DictConfig) -> str | None:
    """A warning when ``paths.output_root`` is overridden but Hydra's output directory is given
    too, outside it: ``hydra.sweep.dir`` (``-m``) or ``hydra.run.dir`` (one run) wins."""
    key = "hydra.sweep.dir" if hydra_cfg.mode == RunMode.MULTIRUN else "hydra.run.dir"
    # the overrides as written (one may hold an interpolation only its job resolves, such as
    # hydra.sweep.subdir=run_${hydra.job.num}); the directory as the config resolves it
    given = {o.split("=", 1)[0].lstrip("+") for o in raw_list(hydra_cfg.overrides.hydra)}
    root = [o for o in raw_list(hydra_cfg.overrides.task) if o.lstrip("+").startswith("paths.output_root=")]
    if key not in given or not root:
        return None
    try:
        directory = str(OmegaConf.select(hydra_cfg, key.split(".", 1)[1], throw_on_missing=True))
    except OmegaConfBaseException:
        return None  # a directory only the job knows
    if Path(directory).is_relative_to(root[0].split("=", 1)[1]):
        return None  # the directory is under the output root (the study chain gives such)
    return (f"{root[0]} is not used for run directories: {key}={directory} is given and wins "
            f"(drop {key} to write under paths.output_root)")


def price_single_run(cfg: DictConfig, run_dir: Path) -> str | None:
    """Print the cost of a single run's dry run into `run_dir` (grpo.sweep.cost); the refusal of
    a run that would spend more than budget.gpu_hours, or None."""
    cost, rates = estimate([cfg], parallel=1)
    if cfg.dry_run:
        print(f"dry run: 1 job, nothing started (run directory: {run_dir})\n"
              f"job {describe_job(cfg)}; ~{cost.jobs[0].describe()}\ncost rates: {rates[0].describe()}")
        for line in memory_lines([cfg]):
            print(line)
    return cost.over_budget(cfg.budget.gpu_hours)


def config_record(cfg: DictConfig) -> dict[str, str]:
    """The texts of the run's `.hydra/` record, as Hydra would write them (config.yaml: the job's
    config; hydra.yaml: Hydra's; overrides.yaml: the job's overrides). Hydra writes none
    (`hydra.output_subdir: null`): the run writes them once it holds its directory
    (grpo.run.run_config.write_record)."""
    hydra_cfg = HydraConfig.instance().cfg
    return {"config.yaml": OmegaConf.to_yaml(cfg), "hydra.yaml": OmegaConf.to_yaml(hydra_cfg),
            "overrides.yaml": OmegaConf.to_yaml(hydra_cfg.hydra.overrides.task)}


def run_job(cfg: DictConfig) -> dict[str, Any] | None:
    """The task function of launch.py: one GRPO run in the job's Hydra output directory (a
    single run's dry run: the directory it stands for, `DRY_RUN_DIR_ENV`). A single run that
    does not start leaves no directory behind."""
    report = check_config(cfg).include(check_installed(cfg))
    hydra_cfg = HydraConfig.get()
    single = hydra_cfg.mode == RunMode.RUN
    run_dir = Path((single and cfg.dry_run and os.environ.get(DRY_RUN_DIR_ENV))
                   or hydra_cfg.runtime.output_dir)
    if single and cfg.pruning.name != OFF:
        report.errors.append(
            f"pruning={cfg.pruning.name}: a pruner compares the runs of one sweep (one Optuna "
            "study in the sweep directory); a single run has no runs to be compared with and "
            "would share a study with whatever ran beside it. Launch the runs as a sweep (-m), "
            "or set pruning=off")
    if single and cfg.cluster.get("detach") is True:
        report.errors.append(
            "cluster.detach=true: a single run has no driver to detach (its process is the run); "
            "launch it as a sweep of one job (python launch.py -m ... cluster.detach=true), or "
            "set cluster.detach=false to run it here")
    if single and cfg.race.get("max_seeds") is not None:
        report.errors.append(
            f"race.max_seeds={cfg.race.max_seeds}: a race runs waves of a sweep's configs across "
            "seeds; a single run has nothing to race. Launch the configs as a sweep (-m "
            "key=a,b race.max_seeds=...), or drop race.max_seeds")
    checks = OmegaConf.select(cfg, CHECK_SEEDS, default=0)
    if single and not RULES[CHECK_SEEDS].problem(checks) and checks:
        report.errors.append(
            f"{CHECK_SEEDS}={checks}: check seeds are jobs of a sweep (its first configs again "
            "with seed + 1); a single run has no configs to check. Launch the configs as a sweep "
            f"(-m key=a,b {CHECK_SEEDS}={checks}), or drop {CHECK_SEEDS}")
    if single and cfg.dry_run and not report.errors:
        # what the run would refuse in its directory, said now (a sweep's jobs: the sweeper)
        refusal = resume_refusal(cfg, run_dir)
        report.errors += [refusal] if refusal is not None else []
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if report.errors:
        print("error: invalid config:\n" + "\n".join(f"  - {e}" for e in report.errors), file=sys.stderr)
    elif single and (cfg.dry_run or cfg.budget.gpu_hours is not None):
        over = price_single_run(cfg, run_dir)  # a sweep's jobs were priced by the sweeper
        if over is not None:
            print(f"error: {over}", file=sys.stderr)
            report.errors.append(over)
    if report.errors or cfg.dry_run:
        if single and not cfg.dry_run:
            drop_if_empty(run_dir, Path(str(cfg.paths.output_root)).absolute())
        if report.errors:
            sys.exit(2)
        return None
    note = output_root_note(hydra_cfg) if single else None
    if note:
        print(f"warning: {note}", file=sys.stderr)
    assign_job_ports()
    from grpo.training.trainer import train

    print(f"Run directory: {run_dir}", flush=True)
    try:
        return train(cfg, run_dir, record=config_record(cfg))
    except RunDirError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    except Exception as err:
        if not is_disk_full(err):
            raise
        print(f"error: the disk is full (or over quota) writing {run_dir}: {err}. Free space and "
              "launch the same command again: the run resumes from its last checkpoint",
              file=sys.stderr)
        sys.exit(1)
    finally:
        status = read_status(run_dir) or {}
        print(f"Run {status.get('status', 'ended')} (last step {status.get('last_step')}): "
              f"{run_dir}", flush=True)
