"""The adapters around dependency internals (hydra_plugins/grpo_sweeps/*_compat.py) against the
installed releases: each internal is exercised for real, and a moved one fails naming the
package and its version."""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path

import cloudpickle
import pytest
import submitit
from hydra.core.override_parser.overrides_parser import OverridesParser

from hydra_plugins.grpo_sweeps.hydra_compat import (
    BasicSweeper,
    HydraInternalsMoved,
    preset_overrides,
    split_into_jobs,
)
from hydra_plugins.grpo_sweeps.submitit_compat import (
    BaseSubmititLauncher,
    SubmititInternalsMoved,
    check_launcher_call,
    submit_sweep_job,
)

HYDRA = f"hydra-core {importlib.metadata.version('hydra-core')}"
SUBMITIT = f"submitit {importlib.metadata.version('submitit')}"
LAUNCHER = f"hydra-submitit-launcher {importlib.metadata.version('hydra-submitit-launcher')}"


def test_hydra_basic_sweeper_gives_preset_params_and_the_cartesian_product() -> None:
    sweeper = BasicSweeper(max_batch_size=None, params={"learning_rate": "1e-4,3e-4", "seed": "0,1"})
    params = preset_overrides(sweeper)
    assert params == ["learning_rate=1e-4,3e-4", "seed=0,1"]
    jobs = split_into_jobs(OverridesParser.create().parse_overrides([*params, "n_grpo_steps=5"]))
    assert [list(job) for job in jobs] == [
        [f"learning_rate={lr}", f"seed={seed}", "n_grpo_steps=5"]
        for lr in ("0.0001", "0.0003") for seed in ("0", "1")
    ]


def test_a_moved_hydra_internal_names_hydra_and_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(BasicSweeper, "_parse_config")
    with pytest.raises(HydraInternalsMoved, match=f"^{HYDRA}: BasicSweeper._parse_config"):
        preset_overrides(BasicSweeper(max_batch_size=None, params={"seed": "0,1"}))
    monkeypatch.setattr(BasicSweeper, "split_arguments", staticmethod(lambda overrides: [overrides]))
    with pytest.raises(HydraInternalsMoved, match=f"^{HYDRA}: BasicSweeper.split_arguments"):
        split_into_jobs([])


class EchoLauncher(BaseSubmititLauncher):
    """Runs in the job process and reports what it was called with and which GPUs it sees."""

    def __call__(self, sweep_overrides, job_dir_key, job_num, job_id, singleton_state):  # noqa: ANN001
        return {"overrides": sweep_overrides, "job_dir_key": job_dir_key, "job_num": job_num,
                "job_id": job_id, "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}


def test_a_local_submitit_job_gets_the_launcher_call_and_only_its_gpus(tmp_path: Path) -> None:
    check_launcher_call()  # the upstream BaseSubmititLauncher.__call__ takes what we pass
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the job process imports no tests
    try:
        executor = submitit.LocalExecutor(folder=tmp_path / "%j")
        job = submit_sweep_job(executor, EchoLauncher(), ["seed=1"], 3, (1, 2), timeout_min=5)
        result = job.result()
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert result["gpus"] == "1,2", (
        f"{SUBMITIT}: LocalExecutor no longer honours visible_gpus (the job saw "
        f"CUDA_VISIBLE_DEVICES={result['gpus']}); update hydra_plugins/grpo_sweeps/submitit_compat.py"
    )
    assert result == {"overrides": ["seed=1"], "job_dir_key": "hydra.sweep.dir", "job_num": 3,
                      "job_id": "job_id_for_3", "gpus": "1,2"}


def test_a_changed_launcher_call_names_the_package_and_its_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(BaseSubmititLauncher, "__call__", lambda self, overrides, job_num: None)
    with pytest.raises(SubmititInternalsMoved, match=f"^{LAUNCHER}: BaseSubmititLauncher.__call__"):
        check_launcher_call()
