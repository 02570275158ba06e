"""The race across seeds, in one place: its settings and the calibration of its spend (`settings`,
which the sweeper's dry run reads), the calibrated boundary a look compares at (`boundary`, pure),
the look after each wave and the waves the sweeper runs (`looks`), and the race's record
(`record`)."""
