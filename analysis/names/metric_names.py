"""What the logged metrics are called in figures: a human name, a unit and, for rewards and
fractions, the range the axis shows (:mod:`grpo.run.metric_keys` says what each one measures)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricName:
    """``name`` and ``unit`` of a metric; ``bounds`` the full range of its values, if it has one."""

    name: str
    unit: str
    bounds: tuple[float, float] | None = None

    def axis_label(self, detail: str = "") -> str:
        """``Validation reward (greedy, 0-1)``: the name, then ``detail`` and the unit."""
        inside = ", ".join(part for part in (detail, self.unit) if part)
        return f"{self.name} ({inside})" if inside else self.name


REWARD = (0.0, 1.0)
METRIC_NAMES = {
    "eval/reward": MetricName("Validation reward", "0-1", REWARD),
    "eval/format_reward": MetricName("Validation format reward", "0-1", REWARD),
    "eval/answer_reward": MetricName("Validation answer reward", "0-1", REWARD),
    "eval/mean_response_length": MetricName("Validation response length", "tokens"),
    "train/reward_mean": MetricName("Training reward", "rollout mean, 0-1", REWARD),
    "train/entropy": MetricName("Entropy", "nats per token"),
    "train/mean_response_length": MetricName("Response length", "tokens"),
    "train/grad_norm": MetricName("Gradient norm", "L2, before clipping"),
    "train/clip_fraction": MetricName("Clipped tokens", "fraction, 0-1", REWARD),
    "train/loss": MetricName("Loss", "per optimizer step"),
    "train/approx_kl": MetricName("KL to the step's start weights", "pi_old, k3 estimate, nats"),
    "train/behaviour_kl": MetricName("KL to the behaviour policy", "staleness 1, k3 estimate, nats"),
    "train/frac_zero_std_groups": MetricName("Zero-variance groups", "fraction, 0-1", REWARD),
    "train/frac_skipped": MetricName("Rollouts left out of the backward", "fraction, 0-1", REWARD),
    "time/elapsed_no_eval_s": MetricName("Wall-clock training time", "eval excluded"),
}


def metric_name(key: str) -> MetricName:
    """The :class:`MetricName` of ``key``; an unknown key is shown as it is."""
    return METRIC_NAMES.get(key, MetricName(key, ""))
