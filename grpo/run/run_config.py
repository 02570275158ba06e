"""The config a run was trained with, stored in each checkpoint, and what a resume may change.

Each checkpoint holds `run_config.json` (listed in its manifest): `{"format": "grpo-run-config/1",
"config": <the resolved config, plain JSON>, "hydra": {<name>: <text>}}`, the texts being the run's
`.hydra/config.yaml`, `overrides.yaml` and `hydra.yaml` as they were when it was written.

The run's record of its config, `<run>/.hydra/` (Hydra's three files, so that Hydra's tools and
`make plots` read it), is written by the run itself (`write_record`), never by Hydra
(`hydra.output_subdir: null`): only once the run's lock is held and its resume accepted, so that a
refused launch or a dry run pointed at a run directory rewrites nothing of what trained.

A resume compares the resolved config it was launched with against the checkpoint's
(`compare`): a key of `MAY_CHANGE` may differ (where and how the run runs, is watched, logged,
priced and stopped; `n_grpo_steps` not below the checkpoint's step), and each such change is recorded in
`<run>/config_changes.jsonl`; any other difference changes the trained curve and refuses the
resume (`ConfigChanged`, naming each key with its old and new value), before the record is
written, so that `.hydra/config.yaml` describes what was trained. A reader that finds the record
and the newest checkpoint's stored texts apart (a run directory written by an older version, or
edited) reads the checkpoint's (`trained_record`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from grpo.run.checkpoint_names import checkpoint_dirs, checkpoint_step
from grpo.run.files import RunDirError, append_line, atomic_write_text, read_json, read_yaml, subdir

RUN_CONFIG = "run_config.json"
RECORD_DIR = ".hydra"
FORMAT = "grpo-run-config/1"
HYDRA_FILES = ("config.yaml", "overrides.yaml", "hydra.yaml")
MAX_HYDRA_FILE_BYTES = 1 << 20
"""Largest `.hydra/` file stored with a checkpoint (Hydra's are a few kB)."""
MAY_CHANGE = (
    "n_grpo_steps", "dry_run", "experiment_name", "logging.", "cluster.", "paths.", "health.",
    "checkpoint.checkpoint_every", "checkpoint.keep_last", "checkpoint.save_final_model",
    "checkpoint.allow_fresh_start", "checkpoint.allow_metrics_gap", "eval.n_saved_samples",
    "rollout.stale_check_every", "pruning.", "budget.", "model.cost.", "model.parameters",
    "analysis.", "confirm.", "zero_variance.expected_extra",
)
"""Keys (a trailing `.`: every key under it) whose value a resume may change: none of them
changes the weights, the sampled rollouts or the evaluation of the steps already trained (a
confirmation, `confirm.`, evaluates the final policy after the last step)."""
NOT_A_CONFIG = ("seed", "eval.", "race.", "hydra.")
"""Keys that, with those of `MAY_CHANGE` (where and how a run runs, how long, how it is logged,
priced, pruned and stopped), say how a config was run and measured rather than what it is: its
seed, its evaluation (cadence, problems, sampling) and a race's settings (`defines_config`)."""


ABSENT = "(absent)"
"""The value shown for a key one of the two configs does not have."""
ADDED = {"eval.samples_per_problem": 1, "off_policy.staleness": 0, "off_policy.correction": "tis",
         "off_policy.is_cap": 2.0, "off_policy.correct_fresh": False, "data.holdout_size": 0,
         "reward.name": "graded", "zero_variance.name": "keep", "retire.pass_rate": None,
         "overlong.filter": False, "overlong.buffer": 0, "overlong.penalty_factor": 1.0,
         "kl.beta": 0.0, "std_norm.scope": "group"}
"""Keys added after runs were trained without them, with the value that does what those runs did:
a run resumed with that value is not refused for a key its checkpoint lacks."""


class ConfigChanged(RunDirError):
    """A resume launched with values that would change the trained curve."""


@dataclass
class Comparison:
    """What differs between the trained config and the new one, as `{key: (old, new)}`."""

    refused: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    allowed: dict[str, tuple[Any, Any]] = field(default_factory=dict)


def resolved(cfg: DictConfig) -> dict[str, Any]:
    """The run's config with every interpolation resolved, as plain JSON data (no `hydra` node:
    a sweeper's composed job has one, with values only the launch fills in)."""
    return OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]),
                                  resolve=True)


def _leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> value of each leaf of nested dicts (lists are leaves)."""
    if not isinstance(node, dict):
        return {prefix: node}
    leaves: dict[str, Any] = {}
    for key, value in node.items():
        leaves.update(_leaves(value, f"{prefix}.{key}" if prefix else str(key)))
    return leaves


def _listed(key: str, keys: tuple[str, ...]) -> bool:
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in keys)


def defines_config(key: str) -> bool:
    """Whether `key`, a dotted config key (`off_policy.epochs`) or a config group (`loss`,
    `pruning`, `hydra/sweeper`), is part of what a config is -- its hyperparameters, model, data,
    prompt and engine -- rather than the budget machinery of the sweep that ran it (`MAY_CHANGE`,
    `NOT_A_CONFIG`): what `python -m analysis promote` carries to the next study and what names
    a promoted config."""
    dotted = key.replace("/", ".")
    return not any(_listed(k, MAY_CHANGE) or _listed(k, NOT_A_CONFIG) for k in (dotted, dotted + "."))


def sweepable(key: str) -> bool:
    """Whether a sweep may give `key` several values: the seed, or a key that `defines_config`
    (any other is how a config is run, measured, logged or stopped: one value a sweep)."""
    return key.lstrip("+") == "seed" or defines_config(key.lstrip("+"))


def _same(old: Any, new: Any) -> bool:
    if isinstance(old, float) and isinstance(new, float) and math.isnan(old) and math.isnan(new):
        return True
    return type(old) is type(new) and old == new or (
        isinstance(old, int | float) and isinstance(new, int | float)
        and not isinstance(old, bool) and not isinstance(new, bool) and old == new)


def compare(trained: dict[str, Any], new: dict[str, Any], step: int) -> Comparison:
    """Sort the differences of `new` from `trained` (resolved configs) into refused and allowed,
    for a resume after GRPO step `step`. A key present on one side only is refused unless it
    may change, or is a key of `ADDED` at its old behaviour's value; `n_grpo_steps` below `step`
    is refused."""
    old_leaves, new_leaves = _leaves(trained), _leaves(new)
    result = Comparison()
    for key in sorted(old_leaves.keys() | new_leaves.keys()):
        old, new_value = old_leaves.get(key, ABSENT), new_leaves.get(key, ABSENT)
        if _same(old, new_value) or (old == ABSENT and key in ADDED and _same(ADDED[key], new_value)):
            continue
        too_few = key == "n_grpo_steps" and not (isinstance(new_value, int) and new_value >= step)
        target = result.allowed if _listed(key, MAY_CHANGE) and not too_few else result.refused
        target[key] = (old, new_value)
    return result


def run_config_text(cfg: DictConfig, run_dir: Path) -> str:
    """The `run_config.json` of a checkpoint written now (see the module docstring)."""
    hydra_texts = {}
    for name in HYDRA_FILES:
        path = run_dir / RECORD_DIR / name
        if path.is_file() and not path.is_symlink() and path.stat().st_size <= MAX_HYDRA_FILE_BYTES:
            hydra_texts[name] = path.read_text(errors="replace")
    return json.dumps({"format": FORMAT, "config": resolved(cfg), "hydra": hydra_texts}) + "\n"


def write_record(run_dir: Path, texts: dict[str, str]) -> None:
    """Write the run's record `<run_dir>/.hydra/<name>` for each of `HYDRA_FILES` in `texts`, each
    file atomically; the caller holds the run's lock and has accepted its resume."""
    record = subdir(run_dir, RECORD_DIR)
    for name in HYDRA_FILES:
        if name in texts:
            atomic_write_text(record / name, texts[name])


def trained_record(run_dir: Path) -> tuple[str, dict[str, str]] | None:
    """`(checkpoint name, {file name: text})`: the `.hydra/` texts stored with the newest
    checkpoint that stores any (read, not verified: its weights are not hashed); None when no
    checkpoint does."""
    for checkpoint, payload in _stored_configs(run_dir):
        texts = {name: text for name, text in payload["hydra"].items()
                 if name in HYDRA_FILES and isinstance(text, str)}
        if texts:
            return checkpoint.name, texts
    return None


def stored(checkpoint: Path) -> dict[str, Any] | None:
    """The `run_config.json` of a verified checkpoint; None when it has none (written before
    configs were stored) or it is not one (the caller says so)."""
    path = checkpoint / RUN_CONFIG
    if not path.exists():
        return None
    try:
        payload = read_json(path)
    except ValueError:
        return None
    if not (isinstance(payload, dict) and payload.get("format") == FORMAT
            and isinstance(payload.get("config"), dict) and isinstance(payload.get("hydra"), dict)):
        return None
    return payload


def _show(value: Any) -> str:
    return ABSENT if value == ABSENT else json.dumps(value)


def _stored_configs(run_dir: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Each checkpoint directory of `run_dir` (no link) that stores a config, newest first, with
    its `run_config.json` (read, not verified)."""
    for checkpoint in checkpoint_dirs(run_dir):
        payload = stored(checkpoint) if checkpoint.is_dir() and not checkpoint.is_symlink() else None
        if payload is not None:
            yield checkpoint, payload


def _refusal(run_dir: Path, checkpoint: Path, comparison: Comparison) -> str:
    """The message that refuses a resume from `checkpoint` for `comparison.refused`."""
    lines = "\n".join(f"  - {key}: {_show(old)} -> {_show(new)}"
                      for key, (old, new) in comparison.refused.items())
    return (
        f"refusing to resume {run_dir} (checkpoint {checkpoint.name}) with a changed config; "
        f"these keys change the trained curve (trained -> launched):\n{lines}\n"
        "Launch it again with the trained values to resume it, or start a new run in a new "
        "directory for the new values (drop hydra.run.dir / hydra.sweep.dir, or change "
        "experiment_name). Its .hydra/ files still describe the trained config."
    )


def resume_refusal(cfg: DictConfig, run_dir: Path) -> str | None:
    """What a launch of `cfg` into `run_dir` would be refused with (`check_resume` against the
    newest checkpoint that stores a config, read, not verified), else None; reads only. The
    sweeper and the dry runs ask it before anything is written; the run itself asks
    `check_resume` of the checkpoint it verified."""
    for checkpoint, payload in _stored_configs(run_dir):
        comparison = compare(payload["config"], resolved(cfg), checkpoint_step(checkpoint))
        return _refusal(run_dir, checkpoint, comparison) if comparison.refused else None
    return None


def check_resume(cfg: DictConfig, run_dir: Path, checkpoint: Path, step: int) -> dict[str, tuple[Any, Any]]:
    """Refuse (ConfigChanged) a resume from `checkpoint` (after step `step`) whose config differs
    from the trained one in a key that changes the curve; record the allowed changes. Returns the
    allowed changes ({} also when the checkpoint stores no config, with a warning by the caller)."""
    payload = stored(checkpoint)
    if payload is None:
        return {}
    comparison = compare(payload["config"], resolved(cfg), step)
    if comparison.refused:
        raise ConfigChanged(_refusal(run_dir, checkpoint, comparison))
    if comparison.allowed:
        append_line(run_dir / "config_changes.jsonl", json.dumps({
            "resumed_after_step": step,
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "changes": {key: [old, new] for key, (old, new) in comparison.allowed.items()},
        }))
    return comparison.allowed


RACE_SEED = "seed"
"""The one key in which the runs of one config of a race differ (each wave has its own)."""


def without_seed(overrides: Sequence[str]) -> list[str]:
    """A job's overrides less any `seed=` (a race gives each wave its seed; a check seed is its
    config with another)."""
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+") != RACE_SEED]


def curve_differences(trained: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The keys in which two resolved configs give different curves, `{key: (trained, new)}`:
    those `compare` refuses for a resume, and `n_grpo_steps` (a run of more steps is another run
    to compare, not the same one continued)."""
    refused = compare(trained, new, step=0).refused
    old_steps, new_steps = trained.get("n_grpo_steps", ABSENT), new.get("n_grpo_steps", ABSENT)
    if not _same(old_steps, new_steps):
        refused["n_grpo_steps"] = (old_steps, new_steps)
    return dict(sorted(refused.items()))


@lru_cache(maxsize=4096)
def _changes_curve(key: str) -> bool:
    """Whether two resolved configs that differ in dotted `key` give different curves: the keys
    `curve_differences` reports (every key but those of `MAY_CHANGE`, and `n_grpo_steps`)."""
    return key == "n_grpo_steps" or not _listed(key, MAY_CHANGE)


def _coarse(value: Any) -> Any:
    """`value` with every number (a bool too) a float and NaN a text, in lists and sections too:
    two values `_same` calls the same (`1` and `1.0`, two NaNs; in a list, `True` and `1`) come
    out equal."""
    if isinstance(value, bool | int | float):
        return "nan" if value != value else float(value)
    if isinstance(value, list):
        return [_coarse(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _coarse(v) for k, v in value.items()}
    return value


def _unresolved(value: Any) -> bool:
    """Whether a value of an unresolved container holds what OmegaConf resolves: an
    interpolation (`${`, escaped ones too) or a missing value (`???`), in a list too."""
    if isinstance(value, str):
        return "${" in value or value == "???"
    if isinstance(value, list):
        return any(map(_unresolved, value))
    if isinstance(value, dict):
        return any(map(_unresolved, value.values()))
    return False


def unresolved_tree(cfg: DictConfig) -> dict[str, Any]:
    """The composed `cfg` as plain containers, unresolved, without Hydra's section: what one
    to_container of the whole config gives, in a fifth less time."""
    return {key: OmegaConf.to_container(node, resolve=False) if isinstance(node, DictConfig | ListConfig)
            else node for key, node in cfg.items_ex(resolve=False) if key != "hydra"}


def _resolved_leaves(cfg: DictConfig, keep: Callable[[str], bool]) -> dict[str, Any]:
    """Dotted key -> value of each leaf of the composed `cfg` (no `hydra` node), read from its
    unresolved container: a value that holds an interpolation (`${`) or is missing (`???`) is
    resolved where `keep(key)`, else left as written. Resolving the whole config (`resolved`) takes
    three times as long: most values are plain."""
    tree = unresolved_tree(cfg)
    leaves: dict[str, Any] = {}
    for key, value in _leaves(tree).items():
        if _unresolved(value) and keep(key):
            value = OmegaConf.select(cfg, key, throw_on_missing=False, throw_on_resolution_failure=False)
            if isinstance(value, DictConfig | ListConfig):
                value = OmegaConf.to_container(value, resolve=True)
        leaves.update(_leaves(value, key))
    return leaves


def curve_fingerprint(cfg: DictConfig) -> str:
    """A text that two composed configs whose resolved configs have no `curve_differences` (one
    run: the same config and seed) share: their keys that change a curve (`_changes_curve`), each
    value coarsened (`_coarse`), a key of `ADDED` at its old behaviour's value left out. Configs
    with different texts are different runs; configs with one text may still be two (it calls
    `True` and `1.0` the same), which `repeated_runs` asks `curve_differences`."""
    entries = [(key, _coarse(value)) for key, value in sorted(_resolved_leaves(cfg, _changes_curve).items())
               if _changes_curve(key) and not (key in ADDED and _same(ADDED[key], value))]
    return json.dumps(entries, default=repr)


def repeated_runs(cfgs: Sequence[DictConfig]) -> list[list[int]]:
    """The sets of two or more of the composed configs `cfgs` (their indices, in order; the sets in
    order of their first) that are one run: no `curve_differences` between their resolved
    configs (the same config and seed; where they run, are logged and stopped may differ). Each
    config's `curve_fingerprint` sorts them; only configs that share one are resolved and
    compared, so a sweep whose jobs all differ costs one fingerprint a job."""
    buckets: dict[str, list[int]] = {}
    for index, cfg in enumerate(cfgs):
        buckets.setdefault(curve_fingerprint(cfg), []).append(index)
    found = []
    for members in buckets.values():
        configs = {index: resolved(cfgs[index]) for index in members} if len(members) > 1 else {}
        while len(members) > 1:
            first = members[0]
            same = [first, *(i for i in members[1:] if not curve_differences(configs[first], configs[i]))]
            members = [i for i in members if i not in same]
            if len(same) > 1:
                found.append(same)
    return sorted(found)


def describe_differences(differences: dict[str, tuple[Any, Any]], limit: int = 6) -> str:
    """``learning_rate: 1e-05 -> 0.03, seed: 0 -> 1`` (the first `limit`, then how many more)."""
    shown = [f"{key}: {_show(old)} -> {_show(new)}" for key, (old, new) in list(differences.items())[:limit]]
    more = len(differences) - limit
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def trained_config(run_dir: Path) -> dict[str, Any] | None:
    """The resolved config the run in `run_dir` trained with: the one stored with its newest
    checkpoint (read, not verified), else its `.hydra/config.yaml` resolved now; None where
    neither can be read (no record, junk, an interpolation that does not resolve)."""
    for _, payload in _stored_configs(run_dir):
        return payload["config"]
    path = run_dir / RECORD_DIR / "config.yaml"
    if not path.is_file() or path.is_symlink():
        return None
    try:
        data = read_yaml(path)
        config = OmegaConf.to_container(OmegaConf.create(data), resolve=True) if isinstance(data, dict) else None
    except Exception:  # noqa: BLE001 -- a crafted record of any kind is "unreadable", said by the caller
        return None
    return config if isinstance(config, dict) else None
