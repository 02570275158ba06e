#!/usr/bin/env bash
# Prints uv's options for where the CPU build of torch (torch==X+cpu) comes from: the wheel
# folders pip is configured with (PIP_FIND_LINKS, pip config's global.find-links), and PyTorch's
# CPU index ($TORCH_CPU_INDEX) where it can be reached. uv reads no pip.conf, so `make lock`
# (scripts/lock.sh) and `make install` both take their sources from here.
set -euo pipefail
: "${TORCH_CPU_INDEX:?}"
sources=()
for links in ${PIP_FIND_LINKS:-} $(python3 -m pip config get global.find-links 2>/dev/null || true); do
  sources+=(--find-links "$links")
done
if python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)" \
    "$TORCH_CPU_INDEX/torch/" 2>/dev/null; then
  sources+=(--extra-index-url "$TORCH_CPU_INDEX" --index-strategy unsafe-best-match)
else
  echo "torch_sources: $TORCH_CPU_INDEX is out of reach; the CPU torch comes from pip's find-links" >&2
fi
echo "${sources[@]}"
