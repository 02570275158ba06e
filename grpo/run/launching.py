"""A sweep started from another command: `python launch.py -m <overrides>` in a process of its
own, into a sweep directory that records who started it and why.

A chain's stage (`python -m chain`, its record `chain.json`) and a confirmation (`python -m
analysis confirm`, its record `confirm.json`) launch their sweeps this one way, so that each runs
through the launcher its overrides choose (local, SLURM, `cluster.detach=true`), validated, priced
and resumed as any sweep is: the same command again resumes the same sweep directory, whose
finished runs are not submitted again (`hydra_plugins.grpo_sweeps.relaunch`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from grpo.run.driver import copy_record, record_path, under_driver
from grpo.run.files import atomic_write_text

LAUNCH = Path(__file__).resolve().parents[2] / "launch.py"
"""The project's entry point (`launch.py` beside `conf/`)."""


def sweep_began(sweep: Path) -> bool:
    """Whether a launch into `sweep` began its sweep: Hydra wrote its `multirun.yaml` (the
    launch ran it), or a detached driver of it was recorded (`cluster.detach=true`: the launch
    returned at once, and the driver runs it from the files the launch left there)."""
    return (sweep / "multirun.yaml").exists() or record_path(sweep).exists()


def launch_sweep(arguments: Sequence[str], sweep: Path, record: str, text: str,
                 dry_run: bool, env: Mapping[str, str] | None = None) -> int:
    """Run `python launch.py -m <arguments>` (which must pin `hydra.sweep.dir` to `sweep`) and
    return its exit status; the command is printed first. Unless `dry_run`, `sweep/<record>`
    is written with `text` before it starts (inside a detached driver, with a copy of the
    driver's record, so that `make watch` there shows it) and taken away again, with `sweep`
    where nothing else is in it, when the launch ended before the sweep began
    (:func:`sweep_began`: a refusal leaves no trace). `env`: variables added to the launch's environment. A Ctrl-C
    reaches the launch too: its runs stop and checkpoint; it is waited for, then raised."""
    print("  $ python launch.py -m " + " ".join(map(shlex.quote, arguments)), flush=True)
    if not dry_run:
        sweep.mkdir(parents=True, exist_ok=True)
        atomic_write_text(sweep / record, text)
        if under_driver():
            copy_record(sweep)
    with subprocess.Popen([sys.executable, str(LAUNCH), "-m", *arguments],
                          env={**os.environ, **env} if env else None) as launched:
        try:
            returncode = launched.wait()
        except KeyboardInterrupt:
            launched.wait()
            raise
    if not dry_run and not sweep_began(sweep):
        (sweep / record).unlink(missing_ok=True)
        if sweep.is_dir() and not any(sweep.iterdir()):
            sweep.rmdir()
    return returncode
