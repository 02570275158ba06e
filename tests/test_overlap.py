"""One step of overlap (off_policy.staleness=1): which weights sample each batch, the importance
correction in a real run, a planted log-prob mismatch, and kill / preempt and resume mid-overlap.

The engine is the real `hf_process` one (a spawned process with its own weights) on the tiny
model; the runs are real `launch.py` runs (tests/training_runs.py)."""

from __future__ import annotations

import copy
import json
import os
import signal
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from test_trainer import toy_config
from training_runs import N_STEPS, ROOT, finish, kill_after, latest, launch, steps

from grpo.core.log_probs import sampling_log_probs
from grpo.data.datasets import PromptSampler, load_examples, toy_examples
from grpo.models.loading import load_policy
from grpo.rollout.base import SamplingSettings
from grpo.rollout.hf import HFRolloutEngine, min_length_end_ids
from grpo.rollout.hf_process import HFProcessRolloutEngine
from grpo.run.checkpoint import CheckpointManager
from grpo.run.preemption import PreemptionWatcher
from grpo.training import learner as trainer_module
from grpo.training import overlap
from grpo.training.behaviour import LogProbMismatchError
from grpo.training.overlap import RolloutProducer, RolloutRequest
from grpo.training.trainer import GRPOTrainer, train

STALE = ("rollout=hf_process", "cluster.cpus_per_job=2", "off_policy.staleness=1")


def _request(step: int) -> RolloutRequest:
    questions = toy_examples(4)[step : step + 2]
    return RolloutRequest(step, questions, [f"Q: {q.question} A:" for q in questions],
                          SamplingSettings(temperature=0.8, top_p=0.95, min_new_tokens=3,
                                           max_new_tokens=6, seed=step))


def _log_probs_under(model: torch.nn.Module, tokenizer, prompt: str, token_ids: list[int]) -> torch.Tensor:
    prompt_ids = tokenizer(prompt)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + token_ids])).logits[:, len(prompt_ids) - 1 : -1]
    too_early = torch.arange(len(token_ids))[None] < 3  # min_new_tokens of _request
    return sampling_log_probs(logits, torch.tensor([token_ids]), 0.8, 0.95, too_early,
                              min_length_end_ids(model, tokenizer, ()))[0]


@pytest.mark.slow
def test_the_batch_of_step_t_is_sampled_with_the_weights_before_the_previous_update(
    tiny_model_dir: Path,
) -> None:
    model_cfg = OmegaConf.create({"name": "tiny", "path": str(tiny_model_dir), "precision": "32-true",
                                  "attn_implementation": None, "gradient_checkpointing": False})
    policy, tokenizer = load_policy(model_cfg, torch.device("cpu"))
    engine = HFProcessRolloutEngine(policy, tokenizer, batch_size=16, max_model_len=64, threads=1)
    producer = RolloutProducer(engine, version=0, group_size=4, staleness=1, draw=_request,
                               sampling_context=nullcontext)
    weights = {0: copy.deepcopy(policy)}
    batches = {}
    noise = torch.Generator().manual_seed(0)
    try:
        for step in (1, 2, 3):
            batches[step], _ = producer.take(step, 3)
            with torch.no_grad():  # an "update": every weight moves
                for parameter in policy.parameters():
                    parameter.add_(0.05 * torch.randn(parameter.shape, generator=noise))
            weights[step] = copy.deepcopy(policy)
            producer.sync(policy, step)
    finally:
        producer.close()
    assert [batches[s].staleness() for s in (1, 2, 3)] == [0, 1, 1]
    assert [batches[s].policy_version for s in (1, 2, 3)] == [0, 0, 1]
    for step in (2, 3):
        # step t trains from the weights of step t-1; its batch came from those of step t-2
        batch, sampled_with, current = batches[step], weights[step - 2], weights[step - 1]
        same, other = [], []
        for prompt, group in zip(batch.request.prompts, batch.groups, strict=True):
            for rollout in group:
                engine_lp = torch.tensor(rollout.log_probs)
                same.append((engine_lp - _log_probs_under(sampled_with, tokenizer, prompt,
                                                          rollout.token_ids)).abs().max().item())
                other.append((engine_lp - _log_probs_under(current, tokenizer, prompt,
                                                           rollout.token_ids)).abs().mean().item())
        assert max(same) < 1e-4, f"step {step}: the engine's log-probs are not those of w(t-2)"
        assert sum(other) / len(other) > 0.05, f"step {step}: indistinguishable from w(t-1)"


def _tiny_policy(tiny_model_dir: Path):  # noqa: ANN202
    model_cfg = OmegaConf.create({"name": "tiny", "path": str(tiny_model_dir), "precision": "32-true",
                                  "attn_implementation": None, "gradient_checkpointing": False})
    return load_policy(model_cfg, torch.device("cpu"))


def test_a_generation_that_failed_in_flight_is_raised_by_take_not_by_the_sync(
        tiny_model_dir: Path) -> None:
    """The engine's process dies while step 2's batch is generated in flight: the weight sync
    leaves the dead engine alone and step 2's `take` raises the generation's own error (it was
    swallowed, and the run failed naming the sync)."""
    policy, tokenizer = _tiny_policy(tiny_model_dir)
    engine = HFProcessRolloutEngine(policy, tokenizer, batch_size=16, max_model_len=64, threads=1)
    producer = RolloutProducer(engine, version=0, group_size=4, staleness=1, draw=_request,
                               sampling_context=nullcontext)
    try:
        producer.take(1, 3)  # starts generating step 2's batch
        os.kill(engine._process.pid, signal.SIGKILL)
        producer.sync(policy, 1)  # no error here: the generation's comes first
        with pytest.raises(RuntimeError, match="rollout engine's process ended") as failure:
            producer.take(2, 3)
        assert "generate" in [frame.name for frame in traceback.extract_tb(failure.tb)]
    finally:
        producer.close()


def test_closing_after_an_error_waits_a_bounded_time_for_a_hung_generation(
        tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A generation in flight that never ends (here held in its sampling context) delays the
    producer's close by at most CLOSE_WAIT_S, and says so; the run can then write its status."""
    monkeypatch.setattr(overlap, "CLOSE_WAIT_S", 0.5)
    policy, tokenizer = _tiny_policy(tiny_model_dir)
    release = threading.Event()

    @contextmanager
    def hung() -> Iterator[None]:
        if threading.current_thread().name.startswith("rollouts"):
            release.wait(60)
        yield

    engine = HFRolloutEngine(policy, tokenizer, batch_size=16, max_model_len=64)
    producer = RolloutProducer(engine, version=0, group_size=4, staleness=1, draw=_request,
                               sampling_context=hung)
    producer.take(1, 3)
    start = time.perf_counter()
    producer.close()
    waited = time.perf_counter() - start
    release.set()
    assert 0.5 <= waited < 5, waited
    assert "the generation of step 2's rollouts did not end within 0 s" in caplog.text


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def stale_reference(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted staleness-1 run (24 steps, checkpoints every 5)."""
    run_dir = tmp_path_factory.mktemp("stale-reference")
    returncode, output = finish(launch(run_dir, tiny_model_dir, *STALE))
    assert returncode == 0, output
    return run_dir


@pytest.mark.slow
def test_a_stale_run_logs_its_staleness_and_importance_weights(stale_reference: Path) -> None:
    rows = _rows(stale_reference)[1:]
    assert [r["train/staleness"] for r in rows] == [0.0] + [1.0] * (N_STEPS - 1)
    assert "train/is_weight_mean" not in rows[0] and rows[0]["rollout/engine_logprob_abs_diff"] < 1e-4
    means = [r["train/is_weight_mean"] for r in rows[1:]]
    capped = [r["train/is_capped_fraction"] for r in rows[1:]]
    assert all(0.5 < m < 1.5 for m in means) and any(m != 1.0 for m in means)
    assert all(0.0 <= c < 0.5 for c in capped)
    assert all(r["time/rollout_wait_s"] >= 0 and r["time/rollout_s"] > 0 for r in rows)
    # the drift of each stale batch from the weights that sampled it: a KL > 0 that approx_kl
    # (against the step's own start weights) cannot show; none on the on-policy first step
    assert "train/behaviour_kl" not in rows[0]
    kls = [r["train/behaviour_kl"] for r in rows[1:]]
    assert all(0.0 < kl < 0.5 for kl in kls), kls


def _sampler_after(draws: int) -> dict:
    """The state of the trainer's prompt sampler (toy task, 8 questions a step, seed 0) after
    `draws` steps' draws."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["model=tiny", "data=toy"])
    data = {**OmegaConf.to_container(cfg.data, resolve=True), "validation_size": cfg.eval.n_examples}
    sampler = PromptSampler(load_examples(data, "train"), 8, 0)
    for _ in range(draws):
        sampler.next_batch()
    return sampler.state_dict()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_or_preempted_mid_overlap_resumes_without_losing_or_repeating_a_step(
    tiny_model_dir: Path, tmp_path: Path, stale_reference: Path, sig: int
) -> None:
    proc = launch(tmp_path, tiny_model_dir, *STALE)
    kill_after(proc, tmp_path, 13, sig)
    checkpointed = int(latest(tmp_path)[len("step_"):])
    state = CheckpointManager(tmp_path, keep_last=2).find()[1]
    # the checkpoint's sampler has drawn the trained steps' questions, not the in-flight batch's
    assert state.sampler == _sampler_after(checkpointed)
    returncode, output = finish(launch(tmp_path, tiny_model_dir, *STALE))
    assert returncode == 0, output
    assert steps(tmp_path) == list(range(N_STEPS + 1))
    rows, reference = _rows(tmp_path), _rows(stale_reference)
    resumed = checkpointed + 1
    # the first step after the resume has nothing in flight: it samples on-policy
    assert [r["train/staleness"] for r in rows[1:]] == [
        0.0 if step in (1, resumed) else 1.0 for step in range(1, N_STEPS + 1)]
    # up to the checkpoint the curve is the uninterrupted run's, bit for bit
    for row, ref in zip(rows[1 : resumed], reference[1 : resumed], strict=True):
        assert row["train/reward_mean"] == ref["train/reward_mean"]
        assert row["train/loss"] == ref["train/loss"]


@pytest.mark.slow
def test_a_planted_temperature_mismatch_stops_a_corrected_run(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the trainer's mirror of the sampling distribution planted at the wrong temperature: on the
    # first (on-policy) batch the engine's log-probs disagree with it, and the run stops there
    # rather than train with wrong importance weights
    real = trainer_module.sampling_log_probs
    monkeypatch.setattr(trainer_module, "sampling_log_probs",
                        lambda logits, labels, temperature, top_p, *mask: real(
                            logits, labels, 0.3, top_p, *mask))
    cfg = toy_config(tiny_model_dir, *STALE, "sampling.temperature=0.9", "n_grpo_steps=3")
    with pytest.raises(LogProbMismatchError, match=r"nats \(mean; limit 0.1\) on a batch sampled with the trainer's own"):
        train(cfg, tmp_path / "planted")
    status = json.loads((tmp_path / "planted" / "status.json").read_text())
    assert status["status"] == "failed" and status["last_step"] is None
    # unplanted, the same config trains
    monkeypatch.undo()
    assert train(cfg, tmp_path / "clean")["status"] == "completed"
    first = _rows(tmp_path / "clean")[1]
    assert first["rollout/engine_logprob_abs_diff"] < 1e-4


@pytest.mark.slow
def test_weights_taken_in_the_training_forward_equal_a_separate_old_log_prob_pass(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    # one optimizer step per GRPO step, a ratio-free loss, the raw distribution (temperature 1,
    # no minimum length): pi_old is the training forward's own log-prob, so the pass before
    # training is skipped; the curve is the same
    curves = {}
    for inline in (True, False):
        cfg = toy_config(tiny_model_dir, *STALE, "n_grpo_steps=8", "eval.eval_every=4",
                         "sampling.min_new_tokens=0")
        trainer = GRPOTrainer(cfg, tmp_path / str(inline))
        assert trainer.weights_in_train_pass
        trainer.weights_in_train_pass = inline
        try:
            with PreemptionWatcher() as watcher:
                assert trainer.run(watcher)["status"] == "completed"
        finally:
            trainer.producer.close()
        curves[inline] = _rows(tmp_path / str(inline))[1:]
    keys = ("train/loss", "train/is_weight_mean", "train/is_capped_fraction", "train/grad_norm",
            "train/reward_mean", "train/behaviour_kl")
    for with_pass, in_forward in zip(curves[False], curves[True], strict=True):
        for key in keys:
            if key in with_pass:
                assert in_forward[key] == pytest.approx(with_pass[key], rel=1e-6, abs=1e-9), key
    assert "time/old_log_probs_s" not in curves[True][3] and "time/old_log_probs_s" in curves[False][3]
    assert any(r["train/is_weight_mean"] != 1.0 for r in curves[True][1:])
    assert all(r["train/behaviour_kl"] > 0 for r in curves[True][1:])


@pytest.mark.slow
def test_correct_fresh_weights_the_batches_of_a_staleness_0_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    """off_policy.correct_fresh=true at staleness 0 weights every batch; the weights then carry the
    engine/trainer numeric mismatch alone (fp32 on both sides here: 1 to 1e-4, none capped).
    Without it no batch of a staleness-0 run is weighted."""
    for fresh in ("true", "false"):
        run_dir = tmp_path / fresh
        cfg = toy_config(tiny_model_dir, "rollout=hf_process", "cluster.cpus_per_job=2",
                         "n_grpo_steps=2", f"off_policy.correct_fresh={fresh}",
                         "logging.wandb_mode=disabled", "eval.eval_every=100",
                         "checkpoint.save_final_model=false")
        assert train(cfg, run_dir)["status"] == "completed"
        rows = _rows(run_dir)[1:]
        if fresh == "true":
            assert all(abs(r["train/is_weight_mean"] - 1) < 1e-4 for r in rows), rows
            assert all(r["train/is_capped_fraction"] == 0 for r in rows)
        else:
            assert not any("train/is_weight_mean" in r for r in rows)


def test_the_next_steps_request_is_drawn_in_flight_and_taken_not_drawn_again(tiny_model_dir: Path) -> None:
    """Staleness 1, a run resumed after step 4 (version 4), 7 steps: take(5) generates step 5 at
    once (nothing in flight after a restart) and starts step 6 with the same weights; take(6)
    takes that very batch (not drawn again: the sampler would skip a step's questions) and starts
    7 with the weights synced after step 5; take(7), the last, starts nothing. The loop waited
    for step 5's generation, not for step 6's, which ended during the sync."""
    policy, tokenizer = _tiny_policy(tiny_model_dir)
    engine = HFRolloutEngine(policy, tokenizer, batch_size=16, max_model_len=64)
    drawn: list[int] = []

    def draw(step: int) -> RolloutRequest:
        drawn.append(step)
        return _request(step)

    producer = RolloutProducer(engine, version=4, group_size=2, staleness=1, draw=draw,
                               sampling_context=nullcontext)
    try:
        first, waited = producer.take(5, 7)
        assert drawn == [5, 6]
        assert (first.request.step, first.policy_version, first.staleness()) == (5, 4, 0)
        assert [len(group) for group in first.groups] == [2, 2]
        assert 60 > waited >= first.generate_s > 0
        producer.sync(policy, 5)
        assert producer.version == 5 and producer.finish_generation() >= 0
        second, waited = producer.take(6, 7)
        assert drawn == [5, 6, 7]
        assert (second.request.step, second.policy_version, second.staleness()) == (6, 4, 1)
        assert second.request.prompts == _request(6).prompts
        assert 60 > second.generate_s > waited >= 0
        producer.sync(policy, 6)
        third, _ = producer.take(7, 7)
        assert drawn == [5, 6, 7] and producer._in_flight is None
        assert (third.request.step, third.policy_version, third.staleness()) == (7, 5, 1)
    finally:
        producer.close()


def test_without_overlap_each_step_is_drawn_and_generated_when_taken(tiny_model_dir: Path) -> None:
    policy, tokenizer = _tiny_policy(tiny_model_dir)
    engine = HFRolloutEngine(policy, tokenizer, batch_size=16, max_model_len=64)
    drawn: list[int] = []

    def draw(step: int) -> RolloutRequest:
        drawn.append(step)
        return _request(step)

    with pytest.raises(ValueError, match="staleness must be 0 or 1"):
        RolloutProducer(engine, version=0, group_size=2, staleness=2, draw=draw, sampling_context=nullcontext)
    producer = RolloutProducer(engine, version=0, group_size=2, staleness=0, draw=draw,
                               sampling_context=nullcontext)
    batch, waited = producer.take(1, 3)
    assert drawn == [1] and producer._in_flight is None
    assert (batch.request.step, batch.policy_version, batch.staleness()) == (1, 0, 0)
    assert 60 > waited >= batch.generate_s > 0
    producer.sync(policy, 1)
    batch, _ = producer.take(2, 3)
    assert drawn == [1, 2] and (batch.policy_version, batch.staleness()) == (1, 0)
    # a batch in flight for another step than the one taken is dropped, the step drawn now
    stale = RolloutProducer(engine, version=0, group_size=2, staleness=1, draw=draw,
                            sampling_context=nullcontext)
    stale.take(1, 3)
    batch, _ = stale.take(3, 3)
    assert drawn == [1, 2, 1, 2, 3] and batch.request.step == 3 and stale._in_flight is None
    stale.close()


def test_the_generation_in_flight_runs_in_a_daemon_thread_and_batches_are_frozen(
        tiny_model_dir: Path) -> None:
    """A generation left behind must not hold the process at exit (a daemon thread, named for
    its step); `finish_generation` waits for it and says how long; a request or a generated
    batch cannot be changed after the fact."""
    import dataclasses

    policy, tokenizer = _tiny_policy(tiny_model_dir)
    release = threading.Event()

    @contextmanager
    def held() -> Iterator[None]:
        if threading.current_thread().name.startswith("rollouts"):
            release.wait(30)
        yield

    engine = HFRolloutEngine(policy, tokenizer, batch_size=16, max_model_len=64)
    producer = RolloutProducer(engine, version=0, group_size=2, staleness=1, draw=_request,
                               sampling_context=held)
    try:
        batch, _ = producer.take(1, 3)
        worker = [t for t in threading.enumerate() if t.name == "rollouts-step-2"]
        assert len(worker) == 1 and worker[0].daemon
        threading.Timer(0.3, release.set).start()
        assert 0.3 <= producer.finish_generation() < 30  # the seconds it waited for the generation
        assert producer.finish_generation() < 0.3
    finally:
        release.set()
        producer.close()
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.policy_version = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.request.step = 2  # type: ignore[misc]
