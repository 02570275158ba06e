"""A hand-built sweep with known metrics for the analysis tests.

``off_policy.epochs`` in {1, 2} x ``train_batch_size`` in {64, 128}, ``seed`` in {0, 1},
``rollout_batch_size`` 128, 9 GRPO steps in the trainer's layout: step 0 the evaluation of the
initial policy, then steps 1..9, evaluated at steps 3, 6 and 9. Each run's metrics follow
:func:`row` from a ``base`` reward, ``dt`` seconds per GRPO step and ``EVAL_S`` seconds per
evaluation:

====  =====  ====  ====  =====  ===  ==========================================================
job   epoch  tbs   seed  base   dt   what
====  =====  ====  ====  =====  ===  ==========================================================
0     1      128   0     0.30   60   on-policy, completed
1     1      128   1     0.40   80   on-policy, completed
2     2      64    0     0.50   30   diverged at step 4 ("loss is nan")
3     2      128   0     0.45   50   completed after a restart: step 6 logged twice (the first,
                                     stale copy has eval/reward 0.99) and a truncated line
4     2      128   1     0.55   50   running, restarted: a truncated line with the next row
                                     glued to it, and a truncated last line; steps 0..7
5     1      64    0     0.20   40   failed at step 2 ("CUDA out of memory"), 1 GPU
6     1      64    1     -      -    pending: no metrics, no status.json
7     2      64    1     0.10   30   collapsed at step 3 ("reward collapsed")
====  =====  ====  ====  =====  ===  ==========================================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from analysis.readers.synthetic import BASE_CONFIG, write_multirun, write_run
from grpo.run.outcomes import EvalOutcomes, write_outcomes

N_STEPS = 9
EVAL_STEPS = (0, 3, 6, 9)
EVAL_S = 15.0
BASE = {**BASE_CONFIG, "rollout_batch_size": 128, "train_batch_size": 128,
        "n_grpo_steps": N_STEPS}
# job: (epochs, train_batch_size, seed, base, dt)
JOBS: dict[int, tuple[int, int, int, float | None, float | None]] = {
    0: (1, 128, 0, 0.30, 60),
    1: (1, 128, 1, 0.40, 80),
    2: (2, 64, 0, 0.50, 30),
    3: (2, 128, 0, 0.45, 50),
    4: (2, 128, 1, 0.55, 50),
    5: (1, 64, 0, 0.20, 40),
    6: (1, 64, 1, None, None),
    7: (2, 64, 1, 0.10, 30),
}


def row(step: int, base: float, dt: float) -> dict[str, Any]:
    """The metrics of ``step`` for a run with reward ``base`` and ``dt`` seconds per GRPO step:
    step 0 holds the evaluation only, steps 1..N the training metrics too. ``time/elapsed_s``
    counts every evaluation so far, ``time/elapsed_no_eval_s`` the GRPO steps alone."""
    n_evals = sum(s <= step for s in EVAL_STEPS)
    values: dict[str, Any] = {
        "step": step,
        "time/elapsed_s": dt * step + EVAL_S * n_evals,
        "time/elapsed_no_eval_s": dt * step,
        "time/eval_s": EVAL_S if step in EVAL_STEPS else 0.0,
    }
    if step > 0:
        values |= {
            "train/loss": 0.1,
            "train/entropy": 1.0 - 0.05 * step,
            "train/mean_response_length": 100.0 + step,
            "train/grad_norm": base + step / 100,
            "train/clip_fraction": 0.01 * step,
            "train/reward_mean": base + 0.01 * step,
        }
    if step in EVAL_STEPS:
        values["eval/reward"] = round(base + 0.02 * step, 10)
    return values


def rows(job: int, steps: range) -> list[dict[str, Any]]:
    """Rows of ``job`` for ``steps``."""
    *_, base, dt = JOBS[job]
    return [row(s, base, dt) for s in steps]


def status(kind: str, last_step: int, reason: str | None = None, restarts: int = 0) -> dict:
    """A ``status.json`` payload."""
    return {"status": kind, "reason": reason, "last_step": last_step, "n_grpo_steps": N_STEPS,
            "restarts": restarts, "updated_at": "2025-06-01T12:00:00"}


def write_scenario(sweep: Path) -> Path:
    """Write the sweep of the module docstring into ``sweep`` and return it."""
    write_multirun(sweep, ["off_policy.epochs=1,2", "train_batch_size=64,128"],
                   params={"seed": "0,1"}, config=BASE)

    def write(job: int, metrics: list[dict] | None, state: dict | None, tail: str = "",
              **extra: Any) -> None:
        epochs, tbs, seed, *_ = JOBS[job]
        overrides = {"seed": seed, "off_policy.epochs": epochs, "train_batch_size": tbs}
        write_run(sweep / str(job), overrides, metrics, state, base=BASE | extra, raw_tail=tail)

    write(0, rows(0, range(10)), status("completed", 9))
    write(1, rows(1, range(10)), status("completed", 9))
    write(2, rows(2, range(5)), status("diverged", 4, "loss is nan"))
    stale = {**row(6, 0.45, 50), "eval/reward": 0.99}
    write(3, [*rows(3, range(6)), stale], None)  # completed below, after the "restart"
    with (sweep / "3" / "metrics.jsonl").open("a") as log:
        log.write('{"step": 7, "train/lo\n')
        log.writelines(json.dumps(r) + "\n" for r in rows(3, range(6, 10)))
    (sweep / "3" / "status.json").write_text(json.dumps(status("completed", 9, restarts=1)))
    glued = '{"step": 6, "train/en' + json.dumps(rows(4, range(6, 7))[0]) + "\n"
    tail = glued + json.dumps(rows(4, range(7, 8))[0]) + '\n{"step": 8, "tr'
    write(4, rows(4, range(6)), status("running", 7, restarts=1), tail=tail)
    write(5, rows(5, range(3)), status("failed", 2, "CUDA out of memory"),
          cluster={"gpus_per_job": 1})
    write(6, None, None)
    write(7, rows(7, range(4)), status("collapsed", 3, "reward collapsed"))
    return sweep


def write_simple_sweep(sweep: Path, jobs: Sequence[Mapping[str, Any]],
                       evals: Sequence[Sequence[float]], groups: Sequence[str] = ()) -> Path:
    """A completed sweep of ``jobs`` (overrides; ``groups`` name the config-group keys) whose
    eval reward at step ``s`` is ``evals[job][s]`` (step 0: before the first GRPO step); 10 s per
    GRPO step and 2 s per evaluation, rollout batch size 128."""
    write_multirun(sweep, [f"{k}={','.join(dict.fromkeys(str(j[k]) for j in jobs))}"
                           for k in jobs[0]])
    for job, (overrides, rewards) in enumerate(zip(jobs, evals, strict=True)):
        metrics = [{"step": s, "time/elapsed_s": 10.0 * s + 2.0 * (s + 1),
                    "time/elapsed_no_eval_s": 10.0 * s, "time/eval_s": 2.0, "eval/reward": r}
                   for s, r in enumerate(rewards)]
        write_run(sweep / str(job), overrides, metrics, {"status": "completed"}, base=BASE,
                  choices={g: overrides[g] for g in groups})
    return sweep


def write_matching_outcomes(run_dir: Path, n_problems: int = 100, digest: str = "ab" * 32) -> None:
    """Write ``eval_outcomes/`` for every evaluation ``run_dir``'s metrics log: ``n_problems``
    0/1 outcomes whose mean is the logged ``eval/reward`` (right on the first problems)."""
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        logged = json.loads(line)
        if "eval/reward" in logged:
            right = round(logged["eval/reward"] * n_problems)
            rewards = (1.0,) * right + (0.0,) * (n_problems - right)
            write_outcomes(run_dir, EvalOutcomes(logged["step"], 1, digest, rewards))
