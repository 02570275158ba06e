"""Same config and seed, same curve. The demo preset, shortened and with no pair held out, is run as a user runs it
(`launch.py -m +experiment=demo`, wandb offline, the local pool) twice: once one job at a time,
once two jobs at a time beside processes that keep every core busy. Each sweep builds the tiny
model afresh (the second one from two jobs at once). Every reward, loss and eval value of every
step must be bit-equal (timings aside), and every run's offline wandb file must hold its metrics.

Across machines: with the CPU numerics pinned (grpo.run.cpu_numerics) every job runs torch's
AVX2 kernels, and the curve must be the one recorded for this CPU vendor, bit for bit, on any of
its x86-64 CPUs with AVX2 (AuthenticAMD: recorded on an AMD EPYC with AVX-512, where unpinned the
curve differs from step 1; GenuineIntel: recorded on an Intel Xeon with AVX-512 and checked on a
second one). The two vendors' curves differ from each other at 1e-7 from step 1 under the same
pins (MKL takes other code paths on each), so each has its record. A vendor without a record
fails the test with the command that records one.

Record: `.venv/bin/python tests/test_reproducibility.py` (writes this vendor's file)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from wandb_offline import assert_wandb_holds_the_metrics

ROOT = Path(__file__).resolve().parents[1]
N_STEPS = 60
# wall-clock and memory columns: the only ones allowed to differ between two runs
TIMING_PREFIXES = ("time/", "throughput/", "memory/")
GOLDEN_DIR = Path(__file__).parent / "data"
# the values a recorded curve holds of every step of both jobs (entropy differs at 1e-7 between
# vector widths from step 1 on)
GOLDEN_KEYS = ("eval/reward", "train/reward_mean", "train/loss", "train/grad_norm", "train/entropy")


def cpu_vendor() -> str:
    """The CPU's vendor as the kernel names it (`vendor_id` in /proc/cpuinfo: AuthenticAMD,
    GenuineIntel), or the machine type where there is none."""
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        if line.startswith("vendor_id"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def golden_file(vendor: str) -> Path:
    """The recorded curve of `vendor`'s CPUs."""
    return GOLDEN_DIR / f"demo_60_steps_pinned.{vendor}.json"


def run_demo(root: Path, parallel_jobs: int) -> Path:
    """The demo sweep at learning rate 3e-4 (on- and off-policy), N_STEPS steps, into `root`,
    with no pair held out (`data.holdout_size=0`: the curve the vendors' files record, from before
    the demo held 8 pairs out for its confirmation; the records are made on each vendor's
    machines, so a change of the demo's own data does not move them); returns the sweep
    directory."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "launch.py"), "-m", "+experiment=demo", "learning_rate=3e-4",
         "data.holdout_size=0",
         f"n_grpo_steps={N_STEPS}", "eval.eval_every=20", f"paths.output_root={root}",
         f"paths.cache_dir={root / 'cache'}", f"hydra.launcher.max_parallel_jobs={parallel_jobs}"],
        cwd=ROOT, capture_output=True, text=True, timeout=1800,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (sweep,) = (p.parent for p in root.rglob("multirun.yaml"))
    return sweep


@contextmanager
def every_core_busy() -> Iterator[None]:
    """One spinning process per core for the duration of the block."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def curves(sweep: Path) -> dict[str, list[dict]]:
    """Job number -> its metrics.jsonl rows without the timing columns."""
    return {
        run.name: [
            {k: v for k, v in json.loads(line).items() if not k.startswith(TIMING_PREFIXES)}
            for line in (run / "metrics.jsonl").read_text().splitlines()
        ]
        for run in sorted(p for p in sweep.iterdir() if p.name.isdigit())
    }


def golden_values(runs: dict[str, list[dict]]) -> dict[str, dict[str, list[float | None]]]:
    """Job number -> GOLDEN_KEYS -> the value at every step (None where the step has none)."""
    return {job: {key: [row.get(key) for row in rows] for key in GOLDEN_KEYS}
            for job, rows in runs.items()}


@pytest.mark.slow
def test_same_config_same_curve_alone_and_beside_concurrent_jobs(tmp_path: Path) -> None:
    alone = run_demo(tmp_path / "alone", parallel_jobs=1)
    with every_core_busy():
        crowded = run_demo(tmp_path / "crowded", parallel_jobs=2)
    first, second = curves(alone), curves(crowded)
    assert sorted(first) == sorted(second) == ["0", "1"]
    for job, rows in first.items():
        assert [r["step"] for r in rows] == list(range(N_STEPS + 1))
        assert [r["step"] for r in rows if "eval/reward" in r] == [0, 20, 40, N_STEPS]
        assert not any(k.startswith("train/") for k in rows[0]), "step 0: the pre-RL evaluation"
        assert {"train/reward_mean", "train/loss", "train/grad_norm", "train/entropy"} <= rows[1].keys()
        for step, (a, b) in enumerate(zip(rows, second[job], strict=True)):
            assert a == b, f"job {job} step {step}: " + str(
                {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)})
    for sweep in (alone, crowded):
        for job in first:
            assert_wandb_holds_the_metrics(sweep / job)
            assert "CPU numerics: torch AVX2 kernels" in (sweep / job / "launch.log").read_text()
    golden = golden_file(cpu_vendor())
    assert golden.exists(), (
        f"no curve is recorded for {cpu_vendor()} CPUs: record one on such a machine with "
        f"`.venv/bin/python tests/test_reproducibility.py` and commit {golden.name}")
    assert golden_values(first) == json.loads(golden.read_text()), (
        f"the pinned curve differs from {golden.name}: the CPU numerics are not the pinned ones, "
        "or a change altered the numbers (then record every vendor's file again and say why in "
        "the commit)")


if __name__ == "__main__":
    sweep = run_demo(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "outputs" / "record",
                     parallel_jobs=2)
    golden_file(cpu_vendor()).write_text(json.dumps(golden_values(curves(sweep)), indent=1) + "\n")
    print(f"recorded {golden_file(cpu_vendor())} from {sweep}")
