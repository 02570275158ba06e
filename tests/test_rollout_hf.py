"""The transformers rollout engine (grpo.rollout.hf) on the tiny model, and `build_engine`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from grpo.core.log_probs import sampling_log_probs
from grpo.models.loading import load_policy
from grpo.rollout.base import Rollout, SamplingSettings
from grpo.rollout.engines import build_engine
from grpo.rollout.hf import HFRolloutEngine, min_length_end_ids

PROMPTS = ["Q: 1+2 A:", "Q: 3+4 A:", "Q: 22+0 A:"]
ANSWER_CLOSE = "</answer>"
MAX_MODEL_LEN = 64


@pytest.fixture(scope="module")
def policy_and_tokenizer(
    tiny_model_dir: Path,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    return load_policy({"name": "tiny", "path": str(tiny_model_dir), "precision": "32-true"}, "cpu")


@pytest.fixture
def policy(policy_and_tokenizer: tuple[PreTrainedModel, PreTrainedTokenizerBase]) -> Iterator[
    PreTrainedModel
]:
    """The shared tiny policy, put back in eval mode after each test."""
    model = policy_and_tokenizer[0]
    yield model
    model.eval()


@pytest.fixture
def tokenizer(
    policy_and_tokenizer: tuple[PreTrainedModel, PreTrainedTokenizerBase],
) -> PreTrainedTokenizerBase:
    return policy_and_tokenizer[1]


@pytest.fixture
def engine(policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> HFRolloutEngine:
    # batch_size 5 splits a prompt's group across chunks and mixes prompts within a chunk
    return HFRolloutEngine(policy, tokenizer, batch_size=5, max_model_len=MAX_MODEL_LEN)


def forward_log_probs(
    policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompt: str, rollout: Rollout,
    temperature: float = 1.0, top_p: float = 1.0, min_new_tokens: int = 0,
) -> torch.Tensor:
    """(L,) log-probs of the rollout's tokens from one unpadded forward pass, under the
    sampling distribution of `min_new_tokens`, `temperature` and `top_p` (the trainer's mirror)."""
    prompt_ids = tokenizer(prompt)["input_ids"]
    ids = torch.tensor([prompt_ids + rollout.token_ids])
    with torch.no_grad():
        logits = policy(ids).logits[:, len(prompt_ids) - 1 : -1].float()
    too_early = torch.arange(len(rollout.token_ids))[None] < min_new_tokens
    return sampling_log_probs(logits, torch.tensor([rollout.token_ids]), temperature, top_p,
                              too_early, min_length_end_ids(policy, tokenizer, ()))[0]


def test_groups_have_n_rollouts_in_prompt_order(
    engine: HFRolloutEngine, tokenizer: PreTrainedTokenizerBase
) -> None:
    groups = engine.generate(PROMPTS, 4, SamplingSettings(max_new_tokens=10, seed=0))
    assert [len(group) for group in groups] == [4, 4, 4]
    for group in groups:
        for rollout in group:
            assert len(rollout.log_probs) == len(rollout.token_ids) <= 10
            assert tokenizer.eos_token_id not in rollout.token_ids
            assert rollout.text == tokenizer.decode(rollout.token_ids, skip_special_tokens=True)
            assert all(lp <= 0 for lp in rollout.log_probs)
            assert rollout.finish_reason == ("length" if len(rollout.token_ids) == 10 else "stop")
    assert engine.generate([], 4, SamplingSettings(seed=0)) == []


def test_prompt_order_matches_a_one_prompt_call(
    engine: HFRolloutEngine,
) -> None:
    greedy = SamplingSettings(temperature=0.0, max_new_tokens=8)
    together = engine.generate(PROMPTS, 2, greedy)
    alone = [engine.generate([prompt], 2, greedy)[0] for prompt in PROMPTS]
    assert [[r.token_ids for r in g] for g in together] == [[r.token_ids for r in g] for g in alone]


def test_single_token_stop_string_is_kept_and_ends_the_response(
    engine: HFRolloutEngine, tokenizer: PreTrainedTokenizerBase
) -> None:
    close_id = tokenizer.convert_tokens_to_ids(ANSWER_CLOSE)
    sampling = SamplingSettings(max_new_tokens=12, stop=(ANSWER_CLOSE,), seed=1)
    rollouts = [r for group in engine.generate(PROMPTS, 8, sampling) for r in group]
    stopped = [r for r in rollouts if ANSWER_CLOSE in r.text]
    assert len(stopped) >= len(rollouts) // 2  # the warmed-up model mostly closes its answer
    for rollout in stopped:
        assert rollout.text.endswith(ANSWER_CLOSE) and rollout.text.count(ANSWER_CLOSE) == 1
        assert rollout.token_ids[-1] == close_id and rollout.token_ids.count(close_id) == 1
        assert rollout.finish_reason == "stop"


def test_multi_token_stop_string_cuts_text_and_tokens(
    engine: HFRolloutEngine, tokenizer: PreTrainedTokenizerBase
) -> None:
    # "<answer>3" is two tokens; without the stop the model goes on with "</answer>" + EOS
    stops = ("<answer>3", "<answer>7")
    sampling = SamplingSettings(max_new_tokens=12, stop=stops, seed=2)
    rollouts = [r for group in engine.generate(PROMPTS, 16, sampling) for r in group]
    cut = [r for r in rollouts if any(stop in r.text for stop in stops)]
    assert cut, "no sample produced a stop string"
    for rollout in cut:
        assert rollout.text.endswith(stops)
        assert rollout.text == tokenizer.decode(rollout.token_ids, skip_special_tokens=True)
        assert len(rollout.log_probs) == len(rollout.token_ids)
        assert rollout.finish_reason == "stop"
    assert any(ANSWER_CLOSE in r.text for r in rollouts)  # the others are not cut


def test_max_new_tokens_gives_finish_reason_length(engine: HFRolloutEngine) -> None:
    sampling = SamplingSettings(
        max_new_tokens=3, min_new_tokens=3, stop=(ANSWER_CLOSE,), seed=3
    )
    for group in engine.generate(PROMPTS, 4, sampling):
        for rollout in group:
            assert len(rollout.token_ids) == 3 and rollout.finish_reason == "length"
            assert ANSWER_CLOSE not in rollout.text  # suppressed before min_new_tokens


def test_min_new_tokens_holds_back_eos_and_stop(engine: HFRolloutEngine) -> None:
    sampling = SamplingSettings(max_new_tokens=8, min_new_tokens=5, stop=(ANSWER_CLOSE,), seed=4)
    for group in engine.generate(PROMPTS, 4, sampling):
        for rollout in group:
            assert len(rollout.token_ids) >= 5


def test_responses_fit_in_max_model_len(
    policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    prompt_len = len(tokenizer(PROMPTS[0])["input_ids"])
    engine = HFRolloutEngine(policy, tokenizer, batch_size=8, max_model_len=prompt_len + 2)
    sampling = SamplingSettings(max_new_tokens=50, min_new_tokens=2, seed=5)
    for rollout in engine.generate([PROMPTS[0]], 4, sampling)[0]:
        assert len(rollout.token_ids) == 2 and rollout.finish_reason == "length"
    with pytest.raises(ValueError, match="max_model_len"):
        engine.generate(["Q: 1234+5678 A:"], 1, sampling)


def test_seeded_generation_is_deterministic_and_leaves_the_global_rng(
    engine: HFRolloutEngine,
) -> None:
    sampling = SamplingSettings(max_new_tokens=10, seed=7)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first = engine.generate(PROMPTS, 4, sampling)
    assert torch.equal(torch.get_rng_state(), state)
    assert engine.generate(PROMPTS, 4, sampling) == first
    other = engine.generate(PROMPTS, 4, SamplingSettings(max_new_tokens=10, seed=8))
    assert other != first
    # unseeded sampling draws from (and advances) the global stream
    unseeded = SamplingSettings(max_new_tokens=10)
    torch.manual_seed(5)
    state = torch.get_rng_state()
    drawn = engine.generate(PROMPTS, 4, unseeded)
    assert not torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(5)
    assert engine.generate(PROMPTS, 4, unseeded) == drawn


def test_log_probs_are_the_sampling_distributions(
    engine: HFRolloutEngine, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    # the behaviour policy of the importance correction: temperature and top-p applied, as the
    # trainer's mirror computes them; not the raw temperature-1 log-probs
    sampling = SamplingSettings(
        temperature=0.7, top_p=0.9, min_new_tokens=2, max_new_tokens=10, seed=9
    )
    raw_gap = []
    for prompt, group in zip(PROMPTS, engine.generate(PROMPTS, 4, sampling), strict=True):
        for rollout in group:
            expected = forward_log_probs(policy, tokenizer, prompt, rollout, 0.7, 0.9, 2)
            torch.testing.assert_close(
                torch.tensor(rollout.log_probs), expected, atol=1e-5, rtol=0
            )
            raw = forward_log_probs(policy, tokenizer, prompt, rollout)
            raw_gap.append((torch.tensor(rollout.log_probs) - raw).abs().mean().item())
    assert sum(raw_gap) / len(raw_gap) > 0.05
    # at temperature 1 without a nucleus cut or a minimum length they are the forward pass's own
    plain = SamplingSettings(max_new_tokens=10, seed=9)
    for prompt, group in zip(PROMPTS, engine.generate(PROMPTS, 2, plain), strict=True):
        for rollout in group:
            torch.testing.assert_close(torch.tensor(rollout.log_probs),
                                       forward_log_probs(policy, tokenizer, prompt, rollout),
                                       atol=1e-5, rtol=0)


def test_greedy_equals_argmax_decoding(
    engine: HFRolloutEngine, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    close_id = tokenizer.convert_tokens_to_ids(ANSWER_CLOSE)
    greedy = SamplingSettings(temperature=0.0, max_new_tokens=8, stop=(ANSWER_CLOSE,))
    for prompt, group in zip(PROMPTS, engine.generate(PROMPTS, 3, greedy), strict=True):
        ids = tokenizer(prompt)["input_ids"]
        expected: list[int] = []
        while len(expected) < 8:
            with torch.no_grad():
                token = int(policy(torch.tensor([ids + expected])).logits[0, -1].argmax())
            if token == tokenizer.eos_token_id:
                break
            expected.append(token)
            if token == close_id:
                break
        assert [r.token_ids for r in group] == [expected] * 3


def test_training_mode_is_restored(engine: HFRolloutEngine, policy: PreTrainedModel) -> None:
    policy.train()
    policy.model.layers[0].eval()  # a submodule deliberately in another mode
    modes = {name: m.training for name, m in policy.named_modules()}
    seen_training: list[bool] = []
    hook = policy.register_forward_pre_hook(lambda m, args: seen_training.append(m.training))
    try:
        engine.generate(PROMPTS, 2, SamplingSettings(max_new_tokens=6, seed=0))
    finally:
        hook.remove()
    assert seen_training and not any(seen_training)  # generation ran in eval mode
    assert {name: m.training for name, m in policy.named_modules()} == modes


# is_gradient_checkpointing is deprecated in transformers 5.23 but the only name in 5.16-5.20
# (the range vllm==0.33.0 pins)
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
def test_gradient_checkpointing_and_use_cache_survive_generation(tiny_model_dir: Path) -> None:
    model_cfg = {"name": "tiny", "path": str(tiny_model_dir), "precision": "32-true",
                 "gradient_checkpointing": True}
    policy, tokenizer = load_policy(model_cfg, "cpu")
    policy.train()
    use_cache = policy.config.use_cache
    engine = HFRolloutEngine(policy, tokenizer, batch_size=8, max_model_len=MAX_MODEL_LEN)
    engine.generate(PROMPTS, 2, SamplingSettings(max_new_tokens=6, seed=0))
    assert policy.training and policy.is_gradient_checkpointing
    assert policy.config.use_cache == use_cache
    assert all(p.requires_grad for p in policy.parameters())
    ids = torch.tensor(tokenizer([PROMPTS[0]])["input_ids"])
    policy(ids, labels=ids).loss.backward()  # still trains: gradients reach every parameter
    assert all(p.grad is not None for p in policy.parameters())


def test_checkpoint_generation_config_does_not_leak(
    engine: HFRolloutEngine, policy: PreTrainedModel
) -> None:
    config = policy.generation_config
    saved = (config.top_k, config.temperature, config.repetition_penalty)
    config.top_k, config.temperature, config.repetition_penalty = 1, 0.05, 10.0
    try:
        groups = engine.generate(PROMPTS, 8, SamplingSettings(max_new_tokens=8, seed=10))
    finally:
        config.top_k, config.temperature, config.repetition_penalty = saved
    assert all(len({tuple(r.token_ids) for r in group}) > 1 for group in groups)


def test_sync_weights_shares_the_policy(
    engine: HFRolloutEngine, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    engine.sync_weights(policy)
    assert engine.policy is policy
    sampling = SamplingSettings(max_new_tokens=8, seed=11)
    norm = policy.model.norm.weight
    saved = norm.detach().clone()
    with torch.no_grad():
        norm.mul_(3.0)  # an in-place update, as an optimizer step makes
    try:
        groups = engine.generate(PROMPTS[:1], 4, sampling)
        for rollout in groups[0]:
            expected = forward_log_probs(policy, tokenizer, PROMPTS[0], rollout)
            torch.testing.assert_close(torch.tensor(rollout.log_probs), expected, atol=1e-5, rtol=0)
    finally:
        with torch.no_grad():
            norm.copy_(saved)
    assert engine.generate(PROMPTS[:1], 4, sampling) != groups


def test_build_engine_hf_and_unknown(
    policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    kwargs = {"policy": policy, "tokenizer": tokenizer, "model_path": "unused", "seed": 0,
              "max_model_len": MAX_MODEL_LEN}
    engine = build_engine(OmegaConf.create({"engine": "hf", "batch_size": 16}), **kwargs)
    assert isinstance(engine, HFRolloutEngine)
    assert engine.policy is policy and engine.batch_size == 16
    assert engine.max_model_len == MAX_MODEL_LEN
    with pytest.raises(ValueError, match="rollout.engine"):
        build_engine(OmegaConf.create({"engine": "sglang"}), **kwargs)


def test_a_stop_the_tokenizer_cannot_encode_never_stops_a_response(
        engine: HFRolloutEngine, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
    """`prompt.stop=['é']` on the tiny model crashed the run (WordLevel: missing [UNK])."""
    sampling = SamplingSettings(temperature=0.0, max_new_tokens=8, seed=0)
    plain = engine.generate(PROMPTS, 1, sampling)
    with_stop = engine.generate(PROMPTS, 1, replace(sampling, stop=("é",)))
    assert [g[0].token_ids for g in with_stop] == [g[0].token_ids for g in plain]
    assert min_length_end_ids(policy, tokenizer, ["é"]) == min_length_end_ids(policy, tokenizer, [])
