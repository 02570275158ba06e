"""Rollouts with transformers `generate` on the policy module itself (CPU or GPU).

The engine holds a reference to the trained policy (no second copy of the weights), so it always
samples from the current weights and `sync_weights` has nothing to copy. Each `generate` call:

1. tokenizes the prompts, repeats each one `n` times (prompt-major order) and splits the
   sequences into chunks of `batch_size`, each left-padded to its longest prompt;
2. runs `model.generate` (KV cache on) in eval mode under `torch.inference_mode()`, restoring
   every submodule's training flag afterwards (the model's config, `use_cache` and
   gradient-checkpointing settings are never touched);
3. records, at every step, the log-softmax of the scores the token is sampled from (the
   min-length mask, temperature and top-p applied; the raw logits when greedy) and keeps the
   entry of the token that was sampled;
4. cuts each response before its first EOS token (excluded; `generate` pads finished rows after
   it), or after the first stop string (kept in the text and token ids). The text is decoded
   without special tokens, as vLLM does; a pad token the model samples mid-response is an
   ordinary token (kept in token_ids, absent from the text).

Sampling is done by this module's own logits-processor list (min new tokens, temperature, top-p);
the generation config given to `generate` sets every other sampling knob to a neutral value so
that nothing in the checkpoint's `generation_config.json` (top_k, repetition_penalty, ...) leaks
into the rollouts.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    MinNewTokensLengthLogitsProcessor,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    StoppingCriteria,
    StoppingCriteriaList,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

from grpo.rollout.base import NonFiniteLogitsError, Rollout, RolloutEngine, SamplingSettings
from grpo.rollout.specs import HFSpec


class HFRolloutEngine(RolloutEngine):
    """Samples rollouts from `policy` with transformers `generate`.

    policy: the trained causal LM (shared, not copied); generation runs on its device.
    tokenizer: the policy's tokenizer; needs an EOS token (used as pad if it has no pad token).
    batch_size: sequences (prompts x samples) per `generate` call.
    max_model_len: longest prompt + response, in tokens; responses are cut to fit
      (finish_reason "length") and a prompt of max_model_len tokens or more is an error.
    """

    def __init__(
        self,
        policy: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        batch_size: int,
        max_model_len: int,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"rollout.batch_size must be >= 1, got {batch_size}")
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token")
        self.policy = policy
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_model_len = max_model_len

    spec = HFSpec

    @classmethod
    def from_config(
        cls,
        rollout_cfg: Mapping[str, Any],
        *,
        policy: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        model_path: str,
        seed: int,
        max_model_len: int,
    ) -> HFRolloutEngine:
        """The engine for `rollout=hf` (key: batch_size); samples from `policy` itself."""
        return cls(policy, tokenizer, batch_size=int(rollout_cfg["batch_size"]),
                   max_model_len=max_model_len)

    def min_length_end_ids(self, stop: Sequence[str]) -> tuple[int, ...]:
        """EOS and the single-token stop strings (MinNewTokensLengthLogitsProcessor's ids)."""
        return min_length_end_ids(self.policy, self.tokenizer, stop)

    def sync_weights(self, policy: torch.nn.Module) -> None:
        """Sample from `policy` from now on; the weights are shared, so nothing is copied."""
        self.policy = policy

    def _generate(
        self, prompts: list[str], n: int, sampling: SamplingSettings
    ) -> list[list[Rollout]]:
        """Sample `n` responses per prompt; returns len(prompts) groups of `n` Rollouts."""
        prompt_ids = self.tokenizer(list(prompts))["input_ids"]
        for ids in prompt_ids:
            if len(ids) >= self.max_model_len:
                raise ValueError(
                    f"a prompt has {len(ids)} tokens, max_model_len is {self.max_model_len}"
                )
        sequences = [ids for ids in prompt_ids for _ in range(n)]
        device = next(self.policy.parameters()).device
        rollouts: list[Rollout] = []
        with _seeded(sampling.seed, device), _eval_mode(self.policy), torch.inference_mode():
            for start in range(0, len(sequences), self.batch_size):
                chunk = sequences[start : start + self.batch_size]
                rollouts.extend(self._generate_chunk(chunk, sampling, device))
        return [rollouts[i * n : (i + 1) * n] for i in range(len(prompt_ids))]

    def _generate_chunk(
        self, prompt_ids: list[list[int]], sampling: SamplingSettings, device: torch.device
    ) -> list[Rollout]:
        """Generate one response for each of the B prompts in `prompt_ids` (token-id lists)."""
        tok = self.tokenizer
        eos_ids = eos_token_ids(self.policy, tok)
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else eos_ids[0]
        stop_token_ids, stop_strings = _split_stops(tok, sampling.stop)

        width = max(len(ids) for ids in prompt_ids)
        input_ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
        for row, ids in enumerate(prompt_ids):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids) :] = 1
        # Per-sequence response budget: prompt + response must fit in max_model_len.
        budgets = [
            min(sampling.max_new_tokens, self.max_model_len - len(ids)) for ids in prompt_ids
        ]

        do_sample = sampling.temperature > 0
        recorder = _SampledTokenLogProbs()
        processors: list[LogitsProcessor] = []
        if sampling.min_new_tokens > 0:
            processors.append(
                MinNewTokensLengthLogitsProcessor(
                    prompt_length_to_skip=width,
                    min_new_tokens=sampling.min_new_tokens,
                    eos_token_id=eos_ids + stop_token_ids,
                    device=str(device),
                )
            )
        if do_sample and sampling.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(sampling.temperature))
        if do_sample and sampling.top_p < 1.0:
            processors.append(TopPLogitsWarper(sampling.top_p))
        processors.append(recorder)  # last: it sees the distribution the token is drawn from

        sequences = self.policy.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            generation_config=_neutral_generation_config(
                max_new_tokens=max(budgets),
                do_sample=do_sample,
                eos_token_id=eos_ids + stop_token_ids,
                pad_token_id=pad_id,
            ),
            logits_processor=LogitsProcessorList(processors),
            stopping_criteria=StoppingCriteriaList(
                [_StopStrings(stop_strings, tok, width)] if stop_strings else []
            ),
        )
        new_tokens = sequences[:, width:].cpu()
        log_probs = recorder.finish(new_tokens).cpu()
        return [
            _to_rollout(
                new_tokens[row].tolist()[: budgets[row]],
                log_probs[row].tolist()[: budgets[row]],
                set(eos_ids),
                set(stop_token_ids),
                sampling.stop,
                tok,
            )
            for row in range(len(prompt_ids))
        ]


class _SampledTokenLogProbs(LogitsProcessor):
    """Last processor of the list: sees the scores (B, V) every step samples from (min-length
    mask, temperature and top-p applied, as vLLM's processed log-probs), and keeps the
    natural-log probability of the token sampled at that step, float32; it returns the scores
    unchanged.

    The token sampled at step t is only known at step t + 1 (as the last column of `input_ids`),
    so one (B, V) log-softmax is held back; `finish` gathers the last step. Memory is O(B * V)
    instead of the O(B * T * V) of `generate(output_logits=True)`.
    """

    def __init__(self) -> None:
        self._steps: list[torch.Tensor] = []
        self._pending: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._pending is not None:
            self._steps.append(self._pending.gather(1, input_ids[:, -1:]).squeeze(1))
        self._pending = torch.log_softmax(scores.float(), dim=-1)
        if torch.isnan(self._pending).any():
            raise NonFiniteLogitsError("the policy's logits hold NaN or inf")
        return scores

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """The (B, T) log-probs of the generated tokens `new_tokens` (B, T)."""
        if self._pending is not None:
            last = new_tokens[:, -1:].to(self._pending.device)
            self._steps.append(self._pending.gather(1, last).squeeze(1))
            self._pending = None
        if len(self._steps) != new_tokens.shape[1]:
            raise RuntimeError(
                f"recorded {len(self._steps)} steps of log-probs for "
                f"{new_tokens.shape[1]} generated tokens"
            )
        return torch.stack(self._steps, dim=1)


class _StopStrings(StoppingCriteria):
    """Ends a row once the decoded text of its last generated tokens holds a stop string.

    Used for stop strings of several tokens. Only a window of max(len(stop)) + 8 tokens is
    decoded per row and step (a token decodes to at least one character, except special tokens
    and partial UTF-8 bytes). Unlike `generate(stop_strings=...)`, it needs nothing from the
    tokenizer but `batch_decode`, so it also works with the tiny model's character tokenizer.
    """

    def __init__(
        self, stops: list[str], tokenizer: PreTrainedTokenizerBase, prompt_width: int
    ) -> None:
        self.stops = stops
        self.tokenizer = tokenizer
        self.prompt_width = prompt_width
        self.window = max(len(s) for s in stops) + 8

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: object
    ) -> torch.BoolTensor:
        tails = input_ids[:, self.prompt_width :][:, -self.window :].tolist()
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=True)
        done = [_first_stop_end(text, self.stops) is not None for text in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def _neutral_generation_config(
    *,
    max_new_tokens: int,
    do_sample: bool,
    eos_token_id: list[int],
    pad_token_id: int,
) -> GenerationConfig:
    """A generation config whose only processing is stopping.

    `generate` fills unset (None) fields from the checkpoint's generation config, so every knob
    that would add a logits processor is set to its neutral value; the sampling warpers (which
    `generate` only applies when sampling) only then, to avoid warnings about unused flags.
    """
    warpers = (
        {
            "temperature": 1.0,
            "top_k": 0,
            "top_p": 1.0,
            "min_p": 0.0,
            "typical_p": 1.0,
            "epsilon_cutoff": 0.0,
            "eta_cutoff": 0.0,
        }
        if do_sample
        else {}
    )
    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        do_sample=do_sample,
        num_beams=1,
        repetition_penalty=1.0,
        encoder_repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        renormalize_logits=False,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        use_cache=True,
        return_dict_in_generate=False,
        **warpers,
    )


def _to_rollout(
    tokens: list[int],
    log_probs: list[float],
    eos_ids: set[int],
    stop_token_ids: set[int],
    stops: Sequence[str],
    tokenizer: PreTrainedTokenizerBase,
) -> Rollout:
    """One Rollout from the generated `tokens` of a row (cut to its budget) and their log-probs.

    The response ends before the first EOS token, or after the first single-token stop; the
    text is cut after the first stop string and the tokens after the token that completes it.
    """
    finish_reason = "length"
    for i, token in enumerate(tokens):
        if token in eos_ids:
            tokens, finish_reason = tokens[:i], "stop"
            break
        if token in stop_token_ids:
            tokens, finish_reason = tokens[: i + 1], "stop"
            break
    text = tokenizer.decode(tokens, skip_special_tokens=True)
    end = _first_stop_end(text, stops)
    if end is not None:
        text, finish_reason = text[:end], "stop"
        tokens = tokens[: _tokens_to_complete(tokens, stops, tokenizer)]
    return Rollout(
        text=text,
        token_ids=tokens,
        log_probs=log_probs[: len(tokens)],
        finish_reason=finish_reason,
    )


def _first_stop_end(text: str, stops: Sequence[str]) -> int | None:
    """End offset in `text` of the stop string that completes first, or None if none occurs."""
    ends = [text.find(s) + len(s) for s in stops if s and s in text]
    return min(ends) if ends else None


def _tokens_to_complete(
    tokens: list[int], stops: Sequence[str], tokenizer: PreTrainedTokenizerBase
) -> int:
    """Fewest leading tokens of `tokens` whose decoded text contains a stop string (it is known
    that all of them do); binary search, since a longer prefix keeps a completed stop string."""
    contains = _PrefixHasStop(tokens, stops, tokenizer)
    return bisect.bisect_left(contains, True, lo=1, hi=len(tokens))


class _PrefixHasStop(Sequence[bool]):
    """Lazy sequence: item k is whether the first k tokens decode to text holding a stop string."""

    def __init__(
        self, tokens: list[int], stops: Sequence[str], tokenizer: PreTrainedTokenizerBase
    ) -> None:
        self._tokens, self._stops, self._tokenizer = tokens, stops, tokenizer

    def __len__(self) -> int:
        return len(self._tokens) + 1

    def __getitem__(self, k: int) -> bool:  # type: ignore[override]
        text = self._tokenizer.decode(self._tokens[:k], skip_special_tokens=True)
        return _first_stop_end(text, self._stops) is not None


def min_length_end_ids(
    policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, stop: Sequence[str]
) -> tuple[int, ...]:
    """The ids `_generate_chunk` masks before min_new_tokens: EOS ids and single-token stops."""
    return tuple(eos_token_ids(policy, tokenizer) + _split_stops(tokenizer, stop)[0])


def eos_token_ids(policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The tokenizer's EOS id followed by any other EOS ids of the policy's generation config."""
    ids = [tokenizer.eos_token_id]
    configured = getattr(getattr(policy, "generation_config", None), "eos_token_id", None)
    if configured is not None:
        for token in [configured] if isinstance(configured, int) else configured:
            if token not in ids:
                ids.append(token)
    return ids


def _split_stops(
    tokenizer: PreTrainedTokenizerBase, stops: Sequence[str]
) -> tuple[list[int], list[str]]:
    """Split stop strings into single-token stops (ids, which end generation like an EOS but are
    kept) and multi-token ones (handled by `_StopStrings`). A stop the tokenizer cannot encode
    (a character outside the tiny model's vocabulary) is matched as text: the model never writes
    it, so it never stops a response."""
    token_ids: list[int] = []
    strings: list[str] = []
    for stop in stops:
        try:
            ids = tokenizer.encode(stop, add_special_tokens=False)
        except Exception:  # noqa: BLE001 -- tokenizers' errors have no common type
            strings.append(stop)
            continue
        if len(ids) == 1 and tokenizer.decode(ids) == stop:
            token_ids.append(ids[0])
        else:
            strings.append(stop)
    return token_ids, strings


@contextmanager
def _eval_mode(module: torch.nn.Module) -> Iterator[None]:
    """Put `module` in eval mode for the block and restore each submodule's training flag."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def _seeded(seed: int | None, device: torch.device) -> AbstractContextManager[None]:
    """A context in which the CPU RNG and `device`'s RNG are seeded with `seed`, inside a fork
    so the global RNG streams are untouched afterwards; no-op when `seed` is None."""
    if seed is None:
        return nullcontext()
    return _forked_rng(seed, device)


@contextmanager
def _forked_rng(seed: int, device: torch.device) -> Iterator[None]:
    cuda_devices = [device.index] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda_devices, device_type="cuda"):
        torch.random.default_generator.manual_seed(seed)
        if cuda_devices:
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        yield
