"""What wandb wrote into a run directory: its offline runs, their ids and the steps they hold.

An offline run is `<run_dir>/wandb/offline-run-<time>-<id>/run-<id>.wandb`: a header, then
wandb's records (protobuf `Record`) in the leveldb log format (32 KiB blocks of chunks with a
7-byte header: crc32, length, type FULL=1 / FIRST=2 / MIDDLE=3 / LAST=4).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK = 32768
CHUNK_HEADER = 7
FILE_HEADER = b":W&B"
FULL, LAST = 1, 4


def offline_runs(run_dir: Path) -> list[Path]:
    """The offline-run folders of a run directory, oldest first."""
    return sorted((run_dir / "wandb").glob("offline-run-*"))


def run_id(offline_run: Path) -> str:
    """The wandb run id of an offline-run folder (`offline-run-<date>_<time>-<id>`)."""
    return offline_run.name.rsplit("-", 1)[1]


def history_steps(offline_run: Path) -> list[int]:
    """The steps of the history rows in an offline run's `.wandb` file, in the order written."""
    (path,) = offline_run.glob("run-*.wandb")
    data = path.read_bytes()
    assert data.startswith(FILE_HEADER), f"{path} is not a wandb file"
    pos, payload, steps = CHUNK_HEADER, b"", []
    while pos + CHUNK_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK_HEADER:  # block trailer
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        if length == 0 and kind == 0:  # zero padding up to the end of the block
            pos += left
            continue
        payload += data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        pos += CHUNK_HEADER + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record.FromString(payload)
            payload = b""
            if record.WhichOneof("record_type") == "history":
                steps.append(record.history.step.num)
    return steps


def service_pids() -> list[int]:
    """Process ids of the running wandb-core services started by this process."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm, fields = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        state, parent = fields[0], int(fields[1])
        if comm == "wandb-core" and parent == os.getpid() and state != "Z":  # Z: exited, not reaped
            pids.append(int(stat.parent.name))
    return pids
