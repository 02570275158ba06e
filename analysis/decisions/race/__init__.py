"""The race across seeds, in one place: the look after each wave and the waves the sweeper runs
(`looks`), the calibrated boundary a look compares at (`boundary`, pure) and the race's record
(`record`); its config keys are `grpo.config.race`'s, which the dry run reads below the analysis."""
