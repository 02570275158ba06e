"""Group-normalized rewards: hand-computed advantages, zero-variance groups, metadata, errors."""

from __future__ import annotations

import math

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
