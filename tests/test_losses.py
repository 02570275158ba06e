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


# GSPO (Zheng et al. 2025) and CISPO (MiniMax-M1 2025), each against a reference written from its
# paper's equations with Python floats, sequence by sequence and token by token.

# five responses in T = 4 positions (left and right padding), log pi - log pi_old per position;
# the padding's log-ratio (3.0) would move every mean it leaked into
GSPO_MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [0, 1, 1, 0], [1, 0, 0, 0]])
GSPO_LOG_RATIO = torch.tensor([
    [0.5, -0.5, 0.09, 3.0],  # A=+1: s = e^0.03, inside; per token 0.5 and -0.5 would clip
    [0.3, 0.1, 3.0, 3.0],    # A=+1: s = e^0.2 above 1 + eps_high: clipped
    [0.4, 0.2, 0.2, 0.4],    # A=-1: s = e^0.3 above: the unclipped term is the smaller, kept
    [3.0, -0.3, -0.1, 3.0],  # A=-0.5: s = e^-0.2 below 1 - eps_low: clipped
    [-0.2, 3.0, 3.0, 3.0],   # A=+2: s = e^-0.2 below: kept (a one-token response)
], dtype=torch.float64)
GSPO_ADVANTAGES = torch.tensor([[1.0], [1.0], [-1.0], [-0.5], [2.0]], dtype=torch.float64)
GSPO_OLD = -torch.linspace(0.2, 3.0, 20, dtype=torch.float64).reshape(5, 4)
EPS_LOW, EPS_HIGH = 0.05, 0.1


def gspo_reference(log_ratio, mask, advantages, eps_low, eps_high):
    """From the paper's section 4.1: s_i = (pi(y_i) / pi_old(y_i))^(1 / |y_i|),
    J_i = min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i); its gradient (eq. 11) is
    s_i A_i / |y_i| * sum_t grad log pi(y_i,t) where the unclipped term is the smaller, else 0.
    Returns per sequence: -J_i, d(-J_i)/d log pi_t (one value for each of its tokens), clipped."""
    out = []
    for row in range(len(mask)):
        kept = [float(x) for x, m in zip(log_ratio[row], mask[row], strict=True) if m]
        s = math.exp(sum(kept) / len(kept))
        a = float(advantages[row])
        unclipped, clipped = s * a, min(max(s, 1 - eps_low), 1 + eps_high) * a
        kept_unclipped = unclipped <= clipped
        out.append((-min(unclipped, clipped), -s * a / len(kept) if kept_unclipped else 0.0,
                    not kept_unclipped))
    return out


def test_gspo_is_the_papers_sequence_objective_with_its_gradient():
    from grpo.core.losses import compute_gspo_loss

    reference = gspo_reference(GSPO_LOG_RATIO, GSPO_MASK, GSPO_ADVANTAGES, EPS_LOW, EPS_HIGH)
    assert [clipped for *_, clipped in reference] == [False, True, False, True, False]
    policy = (GSPO_OLD + GSPO_LOG_RATIO).requires_grad_(True)
    loss, meta = compute_gspo_loss(GSPO_ADVANTAGES, policy, GSPO_OLD, GSPO_MASK, EPS_LOW, EPS_HIGH)
    # every token of sequence i carries -J_i
    for row, (value, _, _) in enumerate(reference):
        for t in range(4):
            if GSPO_MASK[row, t]:
                assert loss[row, t].item() == pytest.approx(value, rel=1e-12)
    assert meta["clipped"].flatten().tolist() == [c for *_, c in reference]
    assert meta["clip_fraction"].item() == pytest.approx(2 / 5)
    # each token's per-token loss depends on its own log-prob alone (GSPO-token's form), with
    # d/d log pi_t = |y_i| * the paper's per-token share of the sequence gradient
    jacobian = torch.autograd.functional.jacobian(
        lambda lp: compute_gspo_loss(GSPO_ADVANTAGES, lp, GSPO_OLD, GSPO_MASK, EPS_LOW, EPS_HIGH)[0],
        GSPO_OLD + GSPO_LOG_RATIO)
    expected = torch.zeros(5, 4, 5, 4, dtype=torch.float64)
    for row, (_, grad, _) in enumerate(reference):
        n = int(GSPO_MASK[row].sum())
        for t in range(4):
            if GSPO_MASK[row, t]:
                expected[row, t, row, t] = grad * n
    torch.testing.assert_close(jacobian, expected, rtol=1e-6, atol=1e-6)
    # through the train step ("mean": the sequence's mean, over the batch) the gradient is the
    # paper's, -1/G sum_i grad J_i, and the logged clip fraction counts sequences (2 of 5), not
    # tokens (4 of 12)
    policy = (GSPO_OLD + GSPO_LOG_RATIO).requires_grad_(True)
    step_loss, step_meta = grpo_microbatch_train_step(
        policy, GSPO_MASK, 1, "gspo", advantages=GSPO_ADVANTAGES, old_log_probs=GSPO_OLD,
        cliprange_low=EPS_LOW, cliprange_high=EPS_HIGH)
    assert step_loss.item() == pytest.approx(sum(v for v, _, _ in reference) / 5, rel=1e-12)
    gradient = torch.tensor([[grad / 5 if m else 0.0 for m in GSPO_MASK[row]]
                             for row, (_, grad, _) in enumerate(reference)], dtype=torch.float64)
    torch.testing.assert_close(policy.grad, gradient, rtol=1e-6, atol=1e-6)
    assert step_meta["clip_fraction"].item() == pytest.approx(2 / 5)


def test_gspo_on_one_token_responses_is_grpo_clip_with_the_same_ranges():
    from grpo.core.losses import compute_grpo_clip_higher_loss, compute_gspo_loss

    old = torch.tensor([[-1.0], [-2.0], [-0.5], [-0.3], [-1.2], [-2.5]], dtype=torch.float64)
    log_ratio = torch.tensor([[0.4], [-0.4], [0.02], [0.4], [-0.4], [-0.02]], dtype=torch.float64)
    advantages = torch.tensor([[1.0], [1.0], [1.0], [-1.0], [-1.0], [-1.0]], dtype=torch.float64)
    results = []
    for loss_fn, extra in ((compute_gspo_loss, (torch.ones_like(old),)),
                           (compute_grpo_clip_higher_loss, ())):
        policy = (old + log_ratio).requires_grad_(True)
        loss, meta = loss_fn(advantages, policy, old, *extra, 0.2, 0.28)
        loss.sum().backward()
        results.append((loss.detach(), policy.grad, meta["clipped"]))
    (gspo, gspo_grad, gspo_clipped), (clip, clip_grad, clip_clipped) = results
    torch.testing.assert_close(gspo, clip, rtol=1e-12, atol=0)
    torch.testing.assert_close(gspo_grad, clip_grad, rtol=1e-12, atol=0)
    assert gspo_clipped.tolist() == clip_clipped.tolist() == [[True], [False], [False], [False],
                                                              [True], [False]]


CISPO_OLD = torch.tensor([[-1.0, -2.0, -0.5, -1.5], [-0.3, -1.2, -2.5, -0.8]], dtype=torch.float64)
CISPO_RATIOS = torch.tensor([[0.3, 1.3, 7.0, 1.0], [0.3, 1.3, 7.0, 0.9]], dtype=torch.float64)
CISPO_ADVANTAGES = torch.tensor([[1.5], [-0.5]], dtype=torch.float64)


def cispo_reference(ratios, old, advantages, cap, floor):
    """From MiniMax-M1's eq. 4: J = sum_t sg(r_hat_t) A log pi_t with r_hat_t = clip(r_t, floor,
    cap) (ScaleRL: min(r_t, eps_max)); its gradient w.r.t. log pi_t is r_hat_t A. Returns per token:
    -J_t and d(-J_t)/d log pi_t."""
    values, grads = [], []
    for row in range(len(ratios)):
        a = float(advantages[row])
        weights = [min(max(float(r), floor), cap) for r in ratios[row]]
        log_pi = [float(o) + math.log(float(r)) for o, r in zip(old[row], ratios[row], strict=True)]
        values.append([-w * a * lp for w, lp in zip(weights, log_pi, strict=True)])
        grads.append([-w * a for w in weights])
    return torch.tensor(values, dtype=torch.float64), torch.tensor(grads, dtype=torch.float64)


@pytest.mark.parametrize(("cap", "floor"), [(5.0, 0.0), (1.2, 0.5)])
def test_cispo_is_the_detached_truncated_ratio_times_reinforce(cap, floor):
    from grpo.core.losses import compute_cispo_loss

    values, grads = cispo_reference(CISPO_RATIOS, CISPO_OLD, CISPO_ADVANTAGES, cap, floor)
    policy = (CISPO_OLD + CISPO_RATIOS.log()).requires_grad_(True)
    loss, meta = compute_cispo_loss(CISPO_ADVANTAGES, policy, CISPO_OLD, cap, floor)
    torch.testing.assert_close(loss, values, rtol=1e-12, atol=1e-12)
    capped = [[not floor <= float(r) <= cap for r in row] for row in CISPO_RATIOS]
    assert meta["capped"].tolist() == capped
    # the weight is a constant: d loss_t / d log pi_t = -r_hat_t A on the diagonal, nothing else,
    # and no token's gradient is 0 (the capped ones keep theirs)
    jacobian = torch.autograd.functional.jacobian(
        lambda lp: compute_cispo_loss(CISPO_ADVANTAGES, lp, CISPO_OLD, cap, floor)[0],
        CISPO_OLD + CISPO_RATIOS.log())
    torch.testing.assert_close(jacobian, torch.diag_embed(grads).reshape(2, 4, 1, 4)
                               * torch.eye(2, dtype=torch.float64).reshape(2, 1, 2, 1),
                               rtol=1e-6, atol=1e-6)
    assert (grads != 0).all()
    # the train step's cap_fraction is over the response tokens: the last position is padding
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]])
    _, step_meta = grpo_microbatch_train_step(
        policy, mask, 1, "cispo", advantages=CISPO_ADVANTAGES, old_log_probs=CISPO_OLD,
        ratio_cap=cap, ratio_floor=floor)
    in_mask = [c for row in capped for c in row[:3]]
    assert step_meta["cap_fraction"].item() == pytest.approx(sum(in_mask) / 6)
    assert step_meta["clip_fraction"].item() == 0.0  # no token's gradient is switched off


def test_cispo_at_ratio_one_is_reinforce_with_baseline():
    results = []
    for loss_type, extra in (("cispo", {"ratio_cap": 5.0, "ratio_floor": 0.0}),
                             ("reinforce_with_baseline", {})):
        policy = CISPO_OLD.clone().requires_grad_(True)
        loss, _ = compute_policy_gradient_loss(policy, loss_type, advantages=CISPO_ADVANTAGES,
                                               old_log_probs=CISPO_OLD, **extra)
        loss.sum().backward()
        results.append((loss.detach(), policy.grad))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=0, atol=0)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=0, atol=0)


def test_gspo_and_cispo_specs_and_dispatch():
    assert POLICY_LOSSES["gspo"].inputs.keys() == {"advantages", "old_log_probs", "response_mask",
                                                    "cliprange_low", "cliprange_high"}
    assert POLICY_LOSSES["gspo"].hyperparameters == ("cliprange_low", "cliprange_high")
    assert POLICY_LOSSES["gspo"].sequence_ratio and POLICY_LOSSES["gspo"].uses_ratio
    assert POLICY_LOSSES["cispo"].hyperparameters == ("ratio_cap", "ratio_floor")
    assert not POLICY_LOSSES["cispo"].sequence_ratio and POLICY_LOSSES["cispo"].uses_ratio
    assert [n for n, loss in POLICY_LOSSES.items() if loss.sequence_ratio] == ["gspo"]
    # the dispatcher hands GSPO the response mask, and names it when it is missing
    policy = (GSPO_OLD + GSPO_LOG_RATIO).requires_grad_(True)
    with pytest.raises(ValueError, match="'gspo' requires response_mask"):
        compute_policy_gradient_loss(policy, "gspo", advantages=GSPO_ADVANTAGES,
                                     old_log_probs=GSPO_OLD, cliprange_low=0.05, cliprange_high=0.1)
    loss, meta = compute_policy_gradient_loss(
        policy, "gspo", advantages=GSPO_ADVANTAGES, old_log_probs=GSPO_OLD,
        response_mask=GSPO_MASK, cliprange_low=EPS_LOW, cliprange_high=EPS_HIGH)
    assert loss[1, 0].item() == pytest.approx(-(1 + EPS_HIGH))  # s = e^0.2 clipped to 1.1
    assert meta["clip_fraction"].item() == pytest.approx(0.4)
