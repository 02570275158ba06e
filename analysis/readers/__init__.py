"""The readers of run and sweep files: a run's metrics and status (`run_rows`), sweep directories
into frames (`collect`), the per-problem outcomes of the runs a ranking compares (`outcomes`), the jobs a launcher recorded (`jobs`), reference curves made outside the
sweep (`external`), and the writer of the same contract for tests and benches (`synthetic`)."""
