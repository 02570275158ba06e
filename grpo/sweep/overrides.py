"""Strict command-line overrides: a key that no config or config group knows is refused.

Hydra answers a typo such as ``learning_rat=1e-5`` by suggesting ``+learning_rat=1e-5``, which it
then accepts: the key is added, nothing reads it, and the run goes ahead without the setting.
Before Hydra starts, :func:`check_overrides` composes the config the overrides select (every
option of a swept config group) and refuses each override whose key is neither a key of that
config nor a config group, naming the nearest known key (``difflib``). Hydra's own keys
(``hydra.*``, ``hydra/...`` groups, e.g. ``hydra.launcher.additional_parameters``, the documented
place for extra sbatch options) are left to Hydra, which checks them against its schemas.

Every key of the config is read by the run, so an override that empties one is refused there too,
naming it: a config group deleted or set to null (``off_policy=null``, ``~off_policy``), a key
deleted (``~seed``, ``~eval.temperature``), a section of keys set to null or a value
(``paths=null``, ``eval=null``, ``sampling=5``, ``model.cost=5``).
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf

from grpo.sweep.hydra_compat import command_line

ADDED = " (Hydra would add it and nothing would read it)"
# config groups of conf/ that are no part of a job's config, and what reads them
NOT_JOB_GROUPS = {"chain": "a chain of studies, run by `python -m chain --chain NAME` "
                           "(`make chain`), not a launch.py option"}
PREFIX = {OverrideType.ADD: "+", OverrideType.FORCE_ADD: "++", OverrideType.DEL: "~",
          OverrideType.CHANGE: ""}


def config_nodes(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every dotted key of a config with its node, inner nodes and list items included (nothing
    resolved)."""
    if isinstance(node, DictConfig):
        children = [(str(k), node._get_node(k)) for k in node.keys()]
    elif isinstance(node, ListConfig):
        children = [(str(i), node._get_node(i)) for i in range(len(node))]
    else:
        return
    for name, child in children:
        key = f"{prefix}{name}"
        yield key, child
        yield from config_nodes(child, f"{key}.")


def _groups(parent: str = "") -> Iterator[str]:
    """Every config group below ``parent`` in the initialised Hydra's search path."""
    loader = GlobalHydra.instance().config_loader()
    for name in loader.list_groups(parent):
        group = f"{parent}/{name}" if parent else name
        yield group
        yield from _groups(group)


def _is_hydra_key(override: Override) -> bool:
    return override.key_or_group == "hydra" or override.key_or_group.startswith(("hydra.", "hydra/"))


def _variants(group_overrides: Sequence[Override]) -> list[list[str]]:
    """Override lists that together compose every option of each swept config group."""
    def line(override: Override, value: str) -> str:
        return f"{PREFIX[override.type]}{override.key_or_group}={value}"

    first = [list(o.sweep_string_iterator()) if o.is_sweep_override()
             else [o.get_value_element_as_str()] for o in group_overrides]
    base = [line(o, values[0]) for o, values in zip(group_overrides, first, strict=True)]
    variants = [base]
    for i, (override, values) in enumerate(zip(group_overrides, first, strict=True)):
        variants += [base[:i] + [line(override, v)] + base[i + 1:] for v in values[1:]]
    return variants


def suggestion(override: Override, candidates: Sequence[str], groups: set[str],
               chosen: set[str]) -> str:
    """``did you mean X=value?`` with the nearest candidate (a key that takes a value, or a
    config group), else the keys of the section it names (``race.foo``: race's keys), else
    where keys are listed."""
    match = difflib.get_close_matches(override.key_or_group, candidates, n=1, cutoff=0.6)
    if not match:
        parent = override.key_or_group.rsplit(".", 1)[0]
        siblings = [c for c in candidates if c.startswith(f"{parent}.") and "." not in c[len(parent) + 1:]]
        if "." in override.key_or_group and siblings:
            return f"{parent} has {', '.join(siblings)}"
        return "`python launch.py --cfg job` prints every key"
    key = match[0]
    prefix = "+" if key in groups and key not in chosen else ""
    value = (override.input_line or "").split("=", 1)[1] if override.value_type else ""
    return f"did you mean {prefix}{key}={value}?" if value else f"did you mean {key}?"


def _values(override: Override) -> list[str]:
    """The values an override gives, as typed (several for a sweep; none for a deletion)."""
    if override.is_delete() and override.value_type is None:
        return []
    if override.is_sweep_override():
        return list(override.sweep_string_iterator())
    return [override.get_value_element_as_str()]


def _emptied_groups(parsed: Sequence[Override], is_group: Sequence[bool]) -> list[str]:
    """One message per override that deletes a config group or sets it to null."""
    loader = GlobalHydra.instance().config_loader()
    return [
        f"{o.input_line}: {o.key_or_group} is a config group whose keys the run reads; it cannot "
        f"be {'deleted' if o.is_delete() else 'null'}: choose one of its options, "
        f"{o.key_or_group}={'|'.join(loader.get_group_options(o.key_or_group))}"
        for o, group in zip(parsed, is_group, strict=True)
        if group and (o.is_delete() or "null" in _values(o))
    ]


def _emptied_keys(parsed: Sequence[Override], cfg: DictConfig, known: set[str],
                  sections: set[str]) -> list[str]:
    """One message per override that deletes a key the run reads, or sets a section of keys
    (`eval`, `model.cost`) to null or a value; `known`: every key of the composed configs."""
    errors = []
    for o in parsed:
        key = o.key_or_group
        children = sorted(k for k in known if k.startswith(f"{key}.")) if key in sections else []
        if o.is_delete() and key in sections:
            errors.append(f"{o.input_line}: {key} is a section of keys the run reads "
                          f"({', '.join(children[:4])}, ...); set its keys instead of deleting it")
        elif o.is_delete():
            value = OmegaConf.select(cfg, key, throw_on_resolution_failure=False)
            shown = f" (its value here: {key}={value})" if isinstance(value, str | int | float) else ""
            errors.append(f"{o.input_line}: the run reads {key}; deleting it stops the run on a "
                          f"missing key: set a value instead{shown}")
        elif key in sections and any(not v.startswith("{") for v in _values(o)):
            errors.append(f"{o.input_line}: {key} is a section of keys ({', '.join(children[:4])}, "
                          f"...), not a value; set its keys instead, e.g. {children[0]}=...")
    return errors


def check_overrides(overrides: Sequence[str], config_dir: Path, config_name: str) -> list[str]:
    """One message per override whose key no config or config group knows (see the module), or
    that empties what the run reads: a config group deleted or null, a key deleted, a section of
    keys (`eval`, `paths`, `model.cost`) set to null or a value.

    Overrides Hydra cannot parse or compose are left for Hydra to report.
    """
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return []
    parsed = [o for o in parsed if not _is_hydra_key(o)]
    misplaced = [f"{o.input_line}: {NOT_JOB_GROUPS[o.key_or_group]}" for o in parsed
                 if o.key_or_group in NOT_JOB_GROUPS]
    if misplaced:
        return misplaced
    if not parsed:
        return []
    with initialize_config_dir(config_dir=str(Path(config_dir).absolute()), version_base="1.3"):
        groups = set(_groups())
        is_group = [o.key_or_group in groups or o.package is not None for o in parsed]
        emptied = _emptied_groups(parsed, is_group)
        if emptied:
            return emptied
        known: set[str] = set()
        sections: set[str] = set()
        chosen: set[str] = set()
        try:
            for variant in _variants([o for o, g in zip(parsed, is_group, strict=True) if g]):
                cfg = compose(config_name, overrides=variant, return_hydra_config=True)
                chosen |= set(cfg.hydra.runtime.choices)
                nodes = [(k, n) for k, n in config_nodes(cfg) if k.split(".", 1)[0] != "hydra"]
                known |= {k for k, _ in nodes}
                sections |= {k for k, n in nodes if isinstance(n, DictConfig) and len(n)}
        except (HydraException, ValueError):
            return []
    candidates = sorted((known - sections) | groups)  # a section takes keys, not a value
    unknown = [
        f"{o.input_line}: no config or config group defines '{o.key_or_group}'"
        f"{ADDED if o.is_add() or o.is_force_add() else ''}; "
        f"{suggestion(o, candidates, groups, chosen)}"
        for o, group in zip(parsed, is_group, strict=True)
        if not group and o.key_or_group not in known
    ]
    return unknown + _emptied_keys(
        [o for o, g in zip(parsed, is_group, strict=True) if not g and o.key_or_group in known],
        cfg, known, sections)


def refuse_unknown_overrides(argv: Sequence[str], config_dir: Path, config_name: str) -> None:
    """Exit with status 2 and one line per unknown override of ``argv`` (Hydra's arguments)."""
    args = command_line(argv)
    if args.help or args.hydra_help or args.shell_completion or args.config_dir:
        return  # Hydra prints help; an extra config dir is searched by Hydra alone
    errors = check_overrides(args.overrides, config_dir, args.config_name or config_name)
    if errors:
        print("\n".join(f"error: {e}" for e in errors), file=sys.stderr)
        print("nothing was run", file=sys.stderr)
        sys.exit(2)
