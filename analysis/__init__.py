"""Analysis of GRPO sweeps, in folders by role, each importing only those below it (an import-linter
contract): :mod:`analysis.outputs` (figures, ``report.md``, promote, the live view) above
:mod:`analysis.decisions` (the ranking and its seed variance, trends, the race) above
:mod:`analysis.readers` (run and sweep files) and :mod:`analysis.stats` (pure statistics), above
:mod:`analysis.names` (how configs, metrics and numbers are written). Command line:
``python -m analysis``.
"""
