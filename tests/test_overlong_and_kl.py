"""DAPO's overlong filter and soft overlong punishment (`overlong.*`) and the KL term to the
initial policy (`kl.beta`): each checked against its definition written out here, the
micro-batched trainer's gradient against the whole batch's from those definitions, the reference
policy across a resume, and short toy runs that learn with each option on."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from grpo.core.advantages import soft_overlong_punishment
from grpo.core.log_probs import get_response_log_probs, label_log_probs
from grpo.core.train_step import OptimizerStepTotals, grpo_share_train_step
from grpo.data.prompts import reward_fn_for
from grpo.models.loading import load_tokenizer
from grpo.rollout.base import Rollout
from grpo.run.metric_keys import undocumented
from grpo.training.batch_plan import MicroBatching
from grpo.training.rollouts import Overlong, RolloutBatch, score
from grpo.training.timing import PhaseTimer
from grpo.training.trainer import GRPOTrainer, train

CONF = Path(__file__).resolve().parents[1] / "conf"
NORMALIZATIONS = ["mean", "constant", "microbatch", "token"]


def toy_config(tiny_model_dir: Path, *overrides: str) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=["model=tiny", "data=toy", "rollout=hf",
                                            f"model.path={tiny_model_dir}",
                                            "logging.wandb_mode=disabled", *overrides])


# ---- the soft overlong punishment -------------------------------------------------------------

def dapo_length_reward(length: int, l_max: int, l_cache: int) -> float:
    """DAPO (Yu et al. 2025) eq. 13, as the paper writes it."""
    if length <= l_max - l_cache:
        return 0.0
    if l_max - l_cache < length <= l_max:
        return ((l_max - l_cache) - length) / l_cache
    return -1.0


# L_max 10, L_cache 4: the buffer is lengths 7..10; 6 is the last length without a penalty.
# An off-by-one in the buffer's start (L_max - L_cache - 1) or its width (L_cache + 1) moves
# 7, 8 and 9; a flipped sign makes them rewards.
LENGTHS = [0, 5, 6, 7, 8, 9, 10, 11]


@pytest.mark.parametrize("factor", [1.0, 0.5])
def test_the_soft_overlong_punishment_is_dapo_eq_13(factor: float) -> None:
    got = soft_overlong_punishment(torch.tensor(LENGTHS), 10, 4, factor).tolist()
    assert got == pytest.approx([factor * dapo_length_reward(n, 10, 4) for n in LENGTHS], abs=1e-7)
    assert got == pytest.approx([factor * x for x in (0, 0, 0, -0.25, -0.5, -0.75, -1, -1)], abs=1e-7)
    # a buffer as long as the limit punishes from the first token; none, nothing
    whole = soft_overlong_punishment(torch.tensor([0, 1, 5, 10]), 10, 10, factor).tolist()
    assert whole == pytest.approx([factor * x for x in (0, -0.1, -0.5, -1)])
    assert soft_overlong_punishment(torch.tensor(LENGTHS), 10, 0).tolist() == [0.0] * len(LENGTHS)
    with pytest.raises(ValueError, match="0..max_length=10"):
        soft_overlong_punishment(torch.tensor(LENGTHS), 10, 11)


def rollouts_of_one_group() -> tuple[list[str], list[Rollout], list[str]]:
    """One toy question (2+3) and 4 responses: right in 3 tokens, right in 5, wrong in 7, and one
    cut at max_new_tokens=8 (no stop)."""
    texts = ["<answer>5</answer>", " <answer>5</answer>", "  <answer>6</answer>", "<answer>5555555"]
    sampled = [(3, "stop"), (5, "stop"), (7, "stop"), (8, "length")]
    rollouts = [Rollout(text, list(range(n)), finish_reason=why)
                for text, (n, why) in zip(texts, sampled, strict=True)]
    return ["Q: 2+3 A:"] * 4, rollouts, ["5"] * 4


@pytest.mark.parametrize("filtered", [False, True])
def test_the_punishment_is_added_to_the_rewards_before_the_advantages(
        tiny_model_dir: Path, filtered: bool) -> None:
    prompts, rollouts, truths = rollouts_of_one_group()
    overlong = Overlong(max_new_tokens=8, filter=filtered, buffer=4, penalty_factor=1.0)
    batch, metrics = score(prompts, rollouts, truths, reward_fn_for("toy"),
                           load_tokenizer(tiny_model_dir), group_size=4, advantage_eps=1e-6,
                           normalize_by_std=True, seed=0, step=1, reward={"name": "graded"},
                           device=torch.device("cpu"),
                           timer=PhaseTimer(torch.device("cpu")), overlong=overlong)
    # graded 1, 1, 0, 0; punished over lengths 5..8 (L_max - L_cache = 4): 0, -1/4, -3/4, -1
    shaped = torch.tensor([1.0, 0.75, -0.75, -1.0])
    assert batch.raw_rewards.tolist() == pytest.approx(shaped.tolist())
    expected = (shaped - shaped.mean()) / (shaped.std() + 1e-6)
    assert batch.advantages.tolist() == pytest.approx(expected.tolist(), rel=1e-6)
    assert metrics["train/overlong_penalty_mean"] == pytest.approx(-0.5)
    assert metrics["train/answer_reward_mean"] == 0.5  # the grader's rewards, unpunished
    assert metrics["train/frac_truncated"] == 0.25
    assert batch.filtered is None if not filtered else batch.filtered.tolist() == [False] * 3 + [True]
    # without a buffer the rewards are the grader's
    plain, metrics = score(prompts, rollouts, truths, reward_fn_for("toy"),
                           load_tokenizer(tiny_model_dir), group_size=4, advantage_eps=1e-6,
                           normalize_by_std=True, seed=0, step=1, reward={"name": "graded"},
                           device=torch.device("cpu"),
                           timer=PhaseTimer(torch.device("cpu")), overlong=Overlong(8))
    assert plain.raw_rewards.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert "train/overlong_penalty_mean" not in metrics and plain.filtered is None


# ---- the KL term in one micro-batch step -------------------------------------------------------

B, T = 6, 5
RESPONSE_LENGTHS = [5, 1, 3, 4, 2, 5]


def step_inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """float64 log-probs of the policy and of a reference 0.4 nats apart on average, a response
    mask of RESPONSE_LENGTHS, advantages with two exact zeros."""
    generator = torch.Generator().manual_seed(seed)
    log_probs = -3 * torch.rand(B, T, generator=generator, dtype=torch.float64)
    ref = log_probs + 0.5 * torch.randn(B, T, generator=generator, dtype=torch.float64)
    mask = torch.zeros(B, T, dtype=torch.float64)
    for row, n in enumerate(RESPONSE_LENGTHS):
        mask[row, T - n:] = 1
    advantages = torch.tensor([[1.3], [0.0], [-0.6], [0.8], [0.0], [-1.1]], dtype=torch.float64)
    return {"log_probs": log_probs, "ref": ref, "mask": mask, "advantages": advantages}


def token_weights(normalization: str, mask: torch.Tensor, counted: list[int]) -> torch.Tensor:
    """(B, T) d(step loss)/d(per-token loss) of the four normalizations over the `counted` rows
    (the others weigh 0), from their definitions in grpo.core.train_step's docstring."""
    lengths = mask.sum(dim=1)
    k = len(counted)
    per_row = {"mean": 1 / (k * lengths), "constant": torch.full_like(lengths, 1 / (k * T)),
               "microbatch": torch.full_like(lengths, 1 / (k * float(lengths[counted].max()))),
               "token": torch.full_like(lengths, 1 / float(lengths[counted].sum()))}[normalization]
    weights = mask * per_row[:, None]
    keep = torch.zeros(B, 1, dtype=mask.dtype)
    keep[counted] = 1
    return weights * keep


def kl_step(normalization: str, data: dict, parts: list[list[int]], beta: float,
            counted: list[int] | None = None) -> tuple[torch.Tensor, float, list[float]]:
    """d(step loss)/d(log-probs), the step's loss and each micro-batch's kl_to_reference, the
    rows of `parts` trained, `counted` (default: every row) in the step's totals."""
    counted = list(range(B)) if counted is None else counted
    lengths = data["mask"][counted].sum(dim=1)
    totals = OptimizerStepTotals(len(counted), int(lengths.sum()), int(lengths.max()))
    leaf = data["log_probs"].clone().requires_grad_(True)
    step_loss, kls = 0.0, []
    for rows in parts:
        index = torch.tensor(rows)
        loss, meta = grpo_share_train_step(
            leaf[index], data["mask"][index], "reinforce_with_baseline", totals,
            advantages=data["advantages"][index], ref_log_probs=data["ref"][index], kl_coef=beta,
            length_normalization=normalization, normalize_constant=T)
        step_loss += loss.item()
        kls.append(meta["kl_to_reference"].item())
    return leaf.grad, step_loss, kls


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_the_kl_term_and_its_gradient_are_the_k3_estimator_weighted_by_the_normalization(
        normalization: str) -> None:
    data = step_inputs()
    beta = 0.3
    grad, loss, (kl,) = kl_step(normalization, data, [list(range(B))], beta)
    logp, ref, mask, adv = data["log_probs"], data["ref"], data["mask"], data["advantages"]
    k3 = torch.exp(ref - logp) - (ref - logp) - 1  # KL(pi || ref), tokens sampled from pi
    weights = token_weights(normalization, mask, list(range(B)))
    # d/dlogp [-A logp + beta k3] = -A + beta (1 - exp(ref - logp))
    expected = weights * (-adv + beta * (1 - torch.exp(ref - logp)))
    torch.testing.assert_close(grad, expected, rtol=1e-6, atol=1e-12)
    assert loss == pytest.approx(float((weights * (-adv * logp + beta * k3)).sum()), rel=1e-6)
    assert kl == pytest.approx(float((k3 * mask).sum() / mask.sum()), rel=1e-6)
    assert kl > 0.05  # the two policies differ: the test is not at k3's minimum
    # the k1 estimator (logp - ref), or the term's sign flipped, would give another gradient
    assert not torch.allclose(expected, weights * (-adv + beta * torch.ones_like(logp)), rtol=1e-3)
    assert not torch.allclose(expected, weights * (-adv - beta * (1 - torch.exp(ref - logp))), rtol=1e-3)


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_micro_batches_with_the_kl_term_or_the_filter_give_the_whole_batch_gradient(
        normalization: str) -> None:
    data = step_inputs(seed=1)
    whole, whole_loss, _ = kl_step(normalization, data, [list(range(B))], 0.3)
    for parts in ([[0, 1, 2], [3, 4, 5]], [[5], [1, 3], [4, 0, 2]]):
        grad, loss, _ = kl_step(normalization, data, parts, 0.3)
        torch.testing.assert_close(grad, whole, rtol=1e-6, atol=1e-12)
        assert loss == pytest.approx(whole_loss, rel=1e-6)
    # the filter: rows 0 and 5 (the longest) out of the loss and of the totals, any partition
    kept = [1, 2, 3, 4]
    alone, _, _ = kl_step(normalization, data, [kept], 0.3, counted=kept)
    split, _, _ = kl_step(normalization, data, [[3], [4, 1, 2]], 0.3, counted=kept)
    torch.testing.assert_close(split, alone, rtol=1e-6, atol=1e-12)
    expected = token_weights(normalization, data["mask"], kept) * (
        -data["advantages"] + 0.3 * (1 - torch.exp(data["ref"] - data["log_probs"])))
    torch.testing.assert_close(alone, expected, rtol=1e-6, atol=1e-12)


def test_the_kl_term_is_not_zero_at_zero_advantage_so_no_row_may_be_skipped() -> None:
    data = step_inputs()
    full, _, _ = kl_step("mean", data, [list(range(B))], 0.3)
    nonzero = [row for row in range(B) if data["advantages"][row, 0] != 0]
    skipped, _, _ = kl_step("mean", data, [nonzero], 0.3)
    assert not torch.allclose(skipped, full, rtol=1e-3)  # rows 1 and 4 have a KL gradient
    assert full[1].abs().sum() > 1e-3 and full[4].abs().sum() > 1e-3
    # without the term they may be (grpo.core.specs: zero_at_zero_advantage)
    no_kl, _, _ = kl_step("mean", data, [list(range(B))], 0.0)
    no_kl_skipped, _, _ = kl_step("mean", data, [nonzero], 0.0)
    torch.testing.assert_close(no_kl_skipped, no_kl, rtol=1e-6, atol=1e-12)
    # so the micro-batching skips them only without the KL term
    on = {"micro_batch_size": 2, "model": {"micro_batch_tokens": None}, "skip_zero_advantage": True}
    assert MicroBatching.from_config(on | {"kl": {"beta": 0.0}}, True).skip_zero_advantage
    assert not MicroBatching.from_config(on | {"kl": {"beta": 0.04}}, True).skip_zero_advantage
    with pytest.raises(ValueError, match="needs ref_log_probs"):
        grpo_share_train_step(data["log_probs"].clone().requires_grad_(True), data["mask"],
                              "reinforce_with_baseline", OptimizerStepTotals(B, 20, 5),
                              advantages=data["advantages"], kl_coef=0.3)


# ---- the trainer's step against the definitions ------------------------------------------------

ROWS = 16
FILTERED = [2, 9, 13]  # row 9 holds the longest response


def synthetic_batch(vocab: int) -> RolloutBatch:
    """16 rollouts of 4 groups: 6-token prompts, responses of 1 to 12 tokens (row 9 the longest),
    one group with all advantages exactly 0, rows FILTERED marked for the overlong filter."""
    generator = torch.Generator().manual_seed(3)
    lengths = [4, 7, 2, 9, 1, 5, 12, 3, 6, 12, 2, 8, 4, 11, 3, 7]
    lengths[9] = 13
    width = 6 + max(lengths)
    ids = torch.randint(3, vocab, (ROWS, width), generator=generator)
    mask = torch.zeros(ROWS, width - 1)
    for row, n in enumerate(lengths):
        mask[row, 5:5 + n] = 1.0
    advantages = torch.randn(ROWS, generator=generator)
    advantages[4:8] = 0.0
    filtered = torch.zeros(ROWS, dtype=torch.bool)
    filtered[FILTERED] = True
    return RolloutBatch(input_ids=ids[:, :-1], labels=ids[:, 1:], response_mask=mask,
                        advantages=advantages, raw_rewards=(advantages > 0).float(),
                        order=torch.randperm(ROWS, generator=generator), filtered=filtered)


def definition_gradient(policy: torch.nn.Module, reference: torch.nn.Module, batch: RolloutBatch,
                        normalization: str, beta: float, counted: list[int]) -> dict[str, torch.Tensor]:
    """The step's gradient from the definitions, the whole batch in one forward: per token
    -A logp + beta k3(ref, logp), normalized over the `counted` rows only."""
    everything = batch.rows(torch.arange(ROWS))
    logp = get_response_log_probs(policy, everything["input_ids"], everything["labels"])["log_probs"]
    with torch.no_grad():
        ref = label_log_probs(reference(everything["input_ids"]).logits, everything["labels"])
    mask = everything["response_mask"]
    per_token = -everything["advantages"] * logp + beta * (torch.exp(ref - logp) - (ref - logp) - 1)
    keep = torch.zeros(ROWS, 1)
    keep[counted] = 1
    sums = (per_token * mask * keep).sum(dim=1)
    lengths = mask.sum(dim=1)
    loss = {"mean": (sums / lengths).sum() / len(counted),
            "constant": sums.sum() / (len(counted) * 8),  # sampling.max_new_tokens
            "microbatch": sums.sum() / (len(counted) * lengths[counted].max()),
            "token": sums.sum() / lengths[counted].sum()}[normalization]
    policy.zero_grad(set_to_none=True)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in policy.named_parameters()}
    policy.zero_grad(set_to_none=True)
    return grads


VARIANTS = {  # the micro-batching of the trainer's step
    "whole, every row": ("skip_zero_advantage=false",),
    "4 a micro-batch, skip on": ("micro_batch_size=4", "skip_zero_advantage=true"),
    "token budget, skip on": ("model.micro_batch_tokens=64", "skip_zero_advantage=true"),
}


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
@pytest.mark.parametrize(("beta", "filter_on"), [(0.0, True), (0.5, False), (0.5, True)],
                         ids=["filter", "kl", "filter+kl"])
def test_the_trainers_step_is_the_definitions_gradient_for_every_micro_batching(
        tiny_model_dir: Path, tmp_path: Path, normalization: str, beta: float,
        filter_on: bool) -> None:
    common = ("rollout_batch_size=16", "group_size=4", "train_batch_size=16", "micro_batch_size=16",
              f"normalization={normalization}", f"kl.beta={beta}", f"overlong.filter={filter_on}",
              "optimizer.max_grad_norm=null", "rollout.stale_check_every=0")
    trainer = GRPOTrainer(toy_config(tiny_model_dir, *common), tmp_path)
    with torch.no_grad():  # away from the initial weights, so that the KL term has a gradient
        generator = torch.Generator().manual_seed(5)
        for p in trainer.policy.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
    start = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()  # the initial weights
    batch = synthetic_batch(len(trainer.tokenizer))
    if not filter_on:
        batch.filtered = None
    counted = [r for r in range(ROWS) if not (filter_on and r in FILTERED)]
    expected = definition_gradient(trainer.policy, reference, batch, normalization, beta, counted)
    # the definition is not met by masking the filtered rows' losses alone, nor by dropping the
    # zero-advantage rows' KL term
    if filter_on:
        loss_only = definition_gradient(trainer.policy, reference, batch, normalization, beta,
                                        list(range(ROWS)))
        assert any(not torch.allclose(loss_only[k], expected[k], rtol=1e-3) for k in expected)
    captured: list[dict[str, torch.Tensor]] = []
    trainer.optimizer.register_step_pre_hook(lambda *_: captured.append(
        {name: p.grad.clone() for name, p in trainer.policy.named_parameters()}))
    for name, extra in VARIANTS.items():
        cfg = toy_config(tiny_model_dir, *common, *extra)
        trainer.micro_batching = MicroBatching.from_config(cfg, trainer.loss.zero_at_zero_advantage)
        batch.ref_log_probs = None
        timer = PhaseTimer(trainer.device)
        metrics = trainer.learn(batch, [], 2, timer)
        trainer.policy.load_state_dict(start)  # the next variant steps from the same weights
        grads = captured.pop()
        for key, value in expected.items():
            # float32 sums in another order: 4.8e-7 at most here, on gradients of up to 0.5
            torch.testing.assert_close(grads[key], value, rtol=1e-5, atol=2e-6, msg=f"{name}: {key}")
        skipping = "skip on" in name and beta == 0
        # left out of the backward: the zero-advantage group's 4 rows (skipped), the 3 filtered
        assert metrics["train/frac_skipped"] == (4 * skipping + 3 * filter_on) / ROWS, name
        assert ("train/kl_to_reference" in metrics) == (beta > 0)
        assert ("time/reference_log_probs_s" in timer.metrics) == (beta > 0)
    if beta > 0:
        assert trainer.reference is not None and metrics["train/kl_to_reference"] > 1e-3
        # the reference is the initial weights: not the perturbed policy's
        for name, p in trainer.reference.named_parameters():
            torch.testing.assert_close(p, dict(reference.named_parameters())[name], rtol=0, atol=0)
    else:
        assert trainer.reference is None  # beta 0: no reference model loaded at all
    trainer.tracker.finish()
    trainer.engine.close()


# ---- the reference across a resume -------------------------------------------------------------

def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_the_reference_is_the_initial_weights_after_a_resume(tiny_model_dir: Path,
                                                            tmp_path: Path) -> None:
    common = ("kl.beta=0.5", "checkpoint.checkpoint_every=1", "eval.eval_every=100",
              "overlong.filter=true", "overlong.buffer=4")
    assert train(toy_config(tiny_model_dir, *common, "n_grpo_steps=4"), tmp_path / "whole")[
        "status"] == "completed"
    assert train(toy_config(tiny_model_dir, *common, "n_grpo_steps=2"), tmp_path / "resumed")[
        "status"] == "completed"
    trainer = GRPOTrainer(toy_config(tiny_model_dir, *common, "n_grpo_steps=4"), tmp_path / "resumed")
    assert trainer.start_step == 2
    initial = load_file(str(tiny_model_dir / "model.safetensors"))
    checkpoint = load_file(str(tmp_path / "resumed" / "checkpoints" / "step_000002" / "model.safetensors"))
    reference = dict(trainer.reference.named_parameters())
    policy = dict(trainer.policy.named_parameters())
    shared = [k for k in initial if k in reference]
    assert len(shared) > 20
    assert all(torch.equal(reference[k], initial[k]) for k in shared)
    assert any(not torch.equal(policy[k], initial[k]) for k in shared)
    assert all(torch.equal(policy[k], checkpoint[k]) for k in shared if k in checkpoint)
    trainer.tracker.finish()
    trainer.engine.close()
    # trained on from step 2, the run is the uninterrupted one: the same KL at every step
    assert train(toy_config(tiny_model_dir, *common, "n_grpo_steps=4"), tmp_path / "resumed")[
        "status"] == "completed"
    whole, resumed = read_metrics(tmp_path / "whole"), read_metrics(tmp_path / "resumed")
    assert [r["step"] for r in resumed] == [0, 1, 2, 3, 4]
    for key in ("train/kl_to_reference", "train/loss", "train/overlong_penalty_mean"):
        assert [r.get(key) for r in resumed] == [r.get(key) for r in whole], key
    assert whole[1]["train/kl_to_reference"] == 0.0 < whole[4]["train/kl_to_reference"]
    a = load_file(str(tmp_path / "whole" / "final_model" / "model.safetensors"))
    b = load_file(str(tmp_path / "resumed" / "final_model" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


# ---- each option learns the toy task -----------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("option", ["overlong.filter=true", "overlong.buffer=4", "kl.beta=0.04"])
def test_a_short_toy_run_with_each_option_beats_the_initial_policy(
        tiny_model_dir: Path, tmp_path: Path, option: str) -> None:
    """150 steps of the CPU recipe (greedy evaluation of the 25 toy problems every 50 steps)."""
    cfg = toy_config(tiny_model_dir, option, "n_grpo_steps=150")
    assert train(cfg, tmp_path)["status"] == "completed"
    records = read_metrics(tmp_path)
    evals = [(r["step"], r["eval/reward"]) for r in records if "eval/reward" in r]
    print(f"\n{option}: eval/reward by step {evals}")
    assert evals[0][0] == 0 and evals[-1][0] == 150
    assert evals[-1][1] > evals[0][1]
    assert undocumented(k for r in records for k in r) == []
    steps = records[1:]
    if option.startswith("kl."):
        assert all(r["train/kl_to_reference"] >= 0 for r in steps)
        assert math.isfinite(steps[-1]["train/kl_to_reference"]) and steps[-1]["train/kl_to_reference"] > 0
    if option.startswith("overlong.buffer"):
        assert all(r["train/overlong_penalty_mean"] <= 0 for r in steps)


def test_the_options_are_off_by_default(tiny_model_dir: Path) -> None:
    cfg = toy_config(tiny_model_dir)
    assert OmegaConf.to_container(cfg.overlong) == {"filter": False, "buffer": 0, "penalty_factor": 1.0}
    assert cfg.kl.beta == 0.0
