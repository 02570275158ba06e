"""How a config is named by every output that lists configs or jobs: the report and the ranking
(:mod:`analysis.readers.collect`'s config labels), the per-job lines of ``make watch`` and of the sweep's
summary (:mod:`analysis.outputs.progress`) and the dry run's job list
(:mod:`hydra_plugins.grpo_sweeps.validating_sweeper`), without pandas.

A config is named by its swept keys' values. A promoted preset (``python -m analysis promote``)
sweeps one config group, ``+promoted/<NAME>=top1,...,on_policy``, whose options are whole
configs: such a config is named by what its option sets, the config groups and values that differ
between the configs and define a config (:func:`grpo.run.run_config.defines_config`; a group's own
values are named by its choice), ``off_policy.epochs=2, train_batch_size=64``, never ``top1``;
so is a shipped list of variants (``variants/field_axes=base,gspo,...``, ``conf/variants/``).
What a job sets is read from its composed config (the dry run) or its run's ``.hydra/`` record;
a job with neither yet (a job not started) keeps its override.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from analysis.names.formatting import format_value
from grpo.config.keys import PRESET_GROUPS, PROMOTED_GROUP, VARIANTS_GROUP
from grpo.config.rules import leaf_keys
from grpo.run.run_config import defines_config
from grpo.training.batch_plan import config_value

Choices = Mapping[str, str]
"""A run's config group choices (``hydra.runtime.choices``: ``loss`` -> ``grpo_clip``)."""
Config = Mapping[str, Any]
"""A run's config as plain data (``.hydra/config.yaml``, interpolations unresolved)."""


def value_of(choices: Choices, config: Config | None, key: str) -> Any:
    """``key`` as a run had it: a config group's choice (``loss``: ``grpo_clip``), else its config
    value, an interpolation resolved; None where it has none (or a section, not a value)."""
    if key in choices:
        return choices[key]
    value = config_value(config, key)
    if isinstance(value, str) and "${" in value:  # an interpolation: let OmegaConf resolve it
        value = OmegaConf.select(OmegaConf.create(dict(config or {})), key, default=None,
                                 throw_on_resolution_failure=False)
    return None if isinstance(value, dict | list | DictConfig | ListConfig) else value


def config_label(values: Mapping[str, Any]) -> str:
    """A config's label from its naming keys' values: ``off_policy.epochs=2, train_batch_size=64``."""
    return ", ".join(f"{key}={format_value(value)}" for key, value in values.items())


def lists_configs(key: str) -> bool:
    """Whether ``key`` (an override's key, ``+`` or ``~`` stripped) is a group whose options are
    whole configs: a promoted preset's, or a shipped list of variants (``variants/field_axes``)."""
    return key.split("/")[0] in (PROMOTED_GROUP, VARIANTS_GROUP)


def naming_keys(key: str, runs: Sequence[tuple[Choices, Config | None]]) -> list[str]:
    """The keys that name the configs of a swept ``key`` over ``runs`` (each run's choices and
    config): ``[key]`` itself, but for a group that lists configs (:func:`lists_configs`) the config groups and values its options
    set that differ between the runs and define a config, in sorted order
    (``off_policy.epochs``, ``train_batch_size``); ``[key]`` where no run's config says."""
    configured = [(choices, config) for choices, config in runs
                  if config is not None and key in choices]
    if not lists_configs(key) or not configured:
        return [key]

    def varies(get: Any) -> bool:
        return len({repr(get(choices, config)) for choices, config in configured}) > 1

    groups = {g for choices, _ in configured for g in choices
              if g != key and g.split("/")[0] not in PRESET_GROUPS and defines_config(g)
              and varies(lambda choices, config, g=g: choices.get(g))}
    values = {k for _, config in configured for k in leaf_keys(dict(config))
              if defines_config(k) and not any(k.startswith(g.replace("/", ".") + ".") for g in groups)
              and varies(lambda choices, config, k=k: config_value(config, k))}
    return sorted(groups | values) or [key]


def job_labels(overrides: Sequence[Sequence[str]],
               runs: Sequence[tuple[Choices, Config | None] | None]) -> list[str]:
    """Each job's label: its ``overrides`` to show (``learning_rate=1e-4 seed=0``), a promoted
    group's override named by the values its option sets (:func:`naming_keys` over every job whose
    config is known, ``runs``: None where it is not) as the report labels it
    (:func:`config_label`: ``off_policy.epochs=2, train_batch_size=64 seed=0``), in its place."""
    known = [run for run in runs if run is not None]
    keys: dict[str, list[str]] = {}
    labels = []
    for job, run in zip(overrides, runs, strict=True):
        words = []
        for override in job:
            key = override.split("=", 1)[0].lstrip("+~")
            if not lists_configs(key) or run is None or key not in run[0]:
                words.append(override)
                continue
            names = keys.setdefault(key, naming_keys(key, known))
            words.append(override if names == [key] else
                         config_label({name: value_of(*run, name) for name in names}))
        labels.append(" ".join(words))
    return labels


BORROW_KEY = "analysis.seed_variance_from"
"""The config key naming the sweep whose seed variance a one-seed sweep borrows."""
