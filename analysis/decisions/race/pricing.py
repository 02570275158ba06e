"""What a race's launch says and refuses before wave 1, from plain values (its settings, its
number of configs, wave 1's price): the race's misuses (`misuse_problems`), its dry-run line
(`plan_line`: each look's level, wave 1's and the worst case's price), and a budget that cannot
pay for wave 1 (`wave_one_refusal`). The sweeper (`hydra_plugins.grpo_sweeps`) prints them."""

from __future__ import annotations

from analysis.decisions.race.settings import RaceSettings
from grpo.config.rules import BUDGET_UNIT, SEED_MAX
from grpo.run.pruning import OFF


def misuse_problems(settings: RaceSettings, n_configs: int, pruning: str) -> list[str]:
    """Where race keys meet a sweep of `n_configs` configs that they mean nothing in: one config
    (nothing to race), a pruner (`pruning`, its name: it would stop configs outside the race's
    error rate); or where a later wave's seed would be out of range."""
    problems = []
    last = settings.seed_of(settings.max_seeds)
    if last > SEED_MAX:
        problems.append(f"seed={settings.first_seed} with race.max_seeds={settings.max_seeds}: "
                        f"wave {settings.max_seeds} would run seed {last}, past the largest seed "
                        f"{SEED_MAX}; set seed to at most {SEED_MAX - settings.max_seeds + 1}")
    if n_configs < 2:
        problems.append("race.max_seeds is set but the sweep has one config: a race compares "
                        "configs; sweep a key (key=a,b), or drop race.max_seeds and sweep "
                        "seed=0,1,2 for seeds of one config")
    if pruning != OFF:
        problems.append(f"race.max_seeds with pruning={pruning}: the pruner "
                        "would stop configs outside the race's alpha; use one of them "
                        "(pruning=off, or race.max_seeds=null)")
    return problems


def worst_case(settings: RaceSettings, one: float) -> float:
    """What a race spends at most, wave 1 priced at `one`: every config to max_seeds, the fixed
    grid."""
    return one * settings.max_seeds


def plan_line(settings: RaceSettings, n_configs: int, one: float, unit: str) -> str:
    """The dry run's line of a race of `n_configs` configs, wave 1 priced at `one` `unit`
    (GPU- or CPU-hours): its waves' seeds, each look's calibrated level with and without a seed
    variance at wave 1 (`analysis.decisions.race.boundary`) beside Bonferroni's, wave 1's price,
    the worst case's (`worst_case`) and the budget."""
    # imported here: scipy is only needed where a race is planned
    from analysis.decisions.race.boundary import boundary

    with_first, without = (boundary(n_configs, settings.max_seeds, settings.alpha, first)
                           for first in (True, False))
    budget = settings.budget_gpu_hours
    return (f"race: waves of seeds {settings.seed_of(1)}, {settings.seed_of(2)}, ... up to "
            f"{settings.max_seeds} seeds a config; each look at {with_first.level:.3g} "
            f"where wave 1 has a seed variance (borrowed, or a grid's additive residual), "
            f"{without.level:.3g} where it has none (one level for every look, calibrated by "
            f"simulation to alpha {settings.alpha:g} over the looks; Bonferroni's "
            f"{settings.alpha:g} / {settings.max_seeds} a look would spend "
            f"{100 * with_first.bonferroni_rate:.1f}% and "
            f"{100 * without.bonferroni_rate:.1f}% of it); wave 1 {one:.3g} {unit}, worst case "
            f"(every config to max_seeds, the fixed grid) {worst_case(settings, one):.3g}"
            + (f", budget {budget:g}" if budget is not None else ""))


def wave_one_refusal(settings: RaceSettings, n_configs: int, one: float, unit: str) -> str | None:
    """The refusal of a race whose `race.budget_gpu_hours` cannot pay for wave 1 (its
    `n_configs` runs priced at `one` `unit`); None where it can or there is no budget."""
    budget = settings.budget_gpu_hours
    if budget is None or not one > budget:
        return None
    return (f"race wave 1 ({n_configs} runs) is priced at {one:.3g} {unit}, more than "
            f"race.budget_gpu_hours={budget:g} (which counts {BUDGET_UNIT}); nothing was "
            "submitted")
