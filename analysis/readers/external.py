"""Reference curves from runs made outside the sweep (an expert-iteration or SFT run, a paper's
numbers), read for overlay on the sweep's figures (``make plots EXTERNAL=ei.csv``).

Input format
------------
A ``.csv`` file with a header row, or a ``.jsonl`` file of one JSON object per line (this
project's ``metrics.jsonl`` is one). Per row:

* ``step``: where the value was measured, a finite number. What it counts (GRPO steps, EI steps,
  SFT optimizer steps) is not in the file: it is said with ``--external-x`` (see :class:`External`);
* the value: the metric's own key (``train/entropy``) or its short name (``entropy``); an empty
  cell, a missing key or a non-finite value (``nan``, ``inf``) means no value at that step;
* ``label`` (optional): the curve's name in the legend; a file whose rows carry several labels
  holds one curve per label.

A step given twice keeps its last row (as in a resumed run's ``metrics.jsonl``). Anything else
(a line that is not a JSON object with an integer ``step``, a CSV row of the wrong width, a
value that is not a number) is an error naming the file and the line.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analysis.readers.run_rows import parse_line

# what --external-x says when the file's steps are GRPO steps: drawn on the sweep's own x axis
GRPO_STEPS = "grpo"
SUFFIXES = (".csv", ".jsonl")


@dataclass(frozen=True)
class External:
    """A reference curve: ``metric`` against ``step`` (sorted), drawn as ``label``.

    ``x_label`` says what ``step`` counts (``"EI step"``); the curve then gets its own x axis on
    top of the panel, scaled to its own steps, so that it and the sweep's curves each span the
    panel: they compare by progress through training. None: ``step`` counts GRPO steps and the
    curve shares the sweep's x axis.
    """

    label: str
    metric: str
    step: np.ndarray
    value: np.ndarray
    x_label: str | None = None
    source: Path | None = None


class ExternalFormatError(ValueError):
    """A malformed external file: the message names the file and the line."""


def read_external(path: Path, metric: str, label: str | None = None,
                  x_label: str | None = None) -> list[External]:
    """The curves of ``metric`` in ``path`` (one per ``label`` value in the file, in order of
    first appearance).

    ``label`` names the curve (default: the file's ``label`` column, else the file's stem);
    ``x_label`` says what the steps count, :data:`GRPO_STEPS` for GRPO steps (default: the
    steps of ``<label>``, on their own axis).
    """
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise ExternalFormatError(f"{path}: an external curve is a .csv or .jsonl file "
                                  f"(step, {metric.rpartition('/')[2]}[, label])")
    if not path.is_file():
        raise FileNotFoundError(f"external file {path} does not exist")
    rows = _csv_rows(path) if path.suffix == ".csv" else _jsonl_rows(path)
    by_label: dict[str, dict[float, float]] = {}
    keys = (metric, metric.rpartition("/")[2])
    for line, row in rows:
        step = _number(row.get("step"), path, line, "step")
        if step is None:
            raise ExternalFormatError(f"{path}:{line}: no finite step")
        name = row.get("label")
        name = str(name) if name not in (None, "") else path.stem
        value = next((row[k] for k in keys if k in row), None)
        value = _number(value, path, line, keys[0] if keys[0] in row else keys[1])
        points = by_label.setdefault(name, {})
        points.pop(step, None)
        if value is not None:
            points[step] = value
    if not any(by_label.values()):
        raise ExternalFormatError(f"{path}: no row has a value for {metric!r} (a column or key "
                                  f"named {keys[0]!r} or {keys[1]!r} next to 'step')")
    if label is not None and len(by_label) > 1:
        raise ExternalFormatError(f"{path}: holds the curves {sorted(by_label)} (its label "
                                  "column); drop --external-label to name each by its label")
    curves = []
    for name, points in by_label.items():
        steps = np.array(sorted(points), dtype=float)
        shown = label or name
        axis = None if x_label == GRPO_STEPS else (x_label or f"{shown} step")
        curves.append(External(shown, metric, steps, np.array([points[s] for s in steps]),
                               axis, path))
    return curves


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line number, {column: cell})`` of each data row; a row of the wrong width is an error."""
    with path.open(newline="", errors="replace") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if not header or "step" not in header:
            raise ExternalFormatError(f"{path}:1: the header names no 'step' column "
                                      f"(got {header or 'an empty file'})")
        for cells in reader:
            if not any(cell.strip() for cell in cells):
                continue
            if len(cells) != len(header):
                raise ExternalFormatError(f"{path}:{reader.line_num}: {len(cells)} cells, "
                                          f"the header has {len(header)}")
            yield reader.line_num, dict(zip(header, cells, strict=True))


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    """``(line number, row)`` of each non-blank line, read as ``metrics.jsonl`` is
    (:func:`analysis.readers.collect.parse_line`), but a damaged line is an error, not skipped."""
    with path.open(errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            row, damaged = parse_line(line)
            if row is None or damaged:
                raise ExternalFormatError(f"{path}:{number}: not a JSON object with an integer "
                                          f"'step': {line.strip()[:60]!r}")
            yield number, row


def _number(value: object, path: Path, line: int, key: str) -> float | None:
    """``value`` as a finite float; None when it is missing or not finite; an error when it is
    not a number."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ExternalFormatError(f"{path}:{line}: {key} is {value!r}, not a number")
    try:
        number = float(value)
    except ValueError:
        raise ExternalFormatError(f"{path}:{line}: {key} is {value!r}, not a number") from None
    return number if math.isfinite(number) else None
