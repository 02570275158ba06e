"""Per-token policy-gradient losses, the dispatcher, and the masked reductions."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from grpo import (
    POLICY_LOSSES,
    compute_grpo_clip_loss,
    compute_grpo_no_clip_loss,
    compute_naive_policy_gradient_loss,
    compute_policy_gradient_loss,
    grpo_microbatch_train_step,
    masked_mean,
    masked_normalize,
)

# Ratios pi/pi_old of [1.5, 0.5, 1.1] on both rows; row 0 has advantage +1, row 1 has -1.
RATIOS = torch.tensor([[1.5, 0.5, 1.1], [1.5, 0.5, 1.1]])
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -2.5]])
ADVANTAGES = torch.tensor([[1.0], [-1.0]])


def policy_log_probs() -> torch.Tensor:
    return (OLD + RATIOS.log()).requires_grad_(True)


def test_naive_policy_gradient_loss_hand_computed():
    rewards = torch.tensor([[2.0], [-1.0]])
    log_probs = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]])
    loss = compute_naive_policy_gradient_loss(rewards, log_probs)
    torch.testing.assert_close(loss, torch.tensor([[2.0, 4.0], [-0.5, -3.0]]))
    # a (batch_size,) vector is one value per sequence, never broadcast along the sequence axis
    torch.testing.assert_close(
        compute_naive_policy_gradient_loss(rewards.flatten(), log_probs), loss
    )
    with pytest.raises(ValueError, match=r"\(batch_size, 1\)"):
        compute_naive_policy_gradient_loss(torch.ones(2, 2), log_probs)


def test_grpo_clip_loss_hand_computed_with_gradients():
    log_probs = policy_log_probs()
    loss, meta = compute_grpo_clip_loss(ADVANTAGES, log_probs, OLD, cliprange=0.2)
    # A=+1: min([1.5, 0.5, 1.1], [1.2, 0.8, 1.1]) = [1.2, 0.5, 1.1]
    # A=-1: min([-1.5, -0.5, -1.1], [-1.2, -0.8, -1.1]) = [-1.5, -0.8, -1.1]
    torch.testing.assert_close(loss, torch.tensor([[-1.2, -0.5, -1.1], [1.5, 0.8, 1.1]]))
    assert meta["clipped"].tolist() == [[True, False, False], [False, True, False]]
    assert meta["clip_fraction"].item() == pytest.approx(2 / 6)
    loss.sum().backward()
    # d(-ratio * A)/d log_prob = -ratio * A where unclipped, 0 where the clipped branch is taken
    torch.testing.assert_close(log_probs.grad, torch.tensor([[0.0, -0.5, -1.1], [1.5, 0.0, 1.1]]))


def test_grpo_clip_with_large_cliprange_equals_unclipped_loss():
    log_probs = policy_log_probs()
    clipped, meta = compute_grpo_clip_loss(ADVANTAGES, log_probs, OLD, cliprange=10.0)
    unclipped = compute_grpo_no_clip_loss(ADVANTAGES, log_probs, OLD)
    torch.testing.assert_close(unclipped, torch.tensor([[-1.5, -0.5, -1.1], [1.5, 0.5, 1.1]]))
    torch.testing.assert_close(clipped, unclipped)
    assert meta["clip_fraction"].item() == 0.0


def test_grpo_clip_higher_hand_computed_and_equal_ranges_give_grpo_clip():
    from grpo.core.losses import compute_grpo_clip_higher_loss

    log_probs = policy_log_probs()
    loss, meta = compute_grpo_clip_higher_loss(ADVANTAGES, log_probs, OLD, 0.2, 0.28)
    # A=+1: min([1.5, 0.5, 1.1], [1.28, 0.8, 1.1]) = [1.28, 0.5, 1.1]
    # A=-1: min([-1.5, -0.5, -1.1], [-1.28, -0.8, -1.1]) = [-1.5, -0.8, -1.1]
    torch.testing.assert_close(loss, torch.tensor([[-1.28, -0.5, -1.1], [1.5, 0.8, 1.1]]))
    assert meta["clipped"].tolist() == [[True, False, False], [False, True, False]]
    same, _ = compute_grpo_clip_higher_loss(ADVANTAGES, log_probs, OLD, 0.2, 0.2)
    torch.testing.assert_close(same, compute_grpo_clip_loss(ADVANTAGES, log_probs, OLD, 0.2)[0])
    # the registry passes the loss's own hyperparameters through the train step
    mask = torch.ones_like(OLD)
    step_loss, step_meta = grpo_microbatch_train_step(
        log_probs, mask, 1, "grpo_clip_higher", advantages=ADVANTAGES, old_log_probs=OLD,
        cliprange_low=0.2, cliprange_high=0.28)
    assert step_loss.item() == pytest.approx(loss.mean().item())
    assert step_meta["clip_fraction"].item() == pytest.approx(2 / 6)


def test_policy_gradient_loss_dispatch():
    log_probs = policy_log_probs()
    rewards = torch.tensor([[3.0], [0.0]])
    no_baseline, meta = compute_policy_gradient_loss(log_probs, "no_baseline", raw_rewards=rewards)
    torch.testing.assert_close(no_baseline, -rewards * log_probs)
    assert meta == {}
    with_baseline, _ = compute_policy_gradient_loss(
        log_probs, "reinforce_with_baseline", raw_rewards=rewards, advantages=ADVANTAGES
    )
    torch.testing.assert_close(with_baseline, -ADVANTAGES * log_probs)
    clip, meta = compute_policy_gradient_loss(
        log_probs, "grpo_clip", advantages=ADVANTAGES, old_log_probs=OLD, cliprange=0.2
    )
    torch.testing.assert_close(clip, torch.tensor([[-1.2, -0.5, -1.1], [1.5, 0.8, 1.1]]))
    assert set(meta) == {"clipped", "clip_fraction"}
    no_clip, _ = compute_policy_gradient_loss(
        log_probs, "grpo_no_clip", advantages=ADVANTAGES, old_log_probs=OLD
    )
    torch.testing.assert_close(no_clip, -ADVANTAGES * RATIOS)


@pytest.mark.parametrize(
    ("loss_type", "kwargs", "missing"),
    [
        ("no_baseline", {"advantages": ADVANTAGES}, "raw_rewards"),
        ("reinforce_with_baseline", {"raw_rewards": ADVANTAGES}, "advantages"),
        ("grpo_clip", {"advantages": ADVANTAGES, "old_log_probs": OLD}, "cliprange"),
        ("grpo_clip", {"advantages": ADVANTAGES, "cliprange": 0.2}, "old_log_probs"),
        ("grpo_no_clip", {"old_log_probs": OLD}, "advantages"),
    ],
)
def test_policy_gradient_loss_names_the_missing_argument(loss_type, kwargs, missing):
    with pytest.raises(ValueError, match=f"{loss_type}.*requires {missing}"):
        compute_policy_gradient_loss(policy_log_probs(), loss_type, **kwargs)


def test_policy_gradient_loss_rejects_unknown_type():
    with pytest.raises(ValueError, match="unknown loss_type 'ppo'"):
        compute_policy_gradient_loss(policy_log_probs(), "ppo", advantages=ADVANTAGES)


def test_policy_gradient_loss_rejects_a_hyperparameter_the_loss_does_not_read():
    with pytest.raises(ValueError, match="'grpo_clip' does not read clip_high"):
        compute_policy_gradient_loss(policy_log_probs(), "grpo_clip", advantages=ADVANTAGES,
                                     old_log_probs=OLD, cliprange=0.2, clip_high=0.3)


def test_registry_states_inputs_and_ratio_use():
    assert {name: (tuple(loss.inputs), loss.uses_ratio) for name, loss in POLICY_LOSSES.items()
            if name in ("no_baseline", "reinforce_with_baseline", "grpo_clip", "grpo_no_clip")} == {
        "no_baseline": (("raw_rewards",), False),
        "reinforce_with_baseline": (("advantages",), False),
        "grpo_clip": (("advantages", "old_log_probs", "cliprange"), True),
        "grpo_no_clip": (("advantages", "old_log_probs"), True),
    }
    assert POLICY_LOSSES["grpo_clip"].hyperparameters == ("cliprange",)
    assert POLICY_LOSSES["grpo_no_clip"].hyperparameters == ()
    assert POLICY_LOSSES["grpo_clip_higher"].hyperparameters == ("cliprange_low", "cliprange_high")


def test_one_yaml_per_registered_loss_holding_exactly_the_hyperparameters_it_reads():
    conf = Path(__file__).resolve().parents[1] / "conf" / "loss"
    yamls = {path.stem: OmegaConf.load(path) for path in conf.glob("*.yaml")}
    assert set(yamls) == set(POLICY_LOSSES)
    for name, cfg in yamls.items():
        assert cfg.name == name
        assert set(cfg) == {"name", *POLICY_LOSSES[name].hyperparameters}, name


TENSOR = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1, 1, 0], [0, 0, 1]])


def test_masked_mean_hand_computed():
    torch.testing.assert_close(masked_mean(TENSOR, MASK, dim=1), torch.tensor([1.5, 6.0]))
    torch.testing.assert_close(masked_mean(TENSOR, MASK, dim=-1), torch.tensor([1.5, 6.0]))
    torch.testing.assert_close(masked_mean(TENSOR, MASK, dim=0), torch.tensor([1.0, 2.0, 6.0]))
    assert masked_mean(TENSOR, MASK).item() == pytest.approx((1 + 2 + 6) / 3)
    # an all-masked slice is 0/0 = NaN, as in the CS336 reference
    assert math.isnan(masked_mean(TENSOR, torch.zeros_like(MASK), dim=1)[0].item())


def test_masked_normalize_hand_computed():
    torch.testing.assert_close(
        masked_normalize(TENSOR, MASK, dim=1, normalize_constant=2.0), torch.tensor([1.5, 3.0])
    )
    torch.testing.assert_close(
        masked_normalize(TENSOR, MASK, dim=0, normalize_constant=2.0), torch.tensor([0.5, 1.0, 3.0])
    )
    assert masked_normalize(TENSOR, MASK, normalize_constant=3.0).item() == pytest.approx(3.0)
    assert masked_normalize(TENSOR, MASK).item() == pytest.approx(9.0)


def test_masked_positions_cannot_leak_nan_or_inf():
    tensor = torch.tensor([[1.0, float("nan")], [float("inf"), 2.0]], requires_grad=True)
    mask = torch.tensor([[True, False], [False, True]])
    total = masked_normalize(tensor, mask) + masked_mean(tensor, mask, dim=1).sum()
    assert total.item() == pytest.approx(6.0)
    total.backward()
    torch.testing.assert_close(tensor.grad, torch.tensor([[2.0, 0.0], [0.0, 2.0]]))
