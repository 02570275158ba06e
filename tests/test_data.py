"""Datasets (grpo.data.datasets.load_examples) and the resumable training sampler."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from grpo.data.datasets import (
    HELDOUT,
    Example,
    PromptSampler,
    load_examples,
    run_data_config,
    toy_examples,
)
from grpo.data.toy_task import toy_holdout


def math_cfg(train_path: Path, validation_path: Path | None = None, **extra) -> dict:
    return {"name": "math", "train_path": str(train_path),
            "validation_path": str(validation_path or train_path), **extra}


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_math_sample_answers_fall_back_to_the_last_boxed(math_sample_path: Path) -> None:
    cfg = OmegaConf.create({**math_cfg(math_sample_path), "question_field": "problem",
                            "answer_field": "answer", "solution_field": "solution"})
    examples = load_examples(cfg, "train")
    assert [ex.answer for ex in examples] == [
        "5", "\\frac{3}{4}", "6", "42", "5\\sqrt{2}", "6", "(-2, 2)", "25"
    ]
    assert examples[2] == Example(question="Solve for $x$: $3x - 7 = 11$.", answer="6")


def test_math_custom_field_names_and_caps(tmp_path: Path) -> None:
    records = [{"q": f"What is {i}+1?", "final": i + 1} for i in range(5)]
    records.insert(2, {"q": "Say 7.", "worked": "So it is \\boxed{7}."})
    path = write_jsonl(tmp_path / "custom.jsonl", records)
    path.write_text(path.read_text() + "\n")  # a trailing blank line is skipped
    cfg = math_cfg(path, question_field="q", answer_field="final", solution_field="worked")
    train = load_examples(cfg, "train")
    assert [ex.answer for ex in train] == ["1", "2", "7", "3", "4", "5"]
    assert train[0].question == "What is 0+1?"
    assert len(load_examples({**cfg, "train_size": 4}, "train")) == 4
    validation = load_examples({**cfg, "validation_size": 3}, "validation")
    assert validation == train[:3]


def test_math_missing_file_names_the_key_and_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "validation.jsonl"
    cfg = math_cfg(tmp_path / "train.jsonl", missing)
    with pytest.raises(FileNotFoundError, match=r"data\.validation_path") as err:
        load_examples(cfg, "validation")
    assert str(missing) in str(err.value)
    with pytest.raises(ValueError, match=r"data\.train_path is not set"):
        load_examples({"name": "math", "train_path": None}, "train")


def test_math_record_without_answer_names_field_file_and_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", [
        {"problem": "fine", "answer": "1"},
        {"problem": "no answer, no solution"},
    ])
    with pytest.raises(ValueError) as err:
        load_examples(math_cfg(path), "train")
    message = str(err.value)
    assert f"{path}:2" in message and "'answer'" in message and "'solution'" in message

    write_jsonl(path, [{"problem": "unboxed", "solution": "it is 3"}])
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: no answer field 'answer' and no \\boxed"):
        load_examples(math_cfg(path), "train")

    write_jsonl(path, [{"question": "wrong field", "answer": "3"}])
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: record has no question field 'problem'"):
        load_examples(math_cfg(path), "train")

    path.write_text('{"problem": "ok", "answer": "1"}\n{not json\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not valid JSON"):
        load_examples(math_cfg(path), "train")


def test_unknown_dataset_or_split() -> None:
    with pytest.raises(ValueError, match=r"unknown data\.name 'gsm8k'"):
        load_examples({"name": "gsm8k"}, "train")
    with pytest.raises(ValueError, match=r"unknown split 'test'"):
        load_examples({"name": "toy"}, "test")


def test_toy_splits() -> None:
    cfg = OmegaConf.create({"name": "toy", "max_operand": 4, "train_size": 103})
    validation = load_examples(cfg, "validation")
    assert validation == toy_examples(4)
    assert len(validation) == 25 and len(set(validation)) == 25
    assert validation[0] == Example("0+0", "0") and validation[-1] == Example("4+4", "8")
    assert load_examples({**cfg, "validation_size": 10}, "validation") == validation[:10]

    train = load_examples(cfg, "train")
    assert len(train) == 103
    assert all(int(ex.answer) == sum(map(int, ex.question.split("+"))) for ex in train)
    # four whole shuffled cycles, then the start of a fifth
    assert all(count in (4, 5) for count in Counter(train).values())
    assert train[:25] != validation and sorted(train[:25], key=validation.index) == validation
    assert load_examples(cfg, "train") == train
    assert load_examples({**cfg, "seed": 1}, "train") != train
    assert len(load_examples({"name": "toy", "max_operand": 9}, "validation")) == 100


def test_the_toy_holds_out_a_fixed_pool_it_neither_trains_nor_evaluates_on() -> None:
    plain = {"name": "toy", "max_operand": 4, "train_size": 103}
    held_cfg = run_data_config({**plain, "holdout_size": 8}, 1024, 1024)
    held = load_examples(held_cfg, HELDOUT)
    validation, train = (load_examples(held_cfg, split) for split in ("validation", "train"))
    # the pool: 8 of the 25 pairs, the same for every run (a fixed choice, in (a, b) order)
    assert [e.question for e in held] == ["0+2", "0+4", "1+0", "1+3", "3+2", "3+4", "4+0", "4+3"]
    assert len(validation) == 17 and validation == [e for e in toy_examples(4) if e not in held]
    assert not set(held) & set(train) and set(train) == set(validation)
    # confirm.n_examples caps the pool; the evaluation's own size does not touch it
    assert load_examples(run_data_config({**plain, "holdout_size": 8}, 5, 3), HELDOUT) == held[:3]
    assert load_examples(run_data_config({**plain, "holdout_size": 8}, 5, 3), "validation") == validation[:5]
    # none held out (the default): every pair trains and is evaluated, the training draws as before
    assert load_examples(plain, HELDOUT) == []
    assert load_examples({**plain, "holdout_size": 0}, "train") == load_examples(plain, "train")
    assert toy_holdout(list(range(25)), 0) == (list(range(25)), [])
    with pytest.raises(ValueError, match=r"data\.holdout_size=25: hold out 0 to 24 of the 25 toy pairs"):
        load_examples({**plain, "holdout_size": 25}, "train")


def test_math_holds_out_the_validation_problems_after_those_evaluated(tmp_path: Path) -> None:
    records = [{"problem": f"q{i}", "answer": str(i)} for i in range(10)]
    path = write_jsonl(tmp_path / "v.jsonl", records)
    cfg = run_data_config(math_cfg(path), 4, 3)
    assert [e.question for e in load_examples(cfg, "validation")] == ["q0", "q1", "q2", "q3"]
    assert [e.question for e in load_examples(cfg, HELDOUT)] == ["q4", "q5", "q6"]
    assert [e.question for e in load_examples(run_data_config(math_cfg(path), 4, 100), HELDOUT)] \
        == [f"q{i}" for i in range(4, 10)]
    assert load_examples(run_data_config(math_cfg(path), 10, 5), HELDOUT) == []


def test_sampler_visits_each_example_once_per_epoch() -> None:
    examples = toy_examples(2)  # 9 examples
    sampler = PromptSampler(examples, batch_size=4, seed=0)
    drawn = [ex for _ in range(9) for ex in sampler.next_batch()]  # 36 = 4 epochs
    for epoch in range(4):
        assert sorted(drawn[9 * epoch : 9 * epoch + 9], key=examples.index) == examples
    assert sampler.state_dict() == {"seed": 0, "epoch": 3, "position": 9, "num_examples": 9,
                                    "retired": []}
    assert len(PromptSampler(examples, batch_size=20, seed=0).next_batch()) == 20


def test_sampler_is_deterministic_and_resumes_exactly() -> None:
    examples = toy_examples(4)
    reference = PromptSampler(examples, batch_size=8, seed=5)
    expected = [reference.next_batch() for _ in range(10)]
    assert PromptSampler(examples, 8, seed=5).next_batch() == expected[0]
    assert PromptSampler(examples, 8, seed=6).next_batch() != expected[0]

    for stop in (2, 3, 7):  # mid-epoch, and right after crossing an epoch boundary
        sampler = PromptSampler(examples, 8, seed=5)
        for _ in range(stop):
            sampler.next_batch()
        state = json.loads(json.dumps(sampler.state_dict()))  # as saved in a checkpoint
        resumed = PromptSampler(examples, 8, seed=0)
        resumed.load_state_dict(OmegaConf.create(state))
        assert [next(resumed) for _ in range(10 - stop)] == expected[stop:]


def test_sampler_rejects_a_state_for_other_data() -> None:
    state = PromptSampler(toy_examples(4), 8, seed=0).state_dict()
    with pytest.raises(ValueError, match="for 25 examples but this sampler has 9"):
        PromptSampler(toy_examples(2), 8, seed=0).load_state_dict(state)
