"""What the nodes of a SLURM partition offer, and whether a job's `cluster.*` request fits there.

`ResourceCheck` asks the scheduler once (`scontrol show partition` and `scontrol show node`) the
first time a `cluster=slurm` job of the sweep is checked, then checks every job against that
answer: a request no node of the partition can ever run (more CPUs, memory or GPUs than its
largest node, more time than the partition allows) is refused with one line naming the key and
the limit. When the scheduler cannot be asked it says so in one line and checks nothing.
`sbatch_refusal` reads sbatch's own message out of a submission that sbatch refused anyway.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from grpo.run.slurm import SchedulerUnavailable, scontrol_show

UNLIMITED = ("UNLIMITED", "INFINITE", "NONE", "")
# partition states that refuse new jobs (a DOWN partition queues them)
CLOSED_STATES = ("DRAIN", "INACTIVE")
# the cluster.* keys of a request and their smallest legal values
REQUEST_MINIMA = {"cpus_per_job": 1, "mem_gb": 0, "gpus_per_job": 0, "time_limit_min": 1}
MB_PER_GB = 1024  # sbatch --mem units: submitit passes cluster.mem_gb as "<n>GB" = n * 1024 MB


def parse_minutes(text: str) -> float | None:
    """A SLURM time (`30`, `30:00`, `4:00:00`, `2-12`, `2-12:00:00`) in minutes; None = unlimited."""
    text = text.strip().upper()
    if text in UNLIMITED:
        return None
    days, _, clock = text.rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    if days:  # days-hours[:minutes[:seconds]]
        hours, minutes, seconds = (parts + [0.0, 0.0])[:3]
        return float(days) * 1440 + hours * 60 + minutes + seconds / 60
    if len(parts) == 1:  # minutes
        return parts[0]
    if len(parts) == 2:  # minutes:seconds
        return parts[0] + parts[1] / 60
    hours, minutes, seconds = parts
    return hours * 60 + minutes + seconds / 60


def gres_gpus(text: str) -> int:
    """GPUs in a node's `Gres` (`gpu:2`, `gpu:a100:4(S:0-1)`, `gpu:a100:2,gpu:v100:2,shard:8`)."""
    total = 0
    for item in re.sub(r"\([^)]*\)", "", text).split(","):
        name, *rest = item.strip().split(":")
        if name == "gpu":
            total += int(rest[-1]) if rest and rest[-1].isdigit() else 1
    return total


def _limit(text: str | None) -> int | None:
    return None if text is None or text.strip().upper() in UNLIMITED else int(text)


@dataclass(frozen=True)
class Node:
    """What one node offers a job (after the partition's per-node caps)."""

    name: str
    cpus: int
    memory_mb: int
    gpus: int

    def describe(self) -> str:
        return f"{self.name}: {self.cpus} CPUs, {self.memory_mb} MB, {self.gpus} GPUs"


@dataclass(frozen=True)
class Partition:
    """A partition: its time limit, whether it takes jobs, and its nodes."""

    name: str
    default: bool
    state: str
    max_time_min: float | None  # None = unlimited
    nodes: tuple[Node, ...]


def parse_partitions(partition_records: list[dict[str, str]], node_records: list[dict[str, str]]) -> dict[str, Partition]:
    """Partitions by name, from `scontrol show partition` and `scontrol show node` records."""
    partitions = {}
    for part in partition_records:
        name = part["PartitionName"]
        max_cpus = _limit(part.get("MaxCPUsPerNode"))
        max_mem = _limit(part.get("MaxMemPerNode"))
        nodes = []
        for node in node_records:
            if name not in node.get("Partitions", "").split(","):
                continue
            cpus = int(node.get("CPUEfctv") or node["CPUTot"])
            memory = int(node["RealMemory"]) - int(node.get("MemSpecLimit") or 0)
            nodes.append(Node(
                name=node["NodeName"],
                cpus=min(cpus, max_cpus) if max_cpus is not None else cpus,
                memory_mb=min(memory, max_mem) if max_mem is not None else memory,
                gpus=gres_gpus(node.get("Gres", "")),
            ))
        partitions[name] = Partition(
            name=name, default=part.get("Default") == "YES", state=part.get("State", "UP"),
            max_time_min=parse_minutes(part.get("MaxTime", "UNLIMITED")), nodes=tuple(nodes),
        )
    return partitions


def ask_scheduler() -> dict[str, Partition]:
    """This cluster's partitions; raises SchedulerUnavailable when the scheduler cannot be asked."""
    partitions, nodes = scontrol_show("partition"), scontrol_show("node")
    try:
        return parse_partitions(partitions, nodes)
    except (KeyError, ValueError) as err:
        raise SchedulerUnavailable(f"could not read scontrol's answer ({type(err).__name__}: {err})") from None


def request_refusals(cluster: DictConfig, partitions: dict[str, Partition]) -> list[str]:
    """One line per `cluster.*` key whose value no node of the job's partition can run."""
    names = ", ".join(partitions) or "none"
    if cluster.partition is None:
        default = [p for p in partitions.values() if p.default]
        if not default:
            return [f"cluster.partition=null but the cluster has no default partition; set "
                    f"cluster.partition to one of: {names}"]
        part = default[0]
    elif str(cluster.partition) not in partitions:
        return [f"cluster.partition={cluster.partition} is not a partition of this cluster; set "
                f"cluster.partition to one of: {names}"]
    else:
        part = partitions[str(cluster.partition)]
    where = f"partition {part.name}"
    if part.state.upper() in CLOSED_STATES:
        return [f"cluster.partition={part.name}: {where} is {part.state} and takes no new jobs; "
                f"set cluster.partition to another one of: {names}"]
    if not part.nodes:
        return [f"cluster.partition={part.name}: {where} has no nodes; set cluster.partition to "
                f"another one of: {names}"]
    bad = [f"cluster.{key}={cluster[key]} must be a number >= {low}" for key, low in REQUEST_MINIMA.items()
           if isinstance(cluster[key], bool) or not isinstance(cluster[key], (int, float)) or cluster[key] < low]
    if bad:
        return bad
    cpus, gpus = int(cluster.cpus_per_job), int(cluster.gpus_per_job)
    memory_mb = math.floor(float(cluster.mem_gb) * MB_PER_GB)
    most_cpus = max(n.cpus for n in part.nodes)
    most_memory = max(n.memory_mb for n in part.nodes)
    most_gpus = max(n.gpus for n in part.nodes)
    refusals = []
    if cpus > most_cpus:
        refusals.append(f"cluster.cpus_per_job={cpus} exceeds the {most_cpus} CPUs of the largest "
                        f"node in {where}; set cluster.cpus_per_job<={most_cpus}")
    if memory_mb > most_memory:
        refusals.append(f"cluster.mem_gb={cluster.mem_gb} exceeds the {most_memory} MB "
                        f"({most_memory / MB_PER_GB:.1f} GB) of the largest node in {where}; set "
                        f"cluster.mem_gb<={most_memory // MB_PER_GB}")
    if gpus > most_gpus:
        fix = (f"set cluster.gpus_per_job<={most_gpus}" if most_gpus else
               "use cluster=slurm_cpu (cluster.gpus_per_job=0) or a partition with GPUs")
        refusals.append(f"cluster.gpus_per_job={gpus} exceeds the {most_gpus} GPUs (GRES gpu) of "
                        f"the largest node in {where}; {fix}")
    time_limit = float(cluster.time_limit_min)
    if part.max_time_min is not None and time_limit > part.max_time_min:
        refusals.append(f"cluster.time_limit_min={cluster.time_limit_min} exceeds the "
                        f"{part.max_time_min:g} min time limit of {where}; set "
                        f"cluster.time_limit_min<={math.floor(part.max_time_min)}")
    fits = any(cpus <= n.cpus and memory_mb <= n.memory_mb and gpus <= n.gpus for n in part.nodes)
    if not refusals and not fits:
        refusals.append(
            f"cluster.cpus_per_job={cpus}, cluster.mem_gb={cluster.mem_gb} and "
            f"cluster.gpus_per_job={gpus}: no node of {where} has them all at once "
            f"({'; '.join(n.describe() for n in part.nodes)}); lower one or pick another partition"
        )
    return refusals


class ResourceCheck:
    """Checks the `cluster=slurm` jobs of one sweep; the scheduler is asked at most once."""

    def __init__(self) -> None:
        self._asked = False
        self._partitions: dict[str, Partition] | None = None

    def refusals(self, cfg: DictConfig) -> list[str]:
        """Why the job of `cfg` cannot run on its partition (empty: it can, or it is no SLURM job)."""
        if cfg.cluster.name != "slurm":
            return []
        if not self._asked:
            self._asked = True
            try:
                self._partitions = ask_scheduler()
            except SchedulerUnavailable as err:
                print(f"warning: cannot ask SLURM what its partitions offer: {err}; the jobs' "
                      "cluster.* resources are not checked before submission", file=sys.stderr)
        if self._partitions is None:
            return []
        return request_refusals(cfg.cluster, self._partitions)


def sbatch_refusal(err: BaseException) -> str | None:
    """sbatch's own message when `err` is submitit's error for a submission sbatch refused."""
    cause = err.__cause__
    if not isinstance(cause, subprocess.CalledProcessError) or not cause.cmd:
        return None
    if Path(str(cause.cmd[0])).name != "sbatch":
        return None
    lines = [line.strip() for line in str(cause.stderr or "").splitlines() if line.strip()]
    return lines[-1] if lines else f"sbatch exited with status {cause.returncode}"
