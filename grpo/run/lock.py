"""One writer per run directory: an exclusive lock held while a process trains it.

`run_lock(run_dir)` takes an exclusive `fcntl.flock` on `<run_dir>/.lock` without waiting and
holds it for the block: the kernel releases it when the holder exits, however it ends (SIGKILL,
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
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from grpo.run.files import RunDirError, not_writable

LOCK_FILE = ".lock"
MAX_HOLDER_BYTES = 4096
"""Most of a lock file that is read for the holder's description (a crafted one may be large)."""


class RunDirLocked(RunDirError):
    """Another process holds the run directory's lock."""


def _holder(fd: int) -> str:
    """The holder recorded in the lock file, in words; 'unknown' when it is unreadable."""
    try:
        record = json.loads(os.pread(fd, MAX_HOLDER_BYTES, 0))
        return f"pid {int(record['pid'])} on {str(record['host'])[:255]} since {str(record['since'])[:64]}"
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return "holder unknown"


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir`'s exclusive lock for the block (see the module docstring)."""
    path = run_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise RunDirError(not_writable(run_dir, path, err)) from None
        raise RunDirError(f"the run lock {path} is a symbolic link; remove it (a run directory's "
                          "files are its own)") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirLocked(
                f"{run_dir} is being trained by another process ({_holder(fd)}); two writers "
                "would log every step twice: wait for it to end (make watch), or stop it first"
            ) from None
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
