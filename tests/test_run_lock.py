"""The run directory's lock (grpo.run.lock): held for the block, refused to a second holder with
the first's pid, host and time, released when the holder ends; crafted lock files."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from grpo.run.files import RunDirError
from grpo.run.lock import LOCK_FILE, RunDirLocked, run_lock

HOLD = """
import sys, time
from pathlib import Path
from grpo.run.lock import run_lock
with run_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_second_holder_is_refused_with_the_first_named_and_the_lock_is_released(tmp_path: Path) -> None:
    with run_lock(tmp_path):
        record = json.loads((tmp_path / LOCK_FILE).read_text())
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
        holder = f"pid {os.getpid()} on {socket.gethostname()} since {record['since']}"
        with pytest.raises(RunDirLocked, match=re.escape(holder)), run_lock(tmp_path):
            pass
    with run_lock(tmp_path):  # released at the end of the block
        pass


def test_the_kernel_releases_the_lock_of_a_killed_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirLocked, match=f"pid {holder.pid} "), run_lock(tmp_path):
            pass
    finally:
        holder.kill()
        holder.wait()
    with run_lock(tmp_path):  # SIGKILL: nothing unlocked it but the kernel
        pass


@pytest.mark.parametrize("content", [b"", b"not json", b"[" * 100_000, b'{"pid": "x"}', b"\xff\xfe"])
def test_a_crafted_lock_file_is_taken_over_when_free_and_described_as_unknown_when_held(
        tmp_path: Path, content: bytes) -> None:
    (tmp_path / LOCK_FILE).write_bytes(content)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        (tmp_path / LOCK_FILE).write_bytes(content)  # overwritten under the holder's feet
        with pytest.raises(RunDirLocked, match=r"\(holder unknown\)"), run_lock(tmp_path):
            pass
    finally:
        holder.kill()
        holder.wait()


def test_a_planted_symlink_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("keep me")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / LOCK_FILE).symlink_to(outside)
    with pytest.raises(RunDirError, match="is a symbolic link"), run_lock(run_dir):
        pass
    assert outside.read_text() == "keep me"


def test_a_lock_that_is_a_directory_is_refused_with_the_fix_that_fixes_it(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE / "inside").mkdir(parents=True)
    with pytest.raises(RunDirError, match=re.escape(f"{tmp_path / LOCK_FILE} is a directory, not the "
                                                    f"lock file of {tmp_path}: move it aside")):
        with run_lock(tmp_path):
            pass
    (tmp_path / LOCK_FILE).rename(tmp_path / "lock.aside")  # the named fix
    with run_lock(tmp_path):
        pass

