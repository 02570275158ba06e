"""Every leaf of every preset's composed config, given a null, a value of the wrong type, an empty
and a huge value, is refused by the dry run's validator with the key named, or is one of the
documented values of `ACCEPTED`; the validator never raises.

The walk is in-process: `check_config` is what both dry runs (launch.py with and without -m) call
first, and a config it passes is priced as they price it (`grpo.sweep.cost.estimate`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import stand_in_real_paths
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf, open_dict

from grpo.config.rules import REGISTRY_KEYS
from grpo.config.validation import check_config
from grpo.sweep.cost import estimate

CONF = Path(__file__).resolve().parents[1] / "conf"
PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
CPU_PRESETS = ("demo", "toy", "overlap_toy")
HUGE_TEXT = "x" * 100_000
HUGE_NUMBER = 10**30

ACCEPTED: dict[tuple[str, str], str] = {
    ("optimizer.max_grad_norm", "null"): "no gradient clipping",
    ("optimizer.max_grad_norm", "huge"): "a clip that never bites: no clipping",
    ("budget.gpu_hours", "null"): "no GPU-hour limit",
    ("race.max_seeds", "null"): "no race: the grid runs as swept (the default)",
    ("race.budget_gpu_hours", "null"): "no GPU-hour limit on the race's waves",
    ("model.micro_batch_tokens", "null"): "micro_batch_size sequences a micro-batch",
    ("model.warmup_target_accuracy", "null"): "the tiny model warms up for warmup_steps only",
    ("model.attn_implementation", "null"): "transformers' default attention kernel",
    ("model.build", "null"): "a downloaded model at model.path (its config.json is checked)",
    ("logging.wandb_entity", "null"): "your default wandb entity",
    ("cluster.partition", "null"): "the cluster's default partition",
    ("cluster.account", "null"): "no SLURM account",
    ("cluster.qos", "null"): "the default quality of service",
    ("cluster.mail_user", "null"): "no mail at the detached driver's end",
    ("analysis.seed_variance_from", "null"): "no seed variance borrowed (the default)",
    ("analysis.assumed_seed_sd", "null"): "no power in the dry run, which says how to get it (the default)",
    ("confirm.policy_from", "null"): "the run trains its own policy (the default; a confirmation "
                                     "without retraining names a run's final model)",
    ("retire.pass_rate", "null"): "no prompt is retired (the default)",
    ("prompt.stop", "empty"): "no stop sequence: responses end at EOS or max_new_tokens",
    ("learning_rate", "huge"): "the first update diverges: the health guard stops the run as diverged",
    ("optimizer.weight_decay", "huge"): "the weights blow up: the run stops as diverged",
    ("optimizer.eps", "huge"): "Adam's steps shrink to nothing: the weights barely move",
    ("advantage_eps", "huge"): "every advantage is about 0: the weights barely move",
    ("off_policy.is_cap", "huge"): "untruncated importance weights",
    ("kl.beta", "huge"): "the KL term outweighs the reward: the policy is held near the initial "
                         "weights",
    ("overlong.penalty_factor", "huge"): "read only with overlong.buffer > 0 (the presets' 0); "
                                         "then the length penalty outweighs the reward",
    ("model.parameters", "huge"): "the dry run's memory estimate is that large",
    ("health.min_mean_response_length", "huge"): "every step is too short: the run stops as "
                                                "collapsed after health.zero_reward_patience steps",
    **{(f"model.cost.{rate}", "huge"): "the dry run's estimate is that large (and over any budget)"
       for rate in ("generate_s", "old_log_probs_s", "train_s", "step_s", "eval_s")},
}
"""(key, kind of value) -> what the run does with it: the only bad-looking values that pass."""


def leaves(node: dict, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name, value in node.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict) and value:
            yield from leaves(value, f"{key}.")
        else:
            yield key, value


def bad_values(value: Any) -> dict[str, Any]:
    """null, a wrong type, an empty and a huge value for a leaf holding `value`."""
    if isinstance(value, str) or value is None:
        return {"null": None, "wrong": [1], "empty": "", "huge": HUGE_TEXT}
    if isinstance(value, list):
        return {"null": None, "wrong": "x", "empty": [], "huge": list(range(10_000))}
    return {"null": None, "wrong": "x", "empty": "", "huge": HUGE_NUMBER}


def names(error: str, key: str) -> bool:
    """Whether `error` names `key` (a registry key may be named by its group: `loss=...`)."""
    return key in error or error.startswith(f"{REGISTRY_KEYS.get(key, key)}=")


def compose_preset(preset: str, tmp_path: Path) -> DictConfig:
    extra = [] if preset in CPU_PRESETS else [*stand_in_real_paths(tmp_path), "cluster=slurm"]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=[f"+experiment={preset}", *extra,
                                            f"paths.output_root={tmp_path / 'outputs'}"])


@pytest.mark.parametrize("preset", PRESETS)
def test_every_leaf_refuses_null_wrong_empty_and_huge_values_or_documents_them(
        preset: str, tmp_path: Path) -> None:
    base = compose_preset(preset, tmp_path)
    assert check_config(base).errors == []
    unnamed, accepted, tried = [], set(), 0
    for key, value in leaves(OmegaConf.to_container(base, resolve=False)):
        for kind, bad in bad_values(value).items():
            tried += 1
            cfg = copy.deepcopy(base)
            with open_dict(cfg):
                OmegaConf.update(cfg, key, bad, merge=False, force_add=True)
            errors = check_config(cfg).errors  # never raises
            if not errors:
                estimate([cfg], parallel=1)  # the dry run prices what it passes: never raises
                accepted.add((key, kind))
            elif not any(names(error, key) for error in errors):
                unnamed.append(f"{key} {kind}: {errors[0][:120]}")
    print(f"{preset}: {tried} values tried over {tried // 4} keys, {len(accepted)} accepted")
    assert unnamed == [], "refused without naming the key:\n" + "\n".join(unnamed)
    assert accepted - ACCEPTED.keys() == set(), "accepted but not documented in ACCEPTED"
    assert tried >= 300


def sections(node: dict, prefix: str = "") -> Iterator[str]:
    """Dotted keys of the non-empty sections of keys (`eval`, `model.cost`), Hydra's aside."""
    for name, value in node.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict) and value and key != "hydra":
            yield key
            yield from sections(value, f"{key}.")


def test_every_section_set_to_null_or_a_value_is_refused_naming_it(tmp_path: Path) -> None:
    """What `eval=null`, `sampling=5` or `model.cost=5` make (the command line refuses them
    first: grpo.sweep.overrides), a preset can make too: the validator names the section."""
    base = compose_preset("toy", tmp_path)
    keys = list(sections(OmegaConf.to_container(base, resolve=False)))
    assert {"eval", "sampling", "model", "model.cost", "paths", "off_policy"} <= set(keys)
    for key in keys:
        for bad in (None, 5):
            cfg = copy.deepcopy(base)
            with open_dict(cfg):
                OmegaConf.update(cfg, key, bad, merge=False, force_add=True)
            errors = check_config(cfg).errors
            assert errors and errors[0].startswith(f"{key}="), (key, bad, errors[:1])
            assert not any("please report" in e for e in errors), (key, bad, errors)


@pytest.mark.slow
@pytest.mark.parametrize(("overrides", "end"), [
    (["optimizer.max_grad_norm=null", "budget.gpu_hours=null", "model.micro_batch_tokens=null",
      "model.warmup_target_accuracy=null", "model.attn_implementation=null",
      "logging.wandb_entity=null", "prompt.stop=[]", "advantage_eps=1e30", "optimizer.eps=1e30",
      "off_policy.is_cap=1e30"], "completed"),
    (["learning_rate=1e30", "optimizer.weight_decay=1e30"], "diverged"),
    (["health.min_mean_response_length=1e30", "health.zero_reward_patience=2"], "collapsed"),
], ids=["nulls_and_harmless_huge", "diverging", "collapsing"])
def test_accepted_values_run_cleanly_as_documented(tmp_path: Path, tiny_model_dir: Path,
                                                   overrides: list[str], end: str) -> None:
    from training_runs import finish, launch, status

    run_dir = tmp_path / "run"
    returncode, output = finish(launch(run_dir, tiny_model_dir, "n_grpo_steps=3", *overrides))
    assert "Traceback" not in output, output
    assert status(run_dir)["status"] == end, output[-3000:]
    assert returncode == (0 if end == "completed" else returncode)  # a health stop is no crash
