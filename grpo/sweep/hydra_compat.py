"""The Hydra internals the validating sweeper builds on, in one place.

Hydra has no public API to extend its basic sweeper, so `ValidatingSweeper` subclasses
`hydra._internal.core_plugins.basic_sweeper.BasicSweeper` (hydra-core 1.3) and reuses three of its
methods: `_parse_config()` (the `hydra.sweeper.params` of a preset as `key=v1,v2` overrides),
`split_arguments()` (the cartesian product of the parsed overrides, in batches) and
`get_job_batch()` (the next batch its `sweep()` launches). `group_chooser()` reads who chose a
config group's option from the defaults list (`ConfigLoader.compute_defaults_list()`, whose
result's `overrides.override_metadata` is internal); `group_option()` reads one option's yaml
through the loader's config repository (`ConfigLoaderImpl.repository`, internal) and
`overrides_dirname()` names a job's overrides as Hydra's config loader does
(`hydra._internal.config_loader_impl.get_overrides_dirname`). Any of them missing or changed raises
`HydraInternalsMoved`, naming hydra-core's version; tests/test_dependency_adapters.py exercises
each one.

`BasicSweeper` is looked up on each access, not bound at import: Hydra's plugin scan
(`hydra/core/plugins.py`, `_scan_all_plugins`) executes every module of its core plugins and of
the `hydra_plugins` namespace again, in place, which defines the class anew. `ValidatingSweeper`,
in that namespace, is then redefined too and must subclass the new class: a subclass of the old
one fails in `BasicSweeper.__init__`'s `super(BasicSweeper, self)`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hydra.core.config_loader import ConfigLoader
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.types import RunMode
from omegaconf import DictConfig

if TYPE_CHECKING:
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

_BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper"


class HydraInternalsMoved(RuntimeError):
    """A Hydra internal this module adapts is gone or changed."""

    def __init__(self, what: str, error: Exception) -> None:
        super().__init__(
            f"hydra-core {importlib.metadata.version('hydra-core')}: {what} moved or changed "
            f"({type(error).__name__}: {error}); grpo/sweep/hydra_compat.py is "
            "written for hydra-core 1.3 and needs updating"
        )


def _basic_sweeper() -> type[BasicSweeper]:
    """Hydra's BasicSweeper as its module holds it now (see the module docstring)."""
    try:
        return importlib.import_module(_BASIC_SWEEPER).BasicSweeper
    except (ImportError, AttributeError) as err:
        raise HydraInternalsMoved(f"{_BASIC_SWEEPER}.BasicSweeper", err) from err


def __getattr__(name: str) -> Any:
    """`BasicSweeper`, looked up on each access."""
    if name == "BasicSweeper":
        return _basic_sweeper()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_basic_sweeper()  # at import: a moved BasicSweeper is named here, not at the first sweep

__all__ = ["BasicSweeper", "HydraInternalsMoved", "get_job_batch", "group_chooser",
           "preset_overrides", "split_into_jobs"]

COMMAND_LINE = "the command line"
"""What `group_chooser` answers for an option chosen by an override (or a sweep's job list)."""


def preset_overrides(sweeper: BasicSweeper) -> list[str]:
    """The sweeper's `hydra.sweeper.params` as override strings, e.g. `["learning_rate=1e-4,3e-4"]`."""
    try:
        overrides = sweeper._parse_config()
    except (AttributeError, TypeError) as err:
        raise HydraInternalsMoved("BasicSweeper._parse_config()", err) from err
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise HydraInternalsMoved("BasicSweeper._parse_config()",
                                  TypeError(f"returned {overrides!r}, not a list of str"))
    return overrides


def split_into_jobs(overrides: list[Override]) -> list[Sequence[str]]:
    """Every job of the sweep `overrides` describe (the cartesian product of swept values), each
    as its list of `key=value` overrides, in Hydra's order."""
    try:
        batches = _basic_sweeper().split_arguments(overrides, None)
    except (AttributeError, TypeError) as err:
        raise HydraInternalsMoved("BasicSweeper.split_arguments(overrides, max_batch_size)", err) from err
    return [job for batch in batches for job in batch]


def get_job_batch(sweeper: BasicSweeper) -> Sequence[Sequence[str]]:
    """BasicSweeper's own `get_job_batch()`: the next batch of job override lists its `sweep()`
    launches (a subclass overrides it to change the jobs it launches)."""
    try:
        batch = _basic_sweeper().get_job_batch(sweeper)
    except (AttributeError, TypeError) as err:
        raise HydraInternalsMoved("BasicSweeper.get_job_batch()", err) from err
    return batch


def group_chooser(loader: ConfigLoader, config_name: str, overrides: Sequence[str], group: str) -> str | None:
    """Who chose the option of config group `group` when `config_name` is composed with
    `overrides`: `COMMAND_LINE` (an override, e.g. `loss=grpo_clip`), the config that overrides
    it in its defaults list (e.g. `"experiment/demo"` for `override /loss: grpo_clip`), or None
    when the group keeps the option of the root config's defaults list."""
    defaults = loader.compute_defaults_list(config_name, list(overrides), RunMode.RUN)
    try:
        metadata = defaults.overrides.override_metadata
        chosen = metadata.get(group)
        if chosen is None:
            return None
        return COMMAND_LINE if chosen.external_override else str(chosen.containing_config_path)
    except AttributeError as err:
        raise HydraInternalsMoved("ConfigLoader.compute_defaults_list().overrides.override_metadata",
                                  err) from err


def group_overrides(loader: ConfigLoader, overrides: Sequence[str]) -> tuple[str, ...]:
    """The overrides of `overrides` that choose, add or delete a config group's option (`loss=`,
    `+experiment=`, `~prompt`, `hydra/launcher=`, `key@package=`): the only ones a defaults list
    depends on; the others set values."""
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    try:
        return tuple(text for text, o in zip(overrides, parsed, strict=True)
                     if o.package is not None or loader.repository.group_exists(o.key_or_group))  # type: ignore[attr-defined]
    except (AttributeError, TypeError) as err:
        raise HydraInternalsMoved("ConfigLoaderImpl.repository.group_exists()", err) from err


def group_option(loader: ConfigLoader, group: str, option: str) -> DictConfig | None:
    """The config of option `option` of config group `group` (`conf/<group>/<option>.yaml`) as it
    lands in the composed config under `group`; None where Hydra would compose it otherwise (a
    `# @package` header or a defaults list of its own) or there is no such option."""
    try:
        result = loader.repository.load_config(f"{group}/{option}")  # type: ignore[attr-defined]
        if result is None:
            return None
        plain = result.header.get("package") in (None, "_group_", group) and not result.defaults_list
    except (AttributeError, TypeError) as err:
        raise HydraInternalsMoved("ConfigLoaderImpl.repository.load_config()", err) from err
    return result.config if plain and isinstance(result.config, DictConfig) else None


def overrides_dirname(cfg: DictConfig, overrides: Sequence[str]) -> str:
    """`hydra.job.override_dirname` of a job composed with `overrides`, as Hydra's config loader
    writes it (`ConfigLoaderImpl._load_configuration_impl`, from the overrides that are not
    `hydra.*`, under `cfg`'s `hydra.job.config.override_dirname` settings)."""
    try:
        from hydra._internal.config_loader_impl import get_overrides_dirname
    except ImportError as err:
        raise HydraInternalsMoved("hydra._internal.config_loader_impl.get_overrides_dirname", err) from err
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    settings = cfg.hydra.job.config.override_dirname
    return get_overrides_dirname(
        overrides=[o for o in parsed if not o.is_hydra_override()], kv_sep=settings.kv_sep,
        item_sep=settings.item_sep, exclude_keys=settings.exclude_keys)


def args_parser(script: str) -> argparse.ArgumentParser:
    """Hydra's command-line parser of the app `script` (`launch.py`;
    `hydra._internal.utils.get_args_parser`), its lazy help texts made plain, as they read for
    `python <script>`, so that `format_help()` works (the documentation's page of the command
    lines prints it)."""
    try:
        from hydra._internal.utils import get_args_parser

        parser = get_args_parser()
    except (ImportError, AttributeError) as err:
        raise HydraInternalsMoved("hydra._internal.utils.get_args_parser", err) from err
    parser.prog = f"python {script}"
    argv0, sys.argv[0] = sys.argv[0], script  # the completion help names the running script
    try:
        for action in parser._actions:
            if action.help is not None and not isinstance(action.help, str):
                action.help = repr(action.help)
    finally:
        sys.argv[0] = argv0
    return parser
