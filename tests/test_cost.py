"""The dry run's cost model (grpo.sweep.cost): hours per job from visible rates, the rates of
earlier runs of the same model and sizes where there are some, the pruned sweep replayed through
its pruner, and the budget that refuses a sweep before anything is submitted."""

from __future__ import annotations

import json
import re
import resource
from pathlib import Path

import pytest
from conftest import stand_in_real_paths
from launching import launch
from omegaconf import OmegaConf

from analysis.readers.synthetic import write_run
from grpo.run.pruning import PruningSettings
from grpo.sweep.cost import (
    JobCost,
    Rates,
    job_cost,
    measured_rates,
    memory_lines,
    replayed,
    trainer_memory,
)

ROOT = Path(__file__).resolve().parents[1]
RATES = Rates(generate_s=0.1, old_log_probs_s=0.02, train_s=0.05, step_s=1.0, eval_s=0.1, source="test")


def job_config(loss: str = "grpo_clip", epochs: int = 2, gpus: int = 2, **extra: object):
    return OmegaConf.create({
        "rollout_batch_size": 256, "off_policy": {"epochs": epochs}, "loss": {"name": loss},
        "n_grpo_steps": 50, "eval": {"eval_every": 5, "samples_per_problem": 1},
        "cluster": {"gpus_per_job": gpus,
                                                                  "cpus_per_job": 8}} | extra)


def test_a_job_costs_its_steps_and_evaluations_on_its_gpus() -> None:
    cost = job_cost(job_config(), RATES, n_examples=1024)
    # 256 x (0.1 + 0.02) to sample, grade and take old log-probs (GRPO-Clip reads the ratio),
    # 2 epochs x 256 x 0.05 to train, 1 s more: 57.32 s a step; 11 evaluations (0, 5, ..., 50)
    # of 1024 examples x 0.1 s
    assert cost.step_seconds == pytest.approx(57.32)
    assert cost.eval_seconds == pytest.approx(102.4)
    assert cost.seconds == pytest.approx(50 * 57.32 + 11 * 102.4)
    assert cost.hours(cost.seconds) == pytest.approx(3992.4 / 3600 * 2)
    assert cost.seconds_at(10) == pytest.approx(10 * 57.32 + 3 * 102.4)
    assert cost.describe() == ("2.22 GPU-hours (50 steps x 57.3 s + 11 evaluations x 102 s of "
                               "1024 problems x 1 response, 2 GPUs)")
    # 4 responses per problem: each evaluation samples and grades 4 x 1024 responses
    four = job_cost(job_config(eval={"eval_every": 5, "samples_per_problem": 4}), RATES, 1024)
    assert four.eval_seconds == pytest.approx(4 * 102.4)
    assert four.step_seconds == cost.step_seconds
    assert "11 evaluations x 410 s of 1024 problems x 4 responses" in four.describe()
    # a loss without the ratio takes no old log-probs; a job without GPUs counts its CPUs
    on_policy = job_cost(job_config("reinforce_with_baseline", epochs=1, gpus=0), RATES, 1024)
    assert on_policy.step_seconds == pytest.approx(256 * 0.1 + 256 * 0.05 + 1.0)
    assert on_policy.unit == "CPU-hours" and on_policy.per_hour == 8
    # a confirmation: 500 held-out problems x 2 responses once, after the last step
    confirms = job_cost(job_config(confirm={"samples_per_problem": 2}), RATES, 1024, n_heldout=500)
    assert confirms.seconds == pytest.approx(cost.seconds + 500 * 2 * 0.1)
    assert confirms.seconds_at(49) == pytest.approx(cost.seconds_at(49))
    assert "11 evaluations x 102 s of 1024 problems x 1 response + a confirmation of 100 s of " \
        "held-out 500 problems x 2 responses, 2 GPUs)" in confirms.describe()


@pytest.mark.parametrize("loss", ["grpo_clip", "grpo_clip_higher", "grpo_no_clip", "gspo", "cispo"])
def test_a_loss_that_reads_the_ratio_pays_the_old_log_prob_pass(loss: str) -> None:
    # on-policy (1 epoch) too: 256 x (0.1 + 0.02) + 256 x 0.05 + 1 s, as GRPO-Clip
    cost = job_cost(job_config(loss, epochs=1), RATES, n_examples=1024)
    assert cost.step_seconds == pytest.approx(256 * 0.12 + 256 * 0.05 + 1.0)


def test_an_overlapped_step_costs_the_longer_of_generation_and_training_plus_the_sync() -> None:
    # staleness 1: generation (256 x 0.1 = 25.6 s) runs beside old log-probs and training
    # (256 x (0.02 + 2 x 0.05) = 30.72 s): 30.72 + 1 s a step, not 57.32
    overlapped = job_cost(job_config(off_policy={"epochs": 2, "staleness": 1, "correction": "tis"}),
                          RATES, 1024)
    assert overlapped.step_seconds == pytest.approx(31.72)
    # the correction needs old log-probs even for a loss without the ratio; generation is longer
    on_policy = job_cost(job_config("reinforce_with_baseline", off_policy={
        "epochs": 1, "staleness": 1, "correction": "tis"}), RATES, 1024)
    assert on_policy.step_seconds == pytest.approx(max(25.6, 256 * (0.02 + 0.05)) + 1.0)
    uncorrected = job_cost(job_config("reinforce_with_baseline", off_policy={
        "epochs": 1, "staleness": 1, "correction": "none"}), RATES, 1024)
    assert uncorrected.step_seconds == pytest.approx(25.6 + 1.0)


def test_dynamic_sampling_prices_its_assumed_extra_generation() -> None:
    # on-policy REINFORCE: 256 x 0.1 s to generate, 256 x 0.05 s to train, 1 s more
    keep = job_config("reinforce_with_baseline", epochs=1)
    assert job_cost(keep, RATES, 1024).step_seconds == pytest.approx(25.6 + 12.8 + 1.0)
    filtered = job_config("reinforce_with_baseline", epochs=1, zero_variance={"name": "filter"})
    assert job_cost(filtered, RATES, 1024).step_seconds == pytest.approx(25.6 + 12.8 + 1.0)
    # dynamic sampling, no assumption given: the worst case, 4 extra rounds of 256 every step
    worst = job_cost(job_config("reinforce_with_baseline", epochs=1, zero_variance={
        "name": "dynamic_sampling", "max_rounds": 4, "expected_extra": None}), RATES, 1024)
    assert worst.step_seconds == pytest.approx(5 * 25.6 + 12.8 + 1.0)
    assert "steps x 142 s (generation x5: dynamic sampling)" in worst.describe()
    # half a batch more on average (the toy task's measured figure is in benchmarks.md)
    assumed = job_cost(job_config("reinforce_with_baseline", epochs=1, zero_variance={
        "name": "dynamic_sampling", "max_rounds": 4, "expected_extra": 0.5}), RATES, 1024)
    assert assumed.step_seconds == pytest.approx(1.5 * 25.6 + 12.8 + 1.0)
    # with overlap the longer of the two: 38.4 s of generation against 12.8 s of training
    overlapped = job_cost(job_config("reinforce_with_baseline", off_policy={
        "epochs": 1, "staleness": 1, "correction": "none"}, zero_variance={
        "name": "dynamic_sampling", "max_rounds": 4, "expected_extra": 0.5}), RATES, 1024)
    assert overlapped.step_seconds == pytest.approx(1.5 * 25.6 + 1.0)


MATCH = {"model.name": "qwen2.5-math-1.5b", "rollout.engine": "vllm", "cluster.gpus_per_job": 2,
         "sampling.max_new_tokens": 1024}


def earlier_run(run_dir: Path, rollouts: int, epochs: int, **changes: object) -> None:
    """A finished run of 12 steps whose phases took, per rollout, 0.2 s to sample and grade,
    0.04 s for old log-probs and 0.1 s per epoch to train, plus 2 s a step; its evaluations of
    500 examples 60 s (step 1 is slower: the engine warms up)."""
    rows = [{"step": 0, "time/eval_s": 60.0, "eval/n_examples": 500.0, "eval/reward": 0.1}]
    for step in range(1, 13):
        warm = 3.0 if step == 1 else 1.0
        phases = {"rollout": 0.15 * rollouts * warm, "scoring": 0.05 * rollouts,
                  "old_log_probs": 0.04 * rollouts, "train": 0.1 * rollouts * epochs,
                  "weight_sync": 1.5}
        evaluation = {"time/eval_s": 60.0, "eval/n_examples": 500.0} if step % 4 == 0 else {}
        step_s = sum(phases.values()) + 0.5 + evaluation.get("time/eval_s", 0.0)
        rows.append({"step": step, **{f"time/{k}_s": v for k, v in phases.items()},
                     "time/step_s": step_s, **evaluation})
    config = {**{key: value for key, value in MATCH.items()}, **changes,
              "rollout_batch_size": rollouts, "off_policy.epochs": epochs}
    write_run(run_dir, config, rows, {"status": "completed"})


def test_rates_are_the_medians_of_earlier_runs_of_the_same_model_and_sizes(tmp_path: Path) -> None:
    earlier_run(tmp_path / "broad" / "2025-01-01_00-00-00" / "0", rollouts=256, epochs=1)
    earlier_run(tmp_path / "broad" / "2025-01-01_00-00-00" / "1", rollouts=64, epochs=4)
    # another engine and another response length: not this job's
    earlier_run(tmp_path / "other" / "2025-01-01_00-00-00" / "0", 256, 1, **{"rollout.engine": "hf"})
    earlier_run(tmp_path / "other" / "2025-01-01_00-00-00" / "1", 256, 1,
                **{"sampling.max_new_tokens": 512})
    # crafted directories are skipped: a config that is no YAML, one nested past the bound, one
    # too large to read, metrics that are no JSON
    crafted = tmp_path / "crafted" / "2025-01-01_00-00-00"
    for i, text in enumerate([": : :\n\t[", "a:\n" + "  " * 100 + "[" * 100, "x: " + "1" * (2 << 20)]):
        (crafted / str(i) / ".hydra").mkdir(parents=True)
        (crafted / str(i) / ".hydra" / "config.yaml").write_text(text)
        (crafted / str(i) / "metrics.jsonl").write_text("{}\n")
    earlier_run(crafted / "3", 256, 1)
    (crafted / "3" / "metrics.jsonl").write_bytes(b"\xff\xfe not json\n" * 1000)
    cfg = OmegaConf.create({"model": {"name": MATCH["model.name"]}, "rollout": {"engine": "vllm"},
                            "cluster": {"gpus_per_job": 2}, "sampling": {"max_new_tokens": 1024}})
    rates, n_runs = measured_rates(cfg, tmp_path)
    assert n_runs == 3  # the two matching runs and the one whose metrics are unreadable
    assert rates == pytest.approx({"generate_s": 0.2, "old_log_probs_s": 0.04, "train_s": 0.1,
                                   "step_s": 2.0, "eval_s": 0.12})


def test_an_earlier_dynamic_sampling_run_is_priced_per_rollout_generated(tmp_path: Path) -> None:
    """A run whose steps generated 256 rollouts more than its batch (train/extra_rollouts) spent
    its rollout and scoring time on 512 rollouts: 0.1 s each, not 0.2."""
    run = tmp_path / "dapo" / "2025-01-01_00-00-00" / "0"
    earlier_run(run, 256, 1)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({**row, "train/extra_rollouts": 256.0} if row["step"] else row) + "\n"
        for row in rows))
    cfg = OmegaConf.create({"model": {"name": MATCH["model.name"]}, "rollout": {"engine": "vllm"},
                            "cluster": {"gpus_per_job": 2}, "sampling": {"max_new_tokens": 1024}})
    assert measured_rates(cfg, tmp_path)[0]["generate_s"] == pytest.approx(0.1)


def test_evaluations_are_priced_per_response(tmp_path: Path) -> None:
    """A run that sampled 4 responses for each of its 500 problems took 60 s for 2000 responses."""
    run = tmp_path / "k4" / "2025-01-01_00-00-00" / "0"
    earlier_run(run, 256, 1)
    metrics = run / "metrics.jsonl"
    metrics.write_text(metrics.read_text().replace('"eval/n_examples": 500.0',
                                                   '"eval/n_examples": 500.0, "eval/n_responses": 2000.0'))
    cfg = OmegaConf.create({"model": {"name": MATCH["model.name"]}, "rollout": {"engine": "vllm"},
                            "cluster": {"gpus_per_job": 2}, "sampling": {"max_new_tokens": 1024}})
    assert measured_rates(cfg, tmp_path)[0]["eval_s"] == pytest.approx(60 / 2000)


def test_the_pruned_sweep_is_replayed_through_its_pruner() -> None:
    jobs = [JobCost(50, 5, 60.0, 100.0, 2.0, "GPU-hours")] * 9
    full = sum(job.hours(job.seconds) for job in jobs)
    settings = PruningSettings("successive_halving", "step", min_resource=10, reduction_factor=3)
    pruned, orders = replayed(jobs, settings, parallel=9)
    assert orders == 20 and replayed(jobs, settings, parallel=9) == (pruned, orders)
    # nine at once reach step 10 together: the first goes on, the others only if best so far;
    # at least the first runs to the end and at most all of them do
    at_rung = jobs[0].hours(jobs[0].seconds_at(10))
    assert full / 9 + 8 * at_rung <= pruned < full
    # keeping the top half of each rung costs more than keeping the top third
    halving = PruningSettings("successive_halving", "step", min_resource=10, reduction_factor=2)
    assert pruned < replayed(jobs, halving, parallel=9)[0] < full


@pytest.fixture
def handout(tmp_path: Path) -> list[str]:
    """The real model's sizes with stand-in files: config.json, 300 training and 1024 validation
    problems (evaluations of eval.n_examples=1024)."""
    return [*stand_in_real_paths(tmp_path, n_validation=1024), "cluster=slurm",
            "cluster.cpus_per_job=2", "cluster.mem_gb=16",  # what the local test cluster's node has
            f"paths.output_root={tmp_path / 'outputs'}"]


def preset_hours(epochs: int, n_steps: int, n_evals: int) -> float:
    """A handout-size GRPO-Clip job priced at conf/model/qwen2.5-math-1.5b.yaml's model.cost."""
    cost = OmegaConf.load(ROOT / "conf" / "model" / "qwen2.5-math-1.5b.yaml").cost
    step = 256 * (cost.generate_s + cost.old_log_probs_s) + epochs * 256 * cost.train_s + cost.step_s
    return (n_steps * step + n_evals * 1024 * cost.eval_s) / 3600 * 2


def test_the_kl_term_costs_a_forward_per_rollout_and_a_copy_of_the_weights() -> None:
    # the reference's forward over the batch, priced as the old-log-prob pass: 256 x 0.02 s more
    without, kl_on = (job_cost(job_config(kl={"beta": beta}), RATES, 1024) for beta in (0.0, 0.04))
    assert kl_on.step_seconds - without.step_seconds == pytest.approx(256 * 0.02)
    ratio_free = job_cost(job_config("reinforce_with_baseline", kl={"beta": 0.04}), RATES, 1024)
    assert ratio_free.step_seconds == pytest.approx(256 * (0.1 + 0.02 + 2 * 0.05) + 1.0)
    # memory: Qwen2.5-Math-1.5B's 1,543,714,304 parameters in bf16-mixed: fp32 weights,
    # gradients and AdamW's two moments, 16 bytes a parameter; the reference is one bf16 copy,
    # 2 bytes a parameter (no gradients, no optimizer state)
    preset = OmegaConf.load(ROOT / "conf" / "model" / "qwen2.5-math-1.5b.yaml")
    n = preset.parameters
    assert n == 1_543_714_304
    cfg = lambda beta, **model: OmegaConf.create({  # noqa: E731
        "model": {"precision": preset.precision, "parameters": n} | model,
        "optimizer": {"use_8bit": False}, "kl": {"beta": beta}})
    plain, kl = trainer_memory(cfg(0.0)), trainer_memory(cfg(0.04))
    assert (plain.weights_gib, plain.gradients_gib, plain.optimizer_gib, plain.reference_gib) == \
        pytest.approx((4 * n / 2**30, 4 * n / 2**30, 8 * n / 2**30, 0.0))
    assert kl.total_gib - plain.total_gib == pytest.approx(2 * n / 2**30) == pytest.approx(2.876, abs=1e-3)
    assert kl.describe() == ("25.9 GiB before activations (1.54e+09 parameters: weights 5.75 + "
                             "gradients 5.75 + AdamW state 11.5 GiB; the KL term's reference 2.88 "
                             "GiB: a copy of the weights, no gradients or optimizer state)")
    # on the CPU presets (32-true) the copy is fp32; bf16-true: bf16 weights and state
    assert trainer_memory(cfg(0.1, precision="32-true")).reference_gib == pytest.approx(4 * n / 2**30)
    assert trainer_memory(cfg(0.1, precision="bf16-true")).total_gib == pytest.approx(10 * n / 2**30)
    lines = memory_lines([cfg(0.0), cfg(0.04), cfg(0.1)])
    assert lines == [f"trainer memory of job #0: {plain.describe()}",
                     f"trainer memory of jobs #1, #2: {kl.describe()}"]
    assert memory_lines([cfg(0.0)] * 2) == [f"trainer memory: {plain.describe()}"]


def test_the_presets_parameter_counts_are_their_models(tiny_model_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from grpo.models.rehearsal import QWEN25_MATH_15B, rehearsal_config

    def count(config: Qwen2Config) -> int:
        with torch.device("meta"):
            return sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())

    counts = {"qwen2.5-math-1.5b": count(Qwen2Config(**QWEN25_MATH_15B)),
              "qwen-rehearsal": count(rehearsal_config()),
              "tiny": sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(tiny_model_dir).parameters())}
    for name, n in counts.items():
        assert OmegaConf.load(ROOT / "conf" / "model" / f"{name}.yaml").parameters == n, name


def test_the_dry_run_prices_a_kl_sweep(tmp_path: Path) -> None:
    out = launch("-m", "+experiment=toy", "kl.beta=0,0.04", "dry_run=true",
                 f"paths.output_root={tmp_path}")
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    job0, job1 = (next(x for x in lines if x.startswith(f"job #{j} ")) for j in (0, 1))
    assert "KL to the initial policy (kl.beta=0.04: a reference model)" in job1
    assert "KL to the initial policy" not in job0
    # 64 rollouts x 0.0001 s of the reference's forward more a step (conf/model/tiny.yaml)
    seconds = [float(re.search(r"600 steps x ([0-9.]+) s", job)[1]) for job in (job0, job1)]
    assert seconds[1] - seconds[0] == pytest.approx(64 * 0.0001, abs=1e-4)
    memory = [x for x in lines if x.startswith("trainer memory of job #")]
    assert len(memory) == 2 and "reference" not in memory[0]
    assert "the KL term's reference 0.000464 GiB" in memory[1]  # 124,672 fp32 parameters


def test_the_dry_run_prices_the_off_policy_sweep_and_a_budget_refuses_it(
        handout: list[str], tmp_path: Path) -> None:
    out = launch("-m", "+experiment=off_policy_broad", "dry_run=true", *handout)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    # epochs 1, 2, 4 x train_batch_size 64, 128, 256; 50 steps, 11 evaluations (eval_every 5)
    hours = [preset_hours(e, 50, 11) for e in (1, 1, 1, 2, 2, 2, 4, 4, 4)]
    for job, expected in enumerate(hours):
        line = next(x for x in lines if x.startswith(f"job #{job} "))
        assert f"; ~{expected:.2f} GPU-hours (50 steps x " in line, line
    assert f"cost: 9 jobs, {sum(hours):.2f} GPU-hours for the full grid" in lines
    assert any(x.startswith("cost rates: ") and "conf/model/qwen2.5-math-1.5b.yaml's model.cost"
               in x for x in lines)
    pruned = next(x for x in lines if x.startswith("cost with pruning=successive_halving: rungs at "
                                                   "10, 30 GRPO steps"))
    estimate = float(pruned.split("~")[1].split()[0])
    assert estimate < sum(hours) and f"worst case {sum(hours):.2f}, the full grid" in pruned
    # a budget between the pruned estimate and the full grid: with pruning it fits ...
    budget = f"budget.gpu_hours={round((estimate + sum(hours)) / 2, 2):g}"
    assert launch("-m", "+experiment=off_policy_broad", "dry_run=true", budget, *handout).returncode == 0
    # ... without, it is refused, and nothing is submitted
    refused = launch("-m", "+experiment=off_policy_broad", "pruning=off", budget, *handout)
    assert refused.returncode == 2
    assert (f"error: the sweep's estimated {sum(hours):.3g} GPU-hours (the full grid) exceed "
            f"{budget}; nothing was submitted") in refused.stderr
    assert not (tmp_path / "outputs").exists()


def test_a_swept_pruning_or_budget_key_is_refused(handout: list[str]) -> None:
    out = launch("-m", "+experiment=off_policy_broad", "budget.gpu_hours=10,20", "dry_run=true",
                 *handout)
    assert out.returncode == 2
    assert "error: budget.gpu_hours cannot be swept" in out.stderr


def test_the_cost_scan_of_many_crafted_runs_stays_within_seconds(tmp_path: Path) -> None:
    """300 earlier runs under the output root with 100 kB configs, 40 of them of this job's
    model and sizes with 4 MB of metrics: the dry run reads at most SCANNED_RUNS configs and the
    tails of MATCHED_RUNS metrics."""
    root = tmp_path / "outputs"
    padding = "".join(f"k{i}: {'x' * 100}\n" for i in range(1_000))
    matching = ("model: {name: tiny}\nrollout: {engine: hf}\ncluster: {gpus_per_job: 0}\n"
                "sampling: {max_new_tokens: 8}\nrollout_batch_size: 64\noff_policy: {epochs: 1}\n")
    row = json.dumps({"step": 5, "time/rollout_s": 0.02, "time/scoring_s": 0.0, "time/train_s": 0.03,
                      "time/step_s": 0.06}) + "\n"
    for i in range(300):
        run = root / "old" / f"2025-01-01_00-00-{i:03d}" / "0"
        (run / ".hydra").mkdir(parents=True)
        (run / ".hydra" / "config.yaml").write_text((matching if i % 8 == 0 else "") + padding)
        (run / "metrics.jsonl").write_text(row * 40_000 if i % 8 == 0 else row)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = launch("model=tiny", "data=toy", "rollout=hf", "dry_run=true", f"paths.output_root={root}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "medians of 16 earlier run(s) of this model" in out.stdout  # MATCHED_RUNS
    # the dry run's own CPU time, which a loaded machine does not inflate as it does the wall
    # clock (82 s of wall clock at a load of 7 where a bound of 60 s was asserted): 7.4 s at a
    # load of 5 on 2 cores, CI's machine
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu < 30, cpu


def test_a_budget_on_a_cpu_sweep_counts_its_cpu_hours(tmp_path: Path) -> None:
    """budget.gpu_hours counts the cost model's unit, CPU-hours for jobs without a GPU, as
    race.budget_gpu_hours does (one unit for both budgets)."""
    out = launch("-m", "model=tiny", "data=toy", "rollout=hf", "seed=0,1", "budget.gpu_hours=1e-7",
                 "dry_run=true", f"paths.output_root={tmp_path}")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "CPU-hours (the full grid) exceed budget.gpu_hours=1e-07; nothing was submitted (a " \
           "budget counts GPU-hours, or CPU-hours for jobs without a GPU" in out.stderr
    out = launch("-m", "model=tiny", "data=toy", "rollout=hf", "seed=0,1", "budget.gpu_hours=10",
                 "dry_run=true", f"paths.output_root={tmp_path}")
    assert out.returncode == 0 and "is not enforced" not in out.stderr, out.stderr[-2000:]


def test_the_dry_run_says_what_the_sweep_can_find_with_an_assumed_seed_sd(tmp_path: Path) -> None:
    """With analysis.assumed_seed_sd, the smallest difference from the best that Hsu's
    comparisons find at 80% power (detectable_with_seeds: the pair rule averaged over the sample
    variances it will read) with this sweep's seeds and with 2 and 3, each priced at the sweep's cost a run; without it,
    how to get one; a value out of range is refused naming the key."""
    from analysis.decisions.race.boundary import boundary
    from analysis.stats.power import (
        detectable_difference,
        detectable_main_effect,
        detectable_with_seeds,
        own_df,
        pair_power,
    )

    sweep = ("-m", "model=tiny", "data=toy", "rollout=hf", "learning_rate=1e-5,3e-4,3e-3",
             "dry_run=true", f"paths.output_root={tmp_path}")
    out = launch(*sweep, "analysis.assumed_seed_sd=0.05")
    assert out.returncode == 0, out.stderr[-2000:]
    grid = float(out.stdout.split("cost: 3 jobs, ")[1].split()[0])
    lines = out.stdout.split("power (analysis.assumed_seed_sd=0.05; the comparisons will rest on "
                             "no seed variance): ")[1].splitlines()
    assert lines[0].startswith("at 80% power, the smallest difference from the best of 3 configs")
    # the pair rule averaged over the sample variances (issue 59): at 2 seeds the pair's own df
    # (Welch's shrunk towards 1, 1.0-1.9) in the 58% of sweeps where its variance is at least the
    # 3 configs' pool, else the pool's 3 df: 0.483, where the noncentral t at the mean df 1.2
    # said 0.446 (and 2n - 2 0.25, at a power the analysis does not have); at 3 seeds 0.168
    # (0.167 at the mean df 2.8: Welch's shrunk towards 2 at 3 seeds; 0.161 on Welch's unshrunk)
    two, three = (detectable_with_seeds(0.05, n, 3) for n in (2, 3))
    assert 0.167 < three < 0.169 < 0.48 < two < 0.49
    assert detectable_difference(0.05, 3, own_df(2)) == pytest.approx(0.446, abs=5e-4)
    assert pair_power(three, 3, 3, (0.05 ** 2, 0.05 ** 2), (0.05 ** 2, 2.0)) == pytest.approx(0.8, abs=1e-4)
    # the learning rate's main effect: 3 levels, 2 (3) runs a level, on Box's numerator df and
    # Satterthwaite's df of the 3 configs' pool of 3 (6) df shrunk towards one config's, as the
    # analysis tests it (on Satterthwaite's alone 0.575 and 0.195; on the pooled df 0.28 and 0.17)
    effect_two, effect_three = (detectable_main_effect(0.05, 3, n, 3.0 * (n - 1), 3) for n in (2, 3))
    assert 0.83 < effect_two < 0.835 and 0.225 < effect_three < 0.228
    assert lines[1].startswith("  1 seed a config (this sweep): no seed variance of its own")
    assert lines[1].endswith("main effects: no main-effect test (no seed variance to test it against)")
    assert lines[2].startswith(f"  2 seeds a config: {two:.3f} from the best; main effects: "
                               f"learning_rate {effect_two:.3f} (6 runs, ~")
    assert lines[3].startswith(f"  3 seeds a config: {three:.3f} from the best; main effects: "
                               f"learning_rate {effect_three:.3f} (9 runs, ~")
    priced = float(lines[3].split("~")[1].split()[0])
    assert priced == pytest.approx(3 * grid, rel=0.2)  # the grid's line is rounded to 2 decimals
    # as a race to 3 seeds: the last look alone, at the race's level (no variance at wave 1)
    level = boundary(3, 3, 0.05, False).level
    race = detectable_with_seeds(0.05, 3, 3, level)
    assert lines[4].startswith(f"  as a race (race.max_seeds=3, not set here): {race:.3f} from "
                               f"the best by its last look alone (each look at {level:.3g}; ")
    assert race > three
    out = launch(*sweep)
    assert "power: no seed sd known at launch; set analysis.assumed_seed_sd" in out.stdout
    assert "or analysis.seed_variance_from (a finished sweep with two or more seeds" in out.stdout
    out = launch(*sweep, "analysis.assumed_seed_sd=2")
    assert out.returncode == 2 and "analysis.assumed_seed_sd=2" in out.stderr


def test_the_dry_run_reads_what_a_named_sweep_lends(tmp_path: Path) -> None:
    """With analysis.seed_variance_from naming a finished two-seed sweep of this sweep's design
    (a synthetic tiny/toy sweep: the launching jobs' composed config, their 600 steps evaluated
    every 50, outcome files of the toy validation problems), the dry run's power rests on that
    sweep's pooled seed variance (inflated to its upper 95% bound where this sweep runs settings
    it did not), and a one-seed sweep's comparisons on its df; a sweep with one seed a config
    lends nothing, and a sweep of another design (a Qwen/MATH sweep) is refused with the report's
    reason (analysis.decisions.ranking.borrow_variance on the planned design); the dry run says why."""
    import math

    from hydra import compose, initialize_config_dir

    from analysis.decisions.ranking import planned_design, rank
    from analysis.readers.collect import collect
    from analysis.readers.synthetic import write_grid_sweep
    from analysis.stats.power import detectable_difference
    from analysis.stats.variance import upper_bound_factor
    from grpo.data.datasets import load_examples, run_data_config

    toy = ("model=tiny", "data=toy", "rollout=hf")
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose("config", overrides=list(toy))
    (digest,), at_step = planned_design([cfg])[0].digests, int(cfg.n_grpo_steps)
    problems = len(load_examples(run_data_config(OmegaConf.to_container(cfg.data, resolve=True),
                                                 int(cfg.eval.n_examples)), "validation"))
    assert (at_step, cfg.eval.eval_every, problems) == (600, 50, 25)
    like_this = {"n_steps": at_step, "eval_every": int(cfg.eval.eval_every),
                 "base": OmegaConf.to_container(cfg, resolve=True), "outcomes": (digest, problems)}
    source = tmp_path / "source"
    write_grid_sweep(source, {"learning_rate": [1e-5, 3e-4]}, n_seeds=3, **like_this)
    seeds = rank(collect([source])).uncertainty.seeds
    sweep = ("-m", *toy, "learning_rate=1e-5,3e-4,3e-3", "dry_run=true",
             f"paths.output_root={tmp_path / 'outputs'}")
    out = launch(*sweep, f"analysis.seed_variance_from={source}")
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.split("power (borrowed: ")[1].splitlines()
    assert f"from the seeds of sweep {source} at step {at_step}" in lines[0] and seeds.df == 4
    # learning_rate=3e-3 was not run there: inflated x2.25 on 4 df
    factor = upper_bound_factor(seeds.df)
    assert f"inflated x{factor:.2f} to its upper 95% confidence bound" in lines[0]
    sd = math.sqrt(seeds.variance * factor)
    found = detectable_difference(sd * math.sqrt(2), 3, 4.0)
    assert lines[1].startswith(f"  1 seed a config (this sweep): {found:.3f} from the best on "
                               "the borrowed variance's 4 df; main effects: learning_rate ")
    # ... so a check seed would test it, priced at one run of this sweep (a sixth of 2 seeds a config)
    per_run = float(re.search(r"\(6 runs, ~([0-9.e-]+) CPU-hours\)", out.stdout).group(1)) / 6
    assert re.fullmatch(r"  check seed: the borrowed variance was measured on other settings; a "
                        r"second seed of one config tests it \(analysis\.stats\.variance\.check\): "
                        r"1 more run, ~([0-9.e-]+) CPU-hours; analysis\.check_seeds=1 runs it in "
                        r"this sweep", lines[2])
    assert per_run > 0 and float(lines[2].split("~")[1].split()[0]) == pytest.approx(per_run, rel=2e-3)
    checked = launch(*sweep, f"analysis.seed_variance_from={source}", "analysis.check_seeds=1")
    assert checked.returncode == 0 and "dry run: 4 jobs, nothing submitted" in checked.stdout
    assert checked.stdout.split("power (borrowed: ")[1].splitlines()[2] == (
        "  check seeds: this sweep runs 1 (analysis.check_seeds=1, priced above); they test the "
        "borrowed variance (analysis.stats.variance.check)")
    # a 3 x 2 grid of one seed: its comparisons rest on its own additive residual (2 df), which
    # a borrowed variance of 4 df is not pooled with (no test could tell them apart)
    out = launch(*sweep, "off_policy.epochs=1,2", f"analysis.seed_variance_from={source}")
    assert out.returncode == 0, out.stderr[-2000:]
    grid_lines = out.stdout.split("power (borrowed: ")[1].splitlines()
    grid_line = grid_lines[1]
    assert not grid_lines[2].startswith("  check seed")  # the grid's residual tests it already
    found = detectable_difference(sd * math.sqrt(2), 6, 2.0)
    assert grid_line.startswith(f"  1 seed a config (this sweep): {found:.3f} from the best on "
                                "the grid's additive residual's 2 df; main effects: ")
    one_seed = tmp_path / "one_seed"
    write_grid_sweep(one_seed, {"learning_rate": [1e-5, 3e-4]}, **like_this)
    out = launch(*sweep, f"analysis.seed_variance_from={one_seed}")
    assert (f"power: nothing to borrow from analysis.seed_variance_from: none: cannot borrow from "
            f"{one_seed} (named by analysis.seed_variance_from): it has no config with two or "
            "more seeds") in out.stdout
    # a three-seed sweep of another design (the Qwen/MATH synthetic sweep, no outcome files):
    # refused with the report's reason (its compared step first; at 600 steps, its model), and
    # no check seed is offered for a variance that will not be lent
    for steps, reason in ((200, "its compared step is 200, this sweep's 600"),
                          (600, "its model {qwen2.5-math-1.5b|None} differ from this sweep's "
                                "{tiny|" + str(cfg.model.path) + "}")):
        other = tmp_path / f"qwen_{steps}"
        write_grid_sweep(other, {"learning_rate": [1e-5, 3e-4]}, n_steps=steps, eval_every=50,
                         n_seeds=3)
        out = launch(*sweep, f"analysis.seed_variance_from={other}")
        assert out.returncode == 0, out.stderr[-2000:]
        (refused,) = [line for line in out.stdout.splitlines() if line.startswith("power")]
        assert refused.startswith(
            f"power: nothing to borrow from analysis.seed_variance_from: none: cannot borrow from "
            f"{other} (named by analysis.seed_variance_from): {reason}; the comparisons will "
            "rest on no seed variance"), refused
        assert "check seed" not in out.stdout
