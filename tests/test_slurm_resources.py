"""Resources checked against what the SLURM partition offers, before anything is submitted.

The parsing tests read scontrol's real output format (a line captured on the project's cluster
and hand-written records of a bigger one); the `slurm` tests ask the running cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from test_slurm_cluster import require_cluster
from test_slurm_sweep import jobs_named

from grpo.run.slurm import SchedulerUnavailable, parse_oneliner, scontrol_show
from grpo.sweep.slurm_resources import gres_gpus, parse_minutes, parse_partitions, request_refusals

ROOT = Path(__file__).resolve().parents[1]
NODE_LINE = (
    "NodeName=vm Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=4.90 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:2 NodeAddr=127.0.0.1 NodeHostName=vm "
    "Version=22.05.8 OS=Linux 6.18.44-fc-v595 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=21695 AllocMem=0 "
    "FreeMem=16524 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A "
    "MCS_label=N/A Partitions=debug  BootTime=2026-11-22T23:48:04 CfgTRES=cpu=2,mem=21695M,billing=2 "
    "AllocTRES= CapWatts=n/a"
)
# partition gpu: nodes a (4 A100s, little memory) and b (no GPU, much memory), at most 32 CPUs
# per node and 4 hours; partition cpu is the default; partition old takes no new jobs
PARTITIONS = [
    {"PartitionName": "gpu", "Default": "NO", "State": "UP", "MaxTime": "04:00:00",
     "MaxCPUsPerNode": "32", "MaxMemPerNode": "UNLIMITED"},
    {"PartitionName": "cpu", "Default": "YES", "State": "UP", "MaxTime": "1-00:00:00",
     "MaxCPUsPerNode": "UNLIMITED", "MaxMemPerNode": "UNLIMITED"},
    {"PartitionName": "old", "Default": "NO", "State": "DRAIN", "MaxTime": "UNLIMITED"},
]
NODES = [
    {"NodeName": "a", "CPUTot": "64", "CPUEfctv": "64", "RealMemory": "16384", "Gres": "gpu:a100:4(S:0-1)",
     "Partitions": "gpu"},
    {"NodeName": "b", "CPUTot": "128", "RealMemory": "262144", "MemSpecLimit": "2048", "Gres": "(null)",
     "Partitions": "gpu,cpu,old"},
]


def request(**values: object):
    cluster = {"name": "slurm", "partition": "gpu", "cpus_per_job": 8, "mem_gb": 8,
               "gpus_per_job": 1, "time_limit_min": 60}
    return OmegaConf.create({**cluster, **values})


def refusals(**values: object) -> list[str]:
    return request_refusals(request(**values), parse_partitions(PARTITIONS, NODES))


def test_oneliner_fields_keep_spaces_and_inner_equals() -> None:
    fields = parse_oneliner(NODE_LINE)
    assert fields["CPUTot"] == "2" and fields["RealMemory"] == "21695" and fields["Gres"] == "gpu:2"
    assert fields["OS"] == "Linux 6.18.44-fc-v595 #1 SMP PREEMPT_DYNAMIC @0"
    assert fields["CfgTRES"] == "cpu=2,mem=21695M,billing=2" and fields["AllocTRES"] == ""
    assert parse_oneliner("No partitions in the system") == {}


@pytest.mark.parametrize(("text", "minutes"), [
    ("UNLIMITED", None), ("INFINITE", None), ("30", 30), ("30:30", 30.5), ("04:00:00", 240),
    ("1-00:00:00", 1440), ("2-12", 3600), ("2-12:30", 3630),
])
def test_slurm_times_in_minutes(text: str, minutes: float | None) -> None:
    assert parse_minutes(text) == minutes


@pytest.mark.parametrize(("text", "gpus"), [
    ("gpu:2", 2), ("gpu:a100:4(S:0-1)", 4), ("gpu:a100:2,gpu:v100:2,shard:8", 4), ("(null)", 0),
    ("gpu:4(S:0,1),mps:100", 4), ("gpu", 1), ("", 0),
])
def test_gres_gpu_count(text: str, gpus: int) -> None:
    assert gres_gpus(text) == gpus


def test_partition_caps_and_reserved_memory_apply() -> None:
    gpu = parse_partitions(PARTITIONS, NODES)["gpu"]
    assert [(n.name, n.cpus, n.memory_mb, n.gpus) for n in gpu.nodes] == [
        ("a", 32, 16384, 4), ("b", 32, 260096, 0)]
    assert gpu.max_time_min == 240 and not gpu.default


def test_a_request_at_the_limits_fits() -> None:
    assert refusals(cpus_per_job=32, mem_gb=16, gpus_per_job=4, time_limit_min=240) == []
    assert refusals(partition=None, cpus_per_job=128, mem_gb=254, gpus_per_job=0, time_limit_min=1440) == []


def test_each_key_over_its_limit_is_named_with_the_limit() -> None:
    assert refusals(cpus_per_job=33) == [
        "cluster.cpus_per_job=33 exceeds the 32 CPUs of the largest node in partition gpu; "
        "set cluster.cpus_per_job<=32"]
    assert refusals(mem_gb=255, gpus_per_job=0) == [
        "cluster.mem_gb=255 exceeds the 260096 MB (254.0 GB) of the largest node in partition gpu; "
        "set cluster.mem_gb<=254"]
    assert refusals(gpus_per_job=5) == [
        "cluster.gpus_per_job=5 exceeds the 4 GPUs (GRES gpu) of the largest node in partition gpu; "
        "set cluster.gpus_per_job<=4"]
    assert refusals(time_limit_min=241) == [
        "cluster.time_limit_min=241 exceeds the 240 min time limit of partition gpu; "
        "set cluster.time_limit_min<=240"]
    assert refusals(partition="cpu", gpus_per_job=1)[0].endswith(
        "use cluster=slurm_cpu (cluster.gpus_per_job=0) or a partition with GPUs")


def test_no_node_with_everything_at_once() -> None:
    """Node a has the GPU, node b the memory: each key fits some node, the job fits none."""
    (line,) = refusals(mem_gb=64, gpus_per_job=1)
    assert line.startswith("cluster.cpus_per_job=8, cluster.mem_gb=64 and cluster.gpus_per_job=1: "
                           "no node of partition gpu has them all at once (a: 32 CPUs, 16384 MB, 4 GPUs;")


def test_partition_choice_is_checked() -> None:
    assert refusals(partition="nope") == [
        "cluster.partition=nope is not a partition of this cluster; set cluster.partition to one of: "
        "gpu, cpu, old"]
    assert "partition old is DRAIN and takes no new jobs" in refusals(partition="old", gpus_per_job=0)[0]
    no_default = parse_partitions(PARTITIONS[:1], NODES)
    assert request_refusals(request(partition=None), no_default) == [
        "cluster.partition=null but the cluster has no default partition; set cluster.partition to "
        "one of: gpu"]
    assert refusals(cpus_per_job="eight") == ["cluster.cpus_per_job=eight must be a number >= 1"]


def launch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=env)


def test_a_host_without_slurm_says_so_once_and_goes_on(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # no scontrol there
    out = launch("model=tiny", "data=toy", "rollout=hf", "cluster=slurm", "seed=0,1,2",
                 f"paths.output_root={tmp_path}", "dry_run=true", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("warning: cannot ask SLURM") == 1, out.stderr
    assert ("warning: cannot ask SLURM what its partitions offer: no SLURM client on this host "
            "(scontrol is not on PATH); the jobs' cluster.* resources are not checked before submission"
            ) in out.stderr
    assert out.stdout.startswith("dry run: 3 jobs, nothing submitted")


@pytest.mark.slurm
def test_a_scheduler_that_does_not_answer_in_time_is_named() -> None:
    require_cluster()
    with pytest.raises(SchedulerUnavailable, match=r"`scontrol show partition` did not answer within 1e-06 s"):
        scontrol_show("partition", timeout_s=1e-6)


def this_cluster_node() -> tuple[int, int, int]:
    """CPUs, memory (MB) and GPUs of the cluster's node, asked through sinfo (not scontrol)."""
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%c|%m|%G"], capture_output=True, text=True, check=True)
    cpus, memory, gres = out.stdout.split()[0].split("|")
    return int(cpus), int(memory), gres_gpus(gres)


@pytest.mark.slurm
def test_default_slurm_request_is_checked_against_the_cluster(tmp_path: Path) -> None:
    """`cluster=slurm` as shipped (8 CPUs, 64 GB, 2 GPUs) on the project's cluster: each key the
    node cannot hold is named with the node's limit, and nothing reaches sbatch."""
    require_cluster()
    cpus, memory, gpus = this_cluster_node()
    name = f"grpo-resources-{uuid.uuid4().hex[:8]}"
    out = launch("model=tiny", "data=toy", "rollout=hf", "cluster=slurm", f"paths.output_root={tmp_path}",
                 f"hydra.launcher.name={name}")
    expected = []
    if cpus < 8:
        expected.append(f"cluster.cpus_per_job=8 exceeds the {cpus} CPUs of the largest node in "
                        f"partition debug; set cluster.cpus_per_job<={cpus}")
    if memory < 64 * 1024:
        expected.append(f"cluster.mem_gb=64 exceeds the {memory} MB ({memory / 1024:.1f} GB) of the "
                        f"largest node in partition debug; set cluster.mem_gb<={memory // 1024}")
    if gpus < 2:
        expected.append(f"cluster.gpus_per_job=2 exceeds the {gpus} GPUs (GRES gpu)")
    if not expected:
        assert out.returncode == 0, out.stderr
        return
    assert out.returncode == 2, out.stderr
    assert "error: 1 of 1 jobs are invalid; nothing was submitted." in out.stderr
    for line in expected:
        assert f"  - {line}" in out.stderr
    assert jobs_named(name) == [] and not list(tmp_path.rglob(".submitit"))


@pytest.mark.slurm
def test_requests_one_over_the_node_are_refused_and_at_the_node_accepted(tmp_path: Path) -> None:
    require_cluster()
    cpus, memory, gpus = this_cluster_node()
    common = ["model=tiny", "data=toy", "rollout=hf", "cluster=slurm", f"paths.output_root={tmp_path}"]
    over = launch(*common, f"cluster.cpus_per_job={cpus + 1}", f"cluster.mem_gb={memory // 1024 + 1}",
                  f"cluster.gpus_per_job={gpus + 1}", "dry_run=true")
    assert over.returncode == 2
    assert f"cluster.cpus_per_job={cpus + 1} exceeds the {cpus} CPUs" in over.stderr
    assert f"cluster.mem_gb={memory // 1024 + 1} exceeds the {memory} MB" in over.stderr
    assert f"cluster.gpus_per_job={gpus + 1} exceeds the {gpus} GPUs" in over.stderr
    at = launch(*common, f"cluster.cpus_per_job={cpus}", f"cluster.mem_gb={memory // 1024}",
                f"cluster.gpus_per_job={gpus}", "dry_run=true")
    assert at.returncode == 0, at.stderr


@pytest.mark.slurm
def test_a_submission_sbatch_refuses_ends_in_one_line(tmp_path: Path) -> None:
    """A node feature the validator does not check: sbatch's own refusal, no traceback."""
    require_cluster()
    name = f"grpo-refused-{uuid.uuid4().hex[:8]}"
    out = launch("model=tiny", "data=toy", "rollout=hf", "cluster=slurm_cpu", f"paths.output_root={tmp_path}",
                 f"hydra.launcher.name={name}", "hydra.launcher.constraint=grpo-no-such-feature")
    assert out.returncode == 2
    assert ("error: sbatch refused the job array: sbatch: error: Batch job submission failed: "
            "Invalid feature specification (its options come from cluster.* and hydra.launcher.*)"
            ) in out.stderr.splitlines()
    assert "Traceback" not in out.stderr and jobs_named(name) == []
