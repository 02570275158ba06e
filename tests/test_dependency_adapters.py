"""The adapters around dependency internals (grpo/sweep/hydra_compat.py, OmegaConf's parser included,
hydra_plugins/grpo_sweeps/submitit_compat.py, grpo/run/pruning.py's _reattach) against the
installed releases: each internal is exercised for real, and a moved one fails naming the
package and its version."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import submitit
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode

# Hydra's plugin discovery re-executes every module under hydra_plugins and its core plugins, so a
# class imported before it ran (by an earlier test) is a stale copy: these tests reach the
# adapters' names through their modules, at call time.
from grpo.sweep import hydra_compat
from hydra_plugins.grpo_sweeps import submitit_compat

CONF = Path(__file__).resolve().parents[1] / "conf"
HYDRA = f"hydra-core {importlib.metadata.version('hydra-core')}"
OMEGACONF = f"omegaconf {importlib.metadata.version('omegaconf')}"
SUBMITIT = f"submitit {importlib.metadata.version('submitit')}"
LAUNCHER = f"hydra-submitit-launcher {importlib.metadata.version('hydra-submitit-launcher')}"


def basic_sweeper_class() -> type:
    """Hydra's BasicSweeper as its module holds it now."""
    return sys.modules[hydra_compat.BasicSweeper.__module__].BasicSweeper


_SCAN_THEN_INSTANTIATE = """
import sys
from grpo.sweep import hydra_compat
from hydra.core.plugins import Plugins
from hydra_plugins.grpo_sweeps import validating_sweeper
old = hydra_compat.BasicSweeper
Plugins.instance()  # the plugin scan executes core plugins and hydra_plugins modules again, in place
current = sys.modules["hydra._internal.core_plugins.basic_sweeper"].BasicSweeper
print(old is current, hydra_compat.BasicSweeper is current,
      issubclass(validating_sweeper.ValidatingSweeper, current))
validating_sweeper.ValidatingSweeper(max_batch_size=None, params=None)
"""


def test_the_adapter_gives_the_basic_sweeper_that_hydra_s_plugin_scan_defined() -> None:
    # imported before the scan (as launch.py does), the adapter must still hand out the class the
    # scan defined, or ValidatingSweeper fails in BasicSweeper.__init__'s super() call
    out = subprocess.run([sys.executable, "-c", _SCAN_THEN_INSTANTIATE], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True"]


def test_hydra_basic_sweeper_gives_preset_params_and_the_cartesian_product() -> None:
    sweeper = basic_sweeper_class()(max_batch_size=None, params={"learning_rate": "1e-4,3e-4", "seed": "0,1"})
    params = hydra_compat.preset_overrides(sweeper)
    assert params == ["learning_rate=1e-4,3e-4", "seed=0,1"]
    overrides = OverridesParser.create().parse_overrides([*params, "n_grpo_steps=5"])
    assert [list(job) for job in hydra_compat.split_into_jobs(overrides)] == [
        [f"learning_rate={lr}", f"seed={seed}", "n_grpo_steps=5"]
        for lr in ("0.0001", "0.0003") for seed in ("0", "1")
    ]


def test_a_moved_hydra_internal_names_hydra_and_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    sweeper_class = basic_sweeper_class()
    sweeper = sweeper_class(max_batch_size=None, params={"seed": "0,1"})
    monkeypatch.delattr(sweeper_class, "_parse_config")
    with pytest.raises(hydra_compat.HydraInternalsMoved, match=f"^{HYDRA}: BasicSweeper._parse_config"):
        hydra_compat.preset_overrides(sweeper)
    monkeypatch.setattr(hydra_compat.BasicSweeper, "split_arguments",
                        staticmethod(lambda overrides: [overrides]))
    with pytest.raises(hydra_compat.HydraInternalsMoved, match=f"^{HYDRA}: BasicSweeper.split_arguments"):
        hydra_compat.split_into_jobs([])


def test_hydra_basic_sweeper_batches_and_the_chooser_of_a_config_group() -> None:
    sweeper = basic_sweeper_class()(max_batch_size=None, params=None)
    sweeper.overrides, sweeper.batch_index = [[["seed=0"], ["seed=1"]], [["seed=2"]]], 0
    assert hydra_compat.get_job_batch(sweeper) == [["seed=0"], ["seed=1"]]
    assert hydra_compat.get_job_batch(sweeper) == [["seed=2"]]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        chooser = lambda overrides: hydra_compat.group_chooser(loader, "config", overrides, "loss")  # noqa: E731
        assert chooser([]) is None
        assert chooser(["model=tiny"]) is None
        assert chooser(["loss=no_baseline"]) == hydra_compat.COMMAND_LINE
        assert chooser(["+experiment=off_policy_broad"]) == "experiment/off_policy_broad"
        assert chooser(["+experiment=demo", "loss=no_baseline"]) == hydra_compat.COMMAND_LINE
        given = ["loss=grpo_clip", "off_policy.epochs=2", "+experiment=toy", "~prompt",
                 "hydra/launcher=basic", "hydra.sweep.dir=x", "loss@extra=no_baseline", "seed=1,2"]
        assert hydra_compat.group_overrides(loader, given) == (
            "loss=grpo_clip", "+experiment=toy", "~prompt", "hydra/launcher=basic",
            "loss@extra=no_baseline")
        assert dict(hydra_compat.group_option(loader, "loss", "grpo_clip")) == \
            {"name": "grpo_clip", "cliprange": 0.2}
        assert hydra_compat.group_option(loader, "experiment", "toy") is None  # @package _global_
        assert hydra_compat.group_option(loader, "loss", "nonexistent") is None
        # what an option sets: the groups its defaults list chooses, its keys where they land
        assert hydra_compat.option_sets(loader, "variants/field_axes", "gspo") == ["loss"]
        assert hydra_compat.option_sets(loader, "variants/field_axes", "overlong_punishment") == \
            ["overlong.buffer"]
        assert hydra_compat.option_sets(loader, "experiment", "toy") == \
            ["model", "data", "rollout", "experiment_name"]
        assert hydra_compat.option_sets(loader, "loss", "grpo_clip") == ["loss.name", "loss.cliprange"]
        assert hydra_compat.option_sets(loader, "loss", "nonexistent") == []
        cfg = loader.load_configuration("config", ["seed=3", "loss=no_baseline"], RunMode.RUN)
        assert hydra_compat.overrides_dirname(cfg, ["seed=3", "loss=no_baseline"]) == \
            cfg.hydra.job.override_dirname == "loss=no_baseline,seed=3"


def test_a_moved_defaults_list_names_hydra_and_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    sweeper_class = basic_sweeper_class()
    monkeypatch.delattr(sweeper_class, "get_job_batch")
    with pytest.raises(hydra_compat.HydraInternalsMoved, match=f"^{HYDRA}: BasicSweeper.get_job_batch"):
        hydra_compat.get_job_batch(sweeper_class(max_batch_size=None, params=None))
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        monkeypatch.setattr(type(loader), "compute_defaults_list", lambda *args: object())
        with pytest.raises(hydra_compat.HydraInternalsMoved,
                           match=f"^{HYDRA}: ConfigLoader.compute_defaults_list"):
            hydra_compat.group_chooser(loader, "config", [], "loss")


def test_a_moved_override_application_names_hydra_and_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        composer = hydra_compat.SweepComposer(GlobalHydra.instance().config_loader())
        assert composer.compose("config", ["seed=3", "loss=no_baseline"]).seed == 3
        monkeypatch.delattr(ConfigLoaderImpl, "_apply_overrides_to_config")
        with pytest.raises(hydra_compat.HydraInternalsMoved,
                           match=f"^{HYDRA}: ConfigLoaderImpl._apply_overrides_to_config"):
            composer.compose("config", ["seed=4", "loss=no_baseline"])


def test_the_command_line_is_read_as_hydra_reads_it_once_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["-m", "--config-name", "config", "learning_rate=1e-4,3e-4", "+experiment=toy"]
    args = hydra_compat.command_line(argv)
    assert args.multirun and not args.help and args.config_name == "config"
    assert args.overrides == ["learning_rate=1e-4,3e-4", "+experiment=toy"]
    assert not hydra_compat.command_line(["seed=1"]).multirun
    assert hydra_compat.command_line(list(argv)) is args  # parsed once, whoever asks again
    import hydra._internal.utils

    monkeypatch.delattr(hydra._internal.utils, "get_args_parser")
    with pytest.raises(hydra_compat.HydraInternalsMoved, match=r"hydra-core .*get_args_parser moved"):
        hydra_compat.command_line(["seed=2"])


def test_interpolations_are_parsed_once_and_resolved_against_each_config() -> None:
    import omegaconf.base
    from omegaconf import OmegaConf
    from omegaconf.errors import GrammarParseError
    from omegaconf.grammar_parser import parse

    text = "${paths.cache_dir}/tiny-seed${seed}"
    configs = [OmegaConf.create({"paths": {"cache_dir": root}, "seed": seed, "path": text})
               for root, seed in ((".cache", 0), ("/scratch", 7), (".cache", 0))]
    with hydra_compat.interpolations_parsed_once():
        assert [c.path for c in configs] == [".cache/tiny-seed0", "/scratch/tiny-seed7", ".cache/tiny-seed0"]
        assert OmegaConf.to_container(configs[1], resolve=True)["path"] == "/scratch/tiny-seed7"
        info = omegaconf.base.parse.cache_info()
        assert (info.misses, info.hits) == (1, 3)  # one text: parsed once, read four times
        for _ in range(2):  # a text that does not parse raises each time
            with pytest.raises(GrammarParseError):
                omegaconf.base.parse("${oops")
    assert omegaconf.base.parse is parse


def test_a_moved_interpolation_parser_names_omegaconf_and_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    import omegaconf.base

    monkeypatch.delattr(omegaconf.base, "parse")
    with pytest.raises(hydra_compat.HydraInternalsMoved, match=f"^{OMEGACONF}: omegaconf.base.parse"):
        with hydra_compat.interpolations_parsed_once():
            pass


def test_a_local_submitit_job_gets_the_launcher_call_and_only_its_gpus(tmp_path: Path) -> None:
    submitit_compat.check_launcher_call()  # the upstream BaseSubmititLauncher.__call__ takes what we pass

    class EchoLauncher(submitit_compat.BaseSubmititLauncher):
        """Runs in the job process (pickled by value) and reports its call and the GPUs it sees."""

        def __call__(self, sweep_overrides, job_dir_key, job_num, job_id, singleton_state):  # noqa: ANN001
            return {"overrides": sweep_overrides, "job_dir_key": job_dir_key, "job_num": job_num,
                    "job_id": job_id, "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}

    executor = submitit.LocalExecutor(folder=tmp_path / "%j")
    job = submitit_compat.submit_sweep_job(executor, EchoLauncher(), ["seed=1"], 3, (1, 2), timeout_min=5)
    result = job.result()
    assert result["gpus"] == "1,2", (
        f"{SUBMITIT}: LocalExecutor no longer honours visible_gpus (the job saw "
        f"CUDA_VISIBLE_DEVICES={result['gpus']}); update hydra_plugins/grpo_sweeps/submitit_compat.py"
    )
    assert result == {"overrides": ["seed=1"], "job_dir_key": "hydra.sweep.dir", "job_num": 3,
                      "job_id": "job_id_for_3", "gpus": "1,2"}


def test_a_local_job_that_ended_without_a_result_is_reported_at_once(tmp_path: Path) -> None:
    """A job process that exits without writing its result (as a cancelled or SIGKILLed run
    does): once it has ended, its missing result is an error at once, not after submitit's
    15 s wait for a shared filesystem (which held a Ctrl-C'd sweep's summary 15 s a job)."""

    class ExitingLauncher(submitit_compat.BaseSubmititLauncher):
        """Runs in the job process and leaves it at once, as a run's SystemExit does."""

        def __call__(self, sweep_overrides, job_dir_key, job_num, job_id, singleton_state):  # noqa: ANN001
            os._exit(3)

    executor = submitit.LocalExecutor(folder=tmp_path / "%j")
    job = submitit_compat.submit_sweep_job(executor, ExitingLauncher(), ["seed=1"], 0, (), timeout_min=5)
    deadline = time.monotonic() + 120
    while not job.done():
        assert time.monotonic() < deadline, "the job never ended"
        time.sleep(0.1)
    start = time.monotonic()
    error = job.exception()
    waited = time.monotonic() - start
    assert isinstance(error, submitit.core.utils.UncompletedJobError), error
    assert "has not produced any output" in str(error)
    assert waited < 5, f"{SUBMITIT}: a missing result took {waited:.1f} s to report"


def test_a_moved_results_timeout_names_submitit_and_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(submitit.Job, submitit_compat.RESULTS_TIMEOUT)
    executor = submitit.LocalExecutor(folder=tmp_path / "%j")
    with pytest.raises(submitit_compat.SubmititInternalsMoved,
                       match=f"^{SUBMITIT}: Job.{submitit_compat.RESULTS_TIMEOUT} moved or changed"):
        submitit_compat.submit_sweep_job(executor, submitit_compat.BaseSubmititLauncher(), [], 0, (),
                                         timeout_min=5)
    assert not list(tmp_path.iterdir()), "nothing was submitted"


def test_a_changed_launcher_call_names_the_package_and_its_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(submitit_compat.BaseSubmititLauncher, "__call__",
                        lambda self, overrides, job_num: None)
    with pytest.raises(submitit_compat.SubmititInternalsMoved,
                       match=f"^{LAUNCHER}: BaseSubmititLauncher.__call__"):
        submitit_compat.check_launcher_call()


OPTUNA = f"optuna {importlib.metadata.version('optuna')}"


def test_optuna_reattaches_a_running_trial_from_its_frozen_copy() -> None:
    """grpo.run.pruning._reattach: Optuna's `Trial(study, trial_id)` and `FrozenTrial._trial_id`
    give a handle on a RUNNING trial started elsewhere, whose reports land on that trial."""
    import optuna

    from grpo.run import pruning

    study = optuna.create_study(direction="maximize")
    study.ask().report(0.5, 10)
    (frozen,) = study.get_trials(deepcopy=False)
    handle = pruning._reattach(study, frozen)
    handle.report(0.7, 20)
    assert study.trials[0].intermediate_values == {10: 0.5, 20: 0.7}, (
        f"{OPTUNA}: a trial re-attached by grpo/run/pruning.py's _reattach did not report to "
        "its own trial; update it for this release")
