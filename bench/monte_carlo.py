"""The calibration benches' shared pieces: a simulated rate with its Monte Carlo error (the
binomial standard error over the simulated sweeps), and a simulated grid sweep."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.stats.effects import VALUE
from analysis.stats.variance import ConfigData

Cells = list[tuple[tuple[int, ...], float]]
"""A grid's configs: each one's levels of the keys k0, k1, ... and its seed sd."""


def rate(values: Sequence[bool], digits: int = 1, width: int = 0) -> str:
    """``4.2% ± 0.6``: the share of True in ``values`` and its standard error, in percent with
    ``digits`` decimals (the share right-aligned in ``width`` characters)."""
    p = float(np.mean(values))
    return f"{100 * p:{width}.{digits}f}% ± {100 * math.sqrt(p * (1 - p) / len(values)):.{digits}f}"


def grid_sweep(cells: Cells, n: int, step: float,
               rng: np.random.Generator) -> tuple[list[ConfigData], pd.DataFrame]:
    """One simulated sweep of the grid ``cells``, ``n`` seeds a config, each config's mean
    ``step`` times its first key's level below 0: its configs and the frame `main_effects` reads
    (a row a seed: the keys k0, k1, ... as strings, and VALUE)."""
    keys = [f"k{i}" for i in range(len(cells[0][0]))]
    configs = [ConfigData(str(levels), rng.normal(-step * levels[0], sd, n)) for levels, sd in cells]
    frame = pd.DataFrame([{**{k: str(v) for k, v in zip(keys, levels, strict=True)}, VALUE: x}
                          for (levels, _), c in zip(cells, configs, strict=True)
                          for x in c.seed_values])
    return configs, frame
