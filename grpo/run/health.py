"""Run health: stop a run that diverged (NaN/inf) or collapsed (reward or length gone)."""

from __future__ import annotations

import math


class HealthMonitor:
    """Watches each GRPO step's metrics; `check` returns (status, reason) when the run must stop.

    zero_reward_patience: consecutive steps with mean rollout reward 0 that mean `collapsed`
      (0 = never).
    min_mean_response_length: a mean response length (tokens) below this for as many steps also
      means `collapsed` (0 = never).
    """

    def __init__(self, zero_reward_patience: int, min_mean_response_length: float) -> None:
        self.patience = int(zero_reward_patience)
        self.min_length = float(min_mean_response_length)
        self.zero_reward_streak = 0
        self.short_streak = 0

    def check(self, metrics: dict[str, float]) -> tuple[str, str] | None:
        """None while healthy, else (`diverged` | `collapsed`, reason)."""
        for key in ("train/loss", "train/grad_norm"):
            if key in metrics and not math.isfinite(metrics[key]):
                return "diverged", f"{key} is {metrics[key]}"
        if metrics.get("train/nonfinite_weights"):
            return "diverged", "the policy weights hold NaN or inf after the optimizer step"
        if self.patience <= 0:
            return None
        self.zero_reward_streak = self.zero_reward_streak + 1 if metrics["train/reward_mean"] == 0 else 0
        if self.zero_reward_streak >= self.patience:
            return "collapsed", f"rollout reward 0 for {self.zero_reward_streak} consecutive steps"
        length = metrics["train/mean_response_length"]
        self.short_streak = self.short_streak + 1 if length < self.min_length else 0
        if self.min_length > 0 and self.short_streak >= self.patience:
            return "collapsed", (
                f"mean response length below {self.min_length} tokens for {self.short_streak} steps"
            )
        return None

    def state_dict(self) -> dict[str, int]:
        """Streak counters, saved with checkpoints."""
        return {"zero_reward_streak": self.zero_reward_streak, "short_streak": self.short_streak}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore the streak counters."""
        self.zero_reward_streak = state["zero_reward_streak"]
        self.short_streak = state["short_streak"]
