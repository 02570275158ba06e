"""The run directory and the job around it: what a run writes, and how it survives.

`files` (metrics, status, atomic writes), `checkpoint` (atomic, verified checkpoints),
`checkpoint_names` (where checkpoints are and how they are named, torch-free), `run_config` (the
config stored with each checkpoint, and the run's `.hydra/` record),
`state_files` (trainer state without pickle), `finished` (when a run is over for a launch, and the
status names every reader shares), `manifest` (sizes and hashes), `outcomes` (each evaluation's
per-problem rewards), `preemption`
(SLURM signals), `health` (collapse and divergence guards), `pruning` (the sweep's pruner: an
Optuna study in the sweep directory, and its replay), `tracking` (wandb),
`reproducibility` (seeds, threads, deterministic algorithms) and `slurm` (scheduler questions).

Imports: nothing of the project outside this package.
"""
