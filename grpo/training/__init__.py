"""The GRPO loop: rollouts, rewards, advantages and optimizer steps of one run.

`trainer` (`GRPOTrainer`, whose `run` is the loop of GRPO steps, and `train`), its phases'
units: `overlap` (the producer of each step's rollouts), `rollouts` (`RolloutBatch`, scoring),
`learner` (`Learner`: old log-probs and the micro-batched optimizer steps), `zero_variance`
(what a step does with its zero-variance groups: keep, filter, dynamic sampling's rounds),
`behaviour` (the engine's log-probs beside the trainer's), `evaluation` (validation rollouts), `checkpointing`
(resume and save), `timing` (`PhaseTimer`, `RunClock`); and `batch_plan` (`BatchPlan`: the
batch arithmetic of a config).

Imports: `grpo.run`, `grpo.rollout`, `grpo.models` and below. `batch_plan` imports nothing and
`zero_variance` no torch, so analysis and the config checks read them without loading torch.
"""
