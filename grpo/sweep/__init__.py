"""What a sweep job runs (the Hydra plugins live in hydra_plugins/grpo_sweeps)."""
