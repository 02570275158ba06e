"""grpo-sweeps entry point: one GRPO run per Hydra job.

    python launch.py model=tiny data=toy rollout=hf                 # one run
    python launch.py -m off_policy.epochs=1,2,4 train_batch_size=64,128,256
    python launch.py -m +experiment=off_policy_broad cluster=slurm  # a study on SLURM
    python launch.py -m ... dry_run=true                            # list the jobs, submit nothing

An override whose key no config or config group knows (``+learning_rat=1e-5``) is refused before
Hydra starts (grpo.sweep.overrides). An off-policy job that names no loss runs ``loss=grpo_clip``
(grpo.sweep.job_loss; the validating sweeper applies it to each job of a sweep). A single run's
location is checked before Hydra makes its directory, and its dry run makes none there
(grpo.sweep.job.prepare_single_run).
"""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from grpo.sweep.job import prepare_single_run, run_job
from grpo.sweep.job_loss import compose_single_run, single_run_arguments
from grpo.sweep.overrides import refuse_unknown_overrides

CONFIG_DIR = Path(__file__).resolve().parent / "conf"
CONFIG_NAME = "config"


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name=CONFIG_NAME)
def main(cfg: DictConfig) -> dict | None:
    return run_job(cfg)


if __name__ == "__main__":
    refuse_unknown_overrides(sys.argv[1:], CONFIG_DIR, CONFIG_NAME)
    single_run = compose_single_run(sys.argv[1:], CONFIG_DIR, CONFIG_NAME)  # None with -m
    sys.argv[1:] = prepare_single_run(single_run_arguments(sys.argv[1:], single_run), single_run)
    main()
