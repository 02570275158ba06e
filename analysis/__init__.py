"""Analysis of GRPO sweeps: collect runs, plot, report and promote configs.

Modules: :mod:`analysis.run_rows` (a run's metrics and status files, read without pandas),
:mod:`analysis.collect` (reading sweep directories into frames; the data contract),
:mod:`analysis.formatting` (numbers and durations in the report and the monitor),
:mod:`analysis.aggregate` (seed aggregation, ranking, on-policy baseline),
:mod:`analysis.plots` (figures), :mod:`analysis.external` (curves of runs made elsewhere, to
overlay), :mod:`analysis.report` (``report.md``),
:mod:`analysis.promote` (Hydra preset of the best configs), :mod:`analysis.synthetic`
(contract-conforming sweeps for tests and benchmarks), :mod:`analysis.metric_names` (metric names
and units in figures), :mod:`analysis.progress` (a sweep's progress read while it runs) and
:mod:`analysis.monitor` (the live sweep view and end-of-sweep summary). Command line:
``python -m analysis``.
"""
