"""How the report, the monitor and the summaries write numbers and durations (a dash for a missing
value), and how a swept value is written in a config label and ordered, without pandas."""

from __future__ import annotations

import math
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
