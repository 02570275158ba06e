"""The GRPO math: CS336 assignment 5's functions, pure tensor code.

`tokenization` (prompt and response ids with the response mask), `log_probs` (per-token
log-probs and entropy), `masking` (`masked_mean`, `masked_normalize`), `advantages`
(`compute_group_normalized_rewards`), `losses` (the per-token policy-gradient losses and their
registry, `POLICY_LOSSES`) and `train_step` (`grpo_microbatch_train_step` and the length
normalizations).

Imports: torch and the standard library only, no other module of the project (import-linter
contract "The GRPO math imports no other project module", pyproject.toml).
"""
