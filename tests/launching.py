"""`python launch.py ...` as a user types it, from a test: a subprocess with its output captured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def launch(*args: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `launch.py` with `args` in `cwd` (the checkout by default); stdout and stderr as text."""
    return subprocess.run([sys.executable, str(ROOT / "launch.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
