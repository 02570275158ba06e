"""GRPO micro-batch train step: length normalizations, accumulation scaling, metadata."""

from __future__ import annotations

import math

import pytest
import torch

from grpo import grpo_microbatch_train_step, masked_mean, masked_normalize

LOG_PROBS = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]])
REWARDS = torch.tensor([[1.0], [0.5]])
MASK = torch.tensor([[1, 1, 1], [0, 0, 1]])
# per-token no_baseline loss -R * log p: row 0 [1, 2, 3] (3 response tokens), row 1 [2, 2.5, 3]
# (1 response token, the 3); masked sums 6 and 3; gradient_accumulation_steps = 2 below.


def step(length_normalization: str, **kwargs) -> tuple[float, torch.Tensor]:
    log_probs = LOG_PROBS.clone().requires_grad_(True)
    loss, _ = grpo_microbatch_train_step(
        log_probs,
        MASK,
        2,
        "no_baseline",
        raw_rewards=REWARDS,
        length_normalization=length_normalization,
        **kwargs,
    )
    return loss.item(), log_probs.grad


@pytest.mark.parametrize(
    ("normalization", "kwargs", "loss", "grad_row0", "grad_row1"),
    [
        # mean: (6/3 + 3/1) / 2 / 2; d/dlogp = -R / (n_i * batch * gas)
        ("mean", {}, 1.25, -1 / 12, -0.5 / 4),
        # constant 4: (6/4 + 3/4) / 2 / 2; d/dlogp = -R / (4 * 2 * 2)
        ("constant", {"normalize_constant": 4}, 0.5625, -1 / 16, -0.5 / 16),
        # microbatch: the longest response here has 3 tokens: (6/3 + 3/3) / 2 / 2
        ("microbatch", {}, 0.75, -1 / 12, -0.5 / 12),
        # token, micro-batch count: (6 + 3) / 4 tokens / 2
        ("token", {}, 1.125, -1 / 8, -0.5 / 8),
        # token, whole-batch count of 6 tokens: (6 + 3) / 6, no division by gas
        ("token", {"batch_response_tokens": 6}, 1.5, -1 / 6, -0.5 / 6),
    ],
)
def test_length_normalizations_hand_computed(normalization, kwargs, loss, grad_row0, grad_row1):
    got_loss, grad = step(normalization, **kwargs)
    assert got_loss == pytest.approx(loss)
    expected = torch.tensor([[grad_row0] * 3, [0.0, 0.0, grad_row1]])
    torch.testing.assert_close(grad, expected)


def test_default_is_the_cs336_reference():
    torch.manual_seed(0)
    log_probs = torch.randn(4, 7, requires_grad=True)
    old = log_probs.detach() + 0.3 * torch.randn(4, 7)
    mask = torch.rand(4, 7) > 0.4
    advantages = torch.randn(4, 1)
    loss, _ = grpo_microbatch_train_step(
        log_probs, mask, 3, "grpo_clip", advantages=advantages, old_log_probs=old, cliprange=0.2
    )
    ratio = torch.exp(log_probs.detach() - old)
    per_token = -torch.minimum(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages)
    assert loss.item() == pytest.approx((masked_mean(per_token, mask, dim=1).mean() / 3).item())


def test_handout_length_normalization_example():
    """CS336 handout, "Length normalization": responses of 4 and 7 tokens, advantage 2, ratio 1,
    max generation length 7. The handout differentiates the objective ratio * A; our loss is its
    negative, so the gradients below have the same magnitudes with a minus sign."""
    ratio = torch.ones(2, 7, requires_grad=True)
    advs = torch.full((2, 7), 2.0)
    masks = torch.tensor([[1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1]])
    per_seq_mean = masked_mean(ratio * advs, masks, dim=1)
    torch.testing.assert_close(per_seq_mean, torch.tensor([2.0, 2.0]))
    per_seq_mean.mean().backward()
    torch.testing.assert_close(ratio.grad, masks * torch.tensor([[0.25], [1 / 7]]))
    ratio.grad = None
    per_seq_sum = masked_normalize(ratio * advs, masks, dim=1, normalize_constant=7)
    torch.testing.assert_close(per_seq_sum, torch.tensor([8 / 7, 2.0]))  # [1.1429, 2.0]
    per_seq_sum.mean().backward()
    torch.testing.assert_close(ratio.grad, masks / 7.0)  # 0.1429 on every response token

    # the same through the train step (grpo_no_clip, policy == old so the ratio is 1)
    for normalization, kwargs, expected_grad in [
        ("mean", {}, -masks * torch.tensor([[0.25], [1 / 7]])),
        ("constant", {"normalize_constant": 7}, -masks / 7.0),
    ]:
        log_probs = torch.zeros(2, 7, requires_grad=True)
        loss, _ = grpo_microbatch_train_step(
            log_probs,
            masks,
            1,
            "grpo_no_clip",
            advantages=torch.tensor([[2.0], [2.0]]),
            old_log_probs=torch.zeros(2, 7),
            length_normalization=normalization,
            **kwargs,
        )
        torch.testing.assert_close(log_probs.grad, expected_grad)
        assert loss.item() == pytest.approx(-2.0 if normalization == "mean" else -(8 / 7 + 2) / 2)


def test_metadata_ratio_kl_and_clip_fraction_over_response_tokens_only():
    # log ratios; the masked-out positions hold large values that must not count
    log_ratio = torch.tensor([[math.log(2.0), 0.0, 5.0], [math.log(0.5), 3.0, 3.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    old = torch.full((2, 3), -1.0)
    advantages = torch.tensor([[1.0], [1.0]])
    common = {"advantages": advantages, "old_log_probs": old}

    log_probs = (old + log_ratio).requires_grad_(True)
    _, meta = grpo_microbatch_train_step(log_probs, mask, 1, "reinforce_with_baseline", **common)
    # response-token ratios 2, 1, 0.5: mean 3.5 / 3; k3 = (r - 1) - ln r: 1 - ln 2, 0, ln 2 - 0.5
    assert meta["mean_ratio"].item() == pytest.approx(3.5 / 3)
    assert meta["approx_kl"].item() == pytest.approx(0.5 / 3)
    assert meta["clip_fraction"].item() == 0.0

    log_probs = (old + log_ratio).requires_grad_(True)
    _, meta = grpo_microbatch_train_step(log_probs, mask, 1, "grpo_clip", cliprange=0.2, **common)
    # A = +1: only ratio 2 is clipped (1.2 < 2); ratio 0.5 keeps the unclipped 0.5 < 0.8
    assert meta["clip_fraction"].item() == pytest.approx(1 / 3)
    assert all(v.dim() == 0 and not v.requires_grad for v in meta.values())

    log_probs = LOG_PROBS.clone().requires_grad_(True)
    _, meta = grpo_microbatch_train_step(log_probs, MASK, 1, "no_baseline", raw_rewards=REWARDS)
    assert "mean_ratio" not in meta and "clip_fraction" not in meta


def test_sequence_without_response_tokens_does_not_make_the_loss_nan():
    log_probs = LOG_PROBS.clone().requires_grad_(True)
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])
    loss, _ = grpo_microbatch_train_step(log_probs, mask, 1, "no_baseline", raw_rewards=REWARDS)
    assert loss.item() == pytest.approx(2.0 / 2)  # row 0 mean 2, row 1 contributes 0
    assert torch.isfinite(log_probs.grad).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"length_normalization": "constant"}, "needs normalize_constant"),
        ({"length_normalization": "seq"}, "unknown length_normalization 'seq'"),
        ({"length_normalization": "token", "batch_response_tokens": 0}, "must be positive"),
        ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps must be >= 1"),
        ({"response_mask": MASK[:, :2]}, "same"),
    ],
)
def test_rejects_bad_arguments(kwargs, message):
    args = {
        "policy_log_probs": LOG_PROBS.clone().requires_grad_(True),
        "response_mask": MASK,
        "gradient_accumulation_steps": 1,
        "loss_type": "no_baseline",
        "raw_rewards": REWARDS,
    }
    with pytest.raises(ValueError, match=message):
        grpo_microbatch_train_step(**{**args, **kwargs})


# ---- gradient accumulation equivalence -------------------------------------------------------

BATCH, SEQ, DIM, VOCAB = 8, 6, 5, 7
RESPONSE_LENGTHS = [6, 1, 2, 3, 1, 2, 5, 4]  # micro-batches of 2: longest 6, 3, 2, 5


def rollout_batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    mask = torch.zeros(BATCH, SEQ)
    for row, length in enumerate(RESPONSE_LENGTHS):
        mask[row, SEQ - length :] = 1.0  # prompt first, response at the end
    return {
        "features": torch.randn(BATCH, SEQ, DIM, generator=gen),
        "labels": torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen),
        "mask": mask,
        "advantages": torch.randn(BATCH, 1, generator=gen),
        "old_noise": 0.2 * torch.randn(BATCH, SEQ, generator=gen),
    }


def accumulated_gradient(normalization: str, loss_type: str, micro_batch_size: int) -> torch.Tensor:
    """Gradient of a shared linear policy after one optimizer step's worth of micro-batches."""
    data = rollout_batch()
    weight = torch.nn.Parameter(torch.randn(DIM, VOCAB, generator=torch.Generator().manual_seed(1)))
    gas = BATCH // micro_batch_size
    batch_tokens = int(data["mask"].sum())
    for start in range(0, BATCH, micro_batch_size):
        rows = slice(start, start + micro_batch_size)
        logits = data["features"][rows] @ weight
        log_probs = torch.log_softmax(logits, -1).gather(-1, data["labels"][rows, :, None])[..., 0]
        grpo_microbatch_train_step(
            log_probs,
            data["mask"][rows],
            gas,
            loss_type,
            advantages=data["advantages"][rows],
            old_log_probs=log_probs.detach() + data["old_noise"][rows],
            cliprange=0.2,
            length_normalization=normalization,
            normalize_constant=SEQ,
            batch_response_tokens=batch_tokens if normalization == "token" else None,
        )
    return weight.grad


@pytest.mark.parametrize("loss_type", ["reinforce_with_baseline", "grpo_clip"])
@pytest.mark.parametrize("normalization", ["mean", "constant", "token"])
def test_gradient_is_independent_of_micro_batching(normalization, loss_type):
    whole = accumulated_gradient(normalization, loss_type, micro_batch_size=BATCH)
    split = accumulated_gradient(normalization, loss_type, micro_batch_size=2)
    assert whole.abs().sum() > 0
    torch.testing.assert_close(split, whole)


def test_microbatch_normalization_depends_on_micro_batching():
    """ "microbatch" divides each sequence's sum by the longest response of its own micro-batch:
    6 for the whole batch, but 6, 3, 2 and 5 for the four micro-batches of 2, so the short-response
    micro-batches get larger per-token weights and the accumulated gradient changes."""
    whole = accumulated_gradient("microbatch", "reinforce_with_baseline", micro_batch_size=BATCH)
    split = accumulated_gradient("microbatch", "reinforce_with_baseline", micro_batch_size=2)
    assert not torch.allclose(split, whole, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize("ratio", [2.0, 0.5])
def test_approx_kl_is_the_k3_estimator_of_one_token(ratio):
    # one response token: k3 = (r - 1) - ln r, which is >= 0 and differs from (r - 1) + ln r
    old = torch.tensor([[-1.0, -1.0]])
    log_probs = (old + torch.tensor([[math.log(ratio), 0.7]])).requires_grad_(True)
    _, meta = grpo_microbatch_train_step(log_probs, torch.tensor([[1, 0]]), 1,
                                         "reinforce_with_baseline", advantages=torch.tensor([[1.0]]),
                                         old_log_probs=old)
    assert meta["approx_kl"].item() == pytest.approx((ratio - 1) - math.log(ratio), rel=1e-5)
    assert meta["mean_ratio"].item() == pytest.approx(ratio, rel=1e-6)


NORMALIZATION_KWARGS = [
    ("mean", {}),
    ("constant", {"normalize_constant": 3}),
    ("microbatch", {}),
    ("token", {}),
    ("token", {"batch_response_tokens": 5}),
]


@pytest.mark.parametrize(("normalization", "kwargs"), NORMALIZATION_KWARGS)
@pytest.mark.parametrize("loss_type", ["reinforce_with_baseline", "grpo_clip"])
def test_a_micro_batch_without_response_tokens_gives_zero_loss_and_gradient(normalization, kwargs,
                                                                            loss_type):
    # a micro-batch of all-padding rows (every response empty): 0, not 0/0
    log_probs = LOG_PROBS.clone().requires_grad_(True)
    loss, meta = grpo_microbatch_train_step(
        log_probs, torch.zeros_like(MASK), 2, loss_type, advantages=torch.tensor([[1.0], [-2.0]]),
        old_log_probs=LOG_PROBS - 0.3, cliprange=0.2, length_normalization=normalization, **kwargs,
    )
    assert loss.item() == 0.0
    assert torch.equal(log_probs.grad, torch.zeros_like(LOG_PROBS))
    assert {k: v.item() for k, v in meta.items() if k in ("mean_ratio", "approx_kl", "clip_fraction")} \
        == {"mean_ratio": 0.0, "approx_kl": 0.0, "clip_fraction": 0.0}
