"""The committed locks (requirements/*.lock.txt, from `make lock`): exact pins only, admitting
pyproject.toml's ranges, no CUDA package in the CPU lock, no GPU pin by override, and one version
per package across both (torch aside); scripts/lockfile.py, which `make install` and `make test-latest` use, read them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CPU_LOCK = ROOT / "requirements" / "cpu.lock.txt"
GPU_LOCK = ROOT / "requirements" / "gpu.lock.txt"

spec = importlib.util.spec_from_file_location("lockfile", ROOT / "scripts" / "lockfile.py")
lockfile = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lockfile)


def test_the_cpu_lock_admits_pyproject_and_holds_no_cuda_package() -> None:
    pins = lockfile.read_lock(CPU_LOCK)
    assert lockfile.unmet(lockfile.pyproject_requirements(["dev"]), pins) == []
    assert pins["torch"].local == "cpu", f"torch=={pins['torch']} is not the CPU build"
    cuda = [name for name in pins if name.startswith("nvidia-") or name == "triton"]
    assert cuda == []


def test_the_gpu_lock_admits_pyproject_with_vllm() -> None:
    pins = lockfile.read_lock(GPU_LOCK)
    assert lockfile.unmet(lockfile.pyproject_requirements(["dev", "vllm"]), pins) == []
    assert pins["vllm"] == Version("0.33.0") and pins["torch"].local is None


def test_no_pin_of_the_gpu_lock_overrides_a_requirement() -> None:
    """A pin that `make lock` took from an override (uv's `# via --override FILE` note) need not
    meet the requirements of the packages that ask for it, and `pip install -r` of the lock, which
    knows no overrides, then stops with ResolutionImpossible (certifi 2026.10.18 under vLLM 0.33.0's
    certifi>=2026.10.19); `make lock` also resolves the GPU lock once more from itself alone."""
    overridden = [line.strip() for line in GPU_LOCK.read_text().splitlines() if "--override" in line]
    assert overridden == [], f"{GPU_LOCK.name} holds pins by override: {overridden}"


def test_both_locks_agree_on_every_package_they_share_but_torch() -> None:
    cpu, gpu = lockfile.read_lock(CPU_LOCK), lockfile.read_lock(GPU_LOCK)
    assert cpu.keys() - gpu.keys() == set(), "the CPU lock should be a subset of the GPU lock"
    assert {name: (v, gpu[name]) for name, v in cpu.items() if v != gpu[name]}.keys() == {"torch"}


def test_read_lock_takes_exact_pins_only(tmp_path: Path) -> None:
    lock = tmp_path / "lock.txt"
    lock.write_text("# header\nNumPy==2.3.5\n    # via pandas\ntorch==2.13.0+cpu ; python_version >= '3'\n")
    assert lockfile.read_lock(lock) == {"numpy": Version("2.3.5"), "torch": Version("2.13.0+cpu")}
    for loose in ("numpy>=2.3.5", "numpy", "numpy==2.*", "numpy==2.3.5,<3"):
        lock.write_text(f"{loose}\n")
        with pytest.raises(ValueError, match=r"lock.txt:1: .* is not an exact pin"):
            lockfile.read_lock(lock)


def test_unmet_and_differences_name_each_package() -> None:
    from packaging.requirements import Requirement

    pins = {"wandb": Version("0.31.0"), "rich": Version("15.0.0")}
    requirements = [Requirement("wandb>=0.18,<0.31"), Requirement("rich>=13"), Requirement("uv")]
    assert lockfile.unmet(requirements, pins) == [
        "wandb<0.31,>=0.18 is not met by the locked wandb==0.31.0", "uv is not in the lock",
    ]
    installed = {"wandb": Version("0.30.0"), "pip": Version("25.0")}
    assert lockfile.differences(pins, installed) == [
        "  pip: lock -, installed 25.0", "  rich: lock 15.0.0, installed -",
        "  wandb: lock 0.31.0, installed 0.30.0",
    ]


def test_uncompiled_names_the_modules_without_bytecode_that_compile(tmp_path: Path) -> None:
    """make install fails on a venv without bytecode (uv installs none unless told): a module
    without its .pyc is named, one with it or one that cannot compile here is not."""
    import py_compile

    (tmp_path / "pkg").mkdir()
    compiled, bare, broken = (tmp_path / "pkg" / name for name in ("a.py", "b.py", "c.py"))
    compiled.write_text("x = 1\n")
    bare.write_text("y = 2\n")
    broken.write_text("def f(:\n")
    py_compile.compile(str(compiled), doraise=True)
    assert lockfile.uncompiled(tmp_path) == [bare]
    py_compile.compile(str(bare), doraise=True)
    assert lockfile.uncompiled(tmp_path) == []
