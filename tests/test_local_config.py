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
from sweep_factory import write_simple_sweep
from test_docs import shown_commands

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

    # outside the tests, a run loads them: model=tiny takes your model.path, as the defaults order says
    composed = subprocess.run([sys.executable, "-c", (
        "from hydra import compose, initialize_config_dir\n"
        f"with initialize_config_dir(config_dir='{copy / 'conf'}', version_base='1.3'):\n"
        "    cfg = compose('config', overrides=['model=tiny', 'data=toy', 'rollout=hf', "
        "'+experiment=promoted/off_policy_top3'], return_hydra_config=True)\n"
        "print(cfg.model.path, cfg.cluster.partition, cfg.hydra.sweeper.params)")],
        cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert composed.stdout.split(" ", 2)[:2] == ["/data/models/Qwen2.5-Math-1.5B", "gpu"], (
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
