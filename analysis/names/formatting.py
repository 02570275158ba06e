"""How the report, the monitor and the summaries write numbers and durations (a dash for a missing
value), and how a swept value is written in a config label and ordered, without pandas."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

MISSING = "–"
LABEL = "config label"
"""The column of a run's config label (``key=value, ...`` of its swept keys) in every frame."""


def is_missing(value: Any) -> bool:
    """Whether ``value`` is None or NaN (how pandas hands back missing values)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_number(value: Any, digits: int = 3) -> str:
    """``value`` with ``digits`` decimals, or a dash when it is missing."""
    if is_missing(value):
        return MISSING
    return f"{value:.{digits}f}"


def fmt_duration(seconds: Any) -> str:
    """``2h05m``, ``12m30s`` or ``45s``; a dash when missing."""
    if is_missing(seconds):
        return MISSING
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def format_value(value: Any) -> str:
    """How a swept value is written in a config label."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):  # short, unless that would merge two values (1e-05, 1.000001e-05)
        short = f"{value:g}"
        return short if float(short) == value or math.isnan(value) else repr(value)
    return str(value)


def sort_key(value: Any) -> tuple[int, float, str]:
    """Order numbers numerically before strings, and missing values last."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return (2, 0.0, "")
    if isinstance(value, bool | int | float):
        return (0, float(value), "")
    return (1, 0.0, str(value))


DIFFERENCE_SPAN = 1.0
"""The most two rewards can differ by: every criterion a config is ranked by is a reward in
[0, 1], so a difference of two (a config minus another, a level's effect) lies in [-1, 1]."""


def difference_interval(lo: float, hi: float) -> tuple[float, float, str]:
    """A difference's interval as written: ``lo`` and ``hi`` clipped to [-1, 1]
    (:data:`DIFFERENCE_SPAN`; the clipped interval holds the truth wherever the interval did)
    and a note where a bound was past it: ``no information: wider than two rewards can differ``
    where both were, ``clipped at -1 (rewards differ by at most 1)`` where one was; NaN stays NaN."""
    span = DIFFERENCE_SPAN
    below, above = lo < -span, hi > span
    note = ("no information: wider than two rewards can differ" if below and above
            else f"clipped at {'-' if below else '+'}{span:g} (rewards differ by at most {span:g})"
            if below or above else "")
    return max(lo, -span), min(hi, span), note


def fmt_difference_interval(lo: float, hi: float) -> str:
    """``[-0.052, -0.010]``; a dash when missing; past what two rewards can differ, clipped and
    said (:func:`difference_interval`): ``[-1.000, +1.000] (no information: wider than two
    rewards can differ)``."""
    if is_missing(lo) or is_missing(hi):
        return MISSING
    lo, hi, note = difference_interval(lo, hi)
    return f"[{lo:+.3f}, {hi:+.3f}]" + (f" ({note})" if note else "")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table."""
    def line(cells: Sequence[Any]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *map(line, rows)])
