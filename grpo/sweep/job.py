"""What one Hydra job does: check its config, take its own ports, run GRPO in its directory, and
say where that directory is when it starts and when it ends."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from grpo.config.validation import check_config
from grpo.core.losses import POLICY_LOSSES
from grpo.run.files import RunDirError, is_disk_full, read_status
from grpo.run.pruning import OFF
from grpo.run.run_config import resume_refusal
from grpo.sweep.cost import estimate
from grpo.training.batch_plan import BatchPlan, MicroBatching


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
    zero-advantage sequences are left out, the divisor of the `microbatch` normalization, and the
    resources."""
    cluster = cfg.cluster
    resources = f"{cluster.name}: {cluster.gpus_per_job} GPU, {cluster.cpus_per_job} CPU"
    if cluster.name == "slurm":
        resources += f", {cluster.mem_gb} GB, {cluster.time_limit_min} min, partition={cluster.partition}"
    micro = MicroBatching.from_config(cfg, POLICY_LOSSES[cfg.loss.name].zero_at_zero_advantage)
    training = f"{BatchPlan.from_config(cfg).describe(micro)}, {micro.describe_skip()}"
    if cfg.normalization.name == "microbatch":
        training += ", normalization=microbatch divides by the optimizer step's longest response"
    return f"{training}, n_grpo_steps={cfg.n_grpo_steps} | {resources}"


def output_root_note(hydra_cfg: DictConfig) -> str | None:
    """A warning when ``paths.output_root`` is overridden but Hydra's output directory is given
    too, outside it: ``hydra.sweep.dir`` (``-m``) or ``hydra.run.dir`` (one run) wins."""
    key = "hydra.sweep.dir" if hydra_cfg.mode == RunMode.MULTIRUN else "hydra.run.dir"
    given = {o.split("=", 1)[0].lstrip("+"): o for o in hydra_cfg.overrides.hydra}
    root = [o for o in hydra_cfg.overrides.task if o.lstrip("+").startswith("paths.output_root=")]
    if key not in given or not root:
        return None
    if Path(given[key].split("=", 1)[1]).is_relative_to(root[0].split("=", 1)[1]):
        return None  # the directory is under the output root (the study chain gives such)
    return (f"{root[0]} is not used for run directories: {given[key]} is given and wins "
            f"(drop {key} to write under paths.output_root)")


def price_single_run(cfg: DictConfig) -> None:
    """Print the cost of a single run's dry run (grpo.sweep.cost) and refuse (exit 2) a run that
    would spend more than budget.gpu_hours."""
    cost, rates = estimate([cfg], parallel=1)
    if cfg.dry_run:
        print(f"dry run: 1 job, nothing started\njob {describe_job(cfg)}; ~{cost.jobs[0].describe()}"
              f"\ncost rates: {rates[0].describe()}")
    refusal = cost.over_budget(cfg.budget.gpu_hours)
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        sys.exit(2)


def config_record(cfg: DictConfig) -> dict[str, str]:
    """The texts of the run's `.hydra/` record, as Hydra would write them (config.yaml: the job's
    config; hydra.yaml: Hydra's; overrides.yaml: the job's overrides). Hydra writes none
    (`hydra.output_subdir: null`): the run writes them once it holds its directory
    (grpo.run.run_config.write_record)."""
    hydra_cfg = HydraConfig.instance().cfg
    return {"config.yaml": OmegaConf.to_yaml(cfg), "hydra.yaml": OmegaConf.to_yaml(hydra_cfg),
            "overrides.yaml": OmegaConf.to_yaml(hydra_cfg.hydra.overrides.task)}


def run_job(cfg: DictConfig) -> dict[str, Any] | None:
    """The task function of launch.py: one GRPO run in the job's Hydra output directory."""
    report = check_config(cfg)
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode == RunMode.RUN and cfg.pruning.name != OFF:
        report.errors.append(
            f"pruning={cfg.pruning.name}: a pruner compares the runs of one sweep (one Optuna "
            "study in the sweep directory); a single run has no runs to be compared with and "
            "would share a study with whatever ran beside it. Launch the runs as a sweep (-m), "
            "or set pruning=off")
    if hydra_cfg.mode == RunMode.RUN and cfg.dry_run and not report.errors:
        # what the run would refuse in its directory, said now (a sweep's jobs: the sweeper)
        refusal = resume_refusal(cfg, Path(hydra_cfg.runtime.output_dir))
        report.errors += [refusal] if refusal is not None else []
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if report.errors:
        print("error: invalid config:\n" + "\n".join(f"  - {e}" for e in report.errors), file=sys.stderr)
        sys.exit(2)
    if hydra_cfg.mode == RunMode.RUN and (cfg.dry_run or cfg.budget.gpu_hours is not None):
        price_single_run(cfg)  # a sweep's jobs were priced by the sweeper
    if cfg.dry_run:
        return None
    note = output_root_note(hydra_cfg) if hydra_cfg.mode == RunMode.RUN else None
    if note:
        print(f"warning: {note}", file=sys.stderr)
    assign_job_ports()
    from grpo.training.trainer import train

    run_dir = Path(hydra_cfg.runtime.output_dir)
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
