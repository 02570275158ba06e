"""The levels every procedure of :mod:`analysis.stats` works at, and how they are written."""

from __future__ import annotations

ALPHA = 0.05
"""Level of every interval (95%) and of the family-wise error rate of the verdicts."""
POWER = 0.8
"""Power at which a design is sized (:mod:`analysis.stats.power`: the dry run's detectable
differences, the report's "what would decide") and at which the F test before pooling two seed
variances must see a 2x difference (:func:`analysis.stats.variance.combine`)."""


def level_text(alpha: float) -> str:
    """``95%`` for alpha 0.05, ``98.3%`` for 0.05 / 3: an interval's confidence level."""
    return f"{100 * (1 - alpha):.3g}%"


def p_text(p: float) -> str:
    """A p-value as written: two significant digits, ``<0.001`` below 0.001."""
    return f"{p:.2g}" if p >= 0.001 else "<0.001"
