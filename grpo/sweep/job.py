"""What one Hydra job does: check its config, take its own ports, run GRPO in its directory."""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from grpo.batch_plan import BatchPlan
from grpo.config_validation import check_config
from grpo.run_files import RunDirError


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
    """One line: the batch plan (gradient accumulation, optimizer steps) and the resources."""
    cluster = cfg.cluster
    resources = f"{cluster.name}: {cluster.gpus_per_job} GPU, {cluster.cpus_per_job} CPU"
    if cluster.name == "slurm":
        resources += f", {cluster.mem_gb} GB, {cluster.time_limit_min} min, partition={cluster.partition}"
    return f"{BatchPlan.from_config(cfg).describe()}, n_grpo_steps={cfg.n_grpo_steps} | {resources}"


def run_job(cfg: DictConfig) -> dict[str, Any] | None:
    """The task function of launch.py: one GRPO run in the job's Hydra output directory."""
    report = check_config(cfg)
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if report.errors:
        print("error: invalid config:\n" + "\n".join(f"  - {e}" for e in report.errors), file=sys.stderr)
        sys.exit(2)
    if cfg.dry_run:
        print(f"dry run: 1 job, nothing started\njob {describe_job(cfg)}")
        return None
    assign_job_ports()
    from grpo.trainer import train

    try:
        return train(cfg, HydraConfig.get().runtime.output_dir)
    except RunDirError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
