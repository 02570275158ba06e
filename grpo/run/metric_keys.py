"""What each metric of ``metrics.jsonl`` means (one line per GRPO step after an evaluation of the
initial policy; wandb gets the same): the one table the documentation's metrics page is
generated from (``docs/gen_pages.py``) and a trainer test checks every logged key against.

A row names one key or a family of keys: ``{a,b}`` stands for each of a and b, ``{phase}`` for
any phase name (``rollout``, ``train``, ...). Figures name their metrics in
:mod:`analysis.names.metric_names`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

METRIC_KEYS: tuple[tuple[str, str], ...] = (
    (('step',), (
        "GRPO steps done: 0 is the evaluation of the initial (pre-RL) policy, before any update (`eval/*` only; not repeated on resume), then 1..n_grpo_steps")),
    (('time/elapsed_s', 'time/elapsed_no_eval_s'), (
        "wall-clock seconds since the run started (continuing across resumes), with and without evaluation; GPU-hours use the first, wall-clock axes and comparisons the second")),
    (('time/{rollout,scoring,old_log_probs,reference_log_probs,train,weight_sync,eval,step}_s',), (
        "seconds per phase of this step (`old_log_probs` only on steps that compute them: the loss reads the ratio, or the stale-weight check runs; `reference_log_probs`, the reference policy's forward over the batch, only with `kl.beta > 0`)")),
    (('memory/{phase}_peak_gb',), (
        "peak CUDA memory per phase (GPU runs)")),
    (('throughput/rollout_tokens_per_s',), (
        "generated tokens per second of rollout")),
    (('train/reward_mean', 'train/reward_std', 'train/reward_{max,min}', 'train/format_reward_mean', 'train/answer_reward_mean'), (
        "rollout rewards: `train/reward_*` of the reward trained on (with `reward=random`, the placebo's draws; the soft overlong punishment included with `overlong.buffer > 0`), `train/format_reward_mean` and `train/answer_reward_mean` always the prompt's reward function's grading (under the placebo, logged and trained on by no loss)")),
    (('train/frac_zero_std_groups',), (
        "fraction of groups whose rewards are all equal (zero advantage)")),
    (('train/frac_truncated',), (
        "fraction of the rollouts cut at `sampling.max_new_tokens` (no EOS or stop string): those `overlong.filter` leaves out of the loss")),
    (('train/overlong_penalty_mean',), (
        "with `overlong.buffer > 0`: the mean soft overlong punishment added to the rollouts' rewards (<= 0; `-overlong.penalty_factor` at `sampling.max_new_tokens`); `train/reward_*` include it")),
    (('train/kl_to_reference',), (
        "with `kl.beta > 0`: k3 estimate of KL(pi || pi_ref), nats, to the initial weights, as a token mean over the rollouts trained, averaged over the step's optimizer steps; `kl.beta` times it per token is in `train/loss`")),
    (('train/frac_skipped',), (
        "fraction of the rollouts left out of the backward (advantage exactly 0, `skip_zero_advantage` on, a loss that is 0 there; or a zero-variance group's, filtered with `zero_variance=filter` or `dynamic_sampling`; or a response cut at `sampling.max_new_tokens`, with `overlong.filter`); 0 when none are")),
    (('train/generation_rounds', 'train/extra_rollouts'), (
        "with `zero_variance=dynamic_sampling`: the rounds of generation this step took (1 = its first only, at most 1 + `zero_variance.max_rounds`) and the rollouts they generated beyond `rollout_batch_size` (counted in `time/rollout_s`, which holds every round's generation and grading, and in `throughput/rollout_tokens_per_s`); the `train/*` reward metrics are those of the groups trained, as in verl")),
    (('train/retired_prompts',), (
        "with `retire.pass_rate`: the training prompts (distinct questions) retired so far: a prompt retired at step t is not drawn from step t + 1 on (t + 2 with `off_policy.staleness=1`, whose step t + 1 is drawn while t trains)")),
    (('train/loss', 'train/grad_norm', 'train/lr'), (
        "per optimizer step, averaged over the step's optimizer steps; grad norm before clipping")),
    (('train/entropy',), (
        "mean per-token entropy of the policy on the response tokens of every rollout of an optimizer step, left-out ones included (nats), averaged over the step's optimizer steps")),
    (('train/mean_response_length',), (
        "mean rollout response length (tokens)")),
    (('train/mean_ratio', 'train/mean_ratio_first_microbatch', 'train/clip_fraction', 'train/approx_kl'), (
        "importance ratio pi/pi_old (exactly 1 on the first micro-batch of a step), fraction of clipped tokens (GRPO-Clip; with `loss=gspo`, whose ratio is one per sequence, the fraction of clipped sequences), k3 estimate of the KL between pi and pi_old (the weights at the step's start: with `off_policy.staleness=1` not the weights that sampled the batch, whose drift is `train/behaviour_kl`), as token means over the rollouts trained (left-out zero-advantage ones excluded); measured when the loss reads the ratio, 1/0/0 for an on-policy plan with a ratio-free loss, absent for an off-policy plan with one")),
    (('train/cap_fraction',), (
        "with `loss=cispo`: the fraction of the trained response tokens whose ratio pi/pi_old lies above `loss.ratio_cap` (or below `loss.ratio_floor`), so that their detached weight is the bound, not the ratio; their gradient is kept (a token mean over the rollouts trained, averaged over the step's optimizer steps)")),
    (('train/optimizer_steps', 'train/optimizer_steps_this_grpo_step'), (
        "optimizer steps so far and in this GRPO step (`epochs * rollout_batch_size / train_batch_size`)")),
    (('train/nonfinite_weights',), (
        "1 if an update left NaN/inf in the weights")),
    (('train/staleness',), (
        "GRPO steps between the weights that sampled this step's batch and the weights it trains from (with `off_policy.staleness=1`: 0 on a run's first step and the first after a resume, else 1)")),
    (('train/is_weight_mean', 'train/is_capped_fraction'), (
        "the importance weight of a stale batch (`off_policy.correction=tis`; of a fresh one too with `off_policy.correct_fresh`), its mean over the trained tokens that have an engine log-prob (tokens without one, which keep weight 1, are not counted) and the fraction of those whose weight was cut to `off_policy.is_cap`")),
    (('train/behaviour_kl',), (
        "with staleness 1, on the stale steps: k3 estimate of KL(pi_behaviour || pi_old), nats, over the trained tokens that have an engine log-prob (under the sampling distribution): how far the weights that sampled the batch lie from those it trains from, which `train/approx_kl` does not see")),
    (('time/rollout_wait_s',), (
        "with staleness 1: seconds the step waited for its batch's generation, which ran during the step before (`time/rollout_s` is then the generation's own duration)")),
    (('rollout/engine_logprob_abs_diff',), (
        "mean absolute difference between the engine's and the trainer's log-prob (under the sampling distribution: temperature and top-p applied) of each sampled token (over the tokens the sampled sequence and the re-tokenized response text share from the start, since BPE can re-tokenize a response differently): near 0 unless the engine's weights are stale; only on steps with the check (every `rollout.stale_check_every` steps and the first step after a resume)")),
    (('rollout/outside_trainer_nucleus',), (
        "on the same steps: the share of compared sampled tokens the trainer's mirror puts outside its top-p nucleus (with `sampling.top_p < 1` a boundary token moves out for a logit difference of 1e-3; they are left out of the difference above, and a run with a correction stops when more than 5% of a first step's tokens are)")),
    (('eval/reward', 'eval/format_reward', 'eval/answer_reward', 'eval/mean_response_length', 'eval/n_examples', 'eval/n_responses'), (
        "validation (step 0, before any update; then every `eval.eval_every` steps and the last), means over every response; `eval/n_examples` is how many problems were evaluated, `eval/n_responses` how many responses (`eval.samples_per_problem` per problem: the dry run's cost model prices an evaluation per response). Each evaluation also writes every problem's mean reward to `eval_outcomes/step_XXXXXX.json` (the analysis pairs configs on the same problems with it)")),
    (('eval/mean@k', 'eval/pass@1', 'eval/pass@k', 'eval/maj@k'), (
        "with `eval.samples_per_problem` k > 1, each evaluation's means over problems of: the mean reward of the k responses (`eval/reward` again, as the field names it), the unbiased pass@1 and pass@k estimates 1 - C(n-c, k)/C(n, k) (n = k responses, c right), and the majority answer's reward (answers grouped by the grader's own equivalence, a tie to the group sampled first: `grpo.grading.majority`); the outcomes file keeps each problem's count right and majority reward, so any of them is recomputed from it (`analysis.metric` picks the one the analysis reads)")),
)
"""(the keys of a row, what they mean), in the order the documentation lists them."""


def _pattern(name: str) -> re.Pattern[str]:
    """``name`` (``time/{rollout,train}_s``, ``memory/{phase}_peak_gb``) as a regular expression."""
    parts = re.split(r"(\{[^}]*\})", name)
    return re.compile("".join(
        ("(" + "|".join(map(re.escape, p[1:-1].split(","))) + ")" if "," in p else r"\w+")
        if p.startswith("{") else re.escape(p) for p in parts))


_PATTERNS = tuple(_pattern(name) for names, _ in METRIC_KEYS for name in names)


def undocumented(keys: Iterable[str]) -> list[str]:
    """The keys of ``keys`` that no row of :data:`METRIC_KEYS` names, sorted."""
    return sorted(k for k in set(keys) if not any(p.fullmatch(k) for p in _PATTERNS))
