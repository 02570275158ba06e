"""The live sweep monitor and the end-of-sweep summary (``rich``; plain lines when not a terminal).

While a sweep runs, the launchers (``hydra_plugins/grpo_sweeps``) show one row per job,
refreshed in place: overrides, status, step/total, last train and validation reward, seconds
per step and ETA; a race's runs (``analysis.decisions.race.looks``) show their wave, under a line that says
where the race stands. ``python -m analysis watch [SWEEP]`` (``make watch``) shows the same view
of a running or finished sweep from any shell, with the sweep's detached driver above the runs
(:func:`driver_lines`: pending, running or gone). When stdout is not a terminal (CI, a log file) a
plain line is printed per run whenever its status changes or it gets another tenth of the way. At the end, :meth:`SweepMonitor.summary` prints one line per job
with its final status, the runs that resumed and from which step, the best config (the
report's ranking) and where the report is.

The monitor's output may vanish under it: the terminal closed (a write fails with EIO) or the
reader of its pipe left (EPIPE). A launcher must still wait for its runs, so the monitor then goes
quiet instead of raising (:attr:`SweepMonitor.output_lost`) and points the lost file descriptor
(stderr too when it is the same file) at /dev/null, so that the process's other writes (logging,
the interpreter's last flush) do not fail either; a watch ends there, quietly.
"""

from __future__ import annotations

import errno
import os
import shlex
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from analysis.decisions.race.record import Race
from analysis.names.formatting import MISSING, fmt_duration, fmt_number
from analysis.outputs.progress import FINISHED_STATUSES, SUMMARY_ORDER, RunProgress, SweepProgress
from analysis.readers.jobs import read_jobs, scheduler_states
from grpo.run.driver import DriverRecord, driver_state, read_driver
from grpo.run.files import RunFileError, silence
from grpo.run.pruning import journal_problem

STYLES = {"running": "cyan", "starting": "cyan", "preempted": "cyan", "pending": "dim",
          "completed": "green",
          "collapsed": "yellow", "diverged": "magenta", "pruned": "blue", "cancelled": "red",
          "failed": "bold red"}
# which rows a terminal too small for the whole sweep keeps first
SHOW_FIRST = ("running", "starting", "preempted", "failed", "cancelled", "diverged", "collapsed",
              "pruned")
# a plain line per run each time it gets this fraction of its steps further
PLAIN_STEP_FRACTION = 0.1


def stopped_by(sig: int) -> int:
    """The exit status of a watch or a launcher stopped by signal `sig`: 128 + its number, as a
    shell reports a process that the signal ended (130 for Ctrl-C's SIGINT, 129 for SIGHUP)."""
    return 128 + sig


INTERRUPTED = stopped_by(signal.SIGINT)
"""The exit status of a watch or a launcher stopped by Ctrl-C."""
OUTPUT_LOST = 1
"""The exit status of a watch whose output is gone (see the module docstring)."""


def shown_path(path: Path) -> str:
    """``path`` relative to the working directory when it is below it, else absolute."""
    path = Path(path).absolute()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def make_command(target: str, sweep_dir: Path) -> str:
    """``make <target> SWEEP=<dir>`` for ``sweep_dir``, or where its path needs quoting (spaces,
    quotes) the ``python -m analysis <target> ...`` command that takes it as it is."""
    path = shown_path(sweep_dir)
    if shlex.quote(path) == path:
        return f"make {target} SWEEP={path}"
    option = "--sweep " if target == "plots" else ""
    return f"python -m analysis {target} {option}{shlex.quote(path)}"


def steps_text(run: RunProgress) -> str:
    """``120/600``, or ``120`` when the total is not known yet."""
    return f"{run.steps_done}/{run.n_steps}" if run.n_steps is not None else str(run.steps_done)


def eval_text(run: RunProgress) -> str:
    """``0.560 @50``: the last validation reward and the step it was measured at."""
    return MISSING if run.eval_reward is None else f"{run.eval_reward:.3f} @{run.eval_step}"


def status_text(run: RunProgress) -> str:
    """The status, with ``resumed @N`` when the run restarted."""
    if run.resumed_from:
        return f"{run.status} (resumed @{run.resumed_from[-1]})"
    return run.status


def counts_text(rows: Sequence[RunProgress]) -> str:
    """``2 completed, 1 running, 1 pending`` in the summary's order."""
    counts = Counter(r.status for r in rows)
    order = [*SUMMARY_ORDER, *sorted(set(counts) - set(SUMMARY_ORDER))]
    return ", ".join(f"{counts[s]} {s}" for s in order if counts[s])


def plain_line(run: RunProgress) -> str:
    """One run as a line of text (logs, CI, the summary); a race's runs name their wave."""
    wave = "" if run.wave is None else f"(wave {run.wave}) "
    parts = [f"#{run.num} {wave}{run.label}: {status_text(run)}", f"step {steps_text(run)}"]
    if run.train_reward is not None:
        parts.append(f"train {run.train_reward:.3f}")
    if run.eval_reward is not None:
        parts.append(f"eval {eval_text(run)}")
    if run.active and run.seconds_per_step is not None:
        parts.append(f"{run.seconds_per_step:.2f} s/step")
    if run.eta_s is not None:
        parts.append(f"ETA {fmt_duration(run.eta_s)}")
    if run.reason and not run.active:
        parts.append(" ".join(run.reason.split()))
    return ", ".join(parts)


def table(rows: Sequence[RunProgress], max_rows: int | None = None) -> Table:
    """The monitor's table; with ``max_rows``, the most telling rows (:data:`SHOW_FIRST`)."""
    shown = list(rows)
    if max_rows is not None and len(rows) > max_rows:
        rank = {s: i for i, s in enumerate(SHOW_FIRST)}
        keep = sorted(rows, key=lambda r: (rank.get(r.status, len(rank)), r.num))[:max_rows]
        shown = sorted(keep, key=lambda r: r.num)
    raced = any(run.wave is not None for run in rows)
    grid = Table(caption_justify="left", expand=False)
    for name, justify in (("#", "right"), *((("wave", "right"),) if raced else ()),
                          ("overrides", "left"), ("status", "left"),
                          ("step", "right"), ("train", "right"), ("eval", "right"),
                          ("s/step", "right"), ("ETA", "right")):
        grid.add_column(name, justify=justify, no_wrap=name != "overrides")
    for run in shown:
        grid.add_row(
            str(run.num), *((MISSING if run.wave is None else str(run.wave),) if raced else ()),
            run.label, Text(status_text(run), style=STYLES.get(run.status, "")),
            steps_text(run), fmt_number(run.train_reward), eval_text(run),
            MISSING if run.seconds_per_step is None or not run.active
            else f"{run.seconds_per_step:.2f}",
            fmt_duration(run.eta_s),
        )
    if len(shown) < len(rows):
        grid.caption = f"{len(rows) - len(shown)} more runs not shown ({counts_text(rows)})"
    return grid


class MonitorConsole(Console):
    """rich's console, but a broken pipe is raised to the monitor (rich's default exits)."""

    def on_broken_pipe(self) -> None:
        """Raise BrokenPipeError, for :meth:`SweepMonitor._output` to take."""
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


class SweepMonitor:
    """Shows a sweep's progress while it runs; see the module docstring.

    Use as a context manager; call :meth:`update` in the launcher's polling loop (it re-reads
    the run directories at most every ``refresh_s`` seconds) and :meth:`summary` at the end.
    """

    def __init__(self, progress: SweepProgress, console: Console | None = None,
                 refresh_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.progress = progress
        self.console = console or MonitorConsole()
        self.live_view = self.console.is_terminal and not self.console.is_dumb_terminal
        self.refresh_s = refresh_s
        self.clock = clock
        self.started = clock()
        self.rows: list[RunProgress] = []
        self._last_read = -float("inf")
        self._live: Live | None = None
        self._printed: dict[int, tuple[str, int]] = {}
        self._race_said: str | None = None
        self.output_lost = False
        self.driver: list[str] = []
        """The sweep's detached driver in lines (`driver_lines`), shown above the runs."""
        self._driver_said: list[str] = []

    @contextmanager
    def _output(self) -> Iterator[None]:
        """Around every write: one that fails silences the monitor (see the module docstring)."""
        try:
            yield
        except OSError:
            self.output_lost = True
            self.console.quiet = True  # rich drops what it would write from now on
            with suppress(OSError, ValueError):  # a file without a descriptor keeps none
                silence(self.console.file.fileno())
            if self._live is not None:
                self._live.stop()  # writes nothing now; gives sys.stdout back
                self._live = None

    def __enter__(self) -> SweepMonitor:
        self.say(f"Sweep directory: {shown_path(self.progress.sweep_dir)}")
        if self.live_view and not self.output_lost:
            with self._output():
                self._live = Live(console=self.console, auto_refresh=False,
                                  vertical_overflow="visible")
                self._live.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._live is not None:
            with self._output():
                self._live.stop()
            self._live = None

    def update(self, scheduler: Mapping[int, str] | None = None,
               force: bool = False) -> list[RunProgress]:
        """Re-read the runs (at most every ``refresh_s`` unless ``force``) and show them."""
        now = self.clock()
        if not force and now - self._last_read < self.refresh_s:
            return self.rows
        self._last_read = now
        self.rows = self.progress.read(scheduler)
        self.show(self.rows)
        return self.rows

    def show(self, rows: Sequence[RunProgress]) -> None:
        """Draw ``rows``: the live table, or plain lines for the runs that moved on."""
        race = "\n".join(line for line in (
            self.progress.race.status_text() if self.progress.race is not None else None,
            self.progress.race_note) if line) or None
        if self._live is not None:
            title = (f"{shown_path(self.progress.sweep_dir)}: {counts_text(rows)} | "
                     f"{fmt_duration(self.clock() - self.started)} elapsed")
            view = Group(Text(title, style="italic"), *(Text(line) for line in self.driver),
                         *((Text(race),) if race else ()),
                         table(rows, max(self.console.height - 7 - len(self.driver), 5)))
            with self._output():
                self._live.update(view, refresh=True)
            return
        if self.driver != self._driver_said:
            self._driver_said = list(self.driver)
            for line in self.driver:
                self.say(line)
        if race is not None and race != self._race_said:
            self._race_said = race
            self.say(race)
        for run in rows:
            tenth = int(run.steps_done / run.n_steps / PLAIN_STEP_FRACTION) if run.n_steps else 0
            key = (run.status, tenth)
            if self._printed.get(run.num) != key:
                self._printed[run.num] = key
                self.say(plain_line(run))

    def summary(self, rows: Sequence[RunProgress] | None = None) -> list[str]:
        """Print (and return) the end-of-sweep report; see the module docstring."""
        rows = self.rows if rows is None else rows
        sweep = self.progress.sweep_dir
        lines = [f"Sweep {shown_path(sweep)}: {len(rows)} runs: {counts_text(rows)}"]
        if self.progress.race is not None:
            lines.append(self.progress.race.status_text())
        if self.progress.race_note:
            lines.append(f"warning: {self.progress.race_note}")
        lines += [f"  {plain_line(run)}" for run in rows]
        resumed = [f"#{r.num} from step {', then '.join(map(str, r.resumed_from))}"
                   for r in rows if r.resumed_from]
        lines.append(f"Resumed: {'; '.join(resumed) if resumed else 'none'}")
        logs = [f"#{r.num} {r.log}" for r in rows if r.status == "failed" and r.log]
        if logs:
            lines.append(f"Logs of failed jobs: {'; '.join(logs)}")
        problem = journal_problem(sweep)
        if problem is not None:
            lines.append(f"Pruning: off for every run that read the journal: {problem}")
        lines += best_config(sweep)
        lines.append(report_line(sweep))
        for line in lines:
            self.say(line)
        return lines

    def say(self, line: str) -> None:
        """Print ``line`` as it is: never wrapped, highlighted or read as markup (nothing once
        the output is lost)."""
        with self._output():
            self.console.print(line, soft_wrap=True, highlight=False, markup=False)


def best_config(sweep_dir: Path) -> list[str]:
    """The best config by the report's ranking (mean late validation reward over seeds, at the
    largest step every ranked config reached; of a race, among the configs still in at its last
    look as its runs say, ``analysis.decisions.race.looks.still_in``) with its interval, every comparison (each config
    against the best one and its on-policy baseline) and how sure the pick is; what the runs
    stopped early (pruned, collapsed, diverged) spent against the full grid. First what the
    collection read once or set aside (``Collection.notes``: a run directory reached twice)."""
    from analysis.decisions.race.looks import still_in
    from analysis.decisions.ranking import rank, spend
    from analysis.readers.collect import collect

    try:
        collection = collect([sweep_dir])
        kept, _ = still_in(collection)  # the record's disagreement: the race's line says it
    except (OSError, ValueError) as error:
        return [f"Best config: not ranked ({error})"]
    ranking = rank(collection, labels=kept)
    lines = list(collection.notes)
    if ranking.best is None:
        lines.append("Best config: none (no run that was not stopped early has a validation reward)")
    else:
        lines.append(f"Best config: {ranking.describe_best()}")
        lines += [f"  {c.config}: {c.describe()}" for c in ranking.uncertainty.comparisons]
        lines += [f"  {line}" for line in ranking.verdict_lines()]
    spent = spend(collection)
    if spent.stopped:
        lines.append(f"Stopped early: {spent.describe()}")
    return lines


def report_line(sweep_dir: Path) -> str:
    """Where the report is, or the command that writes it."""
    report = sweep_dir / "report.md"
    if report.is_file():
        return f"Report: {shown_path(report)}"
    return (f"Report: `{make_command('plots', sweep_dir)}` writes {shown_path(report)} "
            f"and {shown_path(sweep_dir / 'figures')}/")


def work_left(rows: Sequence[RunProgress], race: Race | None) -> bool:
    """Whether a sweep has work left for its driver: a run not finished as a result
    (completed, collapsed, diverged, pruned), no run yet, or a race not ended."""
    race_open = race is not None and (race.last_decision() is None or race.last_decision().end is None)
    return not rows or race_open or any(r.status not in FINISHED_STATUSES for r in rows)


def stop_line(record: DriverRecord, sweep_dir: Path) -> str:
    """``  stop:   scancel 12 40 41 (...)``: what stops `record`'s driver and this sweep's runs,
    and no other sweep's. SLURM: the driver's job and the job arrays of `sweep_dir`'s runs,
    their ids from its ``jobs.json`` (``<array>_<task>``: one array a submission, a race's wave
    or a relaunch); locally: Ctrl-C to the driver's process group
    (:meth:`grpo.run.driver.DriverRecord.stop`), which its runs are in."""
    if record.kind != "slurm":
        return (f"  stop:   {record.stop()} (as Ctrl-C: each run stops after its GRPO step, with "
                "a checkpoint; all stays resumable)")
    jobs = read_jobs(sweep_dir)
    ids = [] if jobs is None else [j.job_id for _, j in sorted(jobs.jobs.items()) if j.job_id]
    arrays = list(dict.fromkeys(job_id.split("_", 1)[0] for job_id in ids))
    what = (f"the driver and this sweep's {len(arrays)} job array(s), from its jobs.json"
            if arrays else "the driver; it has submitted no runs yet")
    command = shlex.join(["scancel", str(record.job_id), *arrays])
    return f"  stop:   {command} ({what}; all stays resumable)"


def driver_lines(sweep_dir: Path, rows: Sequence[RunProgress],
                 race: Race | None = None) -> tuple[list[str], bool]:
    """The sweep's detached driver (``<sweep>/driver.json``, :mod:`grpo.run.driver`; for a chain
    stage's copy, the chain root's record, where its driver records its end) in lines, and
    whether it may still be pending or running: ``driver: running (SLURM job 12: RUNNING)``
    and the command that stops it and the sweep's runs (:func:`stop_line`); gone: how it ended, as its record says (:meth:`grpo.run.driver.DriverRecord.how_it_ended`),
    and the command that resumes it where work is left (:func:`work_left`; a chain's driver:
    unless it completed, as its record or SLURM says). No lines where the sweep has no driver
    record; one line saying why where the record cannot be read."""
    try:
        record = read_driver(sweep_dir)
        if record is not None and record.scope == "chain":
            record = read_driver(record.home()) or record
    except RunFileError as error:
        return [f"driver: unknown: {error}"], False
    if record is None:
        return [], False
    state = driver_state(record)
    lines = [f"driver: {state.state} ({record.describe()}: {state.detail})"]
    if state.state != "gone":
        return [*lines, stop_line(record, sweep_dir)], state.live
    chain_done = record.end == "completed" or state.detail == "COMPLETED"  # record, or SLURM
    if work_left(rows, race) or (record.scope == "chain" and not chain_done):
        return lines + [f"  how it ended: {record.how_it_ended()}",
                        f"  resume: {record.resume()}"], False
    lines[0] += "; its work is done"
    if record.end not in (None, "completed"):
        lines.append(f"  how it ended: {record.how_it_ended()}")
    return lines, False


def watch(sweep_dir: Path, once: bool = False, interval_s: float = 2.0,
          scheduler_every_s: float = 15.0, console: Console | None = None) -> list[RunProgress]:
    """Follow ``sweep_dir`` until no run is active (or once), then print the summary; a sweep
    that is already over gets its summary alone. Ctrl-C stops the watching (the runs go on) with
    one line and exit status `INTERRUPTED`; closing the terminal (SIGHUP, its default action) ends
    it quietly, and so does its output going away (exit status `OUTPUT_LOST`)."""
    monitor = SweepMonitor(SweepProgress(sweep_dir), console, refresh_s=0.0)
    try:
        return _watch(monitor, sweep_dir, once, interval_s, scheduler_every_s)
    except KeyboardInterrupt:
        monitor.say(f"Stopped watching {shown_path(sweep_dir)}: its runs are not affected; "
                    f"`{make_command('watch', sweep_dir)}` follows them again")
        raise SystemExit(INTERRUPTED) from None


def _watch(monitor: SweepMonitor, sweep_dir: Path, once: bool, interval_s: float,
           scheduler_every_s: float) -> list[RunProgress]:
    """`watch` with its monitor."""
    states = scheduler_states(sweep_dir)
    asked = time.monotonic()
    rows = monitor.progress.read(states)
    monitor.driver, driving = driver_lines(sweep_dir, rows, monitor.progress.race)
    if not any(r.active for r in rows) and not driving:
        monitor.say(f"Sweep directory: {shown_path(sweep_dir)}")
        for line in monitor.driver:
            monitor.say(line)
        monitor.summary(rows)
        return rows
    with monitor:
        while True:
            monitor.show(rows)
            if monitor.output_lost:
                raise SystemExit(OUTPUT_LOST)
            if once:
                break
            time.sleep(interval_s)
            ask = time.monotonic() - asked >= scheduler_every_s
            if ask:
                states, asked = scheduler_states(sweep_dir), time.monotonic()
            rows = monitor.progress.read(states)
            if ask:
                monitor.driver, driving = driver_lines(sweep_dir, rows, monitor.progress.race)
            if not any(r.active for r in rows) and not driving:
                monitor.show(rows)
                break
    monitor.summary(rows)
    return rows
