"""What the dry run says of a sweep's power before it launches (`power_lines`, with the check
seeds' line `check_seed_lines`), from plain values: each run's overrides less its seed, the seed
sd assumed or borrowed, the sweep's cost. The sweeper (`hydra_plugins.grpo_sweeps`) prints them.

The statistics (scipy) are imported inside `power_lines`, only where a seed sd is known: a dry
run without one, and Hydra's plugin scan, import none of them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from analysis.decisions.race.settings import Calibration
from analysis.readers.jobs import override_key

if TYPE_CHECKING:
    from analysis.stats.sources import Decision
    from analysis.stats.variance import SeedVariance

NO_SEED_SD = ("power: no seed sd known at launch; set analysis.assumed_seed_sd (the seed sd of a "
              "run's late_eval_reward, from an earlier sweep's report) or "
              "analysis.seed_variance_from (a finished sweep with two or more seeds a config) to "
              "see the smallest difference from the best this sweep can find")
"""The power line of a sweep with neither `analysis.assumed_seed_sd` nor
`analysis.seed_variance_from`."""


def power_lines(runs: Sequence[Sequence[str]], assumed_sd: float | None,
                borrowed: SeedVariance | None, source_named: bool, checks: int,
                full_grid: float, unit: str, race_max_seeds: int | None,
                race_alpha: float) -> list[str]:
    """The dry run's power: with `assumed_sd` (`analysis.assumed_seed_sd`), what this sweep finds
    at 80% power with its seeds a config, with 2 and 3, and as a race, each priced at this
    sweep's cost a run: the smallest difference from the best config (Hsu's comparisons with the
    best, `analysis.stats.power.detectable_with_seeds`, with one seed `detectable_difference`)
    and the smallest difference between two levels of each swept key (its main effect's F test,
    `analysis.stats.power.detectable_main_effect`); without it, what would give one.

    `runs`: each job's overrides less its seed (a config's seeds repeat it; `checks` of them
    are check seeds, `analysis.check_seeds`); `borrowed`: the variance
    `analysis.seed_variance_from` lends (`analysis.decisions.ranking.launch_variance`), None
    where `source_named` is False; `full_grid`: the sweep's cost in `unit` (GPU- or CPU-hours);
    `race_max_seeds` (None: not set) and `race_alpha`: `race.*`."""
    if assumed_sd is None and not source_named:
        return [NO_SEED_SD]
    # imported here: scipy is only needed where the power is asked for
    from analysis.decisions.race.boundary import boundary
    from analysis.stats.levels import POWER
    from analysis.stats.power import (
        detectable_difference,
        detectable_main_effect,
        detectable_with_seeds,
        error_df,
    )
    from analysis.stats.sources import decide

    counts = Counter(tuple(run) for run in runs)
    k = len(counts)
    values: dict[str, set[str]] = {}
    for config in counts:
        for override in config:
            values.setdefault(override_key(override), set()).add(override)
    levels = {key: len(v) for key, v in values.items() if len(v) > 1}
    # the additive model's residual df over every run (a check seed's second run adds one)
    grid_df = error_df(counts.total(), list(levels.values()), 1)
    seeds_of = borrowed  # the borrowed variance, or why it is refused (the report's decision)
    decision = decide(list(counts.values()), grid_df, seeds_of)
    rests = f"the comparisons will rest on {decision.says(seeds_of)}"
    if assumed_sd is not None:
        sd, said = float(assumed_sd), f"analysis.assumed_seed_sd={float(assumed_sd):g}; {rests}"
    elif seeds_of is None or not seeds_of.usable:
        return [f"power: nothing to borrow from analysis.seed_variance_from: "
                f"{seeds_of.describe() if seeds_of is not None else 'none named'}; the "
                f"comparisons will rest on {decision.rests_on()}; set analysis.assumed_seed_sd "
                "to see what this sweep can find"]
    else:
        sd, said = seeds_of.variance ** 0.5, f"borrowed: {seeds_of.describe()}; {rests}"
    if k < 2:
        return ["power: one config, nothing to compare"]
    seeds = min(counts.values())
    per_run = full_grid / counts.total()
    one_seed_df = decision.df(seeds_of)
    one_seed_source = decision.rests_on()

    def shown(found: float) -> str:
        """A detectable difference, said to be beyond reach where it passes the reward's range."""
        return f"{found:.3f}" + (" (beyond the reward's 0-1 range: nothing to find)"
                                 if found >= 1 else "")

    def effects(n: int) -> str:
        df = error_df(k, list(levels.values()), n) if n > 1 else one_seed_df
        if df <= 0:
            return "no main-effect test (no seed variance to test it against)"
        # with seeds, on Satterthwaite's df of the k configs' pool (random even at one sd)
        return ", ".join(f"{key} {shown(detectable_main_effect(sd, m, k * n / m, df, k if n > 1 else 0))}"
                         for key, m in levels.items())

    lines = [f"power ({said}): at {POWER:.0%} power, the smallest "
             f"difference from the best of {k} configs that Hsu's comparisons with the best "
             "find (a config that far below leaves the set that could be the best; the pair "
             "rule's variance and df averaged over the sample variances), then the smallest "
             "difference between two levels of each swept key that its main effect's F test finds at 5% (the other levels at their "
             "mean; noncentral F, a balanced grid; with seeds on the df the analysis tests it "
             "on: Box's numerator df and Satterthwaite's df of the configs' pool shrunk "
             "towards one config's)"]
    for n in sorted({seeds, 2, 3}):
        here = " (this sweep)" if n == seeds else ""
        se = sd * (2 / n) ** 0.5
        if n == 1 and one_seed_df > 0:
            found = detectable_difference(se, k, one_seed_df)
            lines.append(f"  1 seed a config{here}: {shown(found)} from the best on "
                         f"{one_seed_source}'s {one_seed_df:g} df; main effects: {effects(1)}")
            if n == seeds:
                lines += check_seed_lines(decision, seeds_of, checks, grid_df,
                                          f"~{per_run:.3g} {unit}")
            continue
        if n == 1:
            found = detectable_difference(se, k, float("inf"))
            lines.append(f"  1 seed a config{here}: no seed variance of its own for the "
                         "comparisons (a grid's additive residual or analysis.seed_variance_from "
                         f"gives one); with the seed variance known exactly, {found:.3f}; "
                         f"main effects: {effects(1)}")
            continue
        found = detectable_with_seeds(sd, n, k)
        lines.append(f"  {n} seeds a config{here}: {shown(found)} from the best; main effects: "
                     f"{effects(n)} ({k * n} runs, ~{per_run * k * n:.3g} {unit})")
    most = int(race_max_seeds) if race_max_seeds is not None else 3
    first_look = decide([1] * k, grid_df, seeds_of).df(seeds_of) > 0
    level = boundary(k, most, float(race_alpha), first_look).level
    found = detectable_with_seeds(sd, most, k, level)
    shares = [case.share for case in Calibration.read().cases]
    lines.append(f"  as a race (race.max_seeds={most}"
                 + ("" if race_max_seeds is not None else ", not set here")
                 + f"): {shown(found)} from the best by its last look alone (each look at "
                 f"{level:.3g}; earlier looks only add power); at most {k * most} runs, "
                 f"~{per_run * k * most:.3g} {unit}, of which the calibration's races "
                 f"spent {min(shares):.0%}-{max(shares):.0%} (bench/race_calibration.py)")
    return lines


def check_seed_lines(decision: Decision, borrowed: SeedVariance | None, checks: int,
                     grid_df: int, per_run: str) -> list[str]:
    """What the dry run says of check seeds, from the seed variance's decision
    (`analysis.stats.sources.decide`): they test the borrowed variance; on a grid, they add
    their df to its residual; without any, where the borrowed variance is inflated, what
    one would cost (`per_run`: a run's price as printed). `checks`: how many the sweep runs,
    `grid_df`: the additive residual's df over every run."""
    if decision.borrowed == "checked":
        return [f"  check seeds: this sweep runs {checks} (analysis.check_seeds={checks}, "
                "priced above); they test the borrowed variance (analysis.stats.variance.check)"]
    if decision.own == "additive" and checks:
        tested = ("the borrowed variance is tested against" if decision.borrowed == "combined"
                  else "the comparisons use")
        return [f"  check seeds: this sweep runs {checks} (analysis.check_seeds={checks}, "
                f"priced above); on a grid their second runs add {checks} df to its additive "
                f"residual ({grid_df} df in all), which {tested}: more df for it, not a "
                "test of their own"]
    if decision.borrowed == "alone" and borrowed is not None and borrowed.inflation > 1:
        return ["  check seed: the borrowed variance was measured on other settings; a second "
                "seed of one config tests it (analysis.stats.variance.check): 1 more run, "
                f"{per_run}; analysis.check_seeds=1 runs it in this sweep"]
    return []
