"""Analysis of GRPO sweeps: collect runs, plot, report and promote configs.

Modules: :mod:`analysis.collect` (reading sweep directories; the data contract),
:mod:`analysis.aggregate` (seed aggregation, ranking, on-policy baseline),
:mod:`analysis.plots` (figures), :mod:`analysis.report` (``report.md``),
:mod:`analysis.promote` (Hydra preset of the best configs), :mod:`analysis.synthetic`
(contract-conforming sweeps for tests and benchmarks). Command line: ``python -m analysis``.
"""
