#!/usr/bin/env bash
# Screenshots of the built site (make docs) in a real browser: the distribution's Chromium,
# headless (Debian: apt-get install chromium), over a local HTTP server of site/, so that the theme's
# scripts, fonts and search load as a reader's browser loads them.
# Usage: bash scripts/docs_screenshots.sh OUT_DIR [PAGE ...]   (pages: paths under site/, default
# the getting-started install page and the config key reference)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/docs_screenshots.sh OUT_DIR [PAGE ...]}; shift || true
pages=("$@"); [ ${#pages[@]} -gt 0 ] || pages=(getting-started/install/ reference/config-keys/)
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome) \
  || { echo "no Chromium on PATH (Debian: apt-get install chromium)"; exit 2; }
[ -f site/index.html ] || { echo "no site/: run make docs first"; exit 2; }
mkdir -p "$out"
port=${PORT:-8765}
.venv/bin/python -m http.server "$port" --bind 127.0.0.1 --directory site >/dev/null 2>&1 &
server=$!
trap 'kill $server' EXIT
sleep 1
for page in "${pages[@]}"; do
  name=$(echo "$page" | tr '/' '_' | sed 's/_$//')
  "$browser" --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1000 \
    --virtual-time-budget=5000 --screenshot="$out/$name.png" "http://127.0.0.1:$port/$page" 2>/dev/null
  echo "$out/$name.png  <- http://127.0.0.1:$port/$page"
done
