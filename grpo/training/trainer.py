"""The GRPO training run of one sweep point: `train(cfg, run_dir)`.

Before the first GRPO step, the initial (pre-RL) policy is evaluated: metrics.jsonl's first row is
that evaluation, at step 0. GRPO steps are numbered 1..n_grpo_steps; a metrics row's `step` (and
status.json's `last_step`, a checkpoint's step) is the number of GRPO steps done. Step s samples
and shuffles with the seeds of index s - 1, so the curves are those of the 0-based numbering.

Each GRPO step (CS336 assignment 5, GRPO algorithm):
  1. rollout: sample rollout_batch_size / group_size training questions and group_size responses
     each from the rollout engine (which holds the current policy weights; with
     off_policy.staleness=1 this batch was generated during the previous step, with the weights
     before it: grpo.training.overlap);
  2. scoring: rewards and group-normalized advantages;
  3. old_log_probs: log-probs of the sampled responses under the policy that sampled them,
     computed under `torch.inference_mode()` only when the loss reads the probability ratio
     (`PolicyLoss.uses_ratio`) or the stale-weight check runs this step (every
     rollout.stale_check_every steps and on the first step after a resume, for engines that
     report log-probs): the check compares them with the engine's log-probs of the same tokens;
     with off_policy.staleness=1 a stale batch's importance weights pi_old / pi_behaviour
     (grpo.training.behaviour, grpo.core.importance) are taken here, or, where the step trains
     once on unchanged weights with a ratio-free loss from the raw distribution (temperature 1,
     no top-p, no minimum length), in the training forward;
  4. training: off_policy.epochs epochs over the rollout batch in optimizer steps of
     train_batch_size rollouts, each accumulated over micro-batches (`MicroBatching`:
     micro_batch_size rollouts, or a model.micro_batch_tokens budget with rollouts grouped by
     length), each weighted by its share of the optimizer step (`grpo_share_train_step`);
     rollouts with advantage exactly 0 are left out of the backward when skip_zero_advantage is
     on and the loss is 0 there (their entropy is still measured, in an inference forward);
  5. weight sync into the engine, evaluation every eval.eval_every steps, metrics, checkpoint.

With pruning on (`pruning=successive_halving`, grpo.run.pruning) each evaluation is reported to the
sweep's pruner; a run it stops checkpoints that step and ends as `pruned`. A run launched again
that is over for its config (grpo.run.finished: completed to its n_grpo_steps, pruned while the
sweep prunes, collapsed, diverged) trains nothing and is left as it is; a pruned run launched with
`pruning=off` trains on from that checkpoint, a completed one with a larger n_grpo_steps too.

Wall-clock: `time/elapsed_s` is the run's total (continuing across resumes), `time/elapsed_no_eval_s`
the same minus every evaluation's `time/eval_s`: the training wall-clock that comparisons use.

The run directory holds metrics.jsonl, status.json, checkpoints/, rollouts/ and final_model/; a run
started in a directory with a checkpoint resumes from the newest intact one (see grpo.run.checkpoint).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from submitit.core.utils import UncompletedJobError

from grpo.core.advantages import compute_group_normalized_rewards
from grpo.core.importance import CORRECTIONS
from grpo.core.log_probs import get_response_log_probs, label_log_probs, sampling_log_probs
from grpo.core.losses import POLICY_LOSSES
from grpo.core.masking import masked_normalize
from grpo.core.tokenization import tokenize_prompt_and_output
from grpo.core.train_step import OptimizerStepTotals, grpo_share_train_step
from grpo.data.datasets import Example, PromptSampler, load_examples, run_data_config
from grpo.data.prompts import format_prompt, load_prompt_template, reward_fn_for
from grpo.grading.rewards import score_batch
from grpo.models.loading import load_policy
from grpo.models.precision import precision_of
from grpo.rollout.base import NonFiniteLogitsError, Rollout, SamplingSettings
from grpo.rollout.engines import build_engine
from grpo.rollout.specs import ENGINE_SPECS
from grpo.run.checkpoint import (
    CheckpointManager,
    TrainerState,
    final_model_problem,
    rng_state,
    set_rng_state,
    write_final_model,
)
from grpo.run.files import (
    MetricsLog,
    RunDirError,
    check_writable,
    read_status,
    subdir,
    write_status,
)
from grpo.run.finished import Launch, run_over
from grpo.run.health import HealthMonitor
from grpo.run.lock import run_lock
from grpo.run.outcomes import is_evaluation_step, write_outcomes
from grpo.run.preemption import PreemptionWatcher
from grpo.run.pruning import PruningSettings, RunTrial
from grpo.run.reproducibility import make_reproducible
from grpo.run.run_config import (
    ConfigChanged,
    check_resume,
    resume_refusal,
    run_config_text,
    write_record,
)
from grpo.run.tracking import Tracker
from grpo.training.batch_plan import BatchPlan, MicroBatching
from grpo.training.behaviour import (
    check_on_policy,
    engine_log_probs,
    importance_metrics,
    importance_sums,
    stale_weight_check,
)
from grpo.training.evaluation import evaluate, evaluation_seed, save_samples
from grpo.training.overlap import GeneratedBatch, RolloutProducer, RolloutRequest

log = logging.getLogger(__name__)


def resolve_device(name: str) -> torch.device:
    """`auto` -> cuda:0 when CUDA is available, else cpu."""
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class PhaseTimer:
    """Wall-clock seconds (and peak CUDA memory, GB) of the named phases of one GRPO step."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.metrics: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        yield
        if self.cuda:
            torch.cuda.synchronize()
            self.metrics[f"memory/{name}_peak_gb"] = torch.cuda.max_memory_allocated() / 2**30
        self.metrics[f"time/{name}_s"] = time.perf_counter() - start


@dataclass
class RolloutBatch:
    """One GRPO step's rollouts, flattened group by group (B = rollout_batch_size).

    input_ids, labels: (B, T) token ids, right-padded; response_mask: (B, T) 1.0 on response
    tokens of labels; advantages, raw_rewards: (B,); old_log_probs: (B, T) or None;
    importance_weights: (B, T) per-token loss weights of a stale batch (grpo.core.importance) or
    None; behaviour_log_probs: (B, T) the engine's log-probs, NaN where it gave none, when the
    weights are taken in the training forward instead; order: (B,) the seeded permutation in
    which rows are trained.
    """

    input_ids: torch.Tensor
    labels: torch.Tensor
    response_mask: torch.Tensor
    advantages: torch.Tensor
    raw_rewards: torch.Tensor
    order: torch.Tensor
    old_log_probs: torch.Tensor | None = None
    importance_weights: torch.Tensor | None = None
    behaviour_log_probs: torch.Tensor | None = None

    def lengths(self, index: torch.Tensor) -> list[int]:
        """Tokens of each row of `index` up to and including its last response token (the width
        it takes in a micro-batch, `rows` trims after it)."""
        positions = torch.arange(1, self.response_mask.shape[1] + 1, device=self.response_mask.device)
        return (self.response_mask[index] * positions).amax(dim=1).long().tolist()

    def rows(self, index: torch.Tensor) -> dict[str, torch.Tensor]:
        """The tensors of rows `index`, trimmed after their last response token."""
        columns = self.response_mask[index].any(dim=0).nonzero()
        length = int(columns[-1]) + 1 if len(columns) else self.response_mask.shape[1]
        picked = {
            "input_ids": self.input_ids[index, :length],
            "labels": self.labels[index, :length],
            "response_mask": self.response_mask[index, :length],
            "advantages": self.advantages[index].unsqueeze(-1),
            "raw_rewards": self.raw_rewards[index].unsqueeze(-1),
        }
        if self.old_log_probs is not None:
            picked["old_log_probs"] = self.old_log_probs[index, :length]
        if self.importance_weights is not None:
            picked["importance_weights"] = self.importance_weights[index, :length]
        if self.behaviour_log_probs is not None:
            picked["behaviour_log_probs"] = self.behaviour_log_probs[index, :length]
        return picked


class GRPOTrainer:
    """Holds the state of one run; `run()` executes it. See the module docstring."""

    def __init__(self, cfg: DictConfig, run_dir: Path, record: dict[str, str] | None = None) -> None:
        self.cfg = cfg
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        check_writable(run_dir)
        self.checkpoints = CheckpointManager(
            run_dir, cfg.checkpoint.keep_last, cfg.checkpoint.allow_fresh_start
        )
        resume_point = self.checkpoints.find()  # before the model loads: a refusal comes first
        if resume_point is not None:
            self._check_resume(*resume_point)
        if record is not None:  # accepted: the run's record describes what trains from here on
            write_record(run_dir, record)
        subdir(run_dir, "rollouts")
        self.device = resolve_device(cfg.model.device)
        engine_threads = ENGINE_SPECS[cfg.rollout.engine].cpu_threads(cfg.rollout)
        make_reproducible(int(cfg.seed), int(cfg.cluster.cpus_per_job) - engine_threads, self.device)

        self.precision = precision_of(cfg.model)
        self.policy, self.tokenizer = load_policy(cfg.model, self.device)
        self.optimizer = self._build_optimizer()
        warmup = int(cfg.optimizer.warmup_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup > 0 else 1.0
        )

        template = load_prompt_template(cfg.prompt.name)
        self.prompt_of = lambda example: format_prompt(template, example.question)
        self.reward_fn = reward_fn_for(cfg.prompt.name)
        data_cfg = run_data_config(OmegaConf.to_container(cfg.data, resolve=True), cfg.eval.n_examples)
        self.validation: list[Example] = load_examples(data_cfg, "validation")
        self.plan = BatchPlan.from_config(cfg)
        self.sampler = PromptSampler(load_examples(data_cfg, "train"), self.plan.questions_per_step, cfg.seed)
        self.engine = build_engine(
            cfg.rollout, policy=self.policy, tokenizer=self.tokenizer,
            model_path=str(cfg.model.path), seed=cfg.seed, max_model_len=cfg.model.max_seq_len,
        )
        self.loss = POLICY_LOSSES[cfg.loss.name]
        self.micro_batching = MicroBatching.from_config(cfg, self.loss.zero_at_zero_advantage)
        self.loss_hyperparameters = {key: cfg.loss[key] for key in self.loss.hyperparameters}
        self.stale_check_every = (
            int(cfg.rollout.stale_check_every) if ENGINE_SPECS[cfg.rollout.engine].provides_log_probs else 0
        )
        self.staleness = int(cfg.off_policy.staleness)
        # fresh batches (staleness 0) are corrected too with off_policy.correct_fresh: the weight
        # is then the engine/trainer numeric mismatch alone
        self.correct_fresh = bool(cfg.off_policy.get("correct_fresh", False))
        self.correction = (CORRECTIONS[cfg.off_policy.correction]
                           if self.staleness or self.correct_fresh else None)
        # pi_old of the importance weight is the training forward's own (detached) log-prob where
        # the step trains once on unchanged weights, with a loss without the ratio, sampled from
        # the raw distribution: no separate old-log-prob pass is needed then
        self.weights_in_train_pass = not self.loss.uses_ratio and not self.plan.off_policy and (
            self._raw_sampling())
        self._sampler_before: dict[int, dict[str, int]] = {}  # step -> sampler state before its draw
        self.health = HealthMonitor(cfg.health.zero_reward_patience, cfg.health.min_mean_response_length)
        self.pruning = PruningSettings.from_config(cfg.pruning)
        self.trial: RunTrial | None = None
        self.metrics_log = MetricsLog(run_dir)

        self.start_step = 0  # GRPO steps done when this process started
        self.optimizer_steps = 0
        self.elapsed_offset = 0.0
        self.elapsed_no_eval_offset = 0.0
        self.restarts = 0
        self.previous_status: str | None = None
        self.wandb_run_id: str | None = None
        self._resume(resume_point)
        self.producer = RolloutProducer(
            self.engine, version=self.start_step, group_size=int(cfg.group_size),
            staleness=self.staleness, draw=self._request, sampling_context=self._sampling_precision,
        )
        self.tracker = Tracker(cfg, run_dir, self.wandb_run_id)

    # ----------------------------------------------------------------------------- set-up
    def _build_optimizer(self) -> torch.optim.Optimizer:
        opt = self.cfg.optimizer
        kwargs = {
            "lr": float(self.cfg.learning_rate), "betas": tuple(opt.betas),
            "weight_decay": float(opt.weight_decay), "eps": float(opt.eps),
        }
        if opt.use_8bit:
            import bitsandbytes as bnb

            return bnb.optim.AdamW8bit(self.policy.parameters(), **kwargs)
        return torch.optim.AdamW(self.policy.parameters(), **kwargs)

    def _check_resume(self, checkpoint: Path, state: TrainerState) -> None:
        """Refuse a resume whose config changes the trained curve (grpo.run.run_config), or
        whose metrics.jsonl lost steps the checkpoint trained (unless
        checkpoint.allow_metrics_gap); both before anything is changed."""
        changed = check_resume(self.cfg, self.run_dir, checkpoint, state.step)
        if changed:
            log.warning(f"resuming {self.run_dir} with changed keys (recorded in config_changes.jsonl): "
                        + ", ".join(f"{k}: {old} -> {new}" for k, (old, new) in changed.items()))
        missing = MetricsLog(self.run_dir).steps_missing(state.step)
        if missing and not self.cfg.checkpoint.allow_metrics_gap:
            shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
            raise RunDirError(
                f"{self.run_dir}/metrics.jsonl has no record of {len(missing)} of the steps 0-"
                f"{state.step} that checkpoint {checkpoint.name} trained (steps {shown}): the "
                "curve would have a gap. Restore metrics.jsonl (e.g. from a backup), or set "
                "checkpoint.allow_metrics_gap=true to resume with the gap")
        if missing:
            log.warning(f"checkpoint.allow_metrics_gap=true: resuming with {len(missing)} steps "
                        "missing from metrics.jsonl")

    def _resume(self, resume_point: tuple[Path, TrainerState] | None) -> None:
        previous = read_status(self.run_dir)
        if previous is not None:
            self.restarts = int(previous.get("restarts", 0)) + 1
            self.previous_status = previous.get("status")
        if resume_point is None:
            moved = self.metrics_log.truncate_after(-1)
            if moved:
                log.warning(f"no checkpoint in {self.run_dir}: {moved} logged steps set aside, starting over")
            return
        latest, state = resume_point
        self.checkpoints.load_weights(latest, self.policy)
        self.optimizer.load_state_dict(state.optimizer)
        self.scheduler.load_state_dict(state.scheduler)
        self.sampler.load_state_dict(state.sampler)
        self.health.load_state_dict(state.health)
        set_rng_state(state.rng)
        self.start_step = state.step
        self.optimizer_steps = state.optimizer_steps
        self.elapsed_offset = state.elapsed_s
        self.elapsed_no_eval_offset = state.elapsed_no_eval_s
        self.wandb_run_id = state.wandb_run_id
        moved = self.metrics_log.truncate_after(state.step)
        log.info(f"resumed from {latest} after step {self.start_step} ({moved} uncheckpointed steps redone)")

    def _save_checkpoint(self, step: int, elapsed: float, elapsed_no_eval: float) -> None:
        self.checkpoints.save(
            self.policy, run_config_text(self.cfg, self.run_dir),
            TrainerState(
                step=step, optimizer=self.optimizer.state_dict(),
                scheduler=self.scheduler.state_dict(),
                # a batch drawn for the next step is in flight (staleness 1): a resume draws it again
                sampler=self._sampler_before.get(step + 1, self.sampler.state_dict()),
                rng=rng_state(), elapsed_s=elapsed, elapsed_no_eval_s=elapsed_no_eval,
                optimizer_steps=self.optimizer_steps, health=self.health.state_dict(),
                wandb_run_id=self.tracker.run_id,
            ),
        )

    def _status(self, status: str, last_step: int | None, reason: str | None = None) -> None:
        write_status(
            self.run_dir, status, last_step=last_step, n_grpo_steps=self.cfg.n_grpo_steps,
            restarts=self.restarts, reason=reason,
        )

    def _sampling(self, temperature: float, top_p: float, seed: int) -> SamplingSettings:
        s = self.cfg.sampling
        return SamplingSettings(
            temperature=float(temperature), top_p=float(top_p),
            min_new_tokens=int(s.min_new_tokens), max_new_tokens=int(s.max_new_tokens),
            stop=tuple(self.cfg.prompt.stop), seed=seed,
        )

    # ----------------------------------------------------------------------------- phases
    def _request(self, step: int) -> RolloutRequest:
        """Draw GRPO step `step`'s questions (remembering the sampler's state before the draw)."""
        self._sampler_before = {step: self.sampler.state_dict()}
        questions = self.sampler.next_batch()
        sampling = self._sampling(self.cfg.sampling.temperature, self.cfg.sampling.top_p,
                                  seed=self.cfg.seed * 1_000_003 + step - 1)
        return RolloutRequest(step, questions, [self.prompt_of(q) for q in questions], sampling)

    def _rollout(self, step: int, timer: PhaseTimer) -> GeneratedBatch:
        """Step `step`'s generated batch from the producer: generated now (phase `rollout`), or
        waited for where it was generated during the previous step (phase `rollout_wait`;
        time/rollout_s is then the generation's own wall-clock)."""
        with timer.phase("rollout" if self.staleness == 0 else "rollout_wait"):
            generated, _ = self.producer.take(step, int(self.cfg.n_grpo_steps))
        timer.metrics.setdefault("time/rollout_s", generated.generate_s)
        return generated

    def _score(
        self, prompts: list[str], rollouts: list[Rollout], truths: list[str], step: int,
        timer: PhaseTimer,
    ) -> tuple[RolloutBatch, dict[str, float]]:
        responses = [r.text for r in rollouts]
        with timer.phase("scoring"):
            # graded in parallel first; the CS336 function then reads the scores back
            scores = dict(zip(zip(responses, truths, strict=True),
                              score_batch(self.reward_fn, responses, truths), strict=True))
            advantages, raw_rewards, meta = compute_group_normalized_rewards(
                lambda response, truth: scores[response, truth], responses, truths, self.cfg.group_size,
                self.cfg.advantage_eps, self.cfg.std_norm.enabled,
            )
        tokens = tokenize_prompt_and_output(prompts, responses, self.tokenizer)
        seed = self.cfg.seed + step - 1
        order = torch.randperm(len(responses), generator=torch.Generator().manual_seed(seed))
        batch = RolloutBatch(
            input_ids=tokens["input_ids"].to(self.device), labels=tokens["labels"].to(self.device),
            response_mask=tokens["response_mask"].to(self.device, torch.float32),
            advantages=torch.as_tensor(advantages, dtype=torch.float32, device=self.device),
            raw_rewards=torch.as_tensor(raw_rewards, dtype=torch.float32, device=self.device),
            order=order,
        )
        metrics = {f"train/{k}": float(v) for k, v in meta.items() if _is_number(v)}
        metrics["train/mean_response_length"] = float(np.mean([len(r.token_ids) for r in rollouts]))
        return batch, metrics

    def _sampling_precision(self) -> AbstractContextManager[Any]:
        """The training precision's autocast for an engine that samples with the policy module
        itself (hf); none for one with its own weights (vLLM casts them at each sync)."""
        return self.precision.autocast(self.device) if self.engine.spec.samples_with_policy else nullcontext()

    def _split(self, batch: RolloutBatch, rows: torch.Tensor) -> list[torch.Tensor]:
        """`rows` (indices into the rollout batch) as the index tensors of their micro-batches."""
        return [rows[torch.tensor(part, device=rows.device)]
                for part in self.micro_batching.split(batch.lengths(rows))] if len(rows) else []

    def left_out(self, batch: RolloutBatch, rows: torch.Tensor) -> torch.Tensor:
        """(len(rows),) bool: the rows left out of the backward (advantage exactly 0, when
        the micro-batching skips them)."""
        if not self.micro_batching.skip_zero_advantage:
            return torch.zeros(len(rows), dtype=torch.bool, device=rows.device)
        return (batch.advantages[rows] == 0).to(rows.device)  # rows (the order) stay on the CPU

    def learn(self, batch: RolloutBatch, rollouts: Sequence[Rollout], step: int,
              timer: PhaseTimer, staleness: int = 0) -> dict[str, float]:
        """Phases 3 and 4 of GRPO step `step` on its scored rollout batch, sampled `staleness`
        updates before the current weights: old log-probs where needed (with the engine's
        `rollouts`: the stale-weight check, the importance weights), then the epochs of
        optimizer steps; their metrics. bench/step_time.py calls it on synthetic batches."""
        metrics = self._old_log_probs(batch, rollouts, step, timer, staleness)
        metrics.update(self._train(batch, timer))
        return metrics

    def _raw_sampling(self) -> bool:
        """Whether rollouts are sampled from the raw distribution: temperature 1, no top-p, no
        minimum length (the engine's log-probs are then the plain log-softmax)."""
        s = self.cfg.sampling
        return (float(s.temperature), float(s.top_p), int(s.min_new_tokens)) == (1.0, 1.0, 0)

    def _stale_check_due(self, step: int, staleness: int) -> bool:
        """Whether this step compares the engine's log-probs with the trainer's: on a batch
        sampled with the current weights only, every rollout.stale_check_every steps and on the
        first step of this (possibly resumed) run (steps are numbered from 1); with a correction
        of stale rollouts always on that first step, whose batch is on-policy."""
        if staleness:
            return False
        first = step == self.start_step + 1
        every = self.stale_check_every
        return (self.correction is not None and first) or (
            every > 0 and (step % every == 0 or first))

    def _old_log_probs(
        self, batch: RolloutBatch, rollouts: Sequence[Rollout], step: int, timer: PhaseTimer,
        staleness: int,
    ) -> dict[str, float]:
        """The policy's log-probs of the sampled responses before training, micro-batch by
        micro-batch in training order: stored as batch.old_log_probs when the loss reads the
        ratio; under the sampling distribution, compared with the engine's when the stale-weight
        check is due and divided by them into batch.importance_weights for a stale batch with a
        correction (grpo.training.behaviour). Not computed at all (no time/old_log_probs_s) when
        nothing needs them, nor for the rows left out of the backward unless the check is due
        (they stay 0)."""
        check = self._stale_check_due(step, staleness)
        correct = self.correction is not None and (staleness > 0 or self.correct_fresh)
        if correct and self.weights_in_train_pass and not check:
            batch.behaviour_log_probs = engine_log_probs(batch.labels, batch.response_mask, rollouts)
            return {}
        if not (self.loss.uses_ratio or check or correct):
            return {}
        temperature, top_p = float(self.cfg.sampling.temperature), float(self.cfg.sampling.top_p)
        log_probs = torch.zeros_like(batch.response_mask)
        # log-probs under the sampling distribution: the same values when it is the raw one
        mirror = (check or correct) and not self._raw_sampling()
        mirrored = torch.zeros_like(log_probs) if mirror else log_probs
        if mirror:  # the response positions where the minimum length kept EOS from being sampled
            position = batch.response_mask.cumsum(dim=1) - 1
            too_early = (batch.response_mask > 0) & (position < int(self.cfg.sampling.min_new_tokens))
            end_ids = self.engine.min_length_end_ids(tuple(self.cfg.prompt.stop))
        # the stale-weight check compares every rollout; the loss reads no left-out row's
        rows = batch.order if check else batch.order[~self.left_out(batch, batch.order)]
        with timer.phase("old_log_probs"), torch.inference_mode():
            self.policy.eval()
            for index in self._split(batch, rows):
                mb = batch.rows(index)
                with self.precision.autocast(self.device):
                    logits = self.policy(mb["input_ids"]).logits
                    lp = label_log_probs(logits, mb["labels"])
                log_probs[index, : lp.shape[1]] = lp.float()
                if mirror:
                    mirrored[index, : lp.shape[1]] = sampling_log_probs(
                        logits, mb["labels"], temperature, top_p,
                        too_early[index, : lp.shape[1]], end_ids).float()
            if self.loss.uses_ratio:
                batch.old_log_probs = log_probs
            if not (check or correct):
                return {}
            behaviour = engine_log_probs(batch.labels, batch.response_mask, rollouts)
            metrics = stale_weight_check(mirrored, behaviour) if check else {}
            if self.correction is not None:
                check_on_policy(metrics)
            if correct:
                cap = float(self.cfg.off_policy.is_cap)
                weights, capped = self.correction(mirrored, behaviour, cap)
                batch.importance_weights = weights
                trained_rows = batch.order[~self.left_out(batch, batch.order)]
                trained = torch.zeros_like(batch.response_mask)
                trained[trained_rows] = batch.response_mask[trained_rows]
                metrics.update(importance_metrics([importance_sums(weights, capped, trained, behaviour)]))
        return metrics

    def _train(self, batch: RolloutBatch, timer: PhaseTimer) -> dict[str, float]:
        cfg = self.cfg
        stats: dict[str, list[float]] = {}
        add = lambda k, v: stats.setdefault(k, []).append(float(v))  # noqa: E731
        first_microbatch = True
        optimizer_steps = 0
        self.policy.train()
        with timer.phase("train"):
            for positions in self.plan.optimizer_step_slices():
                rows = batch.order[positions]
                response_lengths = batch.response_mask[rows].sum(dim=1)
                totals = OptimizerStepTotals(len(rows), max(1, int(response_lengths.sum())),
                                             max(1, int(response_lengths.max())))
                left_out = self.left_out(batch, rows)
                add("train/frac_skipped", left_out.float().mean())
                entropy_sums: list[torch.Tensor] = []
                entropy_tokens: list[torch.Tensor] = []
                ratio_sums: dict[str, list[torch.Tensor]] = {}  # token-weighted, trained rows
                importance: list[torch.Tensor] = []  # importance_sums of each micro-batch
                trained_tokens: list[torch.Tensor] = []
                step_loss = 0.0
                for index in self._split(batch, rows[~left_out]):
                    mb = batch.rows(index)
                    with self.precision.autocast(self.device):
                        out = get_response_log_probs(
                            self.policy, mb["input_ids"], mb["labels"], return_token_entropy=True
                        )
                    weights = mb.get("importance_weights")
                    if "behaviour_log_probs" in mb:  # pi_old: this forward, before any update
                        weights, capped = self.correction(
                            out["log_probs"].detach().float(), mb["behaviour_log_probs"],
                            float(cfg.off_policy.is_cap))
                        importance.append(importance_sums(weights, capped, mb["response_mask"],
                                                          mb["behaviour_log_probs"]))
                    loss, meta = grpo_share_train_step(
                        out["log_probs"], mb["response_mask"], self.loss.name, totals,
                        raw_rewards=mb["raw_rewards"], advantages=mb["advantages"],
                        old_log_probs=mb.get("old_log_probs"),
                        importance_weights=weights,
                        length_normalization=cfg.normalization.name,
                        normalize_constant=cfg.sampling.max_new_tokens, **self.loss_hyperparameters,
                    )
                    step_loss += loss.item()
                    tokens = mb["response_mask"].sum()
                    entropy_sums.append(masked_normalize(out["token_entropy"].detach(), mb["response_mask"]))
                    entropy_tokens.append(tokens)
                    trained_tokens.append(tokens)
                    for key in ("mean_ratio", "clip_fraction", "approx_kl"):
                        if key in meta:
                            ratio_sums.setdefault(key, []).append(meta[key] * tokens)
                    if first_microbatch:
                        stats["train/mean_ratio_first_microbatch"] = [float(meta.get("mean_ratio", 1.0))]
                        first_microbatch = False
                # the left-out rows' entropy, so that train/entropy covers every sequence
                for index in self._split(batch, rows[left_out]):
                    mb = batch.rows(index)
                    with torch.inference_mode(), self.precision.autocast(self.device):
                        entropy = get_response_log_probs(
                            self.policy, mb["input_ids"], mb["labels"], return_token_entropy=True
                        )["token_entropy"]
                    entropy_sums.append(masked_normalize(entropy, mb["response_mask"]))
                    entropy_tokens.append(mb["response_mask"].sum())
                add("train/entropy", torch.stack(entropy_sums).sum() / torch.stack(entropy_tokens).sum())
                for key, sums in ratio_sums.items():
                    add(f"train/{key}", torch.stack(sums).sum() / torch.stack(trained_tokens).sum())
                for key, value in importance_metrics(importance).items():
                    add(key, value)
                for parameter in self.policy.parameters():
                    if parameter.grad is None:  # every row left out: AdamW must see a zero gradient
                        parameter.grad = torch.zeros_like(parameter)
                max_norm = cfg.optimizer.max_grad_norm
                grad_norm = torch.nn.utils.clip_grad_norm_(
                    self.policy.parameters(), max_norm if max_norm is not None else math.inf
                )
                add("train/loss", step_loss)
                add("train/grad_norm", grad_norm)
                add("train/lr", self.scheduler.get_last_lr()[0])
                if not (math.isfinite(step_loss) and math.isfinite(float(grad_norm))):
                    # diverged: no optimizer step now or in any later epoch, so the weights stay
                    # as they were before this step; the health check stops the run
                    self.optimizer.zero_grad(set_to_none=True)
                    break
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                optimizer_steps += 1
        self.optimizer_steps += optimizer_steps
        finite = torch.stack([p.isfinite().all() for p in self.policy.parameters()]).all()
        stats["train/nonfinite_weights"] = [0.0 if bool(finite) else 1.0]
        metrics = {k: float(np.mean(v)) for k, v in stats.items()}
        metrics["train/optimizer_steps_this_grpo_step"] = float(optimizer_steps)
        metrics["train/optimizer_steps"] = float(self.optimizer_steps)
        if batch.old_log_probs is None and not self.plan.off_policy:
            # one optimizer step on rollouts of these very weights: ratio 1, nothing clipped, KL 0
            # (an off-policy plan without old log-probs has no measured value, so no key)
            metrics.setdefault("train/mean_ratio", 1.0)
            metrics.setdefault("train/clip_fraction", 0.0)
            metrics.setdefault("train/approx_kl", 0.0)
        return metrics

    def _evaluate(self, step: int) -> dict[str, float]:
        prompts = [self.prompt_of(e) for e in self.validation]
        sampling = self._sampling(self.cfg.eval.temperature, self.cfg.eval.top_p,
                                  seed=evaluation_seed(int(self.cfg.seed), step))
        with self._sampling_precision():
            metrics, samples, outcomes = evaluate(
                self.engine, self.validation, prompts, self.reward_fn, sampling,
                int(self.cfg.eval.samples_per_problem), step)
        write_outcomes(self.run_dir, outcomes)
        save_samples(
            self.run_dir / "rollouts" / f"eval_step_{step:06d}.jsonl",
            samples[: self.cfg.eval.n_saved_samples],
        )
        return metrics

    # ----------------------------------------------------------------------------- loop
    def run(self, watcher: PreemptionWatcher) -> dict[str, Any]:
        """Train from `start_step` to n_grpo_steps; returns the final status.

        A signal recorded by `watcher` makes the run checkpoint after the current step and stop as
        `preempted` or `cancelled` (see `_stop_for_signal`).
        """
        cfg = self.cfg
        n_steps = int(cfg.n_grpo_steps)
        last_step = self.start_step or None
        if self.pruning is not None:
            self.trial = RunTrial.attach(self.pruning, self.run_dir, n_steps)
        if self.start_step >= n_steps:
            if self.previous_status == "completed":  # nothing trains again: no restart to count
                self.restarts -= 1
            self._complete(last_step, trained_now=False)
            return read_status(self.run_dir)
        self._status("running", last_step)
        started = time.perf_counter()
        sync_start = time.perf_counter()
        self.engine.sync_weights(self.policy)
        initial_sync_s = time.perf_counter() - sync_start
        eval_total = 0.0
        if self.start_step == 0:
            metrics = self._initial_evaluation(started)
            if metrics is None:
                self.tracker.finish()
                self.producer.close()
                return read_status(self.run_dir)
            eval_total = metrics["time/eval_s"]
        for step in range(self.start_step + 1, n_steps + 1):
            timer = PhaseTimer(self.device)
            step_start = time.perf_counter()
            try:
                generated = self._rollout(step, timer)
            except NonFiniteLogitsError as err:
                self._status("diverged", last_step, reason=f"{err} (sampling step {step})")
                self._finish_trial("diverged")
                log.warning(f"run stopped at step {step}: diverged ({err})")
                break
            prompts, rollouts, truths = _flatten(generated, self.cfg.group_size)
            batch, metrics = self._score(prompts, rollouts, truths, step, timer)
            staleness = generated.staleness()
            metrics.update(self.learn(batch, rollouts, step, timer, staleness))
            if self.staleness:
                metrics["train/staleness"] = float(staleness)
                timer.metrics["time/rollout_wait_s"] = (timer.metrics.pop("time/rollout_wait_s")
                                                        + self.producer.finish_generation())
            with timer.phase("weight_sync"):
                self.producer.sync(self.policy, step)
            if step == self.start_step + 1:
                timer.metrics["time/weight_sync_s"] += initial_sync_s
            stop = self.health.check(metrics)
            if stop is None and is_evaluation_step(step, n_steps, cfg.eval.eval_every):
                try:
                    with timer.phase("eval"):
                        metrics.update(self._evaluate(step))
                except NonFiniteLogitsError as err:
                    stop = ("diverged", f"{err} (evaluation after step {step})")
            eval_total += timer.metrics.get("time/eval_s", 0.0)
            now = time.perf_counter()
            n_tokens = sum(len(r.token_ids) for r in rollouts)
            metrics.update(timer.metrics)
            metrics.update({
                "step": step,
                "time/step_s": now - step_start,
                "time/elapsed_s": self.elapsed_offset + now - started,
                "time/elapsed_no_eval_s": self.elapsed_no_eval_offset + now - started - eval_total,
                "throughput/rollout_tokens_per_s": n_tokens / max(timer.metrics["time/rollout_s"], 1e-9),
            })
            done = step == n_steps
            if stop is None and self.trial is not None and not done:
                reason = self.trial.report(step, metrics)
                stop = ("pruned", reason) if reason is not None else None
            self.metrics_log.append(metrics)
            last_step = step
            self._progress(step, n_steps, metrics, now - started)
            periodic = step % cfg.checkpoint.checkpoint_every == 0
            healthy = stop is None or stop[0] == "pruned"  # a pruned run's weights are sound
            if healthy and (done or periodic or watcher.received or stop is not None):
                self._save_checkpoint(step, metrics["time/elapsed_s"], metrics["time/elapsed_no_eval_s"])
            if stop is None and watcher.received and not done:
                return self._stop_for_signal(watcher, step, metrics)
            self.tracker.log(metrics, step)
            if stop is not None:
                self._status(stop[0], step, reason=stop[1])
                self._finish_trial(stop[0])
                log.warning(f"run stopped at step {step}: {stop[0]} ({stop[1]})")
                break
            self._status("running", step)
        else:
            self._complete(last_step, trained_now=True)
        self.tracker.finish()
        self.producer.close()
        return read_status(self.run_dir)

    def _initial_evaluation(self, started: float) -> dict[str, float] | None:
        """Evaluate the policy before any update and log it as step 0 (a fresh run only: a
        resumed run has it already); None when its logits are not finite (status diverged)."""
        timer = PhaseTimer(self.device)
        try:
            with timer.phase("eval"):
                metrics = self._evaluate(0)
        except NonFiniteLogitsError as err:
            self._status("diverged", None, reason=f"{err} (evaluation before the first step)")
            self._finish_trial("diverged")
            log.warning(f"run stopped before the first step: diverged ({err})")
            return None
        metrics.update(timer.metrics)
        elapsed = time.perf_counter() - started
        metrics.update({"step": 0, "time/elapsed_s": elapsed,
                        "time/elapsed_no_eval_s": elapsed - timer.metrics["time/eval_s"]})
        if self.trial is not None:
            self.trial.report(0, metrics)  # no rung sits at 0: nothing stops here
        self.metrics_log.append(metrics)
        self.tracker.log(metrics, 0)
        return metrics

    def _complete(self, last_step: int | None, trained_now: bool) -> None:
        """Write final_model/ (atomically), then record `completed`. A restart that finds the
        run already trained rewrites final_model/ only when it is missing or partial."""
        if self.cfg.checkpoint.save_final_model:
            problem = None if trained_now else final_model_problem(self.run_dir)
            if problem is not None:
                log.warning(f"{problem}; writing it again from the last checkpoint (step {last_step})")
            if trained_now or problem is not None:
                write_final_model(self.policy, self.tokenizer, self.run_dir,
                                  self.precision.weights_dtype)
        self._status("completed", last_step)
        self._finish_trial("completed")

    def _finish_trial(self, status: str) -> None:
        """Tell the sweep's pruner how this run ended (its last validation reward when it
        completed); a run without a trial (pruning off) has nothing to tell."""
        if self.trial is not None:
            rewards = [r["eval/reward"] for r in self.metrics_log.read() if "eval/reward" in r]
            value = rewards[-1] if rewards and isinstance(rewards[-1], int | float) else None
            self.trial.finish(status, value)

    def _stop_for_signal(self, watcher: PreemptionWatcher, step: int, metrics: dict[str, float]) -> dict[str, Any]:
        """After the checkpoint of `step`: write the stop's status, close wandb, hand the signal on.

        A preempted run exits without a result (the scheduler runs the job again); a cancelled one
        returns its status, which the launcher reads as the job's result.
        """
        verdict = watcher.verdict()
        self._status(verdict.status, step, reason=f"{verdict.cause} after step {step}; "
                     f"checkpointed at step {step}, {verdict.resumes}")
        log.warning(f"run stopped at step {step}: {verdict.status} ({verdict.cause})")
        self.tracker.log(metrics, step)
        self.tracker.finish()
        self.producer.close()
        try:
            watcher.hand_over()
        except UncompletedJobError as err:  # submitit did not requeue (e.g. max_num_timeout reached)
            self._status("cancelled", step, reason=f"{verdict.cause} after step {step}; not "
                         f"requeued ({err}); launch the same sweep again to resume")
            return read_status(self.run_dir)
        if verdict.status == "preempted":
            raise SystemExit(f"run preempted after step {step}; it resumes when the job runs again")
        return read_status(self.run_dir)

    def _progress(self, step: int, n_steps: int, metrics: dict[str, float], elapsed: float) -> None:
        if step % self.cfg.logging.progress_every and step != n_steps:
            return
        done = step - self.start_step
        per_step = elapsed / max(done, 1)
        eta = per_step * (n_steps - step)
        line = (
            f"[{self.cfg.experiment_name}] step {step}/{n_steps} "
            f"reward {metrics.get('train/reward_mean', float('nan')):.3f}"
        )
        if "eval/reward" in metrics:
            line += f" eval {metrics['eval/reward']:.3f}"
        line += f" | {per_step:.2f} s/step, ETA {_hms(eta)}"
        print(line, flush=True)


def _flatten(generated: GeneratedBatch, group_size: int) -> tuple[list[str], list[Rollout], list[str]]:
    """(prompt, rollout, true answer) of each rollout of a generated batch, group by group."""
    request = generated.request
    rollouts = [r for group in generated.groups for r in group]
    prompts = [p for p in request.prompts for _ in range(group_size)]
    truths = [q.answer for q in request.questions for _ in range(group_size)]
    return prompts, rollouts, truths


def _hms(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) or (torch.is_tensor(value) and value.numel() == 1)


def train(cfg: DictConfig, run_dir: str | os.PathLike[str],
          record: dict[str, str] | None = None) -> dict[str, Any]:
    """Run (or resume) one GRPO run in `run_dir`; returns its final status.json content.

    The run directory's lock (`grpo.run.lock`) is held throughout: a second process training the
    same directory raises `RunDirLocked` before writing anything. A resume with a config that
    changes the trained curve raises `ConfigChanged` (grpo.run.run_config), changing nothing,
    whether or not the run is over; a run that is over for `cfg` (`grpo.run.finished.run_over`)
    returns its status at once, nothing loaded or written.
    `record` (`.hydra/` file name -> text, grpo.sweep.job.config_record) is written as the run's
    record once the resume is accepted (None: the record is left as it is).
    Any other exception marks the run `failed` with the error as reason, then propagates.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with run_lock(run_dir):
        # a changed config is refused before a run is called over: what its dry run says
        refusal = resume_refusal(cfg, run_dir)
        if refusal is not None:
            raise ConfigChanged(refusal)
        over = run_over(run_dir, Launch.of(cfg))
        if over is not None:  # over for this config (grpo.run.finished): its files stay as they are
            log.warning(f"{run_dir} is {over.why}; nothing to train")
            return over.status
        try:
            with PreemptionWatcher() as watcher:
                trainer = GRPOTrainer(cfg, run_dir, record)
                try:
                    return trainer.run(watcher)
                finally:
                    trainer.producer.close()  # again where run closed it; on an error, first
        except ConfigChanged:
            raise  # nothing was changed: the run keeps the status it had
        except Exception as err:
            status = read_status(run_dir) or {}
            try:
                write_status(
                    run_dir, "failed", last_step=status.get("last_step"),
                    n_grpo_steps=int(cfg.n_grpo_steps), restarts=int(status.get("restarts", 0)),
                    reason=f"{type(err).__name__}: {err}",
                )
            except OSError as write_err:
                log.warning(f"the failure could not be recorded in status.json: {write_err}")
            raise
