"""The layering of grpo/ (import-linter contracts in pyproject.toml): kept by the code, and each
contract broken by the kind of import it exists to stop, planted in a copy of the packages."""

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
}


def lint_imports(root: Path) -> tuple[int, dict[str, str]]:
    """Run import-linter on the packages under `root`: exit status, and KEPT/BROKEN per contract."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
                         cwd=root, env=env, capture_output=True, text=True, timeout=120)
    verdicts = {key: m.group(1) for key, name in CONTRACTS.items()
                if (m := re.search(rf"^{re.escape(name)} (KEPT|BROKEN)$", out.stdout, re.M))}
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
    ("grpo/rollout/base.py", "from grpo.models import loading", {"layers"}),
    ("grpo/run/health.py", "from grpo.sweep import overrides", {"layers", "acyclic"}),
    ("grpo/run/health.py", "from grpo.rollout import base", {"layers"}),  # run sits below rollout
    ("grpo/training/batch_plan.py", "from grpo.config import rules", {"layers", "acyclic"}),
    ("grpo/sweep/overrides.py", "from grpo.chain import stages", {"layers", "acyclic"}),
    ("analysis/collect.py", "import torch", {"analysis"}),
    ("analysis/aggregate.py", "from grpo.training import trainer", {"analysis"}),
    ("grpo/run/manifest.py", "from grpo.run import checkpoint", {"acyclic"}),
    # analysis reads run.files: a torch-heavy import there reaches analysis too
    ("grpo/run/files.py", "from grpo.run import checkpoint", {"acyclic", "analysis"}),
]


@pytest.mark.parametrize(("module", "statement", "broken"), PLANTED,
                         ids=[f"{m}:{s}" for m, s, _ in PLANTED])
def test_a_planted_import_breaks_its_contract(tmp_path: Path, module: str, statement: str,
                                              broken: set[str]) -> None:
    for name in ("grpo", "analysis", "hydra_plugins"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    target = tmp_path / module
    target.write_text(f"{statement}  # noqa\n{target.read_text()}")
    status, verdicts = lint_imports(tmp_path)
    assert status == 1
    assert {key for key, verdict in verdicts.items() if verdict == "BROKEN"} == broken
