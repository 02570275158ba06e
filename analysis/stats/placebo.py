"""How far a config stands above its placebo, and what the placebo gained by itself.

A placebo arm is the config trained the same way on ``reward=random`` (each response rewarded 1
with probability ``reward.p``, whatever its answer: ``grpo.grading.rewards.placebo_rewards``),
evaluated on the true reward. Training on a reward that carries no information can still move
the validation reward (Shao et al. 2025: +21 points on MATH-500 for Qwen2.5-Math-7B, against +29
with the true reward), so "the config learned" is its margin over its placebo, not over the
pre-RL evaluation. Two numbers, each with a two-sided 1 - ``alpha`` interval that carries the
seed variance:

* :func:`above_placebo`: the config's mean minus its placebo's, over their seeds, on the pair
  rule of the report's comparisons (:func:`analysis.stats.comparisons.pair_variance`: the larger
  of the sweep's seed variance and the pair's own Welch variance,
  :func:`analysis.stats.critical.pair_seed_variance`, the latter on Welch's df). Both arms are
  evaluated on the same problems, so the problems' difficulty cancels in the difference.
* :func:`gain_over_pre_rl`: the placebo's late value minus the pre-RL (step 0) evaluation, run by
  run (each run's gain, paired by seed), on the seed variance a config's own interval rests on
  (:func:`analysis.stats.comparisons.config_variance` of the gains: the larger of the sweep's
  seed variance and the gains' own, on the gains' n - 1 df). A run's gain varies by the late
  value's seed variance plus the pre-RL evaluation's sampling noise (the initial policy is the
  same for every seed, only its sampled responses differ), so the sweep's seed variance is a
  floor under the gains' variance, never above it in expectation. The same problems again: the
  problem term cancels.

Neither is simultaneous over several finalists: pass ``alpha`` / k for k of them (Bonferroni).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from analysis.names.formatting import fmt_difference_interval
from analysis.stats.comparisons import comparable, config_variance, pair_variance
from analysis.stats.levels import ALPHA, level_text, p_text
from analysis.stats.variance import ConfigData, SeedVariance, df_text


@dataclass(frozen=True)
class PlaceboInterval:
    """A difference of rewards (``diff``: a config's margin over its placebo, or the placebo's
    gain over the pre-RL evaluation) with its two-sided 1 - ``alpha`` interval ``[lo, hi]``,
    standard error ``se`` on ``df`` degrees of freedom, the one-sided p-value ``p_above`` of no
    margin (H0: the true difference is <= 0) and the seeds each side averages (``n_seeds``: the
    config's and its placebo's, or the placebo's runs twice)."""

    diff: float
    lo: float
    hi: float
    se: float
    df: float
    p_above: float
    n_seeds: tuple[int, int]
    alpha: float = ALPHA

    @property
    def above(self) -> bool:
        """Whether the interval lies above 0: the difference is shown positive at ``alpha`` / 2
        one-sided."""
        return self.lo > 0

    def describe(self) -> str:
        """``+0.124 [+0.041, +0.207] (95%, 3.9 df), one-sided p 0.012``."""
        return (f"{self.diff:+.3f} {fmt_difference_interval(self.lo, self.hi)} "
                f"({level_text(self.alpha)}, {df_text(self.df)} df), one-sided p {p_text(self.p_above)}")


def _interval(diff: float, se: float, df: float, n_seeds: tuple[int, int],
              alpha: float) -> PlaceboInterval:
    half = float(special.stdtrit(df, 1 - alpha / 2)) * se
    p_above = float(special.stdtr(df, -diff / se))
    return PlaceboInterval(diff, diff - half, diff + half, se, df, p_above, n_seeds, alpha)


def above_placebo(config: ConfigData, placebo: ConfigData, seeds: SeedVariance,
                  alpha: float = ALPHA) -> PlaceboInterval | None:
    """``config``'s mean minus ``placebo``'s (their criterion values, one per seed), with its
    interval on the pair's seed variance (:func:`~analysis.stats.comparisons.pair_variance`, as
    the report compares two configs): se = sqrt(v (1 / n_c + 1 / n_p)), v the larger of
    ``seeds``' variance and the pair's own (v_c / n_c + v_p / n_p) / (1 / n_c + 1 / n_p), the
    latter on Welch's df; half-width t(1 - alpha / 2, df) se. None where the two were evaluated
    on other problems or ``seeds`` is not usable (no interval can be honest)."""
    if not seeds.usable or not comparable(config, placebo):
        return None
    variance, df = pair_variance(config, placebo, seeds)
    se = math.sqrt(variance * (1 / config.n_seeds + 1 / placebo.n_seeds))
    return _interval(config.mean - placebo.mean, se, df, (config.n_seeds, placebo.n_seeds), alpha)


def gain_over_pre_rl(placebo: ConfigData, pre_rl: Sequence[float] | np.ndarray,
                     seeds: SeedVariance, alpha: float = ALPHA) -> PlaceboInterval | None:
    """The placebo's gain over the pre-RL evaluation: the mean over its S runs of each run's
    criterion value (``placebo.seed_values``, (S,)) minus that run's step-0 evaluation
    (``pre_rl``, (S,), in the same order), with its interval on
    :func:`~analysis.stats.comparisons.config_variance` of the gains (v: the larger of ``seeds``'
    variance and the gains' own sample variance, on S - 1 df; one run: ``seeds``' variance on
    its df): se = sqrt(v / S), half-width t(1 - alpha / 2, df) se. None where ``seeds`` is not
    usable.

    Raises:
        ValueError: ``pre_rl`` does not hold one value per run of ``placebo``.
    """
    before = np.asarray(pre_rl, dtype=float)
    if before.shape != placebo.seed_values.shape:
        raise ValueError(f"pre_rl holds {before.shape} values for the {placebo.n_seeds} runs of "
                         f"{placebo.label}: give each run's step-0 evaluation, in the same order")
    if not seeds.usable:
        return None
    gains = ConfigData(f"{placebo.label} gain", placebo.seed_values - before)
    variance, df = config_variance(gains, seeds)
    se = math.sqrt(variance / gains.n_seeds)
    return _interval(gains.mean, se, df, (placebo.n_seeds, placebo.n_seeds), alpha)
