"""How configs, metrics and numbers are named and written by every part of the analysis (the bottom
of analysis/: no reader, statistic or output)."""
