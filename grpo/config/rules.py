"""The allowed values of every scalar config key: one table, `RULES`, walked by the validator.

Each entry says what the key is and what it may hold (an integer, a number or a boolean, its
bounds, whether null is allowed); `value_errors(cfg)` walks a composed config and returns one
line per key whose value breaks its rule, naming the key, the value, the rule and the fix:

    sampling.top_p=0: the nucleus sampling mass must be a number in (0, 1]; set sampling.top_p
    to a number in (0, 1] (1 = no nucleus cut)

The batch sizes (`rollout_batch_size`, `group_size`, `train_batch_size`, `micro_batch_size`,
`off_policy.epochs`) are not here: `grpo.training.batch_plan.BatchPlan.errors()` owns their rules, and the
rules that tie keys to the loss, the model or the data live in `grpo.config.validation`. A key of
`conf/loss/` without an entry (a new loss's hyperparameter) gets `LOSS_HYPERPARAMETER`. Keys under
`hydra.` are Hydra's. Pure Python: importing it does not import torch (only the pruner's names and the batch plan's
bound `MAX_INT`, which every integer key obeys).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from grpo.run.outcomes import OUTCOME_METRICS
from grpo.run.pruning import RESOURCES
from grpo.run.run_config import unresolved_tree
from grpo.training.batch_plan import MAX_INT, config_value

SEED_MAX = 2**32 - 1  # numpy's seed range is [0, 2**32 - 1]
BUDGET_UNIT = "GPU-hours, or CPU-hours for jobs without a GPU (cluster.gpus_per_job=0)"
"""What `budget.gpu_hours` and `race.budget_gpu_hours` count (the cost model's unit of the jobs,
`grpo.sweep.cost`), and what a race's spend is measured in."""
CHECK_SEEDS = "analysis.check_seeds"
"""The key that gives a one-seed sweep's first configs a second seed, as jobs of the sweep (the
validating sweeper's check seeds): a sweep's, never swept, never a single run's."""
MAX_ROUNDS = 100
"""The most extra generation rounds of dynamic sampling a step may take (`zero_variance.max_rounds`)."""
MAX_TEMPERATURE = 10.0  # beyond it sampling is uniform noise; far beyond, logits / T underflow
MIN_POSITIVE_TEMPERATURE = 1e-2  # below it (but not 0) logits / T overflow to inf in bf16


@dataclass(frozen=True)
class TextRule:
    """What a text-valued key may hold: one of `choices`, or a full match of `pattern`; with
    `is_list`, a list of at most `max_items` such texts, each of 1 to `max_chars` characters;
    null only where `nullable` (meaning what `note` says)."""

    what: str
    choices: tuple[str, ...] = ()
    pattern: str = ""
    pattern_words: str = ""  # `pattern` in words, for messages
    is_list: bool = False
    max_items: int = 16
    max_chars: int = 256
    nullable: bool = False
    note: str = ""

    def describe(self) -> str:
        one = (f"one of {', '.join(self.choices)}" if self.choices
               else self.pattern_words if self.pattern
               else f"a text of 1 to {self.max_chars} characters")
        text = f"a list of at most {self.max_items} texts, each {one}" if self.is_list else one
        return f"null or {text}" if self.nullable else text

    def problem(self, value: Any) -> bool:
        if value is None:
            return not self.nullable
        values = value if self.is_list and isinstance(value, list) else [value]
        if self.is_list and (not isinstance(value, list) or len(value) > self.max_items):
            return True
        return not all(isinstance(v, str) and 0 < len(v) <= self.max_chars
                       and (not self.choices or v in self.choices)
                       and (not self.pattern or re.fullmatch(self.pattern, v)) for v in values)


DEVICE = {"pattern": r"auto|cpu|cuda(:\d{1,2})?", "pattern_words": "auto, cpu, cuda or cuda:N"}
PATH = {"pattern": r"(?!.*[^/]{256})[^\x00]+", "max_chars": 4096,
        "pattern_words": "a path of at most 4096 characters, each name at most 255"}
NAME = {"pattern": r"[A-Za-z0-9_.+-]+", "max_chars": 128,
        "pattern_words": "a name of letters, digits and _.+- (at most 128 characters)"}
FIELD = {"pattern": r"[A-Za-z_][A-Za-z0-9_]*", "max_chars": 64,
         "pattern_words": "a field name of letters, digits and _"}
TEXT_RULES = {
    "model.device": TextRule("the trained policy's device", **DEVICE),
    "rollout.device": TextRule("the rollout engine's device", **DEVICE),
    "rollout.dtype": TextRule("the vLLM engine's weight dtype", ("auto", "bfloat16", "float16", "float32")),
    "logging.wandb_mode": TextRule("the wandb mode", ("disabled", "offline", "online")),
    "prompt.stop": TextRule("the stop sequences", is_list=True),
    "pruning.resource": TextRule("what the pruner's rungs count", tuple(RESOURCES)),
    "experiment_name": TextRule("the study's name (a folder under paths.output_root)",
                                pattern=r"(?!.*(^|/)\.\.?(/|$))[A-Za-z0-9_.=,+-]+(/[A-Za-z0-9_.=,+-]+)*",
                                pattern_words="a relative path of names of letters, digits and "
                                              "_.=,+- (no '..', not absolute)", max_chars=128),
    "model.name": TextRule("the model's name (cost rates and labels are matched on it)", **NAME),
    "model.path": TextRule("the model's folder", **PATH),
    "model.attn_implementation": TextRule(
        "the attention kernel", ("eager", "sdpa", "flash_attention_2"), nullable=True,
        note="null = transformers' default"),
    "data.name": TextRule("the dataset's name", **NAME),
    "data.train_path": TextRule("the training data file", **PATH),
    "data.validation_path": TextRule("the validation data file", **PATH),
    "data.question_field": TextRule("the data's question field", **FIELD),
    "data.answer_field": TextRule("the data's answer field", **FIELD),
    "data.solution_field": TextRule("the data's worked-solution field", **FIELD),
    "cluster.name": TextRule("where the jobs run", ("local", "slurm")),
    "paths.output_root": TextRule("the folder of every study", **PATH),
    "paths.cache_dir": TextRule("the folder of built models", **PATH),
    "paths.qwen_model": TextRule("your Qwen2.5-Math-1.5B folder (model=qwen2.5-math-1.5b reads it)",
                                 **PATH),
    "paths.math_data": TextRule("your MATH folder (data=math reads its train.jsonl and "
                                "validation.jsonl)", **PATH),
    "analysis.seed_variance_from": TextRule("the sweep whose seed variance is borrowed", **PATH,
                                            nullable=True, note="null = borrow nothing"),
    "analysis.metric": TextRule("what the analysis reads of each evaluation", tuple(OUTCOME_METRICS)),
    "confirm.policy_from": TextRule("the run whose final model is confirmed", **PATH, nullable=True,
                                    note="null = train the policy, then confirm it"),
    "logging.wandb_project": TextRule("the wandb project", max_chars=128),
    "cluster.partition": TextRule("the SLURM partition", **NAME, nullable=True,
                                  note="null = the cluster's default"),
    "cluster.account": TextRule("the SLURM account", **NAME, nullable=True, note="null = none"),
    "cluster.qos": TextRule("the SLURM quality of service", **NAME, nullable=True,
                            note="null = the default"),
    "cluster.mail_user": TextRule("the address SLURM mails at the detached driver's end",
                                  pattern=r"[^\s@,]+@[^\s@,]+",
                                  pattern_words="an e-mail address (name@host)", nullable=True,
                                  note="null = no mail"),
    "logging.wandb_entity": TextRule("the wandb entity", max_chars=128, nullable=True,
                                     note="null = your default entity"),
}
REGISTRY_KEYS = {"loss.name": "loss", "normalization.name": "normalization", "prompt.name": "prompt",
                 "pruning.name": "pruning", "reward.name": "reward", "rollout.engine": "rollout",
                 "model.build": "model.build", "model.precision": "model.precision",
                 "off_policy.correction": "off_policy.correction", "zero_variance.name": "zero_variance",
                 "std_norm.scope": "std_norm.scope"}
"""Keys whose values are a registry's names (key -> how messages name it), checked against the
registry by grpo.config.validation; here only that each is a text (model.build: or null, a
downloaded model), so that the registry lookup never sees another type."""
TEXT_RULES.update({key: TextRule(f"{shown}'s name", max_chars=128, nullable=key == "model.build",
                                 note="null = a downloaded model at model.path" if key == "model.build" else "")
                   for key, shown in REGISTRY_KEYS.items()})
"""The text-valued keys whose bad values would crash a job after it started (or, for
experiment_name, put its runs outside paths.output_root)."""


@dataclass(frozen=True)
class Rule:
    """What one config key may hold.

    what: the key in a few words ("the AdamW learning rate").
    kind: `int`, `float` (an int is accepted too) or `bool`.
    low, high: bounds (None = unbounded); `low_open` / `high_open` exclude the bound itself.
    nullable: null is allowed (and means what `note` says).
    length: the value is a list of exactly this many items, each obeying the rule.
    note: appended to the fix, e.g. what a special value means ("0 = off").
    """

    what: str
    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    nullable: bool = False
    length: int | None = None
    note: str = ""

    def describe(self) -> str:
        """The rule in words: "an integer >= 1", "a number in (0, 1]", "true or false"."""
        if self.kind is bool:
            text = "true or false"
        else:
            noun = "an integer" if self.kind is int else "a number"
            if self.low is not None and self.high is not None:
                text = (f"{noun} in {'(' if self.low_open else '['}{_show(self.low)}, "
                        f"{_show(self.high)}{')' if self.high_open else ']'}")
            elif self.low is not None:
                text = f"{noun} {'>' if self.low_open else '>='} {_show(self.low)}"
            elif self.high is not None:
                text = f"{noun} {'<' if self.high_open else '<='} {_show(self.high)}"
            else:
                text = noun
        if self.length is not None:
            text = f"a list of {self.length} items, each {text}"
        return f"null or {text}" if self.nullable else text

    def problem(self, value: Any) -> str | None:
        """Why `value` breaks the rule ("is not a number", "is out of range"), or None."""
        if value is None:
            return None if self.nullable else "is null"
        if self.length is not None:
            if not isinstance(value, list | tuple) or len(value) != self.length:
                return f"is not a list of {self.length} items"
            return next((p for p in map(self._item_problem, value) if p), None)
        return self._item_problem(value)

    def _item_problem(self, value: Any) -> str | None:
        if self.kind is bool:
            return None if isinstance(value, bool) else "is not true or false"
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "is not a number"
        if self.kind is int and not isinstance(value, int):
            return "is not an integer"
        if not math.isfinite(value):
            return "is not a finite number"
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        return "is out of range" if too_low or too_high else None

    def message(self, key: str, value: Any, problem: str) -> str:
        """The one-line refusal: key, value, rule and fix."""
        rule = self.describe()
        note = f" ({self.note})" if self.note else ""
        return f"{key}={_show(value)} {problem}: {self.what} must be {rule}; set {key} to {rule}{note}"


def _show(value: Any) -> str:
    """A value as it would be typed on the command line (strings quoted, so 'abc' stands out)."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(map(_show, value)) + "]"
    return repr(value) if isinstance(value, str) else str(value)


def _int(what: str, low: int | None = None, high: int = MAX_INT, **extra: Any) -> Rule:
    return Rule(what, int, low, high, **extra)


def _number(what: str, low: float | None = None, high: float | None = None, **extra: Any) -> Rule:
    return Rule(what, float, low, high, **extra)


def _flag(what: str) -> Rule:
    return Rule(what, bool)


POSITIVE = {"low_open": True}
PROBABILITY_MASS = {"low_open": True, "note": "1 = no nucleus cut"}
CLIP_EPSILON = {"low_open": True, "high_open": True, "note": "the ratio is clipped to 1 - it, "
                "which must stay above 0"}

RULES: dict[str, Rule] = {
    # conf/config.yaml
    "seed": _int("the run's seed", 0, SEED_MAX),
    "dry_run": _flag("dry_run"),
    "skip_zero_advantage": _flag("skip_zero_advantage"),
    "n_grpo_steps": _int("the number of GRPO steps", 1),
    "learning_rate": _number("the AdamW learning rate", 0, **POSITIVE),
    "advantage_eps": _number("the epsilon added to the group std", 0, **POSITIVE,
                             note="0 would turn a zero-std group into 0/0"),
    "overlong.filter": _flag("overlong.filter"),
    "overlong.buffer": _int("the soft overlong punishment's buffer in tokens", 0,
                            note="0 = off; at most sampling.max_new_tokens"),
    "overlong.penalty_factor": _number("the soft overlong punishment's factor", 0, **POSITIVE,
                                       note="the punishment at sampling.max_new_tokens; 1 = DAPO's"),
    "kl.beta": _number("the weight of the KL term to the initial policy", 0,
                       note="0 = off, no reference model loaded"),
    "optimizer.betas": _number("AdamW's (beta1, beta2)", 0, 1, high_open=True, length=2),
    "optimizer.weight_decay": _number("the AdamW weight decay", 0),
    "optimizer.eps": _number("the AdamW epsilon", 0, **POSITIVE),
    "optimizer.max_grad_norm": _number("the gradient-norm clip", 0, **POSITIVE, nullable=True,
                                       note="null = no clipping"),
    "optimizer.use_8bit": _flag("optimizer.use_8bit"),
    "optimizer.warmup_steps": _int("the learning-rate warm-up length", 0, note="0 = constant lr"),
    "sampling.temperature": _number("the rollout sampling temperature", 0, MAX_TEMPERATURE, note="0 = greedy"),
    "sampling.top_p": _number("the nucleus sampling mass", 0, 1, **PROBABILITY_MASS),
    "sampling.min_new_tokens": _int("the minimum response length", 0),
    "sampling.max_new_tokens": _int("the maximum response length", 1),
    "eval.eval_every": _int("the evaluation interval in GRPO steps", 1,
                            note="it has no off value; a value above n_grpo_steps evaluates "
                            "only after the last step"),
    "eval.n_examples": _int("the number of validation examples", 1, 100_000),
    "eval.samples_per_problem": _int("the number of responses sampled per validation problem", 1, 64),
    "eval.temperature": _number("the evaluation sampling temperature", 0, MAX_TEMPERATURE, note="0 = greedy"),
    "eval.top_p": _number("the evaluation nucleus sampling mass", 0, 1, **PROBABILITY_MASS),
    "eval.n_saved_samples": _int("the number of saved evaluation responses", 0),
    "confirm.enabled": _flag("confirm.enabled"),
    "confirm.n_examples": _int("the most held-out problems a confirmation evaluates", 1, 100_000),
    "confirm.samples_per_problem": _int("the number of responses sampled per held-out problem", 1, 64),
    "checkpoint.checkpoint_every": _int("the checkpoint interval in GRPO steps", 1,
                                        note="runs also checkpoint at the end and on signals"),
    "checkpoint.keep_last": _int("the number of checkpoints kept", 1),
    "checkpoint.save_final_model": _flag("checkpoint.save_final_model"),
    "checkpoint.allow_fresh_start": _flag("checkpoint.allow_fresh_start"),
    "checkpoint.allow_metrics_gap": _flag("checkpoint.allow_metrics_gap"),
    "health.zero_reward_patience": _int("the zero-reward patience", 0, note="0 = off"),
    "health.min_mean_response_length": _number("the minimum mean response length", 0,
                                               note="0 = off"),
    "logging.progress_every": _int("the progress-line interval in GRPO steps", 1),
    # conf/model/
    "model.max_seq_len": _int("the longest prompt + response in tokens", 2),
    "model.parameters": _number("the model's parameter count", 1,
                                note="the dry run's memory estimate reads it"),
    "model.build_seed": _int("the tiny model's build seed", 0, SEED_MAX),
    "model.warmup_steps": _int("the tiny model's supervised warm-up steps", 0),
    "model.warmup_target_accuracy": _number("the warm-up's target greedy accuracy", 0, 1,
                                            nullable=True, note="null = warmup_steps only"),
    "model.gradient_checkpointing": _flag("model.gradient_checkpointing"),
    "model.micro_batch_tokens": _int("the padded tokens of one micro-batch", 1, nullable=True,
                                     note="null = micro_batch_size sequences a micro-batch"),
    # conf/data/
    "data.max_operand": _int("the toy task's largest operand", 0, 99),
    "data.train_size": _int("the number of training questions", 1, 1_000_000),
    "data.holdout_size": _int("the toy pairs held out of training and evaluation", 0, 9_999,
                              note="0 = none; a confirmation evaluates them"),
    # conf/cluster/
    "cluster.gpus_per_job": _int("the GPUs per job", 0, note="0 = CPU only"),
    "cluster.cpus_per_job": _int("the CPU cores per job", 1),
    "cluster.mem_gb": _int("the host memory per job in GB", 1),
    "cluster.time_limit_min": _int("the job time limit in minutes", 1),
    "cluster.detach": _flag("cluster.detach"),
    "cluster.driver_time_limit_min": _int("the detached driver's time limit in minutes", 1),
    # conf/rollout/
    "rollout.batch_size": _int("the sequences per generate call", 1),
    "rollout.stale_check_every": _int("the stale-weight check interval in GRPO steps", 0,
                                      note="0 = never"),
    "rollout.gpu_memory_utilization": _number("vLLM's share of its GPU's memory", 0, 1,
                                              low_open=True),
    "rollout.sleep_level": _int("the vLLM sleep level", 0, 2),
    "rollout.cpu_kv_cache_gb": _number("vLLM's KV cache in GiB on the CPU", 0, 4096, low_open=True),
    "rollout.colocate": _flag("rollout.colocate"),
    "rollout.enable_sleep_mode": _flag("rollout.enable_sleep_mode"),
    "rollout.enforce_eager": _flag("rollout.enforce_eager"),
    "rollout.enable_prefix_caching": _flag("rollout.enable_prefix_caching"),
    # conf/off_policy/
    "off_policy.staleness": _int("the rollout staleness in GRPO steps", 0, 1,
                                 note="0 = on-policy, 1 = generation overlaps training"),
    "off_policy.correct_fresh": _flag("off_policy.correct_fresh"),
    "off_policy.is_cap": _number("the truncated importance weight's cap", 1,
                                 note="weights above it are cut to it; about 2 is usual"),
    "rollout.threads": _int("the rollout process's cores", 1),
    # conf/loss/
    "loss.cliprange": _number("the clip range epsilon", 0, 1, **CLIP_EPSILON),
    "loss.cliprange_low": _number("the lower clip range epsilon", 0, 1, **CLIP_EPSILON),
    "loss.cliprange_high": _number("the upper clip range epsilon", 0, **POSITIVE),
    "loss.ratio_cap": _number("CISPO's cap of the ratio weight", 1,
                              note="ratios above it weigh it; ScaleRL's eps_max, TRL recommends 5"),
    "loss.ratio_floor": _number("CISPO's floor of the ratio weight", 0, 1,
                                note="0 = no lower bound"),
    # conf/std_norm/
    "std_norm.enabled": _flag("std_norm.enabled"),
    # conf/reward/
    "reward.p": _number("the placebo's probability of rewarding a response", 0, 1,
                        note="each training response is rewarded 1 with it, whatever its answer; "
                        "0.5 as in Shao et al. 2025"),
    # conf/zero_variance/
    "zero_variance.max_rounds": _int("dynamic sampling's extra generation rounds a step", 1,
                                     MAX_ROUNDS, note="zero_variance=filter is 0 extra rounds"),
    "zero_variance.expected_extra": _number("the extra rollouts a step of dynamic sampling is "
                                            "priced at, as a fraction of rollout_batch_size", 0,
                                            MAX_ROUNDS, nullable=True,
                                            note="null = the worst case, zero_variance.max_rounds"),
    "retire.pass_rate": _number("the pass rate that retires a training prompt", 0, 1, low_open=True,
                                nullable=True, note="null = off; ScaleRL retires at 0.9"),
    # conf/pruning/
    "pruning.min_resource": _int("the first rung of the pruner", 1),
    "pruning.reduction_factor": _int("the pruner's reduction factor", 2,
                                     note="1/reduction_factor of the runs go on at each rung"),
    "pruning.min_early_stopping_rate": _int("the pruner's minimum early-stopping rate", 0),
    "budget.gpu_hours": _number("the sweep's GPU-hour budget", 0, **POSITIVE, nullable=True,
                                note="null = no limit"),
    "race.max_seeds": _int("the most seeds a config gets in a race", 2, 100, nullable=True,
                           note="null = no race: every job of the grid runs"),
    "race.alpha": _number("the race's family-wise error rate", 0, 0.5, **POSITIVE),
    "analysis.assumed_seed_sd": _number("the seed sd of a run's reward assumed for the dry run's "
                                        "power", 0, 1, **POSITIVE, nullable=True,
                                        note="null = unknown"),
    "race.budget_gpu_hours": _number("the race's GPU-hour budget", 0, **POSITIVE, nullable=True,
                                     note="null = no limit"),
    CHECK_SEEDS: _int("the configs of a one-seed sweep that get a second seed", 0, 100,
                                 note="0 = none; each is one more job of the sweep"),
}
"""Dotted config key -> its rule. Keys absent from a config (another group's option) are skipped."""

LOSS_HYPERPARAMETER = _number("a loss hyperparameter", 0, **POSITIVE)
"""The rule of a `loss.*` key that has no entry of its own."""

COST_RATES = ("generate_s", "old_log_probs_s", "train_s", "step_s", "eval_s")
"""The keys of a model preset's `model.cost` besides `max_new_tokens`: the cost model's rates in
seconds (grpo.sweep.cost); each must be a number >= 0."""
RULES.update({f"model.cost.{key}": _number(f"the model's cost rate {key}", 0) for key in COST_RATES})
RULES["model.cost.max_new_tokens"] = _int("the response length the model's cost rates were "
                                          "measured at", 1)


def rule_for(key: str) -> Rule | None:
    """The rule of dotted config key `key`, or None where the table has none."""
    if key in RULES:
        return RULES[key]
    if key.startswith("loss.") and key != "loss.name":
        return LOSS_HYPERPARAMETER
    return None


def leaf_keys(node: dict, prefix: str = "") -> Iterator[str]:
    """Dotted keys of the (unresolved) config `node`'s values (a list is one value), Hydra's own
    section skipped."""
    for name, child in node.items():
        key = f"{prefix}{name}"
        if key == "hydra":
            continue
        if isinstance(child, dict) and child:
            yield from leaf_keys(child, f"{key}.")
        else:
            yield key


_NAMES = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
"""Dotted keys that `OmegaConf.select` reads name by name (no index, no odd name)."""
_NOT_PLAIN = object()


def _plain_value(tree: dict, key: str) -> Any:
    """The value at dotted `key` of the unresolved config `tree` where it is the value
    `OmegaConf.select` reads there (a list: resolved to a list); else `_NOT_PLAIN`: a key not
    read name by name, a path through anything but sections, or a value holding what OmegaConf
    resolves (an interpolation, escaped ones included: "${"), refuses to read ("???", missing)
    or keeps as a section."""

    def plain(value: Any) -> bool:
        if isinstance(value, str):
            return "${" not in value and value != "???"
        if isinstance(value, list):
            return all(map(plain, value))
        return not isinstance(value, dict)

    if not _NAMES.fullmatch(key):
        return _NOT_PLAIN
    node: Any = tree
    for name in key.split("."):
        if not isinstance(node, dict) or name not in node:
            return _NOT_PLAIN
        node = node[name]
    return node if plain(node) else _NOT_PLAIN


def _replaced_sections(tree: dict) -> list[str]:
    """One line per section of keys (`eval`, `model.cost`) that holds null or a value instead."""
    replaced: dict[str, tuple[Any, str]] = {}
    for key in [*RULES, *TEXT_RULES]:
        parts, node = key.split("."), tree
        for depth, part in enumerate(parts[:-1]):
            if part not in node:
                break
            node = node[part]
            if not isinstance(node, dict):
                replaced.setdefault(".".join(parts[: depth + 1]), (node, key))
                break
    return [f"{section}={_show(value)} replaces a section of keys (such as {key}); set its keys "
            f"instead, e.g. {key}=..." for section, (value, key) in replaced.items()]


_ALIAS = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.]*)\}")
"""A value that is another key's value (`${eval.n_examples}`), as a default may be."""


def _alias_of_ruled(tree: dict, key: str, rule: Rule) -> bool:
    """Whether `key`'s value is another key's (`${eval.n_examples}`) whose rule allows the same
    values: that key's line says what is wrong with it, once (not twice, for the value and its
    alias)."""
    value = config_value(tree, key)  # unresolved: the alias as written
    found = _ALIAS.fullmatch(value) if isinstance(value, str) else None
    source = RULES.get(found[1]) if found is not None and found[1] != key else None

    def bounds(r: Rule) -> tuple:
        return r.kind, r.low, r.high, r.low_open, r.high_open, r.nullable, r.length

    return source is not None and bounds(source) == bounds(rule)


def value_errors(cfg: DictConfig) -> list[str]:
    """One line per key of `cfg` whose value breaks its rule (see the module docstring), or per
    section of keys replaced by null or a value (then nothing else is checked)."""
    tree = unresolved_tree(cfg)  # without Hydra's section, which has no rules
    errors = _replaced_sections(tree)
    if errors:
        return errors

    def read(key: str, rule: Rule | TextRule) -> Any:
        """The value of `key` as OmegaConf reads it, taken from `tree` where it is plain (most
        are: resolving each through OmegaConf was most of the check's time); `_NOT_PLAIN` with
        the line saying why it cannot be read appended to `errors`."""
        value = _plain_value(tree, key)
        if value is not _NOT_PLAIN:
            return value
        try:
            return OmegaConf.select(cfg, key, throw_on_missing=True)
        except OmegaConfBaseException as err:
            errors.append(f"{key} cannot be read ({type(err).__name__}: {str(err).splitlines()[0]}); "
                          f"set {key} to {rule.describe()}")
            return _NOT_PLAIN

    keys = list(leaf_keys(tree))
    for key in keys:
        if key in TEXT_RULES:
            continue  # checked below
        rule = rule_for(key)
        if rule is None or _alias_of_ruled(tree, key, rule):
            continue
        value = read(key, rule)
        if value is _NOT_PLAIN:
            continue
        if isinstance(value, ListConfig):
            value = OmegaConf.to_container(value, resolve=True)
        problem = rule.problem(value)
        if problem:
            errors.append(rule.message(key, value, problem))
    for key, text_rule in TEXT_RULES.items():
        if key not in keys:
            continue  # another group option's key
        value = read(key, text_rule)
        if value is _NOT_PLAIN:
            continue
        if isinstance(value, ListConfig | DictConfig):
            value = OmegaConf.to_container(value, resolve=True)
        if text_rule.problem(value):
            shown = _show(value) if len(_show(value)) < 80 else _show(value)[:77] + "..."
            note = f" ({text_rule.note})" if text_rule.note else ""
            errors.append(f"{key}={shown}: {text_rule.what} must be {text_rule.describe()}; "
                          f"set {key} to {text_rule.describe()}{note}")
    for key in ("sampling.temperature", "eval.temperature"):
        value = OmegaConf.select(cfg, key, default=None)
        if isinstance(value, int | float) and 0 < value < MIN_POSITIVE_TEMPERATURE:
            errors.append(f"{key}={value}: a temperature below {MIN_POSITIVE_TEMPERATURE} makes the "
                          f"logits overflow; set {key}=0 for greedy decoding, or at least "
                          f"{MIN_POSITIVE_TEMPERATURE}")
    for key in ("eval.samples_per_problem", "confirm.samples_per_problem"):
        samples = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        if key != "eval.samples_per_problem" and _alias_of_ruled(tree, key, RULES[key]):
            continue  # its source's line says it
        if (isinstance(samples, int) and not isinstance(samples, bool) and samples > 1
                and OmegaConf.select(cfg, "eval.temperature", default=None) == 0):
            errors.append(f"{key}={samples}: greedy evaluation (eval.temperature=0) samples the "
                          f"same response every time; set {key}=1, or eval.temperature=1.0 to "
                          "sample several")
    return errors
