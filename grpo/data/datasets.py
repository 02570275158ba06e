"""Question/answer examples (MATH from jsonl, or the generated toy addition task) and a
resumable, seeded sampler of training batches.

`data_cfg` keys (an OmegaConf DictConfig or any mapping):
  name: `math` | `toy`
  validation_size: the validation split is cut to its first N examples (default 1024)
  heldout_size: the held-out split (`HELDOUT`, a confirmation's problems) has at most N (default 0)
  math: train_path, validation_path (jsonl, one problem per line), question_field (default
    `problem`), answer_field (default `answer`), solution_field (default `solution`; its last
    \\boxed{...} is the answer when a record has no answer field), train_size (optional cap: the
    first N training records; default all)
  toy: max_operand (default 4), train_size (default 10000), seed (default 0: the fixed shuffle
    of the training cycle), holdout_size (default 0: the pairs kept out of training and
    validation for the held-out split, `grpo.data.toy_task.toy_holdout`)

The held-out split: MATH's validation problems after the first `validation_size` (the ones the
evaluation reads), up to `heldout_size` of them; the toy's held-out pool, up to `heldout_size`.
Neither is trained on nor evaluated by a run's evaluations.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.data.toy_task import toy_holdout, toy_pairs
from grpo.grading.rewards import extract_boxed_answer

SPLITS = ("train", "validation")
HELDOUT = "heldout"
"""The split of a confirmation's problems (`confirm.n_examples`), disjoint from both `SPLITS`."""
DEFAULT_VALIDATION_SIZE = 1024
DEFAULT_TOY_TRAIN_SIZE = 10000


@dataclass(frozen=True)
class Example:
    """One problem: the question text (inserted into the prompt template) and its ground-truth
    final answer (compared with the model's answer by the reward function); `source` is
    `<file>:<line>` of the record it was read from ("" for generated data), for messages."""

    question: str
    answer: str
    source: str = field(default="", compare=False)


MAX_LINE_BYTES = 1 << 20
"""Longest line of a dataset file: one problem with its solution (MATH's take a few kB)."""


def run_data_config(data: Mapping[str, Any], n_examples: int,
                    heldout_examples: int = 0) -> dict[str, Any]:
    """What :func:`load_examples` reads for a run: its `data` group (resolved) with
    `eval.n_examples` as the validation size (the trainer, the config checks and the dry run's
    borrowed seed variance read the same problems) and, for a confirmation, `confirm.n_examples`
    as the held-out split's most problems."""
    return {**data, "validation_size": n_examples, "heldout_size": heldout_examples}


def load_examples(data_cfg: Mapping[str, Any], split: str) -> list[Example]:
    """The examples of `split` (`train` or `validation`) of the dataset `data_cfg.name`.

    Training examples come in file order (math) or a fixed shuffled cycle (toy); shuffling for
    training is `PromptSampler`'s job. Validation is the first min(n, validation_size) examples,
    in file order (math) or (a, b) order (toy). The held-out split (`HELDOUT`): see the module
    docstring.
    """
    if split not in (*SPLITS, HELDOUT):
        raise ValueError(f"unknown split {split!r}; expected one of {(*SPLITS, HELDOUT)}")
    name = data_cfg.get("name")
    size = data_cfg.get("validation_size", DEFAULT_VALIDATION_SIZE)
    heldout = data_cfg.get("heldout_size", 0)
    if name == "math" and split == HELDOUT:
        return _load_math(data_cfg, "validation")[size: size + heldout]
    if name == "math":
        examples = _load_math(data_cfg, split)
    elif name == "toy":
        examples = _load_toy(data_cfg, split)
    else:
        raise ValueError(f"unknown data.name {name!r}; expected 'math' or 'toy'")
    if split == "validation":
        examples = examples[:size]
    return examples[:heldout] if split == HELDOUT else examples


def toy_examples(max_operand: int = 4) -> list[Example]:
    """All (max_operand + 1)^2 toy questions `a+b`, a, b in 0..max_operand, in (a, b) order."""
    return [Example(question, answer) for question, answer in toy_pairs(max_operand)]


def _load_toy(data_cfg: Mapping[str, Any], split: str) -> list[Example]:
    """Toy split: validation = all distinct pairs but the held-out pool (`holdout_size` of them,
    `toy_holdout`); train = `train_size` examples made of back-to-back cycles over the same
    pairs, each cycle in its own seeded random order; held out = the pool."""
    pairs, held = toy_holdout(toy_examples(data_cfg.get("max_operand", 4)),
                              data_cfg.get("holdout_size", 0))
    if split == HELDOUT:
        return held
    if split == "validation":
        return pairs
    train_size = data_cfg.get("train_size", DEFAULT_TOY_TRAIN_SIZE)
    rng = random.Random(data_cfg.get("seed", 0))
    examples: list[Example] = []
    while len(examples) < train_size:
        cycle = list(pairs)
        rng.shuffle(cycle)
        examples.extend(cycle)
    return examples[:train_size]


def _load_math(data_cfg: Mapping[str, Any], split: str) -> list[Example]:
    """MATH-format jsonl: one UTF-8 JSON object per non-blank line; a line that is not UTF-8, not
    JSON, not an object or lacks the fields raises ValueError naming `<file>:<line>`."""
    key = f"{split}_path"
    if data_cfg.get(key) is None:
        raise ValueError(f"data.{key} is not set; set it on the command line "
                         f"(data.{key}=/path/to/{split}.jsonl; data=math reads paths.math_data: "
                         "set that in conf/local/default.yaml)")
    path = Path(data_cfg[key]).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"data.{key}: no file at {path}; set data.{key}=/path/to/file.jsonl "
                                "on the command line (data=math reads paths.math_data: set that "
                                "in conf/local/default.yaml)")
    question_field = data_cfg.get("question_field", "problem")
    answer_field = data_cfg.get("answer_field", "answer")
    solution_field = data_cfg.get("solution_field", "solution")
    limit = data_cfg.get("train_size") if split == "train" else None

    examples: list[Example] = []
    with open(path, "rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            if limit is not None and len(examples) >= limit:
                break
            where = f"{path}:{line_no}"
            if len(raw) > MAX_LINE_BYTES:
                raise ValueError(f"{where}: the line is {len(raw)} bytes; a problem may take at most "
                                 f"{MAX_LINE_BYTES} (a MATH problem takes a few kB)")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(f"{where}: not UTF-8 text (byte {raw[err.start]:#04x} at "
                                 f"column {err.start + 1})") from err
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: not valid JSON ({err.msg})") from err
            except RecursionError:
                raise ValueError(f"{where}: JSON nested too deeply") from None
            if not isinstance(record, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
            if record.get(question_field) is None:
                raise ValueError(f"{where}: record has no question field {question_field!r} "
                                 "(data.question_field)")
            answer = record.get(answer_field)
            if answer is None:
                solution = record.get(solution_field)
                if solution is None:
                    raise ValueError(
                        f"{where}: record has neither the answer field {answer_field!r} "
                        f"(data.answer_field) nor the solution field {solution_field!r} "
                        "(data.solution_field)"
                    )
                answer = extract_boxed_answer(str(solution))
                if answer is None:
                    raise ValueError(f"{where}: no answer field {answer_field!r} and no "
                                     f"\\boxed{{...}} in the solution field {solution_field!r}")
            examples.append(Example(question=str(record[question_field]), answer=str(answer),
                                    source=where))
    return examples


class PromptsExhausted(RuntimeError):
    """Every training prompt is retired (`PromptSampler.retire`): nothing is left to sample."""


class PromptSampler:
    """Endless seeded batches of training examples, resumable exactly from `state_dict()`.

    Epoch e visits every example once in the order of a permutation seeded by (seed, e); a batch
    that runs past the end of an epoch continues with the next epoch's permutation. The state is
    (seed, epoch, position within the epoch, retired prompts), so a restored sampler yields the
    same batches the original would have yielded next.

    Retiring solved prompts (ScaleRL's no-positive-resampling): `retire(question, step)` marks a
    prompt (every example with that question: the toy task's training set repeats each of its
    questions) as retired by GRPO step `step`; `next_batch(through=s)` passes over the examples of
    prompts retired at step s or before (their positions are used up all the same, so the order of
    the others is unchanged), and raises `PromptsExhausted` where no example is left.
    """

    def __init__(self, examples: Sequence[Example], batch_size: int, seed: int) -> None:
        if not examples:
            raise ValueError("PromptSampler needs at least one example")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.examples = list(examples)
        self.batch_size = batch_size
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._permutation(self.epoch)
        first: dict[str, int] = {}
        # each example's prompt: the index of the first example with its question
        self._prompt = [first.setdefault(e.question, i) for i, e in enumerate(self.examples)]
        self._first = first
        self._copies = Counter(self._prompt)
        self.retired: dict[int, int] = {}  # prompt -> the GRPO step that retired it

    def _permutation(self, epoch: int) -> list[int]:
        """Example indices in the order of `epoch` (a str seed hashes deterministically)."""
        order = list(range(len(self.examples)))
        random.Random(f"{self.seed}/{epoch}").shuffle(order)
        return order

    @property
    def n_prompts(self) -> int:
        """The distinct training questions (the prompts a run may retire)."""
        return len(self._copies)

    def live(self, through: int | None = None) -> int:
        """Examples not retired at GRPO step `through` or before (None: every example)."""
        if through is None:
            return len(self.examples)
        return len(self.examples) - sum(self._copies[p] for p, s in self.retired.items() if s <= through)

    def retire(self, question: str, step: int) -> bool:
        """Retire the prompt of `question` (a training question) at GRPO step `step`; whether it
        was not retired before."""
        prompt = self._first.get(question)
        if prompt is None:
            raise ValueError(f"{question[:80]!r} is not a training question of this sampler")
        if prompt in self.retired:
            return False
        self.retired[prompt] = int(step)
        return True

    def next_batch(self, through: int | None = None) -> list[Example]:
        """The next `batch_size` examples, passing over those retired at step `through` or
        before (None: none passed over); `PromptsExhausted`, the state unchanged, where every
        example is."""
        if self.live(through) == 0:
            raise PromptsExhausted(f"every one of the {self.n_prompts} training prompts is retired")
        if through is None or not self.retired:
            return self._take(self.batch_size)
        batch: list[Example] = []
        while len(batch) < self.batch_size:
            self._next_epoch_if_done()
            index = self._order[self.position]
            self.position += 1
            step = self.retired.get(self._prompt[index])
            if step is None or step > through:
                batch.append(self.examples[index])
        return batch

    def _next_epoch_if_done(self) -> None:
        if self.position == len(self._order):
            self.epoch += 1
            self.position = 0
            self._order = self._permutation(self.epoch)

    def _take(self, n: int) -> list[Example]:
        """The next `n` examples, none passed over."""
        batch: list[Example] = []
        while len(batch) < n:
            self._next_epoch_if_done()
            take = min(n - len(batch), len(self._order) - self.position)
            batch.extend(self.examples[i]
                         for i in self._order[self.position : self.position + take])
            self.position += take
        return batch

    def __iter__(self) -> Iterator[list[Example]]:
        return self

    def __next__(self) -> list[Example]:
        return self.next_batch()

    def state_dict(self) -> dict[str, Any]:
        """{seed, epoch, position, num_examples, retired}: everything needed to continue the
        sequence; `retired` lists [prompt, step] pairs (a prompt: the index of the first
        example with its question), sorted."""
        return {"seed": self.seed, "epoch": self.epoch, "position": self.position,
                "num_examples": len(self.examples),
                "retired": [[p, s] for p, s in sorted(self.retired.items())]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state` (from `state_dict()` of a sampler over the same examples; one
        saved before prompts could be retired has no `retired`: none are)."""
        if state["num_examples"] != len(self.examples):
            raise ValueError(
                f"sampler state is for {state['num_examples']} examples but this sampler has "
                f"{len(self.examples)}; the training data changed since the checkpoint"
            )
        retired = {}
        for entry in state.get("retired", []):
            ok = (isinstance(entry, Sequence) and not isinstance(entry, str) and len(entry) == 2
                  and all(isinstance(v, int) and not isinstance(v, bool) for v in entry)
                  and 0 <= entry[0] < len(self.examples) and self._prompt[entry[0]] == entry[0])
            if not ok:
                raise ValueError(f"sampler state retires {entry!r}, which is no [prompt, step] pair "
                                 "of this training data")
            retired[entry[0]] = entry[1]
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self.position = int(state["position"])
        self._order = self._permutation(self.epoch)
        self.retired = retired
