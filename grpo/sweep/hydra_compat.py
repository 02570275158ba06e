"""The Hydra internals the validating sweeper builds on, in one place.

Hydra has no public API to extend its basic sweeper, so `ValidatingSweeper` subclasses
`hydra._internal.core_plugins.basic_sweeper.BasicSweeper` (hydra-core 1.3) and reuses three of its
methods: `_parse_config()` (the `hydra.sweeper.params` of a preset as `key=v1,v2` overrides),
`split_arguments()` (the cartesian product of the parsed overrides, in batches) and
`get_job_batch()` (the next batch its `sweep()` launches). `group_chooser()` reads who chose a
config group's option from the defaults list (`ConfigLoader.compute_defaults_list()`, whose
result's `overrides.override_metadata` is internal); `group_option()` and `option_sets()` read one option's yaml
through the loader's config repository (`ConfigLoaderImpl.repository`, internal) and
`overrides_dirname()` names a job's overrides as Hydra's config loader does
(`hydra._internal.config_loader_impl.get_overrides_dirname`). `SweepComposer` composes the jobs of
one sweep with Hydra once for each set of overrides that shape the defaults list, and applies each
job's value overrides to a copy as Hydra's config loader applies them
(`ConfigLoaderImpl._apply_overrides_to_config`, internal); `interpolations_parsed_once()` has
OmegaConf parse each interpolation's text once while a sweep's jobs are checked
(`omegaconf.base.parse`, internal); `command_line()` reads a command line with Hydra's own
parser and `args_parser()` gives that parser for its help text
(`hydra._internal.utils.get_args_parser`). Any of them missing or changed raises
`HydraInternalsMoved`, naming hydra-core's (or omegaconf's) version; tests/test_dependency_adapters.py exercises
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
import pickle
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from hydra.core.config_loader import ConfigLoader
from hydra.core.default_element import GroupDefault
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from grpo.config.rules import leaf_keys

if TYPE_CHECKING:
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

_BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper"


WRITTEN_FOR = {"hydra-core": "1.3", "omegaconf": "2.3"}
"""The releases whose internals this module adapts."""


class HydraInternalsMoved(RuntimeError):
    """A Hydra internal this module adapts (or one of OmegaConf, Hydra's config library) is gone
    or changed."""

    def __init__(self, what: str, error: Exception, package: str = "hydra-core") -> None:
        super().__init__(
            f"{package} {importlib.metadata.version(package)}: {what} moved or changed "
            f"({type(error).__name__}: {error}); grpo/sweep/hydra_compat.py is "
            f"written for {package} {WRITTEN_FOR[package]} and needs updating"
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

__all__ = ["BasicSweeper", "HydraInternalsMoved", "SweepComposer", "command_line", "get_job_batch",
           "group_chooser", "interpolations_parsed_once", "option_sets", "preset_overrides",
           "split_into_jobs"]

COMMAND_LINE = "the command line"
"""What `group_chooser` answers for an option chosen by an override (or a sweep's job list)."""


@lru_cache(maxsize=4096)
def _parsed(text: str) -> Override:
    """One override parsed by Hydra's `OverridesParser` (cached: a sweep's jobs repeat them)."""
    (override,) = OverridesParser.create().parse_overrides([text])
    return override


def parse_overrides(overrides: Sequence[str]) -> list[Override]:
    """`OverridesParser.parse_overrides(overrides)`, each text parsed once a process: the
    `Override`s are shared, to be read, not changed."""
    return [_parsed(text) for text in overrides]


def swept_values(overrides: Sequence[Override]) -> list[tuple[str, list[tuple[str, Any]]]]:
    """Each swept override of `overrides` that lists its values (not an interval: Hydra's
    sweeper refuses those) as its text and its values, each as written and as parsed
    (`learning_rate=3e-4,0.0003` -> `[("3e-4", 0.0003), ("0.0003", 0.0003)]`)."""
    swept = []
    for override in overrides:
        if not override.is_sweep_override():
            continue
        try:
            pairs = list(zip(override.sweep_string_iterator(), override.sweep_iterator(), strict=True))
        except HydraException:  # a sweep it cannot list (an interval): Hydra's sweeper refuses it
            continue
        swept.append((override.input_line, pairs))
    return swept


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
    parsed = parse_overrides(overrides)
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


def option_sets(loader: ConfigLoader, group: str, option: str) -> list[str]:
    """What option `option` of config group `group` sets where it is chosen, read from its yaml
    through the loader's config repository: the config groups its defaults list chooses (`loss`
    for `override /loss: gspo`; a relative group is under `group`) and the dotted keys of its
    values as they land in the composed config (`overlong.buffer` for `# @package _global_`,
    else under its package or `group`); [] where there is no such option."""
    try:
        result = loader.repository.load_config(f"{group}/{option}")  # type: ignore[attr-defined]
        if result is None:
            return []
        package = result.header.get("package")
        chosen = [str(d.group) for d in result.defaults_list or [] if isinstance(d, GroupDefault)]
        values = OmegaConf.to_container(result.config, resolve=False)
    except (AttributeError, TypeError) as err:
        raise HydraInternalsMoved("ConfigLoaderImpl.repository.load_config()", err) from err
    groups = [g[1:] if g.startswith("/") else f"{group}/{g}" for g in chosen]
    if package in (None, "_group_"):
        package = group.replace("/", ".")
    prefix = str(package).removeprefix("_global_").lstrip(".")
    keys = [f"{prefix}.{key}" if prefix else key for key in leaf_keys(values)] if isinstance(values, dict) else []
    return [*groups, *keys]


def overrides_dirname(cfg: DictConfig, overrides: Sequence[str]) -> str:
    """`hydra.job.override_dirname` of a job composed with `overrides`, as Hydra's config loader
    writes it (`ConfigLoaderImpl._load_configuration_impl`, from the overrides that are not
    `hydra.*`, under `cfg`'s `hydra.job.config.override_dirname` settings)."""
    try:
        from hydra._internal.config_loader_impl import get_overrides_dirname
    except ImportError as err:
        raise HydraInternalsMoved("hydra._internal.config_loader_impl.get_overrides_dirname", err) from err
    parsed = parse_overrides(overrides)
    settings = cfg.hydra.job.config.override_dirname
    return get_overrides_dirname(
        overrides=[o for o in parsed if not o.is_hydra_override()], kv_sep=settings.kv_sep,
        item_sep=settings.item_sep, exclude_keys=settings.exclude_keys)


class SweepComposer:
    """The configs of one sweep's jobs, each as `loader.load_configuration(config_name, overrides,
    RunMode.RUN)` gives it, without composing each job anew.

    Hydra composes a config in two stages (`ConfigLoaderImpl._load_configuration_impl`): the
    defaults list, from the overrides that choose config group options (`loss=...`,
    `+experiment=...`) and Hydra's own (`hydra.*`), merged into one config; then every other
    override (`learning_rate=1e-4`, `+key=v`, `~key`) applied to it in order
    (`ConfigLoaderImpl._apply_overrides_to_config`), and Hydra's record of the overrides
    (`hydra.overrides.task`, `hydra.job.override_dirname`) written. The jobs of a sweep differ
    mostly in values: the first stage is done by Hydra once for each set of the former (its
    *shape*: the overrides that are Hydra's, name a config group or a package), kept unchanged,
    and each job gets a copy with its values applied by Hydra's own function and its record
    rewritten. A 480-job sweep composes once instead of 480 times (bench/dry_run_scale.py).

    One composer serves one sweep in one process: the yaml files are read when a shape is first
    composed and not again, so an edit to `conf/` during the sweep's composition is not seen
    (the next launch, a new process, reads them). Jobs are handed out as copies: changing one
    job's config changes no other.
    """

    def __init__(self, loader: ConfigLoader) -> None:
        self.loader = loader
        self._shapes: dict[tuple[str, tuple[str, ...]], tuple[bytes, list[str]]] = {}
        self._options: dict[tuple[str, str], DictConfig | None] = {}
        self._shaping: dict[str, bool] = {}
        self.compositions = 0
        """How many times Hydra composed a config (one per shape)."""

    def group_option(self, group: str, option: str) -> DictConfig | None:
        """`group_option(loader, group, option)`, read once for the sweep: to be read, not changed."""
        if (group, option) not in self._options:
            self._options[group, option] = group_option(self.loader, group, option)
        return self._options[group, option]

    def _is_shape(self, override: Override) -> bool:
        """Whether `override` shapes the defaults list or is Hydra's (composed by Hydra); asked
        once for each override's text."""
        text = str(override.input_line)
        if text not in self._shaping:
            try:
                self._shaping[text] = (
                    override.is_hydra_override() or override.is_sweep_override()
                    or override.package is not None
                    or self.loader.repository.group_exists(override.key_or_group))  # type: ignore[attr-defined]
            except (AttributeError, TypeError) as err:
                raise HydraInternalsMoved("ConfigLoaderImpl.repository.group_exists()", err) from err
        return self._shaping[text]

    def compose(self, config_name: str, overrides: Sequence[str]) -> DictConfig:
        """`config_name` composed with `overrides` (a new config, the caller's to change)."""
        parsed = parse_overrides(overrides)
        shaping = [self._is_shape(o) for o in parsed]
        key = (config_name, tuple(text for text, s in zip(overrides, shaping, strict=True) if s))
        if key not in self._shapes:
            master = self.loader.load_configuration(config_name, list(key[1]), RunMode.RUN)
            self.compositions += 1
            # the record Hydra found before it appended the shape's own task overrides
            task = list(master.hydra.overrides.task)
            own = sum(s and not o.is_hydra_override() for o, s in zip(parsed, shaping, strict=True))
            # pickled once, unpickled for each job (bytes made here, never read from a file): a
            # deep copy in a third of copy.deepcopy's time
            self._shapes[key] = pickle.dumps(master, pickle.HIGHEST_PROTOCOL), task[:len(task) - own]
        master, task = self._shapes[key]
        cfg = pickle.loads(master)
        values = [o for o, s in zip(parsed, shaping, strict=True) if not s]
        try:
            from hydra._internal.config_loader_impl import ConfigLoaderImpl

            apply = ConfigLoaderImpl._apply_overrides_to_config
        except (ImportError, AttributeError) as err:
            raise HydraInternalsMoved("ConfigLoaderImpl._apply_overrides_to_config(overrides, cfg)",
                                      err) from err
        apply(values, cfg)
        cfg.hydra.overrides.task = [*task, *(o.input_line for o in parsed if not o.is_hydra_override())]
        cfg.hydra.job.override_dirname = overrides_dirname(cfg, overrides)
        return cfg


@contextmanager
def interpolations_parsed_once(maxsize: int = 1024) -> Iterator[None]:
    """While the block runs, OmegaConf parses each interpolation's text once: the parse tree of
    its grammar (`omegaconf.grammar_parser.parse`, a function of the text alone, which resolving
    only reads) is kept for the next node that holds the same text (up to `maxsize` texts).
    Resolving is untouched: each node is resolved anew against its own config. The jobs of a
    sweep hold the same few interpolations (`${paths.cache_dir}/tiny-qwen2-seed${model.build_seed}`)
    and the validator resolves each of every job; ANTLR's parse was most of that. A text that
    does not parse raises each time, as it does outside the block."""
    try:
        import omegaconf.base as base

        parse = base.parse
    except (ImportError, AttributeError) as err:
        raise HydraInternalsMoved("omegaconf.base.parse (the interpolation grammar's parser)", err,
                                  package="omegaconf") from err
    base.parse = lru_cache(maxsize)(parse)
    try:
        yield
    finally:
        base.parse = parse


def _hydra_parser() -> argparse.ArgumentParser:
    """A new `hydra._internal.utils.get_args_parser()`."""
    try:
        from hydra._internal.utils import get_args_parser

        return get_args_parser()
    except (ImportError, AttributeError) as err:
        raise HydraInternalsMoved("hydra._internal.utils.get_args_parser", err) from err


@lru_cache(maxsize=8)
def _command_line(argv: tuple[str, ...]) -> argparse.Namespace:
    args, _ = _hydra_parser().parse_known_args(list(argv))
    return args


def command_line(argv: Sequence[str]) -> argparse.Namespace:
    """Hydra's own reading of the command line `argv` (its flags: `multirun`, `help`,
    `config_name`, ..., and `overrides`), parsed once a process however many checks ask for it;
    shared, to be read, not changed."""
    return _command_line(tuple(argv))


def args_parser(script: str) -> argparse.ArgumentParser:
    """Hydra's command-line parser of the app `script` (`launch.py`;
    `hydra._internal.utils.get_args_parser`), its lazy help texts made plain, as they read for
    `python <script>`, so that `format_help()` works (the documentation's page of the command
    lines prints it)."""
    parser = _hydra_parser()
    parser.prog = f"python {script}"
    argv0, sys.argv[0] = sys.argv[0], script  # the completion help names the running script
    try:
        for action in parser._actions:
            if action.help is not None and not isinstance(action.help, str):
                action.help = repr(action.help)
    finally:
        sys.argv[0] = argv0
    return parser
