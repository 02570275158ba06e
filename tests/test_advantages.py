"""Group-normalized rewards: hand-computed advantages, zero-variance groups, metadata, errors; the
batch std (std_norm=batch) against its definition."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from grpo import compute_group_normalized_rewards


def table_reward_fn(table: dict[str, tuple[float, float, float]]):
    """Reward function reading (reward, format_reward, answer_reward) from a table by response."""

    def reward_fn(response: str, ground_truth: str) -> dict[str, float]:
        reward, fmt, answer = table[response]
        return {"reward": reward, "format_reward": fmt, "answer_reward": answer}

    return reward_fn


# group 1 rewards [1, 0, 0, 1]; group 2 rewards [1, 1, 1, 1] (zero variance)
TABLE = {
    "r0": (1.0, 1.0, 1.0),
    "r1": (0.0, 1.0, 0.0),
    "r2": (0.0, 0.0, 0.0),
    "r3": (1.0, 1.0, 1.0),
    "s0": (1.0, 1.0, 1.0),
    "s1": (1.0, 1.0, 1.0),
    "s2": (1.0, 1.0, 1.0),
    "s3": (1.0, 1.0, 1.0),
}
RESPONSES = ["r0", "r1", "r2", "r3", "s0", "s1", "s2", "s3"]


def test_std_normalized_advantages_hand_computed():
    advantages, raw, meta = compute_group_normalized_rewards(
        table_reward_fn(TABLE), RESPONSES, ["gt"] * 8, 4, 1e-6, normalize_by_std=True
    )
    # group 1: mean 0.5, unbiased std sqrt((4 * 0.25) / 3) = 0.57735; (+-0.5) / (0.57735 + 1e-6)
    a = 0.5 / (math.sqrt(1.0 / 3.0) + 1e-6)
    torch.testing.assert_close(advantages, torch.tensor([a, -a, -a, a, 0.0, 0.0, 0.0, 0.0]))
    torch.testing.assert_close(raw, torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]))
    assert advantages.shape == raw.shape == (8,) and advantages.dtype == torch.float32
    # six 1s and two 0s: mean 0.75, population variance 0.75 * 0.25 = 0.1875
    assert meta["reward_mean"] == pytest.approx(0.75)
    assert meta["reward_std"] == pytest.approx(math.sqrt(0.1875))
    assert meta["reward_max"] == 1.0 and meta["reward_min"] == 0.0
    assert meta["format_reward_mean"] == pytest.approx(7 / 8)
    assert meta["answer_reward_mean"] == pytest.approx(6 / 8)
    assert meta["frac_zero_std_groups"] == pytest.approx(0.5)


def test_mean_only_advantages_hand_computed():
    advantages, _, _ = compute_group_normalized_rewards(
        table_reward_fn(TABLE), RESPONSES, ["gt"] * 8, 4, 1e-6, normalize_by_std=False
    )
    torch.testing.assert_close(advantages, torch.tensor([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0.0]))


@pytest.mark.parametrize("normalize_by_std", [True, False])
def test_zero_variance_groups_are_exactly_zero_never_nan(normalize_by_std):
    # 0.1 + 0.1 + 0.1 != 3 * 0.1 in floating point, so r - mean(r) is not exactly 0 unless handled;
    # with advantage_eps = 0 the std division would be 0/0 = NaN.
    table = {f"x{i}": (0.1, 1.0, 0.0) for i in range(3)}
    advantages, _, meta = compute_group_normalized_rewards(
        table_reward_fn(table), ["x0", "x1", "x2"], ["gt"] * 3, 3, 0.0, normalize_by_std
    )
    assert advantages.tolist() == [0.0, 0.0, 0.0]
    assert meta["frac_zero_std_groups"] == 1.0


def test_group_size_one_gives_zero_advantages():
    advantages, raw, meta = compute_group_normalized_rewards(
        table_reward_fn(TABLE), ["r0", "r1"], ["gt", "gt"], 1, 1e-6, True
    )
    assert advantages.tolist() == [0.0, 0.0] and raw.tolist() == [1.0, 0.0]
    assert meta["frac_zero_std_groups"] == 1.0


def test_rejects_batch_not_divisible_by_group_size():
    with pytest.raises(ValueError, match=r"\(3\) must be a positive multiple of group_size \(2\)"):
        compute_group_normalized_rewards(
            table_reward_fn(TABLE), ["r0", "r1", "r2"], ["gt"] * 3, 2, 1e-6, True
        )
    with pytest.raises(ValueError, match="ground truths"):
        compute_group_normalized_rewards(
            table_reward_fn(TABLE), ["r0", "r1"], ["gt"], 2, 1e-6, True
        )


def test_advantage_eps_is_added_to_the_group_std():
    # a large eps makes its sign visible: rewards (1, 0), unbiased std sqrt(1/2) = 0.70711;
    # (+-0.5) / (0.70711 + 0.5) = +-0.41421, where subtracting it would give +-2.41421
    table = {"a": (1.0, 1.0, 1.0), "b": (0.0, 1.0, 0.0)}
    advantages, _, _ = compute_group_normalized_rewards(
        table_reward_fn(table), ["a", "b"], ["gt"] * 2, 2, 0.5, normalize_by_std=True
    )
    a = 0.5 / (math.sqrt(0.5) + 0.5)
    torch.testing.assert_close(advantages, torch.tensor([a, -a]))
    assert a == pytest.approx(0.414214, abs=1e-6)


# three groups of 4 whose rewards are not 0/1 only: the batch std (0.4122, of all 12 raw rewards)
# differs from every group's std, from the std of the group-centred rewards (0.3615: it leaves out
# the spread between the groups' means) and from the population std (0.3947); the last group is
# all equal
BATCH_TABLE = {f"b{i}": (r, 1.0, r) for i, r in enumerate(
    [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0, 0.2, 0.2, 0.2, 0.2])}
BATCH_RESPONSES = list(BATCH_TABLE)


def batch_std_reference(rewards: list[float], group_size: int, eps: float) -> list[float]:
    """TRL's scale_rewards="batch" from its definition: each reward minus its group's mean, over
    the unbiased std of every reward of the batch plus eps; an all-equal group 0."""
    scale = statistics.stdev(rewards) + eps
    out = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start:start + group_size]
        mean = sum(group) / group_size
        out += [0.0 if len(set(group)) == 1 else (r - mean) / scale for r in group]
    return out


def test_batch_std_divides_by_the_std_of_every_raw_reward_of_the_batch():
    rewards = [BATCH_TABLE[r][0] for r in BATCH_RESPONSES]
    eps = 1e-3
    advantages, raw, meta = compute_group_normalized_rewards(
        table_reward_fn(BATCH_TABLE), BATCH_RESPONSES, ["gt"] * 12, 4, eps, True, std_scope="batch")
    expected = batch_std_reference(rewards, 4, eps)
    torch.testing.assert_close(advantages, torch.tensor(expected))
    assert statistics.stdev(rewards) == pytest.approx(0.412219, abs=1e-6)
    # group 1: (1 - 0.25) / (0.412219 + 1e-3)
    assert advantages[0].item() == pytest.approx(0.75 / 0.413219, rel=1e-5)
    assert raw.tolist() == pytest.approx(rewards) and meta["frac_zero_std_groups"] == pytest.approx(1 / 3)
    # the inputs tell the alternatives apart: the group std, the std of the group-centred
    # rewards, the population std
    by_group, _, _ = compute_group_normalized_rewards(
        table_reward_fn(BATCH_TABLE), BATCH_RESPONSES, ["gt"] * 12, 4, eps, True)
    centred, _, _ = compute_group_normalized_rewards(
        table_reward_fn(BATCH_TABLE), BATCH_RESPONSES, ["gt"] * 12, 4, eps, False)
    assert statistics.stdev(centred.tolist()) == pytest.approx(0.361499, abs=1e-6)
    for wrong in (by_group, centred / (statistics.stdev(centred.tolist()) + eps),
                  centred / (statistics.pstdev(rewards) + eps)):
        assert not torch.allclose(wrong, advantages, rtol=1e-3)


def test_batch_std_is_ignored_without_the_std_normalization_and_the_default_is_cs336s():
    args = (table_reward_fn(BATCH_TABLE), BATCH_RESPONSES, ["gt"] * 12, 4, 1e-6)
    mean_only, _, _ = compute_group_normalized_rewards(*args, False)
    assert torch.equal(compute_group_normalized_rewards(*args, False, std_scope="batch")[0], mean_only)
    assert torch.equal(compute_group_normalized_rewards(*args, True)[0],
                       compute_group_normalized_rewards(*args, True, std_scope="group")[0])
    with pytest.raises(ValueError, match="unknown std_scope 'global'"):
        compute_group_normalized_rewards(*args, True, std_scope="global")


def test_batch_std_of_a_batch_of_equal_rewards_gives_zero_advantages_never_nan():
    table = {f"x{i}": (0.1, 1.0, 0.0) for i in range(6)}
    advantages, _, _ = compute_group_normalized_rewards(
        table_reward_fn(table), list(table), ["gt"] * 6, 3, 0.0, True, std_scope="batch")
    assert advantages.tolist() == [0.0] * 6
