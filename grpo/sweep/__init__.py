"""What a sweep job runs and how a sweep is composed and checked.

`job` (one Hydra job: validate, then train), `job_loss` (the loss an off-policy job runs),
`overrides` (strict command-line overrides), `slurm_resources` (what the partition's nodes offer),
`cost` (the dry run's GPU-hour estimate and the budget) and `hydra_compat` (the Hydra internals the sweeper builds on). The Hydra plugins themselves live
in `hydra_plugins/grpo_sweeps`.

Imports: `grpo.config`, `grpo.training` and below; not `analysis` or `chain`.
"""
