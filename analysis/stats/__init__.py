"""The statistics of a sweep, as pure functions on in-memory values and frames (numpy, pandas,
scipy, statsmodels; no run directory is read and no file written: an import-linter contract
checks it). The readers (:mod:`analysis.readers.collect`, :mod:`analysis.decisions.ranking`), the report, the
race, the chain and the dry run call them; `tests/test_uncertainty.py` and its neighbours drive
them with values worked out by hand or by scipy and statsmodels directly.

* :mod:`~analysis.stats.levels`: the level (95%) and power (80%) every procedure works at.
* :mod:`~analysis.stats.critical`: Student's t, Tukey's studentized range, Hsu's one-sided
  Dunnett value (multivariate t), Welch's df of a pair.
* :mod:`~analysis.stats.variance`: a config's data and the seed variance, its bounds and the
  F test before pooling two of them.
* :mod:`~analysis.stats.sources`: which seed variance a sweep's comparisons rest on.
* :mod:`~analysis.stats.comparisons`: which configs can be compared, the test of equal seed
  variances, a config's interval, Tukey-Kramer verdicts, Hsu's set of configs that could be the
  best.
* :mod:`~analysis.stats.power`: what a design can detect, and what would decide.
* :mod:`~analysis.stats.effects`: the ANOVA of the swept keys and a one-seed grid's residual.
* :mod:`~analysis.stats.trends`: the other metrics' late values against the best config's.
* :mod:`~analysis.stats.placebo`: a config's margin over its placebo (``reward=random``) and the
  placebo's own gain over the pre-RL evaluation.
* :mod:`~analysis.decisions.race.boundary`: a race's calibrated boundary and the decision of each look.
"""
