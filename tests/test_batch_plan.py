"""BatchPlan: the batch arithmetic and its rules, in one place."""

from __future__ import annotations

import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from grpo.training.batch_plan import BatchPlan


def plan(rollout: int = 256, group: int = 8, train: int = 64, micro: int = 2, epochs: int = 2
         ) -> BatchPlan:
    return BatchPlan(rollout, group, train, micro, epochs)


def test_derived_counts() -> None:
    p = plan()
    assert p.errors() == []
    assert (p.questions_per_step, p.gradient_accumulation_steps, p.optimizer_steps_per_epoch,
            p.optimizer_steps_per_grpo_step) == (32, 32, 4, 8)
    assert p.describe() == ("gradient_accumulation_steps=32 (64/2), "
                            "optimizer_steps_per_grpo_step=8 (off-policy)")


@pytest.mark.parametrize(("epochs", "train", "off_policy"), [
    (1, 256, False),  # one optimizer step per rollout batch: on-policy
    (1, 128, True),   # two steps in one epoch: the second trains on older weights' rollouts
    (2, 256, True),   # two epochs of one step
])
def test_off_policy_means_more_than_one_optimizer_step_per_rollout_batch(
    epochs: int, train: int, off_policy: bool
) -> None:
    assert plan(train=train, epochs=epochs).off_policy is off_policy


def test_optimizer_step_slices_cover_each_epoch_in_order() -> None:
    slices = list(plan(rollout=8, group=2, train=4, micro=2, epochs=2).optimizer_step_slices())
    assert [(s.start, s.stop) for s in slices] == [(0, 4), (4, 8), (0, 4), (4, 8)]


def test_rules_name_the_keys() -> None:
    assert plan(rollout=60).errors() == [
        "rollout_batch_size=60 must be divisible by group_size=8 (each question gets group_size "
        "responses); try rollout_batch_size=56",
        "rollout_batch_size=60 must be divisible by train_batch_size=64 (each epoch is a whole "
        "number of optimizer steps)",
        "train_batch_size=64 must be <= rollout_batch_size=60",
    ]
    assert plan(train=4, micro=4).errors() == [
        "train_batch_size=4 must be >= group_size=8 (the assignment's GRPO loop asserts it; rows "
        "are shuffled one by one, so an optimizer step holds parts of several groups either way)"]
    assert plan(micro=3).errors() == [
        "train_batch_size=64 must be divisible by micro_batch_size=3 "
        "(gradient_accumulation_steps = train_batch_size / micro_batch_size)"]
    assert plan(epochs=0, micro="2").errors() == [  # type: ignore[arg-type]
        "micro_batch_size=2 must be a positive integer (at most 2147483647)",
        "off_policy.epochs=0 must be a positive integer (at most 2147483647)"]
    assert plan(epochs=True).errors() == ["off_policy.epochs=True must be a positive integer (at most 2147483647)"]
    assert plan(epochs=2**31).errors() == [
        "off_policy.epochs=2147483648 must be a positive integer (at most 2147483647)"]
    assert plan(epochs=2**31 - 1).errors() == []
    # a token budget cuts micro-batches by tokens: micro_batch_size need not divide
    # train_batch_size (it is unused), but it is still a positive integer
    budget = BatchPlan(256, 8, 64, 3, 2, micro_batch_tokens=4096)
    assert not budget.uses_micro_batch_size and budget.errors() == []
    assert BatchPlan(256, 8, 64, 0, 2, micro_batch_tokens=4096).errors() == [
        "micro_batch_size=0 must be a positive integer (at most 2147483647)"]
    assert BatchPlan(256, 8, 64, 3, 2, micro_batch_tokens=None).uses_micro_batch_size


def test_from_nested_config_and_from_flat_dotted_keys() -> None:
    cfg = OmegaConf.create({"rollout_batch_size": 64, "group_size": 8, "train_batch_size": 32,
                            "micro_batch_size": 16, "off_policy": {"epochs": 2}})
    flat = {"rollout_batch_size": 64, "group_size": 8, "train_batch_size": 32,
            "micro_batch_size": 16, "off_policy.epochs": 2}
    assert BatchPlan.from_config(cfg) == BatchPlan.from_config(flat) == BatchPlan(64, 8, 32, 16, 2)
    budget = BatchPlan.from_config({**flat, "micro_batch_size": 5, "model.micro_batch_tokens": 999})
    assert budget.micro_batch_tokens == 999 and budget.errors() == []
    assert BatchPlan.from_config({"rollout_batch_size": 64}).errors()[0] == (
        "group_size=None must be a positive integer (at most 2147483647)")
    on_policy = BatchPlan.from_config({**flat, **BatchPlan.from_config(flat).on_policy_settings()})
    assert on_policy.train_batch_size == 64 and not on_policy.off_policy


def test_importing_the_plan_does_not_import_torch() -> None:
    code = "import sys, grpo.training.batch_plan; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
