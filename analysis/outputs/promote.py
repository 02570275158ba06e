"""Promote the top-K configs of a sweep, plus the on-policy baseline, to a Hydra experiment.

Hydra's basic sweeper takes the cartesian product of ``hydra.sweeper.params``, so an explicit
list of configs is swept through one generated config group: each config becomes
``<conf>/promoted/<NAME>/<option>.yaml``, a ``# @package _global_`` config, and the preset
``<conf>/experiment/promoted/<NAME>.yaml`` sets ``experiment_name``, ``n_grpo_steps`` and
``hydra.sweeper.params: {+promoted/<NAME>: top1,...,on_policy}``; ``-m
+experiment=promoted/<NAME>`` runs them. Promoted presets live in their own folder, so none can
replace a shipped preset (``conf/experiment/*.yaml``, which others include); a name already
promoted is refused unless ``overwrite`` is asked for, and ``steps`` obeys ``n_grpo_steps``'s
rule (:mod:`grpo.config.rules`). Options are named ``top<rank>`` and ``on_policy``, not ``0, 1, ...``: Hydra parses
``+promoted/<NAME>=0`` as an integer and rejects it as a config group choice.

An option file reproduces what its source run's config is: the swept values, and what else the
run had that the project's defaults (composed from ``<conf>``) do not give -- the choices of
config groups, as ``override /<group>: <choice>`` defaults, and config values -- such as the
``loss`` of the source sweep's experiment preset. What only says how the source sweep ran its
configs is not carried (:func:`grpo.run.run_config.defines_config`: its steps, pruning,
evaluation cadence, health guards, cluster, logging, seed, race; the presets
:data:`grpo.config.keys.PRESET_GROUPS`): the focused sweep's own settings rule there, so that a
broad pass's pruner or 50-step evaluation cadence never reaches it. The focused sweep's reports
name each promoted config by the values its option sets, as do its watch, its summary and its
dry run (:mod:`analysis.names.config_names`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf

from analysis.decisions.race.looks import still_in
from analysis.decisions.ranking import Criterion, on_policy_baseline, rank
from analysis.names.formatting import format_value
from analysis.readers.collect import LABEL, Collection
from grpo.config.keys import PRESET_GROUPS, PROMOTED_GROUP
from grpo.config.rules import rule_for
from grpo.run.files import atomic_write_text
from grpo.run.run_config import defines_config
from grpo.training.batch_plan import BatchPlan

NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]+")
PRESET_GROUP = f"experiment/{PROMOTED_GROUP}"
"""Where (under the config directory) promoted presets are written: `+experiment=promoted/<NAME>`."""
MAX_NAME = 100
"""The longest preset name (a file name: most filesystems allow 255 bytes)."""


@dataclass(frozen=True)
class Promotion:
    """The written preset, its option files, what each option is (``"label"``), the configs
    that could still be the best besides the first (label -> the comparison) and how sure the
    pick is (``verdicts``), as :func:`analysis.decisions.ranking.rank` reports."""

    preset: Path
    options: list[Path]
    descriptions: list[str]
    near_ties: dict[str, str] = field(default_factory=dict)
    verdicts: list[str] = field(default_factory=list)


@dataclass
class Settings:
    """Config groups to select (``override``: already in the defaults list, else appended)
    and dotted config values, as an option file sets them."""

    override: dict[str, str] = field(default_factory=dict)
    append: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    def to_yaml(self) -> str:
        """The body of a ``_global_`` config file setting these."""
        body = OmegaConf.create()
        defaults = [{f"override /{g}": c} for g, c in self.override.items()]
        defaults += [{f"/{g}": c} for g, c in self.append.items()]
        if defaults:
            body.defaults = defaults
        for key, value in self.values.items():
            OmegaConf.update(body, key, value, force_add=True)
        return OmegaConf.to_yaml(body)


def _under(key: str, roots: Iterable[str], sep: str) -> bool:
    return any(key == root or key.startswith(root + sep) for root in roots)


def _carried(key: str, swept: Iterable[str], sep: str) -> bool:
    """Whether a config group (``sep`` ``/``) or dotted key (``.``) of the source run is carried:
    part of what its config is, and not a swept key (the option sets those itself)."""
    return (key.split("/")[0] not in PRESET_GROUPS and defines_config(key)
            and not _under(key, swept, sep))


def _leaves(node: Any, key: str = "") -> dict[str, Any]:
    """Dotted keys of the values of a nested dict (lists and empty dicts are values)."""
    if isinstance(node, dict) and node:
        return {leaf: value for k, child in node.items()
                for leaf, value in _leaves(child, f"{key}.{k}" if key else str(k)).items()}
    return {key: node}


def carried_settings(run_dir: Path, conf_dir: Path, swept: Iterable[str]) -> Settings:
    """What the run in ``run_dir`` had beyond the defaults composed from ``conf_dir`` that defines
    its config (:func:`_carried`), except the ``swept`` keys."""
    hydra_file, config_file = run_dir / ".hydra" / "hydra.yaml", run_dir / ".hydra" / "config.yaml"
    if not config_file.is_file():
        return Settings()
    choices = OmegaConf.load(hydra_file).hydra.runtime.choices if hydra_file.is_file() else {}
    swept = list(swept)
    try:
        with initialize_config_dir(config_dir=str(conf_dir.resolve()), version_base=None):
            base = compose("config", return_hydra_config=True).hydra.runtime.choices
            groups = {g: c for g, c in choices.items() if c is not None and base.get(g) != c
                      and _carried(g, swept, "/")}
            defaults = compose("config", overrides=[
                f"{'' if g in base else '+'}{g}={c}" for g, c in groups.items()])
    except HydraException as error:
        raise ValueError(f"cannot compose {run_dir}'s config groups from {conf_dir}: {error}"
                         ) from None
    theirs = _leaves(OmegaConf.to_container(defaults, resolve=False))
    mine = _leaves(OmegaConf.to_container(OmegaConf.load(config_file), resolve=False))
    missing = object()
    return Settings(
        override={g: c for g, c in groups.items() if g in base},
        append={g: c for g, c in groups.items() if g not in base},
        values={k: v for k, v in mine.items()
                if _carried(k, swept, ".") and theirs.get(k, missing) != v},
    )


def _python(value: Any) -> Any:
    """A pandas/numpy scalar as a Python one; integral floats (from NaN-padded columns) as int."""
    value = value.item() if hasattr(value, "item") else value
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _baseline(collection: Collection, best: str) -> tuple[str, dict[str, Any]] | None:
    """The sweep's on-policy config closest to ``best`` or, without one, one derived from it."""
    existing = on_policy_baseline(collection, best)
    if existing is not None:
        return existing, collection.configs[existing]
    runs = collection.runs[collection.runs[LABEL] == best]
    rollouts = runs["rollout_batch_size"].dropna()
    if rollouts.empty:
        return None
    plan = BatchPlan.from_config({**runs.iloc[0].to_dict(), "rollout_batch_size": rollouts.iloc[0]})
    on_policy = {key: _python(value) for key, value in plan.on_policy_settings().items()}
    config = {**collection.configs[best], **on_policy}
    label = ", ".join(f"{k}={format_value(v)}" for k, v in config.items())
    return f"{label} (not in the sweep; derived from the best config)", config


@dataclass(frozen=True)
class _Option:
    name: str
    config: dict[str, Any]
    source: Path
    description: str


def _options(collection: Collection, chosen: list[str], descriptions: list[str]
             ) -> list[_Option]:
    """The chosen configs, then the on-policy baseline when it is not one of them."""
    def source(label: str) -> Path:
        return Path(collection.runs.loc[collection.runs[LABEL] == label, "run_dir"].iloc[0])

    options = [_Option(f"top{rank}", collection.configs[label], source(label), text)
               for rank, (label, text) in enumerate(zip(chosen, descriptions, strict=True), 1)]
    baseline = _baseline(collection, chosen[0])
    if baseline is None:
        return options
    label, config = baseline
    tag = "  (on-policy baseline)"
    for i, option in enumerate(options):
        if option.config == config:
            options[i] = _Option(option.name, config, option.source, option.description + tag)
            return options
    run_label = label if label in collection.configs else chosen[0]
    return [*options, _Option("on_policy", config, source(run_label), label + tag)]


def check_arguments(name: str, top_k: int, steps: int) -> None:
    """Refuse (ValueError, naming the option) a preset name, top-K or step count out of range;
    asked before the sweep is read."""
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"--name {name!r} must match {NAME_PATTERN.pattern}")
    if len(name) > MAX_NAME:
        raise ValueError(f"--name is {len(name)} characters long; give a name of at most {MAX_NAME}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"--top-k is {top_k}; give the number of configs to promote, at least 1")
    problem = rule_for("n_grpo_steps").problem(steps)
    if problem:
        raise ValueError(f"--steps: {rule_for('n_grpo_steps').message('n_grpo_steps', steps, problem)}")


def promote(collection: Collection, top_k: int, criterion: Criterion, name: str,
            steps: int = 200, conf_dir: Path = Path("conf"), borrow: Path | bool = True,
            overwrite: bool = False) -> Promotion:
    """Write the preset and option files for the top ``top_k`` configs by ``criterion`` (the
    ranking of :func:`analysis.decisions.ranking.rank`, which the study chain picks its winners by: of a
    race, among the configs still in at its last look as its runs say, :func:`analysis.decisions.race.looks.still_in`;
    ``borrow``: where a one-seed sweep's seed variance comes from, as ``rank`` takes it);
    ``overwrite``: replace a promotion of the same ``name``, else it is refused."""
    check_arguments(name, top_k, steps)
    preset_path = conf_dir / PRESET_GROUP / f"{name}.yaml"
    option_dir = conf_dir / PROMOTED_GROUP / name
    linked = [p for p in (preset_path, preset_path.parent, option_dir, option_dir.parent) if p.is_symlink()]
    if linked:
        raise ValueError(f"{linked[0]} is a symbolic link: promote writes only inside {conf_dir} "
                         "and never through a link; remove the link (`rm` it, not what it points "
                         "to) or give another --name")
    taken = [p for p in (preset_path, option_dir) if p.exists() or p.is_symlink()]
    if taken and not overwrite:
        raise ValueError(f"a promotion named {name} exists ({', '.join(map(str, taken))}); give "
                         "another --name, or --overwrite to replace it")
    kept, race_notes = still_in(collection)
    left = [label for label in collection.labels if kept is not None and label not in kept]
    ranking = rank(collection, criterion, labels=kept, borrow=borrow)
    ranked = ranking.table
    if ranked.empty:
        raise ValueError(f"no config has a {criterion} to rank by (and no run stopped early)")
    chosen = list(ranked.index[:top_k])
    estimates = ranking.uncertainty.estimates if ranking.uncertainty else {}
    intervals = {label: e.interval() for label, e in estimates.items()}
    options = _options(collection, chosen, [
        f"{label}  [{criterion}={ranked.loc[label, criterion]:.4f}"
        + (f", 95% interval {intervals[label]}" if intervals.get(label) else "") + "]"
        for label in chosen])

    option_dir.mkdir(parents=True, exist_ok=True)
    for stale in option_dir.glob("*.yaml"):
        if stale.is_file() or stale.is_symlink():  # a link is removed, not what it points to
            stale.unlink()
    paths = []
    for option in options:
        settings = carried_settings(option.source, conf_dir, collection.label_keys)
        for key, value in option.config.items():
            if key in collection.group_keys:
                settings.override[key] = value
            else:
                settings.values[key] = value
        path = option_dir / f"{option.name}.yaml"
        atomic_write_text(path, f"# @package _global_\n# {option.description}\n"
                                f"# carried from {option.source}\n" + settings.to_yaml())
        paths.append(path)

    sources = ", ".join(str(s.path) for s in collection.sweeps)
    header = [
        "# @package _global_",
        f"# Generated by `python -m analysis promote` from sweep(s): {sources}",
        f"# Criterion: {criterion} (mean over seeds at GRPO step {ranking.at_step}, the largest"
        " step every ranked config reached; configs with a run stopped early (collapsed,"
        " diverged, pruned) excluded),",
        f"# top {len(chosen)} config(s) plus the on-policy baseline, swept as +promoted/{name}"
        " (each option also sets what its source run had beyond the conf defaults):",
        *(f"#   {option.name}: {option.description}" for option in options),
        *(f"# {label}: {why} (top1)" for label, why in ranking.near_ties.items()),
        *(f"# {line}" for line in ranking.verdict_lines()),
        *([f"# Left by the race at its looks (as its runs say), not ranked: {', '.join(left)}"]
          if left else []),
        *(f"# warning: {note}" for note in race_notes),
        f"# Run: -m +experiment=promoted/{name}",
    ]
    if not any(option.description.endswith("(on-policy baseline)") for option in options):
        header.append("# No on-policy baseline: the sweep has none and no rollout_batch_size.")
    preset = OmegaConf.create({
        "experiment_name": name,
        "n_grpo_steps": steps,
        "hydra": {"sweeper": {"params": {
            f"+promoted/{name}": ",".join(option.name for option in options)
        }}},
    })
    preset_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(preset_path, "\n".join(header) + "\n" + OmegaConf.to_yaml(preset))
    return Promotion(preset_path, paths, [option.description for option in options],
                     ranking.near_ties, [*ranking.verdict_lines(),
                                         *(f"warning: {note}" for note in race_notes)])
