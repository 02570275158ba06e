#!/usr/bin/env bash
# Resolve requirements/docs.in into requirements/docs.txt (`make lock-docs`): every package the
# documentation site's build adds to .venv, at an exact version. The runtime lock
# (requirements/cpu.lock.txt) constrains the resolution, so a package both need (pyyaml,
# jinja2, ...) is pinned as the runtime has it, and installing the docs lock on top of it
# (`make docs`, --no-deps) changes none of the runtime's packages. UPGRADE=1 takes the newest
# releases docs.in allows; otherwise the pins already in docs.txt are kept (uv prefers the output
# file's pins, as `make lock` does) where the runtime lock still admits them, so a package the
# runtime lock moves moves here with it.
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-.cache/uv-0.13.8/bin/uv}
upgrade=()
[[ ${UPGRADE:-0} == 1 ]] && upgrade=(--upgrade)
"$UV" pip compile requirements/docs.in -c requirements/cpu.lock.txt "${upgrade[@]}" \
  --python-version "${LOCK_PYTHON:-3.11}" --python-platform x86_64-manylinux_2_28 \
  --custom-compile-command "make lock-docs" --quiet -o requirements/docs.txt
echo "wrote requirements/docs.txt ($(grep -c '^[a-z]' requirements/docs.txt) packages)"
