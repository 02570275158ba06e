"""The behaviour policy's log-probs beside the trainer's: the stale-weight check and the
importance weights of stale rollouts.

The rollout engine reports, for each sampled token, its log-prob under the sampling distribution
(`Rollout.log_probs`); the trainer computes the same quantity under its own weights
(`grpo.core.log_probs.sampling_log_probs`). The trainer's response tokens are the re-tokenized
response text, which can differ from the sampled tokens (a stop string inside a BPE merge, a
sampled special token absent from the text), so the engine's values are placed on the common
prefix of the two token sequences of each rollout, where both saw the same context; beyond it
(and for rollouts without engine log-probs) they are NaN: not compared, and weight 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from grpo.rollout.base import Rollout

MAX_ON_POLICY_DIFF = 0.1
"""Mean |engine - trainer| log-prob (nats) above which a batch sampled with the trainer's own
weights shows that the engine's log-probs are of another distribution than the trainer's mirror
(temperature or top-p applied differently, other weights): the importance weights would be
wrong, so a run with a correction stops. bf16 engines differ from the trainer by ~0.01-0.03."""


MAX_OUTSIDE_NUCLEUS = 0.05
"""Share of the sampled tokens the trainer's mirror puts outside its top-p nucleus above which a
batch sampled with the trainer's own weights shows another distribution: at the boundary a
healthy engine moves a few tokens out (a logit difference of 1e-3 is enough), a top-p applied
differently moves many."""


class LogProbMismatchError(RuntimeError):
    """The engine's log-probs disagree with the trainer's on weights they share."""


def engine_log_probs(
    labels: torch.Tensor, response_mask: torch.Tensor, rollouts: Sequence[Rollout]
) -> torch.Tensor:
    """(B, T) the engine's log-prob of each response token of `labels` (rows in rollout order,
    each response one contiguous span of `response_mask`), on each rollout's common prefix with
    the sampled tokens; NaN elsewhere. Vectorized: one padded (B, L) tensor of the sampled tokens
    and their log-probs is compared with the trainer's tokens at the same response offsets."""
    aligned = torch.full(labels.shape, float("nan"), dtype=torch.float32, device=labels.device)
    usable = [r.log_probs is not None and len(r.log_probs) == len(r.token_ids) for r in rollouts]
    width = max((len(r.token_ids) for r, ok in zip(rollouts, usable, strict=True) if ok), default=0)
    if width == 0:
        return aligned
    pads = [width - len(r.token_ids) if ok else width for r, ok in zip(rollouts, usable, strict=True)]
    tokens = torch.tensor([(r.token_ids if ok else []) + [-1] * pad for r, ok, pad
                           in zip(rollouts, usable, pads, strict=True)], device=labels.device)
    values = torch.tensor([(r.log_probs if ok else []) + [0.0] * pad for r, ok, pad
                           in zip(rollouts, usable, pads, strict=True)], dtype=torch.float32,
                          device=labels.device)
    response = response_mask > 0
    start = response.float().argmax(dim=1)  # first response position of each row
    length = response.sum(dim=1)
    offsets = torch.arange(width, device=labels.device)
    positions = (start[:, None] + offsets).clamp(max=labels.shape[1] - 1)
    trainer_tokens = labels.gather(1, positions)
    same = (trainer_tokens == tokens) & (offsets < length[:, None])
    prefix = same.long().cumprod(dim=1).bool()  # the common prefix of the two sequences
    rows = prefix.nonzero(as_tuple=True)[0]
    aligned[rows, positions[prefix]] = values[prefix]
    return aligned


def stale_weight_check(trainer_log_probs: torch.Tensor, behaviour: torch.Tensor) -> dict[str, float]:
    """`rollout/engine_logprob_abs_diff`: the mean over rollouts of the mean |engine - trainer|
    log-prob of their compared tokens inside the trainer's nucleus (rollouts with none are left
    out); `rollout/outside_trainer_nucleus`: the share of compared tokens the trainer's mirror
    puts outside its top-p nucleus (log-prob -inf). No key when no token is compared.

    With top_p < 1 a token the engine sampled at the nucleus boundary can fall just outside the
    trainer's nucleus for a logit difference of 1e-3: its difference is infinite, not a measure of
    staleness, so it is counted in the share, not averaged into the difference.

    trainer_log_probs, behaviour: (B, T), the latter NaN where not compared.
    """
    compared = ~torch.isnan(behaviour)
    if not bool(compared.any()):
        return {}
    outside = compared & torch.isneginf(trainer_log_probs)
    inside = compared & ~outside
    counts = inside.sum(dim=1)
    diffs = torch.where(inside, (trainer_log_probs - behaviour).abs(), torch.zeros_like(behaviour))
    rows = counts > 0
    metrics = {"rollout/outside_trainer_nucleus": float(outside.sum() / compared.sum())}
    if bool(rows.any()):
        metrics["rollout/engine_logprob_abs_diff"] = float((diffs.sum(dim=1)[rows] / counts[rows]).mean())
    return metrics


def importance_sums(weights: torch.Tensor, capped: torch.Tensor, mask: torch.Tensor,
                    behaviour: torch.Tensor) -> torch.Tensor:
    """(3,) the sum of the weights, the count of capped tokens and the count of tokens, over the
    tokens of `mask` (B, T: the trained responses) that have an engine log-prob (`behaviour` not
    NaN); the others keep weight 1 without being weighted and are not counted."""
    weighted = (mask > 0) & ~torch.isnan(behaviour)
    return torch.stack([(weights * weighted).sum(), (capped & weighted).sum().float(),
                        weighted.sum().float()])


def importance_metrics(sums: Sequence[torch.Tensor]) -> dict[str, float]:
    """`train/is_weight_mean` and `train/is_capped_fraction` from `importance_sums` of each
    micro-batch; none without a weighted token."""
    weight, capped, tokens = torch.stack(list(sums)).sum(dim=0).tolist() if sums else (0, 0, 0)
    if tokens == 0:
        return {}
    return {"train/is_weight_mean": weight / tokens, "train/is_capped_fraction": capped / tokens}


def behaviour_kl_sums(proximal_log_probs: torch.Tensor, behaviour: torch.Tensor,
                     mask: torch.Tensor) -> torch.Tensor:
    """(2,) over the tokens of `mask` (B, T: the trained responses) that the engine reported
    (`behaviour` not NaN) and the trainer's mirror keeps in its nucleus (`proximal_log_probs`
    finite): the sum of the k3 estimate (r - 1) - log r, r = pi_old / pi_behaviour, in nats, and
    their count. The tokens were sampled from pi_behaviour, so the mean estimates
    KL(pi_behaviour || pi_old) without bias: the drift a stale batch carries, which
    `train/approx_kl` (pi against pi_old) does not see.

    proximal_log_probs, behaviour: (B, T) log-probs under the sampling distribution."""
    compared = (mask > 0) & ~torch.isnan(behaviour) & torch.isfinite(proximal_log_probs)
    log_ratio = torch.where(compared, proximal_log_probs - behaviour, torch.zeros_like(behaviour))
    k3 = torch.expm1(log_ratio) - log_ratio
    return torch.stack([k3.sum(), compared.sum().float()])


def behaviour_kl_metrics(sums: Sequence[torch.Tensor]) -> dict[str, float]:
    """`train/behaviour_kl` from `behaviour_kl_sums` of each micro-batch; none without a
    compared token."""
    total, tokens = torch.stack(list(sums)).sum(dim=0).tolist() if sums else (0, 0)
    return {"train/behaviour_kl": total / tokens} if tokens else {}


def check_on_policy(metrics: dict[str, float]) -> None:
    """Raise `LogProbMismatchError` when a batch sampled with the trainer's own weights shows a
    mean log-prob difference above MAX_ON_POLICY_DIFF, or more than MAX_OUTSIDE_NUCLEUS of its
    sampled tokens outside the trainer's nucleus."""
    diff = metrics.get("rollout/engine_logprob_abs_diff")
    outside = metrics.get("rollout/outside_trainer_nucleus", 0.0)
    if (diff is None or diff <= MAX_ON_POLICY_DIFF) and outside <= MAX_OUTSIDE_NUCLEUS:
        return
    found = (f"differ from the trainer's by {diff:.3f} nats (mean; limit {MAX_ON_POLICY_DIFF})"
             if diff is not None and diff > MAX_ON_POLICY_DIFF else
             f"fall outside the trainer's top-p nucleus for {outside:.1%} of the sampled tokens "
             f"(limit {MAX_OUTSIDE_NUCLEUS:.0%})")
    raise LogProbMismatchError(
        f"the rollout engine's log-probs of the sampled tokens {found} on a batch sampled with "
        "the trainer's own weights: they are not of the distribution the trainer mirrors (the "
        "logits / sampling.temperature cut to sampling.top_p), so the importance weights of "
        "stale rollouts would be wrong. Check that the engine reports log-probs after "
        "temperature and top-p (vLLM: logprobs_mode=processed_logprobs), or set "
        "off_policy.correction=none")
