"""The Hydra internals the validating sweeper builds on, in one place.

Hydra has no public API to extend its basic sweeper, so `ValidatingSweeper` subclasses
`hydra._internal.core_plugins.basic_sweeper.BasicSweeper` (hydra-core 1.3) and reuses two of its
methods: `_parse_config()` (the `hydra.sweeper.params` of a preset as `key=v1,v2` overrides) and
`split_arguments()` (the cartesian product of the parsed overrides, in batches). Any of them
missing or changed raises `HydraInternalsMoved`, naming hydra-core's version;
tests/test_dependency_adapters.py exercises each one.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence

from hydra.core.override_parser.types import Override


class HydraInternalsMoved(RuntimeError):
    """A Hydra internal this module adapts is gone or changed."""

    def __init__(self, what: str, error: Exception) -> None:
        super().__init__(
            f"hydra-core {importlib.metadata.version('hydra-core')}: {what} moved or changed "
            f"({type(error).__name__}: {error}); hydra_plugins/grpo_sweeps/hydra_compat.py is "
            "written for hydra-core 1.3 and needs updating"
        )


try:
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
except ImportError as err:
    raise HydraInternalsMoved("hydra._internal.core_plugins.basic_sweeper.BasicSweeper", err) from err

__all__ = ["BasicSweeper", "HydraInternalsMoved", "preset_overrides", "split_into_jobs"]


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
        batches = BasicSweeper.split_arguments(overrides, None)
    except (AttributeError, TypeError) as err:
        raise HydraInternalsMoved("BasicSweeper.split_arguments(overrides, max_batch_size)", err) from err
    return [job for batch in batches for job in batch]
