"""The other metrics' trends (analysis.trends) against scipy's Welch test on the raw values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from analysis.collect import collect
from analysis.synthetic import write_multirun, write_run
from analysis.trends import trends, windows


def test_windows_cover_a_tenth_of_the_steps_and_at_least_three() -> None:
    assert windows(200) == (range(1, 21), range(181, 201))
    assert windows(10) == (range(1, 4), range(8, 11))
    assert windows(2) == (range(1, 3), range(1, 3))


def test_late_values_are_compared_with_the_best_config_beyond_the_noise(tmp_path: Path) -> None:
    """Three configs over 30 steps: entropy falls from 1.0 for the best; 'flat' stays at 1.0
    (clearly higher late); 'close' ends within the step-to-step noise of the best."""
    sweep = tmp_path / "s"
    write_multirun(sweep, ["learning_rate=0.001,0.0001,0.0002"])
    rng = np.random.default_rng(3)
    entropy = {0.001: lambda s: 1.0 - 0.02 * s, 0.0001: lambda s: 1.0 + 0 * s,
               0.0002: lambda s: 1.0 - 0.02 * s + 0.01}
    late = {}
    for job, (lr, curve) in enumerate(entropy.items()):
        values = {s: float(curve(s) + rng.normal(0, 0.02)) for s in range(1, 31)}
        late[lr] = [values[s] for s in range(28, 31)]
        rows = [{"step": 0, "eval/reward": 0.1}] + [
            {"step": s, "train/entropy": v, "eval/reward": 0.5 if lr == 0.001 else 0.3}
            for s, v in values.items()]
        write_run(sweep / str(job), {"learning_rate": lr}, rows, {"status": "completed"})
    collection = collect([sweep])
    labels = ["learning_rate=0.001", "learning_rate=0.0001", "learning_rate=0.0002"]
    got = {t.label: t for t in trends(collection, labels, labels[0], at_step=30)}
    assert got[labels[0]].versus_best == ""
    assert got[labels[0]].early == pytest.approx(np.mean([1.0 - 0.02 * s for s in (1, 2, 3)]), abs=0.05)
    # one seed each: Welch's t-test between the late window's steps (28-30), Holm over 2 configs
    flat, close = (stats.ttest_ind(late[lr], late[0.001], equal_var=False).pvalue
                   for lr in (0.0001, 0.0002))
    assert flat < close  # Holm: the smaller times 2, the larger at least that
    assert got[labels[1]].p_adjusted == pytest.approx(2 * flat)
    assert got[labels[2]].p_adjusted == pytest.approx(max(2 * flat, close))
    assert {got[label].noise for label in labels[1:]} == {"steps"}
    assert got[labels[1]].versus_best == "higher" and got[labels[1]].change == pytest.approx(
        got[labels[1]].late - got[labels[1]].early)
    assert got[labels[2]].versus_best == "within noise"
