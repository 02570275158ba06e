"""A step's rollouts as the learner reads them (grpo.training.rollouts): flattened group by group,
scored into rewards and group-normalized advantages, tokenized, and handed out as micro-batches
of rows trimmed after their last response token. Expected values from the definitions."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from grpo.data.datasets import Example
from grpo.data.prompts import reward_fn_for
from grpo.models.loading import load_policy
from grpo.rollout.base import Rollout, SamplingSettings
from grpo.training.overlap import GeneratedBatch, RolloutRequest
from grpo.training.rollouts import RolloutBatch, flatten, score
from grpo.training.timing import PhaseTimer

CPU = torch.device("cpu")


def small_batch() -> RolloutBatch:
    """Three rows of width 6: responses at columns 1-2, 2-4 and 1 (last response tokens at 2, 4
    and 1: lengths 3, 5 and 2)."""
    mask = torch.tensor([[0, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 0], [0, 1, 0, 0, 0, 0]], dtype=torch.float32)
    ids = torch.arange(18).view(3, 6)
    return RolloutBatch(input_ids=ids, labels=ids + 100, response_mask=mask,
                        advantages=torch.tensor([1.0, -1.0, 0.5]), raw_rewards=torch.tensor([1.0, 0.0, 0.5]),
                        order=torch.tensor([2, 0, 1]),
                        old_log_probs=-torch.arange(18.0).view(3, 6),
                        importance_weights=torch.arange(18.0).view(3, 6) / 10,
                        behaviour_log_probs=torch.full((3, 6), -2.0))


def test_row_lengths_run_to_the_last_response_token() -> None:
    """The width a row takes in a micro-batch (what the token budget packs by): its last
    response position + 1, padding after it not counted, prompt before it counted."""
    batch = small_batch()
    assert batch.lengths(torch.tensor([0, 1, 2])) == [3, 5, 2]
    assert batch.lengths(batch.order) == [2, 3, 5]
    assert batch.lengths(torch.tensor([1])) == [5]


def test_rows_are_trimmed_after_their_last_response_token_with_per_row_columns() -> None:
    batch = small_batch()
    picked = batch.rows(torch.tensor([2, 0]))
    assert {k: tuple(v.shape) for k, v in picked.items()} == {
        "input_ids": (2, 3), "labels": (2, 3), "response_mask": (2, 3), "advantages": (2, 1),
        "raw_rewards": (2, 1), "old_log_probs": (2, 3), "importance_weights": (2, 3),
        "behaviour_log_probs": (2, 3)}
    assert picked["input_ids"].tolist() == [[12, 13, 14], [0, 1, 2]]
    assert picked["labels"].tolist() == [[112, 113, 114], [100, 101, 102]]
    # rewards and advantages are (n, 1): one per row, broadcast over its tokens by the loss
    assert picked["raw_rewards"].tolist() == [[0.5], [1.0]]
    assert picked["advantages"].tolist() == [[0.5], [1.0]]
    assert picked["old_log_probs"].tolist() == [[-12.0, -13.0, -14.0], [-0.0, -1.0, -2.0]]
    assert picked["importance_weights"][1].tolist() == pytest.approx([0.0, 0.1, 0.2])
    assert batch.rows(torch.tensor([1]))["response_mask"].tolist() == [[0, 0, 1, 1, 1]]
    # a row without a response token (only special tokens were sampled) keeps the full width
    batch.response_mask[2] = 0
    assert batch.rows(torch.tensor([2]))["input_ids"].tolist() == [[12, 13, 14, 15, 16, 17]]
    assert batch.lengths(torch.tensor([2, 0])) == [0, 3]
    plain = RolloutBatch(batch.input_ids, batch.labels, batch.response_mask, batch.advantages,
                         batch.raw_rewards, batch.order)
    assert plain.rows(torch.tensor([0])).keys() == {"input_ids", "labels", "response_mask",
                                                    "advantages", "raw_rewards"}


def generated() -> GeneratedBatch:
    """Two questions, groups of 3: responses with 4, 2, 7 and 3, 3, 1 sampled tokens."""
    questions = [Example("1+2", "3"), Example("2+2", "4")]
    request = RolloutRequest(5, questions, ["Q: 1+2 A:", "Q: 2+2 A:"],
                             SamplingSettings(temperature=1.0, top_p=1.0, min_new_tokens=0,
                                              max_new_tokens=8, seed=0))
    groups = [[Rollout(" <answer>3</answer>", [1, 2, 3, 4]), Rollout(" 3", [5, 6]),
               Rollout(" <answer>4</answer>", [1, 2, 3, 4, 5, 6, 7])],
              [Rollout(" <answer>4</answer>", [1, 2, 3]), Rollout(" <answer>4</answer>", [1, 2, 3]),
               Rollout(" <answer>4</answer>", [9])]]
    return GeneratedBatch(request, groups, policy_version=3, generate_s=0.25)


def test_flatten_lists_rollouts_group_by_group_with_their_prompt_and_answer() -> None:
    batch = generated()
    prompts, rollouts, truths = flatten(batch, 3)
    assert prompts == ["Q: 1+2 A:"] * 3 + ["Q: 2+2 A:"] * 3
    assert truths == ["3"] * 3 + ["4"] * 3
    assert [r.token_ids for r in rollouts] == [g.token_ids for group in batch.groups for g in group]
    assert batch.staleness() == 5 - 1 - 3


def test_score_gives_group_normalized_advantages_the_training_order_and_the_response_length(
        tiny_model_dir: Path) -> None:
    """Group 1 rewards [1, 0, 0] (mean 1/3, sample std 0.57735), group 2 [1, 1, 1] (advantage
    exactly 0); train/mean_response_length is the mean of the sampled token counts (20 / 6), not
    of the re-tokenized text."""
    model_cfg = OmegaConf.create({"name": "tiny", "path": str(tiny_model_dir), "precision": "32-true",
                                  "attn_implementation": None, "gradient_checkpointing": False})
    _, tokenizer = load_policy(model_cfg, CPU)
    prompts, rollouts, truths = flatten(generated(), 3)
    timer = PhaseTimer(CPU)
    batch, metrics = score(prompts, rollouts, truths, reward_fn_for("toy"), tokenizer, group_size=3,
                           advantage_eps=1e-6, normalize_by_std=True, seed=9, step=3,
                           reward={"name": "graded"}, device=CPU, timer=timer)
    std = statistics.stdev([1.0, 0.0, 0.0])
    expected = [(r - 1 / 3) / (std + 1e-6) for r in (1.0, 0.0, 0.0)] + [0.0] * 3
    assert batch.advantages.tolist() == pytest.approx(expected, rel=1e-5)
    assert batch.advantages.shape == batch.raw_rewards.shape == (6,)
    assert batch.raw_rewards.tolist() == [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    # the order of step 3 of seed 9: drawn with seed + step - 1
    assert batch.order.tolist() == torch.randperm(6, generator=torch.Generator().manual_seed(11)).tolist()
    assert metrics["train/mean_response_length"] == pytest.approx(20 / 6)
    assert metrics["train/reward_mean"] == pytest.approx(4 / 6)
    assert metrics["train/frac_zero_std_groups"] == pytest.approx(0.5)
    assert "time/scoring_s" in timer.metrics
    # the response mask covers each response's own tokens after its prompt
    for row, (prompt, rollout) in enumerate(zip(prompts, rollouts, strict=True)):
        n_prompt = len(tokenizer(prompt)["input_ids"])
        n_response = len(tokenizer(prompt + rollout.text)["input_ids"]) - n_prompt
        assert batch.response_mask[row].sum() == n_response
        assert batch.response_mask[row, n_prompt - 1 : n_prompt - 1 + n_response].all()
    assert batch.response_mask.dtype == torch.float32
    assert batch.old_log_probs is None and batch.importance_weights is None
    # without the std: only the group mean is subtracted
    plain, _ = score(prompts, rollouts, truths, reward_fn_for("toy"), tokenizer, group_size=3,
                     advantage_eps=1e-6, normalize_by_std=False, seed=9, step=3,
                     reward={"name": "graded"}, device=CPU, timer=timer)
    assert plain.advantages.tolist() == pytest.approx([2 / 3, -1 / 3, -1 / 3, 0, 0, 0], abs=1e-6)


def test_only_single_numbers_of_the_reward_metadata_become_metrics() -> None:
    from grpo.training.rollouts import _is_number

    assert _is_number(1) and _is_number(0.5) and _is_number(torch.tensor(2.0))
    assert not _is_number(torch.zeros(2)) and not _is_number("0.5") and not _is_number([1.0])
