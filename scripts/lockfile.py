"""Compare a lock file (requirements/*.lock.txt, written by `make lock`) with pyproject.toml and
with the packages installed in the running Python.

    python scripts/lockfile.py check LOCK [--extra dev ...]   # make install: the lock admits
        # pyproject's requirements, this Python holds exactly the lock and its modules carry
        # their compiled bytecode; exit 1 otherwise
    python scripts/lockfile.py diff LOCK                      # make test-latest: what differs

Run it with the virtual environment's Python (it reads that environment); needs `packaging`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import sys
import sysconfig
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PROJECT = canonicalize_name("grpo-sweeps")
# present in every virtual environment, not installed from the lock
VENV_TOOLS = {"pip"}


def read_lock(path: Path) -> dict[str, Version]:
    """{canonical name: version} of the `name==version` lines of a lock file (comments, option
    lines and indented annotations skipped); raises ValueError on a line that is not an exact pin."""
    pins: dict[str, Version] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text or text.startswith("-"):
            continue
        requirement = Requirement(text)
        specs = list(requirement.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
            raise ValueError(f"{path}:{number}: {text!r} is not an exact pin (name==version)")
        pins[canonicalize_name(requirement.name)] = Version(specs[0].version)
    return pins


def installed() -> dict[str, Version]:
    """{canonical name: version} of the distributions importable by this Python, less the project
    itself and the environment's own tools."""
    found = {
        canonicalize_name(dist.metadata["Name"]): Version(dist.version)
        for dist in importlib.metadata.distributions()
    }
    return {name: v for name, v in found.items() if name != PROJECT and name not in VENV_TOOLS}


def pyproject_requirements(extras: list[str]) -> list[Requirement]:
    """pyproject.toml's dependencies and those of `extras` that apply to this Python."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = list(project["dependencies"])
    for extra in extras:
        texts += project["optional-dependencies"][extra]
    requirements = [Requirement(t) for t in texts]
    return [r for r in requirements if r.marker is None or r.marker.evaluate()]


def unmet(requirements: list[Requirement], pins: dict[str, Version]) -> list[str]:
    """One line per requirement that the pinned versions do not satisfy."""
    problems = []
    for requirement in requirements:
        pinned = pins.get(canonicalize_name(requirement.name))
        if pinned is None:
            problems.append(f"{requirement} is not in the lock")
        elif not requirement.specifier.contains(pinned, prereleases=True):
            problems.append(f"{requirement} is not met by the locked {requirement.name}=={pinned}")
    return problems


def differences(pins: dict[str, Version], have: dict[str, Version]) -> list[str]:
    """One line per package whose installed version differs from the lock, or that only one holds."""
    lines = []
    for name in sorted(pins.keys() | have.keys()):
        locked, current = pins.get(name), have.get(name)
        if locked != current:
            lines.append(f"  {name}: lock {locked or '-'}, installed {current or '-'}")
    return lines


def uncompiled(site_packages: Path) -> list[Path]:
    """The modules under `site_packages` that have no compiled bytecode (`__pycache__/*.pyc`) but
    compile: each Python process that imports one compiles it again, and where
    PYTHONDONTWRITEBYTECODE is set nothing ever caches it (torch and transformers: ~13 s of
    every launch on a 2-core machine). A module that does not compile here (torch's Python 3.12
    test helpers) is left out: no install can give it bytecode."""
    missing = []
    for module in sorted(site_packages.rglob("*.py")):
        if Path(importlib.util.cache_from_source(str(module))).exists():
            continue
        try:
            compile(module.read_bytes(), str(module), "exec")
        except (SyntaxError, ValueError):
            continue
        missing.append(module)
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["check", "diff"])
    parser.add_argument("lock", type=Path)
    parser.add_argument("--extra", action="append", default=[], help="pyproject extra the lock holds")
    args = parser.parse_args(argv)
    pins = read_lock(args.lock)
    diff = differences(pins, installed())
    if args.command == "diff":
        print(f"{len(diff)} packages differ from {args.lock}" + (":" if diff else ""))
        print("\n".join(diff))
        return 0
    problems = unmet(pyproject_requirements(args.extra), pins)
    if problems:
        print(f"error: {args.lock} does not admit pyproject.toml; run `make lock`:", file=sys.stderr)
        print("\n".join(f"  {p}" for p in problems), file=sys.stderr)
        return 1
    if diff:
        print(f"error: the environment differs from {args.lock}:", file=sys.stderr)
        print("\n".join(diff), file=sys.stderr)
        return 1
    site_packages = Path(sysconfig.get_paths()["purelib"])
    missing = uncompiled(site_packages)
    if missing:
        print(f"error: {len(missing)} modules in {site_packages} have no compiled bytecode (first: "
              f"{missing[0].relative_to(site_packages)}), so every process compiles them again; "
              "install with `uv pip sync --compile-bytecode` (as make install does)", file=sys.stderr)
        return 1
    torch = pins.get("torch")
    print(f"installed exactly {args.lock}: {len(pins)} packages (torch {torch}) with their "
          f"bytecode, and {args.lock} admits pyproject.toml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
