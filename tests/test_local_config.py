"""The suite's verdict does not depend on the user's own configs: a copy of the checkout with
what the pages ask a user to write -- `conf/local/default.yaml` from `conf/local/example.yaml`
(model.path, the MATH paths, cluster.partition and cluster.account: the SLURM page's step 1) and a
preset `python -m analysis promote` wrote (`conf/experiment/promoted/`, `conf/promoted/`) -- passes
the tests those files used to break (the page commands' dry runs, the configs' composition and
validation, every key's comment and rule), while a run outside the tests does load them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LOCAL_CONFIG_ENV, ROOT
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf
from sweep_factory import write_simple_sweep
from test_docs import shown_commands

from grpo.config.validation import check_config

SHIPPED = ("analysis", "conf", "data", "docs", "grpo", "hydra_plugins", "tests", "launch.py",
           "README.md", "mkdocs.yml", "pyproject.toml")
"""What of the checkout the affected tests read."""


def checkout_copy(target: Path) -> Path:
    """The checkout's shipped files in ``target``, without anything of yours (grpo.config.keys.yours)."""
    from grpo.config.keys import yours

    conf = ROOT / "conf"
    for name in SHIPPED:
        source = ROOT / name
        if source.is_file():
            shutil.copy2(source, target / name)
            continue
        shutil.copytree(source, target / name, ignore=lambda folder, names: [
            n for n in names if n == "__pycache__"
            or (Path(folder, n).is_relative_to(conf) and yours(Path(folder, n), conf))])
    return target


def the_pages_readme_commands() -> list[str]:
    """The README's one CPU run and its SLURM study: pytest ids of test_docs' dry-run test."""
    shown = {" ".join(s.args): s.where for s in shown_commands(ROOT / "README.md")}
    return [f"tests/test_docs.py::test_every_launch_command_on_the_pages_dry_runs[{shown[args]}]"
            for args in ("model=tiny data=toy rollout=hf", "-m +experiment=off_policy_broad cluster=slurm")]


def _composed(*overrides: str) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_the_example_local_config_reaches_only_the_presets_that_read_its_paths(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """conf/local/example.yaml, loaded as the user's local config (GRPO_LOCAL_CONFIG names it),
    sets where the Qwen model and MATH are (paths.qwen_model, paths.math_data), which only the
    Qwen and MATH presets read: model=tiny keeps its own folder (it once got the Qwen folder, and
    `make demo` was refused: the tiny builder writes into no non-empty folder), data=toy holds
    toy's keys only, the rehearsal presets keep theirs; a Qwen preset gets the local paths."""
    for name in ("GRPO_MODEL_PATH", "GRPO_DATA_DIR", "GRPO_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(LOCAL_CONFIG_ENV, "example")
    local = OmegaConf.load(ROOT / "conf" / "local" / "example.yaml")
    tiny = _composed("model=tiny", "data=toy", "rollout=hf")
    assert tiny.model.path == ".cache/tiny-qwen2-seed7"
    assert OmegaConf.to_container(tiny.data) == OmegaConf.to_container(
        OmegaConf.load(ROOT / "conf" / "data" / "toy.yaml"))
    assert _composed("+experiment=demo").model.path == ".cache/tiny-qwen2-seed7"
    rehearsal = _composed("model=qwen-rehearsal", "data=math_sample")
    assert (rehearsal.model.path, rehearsal.data.train_path) == (
        ".cache/qwen-rehearsal-seed0", "data/math_sample/train.jsonl")
    qwen = _composed("+experiment=lr_sweep", "cluster=slurm")
    assert (qwen.model.path, qwen.data.train_path, qwen.data.validation_path) == (
        local.paths.qwen_model, f"{local.paths.math_data}/train.jsonl",
        f"{local.paths.math_data}/validation.jsonl") == (
        "/data/models/Qwen2.5-Math-1.5B", "/data/MATH/train.jsonl", "/data/MATH/validation.jsonl")
    assert (qwen.cluster.partition, qwen.cluster.account) == ("gpu", "my-account")


def test_a_missing_qwen_model_or_math_folder_names_the_key_to_set(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where a Qwen/MATH preset's folder is missing, the refusal names the paths.* key the preset
    reads, where to set it and its environment variable; a model.path or data path given on the
    command line is named itself."""
    monkeypatch.setenv("GRPO_MODEL_PATH", str(tmp_path / "Qwen2.5-Math-1.5B"))
    monkeypatch.setenv("GRPO_DATA_DIR", str(tmp_path / "MATH"))
    errors = check_config(_composed("+experiment=lr_sweep", "rollout=hf")).errors
    assert (f"model.path={tmp_path}/Qwen2.5-Math-1.5B holds no config.json, and model.build=null "
            "loads it as is (builds nothing); download the model there yourself and set "
            "paths.qwen_model=/path/to/Qwen2.5-Math-1.5B (model.path reads it) in "
            "conf/local/default.yaml, or on the command line, or with GRPO_MODEL_PATH; with no "
            "weights at hand use +experiment=toy (the tiny model)") in errors
    assert (f"data.validation_path={tmp_path}/MATH/validation.jsonl does not exist; set the folder "
            "holding train.jsonl and validation.jsonl: paths.math_data=/path/to/MATH "
            "(data.validation_path reads it) in conf/local/default.yaml, or on the command line, "
            "or with GRPO_DATA_DIR") in errors
    given = check_config(_composed("+experiment=lr_sweep", "rollout=hf", "model.path=/nowhere/qwen",
                                   "data.train_path=/nowhere/train.jsonl")).errors
    assert any(e.endswith("set model.path=/path/to/qwen on the command line; with no weights at "
                          "hand use +experiment=toy (the tiny model)") for e in given)
    assert ("data.train_path=/nowhere/train.jsonl does not exist; set it on the command line "
            "(data.train_path=/path/to/train.jsonl)") in given


@pytest.mark.slow
def test_your_local_config_and_promoted_presets_do_not_change_the_suites_verdict(
        tmp_path: Path) -> None:
    copy = checkout_copy(tmp_path / "checkout")
    env = {k: v for k, v in os.environ.items() if k != LOCAL_CONFIG_ENV} | {"PYTHONPATH": str(copy)}
    local = copy / "conf" / "local" / "default.yaml"
    shutil.copy(copy / "conf" / "local" / "example.yaml", local)  # as the SLURM page says
    sweep = write_simple_sweep(tmp_path / "broad", [
        {"off_policy.epochs": 1, "train_batch_size": 64}, {"off_policy.epochs": 2, "train_batch_size": 64}],
        [[0.2, 0.3], [0.2, 0.5]])
    promote = subprocess.run([sys.executable, "-m", "analysis", "promote", "--sweep", str(sweep),
                              "--top-k", "1", "--name", "off_policy_top3"],
                             cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert promote.returncode == 0, promote.stdout + promote.stderr
    assert (copy / "conf" / "experiment" / "promoted" / "off_policy_top3.yaml").is_file()
    assert sorted(p.name for p in (copy / "conf" / "promoted" / "off_policy_top3").iterdir()) == [
        "on_policy.yaml", "top1.yaml"]

    # outside the tests, a run loads them: the Qwen preset takes your paths.qwen_model, model=tiny
    # keeps its own folder, and your SLURM partition is there
    composed = subprocess.run([sys.executable, "-c", (
        "from hydra import compose, initialize_config_dir\n"
        f"with initialize_config_dir(config_dir='{copy / 'conf'}', version_base='1.3'):\n"
        "    for model in ('model=qwen2.5-math-1.5b', 'model=tiny'):\n"
        "        cfg = compose('config', overrides=[model, 'data=toy', 'rollout=hf', "
        "'+experiment=promoted/off_policy_top3'], return_hydra_config=True)\n"
        "        print(cfg.model.path, cfg.cluster.partition, cfg.hydra.sweeper.params)")],
        cwd=copy, env=env | {"GRPO_CACHE_DIR": ".cache"}, capture_output=True, text=True, timeout=300)
    assert [line.split(" ", 2)[:2] for line in composed.stdout.splitlines()] == [
        ["/data/models/Qwen2.5-Math-1.5B", "gpu"], [".cache/tiny-qwen2-seed7", "gpu"]], (
        composed.stdout + composed.stderr)

    tests = [*the_pages_readme_commands(), "tests/test_docs.py::test_every_config_key_has_its_meaning_and_rule",
             "tests/test_config.py::test_every_key_has_a_comment",
             "tests/test_config.py::test_preset_composes_and_validates[toy]",
             "tests/test_config.py::test_preset_composes_and_validates[lr_sweep]",
             "tests/test_config.py::test_tiny_on_toy_brings_the_cpu_recipe_and_the_data_option_holds_data_only"]
    suite = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                            *tests], cwd=copy, env=env, capture_output=True, text=True, timeout=900)
    assert suite.returncode == 0, suite.stdout[-6000:] + suite.stderr[-2000:]
    assert " passed" in suite.stdout and "failed" not in suite.stdout
    assert local.is_file() and (copy / "conf" / "promoted" / "off_policy_top3" / "top1.yaml").is_file()
