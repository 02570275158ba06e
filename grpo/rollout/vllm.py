"""Rollouts with a vLLM 0.33 engine running inside the trainer process.

Layouts (`rollout` config, see `VLLMRolloutEngine.from_config`):

* separate GPU (`colocate: false`, `device: cuda:1`): the policy trains on cuda:0 and vLLM owns
  cuda:1, taking `gpu_memory_utilization` of it;
* colocated (`colocate: true`): vLLM shares the policy's GPU with a lower
  `gpu_memory_utilization`; with `enable_sleep_mode` it frees its GPU memory after every
  `generate` (sleep level 1 keeps a CPU copy of the weights, level 2 drops them, which is only
  safe because `sync_weights` reloads every weight before the next `generate`).

`sync_weights(policy)` streams `policy.state_dict()` (Hugging Face names; vLLM maps q/k/v and
gate/up onto its fused layers and skips a tied `lm_head.weight` itself) into the engine in place,
one tensor at a time, then clears the prefix cache. The engine's per-token log-probs are the raw
(temperature 1, before min-tokens, temperature and top-p) log-softmax of its logits, the same
quantity as the trainer's log-probs, so they expose stale engine weights.

vLLM internals relied on (paths inside the vllm==0.33.0 wheel):

* In-process engine: `VLLM_ENABLE_V1_MULTIPROCESSING=0` (read lazily, `vllm/envs.py:1444`) makes
  `LLMEngine.from_engine_args` (`vllm/v1/engine/llm_engine.py:174-199`) build an `InprocClient`
  (`vllm/v1/engine/core_client.py:366`) over a `UniProcExecutor`, whose `collective_rpc` calls
  the worker directly with the Python arguments, unserialised
  (`vllm/v1/executor/uniproc_executor.py:90-113`, `vllm/v1/serial_utils.py:485-508`). That is
  what lets `sync_weights` hand a generator of CUDA tensors to the worker.
* Weight reload: `LLM.collective_rpc("reload_weights", kwargs={"weights_iterator": ...})`
  (`vllm/entrypoints/llm.py:573`) -> `Worker.reload_weights` (`vllm/v1/worker/gpu_worker.py:636`)
  -> `GPUModelRunner.reload_weights` (`vllm/v1/worker/gpu_model_runner.py:5226`; model runner
  V2, the default: `vllm/v1/worker/gpu/model_runner.py:586`) -> `reload_weights`
  (`vllm/model_executor/model_loader/reload/inplace.py:32-96`), which calls the model's
  `load_weights` under layerwise reload and copies the result back into the original parameter
  storage (so CUDA graphs stay valid). Tied embeddings are loaded once by `AutoWeightsLoader`
  (`vllm/model_executor/models/utils.py:255-259`). Then `LLM.reset_prefix_cache`
  (`vllm/entrypoints/llm.py:832`).
* GPU placement: `EngineArgs.device_ids` (`vllm/engine/arg_utils.py:547`, resolved at
  `:2141-2178` as indices into CUDA_VISIBLE_DEVICES, i.e. torch's ordinals) becomes
  `ParallelConfig.assigned_physical_gpu_ids`; `Worker.init_device` maps local rank 0 onto it
  and calls `torch.accelerator.set_device_index` (`vllm/v1/worker/gpu_worker.py:449-496`). That
  switches the whole process's current CUDA device, so the engine restores the caller's device
  after start-up and runs every engine call under `torch.cuda.device(<vLLM's GPU>)`. vLLM only
  measures memory of its own device (`vllm/utils/mem_utils.py:105-160`,
  `vllm/v1/worker/utils.py:716-772`), so the policy on another GPU of the same process needs no
  patching (older vLLMs needed the world-size / profiling patches of the CS336 reference).
* Global state touched at start-up: `Worker.init_device` seeds Python, NumPy and torch's global
  RNGs with `seed` (`vllm/v1/worker/gpu_worker.py:517`, `vllm/utils/torch_utils.py:528-539`);
  the engine saves and restores them around start-up. It also initialises a one-process
  `torch.distributed` group (`vllm/distributed/parallel_state.py:1928-1981`), calls
  `gc.freeze()` (`vllm/v1/engine/core.py:243`) and caches vLLM's env vars (`:248`).
* Prompts are passed as token ids, `{"prompt_token_ids": [...]}` (`TokensPrompt`,
  `vllm/inputs/llm.py:111-118`), tokenized with the policy's tokenizer: vLLM loads its tokenizer
  with `AutoTokenizer` (`vllm/tokenizers/hf.py:173-183`), which for the tiny model picks
  `Qwen2Tokenizer` and drops spaces when encoding (decoding is right).
* Sampling: `SamplingParams` (`vllm/sampling_params.py:285-384`): `n`, `temperature` (0 =
  greedy, which also resets top_p), `top_p`, `min_tokens`, `max_tokens`, `stop`,
  `include_stop_str_in_output`, `seed`, `logprobs=0` (only the sampled token's log-prob). With
  `n > 1` and a seed, child j of a request gets seed + j (`vllm/v1/engine/parallel_sampling.py:
  69-81`), so each request gets a seed hashed from (seed, request index). Greedy
  sampling refuses n > 1 (`vllm/sampling_params.py:769-773`): greedy requests repeat the prompt.
* Log-prob mode: `logprobs_mode="raw_logprobs"` (`vllm/config/model.py:291-300`): computed from
  the logits before any processing, in float32 (`vllm/v1/sample/sampler.py:141-156`, `:369`;
  model runner V2: `vllm/v1/worker/gpu/sample/sampler.py:172-185`).
* Outputs: `RequestOutput.outputs` is a list of `CompletionOutput` (`vllm/outputs.py:59-98`):
  `index`, `text`, `token_ids`, `logprobs` (per position a {token_id: Logprob} mapping),
  `finish_reason` ("stop" | "length" | ...), `stop_reason` (None = EOS, int = stop token id,
  str = stop string). The EOS / stop token is in `token_ids` (`vllm/v1/core/sched/utils.py:
  98-112`) and is dropped here; a stop string is kept in the text, which is cut right after it
  (`vllm/v1/engine/detokenizer.py:321-371`). Stop strings only count after `min_tokens`
  (`:134-136`).
* Sleep mode: `LLM.sleep(level)` / `LLM.wake_up(tags)` (`vllm/entrypoints/llm.py:839-890`);
  sleeping pauses scheduling and clears the prefix cache (`vllm/v1/engine/core.py:993-1041`);
  tags are "weights" and "kv_cache" (`vllm/v1/executor/abstract.py:36`).
* Shutdown: `LLM.llm_engine.engine_core.shutdown()` (`vllm/v1/engine/core_client.py:414`,
  `vllm/v1/engine/core.py:834-849`: frees the executor, unfreezes gc, destroys the process
  group).
"""

from __future__ import annotations

import gc
import os
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from grpo.rollout.base import Rollout, RolloutEngine, SamplingSettings

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
)


def import_vllm() -> Any:
    """Import and return the `vllm` package, with an actionable error if it is not installed."""
    try:
        import vllm
    except ImportError as err:
        raise ImportError(
            "rollout.engine=vllm needs vLLM, which is not importable here "
            f"({err}). Install the `vllm` extra (pip install -e '.[vllm]', vllm==0.33.0, "
            "Linux + CUDA only) or use the transformers engine: rollout=hf."
        ) from err
    return vllm


class VLLMRolloutEngine(RolloutEngine):
    """A vLLM `LLM` in this process, on its own GPU or on the policy's.

    model_path: local Hugging Face directory of the policy's initial weights (and tokenizer).
    tokenizer: the policy's tokenizer; prompts are tokenized with it and handed to vLLM as token
      ids, so the engine sees exactly the trainer's prompt tokens (vLLM's own tokenizer, loaded
      from model_path, only turns response tokens into text and finds stop strings).
    device: the CUDA device vLLM runs on (an explicit index, e.g. cuda:1).
    gpu_memory_utilization: fraction of that GPU's total memory vLLM may use (weights,
      activations and KV cache).
    sleep_level: 0 = never sleep; 1 or 2 = sleep at that level after every `generate`.
    dtype: vLLM's weight and activation dtype ("bfloat16", "float16", "float32" or "auto").
    enable_prefix_caching: reuse KV blocks of shared prompt prefixes.
    enforce_eager: no CUDA graphs (faster start, slower decoding).
    seed: vLLM's base seed (used for requests without a seed).
    max_model_len: longest prompt + response, in tokens.
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
    ) -> None:
        vllm = import_vllm()
        if not torch.cuda.is_available():
            raise RuntimeError("rollout.engine=vllm needs a CUDA GPU; use rollout=hf on CPU")
        if device.type != "cuda" or device.index is None:
            raise ValueError(f"the vLLM device must be cuda:N, got {device}")
        if device.index >= torch.cuda.device_count():
            raise ValueError(
                f"rollout.device={device}, but only {torch.cuda.device_count()} CUDA device(s) "
                "are visible"
            )
        if sleep_level not in (0, 1, 2):
            raise ValueError(f"the vLLM sleep level must be 0, 1 or 2, got {sleep_level}")
        # In-process engine: sync_weights passes CUDA tensors to the worker by reference.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        self.tokenizer = tokenizer
        self.device = device
        self.sleep_level = sleep_level
        # Sleep-mode tags ("weights", "kv_cache") whose GPU memory vLLM has released.
        self._sleeping: set[str] = set()
        caller_device = torch.cuda.current_device()
        try:
            with _global_rng_preserved(sorted({caller_device, device.index})):
                self.llm: Any = vllm.LLM(
                    **llm_kwargs(
                        model_path=model_path,
                        device_index=device.index,
                        gpu_memory_utilization=gpu_memory_utilization,
                        enable_sleep_mode=sleep_level > 0,
                        dtype=dtype,
                        enable_prefix_caching=enable_prefix_caching,
                        enforce_eager=enforce_eager,
                        seed=seed,
                        max_model_len=max_model_len,
                    )
                )
        finally:
            torch.cuda.set_device(caller_device)
        self._sampling_params_cls = vllm.SamplingParams
        self._dtype: torch.dtype = self.llm.model_config.dtype

    provides_log_probs = True

    @classmethod
    def gpus_needed(cls, rollout_cfg: Any) -> int:
        """Its own GPU next to the trainer's, or one shared GPU with `colocate: true`."""
        return 1 if rollout_cfg["colocate"] else 2

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
        import_vllm()  # the most useful error first where vLLM is missing (e.g. on a CPU box)
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
        )

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
        params = [self._sampling_params_cls(**k) for k in kwargs]
        with torch.cuda.device(self.device):
            if self._sleeping:
                self.llm.wake_up(tags=sorted(self._sleeping))
                self._sleeping.clear()
            outputs = self.llm.generate(requests, params, use_tqdm=False)
            if self.sleep_level:
                self.llm.sleep(level=self.sleep_level)
                self._sleeping = {"weights", "kv_cache"}
        rollouts = [r for output in outputs for r in to_rollouts(output, per_request)]
        return [rollouts[i * n : (i + 1) * n] for i in range(len(prompts))]

    def sync_weights(self, policy: torch.nn.Module) -> None:
        """Copy `policy`'s current weights into the engine (in place) and clear its prefix cache.

        Tensors are streamed one at a time, cast to vLLM's device and dtype (no full second copy
        of the state dict is made)."""
        with torch.cuda.device(self.device):
            if "weights" in self._sleeping:
                self.llm.wake_up(tags=["weights"])
                self._sleeping.discard("weights")
            weights = (
                (name, tensor.detach().to(device=self.device, dtype=self._dtype))
                for name, tensor in policy.state_dict().items()
            )
            self.llm.collective_rpc(
                "reload_weights",
                kwargs={"weights_iterator": weights, "is_checkpoint_format": True},
            )
            self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Shut the engine down and free its GPU memory (and the process group it created)."""
        if self.llm is None:
            return
        with torch.cuda.device(self.device):
            self.llm.llm_engine.engine_core.shutdown()
            self.llm = None
            gc.collect()
            torch.cuda.empty_cache()


def resolve_device(rollout_cfg: Any, policy_device: torch.device) -> torch.device:
    """The vLLM device: the policy's with `colocate: true`, else `rollout.device`, which must
    then be a CUDA device other than the policy's."""
    if rollout_cfg["colocate"]:
        if policy_device.type != "cuda":
            raise ValueError(
                f"rollout.colocate=true puts vLLM on the policy's device, {policy_device}, "
                "which is not a CUDA device"
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
    device_index: int,
    gpu_memory_utilization: float,
    enable_sleep_mode: bool,
    dtype: str,
    enable_prefix_caching: bool,
    enforce_eager: bool,
    seed: int,
    max_model_len: int,
) -> dict[str, Any]:
    """Keyword arguments of `vllm.LLM` for an engine on CUDA device `device_index`."""
    return {
        "model": model_path,
        "device_ids": [device_index],
        "gpu_memory_utilization": gpu_memory_utilization,
        "enable_sleep_mode": enable_sleep_mode,
        "dtype": dtype,
        "enable_prefix_caching": enable_prefix_caching,
        "enforce_eager": enforce_eager,
        "seed": seed,
        "max_model_len": max_model_len,
        "logprobs_mode": "raw_logprobs",
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


@contextmanager
def _global_rng_preserved(cuda_devices: list[int]) -> Iterator[None]:
    """Restore the Python, NumPy, torch CPU and `cuda_devices`' RNG states after the block."""
    python_state = random.getstate()
    numpy_state = np.random.get_state()
    with torch.random.fork_rng(devices=cuda_devices, device_type="cuda"):
        try:
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)
