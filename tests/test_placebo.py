"""The placebo arm: `reward=random` trains on a reward that carries no information (each response
rewarded 1 with probability reward.p, whatever its answer), evaluation keeps the true reward,
a placebo run is reproducible and resumes bit-exact, and the statistics of a config's margin over
its placebo and of the placebo's own gain (analysis.stats.placebo) against hand computations."""

from __future__ import annotations

import math
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from scipy import special
from test_trainer import read_metrics, toy_config
from training_runs import assert_same_run, finish, kill_after, latest, launch, steps

from analysis.stats.placebo import above_placebo, gain_over_pre_rl
from analysis.stats.variance import ConfigData, SeedVariance
from grpo.grading.rewards import answer_tag_reward_fn, placebo_rewards, score_batch
from grpo.run.outcomes import read_outcomes
from grpo.training.rollouts import flatten
from grpo.training.timing import PhaseTimer
from grpo.training.trainer import GRPOTrainer, train

PLACEBO = ("reward=random",)
QUIET = "logging.wandb_mode=disabled"
"""No wandb service in the test process: a service it started would be handed to the launched
runs (WANDB_SERVICE), and a run killed there keeps its run ID in use for the relaunch."""


# ------------------------------------------------------------------------------- the trainer


def test_a_placebo_step_trains_on_the_draws_and_logs_the_true_grading(
        tiny_model_dir: Path, tmp_path: Path) -> None:
    """Step 1's scored batch: each row's raw reward is its draw of (seed, step, row), identical
    responses of a group drawn apart; the advantages are the draws' group-normalized values;
    train/answer_reward_mean is the real grader's verdict on the same responses."""
    cfg = toy_config(tiny_model_dir, *PLACEBO, "reward.p=0.3", "seed=4", "n_grpo_steps=1", QUIET)
    trainer = GRPOTrainer(cfg, tmp_path)
    timer = PhaseTimer(trainer.device)
    prompts, rollouts, truths = flatten(trainer._rollout(1, timer), cfg.group_size)
    batch, metrics = trainer._score(prompts, rollouts, truths, 1, timer)
    draws = placebo_rewards(0.3, 4, 1, 64)
    assert batch.raw_rewards.tolist() == draws
    responses = [r.text for r in rollouts]
    repeated = sum(responses[i] in responses[(i // 8) * 8:i] for i in range(64))
    assert repeated > 8  # the warmed-up tiny model repeats itself: rows, not texts, are drawn
    group = torch.tensor(draws[:8])
    expected = (group - group.mean()) / (group.std() + cfg.advantage_eps)
    if group.max() == group.min():
        expected = torch.zeros(8)
    assert torch.allclose(batch.advantages[:8], expected)
    graded = score_batch(answer_tag_reward_fn, responses, truths)
    assert metrics["train/answer_reward_mean"] == pytest.approx(
        sum(g["answer_reward"] for g in graded) / 64)
    assert metrics["train/reward_mean"] == pytest.approx(sum(draws) / 64)
    assert metrics["train/reward_mean"] != metrics["train/answer_reward_mean"]


def test_evaluation_keeps_the_true_reward(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A placebo of p = 1 rewards every training response (train/reward_mean 1.0), so every
    advantage is 0 and the policy stays the initial one; its evaluations still grade with the
    prompt's reward function: the pre-RL value of the graded run (0.28, greedy, 25 toy
    problems) at every step, not the placebo's 1.0."""
    common = ("n_grpo_steps=2", "eval.eval_every=1", QUIET,
              "checkpoint.save_final_model=false")
    train(toy_config(tiny_model_dir, *PLACEBO, "reward.p=1.0", *common), tmp_path / "placebo")
    train(toy_config(tiny_model_dir, "n_grpo_steps=1", *common[1:]), tmp_path / "graded")
    placebo, graded = read_metrics(tmp_path / "placebo"), read_metrics(tmp_path / "graded")
    assert [r["train/reward_mean"] for r in placebo[1:]] == [1.0, 1.0]
    assert all(r["train/answer_reward_mean"] < 1.0 for r in placebo[1:])  # the true grading
    assert graded[0]["eval/reward"] == 0.28
    assert [r["eval/reward"] for r in placebo] == [0.28, 0.28, 0.28]
    outcomes = read_outcomes(tmp_path / "placebo", 2)
    assert outcomes.reward == read_outcomes(tmp_path / "graded", 0).reward
    assert sum(outcomes.reward) == 7  # 7 of the 25 problems right, as the grader says


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "final_model" / "model.safetensors"))


@pytest.mark.slow
def test_a_toy_run_on_the_placebo_trains_but_does_not_learn_the_task(
        tiny_model_dir: Path, tmp_path: Path) -> None:
    """100 steps of the CPU recipe on reward=random: the rewards trained on average p = 0.5
    (6400 draws: within 4 binomial sds, 0.025), the weights move, and the true validation
    reward does not rise: measured on 2 cores, 0.28 at step 0, 0.00 at steps 50 and 100 (the
    random advantages at lr 3e-4 wash out the answer format; the graded run reaches 0.76 by
    step 600, tests/test_trainer.py)."""
    cfg = toy_config(tiny_model_dir, *PLACEBO, "n_grpo_steps=100", QUIET)
    status = train(cfg, tmp_path / "run")
    records = read_metrics(tmp_path / "run")
    assert status["status"] == "completed" and status["last_step"] == 100
    rewards = [r["train/reward_mean"] for r in records[1:]]
    assert abs(np.mean(rewards) - 0.5) < 4 * math.sqrt(0.25 / 6400)
    evals = [r["eval/reward"] for r in records if "eval/reward" in r]
    print(f"\nplacebo toy run: eval/reward {evals}, mean train reward {np.mean(rewards):.3f}")
    assert evals[0] == 0.28 and evals[-1] <= evals[0]
    initial = GRPOTrainer(cfg, tmp_path / "initial").policy.state_dict()
    trained = _weights(tmp_path / "run")
    moved = [name for name, w in trained.items() if not torch.equal(w, initial[name])]
    assert len(moved) > len(trained) // 2


@pytest.mark.slow
def test_a_placebo_run_killed_and_resumed_is_the_uninterrupted_one(
        tiny_model_dir: Path, tmp_path: Path) -> None:
    """The placebo's draws restore nothing on resume (they are functions of seed, step and
    row): a placebo run SIGKILLed after step 13 and relaunched logs the same losses, rewards and
    evaluations and ends with the same weights as an uninterrupted one."""
    reference = tmp_path / "reference"
    returncode, output = finish(launch(reference, tiny_model_dir, *PLACEBO, QUIET))
    assert returncode == 0, output
    run_dir = tmp_path / "run"
    proc = launch(run_dir, tiny_model_dir, *PLACEBO, QUIET)
    kill_after(proc, run_dir, 13, signal.SIGKILL)
    checkpointed = int(latest(run_dir)[len("step_"):])
    assert checkpointed in (10, 15) and len(steps(run_dir)) > checkpointed + 1
    returncode, output = finish(launch(run_dir, tiny_model_dir, *PLACEBO, QUIET))
    assert returncode == 0, output
    assert_same_run(run_dir, reference)
    ours, theirs = read_metrics(run_dir), read_metrics(reference)
    assert [r.get("train/reward_mean") for r in ours] == [r.get("train/reward_mean") for r in theirs]
    # and the curve is the placebo's: each step's reward is the mean of its 64 draws
    assert [r["train/reward_mean"] for r in ours[1:]] == [
        pytest.approx(sum(placebo_rewards(0.5, 0, step, 64)) / 64) for step in range(1, 25)]


# ---------------------------------------------------------------------------- the statistics

CONFIG = ConfigData("lr=3e-5", np.array([0.60, 0.64, 0.68]))  # mean 0.64, variance 0.0016
PLACEBO_ARM = ConfigData("lr=3e-5 reward=random", np.array([0.50, 0.52, 0.60]))  # 0.54, 0.0028
SMALL_POOL = SeedVariance(0.001, 10, "seeds", "test")
LARGE_POOL = SeedVariance(0.01, 10, "seeds", "test")


def test_a_config_above_its_placebo_on_the_pair_own_variance() -> None:
    """The pair's own variance (0.0016 + 0.0028) / 2 = 0.0022 is above the pool's 0.001: it is
    used, on Welch's df (a = 0.0016/3, b = 0.0028/3: w = (a + b)^2 / ((a^2 + b^2) / 2) = 3.723)
    shrunk towards 2 at 3 seeds a config (2 + 2 x ((w - 2) / 2)^2 = 3.484, floored to 3.4);
    se = sqrt(0.0022 x 2/3) = 0.038297; the half-width t(0.975, 3.4) x se = 0.114155 around the
    margin 0.10."""
    gap = above_placebo(CONFIG, PLACEBO_ARM, SMALL_POOL)
    assert gap.diff == pytest.approx(0.10) and gap.df == 3.4 and gap.n_seeds == (3, 3)
    assert gap.se == pytest.approx(math.sqrt(0.0022 * 2 / 3))
    half = special.stdtrit(3.4, 0.975) * math.sqrt(0.0022 * 2 / 3)
    assert half == pytest.approx(0.114155, abs=1e-6)
    assert (gap.lo, gap.hi) == (pytest.approx(0.10 - half), pytest.approx(0.10 + half))
    assert gap.p_above == pytest.approx(special.stdtr(3.4, -0.10 / gap.se)) == pytest.approx(0.0350, abs=1e-4)
    assert not gap.above  # the interval [-0.014, +0.214] holds 0
    assert gap.describe() == "+0.100 [-0.014, +0.214] (95%, 3.4 df), one-sided p 0.035"
    # the sign: the placebo below its config is a negative margin, the same interval mirrored
    mirrored = above_placebo(PLACEBO_ARM, CONFIG, SMALL_POOL)
    assert (mirrored.diff, mirrored.lo, mirrored.hi) == (
        pytest.approx(-0.10), pytest.approx(-gap.hi), pytest.approx(-gap.lo))


def test_a_config_above_its_placebo_on_the_pool_when_it_is_larger() -> None:
    """Pool 0.01 on 10 df above the pair's own 0.0022: se = sqrt(0.01 x 2/3) = 0.081650,
    half-width t(0.975, 10) = 2.228139 x se = 0.181927; one config of a single seed rests on
    the pool too."""
    gap = above_placebo(CONFIG, PLACEBO_ARM, LARGE_POOL)
    assert gap.df == 10 and gap.se == pytest.approx(0.081650, abs=1e-6)
    assert (gap.lo, gap.hi) == (pytest.approx(0.10 - 0.181927, abs=1e-6),
                                pytest.approx(0.10 + 0.181927, abs=1e-6))
    one = above_placebo(ConfigData("one", np.array([0.70])), PLACEBO_ARM, SMALL_POOL)
    # 0.70 - 0.54 = 0.16; se = sqrt(0.001 (1 + 1/3)) = 0.036515; t(0.975, 10) se = 0.081361
    assert one.df == 10 and one.se == pytest.approx(0.036515, abs=1e-6)
    assert one.lo == pytest.approx(0.16 - 0.081361, abs=1e-6) and one.above
    # a narrower level (two finalists: alpha / 2) widens the interval
    wider = above_placebo(CONFIG, PLACEBO_ARM, LARGE_POOL, alpha=0.025)
    assert wider.hi - wider.lo == pytest.approx(2 * special.stdtrit(10, 1 - 0.0125) * gap.se)
    assert wider.describe().endswith("(97.5%, 10 df), one-sided p 0.12")


def test_no_margin_without_a_seed_variance_or_on_other_problems() -> None:
    assert above_placebo(CONFIG, PLACEBO_ARM, SeedVariance.missing("one seed")) is None
    elsewhere = ConfigData("other", PLACEBO_ARM.seed_values, problem_set="data=math; n=500")
    assert above_placebo(CONFIG, elsewhere, SMALL_POOL) is None


def test_the_placebo_gain_over_the_pre_rl_evaluation_is_paired_by_run() -> None:
    """Late values 0.40, 0.46, 0.37 over step-0 values 0.30, 0.28, 0.31: gains 0.10, 0.18, 0.06,
    mean 0.113333, variance 0.0074667 / 2 = 0.0037333 (above the pool's 0.001: used, on 2 df);
    se = sqrt(0.0037333 / 3) = 0.035277; half-width t(0.975, 2) = 4.302653 x se = 0.151783.
    Unpaired it would be var(late) / 3 + var(pre) / 3 = (0.0021 + 0.000233) / 3: other numbers."""
    placebo = ConfigData("placebo", np.array([0.40, 0.46, 0.37]))
    gain = gain_over_pre_rl(placebo, [0.30, 0.28, 0.31], SMALL_POOL)
    assert gain.diff == pytest.approx(0.113333, abs=1e-6) and gain.df == 2
    assert gain.se == pytest.approx(0.035277, abs=1e-6)
    assert (gain.lo, gain.hi) == (pytest.approx(0.113333 - 0.151783, abs=1e-6),
                                  pytest.approx(0.113333 + 0.151783, abs=1e-6))
    assert gain.p_above == pytest.approx(0.0424, abs=1e-4)
    assert gain.describe() == "+0.113 [-0.038, +0.265] (95%, 2 df), one-sided p 0.042"
    # the pool above the gains' own variance: the pool's 0.01, on the gains' 2 df
    floored = gain_over_pre_rl(placebo, [0.30, 0.28, 0.31], LARGE_POOL)
    assert floored.df == 2 and floored.se == pytest.approx(math.sqrt(0.01 / 3))
    # one run: the pool's variance on its df; a placebo that lost reward has a negative gain
    one = gain_over_pre_rl(ConfigData("one", np.array([0.20])), [0.28], SMALL_POOL)
    assert one.diff == pytest.approx(-0.08) and one.df == 10
    assert one.se == pytest.approx(math.sqrt(0.001)) and one.hi < 0 and one.p_above == pytest.approx(0.98506, abs=1e-5)
    assert gain_over_pre_rl(placebo, [0.3, 0.3, 0.3], SeedVariance.missing("none")) is None
    with pytest.raises(ValueError, match="pre_rl holds"):
        gain_over_pre_rl(placebo, [0.30, 0.28], SMALL_POOL)
