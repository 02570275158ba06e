#!/usr/bin/env bash
# `make lock`: regenerate the lock files from pyproject.toml with uv (a pinned copy of it is
# installed into .cache/ on first use). Both locks are for CPython $LOCK_PYTHON on Linux x86_64:
#   requirements/gpu.lock.txt  GPU nodes: [dev] + [vllm] extras, with the CUDA torch vLLM pins;
#   requirements/cpu.lock.txt  everywhere else: [dev] extra with the CPU build torch==$TORCH_VERSION+cpu,
#                              every other package at its version in the GPU lock.
# Pins already in a lock are kept while pyproject.toml's ranges still admit them, so adding a
# dependency changes only what it brings; UPGRADE=1 takes the newest releases the ranges allow.
# The build backend (pyproject's [build-system] requires) is locked too: `make install` builds
# the project with --no-build-isolation from the locked setuptools.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${LOCK_PYTHON:?}" "${TORCH_CPU_INDEX:?}"
CPU_LOCK=requirements/cpu.lock.txt
GPU_LOCK=requirements/gpu.lock.txt
# the CPU torch version: TORCH_VERSION if given, else the one the CPU lock holds now
TORCH_VERSION=${TORCH_VERSION:-$(sed -n 's/^torch==\([^+]*\)+cpu$/\1/p' "$CPU_LOCK" 2>/dev/null || true)}
: "${TORCH_VERSION:?no torch in $CPU_LOCK: run make lock TORCH_VERSION=X.Y.Z}"

# uv $UV_VERSION, installed into .cache by make (the Makefile's $(UV) target)
[[ -x ${UV:-} ]] || { echo "lock: run it as make lock (it installs uv first)" >&2; exit 2; }

# inputs derived from pyproject.toml and the GPU lock, at fixed paths (the locks' "via" notes name them)
work=.cache/lock
mkdir -p "$work"
python3 - >"$work/build-system-requires.txt" <<'PY'
import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))
PY

common=(--python-version "$LOCK_PYTHON" --python-platform x86_64-manylinux_2_28
        --custom-compile-command "make lock" --quiet)
[[ ${UPGRADE:-0} == 1 ]] && common+=(--upgrade)

"$UV" pip compile pyproject.toml "$work/build-system-requires.txt" --extra dev --extra vllm \
  "${common[@]}" -o "$GPU_LOCK"
# A plain `pip install -r` of the lock resolves it against each package's own requirements: resolve
# it so (no pyproject, no overrides) and refuse a lock that does not come back pin for pin.
if ! "$UV" pip compile "$GPU_LOCK" "${common[@]}" -o "$work/gpu-lock-resolved.txt"; then
  echo "lock error: $GPU_LOCK does not resolve (above); pip install -r would not install it" >&2
  exit 1
fi
if ! diff <(grep -E '^[a-z0-9]' "$GPU_LOCK") <(grep -E '^[a-z0-9]' "$work/gpu-lock-resolved.txt") >&2; then
  echo "lock error: $GPU_LOCK does not resolve to itself (the diff above); pip install -r would install other versions" >&2
  exit 1
fi

# The CPU build of torch comes from PyTorch's CPU index, or from the wheel folders pip is
# configured with (find-links) where that index cannot be reached.
read -r -a sources <<<"$(bash scripts/torch_sources.sh)"
grep -v -E '^torch==' "$GPU_LOCK" >"$work/gpu-lock-without-torch.txt"
echo "torch==$TORCH_VERSION+cpu" >"$work/torch-cpu.txt"
"$UV" pip compile pyproject.toml "$work/build-system-requires.txt" --extra dev --constraint "$work/gpu-lock-without-torch.txt" \
  --override "$work/torch-cpu.txt" "${sources[@]}" "${common[@]}" -o "$CPU_LOCK"

if grep -q -E '^(nvidia-|triton==)' "$CPU_LOCK"; then
  echo "lock error: $CPU_LOCK holds CUDA packages" >&2
  exit 1
fi
echo "lock: wrote $CPU_LOCK ($(grep -c '==' "$CPU_LOCK") packages, torch $TORCH_VERSION+cpu) and $GPU_LOCK ($(grep -c '==' "$GPU_LOCK") packages)"
