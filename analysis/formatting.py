"""How the report, the monitor and the summaries write numbers and durations (a dash for a missing
value), without pandas."""

from __future__ import annotations

import math
from typing import Any

MISSING = "–"
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
