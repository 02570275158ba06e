"""The behaviour policy's log-probs beside the trainer's (grpo.training.behaviour): where the
engine's values land, the check's bounds and what it averages. The common-prefix alignment, the
nucleus boundary and the pooled importance / KL sums are in test_importance.py."""

from __future__ import annotations

import math

import pytest
import torch

from grpo.rollout.base import Rollout
from grpo.training.behaviour import (
    MAX_ON_POLICY_DIFF,
    MAX_OUTSIDE_NUCLEUS,
    LogProbMismatchError,
    behaviour_kl_metrics,
    behaviour_kl_sums,
    check_on_policy,
    engine_log_probs,
    importance_metrics,
    importance_sums,
    stale_weight_check,
)

NAN = float("nan")


def test_engine_values_fill_the_response_and_no_further() -> None:
    """Row 0 ends at the last column and its engine sampled one token more (an EOS the text drops):
    the extra value lands nowhere. Row 1's log-probs do not match its tokens in number: unusable,
    NaN. Row 2 has a response of one token and a rollout of one."""
    labels = torch.tensor([[9, 9, 4, 5], [9, 6, 7, 0], [9, 8, 0, 0]])
    mask = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 0], [0, 1, 0, 0]]).float()
    rollouts = [Rollout("a", [4, 5, 1], [-0.4, -0.5, -0.1]), Rollout("b", [6, 7], [-0.6]),
                Rollout("c", [8], [-0.8])]
    aligned = engine_log_probs(labels, mask, rollouts)
    torch.testing.assert_close(aligned, torch.tensor([[NAN, NAN, -0.4, -0.5], [NAN] * 4,
                                                      [NAN, -0.8, NAN, NAN]]), equal_nan=True)
    assert torch.isnan(engine_log_probs(labels, mask, [Rollout("a", [4], None)] * 3)).all()
    # one-token rollouts only
    one = engine_log_probs(labels[2:], mask[2:], [Rollout("c", [8], [-0.8])])
    torch.testing.assert_close(one, torch.tensor([[NAN, -0.8, NAN, NAN]]), equal_nan=True)
    # a longer sampled response than the trainer's: only the trainer's response positions
    long = engine_log_probs(labels[2:], mask[2:], [Rollout("c", [8, 0, 0], [-0.8, -0.2, -0.3])])
    torch.testing.assert_close(long, torch.tensor([[NAN, -0.8, NAN, NAN]]), equal_nan=True)


def test_the_check_averages_per_rollout_over_the_tokens_inside_the_nucleus() -> None:
    """Row 0: |diff| 0.2 and 0.4 (mean 0.3); row 1: one token outside the nucleus (counted in the
    share, not the mean) and |diff| 0.1; row 2 wholly outside: left out of the mean. The mean is
    over rollouts (0.3 + 0.1) / 2, the share over the 6 compared tokens."""
    trainer = torch.tensor([[-1.2, -1.4], [-math.inf, -2.1], [-math.inf, -math.inf]])
    behaviour = torch.tensor([[-1.0, -1.0], [-1.0, -2.0], [-1.0, -1.0]])
    metrics = stale_weight_check(trainer, behaviour)
    assert metrics == {"rollout/engine_logprob_abs_diff": pytest.approx(0.2),
                       "rollout/outside_trainer_nucleus": pytest.approx(3 / 6)}
    # every compared token outside: the share alone
    assert stale_weight_check(trainer[2:], behaviour[2:]) == {"rollout/outside_trainer_nucleus": 1.0}
    # NaN (not compared) tokens count nowhere
    behaviour[0, 1] = NAN
    assert stale_weight_check(trainer[:1], behaviour[:1]) == {
        "rollout/engine_logprob_abs_diff": pytest.approx(0.2), "rollout/outside_trainer_nucleus": 0.0}


def test_the_on_policy_check_stops_above_its_bounds_only() -> None:
    assert (MAX_ON_POLICY_DIFF, MAX_OUTSIDE_NUCLEUS) == (0.1, 0.05)
    check_on_policy({})
    check_on_policy({"rollout/engine_logprob_abs_diff": 0.1, "rollout/outside_trainer_nucleus": 0.05})
    check_on_policy({"rollout/outside_trainer_nucleus": 0.05})
    with pytest.raises(LogProbMismatchError, match=r"differ from the trainer's by 0\.101 nats \(mean; limit 0\.1\)"):
        check_on_policy({"rollout/engine_logprob_abs_diff": 0.101, "rollout/outside_trainer_nucleus": 0.0})
    with pytest.raises(LogProbMismatchError, match=r"nucleus for 5\.1% of the sampled tokens \(limit 5%\)"):
        check_on_policy({"rollout/engine_logprob_abs_diff": 0.01, "rollout/outside_trainer_nucleus": 0.051})
    with pytest.raises(LogProbMismatchError, match=r"nucleus for 20\.0%"):
        check_on_policy({"rollout/outside_trainer_nucleus": 0.2})
    # a difference at its bound is not named; the share over its bound is
    with pytest.raises(LogProbMismatchError, match=r"nucleus for 20\.0%"):
        check_on_policy({"rollout/engine_logprob_abs_diff": 0.1, "rollout/outside_trainer_nucleus": 0.2})
    # both over: the difference is named
    with pytest.raises(LogProbMismatchError, match="by 0.500 nats"):
        check_on_policy({"rollout/engine_logprob_abs_diff": 0.5, "rollout/outside_trainer_nucleus": 0.5})
    with pytest.raises(LogProbMismatchError, match="off_policy.correction=none"):
        check_on_policy({"rollout/engine_logprob_abs_diff": 0.5})


def test_importance_and_kl_sums_weigh_only_trained_reported_tokens() -> None:
    """Weights 0.5, 3 (capped), 1.5 on trained tokens with engine values; a NaN engine value and
    an untrained token are not counted. k3 of log r = -ln 2 and ln 3 (a token outside the trainer's
    nucleus, -inf, not counted)."""
    weights = torch.tensor([[0.5, 3.0, 1.5, 7.0, 9.0]])
    capped = torch.tensor([[False, True, False, True, True]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])
    behaviour = torch.tensor([[-1.0, -2.0, -0.5, NAN, -1.0]])
    assert importance_sums(weights, capped, mask, behaviour).tolist() == [5.0, 1.0, 3.0]
    assert importance_metrics([importance_sums(weights, capped, mask, behaviour)]) == {
        "train/is_weight_mean": pytest.approx(5 / 3), "train/is_capped_fraction": pytest.approx(1 / 3)}
    proximal = torch.tensor([[-1.0 - math.log(2), -2.0 + math.log(3), -math.inf, -1.0, -1.0]])
    sums = behaviour_kl_sums(proximal, behaviour, mask)
    k3 = (0.5 - 1 + math.log(2)) + (3 - 1 - math.log(3))
    assert sums.tolist() == pytest.approx([k3, 2.0])
    assert behaviour_kl_metrics([sums]) == {"train/behaviour_kl": pytest.approx(k3 / 2)}
