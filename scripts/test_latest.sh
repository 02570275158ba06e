#!/usr/bin/env bash
# `make test-latest`: the drift canary. Installs the newest releases that pyproject.toml's ranges
# allow into a throw-away virtual environment, prints which packages differ from the CPU lock,
# and runs the fast tests (not slow, not slurm) with them. Not part of CI: an upstream release
# must not block a landing. torch stays at the lock's CPU build (the newest torch on PyPI is a
# CUDA build that brings gigabytes of nvidia-* packages); move it with `make lock TORCH_VERSION=X`.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${TORCH_CPU_INDEX:?}"
PYTHON=${PYTHON:-python3}
LOCK=requirements/cpu.lock.txt

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$PYTHON" -m venv "$dir/venv"
py=$dir/venv/bin/python
grep -E '^torch==' "$LOCK" >"$dir/torch.txt"
echo "test-latest: installing the newest releases pyproject.toml allows, torch held at $(cat "$dir/torch.txt")"
"$py" -m pip install -q --no-deps --retries 1 --extra-index-url "$TORCH_CPU_INDEX" -r "$dir/torch.txt"
"$py" -m pip install -q --constraint "$dir/torch.txt" -e ".[dev]"
echo "test-latest: $("$py" scripts/lockfile.py diff "$LOCK")"
echo "test-latest: fast tests (not slow, not slurm) with these releases"
"$py" -m pytest -q -p no:cacheprovider -m "not slow and not slurm"
