"""Write sweep directories that follow the data contract of :mod:`analysis.readers.collect`.

Used by the tests (hand-built runs with known metrics) and by ``bench/plots_time.py``
(:func:`write_grid_sweep`, a cartesian sweep of plausible GRPO curves, seeds and unstable
configs included).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from grpo.run.outcomes import EvalOutcomes, write_outcomes

BASE_CONFIG: dict[str, Any] = {
    "experiment_name": "synthetic",
    "seed": 0,
    "learning_rate": 1e-5,
    "n_grpo_steps": 200,
    "rollout_batch_size": 256,
    "train_batch_size": 256,
    "micro_batch_size": 2,
    "group_size": 8,
    "loss": {"name": "grpo_clip"},
    "normalization": {"name": "mean"},
    "std_norm": {"enabled": True, "scope": "group"},
    "off_policy": {"epochs": 1},
    "prompt": {"name": "r1_zero"},
    "model": {"name": "qwen2.5-math-1.5b"},
    "data": {"name": "math"},
    "cluster": {"gpus_per_job": 2},
}


def config_with(overrides: Mapping[str, Any], base: Mapping[str, Any] = BASE_CONFIG) -> dict:
    """``base`` with dotted ``overrides`` (``{"off_policy.epochs": 2}``) applied."""
    config = OmegaConf.create(dict(base))
    for key, value in overrides.items():
        OmegaConf.update(config, key, value, force_add=True)
    return OmegaConf.to_container(config)


def write_multirun(sweep_dir: Path, task: Sequence[str], params: Mapping[str, str] | None = None,
                   config: Mapping[str, Any] = BASE_CONFIG) -> None:
    """Write a ``multirun.yaml`` with the sweep ``task`` overrides and sweeper ``params``."""
    hydra = {"sweeper": {"params": dict(params) if params else None},
             "overrides": {"hydra": [], "task": list(task)}}
    sweep_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(OmegaConf.create({"hydra": hydra, **config}), sweep_dir / "multirun.yaml")


def write_run(
    run_dir: Path,
    overrides: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]] | None = None,
    status: Mapping[str, Any] | None = None,
    base: Mapping[str, Any] = BASE_CONFIG,
    choices: Mapping[str, str] | None = None,
    raw_tail: str = "",
) -> None:
    """Write one run directory: ``.hydra/*``, ``metrics.jsonl`` (``rows`` then ``raw_tail``,
    e.g. a truncated line) when ``rows`` is given, and ``status.json`` when ``status`` is.

    Overridden config groups are listed in ``choices`` (group -> option); the config then
    gets ``<group>.name: <option>``, the project's convention.
    """
    hydra_dir = run_dir / ".hydra"
    hydra_dir.mkdir(parents=True, exist_ok=True)
    choices = choices or {}
    values = {(f"{k}.name" if k in choices else k): v for k, v in overrides.items()}
    OmegaConf.save(OmegaConf.create(config_with(values, base)), hydra_dir / "config.yaml")
    lines = [f"{k}={json.dumps(v) if isinstance(v, bool) else v}" for k, v in overrides.items()]
    OmegaConf.save(OmegaConf.create(lines), hydra_dir / "overrides.yaml")
    runtime = {"hydra": {"runtime": {"choices": dict(choices)}}}
    OmegaConf.save(OmegaConf.create(runtime), hydra_dir / "hydra.yaml")
    if rows is not None:
        text = "".join(json.dumps(dict(row)) + "\n" for row in rows)
        (run_dir / "metrics.jsonl").write_text(text + raw_tail)
    if status is not None:
        (run_dir / "status.json").write_text(json.dumps(dict(status)))


# status of a synthetic run that stops early, and the fraction of its steps it gets through
STOPS = {"collapsed": 0.2, "diverged": 0.3}


# seconds one evaluation of a synthetic run takes
EVAL_SECONDS = 30.0


def synthetic_rows(n_steps: int, eval_every: int, quality: float, seed: int,
                   seconds_per_step: float = 60.0, stop: str | None = None,
                   time_constant: float = 0.25) -> list[dict[str, float]]:
    """Plausible GRPO metrics in the trainer's layout: step 0 the evaluation of the initial
    policy (``eval/*`` and timings only), then GRPO steps 1..``n_steps``, evaluated every
    ``eval_every`` steps and at the last; rewards rise towards ``quality`` (in [0, 1]) with
    seeded noise, every reward clipped to [0, 1], reaching 63% of it after ``time_constant`` of
    the steps. ``stop`` (a key of :data:`STOPS`) ends the rows early: a ``collapsed`` run's
    reward falls to 0, a ``diverged`` run's last loss is NaN."""
    rng = np.random.default_rng(seed)
    rows = [{"step": 0, "time/eval_s": EVAL_SECONDS, "time/elapsed_s": EVAL_SECONDS,
             "time/elapsed_no_eval_s": 0.0, **_eval_metrics(0.0, rng)}]
    elapsed = eval_total = EVAL_SECONDS
    last = n_steps if stop is None else max(2, int(STOPS[stop] * n_steps))
    for step in range(1, last + 1):
        progress = quality * (1 - np.exp(-step / (n_steps * time_constant)))
        if stop == "collapsed":
            progress *= max(0.0, 1 - step / (0.6 * last))
        is_eval = step % eval_every == 0 or step == n_steps
        eval_s = EVAL_SECONDS if is_eval else 0.0
        elapsed += seconds_per_step * (1 + 0.05 * rng.standard_normal()) + eval_s
        eval_total += eval_s
        row = {
            "step": step,
            "time/elapsed_s": elapsed,
            "time/elapsed_no_eval_s": elapsed - eval_total,
            "train/loss": float(0.1 * rng.standard_normal()),
            "train/grad_norm": float(abs(1 + 0.2 * rng.standard_normal())),
            "train/entropy": float(1.5 * np.exp(-step / n_steps) + 0.05 * rng.random()),
            "train/mean_response_length": float(300 + 200 * progress + 10 * rng.random()),
            "train/reward_mean": _reward(progress + 0.08 * rng.standard_normal()),
            "train/reward_std": 0.3,
            "train/format_reward": _reward(2 * progress),
            "train/answer_reward": _reward(progress),
            "train/frac_zero_std_groups": 0.2,
            "train/mean_ratio": 1.0,
            "train/clip_fraction": float(0.05 * rng.random()),
            "train/approx_kl": 0.001,
            "train/lr": 1e-5,
            "time/rollout_s": seconds_per_step / 2,
            "time/scoring_s": 1.0,
            "time/old_log_probs_s": 2.0,
            "time/train_s": seconds_per_step / 3,
            "time/weight_sync_s": 1.0,
            "time/eval_s": eval_s,
            "throughput/rollout_tokens_per_s": 5000.0,
        }
        if is_eval:
            row |= _eval_metrics(progress, rng)
        rows.append(row)
    if stop == "diverged":
        rows[-1]["train/loss"] = math.nan
    return rows


def _eval_metrics(progress: float, rng: np.random.Generator) -> dict[str, float]:
    """The ``eval/*`` metrics of a policy at ``progress`` (its expected reward, 0-1)."""
    return {
        "eval/reward": _reward(progress + 0.02 * rng.standard_normal()),
        "eval/format_reward": _reward(2 * progress),
        "eval/answer_reward": _reward(progress),
        "eval/mean_response_length": float(300 + 200 * progress),
    }


def _reward(value: float) -> float:
    return float(min(1.0, max(0.0, value)))


def write_grid_sweep(sweep_dir: Path, grid: Mapping[str, Sequence[Any]], n_steps: int = 200,
                     eval_every: int = 10, n_seeds: int = 1,
                     unstable: Mapping[int, str] | None = None,
                     data_seed: int | None = None, base: Mapping[str, Any] = BASE_CONFIG,
                     outcomes: tuple[str, int] | None = None) -> list[dict[str, Any]]:
    """Write a cartesian sweep over ``grid`` (x ``n_seeds`` seeds when above 1) and return each
    job's overrides. Config ``i`` (in grid order) reaches a reward in [0.25, 0.9]; its runs
    complete, or stop as ``unstable[i]`` (``collapsed`` / ``diverged``). With ``data_seed``, the
    runs' noise is drawn from it and each config learns at its own pace (time constants uniform
    in [0.1, 0.6] of the run), so that curves cross: a config slow to start may end best.
    ``base``: the runs' config under the grid's values (a composed config's container makes the
    sweep one of that model and data). ``outcomes`` (problems digest, number of problems): each
    evaluation also writes its per-problem outcomes (``grpo.run.outcomes``, one response a
    problem), 0/1 on a seeded subset of the problems, its logged eval/reward rounded to that
    subset's share so that the file's mean is the logged reward."""
    seeds = {"seed": list(range(n_seeds))} if n_seeds > 1 else {}
    task = [f"{key}={','.join(map(str, values))}" for key, values in {**grid, **seeds}.items()]
    write_multirun(sweep_dir, task, config=base)
    configs = list(itertools.product(*grid.values()))
    paces = (np.random.default_rng(data_seed).uniform(0.1, 0.6, len(configs))
             if data_seed is not None else [0.25] * len(configs))
    jobs = []
    for index, values in enumerate(configs):
        quality = 0.25 + 0.65 * ((index * 37) % len(configs)) / max(len(configs) - 1, 1)
        stop = (unstable or {}).get(index)
        for seed in range(n_seeds):
            job = len(jobs)
            overrides = dict(zip(grid, values, strict=True)) | ({"seed": seed} if seeds else {})
            rows = synthetic_rows(n_steps, eval_every, quality,
                                  seed=job if data_seed is None else job + 100_003 * (data_seed + 1),
                                  seconds_per_step=60.0 * (1 + 0.25 * (index % 3)), stop=stop,
                                  time_constant=float(paces[index]))
            last = rows[-1]["step"]
            status = {"status": stop or "completed", "reason": stop and f"synthetic {stop} run",
                      "last_step": last, "n_grpo_steps": n_steps, "restarts": 0,
                      "updated_at": "2025-01-01T00:00:00"}
            if outcomes is not None:
                _write_outcomes(sweep_dir / str(job), rows, *outcomes, seed=job)
            write_run(sweep_dir / str(job), overrides, rows, status, base=base)
            jobs.append(overrides)
    return jobs


def _write_outcomes(run_dir: Path, rows: list[dict[str, Any]], digest: str, n_problems: int,
                    seed: int) -> None:
    """Each evaluation of ``rows`` as an outcomes file of ``n_problems`` 0/1 rewards (problems
    ``digest``) right on a seeded subset; the row's eval/reward is set to the subset's share."""
    rng = np.random.default_rng(seed)
    for row in rows:
        if "eval/reward" in row:
            right = round(row["eval/reward"] * n_problems)
            row["eval/reward"] = right / n_problems
            rewards = np.zeros(n_problems)
            rewards[rng.choice(n_problems, right, replace=False)] = 1.0
            write_outcomes(run_dir, EvalOutcomes(int(row["step"]), 1, digest,
                                                 tuple(float(r) for r in rewards)))
