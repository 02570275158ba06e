"""The learning half of a GRPO step (CS336 assignment 5, GRPO algorithm, steps 3 and 4):
`Learner`, the policy with its optimizer, learning from one scored `RolloutBatch`.

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
     length), each weighted by its share of the optimizer step (`grpo_share_train_step`, against
     `optimizer_step_totals`: the step's sequences, tokens, prompts and each prompt's tokens);
     rollouts with advantage exactly 0 are left out of the backward when skip_zero_advantage is
     on and the loss is 0 there (their entropy is still measured, in an inference forward);
     the rows a batch marks `filtered` (a zero-variance group's with zero_variance=filter or
     dynamic_sampling, grpo.training.zero_variance; a response cut at max_new_tokens with
     overlong.filter, DAPO's overlong filtering) are left out of the backward too, and of the
     denominators of each optimizer step's loss: an optimizer step left with none takes no
     step. With kl.beta > 0 the reference policy's log-probs (a frozen copy of the initial
     weights, `reference`) are computed once per rollout batch (phase `reference_log_probs`) and
     kl.beta times the k3 KL to them is added to each token's loss (then no zero-advantage row
     is left out: the term is not 0 there).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from omegaconf import DictConfig

from grpo.core.importance import CORRECTIONS
from grpo.core.log_probs import get_response_log_probs, label_log_probs, sampling_log_probs
from grpo.core.losses import POLICY_LOSSES
from grpo.core.masking import masked_normalize
from grpo.core.train_step import OptimizerStepTotals, grpo_share_train_step, optimizer_step_totals
from grpo.models.precision import Precision
from grpo.rollout.base import Rollout, RolloutEngine
from grpo.rollout.specs import ENGINE_SPECS
from grpo.training.batch_plan import BatchPlan, MicroBatching, config_value
from grpo.training.behaviour import (
    behaviour_kl_metrics,
    behaviour_kl_sums,
    check_on_policy,
    engine_log_probs,
    importance_metrics,
    importance_sums,
    stale_weight_check,
)
from grpo.training.rollouts import RolloutBatch
from grpo.training.timing import PhaseTimer


class Learner:
    """The policy, its AdamW optimizer and learning-rate schedule, and how one GRPO step learns
    from its rollout batch (`learn`: old log-probs, then the epochs of optimizer steps).

    `engine` is the rollout engine the batches come from (the minimum-length mask its
    log-probs include), set by whoever builds it after the learner (`GRPOTrainer`: the
    optimizer is built first, so that a missing optimizer package fails before an engine
    loads); `start_step` the GRPO steps done when this process started (0, or the resumed
    checkpoint's step: the stale-weight check runs on the first step after it);
    `optimizer_steps` the optimizer steps of the whole run; `reference` the frozen initial
    policy of the KL term (needed with kl.beta > 0, else None: no reference model at all).
    `GRPOTrainer` is a Learner that also runs the loop.
    """

    engine: RolloutEngine

    def __init__(self, cfg: DictConfig, policy: torch.nn.Module, precision: Precision,
                 device: torch.device, plan: BatchPlan,
                 reference: torch.nn.Module | None = None) -> None:
        self.cfg = cfg
        self.policy = policy
        self.kl_coef = float(config_value(cfg, "kl.beta") or 0.0)
        if (self.kl_coef > 0) != (reference is not None):
            raise ValueError(f"kl.beta={self.kl_coef} needs a reference policy exactly when it is > 0")
        self.reference = reference
        self.precision = precision
        self.device = device
        self.plan = plan
        self.optimizer = self._build_optimizer()
        warmup = int(cfg.optimizer.warmup_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup > 0 else 1.0
        )
        self.loss = POLICY_LOSSES[cfg.loss.name]
        self.micro_batching = MicroBatching.from_config(cfg, self.loss.zero_at_zero_advantage)
        self.loss_hyperparameters = {key: cfg.loss[key] for key in self.loss.hyperparameters}
        self.stale_check_every = (
            int(cfg.rollout.stale_check_every) if ENGINE_SPECS[cfg.rollout.engine].provides_log_probs else 0
        )
        # fresh batches (staleness 0) are corrected too with off_policy.correct_fresh: the weight
        # is then the engine/trainer numeric mismatch alone
        self.correct_fresh = bool(cfg.off_policy.get("correct_fresh", False))
        self.correction = (CORRECTIONS[cfg.off_policy.correction]
                           if int(cfg.off_policy.staleness) or self.correct_fresh else None)
        # pi_old of the importance weight is the training forward's own (detached) log-prob where
        # the step trains once on unchanged weights, with a loss without the ratio, sampled from
        # the raw distribution: no separate old-log-prob pass is needed then
        self.weights_in_train_pass = not self.loss.uses_ratio and not self.plan.off_policy and (
            self._raw_sampling())
        self.start_step = 0
        self.optimizer_steps = 0

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

    def _split(self, batch: RolloutBatch, rows: torch.Tensor) -> list[torch.Tensor]:
        """`rows` (indices into the rollout batch) as the index tensors of their micro-batches."""
        return [rows[torch.tensor(part, device=rows.device)]
                for part in self.micro_batching.split(batch.lengths(rows))] if len(rows) else []

    def skipped(self, batch: RolloutBatch, rows: torch.Tensor) -> torch.Tensor:
        """(len(rows),) bool: the rows whose advantage is exactly 0, when the micro-batching
        leaves them out of the backward (they still count in the normalization)."""
        if not self.micro_batching.skip_zero_advantage:
            return torch.zeros(len(rows), dtype=torch.bool, device=rows.device)
        return (batch.advantages[rows] == 0).to(rows.device)  # rows (the order) stay on the CPU

    @staticmethod
    def filtered(batch: RolloutBatch, rows: torch.Tensor) -> torch.Tensor:
        """(len(rows),) bool: the rows a filter marks (zero-variance groups, responses cut at
        max_new_tokens), out of the loss and of every denominator of its normalization."""
        if batch.filtered is None:
            return torch.zeros(len(rows), dtype=torch.bool, device=rows.device)
        return batch.filtered[rows].to(rows.device)

    def left_out(self, batch: RolloutBatch, rows: torch.Tensor) -> torch.Tensor:
        """(len(rows),) bool: the rows left out of the backward: `skipped` or `filtered`."""
        return self.skipped(batch, rows) | self.filtered(batch, rows)

    def learn(self, batch: RolloutBatch, rollouts: Sequence[Rollout], step: int,
              timer: PhaseTimer, staleness: int = 0) -> dict[str, float]:
        """Phases 3 and 4 of GRPO step `step` on its scored rollout batch, sampled `staleness`
        updates before the current weights: old log-probs where needed (with the engine's
        `rollouts`: the stale-weight check, the importance weights), then the epochs of
        optimizer steps; their metrics. bench/step_time.py calls it on synthetic batches."""
        metrics = self._old_log_probs(batch, rollouts, step, timer, staleness)
        self._reference_log_probs(batch, timer)
        metrics.update(self._train(batch, timer, staleness))
        return metrics

    def _reference_log_probs(self, batch: RolloutBatch, timer: PhaseTimer) -> None:
        """Phase `reference_log_probs` (with a KL term only): the reference policy's log-probs
        of the sampled responses, micro-batch by micro-batch in training order, into
        batch.ref_log_probs (0 on the rows left out of the loss); once per rollout batch, for
        every epoch."""
        if self.reference is None:
            return
        ref_log_probs = torch.zeros_like(batch.response_mask)
        rows = batch.order[~self.left_out(batch, batch.order)]
        with timer.phase("reference_log_probs"), torch.inference_mode():
            for index in self._split(batch, rows):
                mb = batch.rows(index)
                with self.precision.autocast(self.device):
                    lp = label_log_probs(self.reference(mb["input_ids"]).logits, mb["labels"])
                ref_log_probs[index, : lp.shape[1]] = lp.float()
        batch.ref_log_probs = ref_log_probs

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
        # a stale batch's KL to the policy that sampled it (train/behaviour_kl) reads the engine's
        # log-probs too
        compare = check or correct or staleness > 0
        if not (self.loss.uses_ratio or compare):
            return {}
        temperature, top_p = float(self.cfg.sampling.temperature), float(self.cfg.sampling.top_p)
        log_probs = torch.zeros_like(batch.response_mask)
        # log-probs under the sampling distribution: the same values when it is the raw one
        mirror = compare and not self._raw_sampling()
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
            if not compare:
                return {}
            behaviour = engine_log_probs(batch.labels, batch.response_mask, rollouts)
            metrics = stale_weight_check(mirrored, behaviour) if check else {}
            if self.correction is not None:
                check_on_policy(metrics)
            trained_rows = batch.order[~self.left_out(batch, batch.order)]
            trained = torch.zeros_like(batch.response_mask)
            trained[trained_rows] = batch.response_mask[trained_rows]
            if staleness > 0:
                metrics.update(behaviour_kl_metrics([behaviour_kl_sums(mirrored, behaviour, trained)]))
            if correct:
                cap = float(self.cfg.off_policy.is_cap)
                weights, capped = self.correction(mirrored, behaviour, cap)
                batch.importance_weights = weights
                metrics.update(importance_metrics([importance_sums(weights, capped, trained, behaviour)]))
        return metrics

    def _train(self, batch: RolloutBatch, timer: PhaseTimer, staleness: int) -> dict[str, float]:
        """Phase `train`: off_policy.epochs epochs of optimizer steps over `batch` in its order
        (`BatchPlan.optimizer_step_slices`), each accumulated over its micro-batches; stops at
        a non-finite loss or gradient norm, taking no optimizer step then or after. Returns the
        `train/*` metrics, each the mean over the optimizer steps (loss, gradient norm, lr,
        token-weighted entropy in nats, ratio statistics, the share of rows left out). The
        loss's denominators (`OptimizerStepTotals`) count the step's rows that are not
        `filtered`; an optimizer step whose rows are all filtered logs loss and gradient norm 0
        and takes no optimizer step (nor a schedule step)."""
        cfg = self.cfg
        stats: dict[str, list[float]] = {}
        add = lambda k, v: stats.setdefault(k, []).append(float(v))  # noqa: E731
        first_microbatch = True
        optimizer_steps = 0
        self.policy.train()
        with timer.phase("train"):
            for positions in self.plan.optimizer_step_slices():
                rows = batch.order[positions]
                # the rows the normalization counts: every one but those a filter leaves out
                counted = rows[~self.filtered(batch, rows)]
                step_prompt_tokens = torch.ones(len(batch.order), device=batch.response_mask.device)
                if len(counted):
                    # the batch is flattened group by group: row r answers prompt r // group_size
                    totals, prompt_tokens = optimizer_step_totals(batch.response_mask[counted],
                                                                  counted // self.plan.group_size)
                    step_prompt_tokens[counted.to(prompt_tokens.device)] = prompt_tokens
                else:  # every row filtered: no micro-batch reads the totals, no step is taken
                    totals = OptimizerStepTotals(1, 1, 1, prompts=1)
                left_out = self.left_out(batch, rows)
                add("train/frac_skipped", left_out.float().mean())
                entropy_sums: list[torch.Tensor] = []
                entropy_tokens: list[torch.Tensor] = []
                # token-weighted over the trained rows (a per-sequence clip: sequence-weighted)
                ratio_sums: dict[str, list[torch.Tensor]] = {}
                ratio_weights: dict[str, list[torch.Tensor]] = {}
                importance: list[torch.Tensor] = []  # importance_sums of each micro-batch
                drift: list[torch.Tensor] = []  # behaviour_kl_sums of each stale micro-batch
                step_loss = 0.0
                for index in self._split(batch, rows[~left_out]):
                    mb = batch.rows(index)
                    with self.precision.autocast(self.device):
                        out = get_response_log_probs(
                            self.policy, mb["input_ids"], mb["labels"], return_token_entropy=True
                        )
                    weights = mb.get("importance_weights")
                    if "behaviour_log_probs" in mb:  # pi_old: this forward, before any update
                        proximal = out["log_probs"].detach().float()
                        weights, capped = self.correction(
                            proximal, mb["behaviour_log_probs"], float(cfg.off_policy.is_cap))
                        importance.append(importance_sums(weights, capped, mb["response_mask"],
                                                          mb["behaviour_log_probs"]))
                        if staleness > 0:
                            drift.append(behaviour_kl_sums(proximal, mb["behaviour_log_probs"],
                                                           mb["response_mask"]))
                    loss, meta = grpo_share_train_step(
                        out["log_probs"], mb["response_mask"], self.loss.name, totals,
                        raw_rewards=mb["raw_rewards"], advantages=mb["advantages"],
                        old_log_probs=mb.get("old_log_probs"),
                        importance_weights=weights, prompt_tokens=step_prompt_tokens[index],
                        ref_log_probs=mb.get("ref_log_probs"), kl_coef=self.kl_coef,
                        length_normalization=cfg.normalization.name,
                        normalize_constant=cfg.sampling.max_new_tokens, **self.loss_hyperparameters,
                    )
                    step_loss += loss.item()
                    tokens = mb["response_mask"].sum()
                    entropy_sums.append(masked_normalize(out["token_entropy"].detach(), mb["response_mask"]))
                    entropy_tokens.append(tokens)
                    sequences = (mb["response_mask"].sum(dim=1) > 0).sum()
                    for key in ("mean_ratio", "clip_fraction", "approx_kl", "cap_fraction",
                                "kl_to_reference"):
                        if key in meta:
                            weight = (sequences if key == "clip_fraction" and self.loss.sequence_ratio
                                      else tokens)
                            ratio_sums.setdefault(key, []).append(meta[key] * weight)
                            ratio_weights.setdefault(key, []).append(weight)
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
                    add(f"train/{key}", torch.stack(sums).sum() / torch.stack(ratio_weights[key]).sum())
                for key, value in (importance_metrics(importance) | behaviour_kl_metrics(drift)).items():
                    add(key, value)
                if len(counted) == 0:  # every row filtered: nothing in the loss, no step
                    add("train/loss", 0.0)
                    add("train/grad_norm", 0.0)
                    add("train/lr", self.scheduler.get_last_lr()[0])
                    continue
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
