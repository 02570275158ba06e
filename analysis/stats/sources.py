"""Which seed variance a sweep's comparisons rest on: its own seeds, a one-seed grid's additive
residual, an earlier sweep's (borrowed, inflated where the sweeps ran different training
settings), the two pooled, or none (:mod:`analysis.stats.variance` says what each is)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from analysis.stats.effects import additive_variance
from analysis.stats.variance import ConfigData, SeedVariance, check, combine, upper_bound_factor


def seed_variance(configs: Sequence[ConfigData], frame: pd.DataFrame, keys: Sequence[str],
                  borrowed: SeedVariance | None,
                  unborrowed: str = "nothing borrowed") -> SeedVariance:
    """The seed variance from the best source a sweep has, in this order: seeds in the sweep
    (pooled over ``configs``; where at most half the configs have them, on fewer df than
    ``borrowed``, they are the check seeds of a one-seed sweep, :func:`check`; a multi-seed
    sweep with a failed run keeps its own); the additive model's residual of a one-seed grid of two or more
    swept ``keys`` (``frame``: a row a run, :func:`additive_variance`), pooled with ``borrowed``
    (an earlier sweep's) where :func:`combine` finds them in agreement; ``borrowed`` alone;
    none, saying why (``unborrowed``: why nothing was borrowed)."""
    pooled = SeedVariance.pooled(configs)
    usable = borrowed is not None and borrowed.usable
    if pooled.source == "seeds":
        seeded = sum(c.n_seeds > 1 for c in configs)
        checks = usable and pooled.df < borrowed.df and 2 * seeded <= len(configs)
        return check(pooled, borrowed) if checks else pooled
    additive = additive_variance(frame, keys)
    refused = () if borrowed is None or usable else (borrowed.text,)
    if additive is not None and usable:
        return combine(additive, borrowed)
    if additive is not None:
        return additive.with_notes(*refused)
    if usable:
        return borrowed
    return SeedVariance.missing(
        "one seed per config and one swept key (no additive model to measure it with); "
        + (unborrowed if borrowed is None else borrowed.text))


def lent(seeds: SeedVariance, text: str, outside: Sequence[str]) -> SeedVariance:
    """``seeds`` (a source sweep's pooled variance) as a borrowed variance, ``text`` where from:
    as it is, or inflated to its upper 95% bound where the borrowing sweep runs settings
    ``outside`` those its source ran (``analysis.aggregate.SEED_VARIANCE_KEYS``)."""
    if not outside:
        return SeedVariance(seeds.variance, seeds.df, "borrowed", text)
    factor = upper_bound_factor(seeds.df)
    shown = "; ".join(outside[:3]) + (f"; and {len(outside) - 3} more" if len(outside) > 3 else "")
    return SeedVariance(seeds.variance * factor, seeds.df, "borrowed", (
        f"{text}, inflated x{factor:.2f} to its upper 95% confidence bound ({seeds.variance:.3g} "
        f"measured): this sweep runs settings that change the seed variance and that sweep did "
        f"not ({shown})"), inflation=factor)
