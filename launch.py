"""grpo-sweeps entry point: one GRPO run per Hydra job.

    python launch.py model=tiny data=toy rollout=hf                 # one run
    python launch.py -m off_policy.epochs=1,2,4 train_batch_size=64,128,256
    python launch.py -m +experiment=off_policy_broad cluster=slurm  # a study on SLURM
    python launch.py -m ... dry_run=true                            # list the jobs, submit nothing
"""

import hydra
from omegaconf import DictConfig

from grpo.sweep.job import run_job


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> dict | None:
    return run_job(cfg)


if __name__ == "__main__":
    main()
