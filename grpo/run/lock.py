"""One writer per run directory, one launcher per sweep directory: an exclusive lock held while
a process trains a run (`run_lock`) or launches a sweep (`sweep_lock`, which a confirmation of
the sweep holds too: `confirm_lock`).

Each takes an exclusive `fcntl.flock` on `<directory>/.lock` without waiting and holds it for the
block: the kernel releases it when the holder exits, however it ends (SIGKILL,
a crash), so a requeued or relaunched job takes it again. A second process finds it held and
gets `RunDirLocked`, naming the holder (pid, host, since when) that the holder wrote into the
file; it has written nothing into the run directory by then.

On a SLURM cluster run directories sit on a shared filesystem: Linux's NFS client maps `flock` to
POSIX byte-range locks held by the NFS server (NFSv4, or lockd under NFSv3), so the lock holds
across nodes; the locks of a node that dies are released when its lease expires (NFSv4: 90 s by
default). A filesystem without lock support raises `RunDirError` naming it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from grpo.run.files import RunDirError, not_writable, planted_link

LOCK_FILE = ".lock"
DRIVER_LOCK_FILE = ".driver.lock"
WAIT = "wait for it to end (make watch), or stop it first"
MAX_HOLDER_BYTES = 4096
"""Most of a lock file that is read for the holder's description (a crafted one may be large)."""


class RunDirLocked(RunDirError):
    """Another process holds the run directory's lock."""


def _record(fd: int) -> tuple[int, str, str] | None:
    """The holder recorded in the lock file: (pid, host, since); None when it is unreadable."""
    try:
        record = json.loads(os.pread(fd, MAX_HOLDER_BYTES, 0))
        return int(record["pid"]), str(record["host"])[:255], str(record["since"])[:64]
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return None


def _holder(fd: int) -> str:
    """The holder recorded in the lock file, in words; 'holder unknown' when it is unreadable."""
    record = _record(fd)
    return "holder unknown" if record is None else "pid {} on {} since {}".format(*record)


@contextmanager
def _directory_lock(directory: Path, busy: str, name: str = LOCK_FILE) -> Iterator[None]:
    """Hold `directory`'s exclusive lock (the file `name` in it) for the block; RunDirLocked
    says `directory` is `busy` (a phrase naming the other process's work), then why and what
    to do."""
    path = directory / name
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise planted_link(path) from None
        if err.errno == errno.EISDIR:
            raise RunDirError(f"{path} is a directory, not the lock file of {directory}: move it "
                              f"aside (`mv {path} {path}.aside`) and launch again") from None
        if err.errno == errno.EACCES and path.exists():
            raise RunDirError(f"{path} cannot be opened for reading and writing ({err.strerror}): "
                              f"give it back its permissions (`chmod u+rw {path}`) and launch "
                              "again") from None
        raise RunDirError(not_writable(directory, path, err)) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirLocked(f"{directory} is {busy} ({_holder(fd)}); {WAIT}") from None
        except OSError as err:
            raise RunDirError(f"cannot lock {path}: the filesystem does not support locks "
                              f"({err.strerror}); put paths.output_root on one that does") from None
        since = datetime.now(timezone.utc).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                  "since": since}).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


@dataclass(frozen=True)
class Holder:
    """The process that holds a lock, as it recorded itself: `pid` on `host` (None: unreadable)
    and the words for it (`text`)."""

    text: str
    pid: int | None = None
    host: str | None = None

    @property
    def local_pid(self) -> int | None:
        """The holder's process id where it is a process of this host, else None."""
        return self.pid if self.host == socket.gethostname() else None


def holder(directory: Path) -> Holder | None:
    """Who holds `directory`'s lock now, or None where no process holds it or there is no lock
    file (nothing trained or launched there). Takes nothing: a shared lock is tried and dropped
    at once (a process taking the lock in that very instant would find it held, and say so), and
    no file is created."""
    try:
        fd = os.open(directory / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # none, or not a lock file: the run's launch says what is wrong
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        record = _record(fd)
        return Holder(_holder(fd), *(record[:2] if record is not None else ()))
    except OSError:  # a filesystem without locks: the run's launch says so
        return None
    finally:
        os.close(fd)  # releases the shared lock where it was taken
    return None


def run_lock(run_dir: Path) -> AbstractContextManager[None]:
    """Hold `run_dir`'s lock while training it: two writers would log every step twice."""
    return _directory_lock(run_dir, "being trained by another process")


def sweep_lock(sweep_dir: Path) -> AbstractContextManager[None]:
    """Hold `sweep_dir`'s lock while launching its jobs and waiting for them: a second launch of
    the same sweep would run every job twice."""
    return _directory_lock(sweep_dir, "being launched by another process")


def confirm_lock(sweep_dir: Path) -> AbstractContextManager[None]:
    """Hold `sweep_dir`'s lock (the file `sweep_lock` takes) while a confirmation of the sweep
    in it (`python -m analysis confirm`) is launched and waited for: a second confirmation of
    it at once would launch the same runs twice (or write another record over the first's), and
    a relaunch of the sweep would move the pick under it. Either is refused, naming the holder."""
    return _directory_lock(sweep_dir, "being launched or confirmed by another process")


def driver_lock(directory: Path) -> AbstractContextManager[None]:
    """Hold `directory`'s driver lock (`DRIVER_LOCK_FILE`, apart from the sweep's) while a
    detach checks its driver record, starts the driver and records it: two detaches at once
    would start two drivers. The driver itself takes the sweep's lock, not this one."""
    return _directory_lock(directory, "getting a detached driver from another process",
                           DRIVER_LOCK_FILE)
