"""What a sweep will cost, said before anything is submitted: hours per job and for the sweep,
and the budget check (`budget.gpu_hours`).

The cost model (the dry run prints its inputs):

    job seconds  = n_grpo_steps x step seconds
                   + evaluations x validation examples x eval.samples_per_problem x eval_s
                   [+ held-out problems x confirm.samples_per_problem x eval_s, a confirmation]
    step seconds = generate + train + step_s, with one step of overlap (off_policy.staleness=1)
                   max(generate, train) + step_s, where
    generate     = rollout_batch_size x (1 + extra) x generate_s
    train        = rollout_batch_size x ([old_log_probs_s +] [old_log_probs_s +] off_policy.epochs x train_s)

`extra` is 0 but with dynamic sampling (`zero_variance=dynamic_sampling`): the extra rollouts a
step generates, as a fraction of rollout_batch_size, assumed to be `zero_variance.expected_extra`,
or where that is null the worst case, `zero_variance.max_rounds` full extra rounds every step (the
toy task's measured figures, from `bench/dynamic_sampling.py`, are in docs/development/benchmarks.md).
`old_log_probs_s` counts when the loss reads the probability ratio or a stale batch is corrected
(staleness 1 with off_policy.correction other than none), and once more with a KL term to the
initial policy (`kl.beta` > 0: the reference's forward over the batch, one forward as the
old-log-prob pass is); `step_s` holds the weight sync; evaluations are the step-0
one, one every eval.eval_every steps and one after the last, each of eval.n_examples examples or
the validation split, if smaller. The rates come from

1. earlier runs of the same model (`model.name`), engine (`rollout.engine`), GPUs per job and
   `sampling.max_new_tokens` under `paths.output_root`: the medians over their logged GRPO steps
   of time/rollout_s + time/scoring_s per rollout generated (train/extra_rollouts counted), time/old_log_probs_s per rollout,
   time/train_s per rollout and epoch, the rest of time/step_s (in an overlapped run, the step
   less the trainer's own phases: the wait for the generation, scoring, old log-probs, training,
   evaluation), and time/eval_s per evaluated
   response (eval/n_responses; eval/n_examples in runs logged before it) (the newest MATCHED_RUNS such runs; a rate they never logged comes
   from 2.);
2. else the model preset's `model.cost` (conf/model/<name>.yaml), whose comments say where each
   figure was measured; its per-rollout figures scale with sampling.max_new_tokens over
   `model.cost.max_new_tokens`.

The trainer's memory besides activations (`trainer_memory`, printed by the dry run) is counted
from the model preset's `model.parameters`: weights, gradients and AdamW's two moments in the
precision's parameter dtype, and with `kl.beta` > 0 the frozen reference, one more copy of the
weights (in the dtype the policy computes in) without gradients or optimizer state.

GPU-hours = seconds / 3600 x cluster.gpus_per_job. A job without GPUs is priced in CPU-hours
(x cluster.cpus_per_job), and a budget in GPU-hours does not limit it.

With pruning on, the jobs are replayed through the sweep's pruner (`grpo.run.pruning.replay`):
jobs of the estimated lengths whose validation reward keeps one random rank all run long, launched
in order, `parallel` at a time, in REPLAY_ORDERS random orders; the mean is the estimate. Its
worst case is the full grid: the asynchronous pruner stops no run that beats every run before it
at each rung. `budget.gpu_hours` is checked against what the sweep plans to spend: the full grid,
or with pruning the replayed estimate.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from grpo.config.rules import BUDGET_UNIT
from grpo.config.rules import COST_RATES as RATES
from grpo.config.validation import load_heldout, load_splits
from grpo.core.specs import CORRECTION_WEIGHS, LOSS_SPECS
from grpo.models.specs import PRECISIONS
from grpo.run.files import metrics_row, read_yaml
from grpo.run.outcomes import is_evaluation_step
from grpo.run.pruning import PruningSettings, ReplayJob, replay
from grpo.training.batch_plan import config_value
from grpo.training.zero_variance import ZeroVariance

MATCH_KEYS = ("model.name", "rollout.engine", "cluster.gpus_per_job", "sampling.max_new_tokens")
"""What an earlier run must share with a job for its timings to price the job."""
SCANNED_RUNS = 256
"""Newest run directories under paths.output_root whose config is read."""
MATCHED_RUNS = 16
"""Newest matching runs whose timings are read."""
TAIL_BYTES = 2 << 20
"""The end of a matching run's metrics.jsonl that is read (a few thousand steps)."""
MAX_CONFIG_BYTES = 1 << 20
"""Largest `.hydra/config.yaml` of an earlier run that is read (Hydra's are a few kB)."""
ESTIMATE_FILE_ENV = "GRPO_DRY_RUN_ESTIMATE"
"""Where a dry run also writes its estimate as JSON ({"planned", "full_grid", "unit"}), when this
environment variable names a file: the chain's dry run sums its stages' from there."""
REPLAY_ORDERS = 20
"""Random launch orders the pruned sweep is replayed in (fewer for large sweeps, see `replayed`)."""
REPLAY_REPORTS = 4000
"""Reports to the pruner a dry run's replay may make, over all orders (keeps it within seconds)."""


@dataclass(frozen=True)
class Rates:
    """Seconds per rollout (`generate_s`, `old_log_probs_s`), per rollout and epoch (`train_s`),
    per GRPO step (`step_s`) and per evaluated response (`eval_s`), and where they come from."""

    generate_s: float
    old_log_probs_s: float
    train_s: float
    step_s: float
    eval_s: float
    source: str

    def describe(self) -> str:
        """The rates in words, with their source."""
        return (f"generate {self.generate_s:.3g} s + old log-probs {self.old_log_probs_s:.3g} s "
                f"per rollout, train {self.train_s:.3g} s per rollout and epoch, "
                f"{self.step_s:.3g} s per step, evaluation {self.eval_s:.3g} s per response "
                f"({self.source})")


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok and value >= 0 else None


def preset_rates(cfg: DictConfig) -> dict[str, float]:
    """The model preset's `model.cost` rates at the job's sampling.max_new_tokens."""
    cost = cfg.model.cost
    scale = int(cfg.sampling.max_new_tokens) / int(cost.max_new_tokens)
    return {key: float(cost[key]) * (1.0 if key == "step_s" else scale) for key in RATES}


def _run_dirs(root: Path) -> list[Path]:
    """The newest run directories (`<experiment>/<timestamp>/<job>/`) under `root`."""
    try:
        found = [p.parent for p in root.glob("*/*/*/metrics.jsonl") if p.parent.name.isdigit()]
        return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)[:SCANNED_RUNS]
    except OSError:
        return []


def _tail_rows(path: Path) -> list[dict[str, Any]]:
    """The complete metrics records among the last TAIL_BYTES of `path`."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - TAIL_BYTES))
            lines = f.read(TAIL_BYTES).splitlines()[1:]  # the first may be cut
    except OSError:
        return []
    return [row for row in map(metrics_row, lines) if row is not None]


def _row_rates(row: Mapping[str, Any], rollouts: float, epochs: float) -> dict[str, float]:
    """The rates one metrics row of a run measures (only those it has the timings of)."""
    t = {key[5:-2]: v for key in row if key.startswith("time/") and key.endswith("_s")
         and (v := _number(row[key])) is not None}
    rates = {}
    if row["step"] >= 1 and {"rollout", "scoring", "train", "step"} <= t.keys():
        generated = rollouts + (_number(row.get("train/extra_rollouts")) or 0.0)  # dynamic sampling's
        rates["generate_s"] = (t["rollout"] + t["scoring"]) / generated
        rates["train_s"] = t["train"] / (epochs * rollouts)
        if t.get("old_log_probs"):
            rates["old_log_probs_s"] = t["old_log_probs"] / rollouts
        # an overlapped step waited rollout_wait for a generation that ran beside it
        waited = t.get("rollout_wait", t["rollout"])
        phases = (waited + t["scoring"] + t["train"] + t.get("old_log_probs", 0)
                  + t.get("reference_log_probs", 0) + t.get("eval", 0))
        rates["step_s"] = max(0.0, t["step"] - phases)
    responses = _number(row.get("eval/n_responses", row.get("eval/n_examples")))
    if t.get("eval") and responses:
        rates["eval_s"] = t["eval"] / responses
    return rates


def measured_rates(cfg: DictConfig, root: Path) -> tuple[dict[str, float], int]:
    """The median rates over the newest earlier runs under `root` that share `MATCH_KEYS` with
    `cfg`, and how many runs that was (rates they never logged are absent)."""
    wanted = [config_value(cfg, key) for key in MATCH_KEYS]
    samples: dict[str, list[float]] = {key: [] for key in RATES}
    matched = 0
    for run_dir in _run_dirs(root):
        path = run_dir / ".hydra" / "config.yaml"
        try:
            config = read_yaml(path) if path.stat().st_size <= MAX_CONFIG_BYTES else None
        except (OSError, ValueError, yaml.YAMLError):  # unreadable or crafted (RunFileError): skip it
            continue
        if [config_value(config, key) for key in MATCH_KEYS] != wanted:
            continue
        sizes = [_number(config_value(config, key)) for key in ("rollout_batch_size", "off_policy.epochs")]
        if not all(sizes):
            continue
        rows = _tail_rows(run_dir / "metrics.jsonl")
        warm = [row for row in rows if row["step"] != 1] or rows  # step 1 warms the engine up
        for row in warm:
            for key, value in _row_rates(row, *sizes).items():
                samples[key].append(value)
        matched += 1
        if matched >= MATCHED_RUNS:
            break
    return {key: statistics.median(values) for key, values in samples.items() if values}, matched


def rates_for(cfg: DictConfig) -> Rates:
    """The rates that price `cfg`'s job (see the module docstring)."""
    root = Path(str(cfg.paths.output_root))
    measured, n_runs = measured_rates(cfg, root)
    preset = preset_rates(cfg)
    where = f"conf/model/{cfg.model.name}.yaml's model.cost"
    if not measured:
        source = (f"{where}: no earlier run of this model, engine, GPUs per job and "
                  f"max_new_tokens under {root}")
    else:
        missing = [key for key in RATES if key not in measured]
        source = (f"medians of {n_runs} earlier run(s) of this model, engine, GPUs per job and "
                  f"max_new_tokens under {root}"
                  + (f"; {', '.join(missing)} from {where}" if missing else ""))
    return Rates(**{key: measured.get(key, preset[key]) for key in RATES}, source=source)


@dataclass(frozen=True)
class JobCost:
    """One job's estimated cost: `step_seconds` per GRPO step, `eval_seconds` per evaluation
    (of `eval_responses` responses), over `n_steps` steps; priced in `unit` at `per_hour` of them
    per wall-clock hour; `extra_generation`: dynamic sampling's assumed extra rollouts a step, as a
    fraction of rollout_batch_size (0: none)."""

    n_steps: int
    eval_every: int
    step_seconds: float
    eval_seconds: float
    per_hour: float
    unit: str
    eval_responses: str = ""
    confirm_seconds: float = 0.0
    """The confirmation after the last step (`confirm.enabled`; 0: none)."""
    confirm_responses: str = ""
    extra_generation: float = 0.0

    def evaluations(self, step: int) -> int:
        """Evaluations from the start to the end of GRPO step `step` (the step-0 one included)."""
        return sum(is_evaluation_step(s, self.n_steps, self.eval_every) for s in range(step + 1))

    def seconds_at(self, step: int) -> float:
        """Wall-clock seconds from the start to the end of GRPO step `step` (evaluations in, and
        after the last step the confirmation)."""
        return (step * self.step_seconds + self.evaluations(step) * self.eval_seconds
                + (self.confirm_seconds if step >= self.n_steps else 0.0))

    @property
    def seconds(self) -> float:
        """The whole run's wall-clock seconds."""
        return self.seconds_at(self.n_steps)

    def hours(self, seconds: float) -> float:
        """`seconds` of this job's wall-clock in its unit (GPU- or CPU-hours)."""
        return seconds / 3600 * self.per_hour

    def describe(self) -> str:
        """``3.30 GPU-hours (50 steps x 85.2 s + 11 evaluations x 174 s of 1024 problems x 1
        response, 2 GPUs)``."""
        device = "GPU" if self.unit == "GPU-hours" else "CPU"
        confirm = (f" + a confirmation of {self.confirm_seconds:.3g} s of {self.confirm_responses}"
                   if self.confirm_responses else "")
        extra = (f" (generation x{1 + self.extra_generation:g}: dynamic sampling)"
                 if self.extra_generation else "")
        return (f"{self.hours(self.seconds):.2f} {self.unit} ({self.n_steps} steps x "
                f"{self.step_seconds:.3g} s{extra} + {self.evaluations(self.n_steps)} evaluations x "
                f"{self.eval_seconds:.3g} s{self.eval_responses and ' of ' + self.eval_responses}"
                f"{confirm}, {self.per_hour:g} {device}{'s' if self.per_hour != 1 else ''})")


def _problems(n: int, k: int) -> str:
    return f"{n} problems x {k} response{'s' if k > 1 else ''}"


def job_cost(cfg: DictConfig, rates: Rates, n_examples: int, n_heldout: int = 0) -> JobCost:
    """`cfg`'s job priced at `rates`, evaluating `n_examples` validation examples with
    eval.samples_per_problem responses each (and, where it confirms, `n_heldout` held-out ones
    with confirm.samples_per_problem each, once)."""
    k = int(cfg.eval.samples_per_problem)
    rollouts = int(cfg.rollout_batch_size)
    overlapped = int(cfg.off_policy.get("staleness", 0)) > 0
    corrected = overlapped and CORRECTION_WEIGHS.get(cfg.off_policy.get("correction"), False)
    old_log_probs = LOSS_SPECS[cfg.loss.name].uses_ratio or corrected
    extra = ZeroVariance.from_config(cfg).extra_generation()
    forwards = int(old_log_probs) + int(bool(config_value(cfg, "kl.beta")))  # old, reference
    generate = rollouts * (1 + extra) * rates.generate_s
    train = rollouts * (forwards * rates.old_log_probs_s + int(cfg.off_policy.epochs) * rates.train_s)
    step = (max(generate, train) if overlapped else generate + train) + rates.step_s
    gpus = int(cfg.cluster.gpus_per_job)
    confirm_k = int(cfg.confirm.samples_per_problem) if n_heldout else 0
    return JobCost(int(cfg.n_grpo_steps), int(cfg.eval.eval_every), step,
                   n_examples * k * rates.eval_s,
                   float(gpus or int(cfg.cluster.cpus_per_job)), "GPU-hours" if gpus else "CPU-hours",
                   _problems(n_examples, k), confirm_seconds=n_heldout * confirm_k * rates.eval_s,
                   confirm_responses=f"held-out {_problems(n_heldout, confirm_k)}" if n_heldout else "",
                   extra_generation=extra)


GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
"""Bytes per element of the precisions' dtypes (`grpo.models.specs.PRECISIONS`)."""


@dataclass(frozen=True)
class TrainerMemory:
    """The trainer's memory besides activations, GiB, for `parameters` parameters: the policy's
    weights, their gradients and AdamW's two moments, and the frozen reference of the KL term
    (0 without one)."""

    parameters: float
    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    reference_gib: float

    @property
    def total_gib(self) -> float:
        return self.weights_gib + self.gradients_gib + self.optimizer_gib + self.reference_gib

    def describe(self) -> str:
        """``25.9 GiB before activations (1.54e+09 parameters: weights 5.75 + gradients 5.75 +
        AdamW state 11.5 GiB; the KL term's reference 2.88 GiB: ...)``."""
        reference = (f"; the KL term's reference {self.reference_gib:.3g} GiB: a copy of the "
                     "weights, no gradients or optimizer state" if self.reference_gib else "")
        return (f"{self.total_gib:.3g} GiB before activations ({self.parameters:.3g} parameters: "
                f"weights {self.weights_gib:.3g} + gradients {self.gradients_gib:.3g} + AdamW "
                f"state {self.optimizer_gib:.3g} GiB{reference})")


def trainer_memory(cfg: DictConfig) -> TrainerMemory | None:
    """The memory of `cfg`'s trainer besides activations (see the module docstring); None where
    the model preset gives no `model.parameters`."""
    parameters = _number(config_value(cfg, "model.parameters"))
    if not parameters:
        return None
    precision = PRECISIONS[cfg.model.precision]
    weight = DTYPE_BYTES[precision.parameter_dtype] * parameters / GIB
    state = 2 * (1 if cfg.optimizer.use_8bit else DTYPE_BYTES[precision.parameter_dtype])
    computes_in = precision.autocast_dtype or precision.parameter_dtype
    reference = DTYPE_BYTES[computes_in] * parameters / GIB if config_value(cfg, "kl.beta") else 0.0
    return TrainerMemory(parameters, weight, weight, state * parameters / GIB, reference)


def memory_lines(cfgs: Sequence[DictConfig]) -> list[str]:
    """The dry run's lines of the trainer's memory (`trainer_memory`) of jobs `cfgs` (job #i is
    cfgs[i]): one line where every job needs the same, else one per distinct need with its jobs."""
    needs: dict[str, list[int]] = {}
    for num, cfg in enumerate(cfgs):
        memory = trainer_memory(cfg)
        if memory is not None:
            needs.setdefault(memory.describe(), []).append(num)
    if len(needs) == 1 and len(next(iter(needs.values()))) == len(cfgs):
        return [f"trainer memory: {need}" for need in needs]
    return [f"trainer memory of job{'s' if len(nums) > 1 else ''} {', '.join(f'#{n}' for n in nums)}: "
            f"{need}" for need, nums in needs.items()]


@dataclass(frozen=True)
class SweepEstimate:
    """The estimated cost of a sweep's jobs (`jobs`, in launch order), in `unit`: the full grid,
    and with pruning the replayed estimate (`pruned`, over `orders` launch orders, `parallel`
    jobs at a time)."""

    jobs: list[JobCost]
    unit: str
    pruning: PruningSettings | None
    pruned: float | None
    orders: int
    parallel: int

    @property
    def full_grid(self) -> float:
        """Every job to its last step."""
        return sum(job.hours(job.seconds) for job in self.jobs)

    @property
    def planned(self) -> float:
        """What the sweep plans to spend: the replayed estimate with pruning, else the full grid."""
        return self.pruned if self.pruned is not None else self.full_grid

    def lines(self) -> list[str]:
        """The dry run's summary lines."""
        lines = [f"cost: {len(self.jobs)} jobs, {self.full_grid:.2f} {self.unit} for the full grid"]
        if self.pruning is not None and self.pruned is not None:
            lines.append(
                f"cost with {self.pruning.describe(max(j.n_steps for j in self.jobs))}: "
                f"~{self.pruned:.2f} {self.unit} (the jobs "
                f"replayed through the pruner in {self.orders} random orders, {self.parallel} at "
                "a time, each keeping one rank all run long); worst case "
                f"{self.full_grid:.2f}, the full grid (no run stopped: every run beats those "
                "before it at each rung)")
        return lines

    def write(self, path: Path) -> None:
        """Write the estimate to `path` (`write_estimate`)."""
        write_estimate(path, self.planned, self.full_grid, self.unit)

    def over_budget(self, budget: float | None, race_seeds: int | None = None) -> str | None:
        """The refusal when the sweep plans to spend more than `budget` (`BUDGET_UNIT`: GPU-hours,
        CPU-hours for jobs without a GPU), else None. A race (`race_seeds`: its max_seeds) plans
        its worst case: every config to max_seeds seeds, the fixed grid."""
        planned = self.planned if race_seeds is None else self.full_grid * race_seeds
        if budget is None or planned <= budget:
            return None
        if race_seeds is not None:
            what, fix = f"a race's worst case: every config to race.max_seeds={race_seeds} seeds", ""
        else:
            what = "with pruning, replayed" if self.pruned is not None else "the full grid"
            fix = "" if self.pruned is not None else ", turn pruning on (pruning=successive_halving)"
        return (f"the sweep's estimated {planned:.3g} {self.unit} ({what}) exceed "
                f"budget.gpu_hours={budget:g}; nothing was submitted (a budget counts {BUDGET_UNIT}). "
                f"Sweep fewer values, lower n_grpo_steps or eval.n_examples{fix}, or raise "
                "budget.gpu_hours")


def replayed(jobs: Sequence[JobCost], settings: PruningSettings, parallel: int,
             seed: int = 0) -> tuple[float, int]:
    """The mean hours the pruned sweep spends over random launch orders (see the module
    docstring), and how many orders were replayed. As in a run, the evaluations before the last
    step are reported."""
    steps = [[s for s in range(1, job.n_steps) if is_evaluation_step(s, job.n_steps, job.eval_every)]
             for job in jobs]
    n_reports = max(1, sum(map(len, steps)))
    orders = max(1, min(REPLAY_ORDERS, REPLAY_REPORTS // n_reports))
    rng = random.Random(seed)
    total = 0.0
    for _ in range(orders):
        ranks = [rng.random() for _ in jobs]
        replay_jobs = [ReplayJob([(settings.resource_of(s, s * job.step_seconds), rank,
                                   job.seconds_at(s)) for s in job_steps], job.seconds)
                       for job, job_steps, rank in zip(jobs, steps, ranks, strict=True)]
        outcomes = replay(settings, max(job.n_steps for job in jobs), replay_jobs, parallel)
        total += sum(job.hours(o.seconds) for job, o in zip(jobs, outcomes, strict=True))
    return total / orders, orders


def write_estimate(path: Path, planned: float, full_grid: float, unit: str) -> None:
    """Write {"planned", "full_grid", "unit"} to `path` as JSON (ESTIMATE_FILE_ENV: what the
    chain's dry run adds up)."""
    path.write_text(json.dumps({"planned": planned, "full_grid": full_grid, "unit": unit}))


def estimate(cfgs: Sequence[DictConfig], parallel: int) -> tuple[SweepEstimate, list[Rates]]:
    """The cost of a sweep of jobs `cfgs` (valid configs, launched `parallel` at a time), and the
    rates of each job (jobs sharing `MATCH_KEYS` share them)."""
    cache: dict[tuple[Any, ...], Rates] = {}
    rates = []
    for cfg in cfgs:
        key = tuple(config_value(cfg, k) for k in MATCH_KEYS)
        if key not in cache:
            cache[key] = rates_for(cfg)
        rates.append(cache[key])
    jobs = [job_cost(cfg, r, len(load_splits(cfg)["validation"]),
                     len(load_heldout(cfg)) if OmegaConf.select(cfg, "confirm.enabled", default=False) else 0)
            for cfg, r in zip(cfgs, rates, strict=True)]
    unit = "GPU-hours" if any(job.unit == "GPU-hours" for job in jobs) else "CPU-hours"
    settings = PruningSettings.from_config(cfgs[0].pruning) if cfgs else None
    pruned, orders = (replayed(jobs, settings, parallel) if settings is not None and jobs
                      else (None, 0))
    return SweepEstimate(jobs, unit, settings, pruned, orders, parallel), rates
