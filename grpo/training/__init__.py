"""The GRPO loop: rollouts, rewards, advantages and optimizer steps of one run.

`trainer` (`GRPOTrainer`, `train`), `batch_plan` (`BatchPlan`: the batch arithmetic of a
config) and `evaluation` (greedy validation rollouts).

Imports: `grpo.run`, `grpo.rollout`, `grpo.models` and below. `batch_plan` imports nothing, so
analysis and the config checks read it without loading torch.
"""
