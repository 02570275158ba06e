"""Prompt templates (package data under grpo/data/templates/) and the reward function each one expects.

`PROMPT_REWARD_PAIRS` is the only statement of which reward function grades which prompt: a
run's reward function follows from `prompt.name` (`reward_fn_for`), there is no config key for it.

A template is the text of `grpo/data/templates/<name>.prompt` with one `{question}` placeholder; the
model's completion continues right after the template's last character (trailing newlines of the
file are dropped).

- `r1_zero`: the DeepSeek R1-Zero template of CS336; ends with "Assistant: <think>"; graded by
  `r1_zero_reward_fn` ("... </think> <answer> ... </answer>").
- `question_only`: the bare question; graded by `question_only_reward_fn` (a `\\boxed{}` answer).
- `toy`: "Q: {question} A:" for the toy arithmetic task (questions such as "3+4"); graded by
  `answer_tag_reward_fn` ("<answer>7</answer>").
"""

from __future__ import annotations

from importlib import resources

from grpo.grading.rewards import ANSWER_FNS, REWARD_FNS, AnswerFn, RewardFn

PROMPT_REWARD_PAIRS: dict[str, str] = {
    "r1_zero": "r1_zero_reward_fn",
    "question_only": "question_only_reward_fn",
    "toy": "answer_tag_reward_fn",
}
"""Prompt name -> name (in `REWARD_FNS`) of the reward function that grades its completions."""

PLACEHOLDER = "{question}"


def load_prompt_template(name: str) -> str:
    """The template text of prompt `name` (one of `PROMPT_REWARD_PAIRS`).

    Raises:
        ValueError: unknown prompt name.
    """
    if name not in PROMPT_REWARD_PAIRS:
        raise ValueError(f"unknown prompt {name!r}; available: {sorted(PROMPT_REWARD_PAIRS)}")
    path = resources.files("grpo.data") / "templates" / f"{name}.prompt"
    return path.read_text(encoding="utf-8").rstrip("\n")


def format_prompt(template: str, question: str) -> str:
    """The template with its `{question}` placeholder replaced by `question`.

    Plain substitution, not `str.format`: braces in the question (LaTeX) or elsewhere in the
    template are kept as they are.

    Raises:
        ValueError: the template has no `{question}` placeholder.
    """
    if PLACEHOLDER not in template:
        raise ValueError(f"prompt template has no {PLACEHOLDER} placeholder: {template!r}")
    return template.replace(PLACEHOLDER, question)


def reward_fn_for(prompt_name: str) -> RewardFn:
    """The reward function that grades completions of prompt `prompt_name`.

    Raises:
        ValueError: unknown prompt name; the message names the config key and the choices.
    """
    if prompt_name not in PROMPT_REWARD_PAIRS:
        raise ValueError(
            f"prompt.name={prompt_name!r} is not a known prompt; "
            f"choose one of {sorted(PROMPT_REWARD_PAIRS)}"
        )
    return REWARD_FNS[PROMPT_REWARD_PAIRS[prompt_name]]


def answer_fn_for(prompt_name: str) -> AnswerFn:
    """The reader of a completion's final answer that `reward_fn_for(prompt_name)` grades (the
    majority vote of an evaluation reads it); the same error for an unknown prompt."""
    reward_fn_for(prompt_name)
    return ANSWER_FNS[PROMPT_REWARD_PAIRS[prompt_name]]
