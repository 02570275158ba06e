"""Which seed variance a sweep's comparisons rest on, decided in one place (:func:`decide`) for
the dry run (from the sweep's shape: its configs' seed counts and its grid's residual df) and
for the report, the summary, the chain and the race (:func:`seed_variance`, from the runs):
its own seeds, a one-seed grid's additive residual (check seeds add their df to it), an
earlier sweep's (borrowed, inflated where the sweeps ran different training settings), the two
pooled, or none (:mod:`analysis.stats.variance` says what each is). A source named and not
used (refused, or not needed) is always said."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from analysis.stats.effects import additive_or_why
from analysis.stats.variance import (
    ConfigData,
    SeedVariance,
    check,
    combine,
    df_text,
)

Own = Literal["seeds", "checks", "additive", "none"]
Use = Literal["none", "refused", "unused", "alone", "checked", "combined"]
OWN_TEXT: dict[str, str] = {"seeds": "the sweep's own seeds", "checks": "the check seeds",
                            "additive": "the grid's additive residual", "none": "no seed variance"}
"""What a sweep measures itself (:attr:`Decision.own`), in words."""


@dataclass(frozen=True)
class Decision:
    """What a sweep measures itself (``own``, on ``own_df``) and what is done with a borrowed
    variance (``borrowed``). ``own``: ``seeds`` (a multi-seed sweep's pooled seeds), ``checks``
    (a one-key one-seed sweep's check seeds, at most half its configs), ``additive`` (a one-seed
    grid's additive residual over every run: a check seed's second run adds its df), ``none``.
    ``borrowed``: ``none`` (nothing named), ``refused`` (named, not usable: its text says why),
    ``unused`` (the sweep's own has as many df or more), ``alone`` (nothing of its own),
    ``checked`` (tested one-sided by the check seeds, :func:`check`), ``combined`` (tested
    against the grid's residual, :func:`combine`)."""

    own: Own
    own_df: float
    borrowed: Use

    def df(self, borrowed: SeedVariance | None) -> float:
        """The df the comparisons rest on, as far as the shape tells (a residual tested against
        a borrowed variance: the residual's; pooled, where the test finds them alike, more)."""
        return float(borrowed.df) if self.borrowed in ("alone", "checked") and borrowed else self.own_df

    def rests_on(self) -> str:
        """What the comparisons rest on, in a few words (the report's source, its df
        :meth:`df`): a borrowed variance tested against a grid's residual is named by the
        residual (what is used unless the two are shown alike)."""
        if self.borrowed in ("alone", "checked"):
            return "the borrowed variance"
        return OWN_TEXT[self.own]

    def says(self, borrowed: SeedVariance | None) -> str:
        """The decision in words, for the dry run (what the report will do)."""
        own = OWN_TEXT[self.own]
        if self.own != "none":
            own += f" ({df_text(self.own_df)} df)"
        return {
            "none": own,
            "refused": f"{own}; {borrowed.text if borrowed is not None else ''}",
            "unused": f"{own}; the borrowed variance is not used (the sweep's own seeds have "
                      "as many df, or every config has seeds)",
            "alone": "the borrowed variance",
            "checked": f"the borrowed variance, which {own} test (their own variance replaces it "
                       "where they show it too small: analysis.stats.variance.check)",
            "combined": f"{own}, which the borrowed variance is tested against (pooled only where "
                        "an F test with the power to see a 2x difference finds them alike, the "
                        "larger where they differ, else the residual alone: "
                        "analysis.stats.variance.combine)",
        }[self.borrowed]


def decide(seeds: Sequence[int], additive_df: float, borrowed: SeedVariance | None) -> Decision:
    """The one rule (every caller reads it from here): ``seeds`` each config's seed count,
    ``additive_df`` the residual df of the additive model of the swept keys over every run (0:
    no grid of two or more keys, or none left), ``borrowed`` the variance named to borrow
    (None: none named; not usable: refused). A sweep where at most half the configs have a
    second seed (check seeds) and a grid with a residual rests on that residual, the check
    seeds' df included (the grid's measurement on the most df, holding any interaction: the
    safe side); the borrowed one is tested against it (:func:`combine`). Without a grid, check
    seeds on fewer df than the borrowed variance test it one-sided (:func:`check`); seeds of as
    many df or more, or a multi-seed sweep, rest on themselves (the borrowed one said unused);
    nothing of its own: the borrowed one alone."""
    usable = borrowed is not None and borrowed.usable
    seeded = sum(n > 1 for n in seeds)
    pooled_df = float(sum(n - 1 for n in seeds))
    checks = 0 < 2 * seeded <= len(seeds)
    if pooled_df > 0 and not (checks and additive_df > 0):
        own: Own = "checks" if checks else "seeds"
        own_df = pooled_df
    elif additive_df > 0:
        own, own_df = "additive", float(additive_df)
    else:
        own, own_df = "none", 0.0
    if borrowed is None:
        return Decision(own, own_df, "none")
    if not usable:
        return Decision(own, own_df, "refused")
    if own == "none":
        return Decision(own, own_df, "alone")
    if own == "additive":
        return Decision(own, own_df, "combined")
    if own == "checks" and own_df < borrowed.df:
        return Decision(own, own_df, "checked")
    return Decision(own, own_df, "unused")


def seed_variance(configs: Sequence[ConfigData], frame: pd.DataFrame, keys: Sequence[str],
                  borrowed: SeedVariance | None,
                  unborrowed: str = "nothing borrowed") -> SeedVariance:
    """The seed variance :func:`decide` chooses for ``configs`` (their seeds), ``frame`` (a row
    a run: the swept ``keys`` and its value, for :func:`additive_variance`) and ``borrowed``
    (an earlier sweep's, or why it was not borrowed); none, saying why (``unborrowed``: why
    nothing was borrowed). A borrowed variance refused or not used is said in the notes."""
    found = additive_or_why(frame, keys)
    additive = found if isinstance(found, SeedVariance) else None
    decision = decide([c.n_seeds for c in configs], additive.df if additive is not None else 0,
                      borrowed)
    if decision.own in ("seeds", "checks"):
        own = SeedVariance.pooled(configs)
    elif decision.own == "additive":
        own = additive
        if len(frame) > len(configs):
            own = SeedVariance(own.variance, own.df, own.source,
                               f"{own.text}, the check seeds' second runs included", own.notes)
    else:
        own = SeedVariance.missing(
            f"one seed per config and {found}; "
            + (unborrowed if borrowed is None else borrowed.text))
    if decision.borrowed == "refused":
        return own if own.source == "none" else own.with_notes(borrowed.text)
    if decision.borrowed == "alone":
        return borrowed
    if decision.borrowed == "checked":
        return check(own, borrowed)
    if decision.borrowed == "combined":
        return combine(own, borrowed)
    if decision.borrowed == "unused":
        why = ("this sweep's configs have seeds of their own" if decision.own == "seeds" else
               f"the check seeds have as many df as it ({df_text(own.df)} against "
               f"{df_text(borrowed.df)})")
        return own.with_notes(f"the borrowed variance ({borrowed.describe()}) is not used: {why}")
    return own
