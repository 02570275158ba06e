"""Manifests: the size and sha256 of every file of a directory (a checkpoint, `final_model/`),
written last, so that a directory whose manifest checks out is complete and unchanged.

`manifest.json` holds `{"format": "grpo-manifest/1", "files": {name: {"size": bytes,
"sha256": hex}}}`. Only plain files directly in the directory are listed; a manifest that names
anything else (a path with `/` or `..`, a symbolic link, a directory) does not check out.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from grpo.run.files import RunFileError, atomic_write_text, read_json

MANIFEST = "manifest.json"
FORMAT = "grpo-manifest/1"
_CHUNK = 16 * 2**20


def sha256_of(path: Path) -> str:
    """Hex sha256 of the file at `path`."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def fsync_dir(path: Path) -> None:
    """Flush the entries of directory `path` (new names, renames) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(directory: Path) -> None:
    """Flush every file of `directory` to disk, then write its manifest (atomically, last)."""
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.iterdir()):
        if path.name == MANIFEST or path.name.startswith(f".{MANIFEST}"):
            continue
        if path.is_symlink() or not path.is_file():
            raise ValueError(f"{path} is not a plain file; a manifest lists plain files only")
        with path.open("rb") as f:
            os.fsync(f.fileno())
        files[path.name] = {"size": path.stat().st_size, "sha256": sha256_of(path)}
    atomic_write_text(directory / MANIFEST, json.dumps({"format": FORMAT, "files": files}, indent=1) + "\n")
    fsync_dir(directory)


def _listed_files(directory: Path) -> dict[str, dict[str, Any]] | str:
    """The `files` of the manifest of `directory`, or why it cannot be used."""
    path = directory / MANIFEST
    if path.is_symlink() or not path.is_file():
        return f"it has no {MANIFEST} (it is written last, so the directory is incomplete)"
    try:
        manifest = read_json(path)
    except RunFileError as err:
        return str(err)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or manifest.get("format") != FORMAT:
        return f"{MANIFEST} is not a {FORMAT} manifest"
    for name, entry in files.items():
        if name in ("", ".", "..") or "/" in name or "\\" in name:
            return f"{MANIFEST} names {name!r}, which is not a file of the directory"
        if not (isinstance(entry, dict) and isinstance(entry.get("size"), int)
                and isinstance(entry.get("sha256"), str)):
            return f"{MANIFEST} has no size and sha256 for {name}"
    return files


def manifest_problem(directory: Path, required: Iterable[str] = (), hashes: bool = True) -> str | None:
    """None when `directory` holds every file its manifest lists (and each of `required`), each a
    plain file with the listed size and (unless `hashes` is False: a quick check) sha256;
    otherwise what is wrong, in words."""
    if directory.is_symlink():
        return f"it is a symbolic link (to {os.readlink(directory)}), not a directory"
    if not directory.is_dir():
        return "it is not a directory" if directory.exists() else "it does not exist"
    files = _listed_files(directory)
    if isinstance(files, str):
        return files
    missing = [name for name in required if name not in files]
    if missing:
        return f"{MANIFEST} does not list {', '.join(missing)}"
    for name, entry in files.items():
        path = directory / name
        if path.is_symlink():
            return f"{name} is a symbolic link (to {os.readlink(path)}), not a file"
        if not path.is_file():
            return f"{name} is missing"
        size = path.stat().st_size
        if size != entry["size"]:
            return f"{name} is {size} bytes, {MANIFEST} says {entry['size']}"
    for name, entry in files.items() if hashes else ():
        digest = sha256_of(directory / name)
        if digest != entry["sha256"]:
            return f"{name} has sha256 {digest[:12]}..., {MANIFEST} says {entry['sha256'][:12]}..."
    return None
