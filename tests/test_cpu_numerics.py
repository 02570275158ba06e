"""CPU numerics pinned to AVX2 (grpo.run.cpu_numerics): set before torch loads in every process
that imports the project, kept where the user set them, checked and logged by the job itself."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from grpo.run.cpu_numerics import CPU_NUMERICS, pins_apply

pytestmark = pytest.mark.skipif(not pins_apply(), reason="the pins are for x86-64 CPUs")

PROBE = """
import logging, os, sys
logging.basicConfig(stream=sys.stdout, format="%(levelname)s %(message)s", level=logging.INFO)
from grpo.run.reproducibility import log_cpu_numerics
import torch
print("capability", torch.backends.cpu.get_cpu_capability())
print("env", *(os.environ.get(name) for name in {names!r}))
log_cpu_numerics()
"""


def probe(**env: str) -> list[str]:
    """Run PROBE in a fresh interpreter whose environment has none of the pins (plus `env`)."""
    clean = {k: v for k, v in os.environ.items() if k not in CPU_NUMERICS}
    out = subprocess.run([sys.executable, "-c", PROBE.format(names=list(CPU_NUMERICS))],
                         env={**clean, **env}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_importing_the_project_pins_torch_mkl_and_onednn_before_torch_loads() -> None:
    lines = probe()
    assert "capability AVX2" in lines
    assert "env avx2 AVX2 AVX2" in lines
    assert any(line.startswith("INFO CPU numerics: torch AVX2 kernels (ATEN_CPU_CAPABILITY=avx2")
               for line in lines)


def test_a_process_started_by_a_pinned_one_inherits_the_pins() -> None:
    child = "import subprocess, sys; import grpo; subprocess.run([sys.executable, '-c', " \
            "'import torch; print(\"child\", torch.backends.cpu.get_cpu_capability())'], check=True)"
    clean = {k: v for k, v in os.environ.items() if k not in CPU_NUMERICS}
    out = subprocess.run([sys.executable, "-c", child], env=clean, capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split() == ["child", "AVX2"]


def test_the_user_s_own_setting_wins_and_the_run_warns_that_it_is_not_pinned() -> None:
    lines = probe(ATEN_CPU_CAPABILITY="default")
    assert "capability DEFAULT" in lines
    assert "env default AVX2 AVX2" in lines
    (warning,) = [line for line in lines if line.startswith("WARNING")]
    assert "torch runs its DEFAULT CPU kernels, not the pinned AVX2 ones" in warning

