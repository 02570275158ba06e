"""Building the locally made models (`model.build`) as an explicit, idempotent step.

`model.build: tiny` (grpo.models.tiny) and `model.build: qwen_rehearsal` (grpo.models.rehearsal) name models
that are made on this machine rather than downloaded. `ensure_built(model_cfg)` builds one into
`model.path` unless a finished build with the same settings is there; model loading calls it
(`grpo.models.loading.resolve_model_path`), a dry run never does. Ahead of time:

    python -m grpo.models.build model=tiny            # or `make models`
    python -m grpo.models.build model=qwen-rehearsal

A build is written into a temporary sibling directory and renamed into place under an exclusive
file lock (`.<name>.lock` next to it), so concurrent callers build it once and never see a
half-written directory; `build_info.json` records the settings it was made with, and a manifest
(`grpo.run.manifest`), written last, the size and sha256 of every file. A cached build is used only
when its settings match and every file matches the manifest; one that does not (truncated,
bit-flipped, edited) is rebuilt, with a warning saying why.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import transformers

from grpo.models.specs import BUILDERS
from grpo.run.files import RunFileError, read_json
from grpo.run.manifest import manifest_problem, write_manifest

log = logging.getLogger(__name__)

# Written last into a finished build; holds the settings it was built with.
BUILD_INFO_FILE = "build_info.json"


def numerics_settings() -> dict[str, str]:
    """What a build's numbers depend on besides its own settings: the torch and transformers
    versions and the CPU kernels torch runs (`grpo.run.cpu_numerics`). A cached build made under
    others is rebuilt."""
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def ensure_built(model_cfg: Mapping[str, Any]) -> Path:
    """Build the model `model_cfg` describes into `model_cfg.path` unless it is there already
    (with the same settings); returns the directory. `model_cfg.build` must name a builder."""
    build = model_cfg.get("build")
    if build not in BUILDERS:
        raise ValueError(f"unknown model.build {build!r}; expected null or one of "
                         f"{', '.join(repr(b) for b in BUILDERS)}")
    return BUILDERS[build](Path(str(model_cfg["path"])).expanduser(), model_cfg)


def read_build_info(out_dir: Path) -> dict[str, Any] | None:
    """The settings of the finished build in `out_dir`, or None if there is none (or it is not
    readable as one)."""
    try:
        info = read_json(out_dir / BUILD_INFO_FILE)
    except RunFileError:
        return None
    return info.get("settings") if isinstance(info, dict) else None


def _is_cached(out_dir: Path, settings: dict[str, Any]) -> bool:
    """Whether `out_dir` holds a finished build with `settings` whose files match its manifest
    (a warning says why a build with these settings does not)."""
    if read_build_info(out_dir) != settings:
        return False
    problem = manifest_problem(out_dir, (BUILD_INFO_FILE,))
    if problem is not None:
        log.warning(f"the cached model in {out_dir} fails its check ({problem}); rebuilding it")
    return problem is None


@contextmanager
def exclusive_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive `fcntl.flock` on `lock_path` (created if missing) for the block."""
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_once(
    out_dir: str | os.PathLike,
    settings: dict[str, Any],
    build_into: Callable[[Path, dict[str, Any]], dict[str, Any]],
) -> Path:
    """Run `build_into(staging_dir, settings)` and move the result to `out_dir`, unless
    `out_dir` already holds a finished build with these settings; returns `out_dir` (resolved).

    `build_into` writes the model into the directory it is given (plain files) and returns facts
    about the build, recorded in build_info.json next to the settings; a manifest of every file
    is written last and checked on each use. A finished build with other
    settings is replaced; any other non-empty directory raises FileExistsError.
    """
    out_dir = Path(out_dir).expanduser().resolve()
    if _is_cached(out_dir, settings):
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(out_dir.parent / f".{out_dir.name}.lock"):
        existing = read_build_info(out_dir)
        if _is_cached(out_dir, settings):
            return out_dir
        damaged_build = (out_dir / BUILD_INFO_FILE).exists()  # ours, unreadable: rebuilt
        if existing is None and not damaged_build and out_dir.exists() and any(out_dir.iterdir()):
            raise FileExistsError(
                f"{out_dir} is not empty and holds no model build ({BUILD_INFO_FILE}); "
                "refusing to overwrite it: point model.path at an empty or new directory"
            )
        log.info(f"building the model into {out_dir} (first use; `make models` builds ahead)")
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.build-", dir=out_dir.parent))
        # a previous build is moved aside rather than deleted first, so that the directory is
        # missing only between two renames
        retired = staging.with_name(staging.name.replace(".build-", ".old-"))
        try:
            facts = build_into(staging, settings)
            info = {"settings": settings, **facts}
            (staging / BUILD_INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
            write_manifest(staging)
            if out_dir.exists():
                os.rename(out_dir, retired)
            os.rename(staging, out_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            shutil.rmtree(retired, ignore_errors=True)
    return out_dir


@contextmanager
def isolated_torch_state() -> Iterator[None]:
    """Run the block on one CPU thread (fastest at these sizes, and the result does not depend
    on the caller's thread count) with its own global RNG: the caller's thread count and RNG
    state are restored afterwards, so building in a run does not shift the run's random stream."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            yield
    finally:
        torch.set_num_threads(threads)


def main(overrides: list[str]) -> Path:
    """Compose the root config (conf/) with Hydra `overrides` and build its model."""
    from hydra import compose, initialize_config_dir

    conf = Path(__file__).resolve().parents[2] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    if cfg.model.build is None:
        raise SystemExit(f"model={cfg.model.name} is not built locally (model.build is null)")
    path = ensure_built(cfg.model)
    print(f"{cfg.model.name}: {path}")
    return path


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main(sys.argv[1:])
