"""The GRPO training run of one sweep point: `train(cfg, run_dir)`, and `GRPOTrainer`, whose
`run` is the loop of GRPO steps.

Before the first GRPO step, the initial (pre-RL) policy is evaluated: metrics.jsonl's first row is
that evaluation, at step 0. GRPO steps are numbered 1..n_grpo_steps; a metrics row's `step` (and
status.json's `last_step`, a checkpoint's step) is the number of GRPO steps done. Step s samples
and shuffles with the seeds of index s - 1, so the curves are those of the 0-based numbering.

Each GRPO step (CS336 assignment 5, GRPO algorithm), phase by phase (`grpo.training.timing`
times each):
  1. rollout: sample rollout_batch_size / group_size training questions and group_size responses
     each from the rollout engine (which holds the current policy weights; with
     off_policy.staleness=1 this batch was generated during the previous step, with the weights
     before it: grpo.training.overlap; with zero_variance=dynamic_sampling, more rounds of
     questions until the step holds groups with non-zero variance: grpo.training.zero_variance);
  2. score: rewards (with overlong.buffer > 0 DAPO's soft overlong punishment added) and
     group-normalized advantages (grpo.training.rollouts; zero_variance=filter marks the rows of
     zero-variance groups, overlong.filter those cut at max_new_tokens, left out of the loss and
     its denominators);
  3. old log-probs (and with kl.beta > 0 the reference policy's) and 4. learn: the epochs of
     micro-batched optimizer steps (grpo.training.learner);
  5. weight sync into the engine, the prompts solved retired (retire.pass_rate: never sampled
     again; a run with every prompt retired ends `completed` after that step, with the reason),
     the health check (grpo.run.health), evaluation every eval.eval_every steps
     (grpo.training.evaluation), metrics, checkpoint, and a stop where the scheduler sent a
     signal (grpo.run.preemption).

With pruning on (`pruning=successive_halving`, grpo.run.pruning) each evaluation is reported to the
sweep's pruner; a run it stops checkpoints that step and ends as `pruned`. A run launched again
that is over for its config (grpo.run.finished: completed to its n_grpo_steps, pruned while the
sweep prunes, collapsed, diverged) trains nothing and is left as it is; a pruned run launched with
`pruning=off` trains on from that checkpoint, a completed one with a larger n_grpo_steps too.

The run directory holds metrics.jsonl, status.json, checkpoints/, rollouts/ and final_model/; a run
started in a directory with a checkpoint resumes from the newest intact one (see grpo.run.checkpoint).
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from submitit.core.utils import UncompletedJobError

from grpo.data.datasets import (
    HELDOUT,
    Example,
    PromptSampler,
    PromptsExhausted,
    load_examples,
    run_data_config,
)
from grpo.data.prompts import answer_fn_for, format_prompt, load_prompt_template, reward_fn_for
from grpo.grading.rewards import score_batch
from grpo.models.loading import load_policy, load_reference
from grpo.models.precision import precision_of
from grpo.rollout.base import NonFiniteLogitsError, Rollout, SamplingSettings
from grpo.rollout.engines import build_engine
from grpo.rollout.specs import ENGINE_SPECS
from grpo.run.checkpoint import (
    CheckpointManager,
    TrainerState,
    final_model_problem,
    write_final_model,
)
from grpo.run.checkpoint_names import FINAL_MODEL
from grpo.run.files import MetricsLog, check_writable, read_status, subdir, write_status
from grpo.run.finished import Launch, confirmed, run_over
from grpo.run.health import HealthMonitor
from grpo.run.lock import run_lock
from grpo.run.outcomes import CONFIRM_DIR, is_evaluation_step, logged_key, write_outcomes
from grpo.run.preemption import PreemptionWatcher
from grpo.run.pruning import PruningSettings, RunTrial
from grpo.run.reproducibility import make_reproducible
from grpo.run.run_config import ConfigChanged, resume_refusal, run_config_text, write_record
from grpo.run.tracking import Tracker
from grpo.training.batch_plan import BatchPlan
from grpo.training.checkpointing import check_resume_point, restore, trainer_state
from grpo.training.evaluation import CONFIRM_STREAM, evaluate, evaluation_seed, save_samples
from grpo.training.learner import Learner
from grpo.training.overlap import GeneratedBatch, RolloutProducer, RolloutRequest
from grpo.training.rollouts import Overlong, RolloutBatch, flatten, score
from grpo.training.timing import PhaseTimer, RunClock
from grpo.training.zero_variance import DynamicSampler, Sampled, ZeroVariance, pass_rate, round_seed

log = logging.getLogger(__name__)


def resolve_device(name: str) -> torch.device:
    """`auto` -> cuda:0 when CUDA is available, else cpu."""
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class GRPOTrainer(Learner):
    """Holds the state of one run; `run()` executes it. See the module docstring; what a step
    learns from its rollouts is the `Learner`'s."""

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
            check_resume_point(cfg, run_dir, *resume_point)
        if record is not None:  # accepted: the run's record describes what trains from here on
            write_record(run_dir, record)
        subdir(run_dir, "rollouts")
        device = resolve_device(cfg.model.device)
        engine_threads = ENGINE_SPECS[cfg.rollout.engine].cpu_threads(cfg.rollout)
        make_reproducible(int(cfg.seed), int(cfg.cluster.cpus_per_job) - engine_threads, device)

        precision = precision_of(cfg.model)
        self.policy_from = OmegaConf.select(cfg, "confirm.policy_from", default=None)
        model_cfg = cfg.model if self.policy_from is None else {  # a run's final model, as is
            **OmegaConf.to_container(cfg.model, resolve=True), "build": None,
            "path": str(Path(str(self.policy_from)) / FINAL_MODEL)}
        policy, self.tokenizer = load_policy(model_cfg, device)
        # the KL term's reference: the initial weights from model.path, also on a resume
        reference = load_reference(cfg.model, device) if float(cfg.kl.beta) > 0 else None
        super().__init__(cfg, policy, precision, device, BatchPlan.from_config(cfg), reference)
        self.overlong = Overlong.from_config(cfg)
        template = load_prompt_template(cfg.prompt.name)
        self.prompt_of = lambda example: format_prompt(template, example.question)
        self.reward_fn = reward_fn_for(cfg.prompt.name)  # evaluation grades with it, always
        self.training_reward = OmegaConf.to_container(cfg.reward, resolve=True)  # trained on
        self.answer_fn = answer_fn_for(cfg.prompt.name)
        data_cfg = run_data_config(OmegaConf.to_container(cfg.data, resolve=True), cfg.eval.n_examples)
        self.validation: list[Example] = load_examples(data_cfg, "validation")
        self.confirms = bool(OmegaConf.select(cfg, "confirm.enabled", default=False))
        self.heldout: list[Example] = load_examples(run_data_config(
            data_cfg, cfg.eval.n_examples, int(cfg.confirm.n_examples)), HELDOUT) if self.confirms else []
        self.sampler = PromptSampler(load_examples(data_cfg, "train"), self.plan.questions_per_step, cfg.seed)
        self.engine = build_engine(
            cfg.rollout, policy=policy, tokenizer=self.tokenizer,
            model_path=str(cfg.model.path), seed=cfg.seed, max_model_len=cfg.model.max_seq_len,
        )
        self.staleness = int(cfg.off_policy.staleness)
        self._sampler_before: dict[int, dict[str, Any]] = {}  # step -> sampler state before its draw
        self.zero_variance = ZeroVariance.from_config(cfg)
        retire = cfg.get("retire") or {}
        self.retire_at: float | None = (None if retire.get("pass_rate") is None
                                        else float(retire.pass_rate))
        self.health = HealthMonitor(cfg.health.zero_reward_patience, cfg.health.min_mean_response_length)
        self.pruning = PruningSettings.from_config(  # the pruner reads what the ranking reads
            cfg.pruning, logged_key(str(cfg.analysis.metric), int(cfg.eval.samples_per_problem)))
        self.trial: RunTrial | None = None
        self.metrics_log = MetricsLog(run_dir)

        self.elapsed_offset = 0.0
        self.elapsed_no_eval_offset = 0.0
        self.restarts = 0
        self.previous_status: str | None = None
        self.wandb_run_id: str | None = None
        self._resume(resume_point)
        self.producer = RolloutProducer(
            self.engine, version=self.start_step, group_size=int(cfg.group_size),
            staleness=self.staleness, draw=self._request, sampling_context=self._sampling_precision,
            sample=self._dynamic_sampler() if self.zero_variance.samples_more else None,
        )
        self.tracker = Tracker(cfg, run_dir, self.wandb_run_id)

    # ----------------------------------------------------------------------------- the loop
    def run(self, watcher: PreemptionWatcher) -> dict[str, Any]:
        """Train from `start_step` to n_grpo_steps; returns the final status.

        A signal recorded by `watcher` makes the run checkpoint after the current step and stop as
        `preempted` or `cancelled` (see `_stop_for_signal`).
        """
        n_steps = int(self.cfg.n_grpo_steps)
        if self.policy_from is not None:
            return self._confirm_only(n_steps)
        if self.pruning is not None:
            self.trial = RunTrial.attach(self.pruning, self.run_dir, n_steps)
        if self.start_step >= n_steps:
            return self._trained_already()
        if self._exhausted(self.start_step):  # it ended so before: nothing is left to train
            return self._trained_already(self._exhausted_reason(self.start_step))
        self._status("running", self.start_step or None)
        clock = RunClock(self.elapsed_offset, self.elapsed_no_eval_offset)
        self.engine.sync_weights(self.policy)
        initial_sync_s = time.perf_counter() - clock.started
        if self.start_step == 0 and not self._initial_evaluation(clock):
            return self._release()
        for step in range(self.start_step + 1, n_steps + 1):
            timer = PhaseTimer(self.device)
            try:
                generated = self._rollout(step, timer)
            except NonFiniteLogitsError as err:
                self._stopped("diverged", (step - 1) or None, f"{err} (sampling step {step})",
                              f"at step {step}", err)
                break
            prompts, rollouts, truths = flatten(generated, self.cfg.group_size)
            sampled: Sampled | None = generated.sampled
            batch, metrics = self._score(prompts, rollouts, truths, step, timer,
                                         None if sampled is None else sampled.grades)
            metrics.update(self.learn(batch, rollouts, step, timer, generated.staleness()))
            self._sync(step, generated, timer, metrics, initial_sync_s)
            # after the sync: no generation is in flight that draws from the sampler
            metrics.update(self._retire(step, generated, batch))
            exhausted = step < n_steps and self._exhausted(step)
            stop = self.health.check(metrics)
            if stop is None and (exhausted or is_evaluation_step(step, n_steps, self.cfg.eval.eval_every)):
                stop = self._evaluation(step, timer, metrics)
            n_tokens = (sum(len(r.token_ids) for r in rollouts) if sampled is None
                        else sampled.tokens)
            metrics.update({**timer.metrics, "step": step, **clock.step_times(timer, n_tokens)})
            if sampled is not None:
                metrics["train/generation_rounds"] = float(sampled.rounds)
                metrics["train/extra_rollouts"] = float(sampled.rollouts - len(rollouts))
            stop = stop or (None if exhausted else self._pruned(step, metrics))
            self.metrics_log.append(metrics)
            self._progress(step, n_steps, metrics, clock.now - clock.started)
            self._checkpoint(step, metrics, stop, watcher, done=exhausted and stop is None)
            if stop is None and watcher.received and step != n_steps and not exhausted:
                return self._stop_for_signal(watcher, step, metrics)
            self.tracker.log(metrics, step)
            if stop is not None:
                self._stopped(stop[0], step, stop[1], f"at step {step}", stop[1])
                break
            if exhausted:
                reason = self._exhausted_reason(step)
                log.warning(f"run ends after step {step}: {reason}")
                self._complete(step, trained_now=True, reason=reason)
                break
            self._status("running", step)
        else:
            self._complete(n_steps, trained_now=True)
        return self._release()

    # ----------------------------------------------------------------------------- phases
    def _request(self, step: int, round_: int = 0) -> RolloutRequest | None:
        """Draw GRPO step `step`'s questions (remembering the sampler's state before the draw),
        or those of dynamic sampling's extra round `round_` of it; None where every prompt is
        retired. Step s passes over the prompts retired at step s - 1 - off_policy.staleness or
        before: those known when its batch is drawn (with staleness 1 it is drawn while step
        s - 1 trains), so that a resumed run draws what the first run drew."""
        if round_ == 0:
            self._sampler_before = {step: self.sampler.state_dict()}
        try:
            questions = self.sampler.next_batch(through=step - 1 - self.staleness)
        except PromptsExhausted:
            return None
        seed = self.cfg.seed * 1_000_003 + step - 1
        if round_:  # each extra round samples with its own seed
            seed = round_seed(int(self.cfg.seed), step, round_)
        sampling = self._sampling(self.cfg.sampling.temperature, self.cfg.sampling.top_p, seed=seed)
        return RolloutRequest(step, questions, [self.prompt_of(q) for q in questions], sampling)

    def _dynamic_sampler(self) -> DynamicSampler:
        """Dynamic sampling's rounds (grpo.training.zero_variance), on this run's engine, grader
        and prompt sampler."""
        group_size = int(self.cfg.group_size)
        return DynamicSampler(
            quota=self.plan.questions_per_step, group_size=group_size,
            max_rounds=self.zero_variance.max_rounds,
            generate=lambda r: self.engine.generate(r.prompts, group_size, r.sampling),
            grade=lambda responses, truths: score_batch(self.reward_fn, responses, truths),
            draw_more=self._request)

    def _retire(self, step: int, generated: GeneratedBatch, batch: RolloutBatch) -> dict[str, float]:
        """Retire the prompts whose group reached retire.pass_rate at step `step` (every group
        generated, dynamic sampling's extra rounds included); `train/retired_prompts`, the
        prompts retired so far. Nothing without retire.pass_rate."""
        if self.retire_at is None:
            return {}
        if generated.sampled is not None:
            observed = generated.sampled.observed
        else:
            rewards = batch.raw_rewards.view(-1, int(self.cfg.group_size)).tolist()
            observed = [(q.question, pass_rate(r))
                        for q, r in zip(generated.request.questions, rewards, strict=True)]
        for question, rate in observed:
            if rate >= self.retire_at:
                self.sampler.retire(question, step)
        return {"train/retired_prompts": float(len(self.sampler.retired))}

    def _exhausted(self, step: int) -> bool:
        """Whether the draw of step `step` + 1 finds every training prompt retired."""
        return self.retire_at is not None and self.sampler.live(step - self.staleness) == 0

    def _exhausted_reason(self, step: int) -> str:
        return (f"every one of the {self.sampler.n_prompts} training prompts was retired by step {step} "
                f"(retire.pass_rate={self.retire_at:g}): nothing is left to sample, so the run "
                f"ends after step {step} of n_grpo_steps={self.cfg.n_grpo_steps}")

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
        timer: PhaseTimer, grades: list[dict[str, float]] | None = None,
    ) -> tuple[RolloutBatch, dict[str, float]]:
        """Phase `scoring` of step `step` on its flattened rollouts (`grpo.training.rollouts`;
        `grades`: their scores where dynamic sampling graded them already)."""
        cfg = self.cfg
        return score(prompts, rollouts, truths, self.reward_fn, self.tokenizer,
                     group_size=cfg.group_size, advantage_eps=cfg.advantage_eps,
                     normalize_by_std=cfg.std_norm.enabled, std_scope=cfg.std_norm.scope,
                     seed=int(cfg.seed), step=step, device=self.device, timer=timer,
                     reward=self.training_reward, filter_zero_variance=self.zero_variance.filters,
                     grades=grades, overlong=self.overlong)

    def _sampling_precision(self) -> AbstractContextManager[Any]:
        """The training precision's autocast for an engine that samples with the policy module
        itself (hf); none for one with its own weights (vLLM casts them at each sync)."""
        return self.precision.autocast(self.device) if self.engine.spec.samples_with_policy else nullcontext()

    def _sync(self, step: int, generated: GeneratedBatch, timer: PhaseTimer,
              metrics: dict[str, float], initial_sync_s: float) -> None:
        """Phase `weight_sync`: the trained weights into the engine, once the generation in flight
        (staleness 1: its wait counts in time/rollout_wait_s) is done; the first step of this
        process also counts the sync before it (`initial_sync_s` seconds)."""
        if self.staleness:
            metrics["train/staleness"] = float(generated.staleness())
            timer.metrics["time/rollout_wait_s"] = (timer.metrics.pop("time/rollout_wait_s")
                                                    + self.producer.finish_generation())
        with timer.phase("weight_sync"):
            self.producer.sync(self.policy, step)
        if step == self.start_step + 1:
            timer.metrics["time/weight_sync_s"] += initial_sync_s

    def _evaluate(self, step: int) -> dict[str, float]:
        """The validation metrics after step `step` (0: before the first); the outcomes and
        samples are written to the run directory."""
        prompts = [self.prompt_of(e) for e in self.validation]
        sampling = self._sampling(self.cfg.eval.temperature, self.cfg.eval.top_p,
                                  seed=evaluation_seed(int(self.cfg.seed), step))
        with self._sampling_precision():
            metrics, samples, outcomes = evaluate(
                self.engine, self.validation, prompts, self.reward_fn, self.answer_fn, sampling,
                int(self.cfg.eval.samples_per_problem), step)
        write_outcomes(self.run_dir, outcomes)
        save_samples(
            self.run_dir / "rollouts" / f"eval_step_{step:06d}.jsonl",
            samples[: self.cfg.eval.n_saved_samples],
        )
        return metrics

    def _confirm(self, step: int) -> None:
        """The run's confirmation: the policy after GRPO step `step` (its last) evaluated on the
        held-out problems (`confirm.n_examples` at most, `confirm.samples_per_problem` responses
        each, the evaluation's sampling, seeds of their own), its outcomes written to
        `confirm_outcomes/` (never read by a ranking, a pruner or a race) and a sample of its
        responses to `rollouts/confirm_step_XXXXXX.jsonl`; nothing is logged to metrics.jsonl."""
        prompts = [self.prompt_of(e) for e in self.heldout]
        sampling = self._sampling(self.cfg.eval.temperature, self.cfg.eval.top_p,
                                  seed=evaluation_seed(int(self.cfg.seed), step, CONFIRM_STREAM))
        with self._sampling_precision():
            metrics, samples, outcomes = evaluate(
                self.engine, self.heldout, prompts, self.reward_fn, self.answer_fn, sampling,
                int(self.cfg.confirm.samples_per_problem), step)
        write_outcomes(self.run_dir, outcomes, CONFIRM_DIR)
        save_samples(self.run_dir / "rollouts" / f"confirm_step_{step:06d}.jsonl",
                     samples[: self.cfg.eval.n_saved_samples])
        print(f"[{self.cfg.experiment_name}] confirmation after step {step}: reward "
              f"{metrics['eval/reward']:.3f} on {len(self.heldout)} held-out problems", flush=True)

    def _evaluation(self, step: int, timer: PhaseTimer, metrics: dict[str, float]) -> tuple[str, str] | None:
        """Phase `eval` after step `step`, its metrics into `metrics`; the stop (`diverged`)
        where its logits are not finite."""
        try:
            with timer.phase("eval"):
                metrics.update(self._evaluate(step))
        except NonFiniteLogitsError as err:
            return "diverged", f"{err} (evaluation after step {step})"
        return None

    def _initial_evaluation(self, clock: RunClock) -> bool:
        """Evaluate the policy before any update and log it as step 0 (a fresh run only: a
        resumed run has it already); False when its logits are not finite (status diverged)."""
        timer = PhaseTimer(self.device)
        try:
            with timer.phase("eval"):
                metrics = self._evaluate(0)
        except NonFiniteLogitsError as err:
            self._stopped("diverged", None, f"{err} (evaluation before the first step)",
                          "before the first step", err)
            return False
        metrics.update({**timer.metrics, "step": 0, **clock.elapsed(timer)})
        if self.trial is not None:
            self.trial.report(0, metrics)  # no rung sits at 0: nothing stops here
        self.metrics_log.append(metrics)
        self.tracker.log(metrics, 0)
        return True

    def _pruned(self, step: int, metrics: dict[str, float]) -> tuple[str, str] | None:
        """The sweep's pruner's stop after step `step` (`pruned`, its reason); None without a
        trial (pruning off), after the last step, or where the run goes on."""
        if self.trial is None or step == int(self.cfg.n_grpo_steps):
            return None
        reason = self.trial.report(step, metrics)
        return ("pruned", reason) if reason is not None else None

    def _checkpoint(self, step: int, metrics: dict[str, float], stop: tuple[str, str] | None,
                    watcher: PreemptionWatcher, done: bool = False) -> None:
        """Checkpoint step `step` after the last step (or the last a run trains: `done`), every
        checkpoint.checkpoint_every steps, on a signal and before a stop, but never weights that
        are not sound (a pruned run's are)."""
        done = done or step == int(self.cfg.n_grpo_steps)
        periodic = step % self.cfg.checkpoint.checkpoint_every == 0
        healthy = stop is None or stop[0] == "pruned"
        if not (healthy and (done or periodic or watcher.received or stop is not None)):
            return
        sampler = self.sampler.state_dict()
        before = self._sampler_before.get(step + 1)
        if before is not None:
            # a batch drawn for the next step is in flight (staleness 1): a resume draws it again
            # (the prompts retired since stay retired: that draw passes over them as it did)
            sampler.update({key: before[key] for key in ("epoch", "position")})
        self.checkpoints.save(self.policy, run_config_text(self.cfg, self.run_dir), trainer_state(
            step, self, sampler,
            self.health, metrics["time/elapsed_s"], metrics["time/elapsed_no_eval_s"],
            self.tracker.run_id))

    # ----------------------------------------------------------------------------- ends
    def _status(self, status: str, last_step: int | None, reason: str | None = None) -> None:
        write_status(
            self.run_dir, status, last_step=last_step, n_grpo_steps=self.cfg.n_grpo_steps,
            restarts=self.restarts, reason=reason,
        )

    def _stopped(self, status: str, last_step: int | None, reason: str, when: str, cause: object) -> None:
        """A run that stops early (`status`: diverged, collapsed, pruned): its status, the
        pruner told, a warning that the run stopped `when` for `cause`."""
        self._status(status, last_step, reason=reason)
        self._finish_trial(status)
        log.warning(f"run stopped {when}: {status} ({cause})")

    def _confirm_only(self, n_steps: int) -> dict[str, Any]:
        """`confirm.policy_from`: no GRPO step; the final model of that run (trained with this
        run's config and seed) is confirmed as this run's policy after step `n_steps` (its
        last), and the run is `completed` there."""
        self._status("running", None)
        self.engine.sync_weights(self.policy)
        self._confirm(n_steps)
        self._status("completed", n_steps)
        return self._release()

    def _trained_already(self, reason: str | None = None) -> dict[str, Any]:
        """A run whose checkpoint is at n_grpo_steps already (or whose prompts were all retired
        by it: `reason`): completed, nothing trained."""
        if self.previous_status == "completed":  # nothing trains again: no restart to count
            self.restarts -= 1
        self._complete(self.start_step or None, trained_now=False, reason=reason)
        return read_status(self.run_dir)

    def _close(self) -> None:
        """Close wandb and the rollout producer."""
        self.tracker.finish()
        self.producer.close()

    def _release(self) -> dict[str, Any]:
        """Close wandb and the rollout producer; the run's final status."""
        self._close()
        return read_status(self.run_dir)

    def _complete(self, last_step: int | None, trained_now: bool, reason: str | None = None) -> None:
        """Write, where the run confirms, its confirmation (`_confirm`) and final_model/
        (atomically), then record `completed` (with `reason` where it ends before n_grpo_steps). A
        restart that finds the run already trained rewrites final_model/ only when it is missing or
        partial, and confirms only where its confirmation is missing or of other settings."""
        if self.confirms and last_step is not None and not confirmed(
                self.run_dir, last_step, int(self.cfg.confirm.samples_per_problem)):
            if not trained_now:  # the engine holds the weights it was built with
                self.engine.sync_weights(self.policy)
            self._confirm(last_step)
        if self.cfg.checkpoint.save_final_model:
            problem = None if trained_now else final_model_problem(self.run_dir)
            if problem is not None:
                log.warning(f"{problem}; writing it again from the last checkpoint (step {last_step})")
            if trained_now or problem is not None:
                write_final_model(self.policy, self.tokenizer, self.run_dir,
                                  self.precision.weights_dtype)
        self._status("completed", last_step, reason=reason)
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
        self._close()
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

    # ----------------------------------------------------------------------------- set-up
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
        restore(self.checkpoints, latest, state, self, self.sampler, self.health)
        self.elapsed_offset = state.elapsed_s
        self.elapsed_no_eval_offset = state.elapsed_no_eval_s
        self.wandb_run_id = state.wandb_run_id
        moved = self.metrics_log.truncate_after(state.step)
        log.info(f"resumed from {latest} after step {self.start_step} ({moved} uncheckpointed steps redone)")

    def _sampling(self, temperature: float, top_p: float, seed: int) -> SamplingSettings:
        s = self.cfg.sampling
        return SamplingSettings(
            temperature=float(temperature), top_p=float(top_p),
            min_new_tokens=int(s.min_new_tokens), max_new_tokens=int(s.max_new_tokens),
            stop=tuple(self.cfg.prompt.stop), seed=seed,
        )


def _hms(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


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
