"""A table of bad values, each refused by `python launch.py ... dry_run=true` before anything runs.

The cases are walked as a user runs them, through launch.py in a subprocess. To keep that fast,
each case is one option of a config group `case` written to a temporary config dir
(`--config-dir`), and one `-m +case=a,b,...` sweep composes and validates them all; the validating
sweeper lists each bad job's problems under its own label, so every case is asserted on its own
lines: exactly one problem, naming the key (or the data file and line). A few cases go through the
single-run path (launch.py without -m). No case may print a traceback or build the tiny model,
whose cache folder (`paths.cache_dir`) must still be absent afterwards.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from launching import launch
from omegaconf import OmegaConf

from grpo.config.keys import yours
from grpo.config.rules import RULES, rule_for
from grpo.training.batch_plan import CONFIG_KEYS

ROOT = Path(__file__).resolve().parents[1]
TOY = ["model=tiny", "data=toy", "rollout=hf"]
# tiny model on jsonl data: 2 questions per step, room for 64 - 8 = 56 prompt tokens
MATH = ["model=tiny", "data=math", "rollout=hf", "rollout_batch_size=16", "train_batch_size=16",
        "micro_batch_size=16", "sampling.max_new_tokens=8"]
ROOM = 56
TOY_PROMPT_TOKENS = len("Q:  A:")  # the toy template around the question, one token a character


def record(question: str = "1+1", answer: str = "2") -> str:
    return json.dumps({"problem": question, "answer": answer}) + "\n"


GOOD = record() + record("2+3", "5")

Files = Callable[[Path], Mapping[str, Any]]
"""Writes a case's files under a folder; returns the case's values (dotted key -> value)."""


def data(train: str | bytes = GOOD, validation: str | bytes | None = GOOD) -> Files:
    """A case of data=math: these train and validation files (None: no validation file)."""
    def write(folder: Path) -> dict[str, str]:
        for split, text in (("train", train), ("validation", validation)):
            if text is not None:
                path = folder / f"{split}.jsonl"
                path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return {"data.train_path": str(folder / "train.jsonl"),
                "data.validation_path": str(folder / "validation.jsonl")}
    return write


def model_config(text: str) -> Files:
    """A case of a downloaded model (model.build=null) whose config.json holds `text`."""
    def write(folder: Path) -> dict[str, Any]:
        (folder / "config.json").write_text(text)
        return {"model.build": None, "model.path": str(folder)}
    return write


# (case id, values or a Files writer, the start of the one error line; {dir} = the case's folder)
BAD_VALUES: list[tuple[str, Mapping[str, Any] | Files, str]] = [
    ("lr_negative", {"learning_rate": -1e-5}, "learning_rate=-1e-05 is out of range: "),
    ("lr_zero", {"learning_rate": 0.0}, "learning_rate=0.0 is out of range"),
    ("lr_string", {"learning_rate": "fast"}, "learning_rate='fast' is not a number"),
    ("lr_bool", {"learning_rate": True}, "learning_rate=true is not a number"),
    ("lr_inf", {"learning_rate": float("inf")}, "learning_rate=inf is not a finite number"),
    ("lr_nan", {"learning_rate": float("nan")}, "learning_rate=nan is not a finite number"),
    ("lr_unresolvable", {"learning_rate": "${nope}"}, "learning_rate cannot be read"),
    ("steps_zero", {"n_grpo_steps": 0}, "n_grpo_steps=0 is out of range"),
    ("steps_negative", {"n_grpo_steps": -3}, "n_grpo_steps=-3 is out of range"),
    ("steps_fraction", {"n_grpo_steps": 2.5}, "n_grpo_steps=2.5 is not an integer"),
    ("max_new_zero", {"sampling.max_new_tokens": 0}, "sampling.max_new_tokens=0 is out of range"),
    ("max_new_negative", {"sampling.max_new_tokens": -8},
     "sampling.max_new_tokens=-8 is out of range"),
    ("min_new_negative", {"sampling.min_new_tokens": -1},
     "sampling.min_new_tokens=-1 is out of range"),
    ("min_new_above_max", {"sampling.min_new_tokens": 9},
     "sampling.min_new_tokens=9 must be <= sampling.max_new_tokens=8"),
    ("temperature_negative", {"sampling.temperature": -0.5},
     "sampling.temperature=-0.5 is out of range"),
    ("top_p_zero", {"sampling.top_p": 0}, "sampling.top_p=0 is out of range"),
    ("top_p_above_one", {"sampling.top_p": 1.5}, "sampling.top_p=1.5 is out of range"),
    ("eval_top_p_negative", {"eval.top_p": -0.1}, "eval.top_p=-0.1 is out of range"),
    ("eval_temperature_negative", {"eval.temperature": -1.0},
     "eval.temperature=-1.0 is out of range"),
    ("eval_every_zero", {"eval.eval_every": 0}, "eval.eval_every=0 is out of range"),
    ("eval_every_negative", {"eval.eval_every": -5}, "eval.eval_every=-5 is out of range"),
    ("eval_examples_zero", {"eval.n_examples": 0}, "eval.n_examples=0 is out of range"),
    ("eval_samples_zero", {"eval.samples_per_problem": 0},
     "eval.samples_per_problem=0 is out of range"),
    ("eval_samples_greedy", {"eval.samples_per_problem": 4, "eval.temperature": 0.0},
     "eval.samples_per_problem=4: greedy evaluation (eval.temperature=0) samples the same "
     "response every time; set eval.samples_per_problem=1, or eval.temperature=1.0"),
    ("saved_samples_negative", {"eval.n_saved_samples": -1},
     "eval.n_saved_samples=-1 is out of range"),
    ("checkpoint_every_zero", {"checkpoint.checkpoint_every": 0},
     "checkpoint.checkpoint_every=0 is out of range"),
    ("keep_last_zero", {"checkpoint.keep_last": 0}, "checkpoint.keep_last=0 is out of range"),
    ("fresh_start_string", {"checkpoint.allow_fresh_start": "yes"},
     "checkpoint.allow_fresh_start='yes' is not true or false"),
    ("progress_every_zero", {"logging.progress_every": 0},
     "logging.progress_every=0 is out of range"),
    ("stale_check_negative", {"rollout.stale_check_every": -1},
     "rollout.stale_check_every=-1 is out of range"),
    ("rollout_batch_zero", {"rollout.batch_size": 0}, "rollout.batch_size=0 is out of range"),
    ("cpus_zero", {"cluster.cpus_per_job": 0}, "cluster.cpus_per_job=0 is out of range"),
    ("cpus_string", {"cluster.cpus_per_job": "two"}, "cluster.cpus_per_job='two' is not a number"),
    ("gpus_negative", {"cluster.gpus_per_job": -1}, "cluster.gpus_per_job=-1 is out of range"),
    ("group_size_one", {"group_size": 1}, "group_size=1 gives no advantage signal"),
    ("group_size_zero", {"group_size": 0}, "group_size=0 must be a positive integer"),
    ("micro_batch_zero", {"micro_batch_size": 0}, "micro_batch_size=0 must be a positive integer"),
    ("train_batch_string", {"train_batch_size": "all"},
     "train_batch_size=all must be a positive integer"),
    ("epochs_zero", {"off_policy.epochs": 0}, "off_policy.epochs=0 must be a positive integer"),
    ("grad_clip_zero", {"optimizer.max_grad_norm": 0.0},
     "optimizer.max_grad_norm=0.0 is out of range"),
    ("grad_clip_negative", {"optimizer.max_grad_norm": -1.0},
     "optimizer.max_grad_norm=-1.0 is out of range"),
    ("adam_eps_zero", {"optimizer.eps": 0.0}, "optimizer.eps=0.0 is out of range"),
    ("weight_decay_negative", {"optimizer.weight_decay": -0.1},
     "optimizer.weight_decay=-0.1 is out of range"),
    ("beta_one", {"optimizer.betas": [0.9, 1.0]}, "optimizer.betas=[0.9, 1.0] is out of range"),
    ("betas_one_item", {"optimizer.betas": [0.9]}, "optimizer.betas=[0.9] is not a list of 2 items"),
    ("warmup_negative", {"optimizer.warmup_steps": -1}, "optimizer.warmup_steps=-1 is out of range"),
    ("advantage_eps_zero", {"advantage_eps": 0.0}, "advantage_eps=0.0 is out of range"),
    ("seed_negative", {"seed": -1}, "seed=-1 is out of range"),
    ("seed_too_big", {"seed": 2**32}, "seed=4294967296 is out of range"),
    ("seed_fraction", {"seed": 1.5}, "seed=1.5 is not an integer"),
    ("patience_negative", {"health.zero_reward_patience": -1},
     "health.zero_reward_patience=-1 is out of range"),
    ("min_length_negative", {"health.min_mean_response_length": -2},
     "health.min_mean_response_length=-2 is out of range"),
    ("max_seq_len_zero", {"model.max_seq_len": 0}, "model.max_seq_len=0 is out of range"),
    ("warmup_accuracy_above_one", {"model.warmup_target_accuracy": 1.5},
     "model.warmup_target_accuracy=1.5 is out of range"),
    ("max_operand_negative", {"data.max_operand": -1}, "data.max_operand=-1 is out of range"),
    ("toy_train_size_zero", {"data.train_size": 0}, "data.train_size=0 is out of range"),
    ("holdout_string", {"data.holdout_size": "some"}, "data.holdout_size='some' is not a number"),
    ("holdout_negative", {"data.holdout_size": -1}, "data.holdout_size=-1 is out of range"),
    ("holdout_every_pair", {"data.holdout_size": 25}, "data=toy: data.holdout_size=25: hold out "
     "0 to 24 of the 25 toy pairs (at least one must be left to train on)"),
    ("confirm_string", {"confirm.enabled": "yes"}, "confirm.enabled='yes' is not true or false"),
    ("confirm_examples_nan", {"confirm.enabled": True, "data.holdout_size": 8,
                              "confirm.n_examples": float("nan")},
     "confirm.n_examples=nan is not an integer"),
    ("confirm_examples_inf", {"confirm.n_examples": float("inf")},
     "confirm.n_examples=inf is not an integer"),
    ("confirm_examples_zero", {"confirm.n_examples": 0}, "confirm.n_examples=0 is out of range"),
    ("confirm_samples_string", {"confirm.samples_per_problem": "four"},
     "confirm.samples_per_problem='four' is not a number"),
    ("confirm_samples_zero", {"confirm.samples_per_problem": 0},
     "confirm.samples_per_problem=0 is out of range"),
    ("confirm_samples_greedy", {"confirm.samples_per_problem": 4},
     "confirm.samples_per_problem=4: greedy evaluation (eval.temperature=0) samples the same "
     "response every time"),
    ("confirm_nothing_held_out", {"confirm.enabled": True}, "confirm.enabled=true: "
     "data.holdout_size=0: the toy task holds out no pair; a confirmation needs a sweep trained "
     "with data.holdout_size=N"),
    ("confirm_pass_at_another_k", {"confirm.enabled": True, "data.holdout_size": 8,
                                   "eval.temperature": 1.0, "eval.samples_per_problem": 4,
                                   "analysis.metric": "pass@k", "confirm.samples_per_problem": 2},
     "confirm.samples_per_problem=2 with analysis.metric=pass@k: the selection's pass@k is at "
     "k=eval.samples_per_problem=4"),
    ("cliprange_one", {"loss": "grpo_clip", "loss.cliprange": 1.0},
     "loss.cliprange=1.0 is out of range"),
    ("cliprange_zero", {"loss": "grpo_clip", "loss.cliprange": 0},
     "loss.cliprange=0 is out of range"),
    ("cliprange_high_negative", {"loss": "grpo_clip_higher", "loss.cliprange_high": -0.28},
     "loss.cliprange_high=-0.28 is out of range"),
    ("gspo_low_nan", {"loss": "gspo", "loss.cliprange_low": float("nan")},
     "loss.cliprange_low=nan is not a finite number: the lower clip range epsilon must be"),
    ("gspo_low_string", {"loss": "gspo", "loss.cliprange_low": "tight"},
     "loss.cliprange_low='tight' is not a number"),
    ("gspo_low_one", {"loss": "gspo", "loss.cliprange_low": 1.0},
     "loss.cliprange_low=1.0 is out of range"),
    ("gspo_high_zero", {"loss": "gspo", "loss.cliprange_high": 0.0},
     "loss.cliprange_high=0.0 is out of range"),
    ("gspo_high_inf", {"loss": "gspo", "loss.cliprange_high": float("inf")},
     "loss.cliprange_high=inf is not a finite number"),
    ("cispo_cap_nan", {"loss": "cispo", "loss.ratio_cap": float("nan")},
     "loss.ratio_cap=nan is not a finite number: CISPO's cap of the ratio weight must be a number "
     ">= 1"),
    ("cispo_cap_string", {"loss": "cispo", "loss.ratio_cap": "five"},
     "loss.ratio_cap='five' is not a number"),
    ("cispo_cap_below_one", {"loss": "cispo", "loss.ratio_cap": 0.5},
     "loss.ratio_cap=0.5 is out of range: CISPO's cap of the ratio weight must be a number >= 1; "
     "set loss.ratio_cap to a number >= 1"),
    ("cispo_floor_nan", {"loss": "cispo", "loss.ratio_floor": float("nan")},
     "loss.ratio_floor=nan is not a finite number"),
    ("cispo_floor_string", {"loss": "cispo", "loss.ratio_floor": "none"},
     "loss.ratio_floor='none' is not a number"),
    ("cispo_floor_above_one", {"loss": "cispo", "loss.ratio_floor": 1.5},
     "loss.ratio_floor=1.5 is out of range: CISPO's floor of the ratio weight must be a number in "
     "[0, 1]"),
    ("cispo_floor_negative", {"loss": "cispo", "loss.ratio_floor": -0.1},
     "loss.ratio_floor=-0.1 is out of range"),
    ("std_norm_string", {"std_norm.enabled": "sometimes"},
     "std_norm.enabled='sometimes' is not true or false"),
    ("std_scope_unknown", {"std_norm.scope": "global"},
     "std_norm.scope=global is unknown; choose one of group, batch"),
    ("std_scope_nan", {"std_norm.scope": float("nan")},
     "std_norm.scope=nan: std_norm.scope's name must be a text"),
    ("std_scope_number", {"std_norm.scope": 2}, "std_norm.scope=2: std_norm.scope's name must be a text"),
    ("std_scope_batch_switched_off", {"std_norm.enabled": False, "std_norm.scope": "batch"},
     "std_norm.scope=batch names the rewards whose std divides the advantages, but "
     "std_norm.enabled=false divides by none; choose std_norm=batch"),
    ("normalization_unknown", {"normalization.name": "prompts"},
     "normalization=prompts is unknown; choose one of mean, constant, microbatch, token, prompt"),
    ("normalization_nan", {"normalization.name": float("nan")},
     "normalization.name=nan: normalization's name must be a text"),
    ("precision_unknown", {"model.precision": "fp16"}, "model.precision=fp16 is unknown"),
    ("micro_batch_tokens_zero", {"model.micro_batch_tokens": 0},
     "model.micro_batch_tokens=0 is out of range"),
    ("micro_batch_tokens_below_max_seq_len", {"model.micro_batch_tokens": 63},
     "model.micro_batch_tokens=63 must be >= model.max_seq_len=64"),
    ("skip_string", {"skip_zero_advantage": "sometimes"},
     "skip_zero_advantage='sometimes' is not true or false"),
    ("placebo_p_above_one", {"reward": "random", "reward.p": 1.5}, "reward.p=1.5 is out of range: "
     "the placebo's probability of rewarding a response must be a number in [0, 1]"),
    ("placebo_p_negative", {"reward": "random", "reward.p": -0.1}, "reward.p=-0.1 is out of range"),
    ("placebo_p_nan", {"reward": "random", "reward.p": float("nan")},
     "reward.p=nan is not a finite number"),
    ("placebo_p_inf", {"reward": "random", "reward.p": float("inf")},
     "reward.p=inf is not a finite number"),
    ("placebo_p_string", {"reward": "random", "reward.p": "half"}, "reward.p='half' is not a number"),
    ("placebo_p_bool", {"reward": "random", "reward.p": True}, "reward.p=true is not a number"),
    ("placebo_p_null", {"reward": "random", "reward.p": None}, "reward.p=null is null"),
    ("placebo_p_on_graded", {"reward.p": 0.5}, "reward.p is not read by reward=graded; remove it"),
    ("placebo_with_dynamic_sampling", {"reward": "random", "zero_variance": "dynamic_sampling"},
     "reward=random with zero_variance=dynamic_sampling: dynamic sampling picks the groups a step "
     "trains on by the graded reward"),
    ("reward_unknown", {"reward.name": "placebo"}, "reward.name=placebo is unknown; use one of "
     "reward=graded, reward=random"),
    ("zero_variance_unknown", {"zero_variance.name": "drop"},
     "zero_variance.name=drop is unknown; use one of zero_variance=keep, zero_variance=filter, "
     "zero_variance=dynamic_sampling"),
    ("max_rounds_zero", {"zero_variance": "dynamic_sampling", "zero_variance.max_rounds": 0},
     "zero_variance.max_rounds=0 is out of range: dynamic sampling's extra generation rounds a "
     "step must be an integer in [1, 100]"),
    ("max_rounds_string", {"zero_variance": "dynamic_sampling", "zero_variance.max_rounds": "many"},
     "zero_variance.max_rounds='many' is not a number"),
    ("max_rounds_nan", {"zero_variance": "dynamic_sampling", "zero_variance.max_rounds": float("nan")},
     "zero_variance.max_rounds=nan is not an integer"),
    ("expected_extra_nan", {"zero_variance": "dynamic_sampling",
                            "zero_variance.expected_extra": float("nan")},
     "zero_variance.expected_extra=nan is not a finite number"),
    ("expected_extra_negative", {"zero_variance": "dynamic_sampling",
                                 "zero_variance.expected_extra": -0.5},
     "zero_variance.expected_extra=-0.5 is out of range"),
    ("expected_extra_string", {"zero_variance": "dynamic_sampling",
                               "zero_variance.expected_extra": "half"},
     "zero_variance.expected_extra='half' is not a number"),
    ("expected_extra_above_rounds", {"zero_variance": "dynamic_sampling",
                                     "zero_variance.max_rounds": 2, "zero_variance.expected_extra": 3},
     "zero_variance.expected_extra=3 is more than zero_variance.max_rounds=2 extra rounds can "
     "generate; set it to at most 2"),
    ("max_rounds_on_filter", {"zero_variance": "filter", "zero_variance.max_rounds": 2},
     "zero_variance.max_rounds is not read by zero_variance=filter; remove it"),
    ("retire_nan", {"retire.pass_rate": float("nan")}, "retire.pass_rate=nan is not a finite number"),
    ("retire_string", {"retire.pass_rate": "high"}, "retire.pass_rate='high' is not a number"),
    ("retire_zero", {"retire.pass_rate": 0}, "retire.pass_rate=0 is out of range: the pass rate "
     "that retires a training prompt must be null or a number in (0, 1]"),
    ("retire_above_one", {"retire.pass_rate": 1.5}, "retire.pass_rate=1.5 is out of range"),
    ("retire_bool", {"retire.pass_rate": True}, "retire.pass_rate=true is not a number"),
    ("overlong_filter_string", {"overlong.filter": "yes"},
     "overlong.filter='yes' is not true or false"),
    ("overlong_buffer_negative", {"overlong.buffer": -1}, "overlong.buffer=-1 is out of range"),
    ("overlong_buffer_fraction", {"overlong.buffer": 2.5}, "overlong.buffer=2.5 is not an integer"),
    ("overlong_buffer_string", {"overlong.buffer": "long"},
     "overlong.buffer='long' is not a number"),
    ("overlong_buffer_above_max_new", {"overlong.buffer": 9},
     "overlong.buffer=9 must be <= sampling.max_new_tokens=8"),
    ("overlong_factor_zero", {"overlong.buffer": 4, "overlong.penalty_factor": 0},
     "overlong.penalty_factor=0 is out of range"),
    ("overlong_factor_inf", {"overlong.penalty_factor": float("inf")},
     "overlong.penalty_factor=inf is not a finite number"),
    ("overlong_factor_string", {"overlong.penalty_factor": "one"},
     "overlong.penalty_factor='one' is not a number"),
    ("kl_beta_negative", {"kl.beta": -0.04}, "kl.beta=-0.04 is out of range"),
    ("kl_beta_nan", {"kl.beta": float("nan")}, "kl.beta=nan is not a finite number"),
    ("kl_beta_inf", {"kl.beta": float("inf")}, "kl.beta=inf is not a finite number"),
    ("kl_beta_string", {"kl.beta": "small"}, "kl.beta='small' is not a number"),
    ("kl_beta_bool", {"kl.beta": True}, "kl.beta=true is not a number"),
    ("model_parameters_zero", {"model.parameters": 0}, "model.parameters=0 is out of range"),
    # values that passed the dry run and then crashed the job
    ("device_unknown", {"model.device": "gpu0"}, "model.device='gpu0': the trained policy's "
     "device must be auto, cpu, cuda or cuda:N"),
    ("rollout_dtype_unknown", {"rollout.dtype": "fp8x"}, "rollout.dtype='fp8x': the vLLM "
     "engine's weight dtype must be one of auto, bfloat16, float16, float32"),
    ("wandb_mode_typo", {"logging.wandb_mode": "offlin"}, "logging.wandb_mode='offlin': the "
     "wandb mode must be one of disabled, offline, online"),
    ("stop_not_strings", {"prompt.stop": [1, 2]}, "prompt.stop=[1, 2]: the stop sequences must be "
     "a list of at most 16 texts"),
    ("stop_not_a_list", {"prompt.stop": "</answer>"}, "prompt.stop='</answer>': the stop sequences"),
    ("temperature_tiny", {"sampling.temperature": 1e-30}, "sampling.temperature=1e-30: a "
     "temperature below 0.01 makes the logits overflow"),
    ("temperature_huge", {"sampling.temperature": 1e30}, "sampling.temperature=1e+30 is out of range"),
    ("eval_temperature_huge", {"eval.temperature": 11}, "eval.temperature=11 is out of range"),
    ("experiment_outside_outputs", {"experiment_name": "../../elsewhere"},
     "experiment_name='../../elsewhere': the study's name (a folder under paths.output_root) must "
     "be a relative path"),
    ("experiment_absolute", {"experiment_name": "/tmp/x"}, "experiment_name='/tmp/x': the study's"),
    # values that made the dry run itself unbounded
    ("toy_operands_unbounded", {"data.max_operand": 10**9}, "data.max_operand=1000000000 is out of range"),
    ("train_size_unbounded", {"data.train_size": 10**12}, "data.train_size=1000000000000 is out of range"),
    ("eval_examples_unbounded", {"eval.n_examples": 10**9}, "eval.n_examples=1000000000 is out of range"),
    ("config_json_not_json", model_config("{not json"), "model.path={dir}: config.json is not "
     "readable JSON"),
    ("config_json_a_list", model_config("[1, 2]"), "model.path={dir}: config.json is not a model "
     "config"),
]

BAD_FILES: list[tuple[str, Files, str]] = [
    ("data_bad_json", data(record() + '{"problem": "1+2", "answer": \n'),
     "data=math: {dir}/train.jsonl:2: not valid JSON"),
    ("data_not_utf8", data(validation=(record() * 2).encode() + b'{"problem": "1+\xff"}\n'),
     "data=math: {dir}/validation.jsonl:3: not UTF-8 text (byte 0xff at column 16)"),
    ("data_no_question", data(record() + record() + json.dumps({"question": "1+2", "answer": "3"})
                              + "\n"),
     "data=math: {dir}/train.jsonl:3: record has no question field 'problem'"),
    ("data_no_answer", data(json.dumps({"problem": "1+2"}) + "\n"),
     "data=math: {dir}/train.jsonl:1: record has neither the answer field 'answer'"),
    ("data_not_an_object", data("\n" + "[1, 2]\n"),
     "data=math: {dir}/train.jsonl:2: expected a JSON object, got list"),
    ("data_empty_validation", data(validation=""), "data.validation_path={dir}/validation.jsonl "
     "holds no records"),
    ("data_blank_validation", data(validation="\n  \n"), "data.validation_path="
     "{dir}/validation.jsonl holds no records"),
    ("data_no_validation_file", data(validation=None), "data.validation_path="
     "{dir}/validation.jsonl does not exist"),
    ("confirm_nothing_after_the_evaluated", lambda folder: {
        **data()(folder), "confirm.enabled": True, "eval.n_examples": 2},
     "confirm.enabled=true: no held-out problem: data.validation_path={dir}/validation.jsonl "
     "holds no problem after the first eval.n_examples=2 the evaluation reads"),
    ("confirm_a_repeated_problem", lambda folder: {
        **data(validation=GOOD + record("3+3", "6") + record("2+3", "5"))(folder),
        "confirm.enabled": True, "eval.n_examples": 2},
     "confirm.enabled=true: 1 of the 2 held-out problems are also validation problems the "
     "evaluation reads (the same question and answer, e.g. {dir}/validation.jsonl:4): they "
     "would not be held out"),
    ("data_line_too_long", data(GOOD + record("1" * (10 << 20))),
     "data=math: {dir}/train.jsonl:3: the line is 10485791 bytes; a problem may take at most 1048576"),
    ("data_prompt_too_long", data(GOOD + record("1" * (ROOM - TOY_PROMPT_TOKENS + 1))),
     f"{{dir}}/train.jsonl:3: the prompt (prompt=toy applied) is {ROOM + 1} tokens, more than the "
     f"{ROOM} that model.max_seq_len=64 minus sampling.max_new_tokens=8 leaves;"),
]

GOOD_VALUES: list[tuple[str, Mapping[str, Any]]] = [
    ("lr_tiny", {"learning_rate": 1e-12}),
    ("lr_int", {"learning_rate": 1}),
    # values the base config already has, or that change no run (its name, its CPUs): one case,
    # since cases that compose to one run are a sweep of one run repeated, which is refused
    ("defaults_at_their_bounds", {"sampling.top_p": 1.0, "eval.top_p": 1,
                                  "experiment_name": "cs336/lr_sweep-2", "cluster.cpus_per_job": 1}),
    ("greedy", {"sampling.temperature": 0.0, "eval.temperature": 0}),
    ("temperature_bounds", {"sampling.temperature": 0.01, "eval.temperature": 10}),
    ("devices_and_modes", {"model.device": "cuda:1", "logging.wandb_mode": "disabled",
                           "rollout.dtype": "float16", "prompt.stop": []}),
    ("every_step", {"eval.eval_every": 1, "checkpoint.checkpoint_every": 1,
                    "logging.progress_every": 1}),
    ("eval_every_beyond_run", {"eval.eval_every": 10_000}),
    ("documented_offs", {"rollout.stale_check_every": 0, "health.zero_reward_patience": 0,
                         "health.min_mean_response_length": 0, "optimizer.warmup_steps": 0,
                         "optimizer.max_grad_norm": None, "eval.n_saved_samples": 0,
                         "model.warmup_target_accuracy": None}),
    ("min_new_equals_max", {"sampling.min_new_tokens": 8}),
    ("confirm_held_out_pairs", {"confirm.enabled": True, "data.holdout_size": 24,
                                "confirm.n_examples": 100_000}),
    ("group_of_two", {"group_size": 2}),
    ("group_of_one_without_baseline", {"group_size": 1, "loss": "no_baseline"}),
    ("seed_bounds", {"seed": 0, "model.build_seed": 2**32 - 1}),
    ("betas_bounds", {"optimizer.betas": [0.0, 0.999]}),
    ("cliprange_below_one", {"loss": "grpo_clip", "loss.cliprange": 0.999}),
    ("gspo_paper_ranges", {"loss": "gspo", "loss.cliprange_low": 3e-4, "loss.cliprange_high": 4e-4}),
    ("cispo_bounds", {"loss": "cispo", "loss.ratio_cap": 1, "loss.ratio_floor": 1.0}),
    ("cispo_no_floor", {"loss": "cispo", "loss.ratio_cap": 5.0, "loss.ratio_floor": 0}),
    ("placebo_bounds", {"reward": "random", "reward.p": 0}),  # legal: a warning, it learns nothing
    ("placebo_always", {"reward": "random", "reward.p": 1}),
    ("placebo_default", {"reward": "random"}),
    ("placebo_with_filter", {"reward": "random", "zero_variance": "filter"}),
    ("batch_std_and_prompt_level", {"std_norm.scope": "batch", "normalization.name": "prompt"}),
    ("prompt_level_with_budget_and_skip", {"normalization.name": "prompt", "train_batch_size": 32,
                                           "model.micro_batch_tokens": 64, "skip_zero_advantage": True}),
    ("budget_of_one_sequence", {"model.micro_batch_tokens": 64, "skip_zero_advantage": True}),
    ("zero_variance_bounds", {"zero_variance": "dynamic_sampling", "zero_variance.max_rounds": 100,
                              "zero_variance.expected_extra": 0, "retire.pass_rate": 1}),
    ("zero_variance_filter_and_retire", {"zero_variance": "filter", "retire.pass_rate": 0.9}),
    # the overlong punishment over the whole response, DAPO's filter and a KL weight of 0.04
    ("overlong_and_kl_on", {"overlong.buffer": 8, "overlong.penalty_factor": 0.5,
                            "overlong.filter": True, "kl.beta": 0.04}),
    # a token budget cuts the micro-batches: micro_batch_size is unused, need not divide 32
    ("token_budget_ignores_micro_batch_size", {"model.micro_batch_tokens": 100000,
                                               "train_batch_size": 32, "micro_batch_size": 48}),
]

GOOD_FILES: list[tuple[str, Files]] = [
    # the longest prompt that fits: exactly model.max_seq_len - sampling.max_new_tokens tokens
    ("prompt_fills_the_room", data(GOOD + record("1" * (ROOM - TOY_PROMPT_TOKENS)))),
    ("answer_from_solution", data(GOOD + json.dumps({"problem": "3+4", "solution": "\\boxed{7}"})
                                  + "\n")),
    ("confirm_after_the_evaluated", lambda folder: {
        **data(validation=GOOD + record("3+3", "6"))(folder), "confirm.enabled": True,
        "eval.n_examples": 2}),
]


def write_cases(config_dir: Path, files_dir: Path,
                cases: list[tuple[str, Mapping[str, Any] | Files]]) -> dict[str, Path]:
    """One option of the `case` group per case: `# @package _global_`, a loss, reward or
    zero_variance choice as a defaults override and the values; returns each case's folder."""
    (config_dir / "case").mkdir(parents=True, exist_ok=True)
    folders = {}
    for name, values in cases:
        folders[name] = files_dir / name
        folders[name].mkdir(parents=True)
        values = dict(values if isinstance(values, Mapping) else values(folders[name]))
        groups = {group: values.pop(group) for group in ("loss", "reward", "zero_variance") if group in values}
        body = OmegaConf.create({})
        for key, value in values.items():
            OmegaConf.update(body, key, value, force_add=True)
        text = OmegaConf.to_yaml(body) if values else ""
        defaults = "".join(f"  - override /{group}: {option}\n" for group, option in groups.items())
        defaults = f"defaults:\n{defaults}" if defaults else ""
        (config_dir / "case" / f"{name}.yaml").write_text(
            f"# @package _global_\n{defaults}{text}")
    return folders


def job_errors(stderr: str) -> dict[str, list[str]]:
    """case -> its error lines, from the sweeper's `job #N [+case=<case>]:` blocks."""
    blocks: dict[str, list[str]] = {}
    current = None
    for line in stderr.splitlines():
        label = re.match(r"job #\d+ \[\+case=(\w+)\]:$", line)
        if label:
            current = blocks.setdefault(label.group(1), [])
        elif line.startswith("  - ") and current is not None:
            current.append(line[4:])
        else:
            current = None
    return blocks


def sweep(tmp_path: Path, base: list[str], cases: list) -> tuple[subprocess.CompletedProcess,
                                                                    dict[str, Path], Path]:
    """Dry-run one `-m +case=...` sweep over `cases` on `base`; the process, each case's
    folder and the tiny model's cache folder (the model must never be built)."""
    folders = write_cases(tmp_path / "conf", tmp_path / "files", cases)
    cache_dir = tmp_path / "cache"
    out = launch("-m", "--config-dir", str(tmp_path / "conf"), *base,
                 f"+case={','.join(name for name, _ in cases)}", f"paths.cache_dir={cache_dir}",
                 f"paths.output_root={tmp_path / 'outputs'}", "dry_run=true")
    return out, folders, cache_dir


def assert_nothing_ran(out: subprocess.CompletedProcess, model_dir: Path, tmp_path: Path) -> None:
    assert "Traceback" not in out.stdout + out.stderr, out.stderr
    assert not model_dir.exists(), "the tiny model was built: something ran"
    assert not (tmp_path / "outputs").exists(), "a run directory was written"


@pytest.mark.parametrize(("base", "table"), [(TOY, BAD_VALUES), (MATH, BAD_FILES)],
                         ids=["values", "files"])
def test_every_bad_value_is_refused_on_one_line_before_anything_runs(
        tmp_path: Path, base: list[str], table: list) -> None:
    out, folders, model_dir = sweep(tmp_path, base, [(name, values) for name, values, _ in table])
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"error: {len(table)} of {len(table)} jobs are invalid; nothing was submitted." in out.stderr
    errors = job_errors(out.stderr)
    for name, _, expected in table:
        want = expected.format(dir=folders[name])
        assert len(errors.get(name, [])) == 1 and errors[name][0].startswith(want), (
            f"{name}: expected one line starting {want!r}, got {errors.get(name)}")
    assert_nothing_ran(out, model_dir, tmp_path)


def test_values_at_the_boundary_are_accepted(tmp_path: Path) -> None:
    for name, base, cases in (("toy", TOY, GOOD_VALUES), ("math", MATH, GOOD_FILES)):
        out, _, model_dir = sweep(tmp_path / name, base, cases)
        assert out.returncode == 0, out.stderr
        assert f"dry run: {len(cases)} jobs, nothing submitted" in out.stdout
        assert_nothing_ran(out, model_dir, tmp_path / name)


@pytest.mark.parametrize(("overrides", "expected"), [
    (["learning_rate=abc"], "learning_rate='abc' is not a number: the AdamW learning rate must be "
     "a number > 0; set learning_rate to a number > 0"),
    (["cluster.cpus_per_job=0", "eval.eval_every=0"], "cluster.cpus_per_job=0 is out of range"),
    # a single run would put its study beside itself, shared with the next single run there
    (["pruning=successive_halving", "eval.eval_every=10"], "pruning=successive_halving: a pruner compares the runs of "
     "one sweep"),
])
def test_single_run_refuses_before_anything_runs(tmp_path: Path, overrides: list[str],
                                                 expected: str) -> None:
    """launch.py without -m: the job itself refuses (grpo.sweep.job), also without dry_run."""
    model_dir = tmp_path / "cache"
    out = launch(*TOY, *overrides, f"paths.cache_dir={model_dir}",
                 f"hydra.run.dir={tmp_path / 'outputs'}")
    assert out.returncode == 2, out.stdout + out.stderr
    lines = [line[4:] for line in out.stderr.splitlines() if line.startswith("  - ")]
    assert any(ln.startswith(expected) for ln in lines), out.stderr
    refused = [o for o in overrides if not o.startswith("eval.eval_every=1")]  # ...=10 is valid
    assert len(lines) == len(refused) and all(line.startswith(o.split("=")[0] + "=") for line, o in
                                              zip(sorted(lines), sorted(refused), strict=True))
    assert "Traceback" not in out.stdout + out.stderr
    assert not model_dir.exists() and not (tmp_path / "outputs" / "metrics.jsonl").exists()


def numeric_keys(with_null: bool = False) -> set[str]:
    """Every dotted key of conf/ (Hydra's own aside) whose value is a number, a boolean or a list
    of numbers (or, `with_null`, null), under the package its file puts it in."""
    keys = set()
    for path in (ROOT / "conf").rglob("*.yaml"):
        group = path.parent.relative_to(ROOT / "conf").as_posix()
        if group.startswith("hydra") or group == "chain":  # a chain is no launch.py config:
            continue  # chain.stages.load_chain checks its values (budgets > 0)
        if yours(path, ROOT / "conf"):  # your local config, promote's presets: not the checkout's
            continue
        text = path.read_text()
        prefix = "" if group == "." or "@package _global_" in text else f"{group}."
        flat = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        stack = [(prefix, flat)]
        while stack:
            where, node = stack.pop()
            for name, value in node.items():
                key = f"{where}{name}"
                if isinstance(value, str) and re.fullmatch(r"\$\{[\w.]+\}", value):
                    value = OmegaConf.select(OmegaConf.load(ROOT / "conf" / "config.yaml"),
                                             value[2:-1], default=value)  # a default of another key's
                if isinstance(value, dict):
                    if key not in ("hydra", "defaults"):
                        stack.append((f"{key}.", value))
                elif isinstance(value, bool | int | float) or (
                        isinstance(value, list) and value and all(
                            isinstance(v, int | float) for v in value)) or (
                        with_null and value is None):
                    keys.add(key)
    return keys


def test_every_numeric_key_of_conf_has_a_rule() -> None:
    keys = numeric_keys()
    assert {"learning_rate", "sampling.top_p", "loss.cliprange", "cluster.mem_gb"} <= keys
    batch_plan_keys = set(CONFIG_KEYS.values())
    assert sorted(k for k in keys if rule_for(k) is None and k not in batch_plan_keys) == []
    # and every rule is for a key that exists (a nullable one may be null by default)
    assert sorted(set(RULES) - numeric_keys(with_null=True)) == []


DRY_RUN_BOUND_S = 60.0
"""Seconds a dry run may take at the largest allowed values (measured: ~6 s on 2 cores)."""
DRY_RUN_BOUND_MB = 2048
"""Peak memory in MB of a dry run at the largest allowed values (measured: ~0.7 GB)."""
_MEASURED = """
import resource, subprocess, sys, time
start = time.perf_counter()
out = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(out.returncode, time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.stdout.write(out.stdout + out.stderr)
"""


def _megabyte_questions(folder: Path) -> list[str]:
    """64 MATH lines, every eighth a question of the largest allowed line (1 MiB)."""
    big = "1" * ((1 << 20) - 64)
    text = "".join(record(big if i % 8 == 3 else "1+1") for i in range(64))
    for split in ("train", "validation"):
        (folder / f"{split}.jsonl").write_text(text)
    return ["model=qwen-rehearsal", "data=math", "rollout=hf", "eval.n_examples=64",
            f"data.train_path={folder / 'train.jsonl'}", f"data.validation_path={folder / 'validation.jsonl'}"]


@pytest.mark.parametrize(("make_args", "expected"), [
    (lambda folder: ["model=tiny", "data=toy", "rollout=hf", "data.max_operand=99",
                     "data.train_size=1000000", "eval.n_examples=100000"], "dry run: 1 job, nothing started"),
    (_megabyte_questions, "the prompt (prompt=r1_zero applied) is at least "),
], ids=["toy_at_every_bound", "megabyte_questions"])
def test_a_dry_run_at_the_largest_allowed_values_is_bounded_in_time_and_memory(
        tmp_path: Path, make_args: Callable[[Path], list[str]], expected: str) -> None:
    command = [sys.executable, str(ROOT / "launch.py"), *make_args(tmp_path), "dry_run=true",
               f"paths.output_root={tmp_path / 'outputs'}"]
    out = subprocess.run([sys.executable, "-c", _MEASURED, *command], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    _, seconds, peak_kb = out.stdout.splitlines()[0].split()
    assert expected in out.stdout, out.stdout[-3000:]
    assert "Traceback" not in out.stdout
    assert float(seconds) < DRY_RUN_BOUND_S, f"the dry run took {float(seconds):.1f} s"
    assert int(peak_kb) / 1024 < DRY_RUN_BOUND_MB, f"the dry run took {int(peak_kb) / 1024:.0f} MB"
