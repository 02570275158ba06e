"""The learning half of a GRPO step (grpo.training.learner) on a hand-made batch of six rows and
the tiny model: every expected number is computed here from its definition (a plain forward of
the model, log-softmax, the loss's formula), so that a flipped sign, a changed bound, a dropped
clamp, other rows or another average give other numbers."""

from __future__ import annotations

import copy
import functools
import math
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import DictConfig, OmegaConf
from test_trainer import toy_config

from grpo.models.loading import load_policy
from grpo.models.precision import precision_of
from grpo.rollout.base import Rollout
from grpo.rollout.hf import HFRolloutEngine
from grpo.training.batch_plan import BatchPlan
from grpo.training.behaviour import LogProbMismatchError
from grpo.training.learner import Learner
from grpo.training.rollouts import RolloutBatch
from grpo.training.timing import PhaseTimer

CPU = torch.device("cpu")
# (prompt tokens, response tokens) of the six rows; rows 1 and 3 have advantage exactly 0, and
# row 3 (left out) has the longest response, so that counting the left-out rows matters
SHAPES = [(2, 3), (3, 5), (1, 2), (2, 7), (4, 1), (3, 4)]
ADVANTAGES = [1.0, 0.0, -0.5, 0.0, 2.0, -1.5]
RAW_REWARDS = [1.0, 0.5, 0.0, 0.5, 1.0, 0.0]
ORDER = [3, 0, 5, 1, 4, 2]
WIDTH = 11  # widest row: 2 + 7 tokens, and 2 columns of padding
END_IDS = (1, 18)  # the tiny tokenizer's <eos> and its single-token stop "</answer>"
ZERO = [row for row, a in enumerate(ADVANTAGES) if a == 0]


def make_batch() -> RolloutBatch:
    """The six rows: random ids in 2..17 (no end token), labels the next ids, right-padded."""
    generator = torch.Generator().manual_seed(3)
    ids = torch.zeros(len(SHAPES), WIDTH + 1, dtype=torch.long)
    mask = torch.zeros(len(SHAPES), WIDTH)
    for row, (prompt, response) in enumerate(SHAPES):
        ids[row, : prompt + response] = torch.randint(2, 18, (prompt + response,), generator=generator)
        mask[row, prompt - 1 : prompt - 1 + response] = 1.0
    return RolloutBatch(input_ids=ids[:, :-1], labels=ids[:, 1:], response_mask=mask,
                        advantages=torch.tensor(ADVANTAGES), raw_rewards=torch.tensor(RAW_REWARDS),
                        order=torch.tensor(ORDER))


GROUPS = ("loss", "normalization")
DEFAULTS = ("rollout_batch_size=6", "group_size=2", "train_batch_size=6", "micro_batch_size=2",
            "sampling.min_new_tokens=0", "skip_zero_advantage=true", "rollout.stale_check_every=0")


@functools.cache
def composed(tiny_model_dir: Path, groups: tuple[str, ...]) -> DictConfig:
    """The toy config with `groups` chosen (loss=..., normalization=...), composed once."""
    return toy_config(tiny_model_dir, *groups)


def make_learner(tiny_model_dir: Path, *overrides: str) -> Learner:
    """A Learner of the tiny model as GRPOTrainer builds it, with its hf engine; six rollouts,
    one optimizer step of all six, micro-batches of 2, the raw sampling distribution."""
    groups = tuple(o for o in overrides if o.split("=")[0] in GROUPS)
    cfg = copy.deepcopy(composed(tiny_model_dir, groups))
    values = [o.split("=", 1) for o in (*DEFAULTS, *overrides) if o.split("=")[0] not in GROUPS]
    for key, value in values:  # as the command line sets them, without composing again
        OmegaConf.update(cfg, key, yaml.safe_load(value), merge=False)
    policy, tokenizer = load_policy(cfg.model, CPU)
    learner = Learner(cfg, policy, precision_of(cfg.model), CPU, BatchPlan.from_config(cfg))
    learner.engine = HFRolloutEngine(policy, tokenizer, batch_size=8, max_model_len=64)
    return learner


def reference_log_probs(policy: torch.nn.Module, batch: RolloutBatch, temperature: float = 1.0,
                        min_new_tokens: int = 0) -> torch.Tensor:
    """(B, T) log-probs of the labels under softmax(logits / temperature), the end tokens masked
    at the first `min_new_tokens` response positions; 0 off the responses."""
    with torch.no_grad():
        logits = policy(batch.input_ids).logits.float()
    position = batch.response_mask.cumsum(dim=1) - 1
    early = (batch.response_mask > 0) & (position < min_new_tokens)
    for end in END_IDS:
        logits[..., end] = torch.where(early, -math.inf, logits[..., end])
    lp = torch.log_softmax(logits / temperature, dim=-1).gather(-1, batch.labels[..., None])[..., 0]
    return lp * batch.response_mask


def rollouts_of(batch: RolloutBatch, engine_log_probs: torch.Tensor) -> list[Rollout]:
    """The engine's rollouts of the batch's rows: their response tokens with `engine_log_probs`."""
    out = []
    for row in range(len(SHAPES)):
        on = batch.response_mask[row] > 0
        out.append(Rollout(f"r{row}", batch.labels[row][on].tolist(), engine_log_probs[row][on].tolist()))
    return out


def row_offsets(values: list[float]) -> torch.Tensor:
    return torch.tensor(values)[:, None]


def mean_over(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float((values * mask).sum() / mask.sum())


def trained(batch: RolloutBatch) -> torch.Tensor:
    """(B, T) the response mask of the rows that are not left out (advantage not 0)."""
    return batch.response_mask * (batch.advantages != 0).float()[:, None]


def test_the_learning_rate_warms_up_linearly_over_warmup_steps(tiny_model_dir: Path) -> None:
    """lr_k = lr min(1, (k + 1) / warmup) at optimizer step k (from 0); constant without warm-up.
    The logged train/lr is the mean over the GRPO step's optimizer steps of the rate each took."""
    learner = make_learner(tiny_model_dir, "learning_rate=0.001", "optimizer.warmup_steps=4",
                           "train_batch_size=2", "micro_batch_size=1")  # 3 optimizer steps a GRPO step
    batch = make_batch()
    first = learner._train(batch, PhaseTimer(CPU), staleness=0)
    assert first["train/optimizer_steps_this_grpo_step"] == 3
    assert first["train/lr"] == pytest.approx(0.001 * (0.25 + 0.5 + 0.75) / 3)
    second = learner._train(batch, PhaseTimer(CPU), staleness=0)
    assert second["train/lr"] == pytest.approx(0.001 * (1.0 + 1.0 + 1.0) / 3)
    assert learner.scheduler.get_last_lr() == [pytest.approx(0.001)]
    constant = make_learner(tiny_model_dir, "learning_rate=0.001", "optimizer.warmup_steps=0")
    assert constant._train(make_batch(), PhaseTimer(CPU), staleness=0)["train/lr"] == pytest.approx(0.001)
    assert constant.scheduler.get_last_lr() == [pytest.approx(0.001)]
    one = make_learner(tiny_model_dir, "learning_rate=0.001", "optimizer.warmup_steps=1")
    assert one.scheduler.get_last_lr() == [pytest.approx(0.001)]


def test_the_zero_advantage_skip_leaves_out_exactly_the_zero_advantage_rows(tiny_model_dir: Path) -> None:
    """GRPO-Clip reads pi_old: the old-log-prob pass fills every trained row with the policy's
    log-probs and leaves the zero-advantage rows 0; with the skip off every row is filled."""
    learner = make_learner(tiny_model_dir, "loss=grpo_clip")
    batch = make_batch()
    order = batch.order
    assert learner.left_out(batch, order).tolist() == [ADVANTAGES[r] == 0 for r in ORDER]
    metrics = learner._old_log_probs(batch, [], 2, PhaseTimer(CPU), staleness=0)
    assert metrics == {}
    expected = reference_log_probs(learner.policy, batch)
    on = batch.response_mask
    torch.testing.assert_close(batch.old_log_probs * on, expected * trained(batch), atol=1e-5, rtol=0)
    assert not batch.old_log_probs[ZERO].any()  # not computed at all
    metrics = learner._train(batch, PhaseTimer(CPU), staleness=0)
    assert metrics["train/frac_skipped"] == pytest.approx(2 / 6)

    every = make_learner(tiny_model_dir, "loss=grpo_clip", "skip_zero_advantage=false")
    batch = make_batch()
    assert not every.left_out(batch, batch.order).any()
    every._old_log_probs(batch, [], 2, PhaseTimer(CPU), staleness=0)
    torch.testing.assert_close(batch.old_log_probs * on, expected, atol=1e-5, rtol=0)
    assert every._train(batch, PhaseTimer(CPU), staleness=0)["train/frac_skipped"] == 0.0
    # a loss that is not 0 at zero advantage (no_baseline) is never skipped
    assert not make_learner(tiny_model_dir, "loss=no_baseline").left_out(batch, batch.order).any()


def test_the_check_mirrors_temperature_2_and_the_minimum_length_and_compares_every_row(
        tiny_model_dir: Path) -> None:
    """The stale-weight check compares the engine's log-probs with the trainer's under the
    sampling distribution (logits / 2, the end tokens masked before min_new_tokens=2), on every
    rollout, the left-out ones included: per-row offsets 0.01 .. 0.06 give their mean, 0.035
    (the trained rows alone would give 0.0325, the raw log-probs far more)."""
    learner = make_learner(tiny_model_dir, "sampling.temperature=2.0", "sampling.min_new_tokens=2",
                           "rollout.stale_check_every=5")
    batch = make_batch()
    mirrored = reference_log_probs(learner.policy, batch, temperature=2.0, min_new_tokens=2)
    offsets = row_offsets([0.01, 0.02, 0.03, 0.06, 0.04, 0.05])
    rollouts = rollouts_of(batch, mirrored + offsets)
    metrics = learner._old_log_probs(batch, rollouts, 5, PhaseTimer(CPU), staleness=0)
    assert metrics["rollout/engine_logprob_abs_diff"] == pytest.approx(0.035, abs=1e-5)
    assert metrics["rollout/outside_trainer_nucleus"] == 0.0
    # the ratio-free loss reads no old log-probs, and a fresh uncorrected batch gets no weights
    assert batch.old_log_probs is None and batch.importance_weights is None
    # due every 5 steps and on the first: not at step 4, nor on a stale batch
    assert learner._old_log_probs(batch, rollouts, 4, PhaseTimer(CPU), staleness=0) == {}
    assert learner._stale_check_due(1, 0) and learner._stale_check_due(10, 0)
    assert not learner._stale_check_due(4, 0) and not learner._stale_check_due(6, 0)
    assert not learner._stale_check_due(5, 1) and not learner._stale_check_due(1, 1)
    learner.start_step = 7  # resumed after step 7: the check runs on step 8
    assert learner._stale_check_due(8, 0) and not learner._stale_check_due(9, 0)
    # an uncorrected run does not stop on a mismatch, it only measures it
    far = rollouts_of(batch, mirrored - 0.5)
    assert learner._old_log_probs(batch, far, 5, PhaseTimer(CPU), staleness=0)[
        "rollout/engine_logprob_abs_diff"] == pytest.approx(0.5, abs=1e-5)
    never = make_learner(tiny_model_dir, "rollout.stale_check_every=0")
    assert not any(never._stale_check_due(step, 0) for step in (1, 2, 5))


def test_a_corrected_run_checks_its_first_on_policy_batch_and_stops_on_a_mismatch(
        tiny_model_dir: Path) -> None:
    """With a correction the check runs on the first step of the run (on-policy, staleness 0)
    even with rollout.stale_check_every=0, and a mean difference over 0.1 nats stops it; later
    fresh batches are not checked, and get no importance weights without correct_fresh."""
    learner = make_learner(tiny_model_dir, "loss=grpo_clip", "off_policy.staleness=1",
                           "off_policy.correction=tis")
    batch = make_batch()
    reference = reference_log_probs(learner.policy, batch)
    metrics = learner._old_log_probs(batch, rollouts_of(batch, reference + 0.09), 1,
                                     PhaseTimer(CPU), staleness=0)
    assert metrics["rollout/engine_logprob_abs_diff"] == pytest.approx(0.09, abs=1e-5)
    assert batch.importance_weights is None
    with pytest.raises(LogProbMismatchError, match="differ from the trainer's by 0.110 nats"):
        learner._old_log_probs(batch, rollouts_of(batch, reference + 0.11), 1, PhaseTimer(CPU),
                               staleness=0)
    # step 2 on a fresh batch: no check, no weights (the old log-probs only, for the ratio)
    assert learner._old_log_probs(batch, rollouts_of(batch, reference + 0.5), 2, PhaseTimer(CPU),
                                  staleness=0) == {}
    assert batch.importance_weights is None
    uncorrected = make_learner(tiny_model_dir, "loss=grpo_clip", "off_policy.staleness=1",
                               "off_policy.correction=none")
    assert not uncorrected._stale_check_due(1, 0)


def expected_weights(proximal: torch.Tensor, behaviour: torch.Tensor, cap: float) -> torch.Tensor:
    return torch.exp(proximal - behaviour).clamp(max=cap)


def test_a_stale_batch_gets_capped_importance_weights_and_a_fresh_one_none(tiny_model_dir: Path) -> None:
    """Staleness 1 with tis, cap 2: w = min(pi_old / pi_behaviour, 2) on the trained rows, the
    engine's log-probs lower by 0.3 (w = e^0.3), higher by 1 (e^-1) or lower by 1 (e^1, capped);
    train/is_weight_mean and is_capped_fraction over the trained tokens, train/behaviour_kl their
    k3; no check on a stale batch."""
    learner = make_learner(tiny_model_dir, "loss=grpo_clip", "off_policy.staleness=1",
                           "off_policy.correction=tis", "off_policy.is_cap=2.0")
    batch = make_batch()
    proximal = reference_log_probs(learner.policy, batch)
    shift = row_offsets([-0.3, 0.2, 1.0, -0.3, -1.0, -0.3])
    behaviour = proximal + shift
    metrics = learner._old_log_probs(batch, rollouts_of(batch, behaviour), 2, PhaseTimer(CPU), staleness=1)
    mask = trained(batch)
    weights = expected_weights(proximal, behaviour, 2.0)
    on = mask > 0
    torch.testing.assert_close(batch.importance_weights[on], weights[on], atol=1e-5, rtol=1e-5)
    assert batch.importance_weights[on].max() == pytest.approx(2.0)
    assert metrics["train/is_weight_mean"] == pytest.approx(mean_over(weights, mask), rel=1e-5)
    capped = (torch.exp(-shift).expand_as(mask) > 2.0).float()
    assert metrics["train/is_capped_fraction"] == pytest.approx(mean_over(capped, mask))
    log_ratio = -shift.expand_as(mask)
    k3 = torch.expm1(log_ratio) - log_ratio
    assert metrics["train/behaviour_kl"] == pytest.approx(mean_over(k3, mask), rel=1e-4)
    assert "rollout/engine_logprob_abs_diff" not in metrics
    torch.testing.assert_close(batch.old_log_probs * mask, proximal * mask, atol=1e-5, rtol=0)
    # the weights reach the loss: ratio 1 on the first step, so "mean" gives mean_i mean_t -A_i w
    lengths = batch.response_mask.sum(dim=1)
    per_row = -(torch.tensor(ADVANTAGES)[:, None] * weights * mask).sum(dim=1) / lengths
    loss = learner._train(batch, PhaseTimer(CPU), staleness=1)["train/loss"]
    assert loss == pytest.approx(float(per_row.mean()), rel=1e-5)

    # the same batch fresh (staleness 0, step 2): no weights, no behaviour KL
    fresh = make_batch()
    again = make_learner(tiny_model_dir, "loss=grpo_clip", "off_policy.staleness=1",
                         "off_policy.correction=tis")
    assert again._old_log_probs(fresh, rollouts_of(fresh, behaviour), 2, PhaseTimer(CPU), staleness=0) == {}
    assert fresh.importance_weights is None
    # with correct_fresh the fresh batch is weighted too
    corrected = make_learner(tiny_model_dir, "loss=grpo_clip", "off_policy.correct_fresh=true",
                             "off_policy.correction=tis")
    fresh = make_batch()
    got = corrected._old_log_probs(fresh, rollouts_of(fresh, behaviour), 2, PhaseTimer(CPU), staleness=0)
    torch.testing.assert_close(fresh.importance_weights[on], weights[on], atol=1e-5, rtol=1e-5)
    assert "train/behaviour_kl" not in got and got["train/is_weight_mean"] == pytest.approx(
        mean_over(weights, mask), rel=1e-5)


def test_a_cap_below_one_bounds_every_weight(tiny_model_dir: Path) -> None:
    """is_cap in (0, 1]: 0.5 caps every weight above it (e^0.3 and e^-0.2 > 0.5, e^-1 not)."""
    learner = make_learner(tiny_model_dir, "loss=grpo_clip", "off_policy.staleness=1",
                           "off_policy.correction=tis", "off_policy.is_cap=0.5")
    batch = make_batch()
    proximal = reference_log_probs(learner.policy, batch)
    behaviour = proximal + row_offsets([-0.3, 0.2, 1.0, 0.2, 0.2, 0.2])
    metrics = learner._old_log_probs(batch, rollouts_of(batch, behaviour), 2, PhaseTimer(CPU), staleness=1)
    mask = trained(batch)
    on = mask > 0
    weights = expected_weights(proximal, behaviour, 0.5)
    torch.testing.assert_close(batch.importance_weights[on], weights[on], atol=1e-5, rtol=1e-5)
    # trained rows 0, 2, 4, 5: 3 + 2 + 1 + 4 tokens, row 2's (2 tokens) below the cap
    assert metrics["train/is_capped_fraction"] == pytest.approx(8 / 10)
    assert metrics["train/is_weight_mean"] == pytest.approx((8 * 0.5 + 2 * math.exp(-1.0)) / 10, rel=1e-5)


def test_weights_in_the_training_forward_of_a_stale_batch(tiny_model_dir: Path) -> None:
    """A ratio-free loss, one optimizer step, raw sampling: no old-log-prob pass; the engine's
    log-probs go into the batch and the weights are taken in the training forward."""
    learner = make_learner(tiny_model_dir, "off_policy.staleness=1", "off_policy.correction=tis")
    assert learner.weights_in_train_pass
    batch = make_batch()
    proximal = reference_log_probs(learner.policy, batch)
    shift = row_offsets([-0.3, 0.2, 1.0, -0.3, -1.0, -0.3])
    rollouts = rollouts_of(batch, proximal + shift)
    assert learner._old_log_probs(batch, rollouts, 2, PhaseTimer(CPU), staleness=1) == {}
    assert batch.old_log_probs is None and batch.importance_weights is None
    on = batch.response_mask > 0
    torch.testing.assert_close(batch.behaviour_log_probs[on], (proximal + shift)[on], atol=1e-6, rtol=0)
    assert torch.isnan(batch.behaviour_log_probs[~on]).all()
    metrics = learner._train(batch, PhaseTimer(CPU), staleness=1)
    mask = trained(batch)
    weights = expected_weights(proximal, proximal + shift, 2.0)
    assert metrics["train/is_weight_mean"] == pytest.approx(mean_over(weights, mask), rel=1e-5)
    capped = (torch.exp(-shift).expand_as(mask) > 2.0).float()
    assert metrics["train/is_capped_fraction"] == pytest.approx(mean_over(capped, mask))
    log_ratio = -shift.expand_as(mask)
    assert metrics["train/behaviour_kl"] == pytest.approx(
        mean_over(torch.expm1(log_ratio) - log_ratio, mask), rel=1e-4)
    # the first step of a corrected run is checked: its pass runs, on-policy, without weights
    first = make_batch()
    proximal = reference_log_probs(learner.policy, first)  # the weights after the update
    checked = learner._old_log_probs(first, rollouts_of(first, proximal), 1, PhaseTimer(CPU), staleness=0)
    assert checked["rollout/engine_logprob_abs_diff"] == pytest.approx(0.0, abs=1e-5)
    assert first.behaviour_log_probs is None and first.importance_weights is None
    # a fresh batch later: nothing at all
    later = make_batch()
    assert learner._old_log_probs(later, rollouts_of(later, proximal), 2, PhaseTimer(CPU), staleness=0) == {}
    assert later.behaviour_log_probs is None
    stale = learner._train(later, PhaseTimer(CPU), staleness=0)
    assert "train/is_weight_mean" not in stale and "train/behaviour_kl" not in stale


def token_entropy(policy: torch.nn.Module, batch: RolloutBatch) -> torch.Tensor:
    """(B, T) the entropy in nats of the policy's next-token distribution at each position."""
    with torch.no_grad():
        log_p = torch.log_softmax(policy(batch.input_ids).logits.float(), dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)


def loss_terms(policy: torch.nn.Module, batch: RolloutBatch) -> torch.Tensor:
    """(B,) the sum over each row's response tokens of its log-probs."""
    return reference_log_probs(policy, batch).sum(dim=1)


@pytest.mark.parametrize("normalization", ["token", "microbatch", "mean"])
def test_the_normalizations_read_the_whole_steps_tokens_and_longest_response(
        tiny_model_dir: Path, normalization: str) -> None:
    """reinforce_with_baseline (-A log p per token), one optimizer step of six rows in
    micro-batches of 2, rows 1 and 3 left out (their loss is 0) but counted: "token" divides the
    sum by all 22 response tokens, "microbatch" each row's sum by the longest response, row 3's 7
    tokens, and by the 6 rows; "mean" each row's mean by the 6 rows."""
    learner = make_learner(tiny_model_dir, f"normalization={normalization}")
    batch = make_batch()
    sums = loss_terms(learner.policy, batch)
    advantages = torch.tensor(ADVANTAGES)
    lengths = torch.tensor([float(r) for _, r in SHAPES])
    per_row = -advantages * sums
    expected = {"token": per_row.sum() / lengths.sum(), "microbatch": per_row.sum() / 7 / 6,
                "mean": (per_row / lengths).sum() / 6}[normalization]
    assert lengths.sum() == 22 and lengths.max() == 7
    metrics = learner._train(batch, PhaseTimer(CPU), staleness=0)
    assert metrics["train/loss"] == pytest.approx(float(expected), rel=1e-5)
    # one row an optimizer step (learning rate 0: the same weights throughout): each divides by
    # its own length under every normalization, row 4's single token by 1; a step of a left-out
    # row alone has loss 0; train/loss is the mean over the six steps
    single = make_learner(tiny_model_dir, f"normalization={normalization}", "learning_rate=0.0",
                          "train_batch_size=1", "micro_batch_size=1")
    metrics = single._train(make_batch(), PhaseTimer(CPU), staleness=0)
    assert metrics["train/optimizer_steps_this_grpo_step"] == 6
    assert metrics["train/loss"] == pytest.approx(float((per_row / lengths).mean()), rel=1e-5)
    assert metrics["train/frac_skipped"] == pytest.approx(2 / 6)


def test_no_baseline_reads_each_rows_raw_reward(tiny_model_dir: Path) -> None:
    """no_baseline: -R log p per token, R the row's raw reward (not its advantage), every row
    trained (the loss is not 0 at zero advantage)."""
    learner = make_learner(tiny_model_dir, "loss=no_baseline", "normalization=token")
    batch = make_batch()
    sums = loss_terms(learner.policy, batch)
    expected = -(torch.tensor(RAW_REWARDS) * sums).sum() / 22
    metrics = learner._train(batch, PhaseTimer(CPU), staleness=0)
    assert metrics["train/loss"] == pytest.approx(float(expected), rel=1e-5)
    assert metrics["train/frac_skipped"] == 0.0


def test_ratio_statistics_are_token_means_over_the_trained_rows_then_over_optimizer_steps(
        tiny_model_dir: Path) -> None:
    """pi_old planted below the policy by a per-row delta (ratio e^delta), learning rate 0 so that
    every optimizer step sees the same ratios; two optimizer steps of three rows (ORDER[:3] and
    ORDER[3:]), micro-batches of 1: each step's mean_ratio, approx_kl (k3) and clip_fraction
    (GRPO-Clip at 0.2: the clipped term smaller) are token means over its trained rows, then the
    plain mean over the two steps; the first micro-batch (row 0) logs its own ratio."""
    learner = make_learner(tiny_model_dir, "loss=grpo_clip", "learning_rate=0.0", "train_batch_size=3",
                           "micro_batch_size=1")
    batch = make_batch()
    proximal = reference_log_probs(learner.policy, batch)
    delta = row_offsets([0.1, 0.0, -0.3, 0.0, 0.5, 0.25])
    batch.old_log_probs = (proximal - delta) * batch.response_mask
    ratio = torch.exp(delta).expand_as(proximal)
    advantages = torch.tensor(ADVANTAGES)[:, None]
    clipped = ((ratio.clamp(0.8, 1.2) * advantages) < (ratio * advantages)).float()
    mask = trained(batch)
    values = {"mean_ratio": ratio, "approx_kl": (ratio - 1) - torch.log(ratio), "clip_fraction": clipped}
    metrics = learner._train(batch, PhaseTimer(CPU), staleness=0)
    for key, value in values.items():
        steps = []
        for rows in (ORDER[:3], ORDER[3:]):
            keep = torch.zeros_like(mask)
            keep[rows] = mask[rows]
            steps.append(mean_over(value, keep))
        assert metrics[f"train/{key}"] == pytest.approx(sum(steps) / 2, rel=1e-4, abs=1e-6), key
    assert metrics["train/clip_fraction"] > 0  # rows 2 (A < 0, r 0.74) and 4 (A > 0, r 1.65)
    # train/entropy: the token mean of the policy's entropy over every row of each step, the
    # left-out ones included (measured in an inference forward), then the mean over the steps
    entropy = token_entropy(learner.policy, batch)
    steps = []
    for rows in (ORDER[:3], ORDER[3:]):
        keep = torch.zeros_like(mask)
        keep[rows] = batch.response_mask[rows]
        steps.append(mean_over(entropy, keep))
    assert metrics["train/entropy"] == pytest.approx(sum(steps) / 2, rel=1e-5)
    assert metrics["train/mean_ratio_first_microbatch"] == pytest.approx(math.exp(0.1), rel=1e-5)
    assert metrics["train/optimizer_steps_this_grpo_step"] == 2 == metrics["train/optimizer_steps"]
    assert metrics["train/nonfinite_weights"] == 0.0


def test_an_on_policy_step_without_old_log_probs_logs_ratio_one(tiny_model_dir: Path) -> None:
    learner = make_learner(tiny_model_dir)
    metrics = learner._train(make_batch(), PhaseTimer(CPU), staleness=0)
    assert (metrics["train/mean_ratio"], metrics["train/clip_fraction"], metrics["train/approx_kl"]) == (
        1.0, 0.0, 0.0)
    assert metrics["train/mean_ratio_first_microbatch"] == 1.0
    off = make_learner(tiny_model_dir, "loss=reinforce_with_baseline", "off_policy.epochs=2")
    assert "train/mean_ratio" not in off._train(make_batch(), PhaseTimer(CPU), staleness=0)


def test_nonfinite_weights_are_flagged_and_take_no_optimizer_step(tiny_model_dir: Path) -> None:
    learner = make_learner(tiny_model_dir)
    with torch.no_grad():
        next(learner.policy.parameters()).view(-1)[0] = math.inf
    metrics = learner._train(make_batch(), PhaseTimer(CPU), staleness=0)
    assert metrics["train/nonfinite_weights"] == 1.0
    assert metrics["train/optimizer_steps_this_grpo_step"] == 0 == learner.optimizer_steps


def test_the_token_budget_packs_rows_by_their_length_up_to_the_last_response_token(
        tiny_model_dir: Path) -> None:
    """model.micro_batch_tokens=16: rows sorted by length (prompt + response - 1 tokens: 4, 7, 2,
    8, 4, 6), each micro-batch as many as fit rows x its longest <= 16, trimmed to its longest;
    the trained rows (0, 2, 4, 5: lengths 4, 2, 4, 6) in one optimizer step pack as [5, 0] (2 x 6)
    and [4, 2] (2 x 4); the left-out rows 3 and 1 (8, 7) then together, 2 x 8 = 16, for their
    entropy."""
    learner = make_learner(tiny_model_dir, "model.micro_batch_tokens=16")
    batch = make_batch()
    assert batch.lengths(batch.order) == [8, 4, 6, 7, 4, 2]
    shapes: list[tuple[int, ...]] = []
    hook = learner.policy.register_forward_pre_hook(
        lambda _, args, kwargs: shapes.append(tuple((args[0] if args else kwargs["input_ids"]).shape)),
        with_kwargs=True)
    try:
        learner._train(batch, PhaseTimer(CPU), staleness=0)
    finally:
        hook.remove()
    assert shapes == [(2, 6), (2, 4), (2, 8)]


def test_a_nonfinite_gradient_with_a_finite_loss_takes_no_step(tiny_model_dir: Path) -> None:
    """A NaN in the accumulated gradient (here planted before the step) with a finite loss: no
    optimizer step, the weights unchanged and finite."""
    learner = make_learner(tiny_model_dir)
    before = {name: p.detach().clone() for name, p in learner.policy.named_parameters()}
    first = next(learner.policy.parameters())
    first.grad = torch.full_like(first, math.nan)
    metrics = learner._train(make_batch(), PhaseTimer(CPU), staleness=0)
    assert math.isfinite(metrics["train/loss"]) and math.isnan(metrics["train/grad_norm"])
    assert metrics["train/optimizer_steps_this_grpo_step"] == 0
    assert metrics["train/nonfinite_weights"] == 0.0
    for name, p in learner.policy.named_parameters():
        assert torch.equal(p, before[name]), name


def gradient_norm(module: torch.nn.Module) -> float:
    return float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in module.parameters()
                                if p.grad is not None)))


@pytest.mark.parametrize("max_norm", ["0.001", "null"])
def test_the_gradient_is_the_steps_and_is_clipped_before_the_update(
        tiny_model_dir: Path, max_norm: str) -> None:
    """train/grad_norm is the norm of the gradient of the step's loss computed here by autograd
    ("token": the sum over the step's 22 tokens of -A log p / 22), before clipping; the optimizer
    steps on the gradient clipped to optimizer.max_grad_norm (none with null), and the weights move."""
    learner = make_learner(tiny_model_dir, "normalization=token", f"optimizer.max_grad_norm={max_norm}")
    batch = make_batch()
    reference = copy.deepcopy(learner.policy)
    logits = reference(batch.input_ids).logits.float()
    lp = torch.log_softmax(logits, dim=-1).gather(-1, batch.labels[..., None])[..., 0]
    (-(torch.tensor(ADVANTAGES)[:, None] * lp * batch.response_mask).sum() / 22).backward()
    norm = gradient_norm(reference)
    at_step: list[float] = []
    learner.optimizer.register_step_pre_hook(lambda *_: at_step.append(gradient_norm(learner.policy)))
    before = {name: p.detach().clone() for name, p in learner.policy.named_parameters()}
    metrics = learner._train(batch, PhaseTimer(CPU), staleness=0)
    assert metrics["train/grad_norm"] == pytest.approx(norm, rel=1e-4)
    assert at_step == [pytest.approx(norm if max_norm == "null" else 0.001, rel=1e-4)]
    moved = max(float((p.detach() - before[name]).abs().max()) for name, p in learner.policy.named_parameters())
    assert moved == pytest.approx(float(learner.cfg.learning_rate), rel=0.05)  # Adam's first step


def test_an_uncorrected_stale_batch_logs_its_drift_but_gets_no_weights(tiny_model_dir: Path) -> None:
    learner = make_learner(tiny_model_dir, "loss=grpo_clip", "off_policy.staleness=1",
                           "off_policy.correction=none")
    batch = make_batch()
    proximal = reference_log_probs(learner.policy, batch)
    shift = row_offsets([-0.3, 0.2, 1.0, -0.3, -1.0, -0.3])
    metrics = learner._old_log_probs(batch, rollouts_of(batch, proximal + shift), 2, PhaseTimer(CPU),
                                     staleness=1)
    assert batch.importance_weights is None and "train/is_weight_mean" not in metrics
    log_ratio = -shift.expand_as(proximal)
    assert metrics == {"train/behaviour_kl": pytest.approx(
        mean_over(torch.expm1(log_ratio) - log_ratio, trained(batch)), rel=1e-4)}


def test_correct_fresh_weights_in_the_training_forward_without_a_drift(tiny_model_dir: Path) -> None:
    """correct_fresh with a ratio-free loss on raw sampling: a fresh batch's weights are taken in
    the training forward; no behaviour KL at staleness 0."""
    learner = make_learner(tiny_model_dir, "off_policy.correct_fresh=true")
    assert learner.weights_in_train_pass and learner.correction is not None
    batch = make_batch()
    proximal = reference_log_probs(learner.policy, batch)
    shift = row_offsets([-0.3, 0.2, 1.0, -0.3, -1.0, -0.3])
    assert learner._old_log_probs(batch, rollouts_of(batch, proximal + shift), 2, PhaseTimer(CPU),
                                  staleness=0) == {}
    metrics = learner._train(batch, PhaseTimer(CPU), staleness=0)
    weights = expected_weights(proximal, proximal + shift, 2.0)
    assert metrics["train/is_weight_mean"] == pytest.approx(mean_over(weights, trained(batch)), rel=1e-5)
    assert "train/behaviour_kl" not in metrics


def test_learn_runs_the_old_log_prob_pass_only_where_needed_then_trains(tiny_model_dir: Path) -> None:
    """`learn` with its defaults (a fresh batch, as bench/step_time.py calls it): a ratio-free loss
    and no check due need no old-log-prob pass; GRPO-Clip does."""
    learner = make_learner(tiny_model_dir)
    timer = PhaseTimer(CPU)
    metrics = learner.learn(make_batch(), [], 2, timer)
    assert "time/old_log_probs_s" not in timer.metrics and "time/train_s" in timer.metrics
    assert metrics["train/optimizer_steps"] == 1 and "train/behaviour_kl" not in metrics
    clip = make_learner(tiny_model_dir, "loss=grpo_clip")
    timer = PhaseTimer(CPU)
    batch = make_batch()
    clip.learn(batch, [], 2, timer)
    assert "time/old_log_probs_s" in timer.metrics and batch.old_log_probs is not None
