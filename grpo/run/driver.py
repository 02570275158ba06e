"""The driver of a sweep or a chain run apart from the terminal (`cluster.detach=true`).

A sweep's driver is the process that submits its jobs and waits for them (a race's next wave,
a chain's next stage). Detached, it is not the terminal's: on SLURM it is a small CPU job
(`submit_slurm`: `DRIVER_CPUS` CPU, `DRIVER_MEM_GB` GB, `cluster.driver_time_limit_min`,
requeued at its time limit and on preemption by submitit, `DetachedDriver`), locally a process
in a session of its own with stdin from /dev/null (`spawn_local`): closing the terminal ends
nothing. Either runs the same command as the user's, attached: `DRIVER_ENV` in its environment
(the path of its record) says "this process is the driver, run attached"; an environment
variable rather than an override, so that nothing of it enters a run's recorded overrides. Its
output goes to `driver.log` beside its record.

Its record, `driver.json` (`DriverRecord`, written atomically), says what it is (a SLURM job id,
or a pid with its host and process start time, against a reused pid), the command that
resumes it and its log; `driver_state` asks whether it is pending, running or gone. Both
drivers run their command through `DetachedDriver.run`, which writes into the record how it
ended (`ENDS`: completed, failed with the reason, out of requeues, cancelled; `record_end`); a
driver killed outright (SIGKILL, a lost node) cannot, and its record says nothing of its end. A
sweep directory's record is read by `make watch` (`analysis.outputs.monitor`) and by a launch of the same
sweep, which submits no second driver while one is pending or running.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

from grpo.run.files import (
    RunDirError,
    RunFileError,
    atomic_write_text,
    parse_json,
    read_bytes,
    silence,
)
from grpo.run.lock import RunDirLocked, driver_lock
from grpo.run.preemption import requeued_by_scheduler
from grpo.run.slurm import SCHEDULER_ACTIVE, slurm_states, state_word

DRIVER_FILE = "driver.json"
DRIVER_LOG = "driver.log"
SLURM_FOLDER = "driver-slurm"
"""Where submitit keeps the SLURM driver's pickles and its own logs, beside its record."""
DRIVER_ENV = "GRPO_DRIVER"
"""Set (to the driver's record) in a detached driver's environment and so in every process it
starts: a sweep or a chain launched with it runs attached, whatever `cluster.detach` says."""
FORMAT = "grpo-driver/1"
MAX_RECORD_BYTES = 1 << 16
"""Largest driver.json read (it is about 1 kB)."""
DRIVER_CPUS = 1
DRIVER_MEM_GB = 2
"""The SLURM driver's allocation: it composes and checks jobs, submits them and reads their
run directories (no model, no GPU)."""
DRIVER_SIGNAL_DELAY_S = 60
"""Seconds before its time limit at which SLURM signals the driver to requeue itself."""
STOP_WAIT_S = 20.0
"""Seconds the requeued driver gives its command to end after SIGTERM, before SIGKILL."""
STOPS = {signal.SIGTERM: "SIGTERM (scancel, the hard time limit or a kill)",
         signal.SIGINT: "SIGINT (kill -INT or Ctrl-C to its process group)"}
"""The signals that stop a driver (`DetachedDriver`) as `cancelled`, in words."""
KINDS = ("slurm", "local")
SCOPES = ("sweep", "chain")
PENDING_STATES = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING")
LOG_TAIL_BYTES = 8192
ENDS = ("completed", "failed", "out of requeues", "cancelled")
"""How a driver can end, as its record says (`DriverRecord.end`): its command exited 0; it
exited otherwise (`reason`: the exit status and its last log line); submitit did not requeue it
at its time limit or preemption (its `hydra.launcher.max_num_timeout` requeues used up); a
SIGTERM (scancel, the hard time limit, a kill) or SIGINT (`kill -INT`, Ctrl-C) stopped it."""
END_LOCK_WAIT_S = 30.0
"""Seconds a driver tries to take its directory's driver lock to record its end (a detach
holds it for seconds); after that it leaves the record as it is (a new driver is recording
itself there)."""


def under_driver() -> bool:
    """Whether this process runs inside a detached driver (`DRIVER_ENV`): it runs attached."""
    return bool(os.environ.get(DRIVER_ENV))


def process_start(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks since boot (/proc/<pid>/stat, field 22),
    None where there is no such process or it is a zombie (it has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # after the command name, which may hold spaces
    try:
        return None if fields[0] == "Z" else int(fields[19])
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class DriverRecord:
    """`driver.json`: a detached driver. `command` is its argv, run in `cwd`; `log` its
    output; `job_id` (kind slurm) or `pid` and `started` (kind local: `process_start`) say
    which process it is, `host` where it was started; `scope` whether it drives one sweep or a
    chain (`name`: the chain's). `end` (one of `ENDS`), `reason` (in words) and `ended` (UTC,
    ISO 8601) say how it ended, written by the driver itself (`record_end`); None while it runs,
    after a requeue, where it was killed outright, and in records written before they existed."""

    kind: str
    command: tuple[str, ...]
    cwd: str
    log: str
    host: str
    submitted: str
    job_id: str | None = None
    pid: int | None = None
    started: int | None = None
    scope: str = "sweep"
    name: str = ""
    end: str | None = None
    reason: str = ""
    ended: str | None = None
    format: str = field(default=FORMAT)

    def write(self, path: Path) -> None:
        """Write the record to `path`, atomically."""
        atomic_write_text(path, json.dumps({**asdict(self), "command": list(self.command)},
                                           indent=1) + "\n")

    @staticmethod
    def read(path: Path) -> DriverRecord | None:
        """The record at `path`; None where there is none; RunFileError (one line, saying what
        to do) where it is not one (torn, crafted)."""
        if not path.exists():
            return None
        try:
            return DriverRecord._from(parse_json(read_bytes(path, MAX_RECORD_BYTES), path.name))
        except (KeyError, TypeError, ValueError, RunFileError) as err:
            raise RunFileError(f"{path} is not a driver record ({err}); if no driver of it runs "
                               f"(squeue, ps), remove it and launch again") from None

    @staticmethod
    def _from(data: Any) -> DriverRecord:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"no format {FORMAT!r}")
        command = data["command"]
        if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
            raise ValueError("command is not a list of strings")
        text = {k: data[k] for k in ("kind", "cwd", "log", "host", "submitted")}
        if not all(isinstance(v, str) for v in text.values()):
            raise ValueError("kind, cwd, log, host and submitted must be strings")
        if text["kind"] not in KINDS or data.get("scope", "sweep") not in SCOPES:
            raise ValueError(f"kind {text['kind']!r} is not one of {', '.join(KINDS)}")
        job_id, pid, started = data.get("job_id"), data.get("pid"), data.get("started")
        if text["kind"] == "slurm" and not (isinstance(job_id, str) and job_id.replace("_", "").isdigit()):
            raise ValueError(f"job_id {job_id!r} is not a SLURM job id")
        if text["kind"] == "local" and not all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                               for v in (pid, started)):
            raise ValueError("pid and started must be positive integers")
        end, reason, ended = data.get("end"), data.get("reason", ""), data.get("ended")
        if end is not None and end not in ENDS:
            raise ValueError(f"end {end!r} is not one of {', '.join(ENDS)}")
        if not all(isinstance(v, str) and "\n" not in v for v in (reason, ended or "")):
            raise ValueError("reason and ended must be strings of one line")
        return DriverRecord(**text, command=tuple(command), job_id=job_id, pid=pid,
                            started=started, scope=str(data.get("scope", "sweep")),
                            name=str(data.get("name", "")), end=end, reason=reason, ended=ended)

    def describe(self) -> str:
        """`SLURM job 123` or `pid 456 on host h`, with the chain it drives."""
        what = f"SLURM job {self.job_id}" if self.kind == "slurm" else f"pid {self.pid} on {self.host}"
        return what + (f", the driver of chain {self.name}" if self.scope == "chain" else "")

    def home(self) -> Path:
        """The directory of its own record and log (`<dir>/driver.log`): for the copy in a chain
        stage's sweep (`copy_record`), the chain's root, where the driver records its end."""
        return Path(self.log).parent

    def is_this_process(self) -> bool:
        """Whether this process is the driver it records: its SLURM job, or its pid and start."""
        if self.kind == "slurm":
            return self.job_id == os.environ.get("SLURM_JOB_ID")
        return self.pid == os.getpid() and self.started == process_start(os.getpid())

    def how_it_ended(self) -> str:
        """`out of requeues at <when>: <reason>` (`end`), or that it recorded none."""
        if self.end is None:
            return (f"not recorded (killed outright, e.g. SIGKILL or a lost node, or started "
                    f"before drivers recorded their end); its log: {self.log}")
        return f"{self.end} at {self.ended}" + (f": {self.reason}" if self.reason else "")

    def resume(self) -> str:
        """The shell command that runs the driver again: `cd <cwd> && <command>`."""
        return f"cd {shlex.quote(self.cwd)} && {shlex.join(self.command)}"

    def stop(self) -> str:
        """The shell command that stops it (SLURM: scancel; locally: Ctrl-C to its process
        group, which stops its runs after their step, with a checkpoint; `(on <host>)` where it
        is another host's)."""
        if self.kind == "slurm":
            return f"scancel {self.job_id}"
        elsewhere = f" (on {self.host})" if self.host != socket.gethostname() else ""
        return f"kill -INT -- -{self.pid}{elsewhere}"


@dataclass(frozen=True)
class DriverState:
    """Where a driver stands: `running`, `pending`, `gone`, or `unknown` (it cannot be asked
    from here); `detail` in words (the SLURM state, or why it is unknown)."""

    state: str
    detail: str

    @property
    def live(self) -> bool:
        """Pending or running: a second driver must not be started."""
        return self.state in ("running", "pending")


def driver_state(record: DriverRecord) -> DriverState:
    """Ask SLURM (`slurm_states`) or this host's /proc where `record`'s driver stands."""
    if record.kind == "slurm":
        state = slurm_states({0: str(record.job_id)}).get(0)
        if state is None:
            return DriverState("unknown", "SLURM cannot be asked from here")
        word = state_word(state)
        if word in SCHEDULER_ACTIVE:
            return DriverState("pending" if word in PENDING_STATES else "running", word)
        return DriverState("gone", word)
    if record.host != socket.gethostname():
        return DriverState("unknown", f"it runs on {record.host}; ask there")
    if process_start(int(record.pid or 0)) == record.started:
        return DriverState("running", "its process is alive")
    return DriverState("gone", "its process has ended")


def last_log_line(path: Path) -> str | None:
    """The last non-empty line of the log at `path` (its tail read), None where there is none."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
            tail = f.read().decode(errors="replace")
    except OSError:
        return None
    return next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), None)


def record_path(directory: Path) -> Path:
    """The driver record of a sweep directory (or a chain's)."""
    return directory / DRIVER_FILE


def read_driver(directory: Path) -> DriverRecord | None:
    """`directory`'s driver record (`DriverRecord.read`)."""
    return DriverRecord.read(record_path(directory))


def live_driver(directory: Path) -> tuple[DriverRecord, DriverState] | None:
    """`directory`'s driver where it may be pending or running (state live or unknown)."""
    record = read_driver(directory)
    if record is None:
        return None
    state = driver_state(record)
    return (record, state) if state.state != "gone" else None


def sweep_command(sweep_dir: Path) -> list[str]:
    """This process's command (`python launch.py -m ...`) with the sweep directory pinned:
    `hydra.sweep.dir=<absolute sweep_dir>` in place of any the user gave (conf/config.yaml's
    holds a timestamp)."""
    args = [a for a in sys.argv[1:] if not a.lstrip("+").startswith("hydra.sweep.dir=")]
    return [sys.executable, os.path.abspath(sys.argv[0]), *args,
            f"hydra.sweep.dir={sweep_dir.resolve()}"]


def driver_env(record: Path) -> dict[str, str]:
    """The detached driver's environment: this one, with `DRIVER_ENV` and unbuffered output."""
    return {**os.environ, DRIVER_ENV: str(record), "PYTHONUNBUFFERED": "1"}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def spawn_local(command: Sequence[str], directory: Path, scope: str = "sweep",
                name: str = "") -> DriverRecord:
    """Start `command` in the working directory, detached from the terminal (its own session,
    stdin /dev/null, output appended to `<directory>/driver.log`), and record it in
    `<directory>/driver.json`. The recorded process is `grpo.run.local_driver`, which runs
    `command` in its process group (`DetachedDriver.run`) and records how it ended."""
    record_file, log = record_path(directory), directory / DRIVER_LOG
    with log.open("a") as out:
        out.write(f"--- detached driver started {_now()} on {socket.gethostname()}: "
                  f"{shlex.join(command)}\n")
        out.flush()
        proc = subprocess.Popen([sys.executable, "-m", "grpo.run.local_driver",
                                 str(record_file.resolve()), str(log.resolve()), *command],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env=driver_env(record_file))
    record = DriverRecord("local", tuple(command), os.getcwd(), str(log.resolve()),
                          socket.gethostname(), _now(), pid=proc.pid,
                          started=process_start(proc.pid), scope=scope, name=name)
    if record.started is None:  # it ended already: what it said is in the log
        raise RunDirError(f"the detached driver ended at once (exit status {proc.poll()}); "
                          f"its log: {log}")
    record.write(record_file)
    return record


def _ignore_usr2() -> None:
    """In the driver's command (before exec): SLURM signals every process of the job with
    SIGUSR2 before its time limit; the requeue is `DetachedDriver.checkpoint`'s, which ends the
    command itself."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def record_end(path: Path, end: str | None, reason: str = "") -> bool:
    """In a driver: write into its record at `path` how it ended (`end`, one of `ENDS`, with
    `reason` and the time; None clears them, as a requeued driver starts again), atomically,
    under its directory's driver lock (tried for `END_LOCK_WAIT_S`); whether it was written.
    Nothing is written where the record is unreadable or another driver's (a newer detach
    replaced it: `DriverRecord.is_this_process`)."""
    deadline = time.monotonic() + END_LOCK_WAIT_S
    while True:
        try:
            with driver_lock(path.parent):
                record = DriverRecord.read(path)
                if record is None or not record.is_this_process():
                    return False
                if end is None and record.end is None:
                    return True
                replace(record, end=end, reason=reason if end else "",
                        ended=_now() if end else None).write(path)
                return True
        except RunDirLocked:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        except (RunDirError, RunFileError):
            return False


def exit_words(code: int) -> str:
    """`exit status 2`, or `SIGKILL` for a command a signal ended (Popen's negative code)."""
    if code < 0:
        with suppress(ValueError):
            return signal.Signals(-code).name
    return f"exit status {code}"


class DetachedDriver:
    """A detached driver (`run`): runs `command` in `cwd`, attached (`DRIVER_ENV`), its output
    appended to `log`, and records how it ended in its record `record` (`record_end`). The
    SLURM driver job's callable (submitit calls it; `own_group`: the command in a process group
    of its own): at its time limit or preemption (`checkpoint`, called by submitit's SIGUSR2
    handler) it ends the command and is requeued, then runs it again: a relaunch, which adopts
    what its last run submitted. Locally `grpo.run.local_driver` runs it, the command in its
    own process group (`kill -INT -- -<pid>` reaches both)."""

    def __init__(self, command: Sequence[str], cwd: str, log: str, record: str,
                 own_group: bool = True) -> None:
        self.command, self.cwd, self.log, self.record = list(command), cwd, log, record
        self.own_group = own_group
        self._proc: subprocess.Popen | None = None
        self._stops: list[int] = []

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_proc", "_stops")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"own_group": True, **state}, _proc=None, _stops=[])

    def __call__(self) -> int:
        code = self.run()
        if code:
            raise RuntimeError(f"the driver's command ended with {exit_words(code)}; its log: "
                               f"{self.log}")
        return code

    def run(self) -> int:
        """Run the command to its end and record how (`ENDS`); its exit status. A SIGTERM
        stops the command (handed on; SIGKILL after `STOP_WAIT_S`), a SIGINT reaches it as
        Ctrl-C (locally; its runs stop after their step): cancelled, unless SLURM requeued the
        job (a preemption: `requeued_by_scheduler`), which ends nothing. On SLURM, submitit's
        requeue (SystemExit) and its refusal to requeue (`UncompletedJobError`: out of requeues)
        come from its SIGUSR2 handler, raised here, after `checkpoint` has ended the command."""
        from submitit.core.utils import UncompletedJobError

        record = Path(self.record)
        record_end(record, None)  # a requeued driver runs again: it has not ended
        previous = {sig: signal.signal(sig, self._stop) for sig in STOPS}
        try:
            code = self._wait()
        except SystemExit:
            self._say(f"--- driver requeued {_now()} (time limit or preemption)")
            raise
        except UncompletedJobError as err:
            self._end("out of requeues", f"{err} (submitit; its hydra.launcher.max_num_timeout "
                      "requeues are used up)")
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self._stops and requeued_by_scheduler():
            self._say(f"--- driver stopped {_now()}: SLURM requeued its job (a preemption); it "
                      "runs again")
        elif self._stops:
            self._end("cancelled", f"{STOPS[self._stops[0]]}; its command ended with "
                      f"{exit_words(code)}")
        elif code:
            self._end("failed", f"its command ended with {exit_words(code)}: "
                      f"{last_log_line(Path(self.log)) or '(no output)'}")
        else:
            self._end("completed")
        return code

    def _wait(self) -> int:
        """Start the command and wait for its end; after a SIGTERM, SIGKILL it at `STOP_WAIT_S`."""
        with open(self.log, "a") as out:
            out.write(f"--- driver started {_now()} on {socket.gethostname()} (SLURM job "
                      f"{os.environ.get('SLURM_JOB_ID')}, restart "
                      f"{os.environ.get('SLURM_RESTART_COUNT', '0')})\n")
            out.flush()
            self._proc = subprocess.Popen(self.command, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                          stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=self.own_group,
                                          preexec_fn=_ignore_usr2,
                                          env=driver_env(Path(self.record)))
        termed: float | None = None
        while True:
            try:
                return self._proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                if termed is None and signal.SIGTERM in self._stops:
                    termed = time.monotonic()
                if termed is not None and time.monotonic() - termed > STOP_WAIT_S:
                    self._signal(signal.SIGKILL)

    def _stop(self, signum: int, frame: Any) -> None:
        """The handler of `STOPS`: record the signal; hand a first SIGTERM on to the command
        (a SIGINT reaches its process group as it is)."""
        if signum == signal.SIGTERM and signal.SIGTERM not in self._stops:
            self._signal(signal.SIGTERM)
        self._stops.append(signum)

    def _signal(self, sig: int) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with suppress(ProcessLookupError):
                (os.killpg if self.own_group else os.kill)(proc.pid, sig)

    def _say(self, line: str) -> None:
        with open(self.log, "a") as out:
            out.write(line + "\n")

    def _end(self, end: str, reason: str = "") -> None:
        """Say in the log and record (`record_end`) how the driver ended."""
        self._say(f"--- driver ended {_now()}: {end}" + (f" ({reason})" if reason else ""))
        record_end(Path(self.record), end, reason)

    def checkpoint(self) -> Any:
        """End the running command (SIGTERM to its process group, SIGKILL after `STOP_WAIT_S`)
        and hand submitit this driver again, to requeue it (where its requeues are used up
        submitit does not: `run` records it)."""
        import submitit

        proc = self._proc
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        return submitit.helpers.DelayedSubmission(DetachedDriver(self.command, self.cwd,
                                                                 self.log, self.record))


@dataclass(frozen=True)
class SlurmOptions:
    """What the SLURM driver job asks for (`options_from`: the config's `cluster.*`)."""

    time_limit_min: int
    max_requeues: int
    job_name: str
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    mail_user: str | None = None


def options_from(cfg: Any, job_name: str) -> SlurmOptions:
    """The driver's SLURM options from a composed config: `cluster.driver_time_limit_min`,
    `cluster.partition`, `cluster.account`, `cluster.qos`, `cluster.mail_user`, and the runs'
    requeue count (`hydra.launcher.max_num_timeout`, as a run is requeued)."""
    from omegaconf import OmegaConf

    def get(key: str, default: Any = None) -> Any:
        return OmegaConf.select(cfg, key, default=default)

    return SlurmOptions(int(get("cluster.driver_time_limit_min")),
                        int(get("hydra.launcher.max_num_timeout", 20)), job_name,
                        get("cluster.partition"), get("cluster.account"), get("cluster.qos"),
                        get("cluster.mail_user"))


def submit_slurm(command: Sequence[str], directory: Path, options: SlurmOptions,
                 scope: str = "sweep", name: str = "") -> DriverRecord:
    """Submit the driver job (`DetachedDriver`) running `command` in the working directory and
    record it in `<directory>/driver.json`."""
    import submitit

    record_file, log = record_path(directory), (directory / DRIVER_LOG).resolve()
    executor = submitit.AutoExecutor(folder=directory / SLURM_FOLDER, cluster="slurm",
                                     slurm_max_num_timeout=options.max_requeues)
    extra: dict[str, Any] = {"requeue": True}
    if options.mail_user:
        extra |= {"mail-type": "END,FAIL", "mail-user": options.mail_user}
    given = {f"slurm_{k}": v for k, v in (("partition", options.partition),
                                          ("account", options.account), ("qos", options.qos))
             if v is not None}
    executor.update_parameters(name=options.job_name, timeout_min=options.time_limit_min,
                               cpus_per_task=DRIVER_CPUS, mem_gb=DRIVER_MEM_GB, nodes=1,
                               tasks_per_node=1, slurm_signal_delay_s=DRIVER_SIGNAL_DELAY_S,
                               slurm_additional_parameters=extra, **given)
    job = executor.submit(DetachedDriver(command, os.getcwd(), str(log), str(record_file.resolve())))
    record = DriverRecord("slurm", tuple(command), os.getcwd(), str(log), socket.gethostname(),
                          _now(), job_id=str(job.job_id), scope=scope, name=name)
    record.write(record_file)
    return record


def driver_starter(cfg: Any, command: Sequence[str], directory: Path, job_name: str,
                   scope: str = "sweep", name: str = "") -> Callable[[], DriverRecord]:
    """How the driver of `directory` (a sweep's or a chain's) is started for composed config
    `cfg`: a SLURM job named `job_name` where its cluster is SLURM's (`cluster.name` slurm:
    `submit_slurm` with `options_from`), else a process of its own session here (`spawn_local`)."""
    if cfg.cluster.name == "slurm":
        return partial(submit_slurm, command, directory, options_from(cfg, job_name), scope, name)
    return partial(spawn_local, command, directory, scope, name)


def detached_lines(record: DriverRecord, directory: Path, watch: str) -> list[str]:
    """What a detach prints: the driver, its sweep's (or chain's) `directory`, how to follow
    (`watch`: the `make watch` command), stop and resume it."""
    if record.kind == "slurm":
        stop = (f"scancel {record.job_id} (the runs it submitted go on; the `stop:` line of "
                "the follow command cancels them too, and no other sweep's; all stays resumable)")
    else:
        stop = (f"{record.stop()} (as Ctrl-C: each run stops after its GRPO step, with a "
                "checkpoint; all stays resumable)")
    return [f"Detached: the driver is {record.describe()}; its log: {record.log}",
            f"  {record.scope} directory: {directory}", f"  follow: {watch}", f"  stop:   {stop}",
            f"  resume: the same command: {record.resume()}"]


def running_lines(record: DriverRecord, state: DriverState, watch: str) -> list[str]:
    """What a launch says when `record`'s driver is still pending or running (`state`)."""
    where = (f"may still be running (its state is unknown: {record.describe()}, {state.detail})"
             if state.state == "unknown" else
             f"is already {state.state} ({record.describe()}, {state.detail})")
    return [f"a driver of this {record.scope} {where}; nothing was submitted", f"  follow: {watch}",
            f"  stop:   {record.stop()}", f"  its log: {record.log}"]


def command_key(command: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What makes two driver commands the same (`same_command`): `command`'s arguments after
    the interpreter, the options and other arguments in order, the Hydra overrides (`key=value`,
    `+key=value`, not starting with `-`) sorted by key. The sort is stable, so a key given twice
    keeps the order of its values (the last one wins in Hydra)."""
    args = command[1:]
    overrides = [a for a in args if "=" in a and not a.startswith("-")]
    rest = tuple(a for a in args if "=" not in a or a.startswith("-"))
    return rest, tuple(sorted(overrides, key=lambda o: o.split("=", 1)[0].lstrip("+~")))


def same_command(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether driver commands `a` and `b` run the same sweep or chain: the same arguments,
    the overrides in any order (`command_key`); the interpreter's path is not compared."""
    return command_key(a) == command_key(b)


def say(lines: Sequence[str]) -> None:
    """Print `lines` to stdout; where its reader has gone (`| head -1`: a broken pipe) nothing
    more is printed (`silence`), and no traceback: the driver is started all the same."""
    try:
        print("\n".join(lines), flush=True)
    except BrokenPipeError:
        with suppress(OSError, ValueError):
            silence(sys.stdout.fileno())


def detach(directory: Path, command: Sequence[str], start: Callable[[], DriverRecord],
           watch: str) -> int:
    """Start the detached driver of `directory` (a sweep's, or a chain's) with `start`, which
    runs `command` and records it, and print how to follow (`watch`), stop and resume it;
    the exit status. Under `directory`'s driver lock: where its driver is still pending or
    running nothing is started: the same command (`same_command`: its overrides in any order)
    says so (0), another is refused (1); an unreadable record is refused (1). RunDirLocked
    where another detach holds the lock."""
    with driver_lock(directory):
        try:
            found = live_driver(directory)
        except RunFileError as err:
            print(f"error: {err}; nothing was submitted", file=sys.stderr)
            return 1
        if found is not None:
            record, state = found
            lines = running_lines(record, state, watch)
            if same_command(record.command, command) and record.cwd == os.getcwd():
                say(lines)
                return 0
            print(f"error: {lines[0]}; it runs another command: {record.resume()}; stop it "
                  f"first ({record.stop()}), or follow it ({watch})", file=sys.stderr)
            return 1
        record = start()
    say(detached_lines(record, directory, watch))
    return 0


def attached_refusal(directory: Path, watch: str) -> str | None:
    """For a launch that is not detached and not a driver's: why it cannot run where
    `directory`'s detached driver is still pending or running (or its record is unreadable);
    None otherwise, a gone driver's record removed (this launch is the driver now)."""
    try:
        found = live_driver(directory)
    except RunFileError as err:
        return str(err)
    if found is None:
        record_path(directory).unlink(missing_ok=True)
        return None
    record, state = found
    return (f"{running_lines(record, state, watch)[0]}: follow it ({watch}), or stop it "
            f"({record.stop()}) before launching it attached")


def copy_record(directory: Path) -> None:
    """Inside a driver (`DRIVER_ENV`), give `directory` (a chain stage's sweep) a copy of the
    driver's record, so that `make watch` there shows the chain's driver; nothing where the
    record is `directory`'s own or cannot be read."""
    source = Path(os.environ.get(DRIVER_ENV, ""))
    target = record_path(directory)
    if not source.name or source.resolve() == target.resolve():
        return
    try:
        record = DriverRecord.read(source)
    except RunFileError:
        return
    if record is not None:
        record.write(target)
