"""The layering of the packages (import-linter contracts in pyproject.toml): kept by the code, and
each contract broken by the kind of import it exists to stop, planted in a copy of the packages;
and no folder holding directly more than a fifth of the project's Python."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONTRACTS = {
    "layers": "The pipeline's layers: a package imports only the layers below it",
    "math": "The GRPO math imports no other project module",
    "analysis": "analysis reads run directories: no trainer, model, engine or torch",
    "acyclic": "No import cycle among the modules of any package",
    "torch_free": "A dry run imports neither torch nor transformers",
    "roles": "analysis by role: outputs above decisions above the readers and the statistics, "
             "names at the bottom",
    "stats": "analysis.stats and the race's boundary are pure functions: they read no run "
             "directory, write no file",
}
PACKAGES = ("grpo", "analysis", "chain", "hydra_plugins")


def lint_imports(root: Path) -> tuple[int, dict[str, str]]:
    """Run import-linter on the packages under `root`: exit status, and KEPT/BROKEN per contract."""
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "300"}  # a contract's name on one line
    out = subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
                         cwd=root, env=env, capture_output=True, text=True, timeout=120)
    verdicts = {key: m.group(1) for key, name in CONTRACTS.items()
                if (m := re.search(rf"^{re.escape(name)} (KEPT|BROKEN)\b", out.stdout, re.M))}
    assert len(verdicts) == len(CONTRACTS), out.stdout + out.stderr
    return out.returncode, verdicts


def test_the_code_keeps_every_contract() -> None:
    status, verdicts = lint_imports(ROOT)
    assert status == 0 and set(verdicts.values()) == {"KEPT"}


PLANTED = [
    # (module that gets the import, the import, contracts it must break)
    ("grpo/core/losses.py", "from grpo.training import batch_plan", {"layers", "math", "acyclic"}),
    ("grpo/core/masking.py", "import grpo.grading.rewards", {"layers", "math"}),
    ("grpo/grading/rewards.py", "from grpo.data import toy_task", {"layers", "acyclic"}),
    # the dry run no longer reaches rollout.base (the sweep's cost reads is_evaluation_step from
    # grpo.run.outcomes), so this breaks the layers alone; in a module the dry run and analysis
    # do reach (outcomes), it breaks theirs too, and closes a cycle (models reads run)
    ("grpo/rollout/base.py", "from grpo.models import loading", {"layers"}),
    ("grpo/run/outcomes.py", "from grpo.models import loading",
     {"layers", "torch_free", "analysis", "acyclic"}),
    ("grpo/run/health.py", "from grpo.sweep import overrides", {"layers", "acyclic"}),
    ("grpo/run/health.py", "from grpo.rollout import base", {"layers"}),  # run sits below rollout
    ("grpo/training/batch_plan.py", "from grpo.config import rules", {"layers", "acyclic"}),
    ("grpo/sweep/overrides.py", "from chain import stages", {"layers"}),
    ("analysis/readers/collect.py", "import torch", {"analysis", "torch_free"}),
    ("analysis/decisions/ranking.py", "from grpo.training import trainer", {"analysis", "torch_free"}),
    # analysis and the sweeper read run.finished, which checks a final model's manifest
    ("grpo/run/manifest.py", "from grpo.run import checkpoint", {"acyclic", "analysis", "torch_free"}),
    # analysis and the sweep read run.files: a torch-heavy import there reaches both
    ("grpo/run/files.py", "from grpo.run import checkpoint", {"acyclic", "analysis", "torch_free"}),
    # the config layer and the registry specs it reads stay torch-free
    ("grpo/config/rules.py", "import torch", {"analysis", "torch_free"}),
    ("grpo/core/specs.py", "from transformers import PreTrainedModel", {"torch_free"}),
    ("grpo/rollout/specs.py", "from grpo.rollout import hf", {"acyclic", "torch_free"}),
    # the statistics take frames, not sweeps: no reader and no file I/O
    ("analysis/stats/variance.py", "from analysis.readers import collect", {"stats", "roles"}),
    ("analysis/stats/levels.py", "import json", {"stats"}),
    ("analysis/decisions/race/boundary.py", "import json", {"stats"}),
    # analysis by role: a reader that ranks, a name that reads, a reader that computes a statistic
    ("analysis/readers/collect.py", "from analysis.decisions import ranking", {"roles", "acyclic"}),
    ("analysis/names/formatting.py", "from analysis.readers import run_rows",
     {"roles", "acyclic", "stats"}),  # the statistics write numbers with formatting
    ("analysis/readers/run_rows.py", "from analysis.stats import levels", {"roles"}),
    # the chain sits above the analysis and the sweep
    ("analysis/outputs/report.py", "from chain import results", {"layers"}),
]


@pytest.mark.parametrize(("module", "statement", "broken"), PLANTED,
                         ids=[f"{m}:{s}" for m, s, _ in PLANTED])
def test_a_planted_import_breaks_its_contract(tmp_path: Path, module: str, statement: str,
                                              broken: set[str]) -> None:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    target = tmp_path / module
    target.write_text(f"{statement}  # noqa\n{target.read_text()}")
    status, verdicts = lint_imports(tmp_path)
    assert status == 1
    assert {key for key, verdict in verdicts.items() if verdict == "BROKEN"} == broken


def imported_modules(args: list[str], tmp_path: Path) -> tuple[int, set[str]]:
    """Run `launch.py` with `args` under `-X importtime`: its exit status and the top-level
    packages it imported."""
    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "launch.py"), *args,
                          f"paths.output_root={tmp_path}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)$", out.stderr, re.M)
    assert names, out.stderr[-2000:]
    return out.returncode, {name.split(".")[0] for name in names}


def test_a_dry_run_imports_neither_torch_nor_transformers(tmp_path: Path) -> None:
    """The contract's run-time side (what a package `__init__` or an importlib call loads too):
    the README's first sweep, refused for its unset model path, loads neither; a toy sweep loads
    transformers for the tiny tokenizer its prompt-length check counts with, never torch."""
    status, packages = imported_modules(
        ["-m", "off_policy.epochs=1,2,4", "train_batch_size=64,128,256", "dry_run=true"], tmp_path)
    assert status == 2 and {"hydra", "omegaconf", "grpo"} <= packages
    assert "torch" not in packages and "transformers" not in packages
    assert "pandas" not in packages  # the sweeper's monitor reads run files without it
    status, packages = imported_modules(
        ["-m", "model=tiny", "data=toy", "rollout=hf", "off_policy.epochs=1,2", "dry_run=true"],
        tmp_path)
    assert status == 0 and "transformers" in packages and "torch" not in packages
    assert not list(tmp_path.rglob("*"))


def test_ci_runs_both_test_tiers() -> None:
    """`make test` (the README's command, the quick tier) and `make test-slow` select complementary
    sets of tests by the `slow` marker, and CI runs both: every test runs in CI."""
    def pytest_line(target: str) -> str:
        dry = subprocess.run(["make", "-n", "-o", ".venv/.installed", target], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        (line,) = [line for line in dry.splitlines() if " -m pytest " in line]
        return line

    assert pytest_line("test").endswith('-m "not slow"')
    assert pytest_line("test-slow").endswith("-m slow")
    # each step may run under `timed NAME` (its wall-clock time noted)
    ci = [re.sub(r"^timed \S+ ", "", line.strip())
          for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert ci.index("make test") < ci.index("make test-slow") < ci.index("make test-vllm")
    # the vLLM venv built in the background is waited for, and its failure fails CI
    assert ci.index('wait_for "$vllm_build" "$vllm_log" "building .venv-vllm"') < ci.index("make test-vllm")


def python_lines(path: Path) -> int:
    return sum(1 for _ in path.open(encoding="utf-8"))


def test_no_folder_holds_more_than_a_fifth_of_the_python() -> None:
    """Each folder holds one concept: none holds directly (its own files, not its subfolders) more
    than 20% of the project's Python lines (the packages, the benches, the scripts and launch.py;
    the tests aside). The largest today, grpo/run/, holds about 12%."""
    files = [f for f in ROOT.rglob("*.py") if f.relative_to(ROOT).parts[0] in
             (*PACKAGES, "bench", "scripts", "launch.py")]
    total = sum(map(python_lines, files))
    by_folder: dict[Path, int] = {}
    for f in files:
        by_folder[f.parent] = by_folder.get(f.parent, 0) + python_lines(f)
    shares = {str(d.relative_to(ROOT)): n / total for d, n in by_folder.items()}
    assert total > 10_000 and len(shares) > 15
    assert max(shares.values()) <= 0.20, sorted(shares.items(), key=lambda kv: -kv[1])[:3]
