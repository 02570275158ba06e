"""What one stage of a chain runs with: the values it carries from the stages before it.

For every key an earlier stage decides, in chain order, the stage:

* leaves it alone when it decides or sweeps the key itself;
* takes the command-line value when the user overrides the key (an override wins, and the plan
  says which carried value it replaces);
* else carries the value of the best config (:func:`chain.results.find_winner`) of the
  latest earlier stage that decides the key and has results, naming that stage's sweep
  directory, its near-ties and the configs left out for a run stopped early (collapsed, diverged, pruned);
* else keeps its default (preset, recipe or config default), saying which stages have no
  results.

The stage also carries ``analysis.seed_variance_from``: the sweep of the first earlier stage with
two or more seeds a config, whose seed variance its one-seed verdicts borrow (unless the user
sets the key); and where it then sweeps one key with one seed a config, ``analysis.check_seeds=1``:
a second seed of its first config that tests the borrowed variance.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from analysis.decisions.ranking import launch_variance
from analysis.names.config_names import BORROW_KEY
from analysis.readers.jobs import override_key
from chain.results import Winner, find_winner, latest_sweep
from chain.stages import CONF_DIR, Chain, Stage
from grpo.config.rules import CHECK_SEEDS as CHECK_KEY

PLAIN_VALUE = re.compile(r"[\w.+\-/]+")


def override_text(value: Any) -> str:
    """``value`` as a Hydra override writes it (``true``, ``0.0003``, ``grpo_clip``)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    return text if PLAIN_VALUE.fullmatch(text) else "'" + text.replace("'", "\\'") + "'"


@dataclass(frozen=True)
class UserOverrides:
    """The user's command-line overrides: all of them, the single values by key, and the keys
    they sweep (``key=a,b``)."""

    lines: tuple[str, ...]
    values: dict[str, str]
    swept: frozenset[str]

    @staticmethod
    def parse(lines: Sequence[str]) -> UserOverrides:
        """Parse ``lines`` with Hydra's override parser (a bad one raises its error)."""
        parsed = OverridesParser.create().parse_overrides(list(lines))
        values = {o.key_or_group: o.get_value_element_as_str() for o in parsed
                  if not o.is_sweep_override() and not o.is_delete()}
        swept = frozenset(o.key_or_group for o in parsed if o.is_sweep_override())
        return UserOverrides(tuple(lines), values, swept)

    def fixed(self) -> list[str]:
        """The overrides that set one value (those a single config can be composed with)."""
        return [line for line in self.lines if override_key(line) not in self.swept]


def compose_stage(stage: Stage, user: UserOverrides, conf_dir: Path = CONF_DIR) -> DictConfig:
    """The config a job of ``stage`` starts from, before anything is carried (Hydra's node
    included, so that ``hydra.sweeper.params`` and ``hydra.runtime.choices`` can be read)."""
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir.resolve()), version_base="1.3"):
            return compose("config", overrides=[f"+experiment={stage.experiment}", *user.fixed()],
                           return_hydra_config=True)
    except HydraException as error:
        raise ValueError(f"stage {stage.experiment}: cannot compose its config: {error}") from None
    finally:
        GlobalHydra.instance().clear()


def stage_root(cfg: DictConfig) -> Path:
    """``<paths.output_root>/<experiment_name>``: where the stage's sweeps are."""
    return Path(str(cfg.paths.output_root)) / str(cfg.experiment_name)


def swept_keys(cfg: DictConfig, user: UserOverrides) -> set[str]:
    """The keys the stage's preset and the user sweep."""
    params = OmegaConf.select(cfg, "hydra.sweeper.params", default=None) or {}
    return {str(key).lstrip("+") for key in params} | set(user.swept)


def default_value(cfg: DictConfig, key: str) -> Any:
    """The stage's own value of ``key``: its config group choice, else its config value."""
    choices = cfg.hydra.runtime.choices
    return choices[key] if key in choices else OmegaConf.select(cfg, key, default=None)


@dataclass(frozen=True)
class Carried:
    """A value a stage takes from an earlier stage: the key, its value and where it came from."""

    key: str
    value: Any
    stage: str
    sweep: Path

    def override(self) -> str:
        """``key=value`` for the stage's command line."""
        return f"{self.key}={override_text(self.value)}"


@dataclass
class StagePlan:
    """A stage of a chain, what it carries, and the lines that say so."""

    stage: Stage
    number: int
    n_stages: int
    root: Path
    carried: list[Carried] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def overrides(self, user: UserOverrides) -> list[str]:
        """The stage's launch.py overrides (besides ``-m`` and the sweep directory)."""
        race = ([f"race.max_seeds={self.stage.race_max_seeds}"]
                if self.stage.race_max_seeds is not None else [])
        return [f"+experiment={self.stage.experiment}", *(c.override() for c in self.carried),
                *race, *user.lines]

    def record(self, user: UserOverrides) -> str:
        """``chain.json`` of the stage's sweep: its overrides and where each carried value came
        from (a re-run resumes the sweep only when the overrides are the same)."""
        return json.dumps({
            "stage": self.stage.experiment,
            "overrides": self.overrides(user),
            "carried": [{"key": c.key, "value": c.value, "stage": c.stage, "sweep": str(c.sweep)}
                        for c in self.carried],
        }, indent=1) + "\n"


WinnerLookup = Callable[[Stage, bool], "Winner | str"]


def winner_lookup(chain: Chain, user: UserOverrides, conf_dir: Path = CONF_DIR) -> WinnerLookup:
    """A function giving each stage's winner (or why it has none), each looked up once."""
    cache: dict[tuple[str, bool], Winner | str] = {}
    keys = tuple(dict.fromkeys(k for stage in chain.stages for k in stage.decides))

    def lookup(stage: Stage, off_policy_only: bool) -> Winner | str:
        if (stage.experiment, off_policy_only) not in cache:
            root = stage_root(compose_stage(stage, user, conf_dir))
            sweep = latest_sweep(root)
            cache[stage.experiment, off_policy_only] = (
                f"no sweep under {root}" if sweep is None
                else find_winner(sweep, keys, off_policy_only))
        return cache[stage.experiment, off_policy_only]

    return lookup


def plan_stage(chain: Chain, index: int, user: UserOverrides, lookup: WinnerLookup,
               conf_dir: Path = CONF_DIR) -> StagePlan:
    """What stage ``index`` of ``chain`` carries (see the module docstring)."""
    stage = chain.stages[index]
    cfg = compose_stage(stage, user, conf_dir)
    plan = StagePlan(stage, index + 1, len(chain.stages), stage_root(cfg))
    earlier = chain.stages[:index]
    if not earlier:
        plan.lines.append("  nothing to carry: the first stage")
    swept = swept_keys(cfg, user)
    noted: set[tuple[str, str]] = set()
    for key in dict.fromkeys(k for s in earlier for k in s.decides):
        if key in stage.decides or key in swept:
            what = "decides" if key in stage.decides else "sweeps"
            plan.lines.append(f"  {key}: not carried, this stage {what} it")
            continue
        found, missing = None, []
        for source in reversed([s for s in earlier if key in s.decides]):
            only = stage.off_policy_only and source.decides_batch_plan()
            result = lookup(source, only)
            if isinstance(result, Winner):
                found = (source, result)
                break
            missing.append(f"{source.experiment} has no results: {result}")
        if key in user.values:
            replaced = (f"{found[0].experiment}'s best {key}="
                        f"{override_text(found[1].values[key])} from {found[1].sweep}"
                        if found else "no earlier stage has results")
            plan.lines.append(f"  {key}={user.values[key]}  from the command line (an override "
                              f"wins; not carried: {replaced})")
            continue
        if found is None:
            plan.lines.append(f"  {key}={override_text(default_value(cfg, key))}  the stage's "
                              "default: no earlier stage that decides it has results (" +
                              "; ".join(missing) + ")")
            continue
        source, winner = found
        carried = Carried(key, winner.values[key], source.experiment, winner.sweep)
        plan.carried.append(carried)
        skipped = f" ({'; '.join(missing)})" if missing else ""
        plan.lines.append(f"  {carried.override()}  carried from {source.experiment}: best "
                          f"config {winner.describe()} of sweep {winner.sweep}{skipped}")
        if (source.experiment, winner.label) not in noted:
            noted.add((source.experiment, winner.label))
            plan.lines += _ranking_notes(source.experiment, winner)
    plan.lines += _borrow_seed_variance(plan, earlier, user, lookup, cfg)
    plan.lines += _check_seeds(plan, swept, user)
    return plan


def _check_seeds(plan: StagePlan, swept: set[str], user: UserOverrides) -> list[str]:
    """Where the stage borrows a seed variance and sweeps one key with one seed a config (nothing
    of its own to test the borrowed variance against), ``analysis.check_seeds=1``: its first
    config runs a second seed as one more job of its sweep, which tests the borrowed variance
    (``analysis.stats.variance.check``); its plan's lines."""
    if CHECK_KEY in user.values:
        return [f"  {CHECK_KEY}={user.values[CHECK_KEY]}  from the command line"]
    source = next((c for c in plan.carried if c.key == BORROW_KEY), None)
    borrows = source is not None or BORROW_KEY in user.values
    if not borrows or len(swept) != 1 or "seed" in swept or plan.stage.race_max_seeds is not None:
        return []
    checks = Carried(CHECK_KEY, 1, source.stage if source else "the command line",
                     source.sweep if source else Path(user.values[BORROW_KEY]))
    plan.carried.append(checks)
    return [f"  {checks.override()}  one swept key, one seed a config: a second seed of its first "
            "config, one more job of its sweep, tests the borrowed variance (which was measured "
            f"on other settings; analysis.stats.variance.check); {CHECK_KEY}=0 skips it"]


def _borrow_seed_variance(plan: StagePlan, earlier: Sequence[Stage], user: UserOverrides,
                          lookup: WinnerLookup, cfg: DictConfig) -> list[str]:
    """Carry the sweep of the first earlier stage with two or more seeds a config whose seed
    variance the stage's report will borrow (``analysis.decisions.ranking.launch_variance`` on the
    stage's composed ``cfg``: the report's own check of model, data, validation problems,
    evaluation steps and compared step) as ``analysis.seed_variance_from``; a stage refused is
    said with why; its plan's lines."""
    if BORROW_KEY in user.values:
        return [f"  {BORROW_KEY}={user.values[BORROW_KEY]}  from the command line"]
    if not earlier:
        return []
    refused = []
    for source in earlier:
        winner = lookup(source, False)
        seeds = winner.ranking.uncertainty.seeds if isinstance(winner, Winner) and \
            winner.ranking.uncertainty is not None else None
        if seeds is None or seeds.source != "seeds":
            continue
        lent = launch_variance(winner.sweep, [cfg])
        if not lent.usable:
            refused.append(f"  {BORROW_KEY}: not {source.experiment}'s sweep: {lent.describe()}")
            continue
        carried = Carried(BORROW_KEY, str(winner.sweep), source.experiment, winner.sweep)
        plan.carried.append(carried)
        return [*refused,
                f"  {carried.override()}  the seed variance of {source.experiment}, the first "
                f"stage with 2 or more seeds a config whose design matches this stage's "
                f"({seeds.describe()}): this stage's one-seed verdicts borrow it, inflated to "
                "its upper 95% bound for settings it did not run (another loss, normalization, "
                "learning rate or epochs; the report says which)"]
    return [*refused,
            f"  {BORROW_KEY}: nothing to borrow (no earlier stage has 2 or more seeds a config "
            "and this stage's model, data, validation problems, evaluation steps and compared "
            "step): a one-dimensional one-seed stage gives no verdict"]


def _ranking_notes(stage: str, winner: Winner) -> list[str]:
    """The configs the data cannot tell from a winner, what would resolve it, and the configs
    its ranking left out (a run stopped early) or could not compare (no run reached the compared
    step), one line each."""
    rule = (f"{winner.label} was taken (the highest {winner.ranking.criterion}, first in config "
            "order on an exact tie: the chain must go on)")
    ties = [f"    warning: {stage}: {label} is {why}; {rule}; override the key to choose"
            for label, why in winner.ranking.near_ties.items()]
    ties += [f"    {stage}: {line}" for line in winner.ranking.verdict_lines()]
    ties += [f"    warning: {stage}: {note}" for note in winner.race_notes]
    excluded = [f"    {stage}: {label} left out (a run {statuses})"
                for label, statuses in winner.ranking.excluded.items()]
    excluded += [f"    {stage}: {label} not compared (no run reached step "
                 f"{winner.ranking.at_step}: {where})"
                 for label, where in winner.ranking.not_compared.items()]
    return ties + excluded
