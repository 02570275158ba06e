"""The race's boundary: the level each look of a race compares at, calibrated by simulation so
that a truly best config leaves at some look with probability `alpha` (a Pocock-type boundary:
one level for every look).

A race looks after each wave (at most `max_seeds` looks) and each look keeps the configs Hsu's
comparisons with the best do not show worse than the best one
(`analysis.stats.comparisons.best_bounds`, each pair on `pair_variance`). Splitting `alpha` over the
looks (Bonferroni, `alpha / max_seeds` a look) bounds the chance that a truly best config ever
leaves by `alpha`, but the looks are strongly correlated (each adds one seed to the same means),
so that bound leaves much of `alpha` unspent: with 9 equal configs and 5 seeds, 1.9-2.9% of
configs ever leave where 5% is allowed. `boundary` instead finds, by simulation, the one level at
which exactly `alpha` of them leave, in the least favourable of the cases it simulates.

The first case simulated is the least favourable one of the means: every config equal (each
of them truly best), each seed's value of a config an independent standard normal (the scale
cancels), `sims` races with common random numbers (one fixed generator seed: the same level on
every machine). Each look is the project's rule on equal seed counts: the pooled variance of the
configs still in, or a pair's own where at least as large (on its Welch-Satterthwaite df,
shrunk at the 2- and 3-seed looks, `analysis.stats.critical.welch_df`), Hsu's one-sided critical value for the configs still in, a config leaves where its bound is below 0; a config that leaves gets no more
seeds. The rate is the share of configs that leave at some look (each config truly best), and the
level is found by bisection between `alpha / max_seeds` (whose rate is at most `alpha`) and
`alpha` (a look never compares above the race's `alpha`). The simulated look is the race's rule
as it is, the pair rule included: where a pair's own variance is the larger (which equal
variances make happen by chance) its comparison is wider, and the level is raised until the
rate is `alpha` again, so the slack the pair rule leaves under equal variances is spent.

Unequal seed variances among truly best configs (issue 59, item 4): a level calibrated where
every config has one seed sd does not hold where two tied best configs differ in it (2 configs,
5 seeds: 0.0252 lost one of them in 7.2% of races at seed sd 1 against 0.1), since Welch's df,
which leave the equal case's slack the level spends, are then about right. So `boundary` also
simulates, at each ratio of `SD_RATIOS`, two configs tied for the best at seed sd 1 and 1 / ratio
with the others `FAR_BEHIND` (they leave at the first look that can tell, and the pair races on
alone), and takes the least of the levels (each found by bisection below the one before): 2
configs, 5 seeds 0.0155. With 3 or more configs a last case: every config tied for the best,
alternately of seed sd 1 and 1 / `ALL_TIED_RATIO` (100), as many configs near a floor beside
learning ones are (issue 59's remaining items: the other cases' levels, 0.0178 with a wave-1
variance and 0.0215 without for 9 configs and 5 seeds, lost a truly best config there in 6.4%
and 6.3% of races); it sets the level of 9 configs and 5 seeds: 0.0157 with a wave-1 variance
and 0.0184 without (0.0185 before the 3-seed look's Welch df was shrunk towards 2,
`analysis.stats.critical.THREE_SEED_SHRINK`), its bisection another minute and a half. Equal configs then leave in about
3% where 5% is allowed (`bench/race_unequal.py`, docs/how-to/racing.md).

A look's pair rule is the comparisons' own (`analysis.stats.critical.pair_rule`: the larger of
the pool and the pair's own, the own on `welch_df`), read, not copied.

Wave 1 has one seed a config: its look can leave a config out only with a seed variance from
elsewhere (a borrowed one, or a grid's additive residual). `first_look` says whether it has one;
a race decides that at its first look and keeps the level (`analysis.decisions.race.looks`). The first look's
variance is taken as known (infinite df): with 9 configs and 5 seeds a first look on 4, 10 and
infinite df gives 0.0184, 0.0178 and 0.0179 (a simulation with the first look's variance drawn on
its df), so the known variance gives the smaller, safer level within the simulation's error. How well the level holds in races through
the real readers, with problem noise, unequal variances and a truth that is not all equal, is
`bench/race_calibration.py`'s table (docs/how-to/racing.md).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from analysis.stats.comparisons import SweepComparisons
from analysis.stats.critical import mcb_critical, pair_rule

SIMS = 4000
"""Simulated races of the calibration: the rate's Monte Carlo error is about 0.1 point."""
BISECTIONS = 8
"""Halvings of the level's bracket: to (alpha - alpha / max_seeds) / 256, 1.6e-4 at alpha 0.05 and
5 seeds, where the rate moves by less than its Monte Carlo error."""
GENERATOR_SEED = 0
"""The simulation's one random seed (common random numbers for every level tried)."""


@dataclass(frozen=True)
class Boundary:
    """The level (`level`) each look of a race of `n_configs` configs and `max_seeds` seeds
    compares at for a family-wise rate `alpha` over its looks, with (`first_look`) or without a
    seed variance at wave 1; `rate` the simulated share of truly best configs that leave at some
    look at that level in the least favourable of the calibration's cases (every config equal,
    or a tied best pair at each of `SD_RATIOS`), `bonferroni_rate` at `alpha / max_seeds` with
    every config equal; `ratio` the seed-sd ratio of the tied pair that set the level (1: every
    config equal), or of every config tied alternately where `all_tied` (`ALL_TIED_RATIO`)."""

    n_configs: int
    max_seeds: int
    alpha: float
    first_look: bool
    level: float
    rate: float
    bonferroni_rate: float
    ratio: float
    all_tied: bool = False

    def describe(self) -> str:
        """``each look at 0.0158, calibrated by simulation so that a truly best config leaves at
        some look of waves 2 on (no seed variance at wave 1) in at most 5.0% of 4000 simulated
        races of 2 configs, all equal or a tied best pair of seed sds 1 to 100 times apart (the
        least favourable: 10 times; alpha 0.05; Bonferroni's 0.05 / 5 = 0.01 a look: 2.0%)``."""
        looks = "every wave" if self.first_look else "waves 2 on (no seed variance at wave 1)"
        worst = ("all equal" if self.ratio == 1 else
                 f"every config tied, seed sds {self.ratio:g} times apart" if self.all_tied
                 else f"{self.ratio:g} times")
        tied = (f", or every config tied with seed sds alternately {ALL_TIED_RATIO:g} times apart"
                if self.n_configs > 2 else "")
        return (f"each look at {self.level:.3g}, calibrated by simulation so that a truly best "
                f"config leaves at some look of {looks} in at most {100 * self.rate:.1f}% of "
                f"{SIMS} simulated races of {self.n_configs} configs, all equal or a tied best "
                f"pair of seed sds {SD_RATIOS[1]:g} to {SD_RATIOS[-1]:g} times apart{tied} (the least "
                f"favourable: {worst}; alpha {self.alpha:g}; "
                f"Bonferroni's {self.alpha:g} / {self.max_seeds} = "
                f"{self.alpha / self.max_seeds:.3g} a look: {100 * self.bonferroni_rate:.1f}%)")


EQUAL_SEEDS = round(math.sqrt(0.5), 6)
"""Hsu's lambda of a comparison between configs of equal seed counts (`best_bounds`' rounding)."""


@functools.lru_cache(maxsize=4096)
def _critical(alive: int, df: float, level: float) -> float:
    """Hsu's critical value among `alive` configs of equal seed counts (inf for one config)."""
    return math.inf if alive < 2 else mcb_critical((EQUAL_SEEDS,) * (alive - 1), df, level)


def _critical_values(n_alive: np.ndarray, df: np.ndarray, level: float) -> np.ndarray:
    """`_critical` of each comparison, by its race's configs still in (`n_alive`, broadcast
    against `df`) and its df (`df`), computed once for each (count, df) that occurs."""
    counts = np.broadcast_to(n_alive, df.shape)
    values = np.empty(df.shape)
    for a in np.unique(counts):
        at = counts == a
        dfs, where = np.unique(df[at], return_inverse=True)
        values[at] = np.array([_critical(int(a), float(d), level) for d in dfs])[where.ravel()]
    return values


def _deciding_critical(n_alive: np.ndarray, df: np.ndarray, level: float,
                       needed: np.ndarray) -> np.ndarray:
    """A critical value for each comparison (sims, k, k) that decides it as its own (`_critical`
    on its df, `df`) does: ``needed`` is the value at which the comparison's bound is 0 (it leaves
    where its critical value is below). A pair's Welch df is any tenth, hundreds of (count, df)
    a look, a few ms each; the critical value falls with the df, so the whole df below's value
    decides a comparison whose ``needed`` is outside the values at the whole dfs around its df
    (the tail: nearly every comparison), and only the few inside get their own."""
    below, above = np.floor(df), np.ceil(df)
    at_below = _critical_values(n_alive[:, None, None], below, level)
    at_above = _critical_values(n_alive[:, None, None], above, level)
    undecided = ((below != above) & (needed > at_above * (1 - 1e-9))
                 & (needed <= at_below * (1 + 1e-9)))
    if undecided.any():
        own = _critical_values(np.broadcast_to(n_alive[:, None, None], df.shape)[undecided],
                               df[undecided], level)
        at_below = at_below.copy()
        at_below[undecided] = own
    return at_below


def look(values: np.ndarray, alive: np.ndarray, level: float, first_look: bool) -> np.ndarray:
    """Which configs leave at one look of each simulated race, as `analysis.decisions.race.looks.decide` decides
    on equal seed counts: `values` the seed values so far, (sims, seeds, n_configs); `alive` the
    configs still in, (sims, n_configs) bool; returns (sims, n_configs) bool. With one seed the
    variance is the first look's, taken as known and 1 (none where not `first_look`)."""
    sims, seeds, k = values.shape
    means = values.mean(axis=1)
    n_alive = alive.sum(axis=1)
    pairs = alive[:, :, None] & alive[:, None, :] & ~np.eye(k, dtype=bool)[None]
    diff = means[:, :, None] - means[:, None, :]
    if seeds == 1:
        if not first_look:
            return np.zeros_like(alive)
        variance = np.ones((sims, k, k))
        df = np.full((sims, k, k), math.inf)
    else:
        squares = ((values - means[:, None, :]) ** 2).sum(axis=1)
        pooled = (squares * alive).sum(axis=1) / np.maximum(n_alive * (seeds - 1), 1)
        spread = squares / (seeds - 1)
        # the pair rule (analysis.stats.critical.pair_rule, the comparisons' own): a pair's
        # own variance where at least the pool, on its Welch df; else the pool on its df
        pool_df = (n_alive * (seeds - 1.0))[:, None, None]
        variance, df, _ = pair_rule(spread[:, :, None], seeds, spread[:, None, :], seeds,
                                    pooled[:, None, None], pool_df)
        df = np.where(pairs, df, pool_df)  # a config with itself or one out: never decided
    se = np.sqrt(variance * 2 / seeds)
    with np.errstate(invalid="ignore", divide="ignore"):
        needed = np.where(pairs, -diff / se, np.nan)
    critical = _deciding_critical(n_alive, df, level, needed)
    bound = diff + critical * se
    return alive & (np.where(pairs, bound, np.inf).min(axis=2) < 0)


def elimination_rate(level: float, values: np.ndarray, first_look: bool,
                     best: Sequence[int] | None = None) -> float:
    """The share of the truly best configs (`best`, indices; all of them by default) that leave
    at some look when every look compares at `level`: `values` each simulated race's seed values,
    (sims, max_seeds, n_configs) (the calibration's: all configs equal with unit seed variance,
    module docstring); a config that leaves gets no more seeds."""
    sims, max_seeds, k = values.shape
    alive = np.ones((sims, k), bool)
    for seeds in range(1, max_seeds + 1):
        alive &= ~look(values[:, :seeds, :], alive, level, first_look)
    return float(1 - alive[:, list(range(k)) if best is None else list(best)].mean())


SD_RATIOS = (1.0, 2.0, 4.0, 10.0, 100.0)
"""The seed-sd ratios of the tied best pair the level is calibrated at (module docstring; 1: every
config equal): the level is the least of the levels that hold `alpha` at each. With 2 configs
and 5 seeds those levels were 0.0252 at 1, 0.0239 at 2, 0.0188 at 4, 0.0156 at 10 and 0.0151 at
100 on Welch's df unshrunk (0.0155 at 100 with the 2-seed look's df shrunk), where the level of
equal sds alone (0.0252) lost a truly best config in 5.3%, 6.3%, 7.3%
and 7.4% of races (issue 59, item 4). Beyond 100 the pair's own variance is the larger one's
and Welch's df its n - 1, as at 100. `bench/race_unequal.py` checks the level at each ratio on
other random numbers (its table in docs/how-to/racing.md: at most 5.8% +- 0.5)."""
FAR_BEHIND = -100.0
"""The true mean of the configs outside the tied pair in the unequal-spread cases (seed sd 1):
far enough behind that they leave at the first look that can tell."""


def tied_pair_values(n_configs: int, max_seeds: int, ratio: float, sims: int,
                     rng: np.random.Generator) -> np.ndarray:
    """Seed values of `sims` races, (sims, max_seeds, n_configs): configs 0 and 1 tie for the
    best at 0 with seed sd 1 and 1 / `ratio`, the others at `FAR_BEHIND` with seed sd 1."""
    means = np.array([0.0, 0.0] + [FAR_BEHIND] * (n_configs - 2))
    sds = np.array([1.0, 1.0 / ratio] + [1.0] * (n_configs - 2))
    return means + sds * rng.standard_normal((sims, max_seeds, n_configs))


ALL_TIED_RATIO = 100.0
"""The seed-sd ratio of the calibration's last case with 3 or more configs: every config tied for
the best, alternately of seed sd 1 and 1 / ratio (`all_tied_values`), as many configs near a
floor beside learning ones are. The level of the other cases lost a truly best config there in
6.4% of 9-config races (1 against 0.01; 5.5% at 0.1; issue 59; +- 0.5 over races, the configs
of a race leaving together), so this case takes part
in the least of the levels; at 100 it is the least favourable of `SD_RATIOS`
(`bench/race_unequal.py`'s ``all`` rows)."""


def all_tied_values(n_configs: int, max_seeds: int, ratio: float, sims: int,
                    rng: np.random.Generator) -> np.ndarray:
    """Seed values of `sims` races, (sims, max_seeds, n_configs): every config at 0, alternately of
    seed sd 1 and 1 / `ratio` (config 0 at 1)."""
    sds = np.where(np.arange(n_configs) % 2 == 0, 1.0, 1.0 / ratio)
    return sds * rng.standard_normal((sims, max_seeds, n_configs))


def _largest_holding(values: np.ndarray, first_look: bool, alpha: float, low: float,
                     high: float, best: Sequence[int] | None) -> float:
    """The largest level in [low, high] (to (high - low) / 2^BISECTIONS) at which at most `alpha`
    of the truly best configs (`best`) of `values` leave, where more than `alpha` leave at
    `high` (`low` where none holds)."""
    for _ in range(BISECTIONS):
        mid = (low + high) / 2
        if elimination_rate(mid, values, first_look, best) > alpha:
            high = mid
        else:
            low = mid
    return low


@functools.lru_cache(maxsize=64)
def boundary(n_configs: int, max_seeds: int, alpha: float, first_look: bool) -> Boundary:
    """The calibrated level of a race's looks (module docstring): the least of the levels that
    hold `alpha` with every config equal, with a tied best pair at each of `SD_RATIOS` and (3 or
    more configs) with every config tied at `ALL_TIED_RATIO`; about two and a half minutes for 9
    configs and 5 seeds on a shared core, once a process (cached)."""
    rng = np.random.default_rng(GENERATOR_SEED)
    equal = rng.standard_normal((SIMS, max_seeds, n_configs))
    bonferroni = alpha / max_seeds
    low_rate = elimination_rate(bonferroni, equal, first_look)
    if n_configs < 2 or max_seeds < 2:
        return Boundary(n_configs, max_seeds, alpha, first_look, bonferroni, low_rate, low_rate,
                        1.0)
    worlds = [(equal, None, (1.0, False))] + [
        (tied_pair_values(n_configs, max_seeds, ratio, SIMS, rng), (0, 1), (ratio, False))
        for ratio in SD_RATIOS[1:]]
    if n_configs > 2:  # every config tied, alternately of seed sd 1 and 1 / ALL_TIED_RATIO
        worlds.append((all_tied_values(n_configs, max_seeds, ALL_TIED_RATIO, SIMS, rng), None,
                       (ALL_TIED_RATIO, True)))
    level, worst = alpha, (1.0, False)
    for values, best, case in worlds:  # each lowers the level where it does not hold there
        if elimination_rate(level, values, first_look, best) > alpha:
            level, worst = _largest_holding(values, first_look, alpha, bonferroni, level, best), case
    rate = max(elimination_rate(level, values, first_look, best) for values, best, _ in worlds)
    return Boundary(n_configs, max_seeds, alpha, first_look, level, rate, low_rate, *worst)


ONE_LEFT = "one config remains"
NONE_LEFT = "no config remains: every config still in had a run stopped early"
MAX_SEEDS = "every config still in has max_seeds seeds"
OVER_BUDGET = "the next wave would pass the budget"


STOPPED_EARLY = "a run stopped early"
"""Why a config whose run collapsed, diverged or was pruned left (followed by its statuses)."""
NOT_REACHED = "no run reached the compared step"
"""Why a config none of whose runs reached the step the others are compared at left."""
RUN_DEPARTURES = (STOPPED_EARLY, NOT_REACHED)


@dataclass(frozen=True)
class Decision:
    """What the look after wave `wave` decided: `alive` the configs that go on (best first),
    `left` those that left at this look and why, `end` why the race ends here (None: it goes
    on), `seed_variance` the seed variance the comparisons rest on, in words, `level` the
    family-wise rate the look compared at (`boundary`; None: no seed variance, so
    nothing was compared)."""

    wave: int
    alive: tuple[str, ...]
    left: dict[str, str] = field(default_factory=dict)
    end: str | None = None
    seed_variance: str = ""
    level: float | None = None

    def outside_alpha(self) -> dict[str, str]:
        """The configs of `left` that left because of their runs, not a comparison (a run
        stopped early, or none reached the compared step): they spent none of the race's alpha."""
        return {label: why for label, why in self.left.items() if why.startswith(RUN_DEPARTURES)}


def decision(wave: int, ranked: Sequence[str], comparisons: SweepComparisons | None,
             excluded: Mapping[str, str], not_compared: Mapping[str, str], max_seeds: int,
             level: float) -> Decision:
    """The look after wave ``wave`` (1-based): ``ranked`` the configs compared (best first),
    ``comparisons`` their comparisons at ``level`` (None: nothing was compared), ``excluded``
    the configs with a run stopped early (their statuses), ``not_compared`` those none of whose
    runs reached the compared step (where they stopped): which configs could still be the best,
    why each other one left, and whether the race ends here (``max_seeds``: the race's)."""
    left = {label: f"{STOPPED_EARLY} ({statuses})" for label, statuses in excluded.items()}
    left.update({label: f"{NOT_REACHED} ({where})" for label, where in not_compared.items()})
    if comparisons is None:
        could = [str(label) for label in ranked]
        variance = "none: no config was compared"
    else:
        could = list(comparisons.could_be_best)
        variance = comparisons.seeds.describe()
        left.update({label: comparisons.why_out(label) for label in ranked if label not in could})
    end = (NONE_LEFT if not could else ONE_LEFT if len(could) == 1
           else MAX_SEEDS if wave >= max_seeds else None)
    return Decision(wave, tuple(could), left, end, variance,
                    level if comparisons is not None and comparisons.decided else None)
