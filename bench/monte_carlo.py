"""The calibration benches' one piece of shared arithmetic: a simulated rate with its Monte Carlo
error (the binomial standard error over the simulated sweeps)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def rate(values: Sequence[bool], digits: int = 1, width: int = 0) -> str:
    """``4.2% ± 0.6``: the share of True in ``values`` and its standard error, in percent with
    ``digits`` decimals (the share right-aligned in ``width`` characters)."""
    p = float(np.mean(values))
    return f"{100 * p:{width}.{digits}f}% ± {100 * math.sqrt(p * (1 - p) / len(values)):.{digits}f}"
