"""A sweep's jobs checked before any is launched, from plain values (override strings, job
numbers, messages): the refusals of what a sweep may not sweep, the check seeds' jobs, each
check's messages grouped by the jobs they concern (`SweepPlan`), the line that refuses jobs
that are one run. The sweeper (`hydra_plugins.grpo_sweeps.validating_sweeper`) composes the
jobs with Hydra and prints what these say; nothing here reads Hydra's objects."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo.config.rules import CHECK_SEEDS, RULES, SEED_MAX
from grpo.run.run_config import sweepable, without_seed

JOB_SUBDIR = "${hydra.job.num}"
"""The run directories of a sweep as the monitor, the summary, the analysis and a race read them:
`<sweep>/<job number>`; a sweep with another `hydra.sweep.subdir` is refused."""
SWEEP_WIDE = ("pruning", "budget", "race")
"""Config groups and sections that hold for a whole sweep (one pruner, one budget, one race):
never swept."""


def refuse(problems: list[str]) -> None:
    """Exit 2 with the sweep's problems in one line, where there are any."""
    if problems:
        print("error: " + "; ".join(problems) + "; nothing was submitted", file=sys.stderr)
        sys.exit(2)


@contextmanager
def kept_out_of_collection() -> Iterator[Callable[[], None]]:
    """A block that makes many objects meant to live on (a sweep's composed configs, some 1,400
    objects a job, all kept until the sweep is priced and launched). Calling what it gives moves
    every object made so far out of the cyclic garbage collector's reach (`gc.freeze`): its full
    passes would otherwise scan every config made so far each time more are made (8 passes, 1.3
    to 1.9 s of a 480-job dry run, bench/dry_run_scale.py), and now scan only the newest. The
    block's end hands them all back (`gc.unfreeze`); garbage among them is collected then."""
    try:
        yield gc.freeze
    finally:
        gc.unfreeze()


def job_set(nums: list[int], labels: dict[int, str]) -> str:
    """The jobs a message concerns: one job by its label (`job #3 [lr=1e-4]`), all of them
    (`all 9 jobs`), else their numbers in runs (`jobs #0, #3-#8`). `labels`: every job's."""
    if len(nums) == 1:
        return labels[nums[0]]
    if len(nums) == len(labels):
        return f"all {len(nums)} jobs"
    runs: list[list[int]] = []
    for num in sorted(nums):
        if runs and num == runs[-1][1] + 1:
            runs[-1][1] = num
        else:
            runs.append([num, num])
    return "jobs " + ", ".join(f"#{a}" if a == b else f"#{a}-#{b}" for a, b in runs)


def repeated_values(sweeps: Sequence[tuple[str, Sequence[tuple[str, Any]]]]) -> list[str]:
    """One line per swept override that gives a value more than once (`learning_rate=3e-4,0.0003`:
    numbers compared as numbers): the jobs of that value would be one run repeated. `sweeps`:
    each swept override's text and its values, each as written and as parsed
    (`grpo.sweep.hydra_compat.swept_values`)."""
    problems = []
    for line, pairs in sweeps:
        first: dict[Any, str] = {}  # each value (numbers as numbers) -> its first text
        repeated: list[str] = []
        for text, value in pairs:
            same = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else text
            if same in first and first[same] not in repeated:
                repeated.append(first[same])
            first.setdefault(same, text)
        if repeated:
            problems.append(f"{line}: {' and '.join(repeated)} "
                            f"{'is' if len(repeated) == 1 else 'are'} given more than once: the jobs "
                            "of one value would be one run repeated (the same config and seed), "
                            "not more measurements (seeds of a config: sweep seed=0,1); give each "
                            "value once")
    return problems


def seed_swept(swept: set[str]) -> bool:
    """Whether the seed is among the swept keys, however written (`seed`, `+seed`, `++seed`)."""
    return any(key.lstrip("+") == "seed" for key in swept)


def swept_key_problem(swept: set[str], racing: bool, subdir: Any) -> list[str]:
    """The first refusal of what the sweep sweeps (keys as written, `swept`) or where it puts its
    runs (`hydra.sweep.subdir`, unresolved), none where there is none: a sweep-wide key
    (`SWEEP_WIDE`), a key that says how a config is run, not what it is
    (`grpo.run.run_config.sweepable`), the seed of a race (`racing`), another subdir than
    `JOB_SUBDIR`."""
    wide = sorted(k for k in swept if k.split(".")[0].split("/")[0] in SWEEP_WIDE)
    if wide:
        return [f"{', '.join(wide)} cannot be swept: pruning, budget and race hold for the whole "
                "sweep (one pruner compares its runs); give one value"]
    how_run = sorted(k for k in swept if k.lstrip("+") != CHECK_SEEDS and not sweepable(k))
    if how_run:
        they = "they say" if len(how_run) > 1 else "it says"
        return [f"{', '.join(how_run)} cannot be swept: {they} how a config is run, measured, "
                "logged or stopped, not what it is (grpo.run.run_config.sweepable): each config "
                "would be trained again under each value, the same runs under other names, and "
                "their seeds counted twice; give one value"]
    if racing and seed_swept(swept):
        return ["seed cannot be swept in a race (race.max_seeds is set): the race gives wave w "
                "seed `seed` + w - 1; set seed to the first one"]
    if subdir != JOB_SUBDIR:
        return [f"hydra.sweep.subdir={subdir}: the live monitor, the summary, the report and a "
                f"race read a sweep's runs from <sweep>/<job number> (hydra.sweep.subdir="
                f"{JOB_SUBDIR}, the default); runs elsewhere would be called failed, and two "
                "jobs could share one directory (a check seed and its config); drop the "
                "hydra.sweep.subdir override"]
    return []


def check_seed_jobs(jobs: list[Sequence[str]], swept: set[str], racing: bool, value: Any,
                    seed: Any) -> list[list[str]]:
    """`analysis.check_seeds` = n (`value`, as given): the first n configs of `jobs` (each job's
    overrides) again with seed `seed` + 1, jobs of this sweep after the grid's, whose seeds test a
    borrowed seed variance (`analysis.stats.variance.check`); exit 2 where the key is swept or
    its value breaks its rule (`grpo.config.rules.RULES`), where they mean nothing (a race,
    seeds swept, more than half the configs) or where the seed would be out of range."""
    if any(key.lstrip("+") == CHECK_SEEDS for key in swept):
        refuse([f"{CHECK_SEEDS} cannot be swept: it is how many configs of the sweep get a "
                f"second seed, one number for the whole sweep; give one value ({CHECK_SEEDS}=1, "
                "or 0 for none)"])
    rule = RULES[CHECK_SEEDS]
    if (problem := rule.problem(value)) is not None:
        refuse([rule.message(CHECK_SEEDS, value, problem)])
    n = int(value)
    if n == 0:
        return []
    seed = int(seed) + 1
    problems = []
    if racing:
        problems.append("analysis.check_seeds with race.max_seeds: a race gives its configs "
                        "their seeds itself; drop one of them")
    if seed_swept(swept):
        problems.append("analysis.check_seeds with seed swept: every config has seeds of its "
                        "own already; drop analysis.check_seeds")
    if 2 * n > len(jobs):
        problems.append(f"analysis.check_seeds={n} for {len(jobs)} configs: check seeds are "
                        f"for at most half the configs ({len(jobs) // 2} here); for seeds of "
                        "every config sweep seed=0,1")
    if seed > SEED_MAX:
        problems.append(f"analysis.check_seeds with seed={seed - 1}: the check seed {seed} is "
                        f"past the largest seed {SEED_MAX}")
    refuse(problems)
    return [[*without_seed(job), f"seed={seed}"] for job in jobs[:n]]


@dataclass
class SweepPlan:
    """A sweep's jobs as their checks left them: each job's label (`job #3 [lr=1e-4]`, by job
    number), the listing line of each valid job, and each message (warning or error) with the
    jobs it concerns, in order, each printed once (`job_set`)."""

    labels: dict[int, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    warnings: dict[str, list[int]] = field(default_factory=dict)
    errors: dict[str, list[int]] = field(default_factory=dict)

    def label(self, num: int, name: str, check_seed: str | None) -> str:
        """Job `num`'s label, by its swept values `name` ('' where none), kept: `check_seed`
        (its seed override) where it is a check seed's job."""
        check = f" {check_seed}: check seed" if check_seed is not None else ""
        self.labels[num] = f"job #{num} [{name or 'no swept keys'}{check}]"
        return self.labels[num]

    def add(self, num: int, warnings: Sequence[str], errors: Sequence[str]) -> bool:
        """Job `num`'s check messages; whether it is valid (no error)."""
        for message in warnings:
            self.warnings.setdefault(message, []).append(num)
        for message in errors:
            self.errors.setdefault(message, []).append(num)
        return not errors

    def warning_lines(self) -> list[str]:
        """Each warning once, with the jobs it concerns."""
        return [f"warning: {job_set(nums, self.labels)}: {message}"
                for message, nums in self.warnings.items()]

    def error_text(self, n_jobs: int) -> str | None:
        """The refusal of the sweep's `n_jobs` jobs, its errors grouped by the jobs they concern;
        None where every job is valid."""
        if not self.errors:
            return None
        bad = {num for nums in self.errors.values() for num in nums}
        by_jobs: dict[tuple[int, ...], list[str]] = {}
        for message, nums in self.errors.items():
            by_jobs.setdefault(tuple(nums), []).append(message)
        return (f"error: {len(bad)} of {n_jobs} jobs are invalid; nothing was submitted.\n"
                + "\n".join(f"{job_set(list(nums), self.labels)}:\n" + "\n".join(f"  - {m}" for m in messages)
                            for nums, messages in sorted(by_jobs.items())))

    def followed_refusal(self, differing: dict[str, list[int]], sweep_dir: Path) -> str | None:
        """The one line that refuses a relaunch whose config differs from what a run it would
        follow (still queued or running in `sweep_dir`) trains: `differing`, each difference
        (trained -> launched) -> the jobs that have it; None where there is none."""
        if not differing:
            return None
        return (f"runs this launch would follow (still queued or running in {sweep_dir}) train "
                "another config than it launches: "
                + "; ".join(f"{job_set(nums, self.labels)}: {text}" for text, nums in differing.items())
                + " (trained -> launched); a relaunch cannot change a run that is being trained: "
                "launch it again with the trained values to follow them, or launch the new values "
                "into a new sweep directory (drop hydra.sweep.dir, or change experiment_name); "
                "multirun.yaml and jobs.json are left as they are")


def own_options(sets: Sequence[Sequence[int]], jobs: Sequence[Sequence[str]]) -> list[str]:
    """The overrides of the jobs of `sets` (of `jobs`, each job's overrides) that not every job
    of their set has, each once, in order."""
    return list(dict.fromkeys(o for nums in sets for num in nums for o in jobs[num]
                              if not all(o in jobs[m] for m in nums)))


def one_run_causes(chosen: dict[str, list[str]],
                   given: Sequence[tuple[str, str]]) -> dict[str, tuple[str, list[str]]]:
    """Each command-line override of `given` (its text, the key or group it sets: not swept)
    that sets a key that a config group option of `chosen` (each option the jobs of a set do not
    share -> the keys it sets, `hydra_compat.option_sets`: `loss=cispo` for
    `variants/field_axes=gspo`, whose defaults list chooses the loss) sets -> that key and those
    options: the command line's value wins over each option's, which may be why the jobs compose
    to one config."""
    causes: dict[str, tuple[str, list[str]]] = {}
    for text, keys in chosen.items():
        for line, key in given:
            if any(s == key or s.startswith(key + ".") for s in keys):
                causes.setdefault(line, (key, []))[1].append(text)
    return {cause: (key, list(dict.fromkeys(options))) for cause, (key, options) in causes.items()}


def _jobs_named(nums: Sequence[int], jobs: Sequence[Sequence[str]]) -> str:
    """The jobs `nums` (of `jobs`, each job's overrides), each named by the overrides it alone
    has: `jobs #0, #1 (variants/field_axes=base, gspo)`, or `jobs #0 [a=1 b=2], #3 [a=2]`."""
    differing = {num: [o for o in jobs[num] if not all(o in jobs[m] for m in nums)] for num in nums}
    keys = {o.split("=", 1)[0] for own in differing.values() for o in own}
    if len(keys) == 1 and all(len(own) == 1 for own in differing.values()):
        return (f"jobs {', '.join(f'#{num}' for num in nums)} ({keys.pop()}="
                + ", ".join(differing[num][0].split("=", 1)[1] for num in nums) + ")")
    return "jobs " + ", ".join(f"#{num} [{' '.join(differing[num]) or 'no swept keys'}]" for num in nums)


def one_run_refusal(sets: Sequence[Sequence[int]], jobs: Sequence[Sequence[str]],
                    overridden: dict[str, tuple[str, list[str]]]) -> str:
    """The line that refuses the sets of jobs `sets` (`grpo.run.run_config.repeated_runs`, of
    `jobs`, each job's overrides) as one run each, with `overridden`: each command-line override
    that made them equal -> the key it sets and the swept options that set that key too
    (`one_run_causes`)."""
    line = (f"{'; '.join(_jobs_named(nums, jobs) for nums in sets)} compose to one config and seed"
            f"{' (each set)' if len(sets) > 1 else ''}, no key that changes a run differing "
            "(grpo.run.run_config.repeated_runs): they would be one run repeated, not more "
            "measurements")
    if not overridden:
        return line + "; sweep one of them, or make them differ"

    def of(options: list[str]) -> str:  # variants/field_axes=gspo, cispo
        key = options[0].split("=", 1)[0]
        if all(o.split("=", 1)[0] == key for o in options):
            return f"{key}=" + ", ".join(o.split("=", 1)[1] for o in options)
        return ", ".join(options)

    causes = ", ".join(f"{cause} on the command line overrides the {key} that {of(options)} "
                       f"set{'s' if len(options) == 1 else ''}"
                       for cause, (key, options) in overridden.items())
    return (f"{line}: {causes} (a command-line value wins over every option's); drop "
            f"{' and '.join(overridden)}: each option sets its own")
