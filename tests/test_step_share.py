"""Micro-batches of any size (grpo.core.train_step.grpo_share_train_step): the optimizer step's
gradient is the same whatever the partition, and whichever zero-advantage sequences are left out
for the losses that are 0 at zero advantage, for every length normalization (the prompt-level one
with the rows of a prompt's group split across micro-batches); the registry's flag is checked
numerically; the prompt-level normalization against its definition."""

from __future__ import annotations

import pytest
import torch

from grpo import LENGTH_NORMALIZATIONS, POLICY_LOSSES, grpo_microbatch_train_step
from grpo.core.train_step import grpo_share_train_step, optimizer_step_totals

B, T = 8, 7
LENGTHS = [7, 1, 4, 6, 2, 7, 3, 5]  # response tokens per sequence: unequal, so normalizations differ
# the prompt each row answers: the step's rows are shuffled one by one, so a prompt's rows are
# scattered and every partition below splits some group across micro-batches; groups of 3, 3 and
# 2 rows holding 7+1+7=15, 4+2+5=11 and 6+3=9 tokens
PROMPTS = torch.tensor([0, 0, 1, 2, 1, 0, 2, 1])
NORMALIZATIONS = list(LENGTH_NORMALIZATIONS)
HYPERPARAMETERS = {"grpo_clip": {"cliprange": 0.2},
                   "grpo_clip_higher": {"cliprange_low": 0.2, "cliprange_high": 0.28},
                   # ranges the off-policy batch's ratios cross (test_the_bounds_bind_off_policy)
                   "gspo": {"cliprange_low": 0.05, "cliprange_high": 0.08},
                   "cispo": {"ratio_cap": 1.2, "ratio_floor": 0.8}}
PARTITIONS = {
    "whole": [list(range(B))],
    "equal halves": [[0, 1, 2, 3], [4, 5, 6, 7]],
    "unequal, reordered": [[6], [7, 0, 3], [2, 5, 1, 4]],
}


def batch(off_policy: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """Per-token log-probs, a right-aligned response mask of LENGTHS, rewards, advantages with two
    zeros, and old log-probs (equal to the policy's on-policy, shifted off-policy)."""
    generator = torch.Generator().manual_seed(seed)
    log_probs = -torch.rand(B, T, generator=generator, dtype=torch.float64).float() * 3
    mask = torch.zeros(B, T)
    for row, n in enumerate(LENGTHS):
        mask[row, T - n:] = 1
    advantages = torch.tensor([[1.2], [0.0], [-0.7], [0.4], [-1.5], [0.0], [0.9], [-0.3]])
    old = log_probs + (0.3 * torch.randn(B, T, generator=generator) if off_policy else 0.0)
    return {"log_probs": log_probs, "mask": mask, "advantages": advantages,
            "raw_rewards": (advantages > 0).float(), "old_log_probs": old}


def step_gradient(loss_type: str, normalization: str, data: dict, micro_batches: list[list[int]],
                  counted: list[int] | None = None) -> tuple[torch.Tensor, float]:
    """d(optimizer-step loss)/d(log-probs) and the step's loss, the rows trained in
    `micro_batches`; `counted` (default: every row) are the rows the step's totals count."""
    counted = list(range(B)) if counted is None else counted
    totals, counted_prompt_tokens = optimizer_step_totals(data["mask"][counted], PROMPTS[counted])
    prompt_tokens = torch.zeros(B)
    prompt_tokens[counted] = counted_prompt_tokens
    leaf = data["log_probs"].clone().requires_grad_(True)
    step_loss = 0.0
    for rows in micro_batches:
        index = torch.tensor(rows)
        loss, _ = grpo_share_train_step(
            leaf[index], data["mask"][index], loss_type, totals,
            raw_rewards=data["raw_rewards"][index], advantages=data["advantages"][index],
            old_log_probs=data["old_log_probs"][index], length_normalization=normalization,
            normalize_constant=T, prompt_tokens=prompt_tokens[index],
            **HYPERPARAMETERS.get(loss_type, {}),
        )
        step_loss += loss.item()
    return leaf.grad, step_loss


@pytest.mark.parametrize("off_policy", [False, True], ids=["on-policy", "off-policy"])
@pytest.mark.parametrize("normalization", NORMALIZATIONS)
@pytest.mark.parametrize("loss_type", list(POLICY_LOSSES))
def test_the_step_gradient_is_the_same_for_every_partition(loss_type, normalization, off_policy):
    data = batch(off_policy)
    grads = {name: step_gradient(loss_type, normalization, data, parts)
             for name, parts in PARTITIONS.items()}
    whole, whole_loss = grads["whole"]
    assert whole.abs().sum() > 0
    for name, (grad, loss) in grads.items():
        torch.testing.assert_close(grad, whole, rtol=1e-6, atol=1e-7, msg=name)
        assert loss == pytest.approx(whole_loss, rel=1e-6, abs=1e-7), name


@pytest.mark.parametrize("normalization", [n for n in NORMALIZATIONS if n != "prompt"])
@pytest.mark.parametrize("loss_type", list(POLICY_LOSSES))
def test_one_micro_batch_of_the_whole_step_is_the_cs336_step(loss_type, normalization):
    data = batch(off_policy=True)
    grad, loss = step_gradient(loss_type, normalization, data, PARTITIONS["whole"])
    leaf = data["log_probs"].clone().requires_grad_(True)
    reference, _ = grpo_microbatch_train_step(
        leaf, data["mask"], 1, loss_type, raw_rewards=data["raw_rewards"],
        advantages=data["advantages"], old_log_probs=data["old_log_probs"],
        length_normalization=normalization, normalize_constant=T,
        batch_response_tokens=int(data["mask"].sum()), **HYPERPARAMETERS.get(loss_type, {}),
    )
    torch.testing.assert_close(grad, leaf.grad, rtol=1e-6, atol=1e-7)
    assert loss == pytest.approx(reference.item(), rel=1e-6)


@pytest.mark.parametrize("normalization", ["mean", "constant"])
def test_unequal_micro_batches_through_the_cs336_step_would_weight_sequences_unequally(normalization):
    # why the trainer needs the share: dividing each micro-batch mean by the number of
    # micro-batches weights a sequence of a 1-sequence micro-batch 3x one of a 3-sequence one
    data = batch(off_policy=False)
    expected, _ = step_gradient("reinforce_with_baseline", normalization, data, PARTITIONS["whole"])
    leaf = data["log_probs"].clone().requires_grad_(True)
    for rows in PARTITIONS["unequal, reordered"]:
        index = torch.tensor(rows)
        grpo_microbatch_train_step(leaf[index], data["mask"][index], 3, "reinforce_with_baseline",
                                   advantages=data["advantages"][index],
                                   length_normalization=normalization, normalize_constant=T)
    assert not torch.allclose(leaf.grad, expected, rtol=1e-3)


ZERO_ADVANTAGE_ROWS = [1, 5]
KEPT = [row for row in range(B) if row not in ZERO_ADVANTAGE_ROWS]


@pytest.mark.parametrize("off_policy", [False, True], ids=["on-policy", "off-policy"])
@pytest.mark.parametrize("normalization", NORMALIZATIONS)
@pytest.mark.parametrize("loss_type", [n for n, loss in POLICY_LOSSES.items()
                                       if loss.zero_at_zero_advantage])
def test_leaving_out_zero_advantage_sequences_keeps_the_gradient(loss_type, normalization,
                                                                 off_policy):
    data = batch(off_policy)
    full, full_loss = step_gradient(loss_type, normalization, data, [list(range(B))])
    for parts in ([KEPT], [KEPT[:2], KEPT[2:]]):
        skipped, loss = step_gradient(loss_type, normalization, data, parts)
        torch.testing.assert_close(skipped, full, rtol=1e-6, atol=1e-7)
        assert loss == pytest.approx(full_loss, rel=1e-6, abs=1e-7)
    # the totals must still count them: counting only the trained rows changes the gradient
    # (for every normalization: "microbatch"'s longest response is a left-out one here)
    miscounted, _ = step_gradient(loss_type, normalization, data, [KEPT], counted=KEPT)
    # ("prompt": a miscount moves the divisor of the trained rows of the left-out rows' prompt)
    sharing = [row for row in KEPT if PROMPTS[row] in PROMPTS[ZERO_ADVANTAGE_ROWS]]
    if normalization == "prompt" and bool((full[sharing] == 0).all()):
        # GSPO's clip off-policy cuts row 0, the one trained row of prompt 0 (rows 1 and 5 are
        # left out): its divisor weighs nothing here, the other losses' and modes' show it
        assert (loss_type, off_policy, sharing) == ("gspo", True, [0])
    else:
        assert not torch.allclose(miscounted, full, rtol=1e-4)


def test_no_baseline_is_not_zero_at_zero_advantage_and_must_not_be_skipped():
    assert not POLICY_LOSSES["no_baseline"].zero_at_zero_advantage
    data = batch(off_policy=False)
    data["raw_rewards"][ZERO_ADVANTAGE_ROWS] = 1.0  # all-correct groups: advantage 0, reward 1
    full, _ = step_gradient("no_baseline", "mean", data, [list(range(B))])
    skipped, _ = step_gradient("no_baseline", "mean", data, [KEPT])
    assert not torch.allclose(skipped, full)


@pytest.mark.parametrize("loss_type", list(POLICY_LOSSES))
def test_the_registry_flag_says_what_the_loss_does_at_zero_advantage(loss_type):
    data = batch(off_policy=True, seed=3)
    leaf = data["log_probs"].clone().requires_grad_(True)
    loss = POLICY_LOSSES[loss_type]
    given = {"raw_rewards": torch.ones(B, 1), "advantages": torch.zeros(B, 1),
             "old_log_probs": data["old_log_probs"], "response_mask": data["mask"],
             **HYPERPARAMETERS.get(loss_type, {})}
    out = loss.fn(policy_log_probs=leaf, **{p: given[name] for name, p in loss.inputs.items()})
    per_token = out[0] if isinstance(out, tuple) else out
    per_token.sum().backward()
    vanishes = bool((per_token == 0).all()) and bool((leaf.grad == 0).all())
    assert vanishes == loss.zero_at_zero_advantage


def test_the_bounds_bind_off_policy():
    """The exactness tests above run GSPO's clip and CISPO's cap where they bind: on the
    off-policy batch GSPO clips some sequences but not all, CISPO truncates some tokens' weights
    but not all (so a partition that split a sequence's ratio, or a cap applied per micro-batch,
    would show)."""
    data = batch(off_policy=True)
    leaf = data["log_probs"].clone().requires_grad_(True)
    _, gspo = grpo_microbatch_train_step(
        leaf, data["mask"], 1, "gspo", advantages=data["advantages"],
        old_log_probs=data["old_log_probs"], **HYPERPARAMETERS["gspo"])
    _, cispo = grpo_microbatch_train_step(
        leaf, data["mask"], 1, "cispo", advantages=data["advantages"],
        old_log_probs=data["old_log_probs"], **HYPERPARAMETERS["cispo"])
    assert 0 < gspo["clip_fraction"].item() < 1
    assert 0 < cispo["cap_fraction"].item() < 1
def test_the_step_totals_count_each_prompts_tokens_over_the_whole_step():
    mask = batch(off_policy=False)["mask"]
    totals, prompt_tokens = optimizer_step_totals(mask, PROMPTS)
    assert (totals.sequences, totals.response_tokens, totals.longest_response, totals.prompts) == (
        8, 35, 7, 3)
    assert prompt_tokens.tolist() == [15, 15, 11, 9, 11, 15, 9, 11]
    # the ids are labels, not positions: any integers, in any order
    _, relabelled = optimizer_step_totals(mask, PROMPTS * 7 + 40)
    assert relabelled.tolist() == prompt_tokens.tolist()
    # a step that holds part of a group counts the part it holds
    part, part_tokens = optimizer_step_totals(mask[[0, 2, 3]], PROMPTS[[0, 2, 3]])
    assert part.prompts == 3 and part_tokens.tolist() == [7, 4, 6]


def prompt_level_reference(per_token: torch.Tensor, mask: torch.Tensor,
                           prompts: torch.Tensor) -> torch.Tensor:
    """ScaleRL's prompt-level average from its definition: for each prompt, the sum of the
    per-token losses of all of its responses' tokens over their number; the mean over prompts."""
    means = []
    for prompt in sorted(set(prompts.tolist())):
        rows = [i for i in range(len(prompts)) if prompts[i] == prompt]
        tokens = [(i, t) for i in rows for t in range(mask.shape[1]) if mask[i, t]]
        means.append(sum(per_token[i, t] for i, t in tokens) / len(tokens))
    return sum(means) / len(means)


def test_prompt_normalization_is_the_mean_over_prompts_of_each_prompts_token_mean():
    data = batch(off_policy=False)
    grads = {}
    for normalization in ("prompt", "token", "mean"):
        grads[normalization], loss = step_gradient("reinforce_with_baseline", normalization, data,
                                                   PARTITIONS["unequal, reordered"])
        if normalization == "prompt":
            prompt_loss = loss
    leaf = data["log_probs"].clone().requires_grad_(True)
    per_token = -data["advantages"] * leaf  # REINFORCE with baseline: -A log pi, each token
    reference = prompt_level_reference(per_token, data["mask"], PROMPTS)
    reference.backward()
    torch.testing.assert_close(grads["prompt"], leaf.grad, rtol=1e-6, atol=1e-8)
    assert prompt_loss == pytest.approx(reference.item(), rel=1e-6)
    # the inputs tell the axes apart: one mean over every token (token), the mean of each
    # sequence's mean (mean) and the mean over prompts of each prompt's sequence means all differ
    assert not torch.allclose(grads["token"], grads["prompt"], rtol=1e-3)
    assert not torch.allclose(grads["mean"], grads["prompt"], rtol=1e-3)
    leaf = data["log_probs"].clone().requires_grad_(True)
    per_token = -data["advantages"] * leaf
    per_sequence = [(per_token[i] * data["mask"][i]).sum() / data["mask"][i].sum() for i in range(B)]
    by_prompt = [torch.stack([per_sequence[i] for i in range(B) if PROMPTS[i] == p]).mean()
                 for p in range(3)]
    torch.stack(by_prompt).mean().backward()
    assert not torch.allclose(leaf.grad, grads["prompt"], rtol=1e-3)


def test_prompt_normalization_needs_the_optimizer_steps_counts():
    data = batch(off_policy=False)
    leaf = data["log_probs"].clone().requires_grad_(True)
    with pytest.raises(ValueError, match="use grpo_share_train_step with optimizer_step_totals"):
        grpo_microbatch_train_step(leaf, data["mask"], 1, "reinforce_with_baseline",
                                   advantages=data["advantages"], length_normalization="prompt")
    totals, prompt_tokens = optimizer_step_totals(data["mask"], PROMPTS)
    args = (leaf, data["mask"], "reinforce_with_baseline", totals)
    with pytest.raises(ValueError, match=r"needs prompt_tokens of shape \(8,\)"):
        grpo_share_train_step(*args, advantages=data["advantages"], length_normalization="prompt")
    without_prompts = type(totals)(totals.sequences, totals.response_tokens, totals.longest_response)
    with pytest.raises(ValueError, match="needs totals.prompts"):
        grpo_share_train_step(leaf, data["mask"], "reinforce_with_baseline", without_prompts,
                              advantages=data["advantages"], length_normalization="prompt",
                              prompt_tokens=prompt_tokens)
