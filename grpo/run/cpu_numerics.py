"""CPU numerics pinned to one instruction set, so that x86-64 CPUs of different vector widths give
the same bits for the same config and seed.

torch picks its CPU kernels by the widest vector instructions the processor has (AVX-512 or
AVX2), and MKL (matrix products) and oneDNN do the same. A wider vector sums in another order, so
an AVX-512 machine and an AVX2 one drift apart from the first step (`train/entropy` at 1e-7) and
end on different curves. `CPU_NUMERICS` pins all three to AVX2, which every x86-64 server CPU of
the last decade has. The libraries read these variables once, when they load: they must be in the
environment before `import torch`, in every process that computes.

`pin_cpu_numerics()` puts them into this process's environment, keeping any the user set (set
`ATEN_CPU_CAPABILITY=avx512 MKL_CBWR=AUTO ONEDNN_MAX_CPU_ISA=ALL` to opt out). `grpo/__init__.py`
calls it, so every process that imports the project before torch is pinned (launch.py, the
model build, the tests), and so is every process those start: the local pool's jobs and SLURM
jobs (sbatch exports the submitting environment) inherit it. `grpo.run.reproducibility` checks in
the job itself that torch runs the pinned kernels. Elsewhere than x86-64 nothing is set.

This module imports only the standard library: it runs before torch loads.
"""

from __future__ import annotations

import os
import platform

CPU_NUMERICS: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",  # torch's own CPU kernels
    "MKL_CBWR": "AVX2",  # MKL's conditional numerical reproducibility: one code path
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN (mkldnn) kernels
}
"""Environment variable -> the value that pins it (x86-64 only)."""

PINNED_TORCH_CAPABILITY = "AVX2"
"""What `torch.backends.cpu.get_cpu_capability()` reports when the pin took effect."""


def pins_apply() -> bool:
    """Whether this machine is one the pins are for (x86-64)."""
    return platform.machine().lower() in ("x86_64", "amd64")


def pin_cpu_numerics() -> None:
    """Set `CPU_NUMERICS` in this process's environment where the user has not set them."""
    if pins_apply():
        for name, value in CPU_NUMERICS.items():
            os.environ.setdefault(name, value)
