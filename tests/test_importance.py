"""The importance correction of stale rollouts and the trainer's mirror of the sampling
distribution (grpo.core.importance, grpo.core.log_probs.sampling_log_probs): hand-computed values
chosen so that a flipped ratio, a changed cap, a dropped clamp or a temperature applied the
wrong way round gives other numbers."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import TemperatureLogitsWarper, TopPLogitsWarper

from grpo.core.importance import CORRECTIONS, truncated_importance_weights
from grpo.core.log_probs import label_log_probs, sampling_log_probs
from grpo.core.train_step import OptimizerStepTotals, grpo_share_train_step
from grpo.training.behaviour import (
    behaviour_kl_metrics,
    behaviour_kl_sums,
    importance_metrics,
    importance_sums,
)


def test_truncated_weights_are_the_capped_ratio_of_proximal_to_behaviour() -> None:
    proximal = torch.log(torch.tensor([[0.5, 0.9, 0.3, 0.2]]))
    behaviour = torch.log(torch.tensor([[0.25, 0.3, 0.6, float("nan")]]))
    weights, capped = truncated_importance_weights(proximal, behaviour, cap=2.5)
    # raw 2.0, 3.0 (capped to 2.5), 0.5, and 1 where the engine gave no value
    torch.testing.assert_close(weights, torch.tensor([[2.0, 2.5, 0.5, 1.0]]))
    assert capped.tolist() == [[False, True, False, False]]
    assert CORRECTIONS["tis"] is truncated_importance_weights and CORRECTIONS["none"] is None
    with pytest.raises(ValueError, match="cap"):
        truncated_importance_weights(proximal, behaviour, cap=0.0)


def test_weights_scale_each_tokens_loss_and_carry_no_gradient() -> None:
    # one sequence of 2 response tokens, reinforce with a baseline (loss -A log p), "token"
    # normalization over 2 tokens: loss = -(A w1 lp1 + A w2 lp2) / 2
    log_probs = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    weights = torch.tensor([[0.5, 2.0]], requires_grad=True)
    totals = OptimizerStepTotals(sequences=1, response_tokens=2, longest_response=2)
    loss, _ = grpo_share_train_step(
        log_probs, torch.ones(1, 2), "reinforce_with_baseline", totals,
        advantages=torch.tensor([[3.0]]), length_normalization="token", importance_weights=weights)
    assert loss.item() == pytest.approx(-(3 * 0.5 * -1.0 + 3 * 2.0 * -2.0) / 2)
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-0.75, -3.0]]))
    assert weights.grad is None


def _nucleus_by_hand(logits: list[float], temperature: float, top_p: float) -> list[float]:
    """log-probs of every token under softmax(logits / T) cut to the nucleus of mass top_p."""
    scaled = [z / temperature for z in logits]
    total = sum(math.exp(z) for z in scaled)
    probs = [math.exp(z) / total for z in scaled]
    kept, mass = set(), 0.0
    for i in sorted(range(len(probs)), key=lambda i: -probs[i]):
        kept.add(i)
        mass += probs[i]
        if mass >= top_p:
            break
    norm = sum(probs[i] for i in kept)
    return [math.log(probs[i] / norm) if i in kept else -math.inf for i in range(len(probs))]


@pytest.mark.parametrize(("temperature", "top_p"), [(0.5, 1.0), (2.0, 1.0), (0.7, 0.8), (1.0, 0.6)])
def test_sampling_log_probs_match_the_nucleus_by_hand_and_transformers(
    temperature: float, top_p: float
) -> None:
    logits = [2.0, 1.0, 0.2, -1.0, 0.5]
    labels = torch.arange(5).reshape(1, 5)
    got = sampling_log_probs(torch.tensor([[logits] * 5]), labels, temperature, top_p)[0]
    expected = _nucleus_by_hand(logits, temperature, top_p)
    for value, want in zip(got.tolist(), expected, strict=True):
        assert value == (pytest.approx(want, abs=1e-5) if math.isfinite(want) else -math.inf)
    # the same distribution as transformers' warpers, which the hf engine samples with
    scores = TopPLogitsWarper(top_p)(None, TemperatureLogitsWarper(temperature)(None, torch.tensor([logits])))
    torch.testing.assert_close(got, scores.log_softmax(-1)[0])


def test_sampling_log_probs_at_temperature_one_are_the_raw_ones() -> None:
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert torch.equal(sampling_log_probs(logits, labels, 1.0, 1.0), label_log_probs(logits, labels))
    with pytest.raises(ValueError, match="temperature"):
        sampling_log_probs(logits, labels, 0.0, 1.0)


def test_engine_log_probs_sit_on_the_common_prefix_of_sampled_and_trained_tokens() -> None:
    from grpo.rollout.base import Rollout
    from grpo.training.behaviour import engine_log_probs, stale_weight_check

    labels = torch.tensor([[9, 9, 1, 2, 3, 0], [9, 4, 5, 6, 0, 0], [9, 9, 9, 7, 8, 0]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 0, 0], [0, 0, 0, 1, 1, 0]]).float()
    rollouts = [Rollout("a", [1, 2, 3], [-0.1, -0.2, -0.3]),
                Rollout("b", [4, 7, 6, 1], [-0.4, -0.5, -0.6, -0.7]),  # differs at its 2nd token
                Rollout("c", [7, 8], None)]
    aligned = engine_log_probs(labels, mask, rollouts)
    nan = float("nan")
    torch.testing.assert_close(aligned, torch.tensor([[nan, nan, -0.1, -0.2, -0.3, nan],
                                                      [nan, -0.4, nan, nan, nan, nan],
                                                      [nan] * 6]), equal_nan=True)
    trainer = torch.tensor([[0, 0, -0.2, -0.2, -0.1, 0], [0, -0.4, 0, 0, 0, 0], [0.0] * 6])
    # per rollout: mean |diff| 0.1 over 3 tokens, 0 over 1; the third has none: mean 0.05
    assert stale_weight_check(trainer, aligned) == {
        "rollout/engine_logprob_abs_diff": pytest.approx(0.05), "rollout/outside_trainer_nucleus": 0.0}


def test_the_first_step_check_holds_at_the_nucleus_boundary() -> None:
    """top_p < 1: a sampled token a logit difference of 1e-3 puts just outside the trainer's
    nucleus (-inf there) is counted, not averaged into the difference; a healthy engine (1 such
    token in 40) passes, a top-p applied differently (6 in 40) stops the run."""
    from grpo.training.behaviour import LogProbMismatchError, check_on_policy, stale_weight_check

    behaviour = torch.full((2, 20), -1.0)
    trainer = behaviour + 0.01
    trainer[0, 5] = float("-inf")
    metrics = stale_weight_check(trainer, behaviour)
    assert metrics == {"rollout/engine_logprob_abs_diff": pytest.approx(0.01),
                       "rollout/outside_trainer_nucleus": pytest.approx(1 / 40)}
    check_on_policy(metrics)
    trainer[1, :5] = float("-inf")
    metrics = stale_weight_check(trainer, behaviour)
    assert metrics["rollout/outside_trainer_nucleus"] == pytest.approx(6 / 40)
    with pytest.raises(LogProbMismatchError, match=r"outside the trainer's top-p nucleus for 15.0% "
                                                   r"of the sampled tokens \(limit 5%\)"):
        check_on_policy(metrics)
    assert stale_weight_check(trainer, torch.full((2, 20), float("nan"))) == {}


def test_the_minimum_length_masks_the_end_token_before_temperature_and_top_p() -> None:
    # vocabulary [EOS, a, b]; at the first position EOS cannot be sampled (too early)
    logits = torch.tensor([[[2.0, 1.0, 0.0], [2.0, 1.0, 0.0]]])
    labels = torch.tensor([[1, 1]])
    too_early = torch.tensor([[True, False]])
    got = sampling_log_probs(logits, labels, 0.5, 1.0, too_early, (0,))[0]
    # first: softmax([2, 0] / 0.5) over {a, b}; second: over all three
    assert got[0].item() == pytest.approx(2.0 - math.log(math.exp(2.0) + 1.0))
    assert got[1].item() == pytest.approx(2.0 - math.log(math.exp(4.0) + math.exp(2.0) + 1.0))
    # a nucleus of 0.85 after the mask keeps only a (p 0.88) at the first position
    assert sampling_log_probs(logits, labels, 0.5, 0.85, too_early, (0,))[0, 0].item() == 0.0


def test_the_importance_metrics_count_only_the_weighted_tokens() -> None:
    """Tokens outside the trained responses (padding, left-out rows) and tokens without an engine
    log-prob keep weight 1 unweighted: they are not counted (the mean was 1.167 here, not 1.25)."""
    weights = torch.tensor([[0.5, 2.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    capped = torch.tensor([[False, True, False, False], [False, False, False, False]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # row 2: left out
    behaviour = torch.tensor([[-1.0, -2.0, float("nan"), -1.0], [-1.0, -1.0, -1.0, -1.0]])
    sums = importance_sums(weights, capped, mask, behaviour)
    assert sums.tolist() == [2.5, 1.0, 2.0]
    # micro-batches pool their sums, not their means
    other = importance_sums(torch.tensor([[3.0]]), torch.tensor([[True]]), torch.tensor([[1.0]]),
                            torch.tensor([[-0.5]]))
    assert importance_metrics([sums, other]) == {"train/is_weight_mean": 5.5 / 3,
                                                 "train/is_capped_fraction": 2 / 3}
    assert importance_metrics([importance_sums(weights, capped, mask * 0, behaviour)]) == {}
    assert importance_metrics([]) == {}


def test_the_behaviour_kl_is_k3_of_pi_old_over_pi_behaviour_on_the_compared_tokens() -> None:
    """k3 = (r - 1) - log r with r = pi_old / pi_behaviour: e^0.5 - 1.5 = 0.14872 and
    e^-1 = 0.36788 on the two compared tokens (the ratio flipped gives 0.10653 and 0.71828); a
    token outside the trainer's nucleus (-inf), one without an engine log-prob and one outside
    the trained responses are not counted."""
    proximal = torch.tensor([[-1.0, -2.0, float("-inf"), -1.0, -3.0]])
    behaviour = torch.tensor([[-1.5, -1.0, -1.0, float("nan"), -0.1]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    sums = behaviour_kl_sums(proximal, behaviour, mask)
    assert sums.tolist() == pytest.approx([math.exp(0.5) - 1.5 + math.exp(-1.0), 2.0])
    # micro-batches pool their sums, not their means: (0.51660 + e^-0.2 - 0.8) / 3
    other = behaviour_kl_sums(torch.tensor([[-1.2]]), torch.tensor([[-1.0]]), torch.tensor([[1.0]]))
    assert behaviour_kl_metrics([sums, other])["train/behaviour_kl"] == pytest.approx(
        (math.exp(0.5) - 1.5 + math.exp(-1.0) + math.exp(-0.2) - 0.8) / 3)
    assert behaviour_kl_metrics([behaviour_kl_sums(proximal, behaviour, mask * 0)]) == {}
    assert behaviour_kl_metrics([]) == {}


def test_a_cap_in_0_1_truncates_and_a_weight_at_the_cap_is_not_capped() -> None:
    """cap 1: the raw weights 2 and 0.5 become 1 and 0.5; a token both policies give the same
    log-prob (raw weight exactly 1) and one without an engine value keep weight 1 uncapped: the
    cap bites only above it. cap 0.5 is accepted too, and any cap <= 0 refused."""
    proximal = torch.log(torch.tensor([[0.5, 0.25, 0.3, 0.2]]))
    behaviour = torch.log(torch.tensor([[0.25, 0.5, 0.3, float("nan")]]))
    weights, capped = truncated_importance_weights(proximal, behaviour, cap=1.0)
    torch.testing.assert_close(weights, torch.tensor([[1.0, 0.5, 1.0, 1.0]]))
    assert capped.tolist() == [[True, False, False, False]]
    weights, capped = truncated_importance_weights(proximal, behaviour, cap=0.5)
    torch.testing.assert_close(weights, torch.tensor([[0.5, 0.5, 0.5, 0.5]]))
    assert capped.tolist() == [[True, False, True, True]]
    for cap in (0.0, -1.0):
        with pytest.raises(ValueError, match="must be > 0"):
            truncated_importance_weights(proximal, behaviour, cap=cap)
