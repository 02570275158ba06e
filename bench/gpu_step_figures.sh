#!/usr/bin/env bash
# The handout-size GRPO step on one GPU, in one command (each part bounded so the whole stays
# under 10 minutes): a random Qwen2.5-Math-1.5B-shaped model with today's defaults (the
# qwen2.5-math-1.5b preset: bf16-mixed, 10240-token micro-batches, gradient checkpointing; 256
# rollouts of up to 1024 tokens; the in-process hf engine), then the train phase alone at
# off_policy.epochs=1 and =2 on 1024-token responses, with its MFU against the card's bf16 peak.
#   1. whole GRPO steps (2; the first is warm-up): rollout, old-log-prob, train seconds, peak GiB
#   2. --train-only, epochs 1 and 2 (3 phases each): seconds, tokens/s, MFU, peak GiB
# The rollout does not depend on the epochs, so part 2 times what off_policy.epochs=2 changes.
# On an offline node whose Python lacks the project's pure-Python dependencies, put their wheels
# in .whl/ (../shared/notes/offline-gpu-node.md): they are installed into /tmp/site first.
# Usage: bash bench/gpu_step_figures.sh [extra overrides for every part]
# Each part's bound in seconds is an environment variable (0 skips the part): WHOLE_S (330),
# TRAIN_S (100), EPOCHS2_S (140); e.g. WHOLE_S=540 TRAIN_S=0 EPOCHS2_S=0 times two whole steps
# on a cold card, whose first step alone took 207 s on an H200 (2026-11-27).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ -d .whl ] && ! $PY -c 'import hydra' 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
$PY -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
# fail in seconds, not after each part's model load, where a package the trainer imports is missing
# (on 2026-11-27 optuna and its alembic, colorlog, mako and sqlalchemy had to be carried too)
$PY -c 'import grpo.training.trainer' || { echo "a package the trainer imports is missing: carry its wheel in .whl/"; exit 2; }
run() {  # run LIMIT_S ARGS...: one part, cut off after LIMIT_S seconds (0: skipped)
  local limit=$1; shift
  [ "$limit" -gt 0 ] || { echo "== skipped: bench/step_time.py $*"; return 0; }
  echo "== bench/step_time.py $*"
  local start=$SECONDS
  timeout --signal=KILL "$limit" $PY bench/step_time.py --model qwen2.5-1.5b-shaped model.device=cuda:0 "$@" \
    || echo "(exit $? after $((SECONDS - start)) s)"
  echo "(wall $((SECONDS - start)) s)"
}
run "${WHOLE_S:-330}" --steps 2 "$@"
run "${TRAIN_S:-100}" --train-only --steps 3 "$@"
run "${EPOCHS2_S:-140}" --train-only --steps 3 off_policy.epochs=2 "$@"
