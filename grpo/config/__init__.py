"""Every config value checked before anything runs or is submitted.

`rules` (the one table of allowed values of every scalar key) and `validation` (`check_config`:
rules, batch plan, data files, model files, loss hyperparameters, prompts, GPUs).

Imports: `grpo.training` (the batch plan) and everything below it, whose registries it reads.
"""
