#!/usr/bin/env bash
# Studies unattended, for real (docs/how-to/run-unattended.md): the tiny model on the toy task.
#   1. a finished local 2-run sweep launched again: no job starts (each run's launch.log and
#      status.json byte-equal), its time beside the dry run's;
#   2. on the local SLURM cluster (scripts/slurm_cluster.sh start), `cluster.detach=true`: the
#      command returns within seconds, the driver (a SLURM CPU job) runs the sweep, both runs
#      complete, no process of ours is left;
#   3. an attached SLURM sweep whose launcher is SIGKILLed while its two jobs run, launched again:
#      the relaunch follows the two jobs (no second array), both runs complete;
#   4. the 480-job dry run beside its 20-job slice (bench/dry_run_scale.py).
# Usage: bash bench/unattended_demo.sh [OUT_DIR]   (about 5 minutes on 2 idle cores)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
PY=.venv/bin/python
export GRPO_LOCAL_CONFIG=${GRPO_LOCAL_CONFIG:-none}
TINY=(model=tiny data=toy rollout=hf n_grpo_steps=4 eval.eval_every=2 eval.n_examples=16)

snapshot() {  # every run's launch.log and status.json, hashed
  (cd "$1" && sha256sum [0-9]*/launch.log [0-9]*/status.json)
}

echo "== 1. a finished local 2-run sweep, launched again"
"$PY" launch.py -m "${TINY[@]}" seed=0,1 hydra.sweep.dir="$OUT/local" > "$OUT/local.log" 2>&1
snapshot "$OUT/local" > "$OUT/before.sha"
start=$(date +%s.%N)
"$PY" launch.py -m "${TINY[@]}" seed=0,1 hydra.sweep.dir="$OUT/local" dry_run=true > "$OUT/dry.log" 2>&1
mid=$(date +%s.%N)
"$PY" launch.py -m "${TINY[@]}" seed=0,1 hydra.sweep.dir="$OUT/local" 2>&1 | grep -E "^relaunch|completed" | tail -3
end=$(date +%s.%N)
snapshot "$OUT/local" | diff - "$OUT/before.sha" && echo "  launch.log and status.json of both runs byte-equal"
grep "^relaunch" "$OUT/dry.log" | sed 's/^/  dry run: /'
printf "  dry run %.1f s, relaunch %.1f s\n" "$(echo "$mid - $start" | bc)" "$(echo "$end - $mid" | bc)"

if ! sinfo >/dev/null 2>&1; then
  echo "(no SLURM cluster: start it with bash scripts/slurm_cluster.sh start for 2 and 3)"
else
  SLURM=("${TINY[@]}" cluster=slurm_cpu "hydra.launcher.array_parallelism=2")
  echo "== 2. cluster.detach=true on SLURM"
  start=$(date +%s.%N)
  "$PY" launch.py -m "${SLURM[@]}" seed=0,1 cluster.detach=true hydra.sweep.dir="$OUT/detached" \
    hydra.launcher.name=demo-detached-$$ 2>&1 | tail -6
  printf "  returned after %.1f s\n" "$(echo "$(date +%s.%N) - $start" | bc)"
  driver=$("$PY" -c "import json; print(json.load(open('$OUT/detached/driver.json'))['job_id'])")
  while squeue -h -j "$driver" 2>/dev/null | grep -q .; do sleep 2; done
  "$PY" -m analysis watch "$OUT/detached" --once | tail -5
  pgrep -af "$OUT/detached" && echo "  a process is left" || echo "  no process of the sweep is left"

  echo "== 3. an attached SLURM sweep, its launcher SIGKILLed while its jobs run, launched again"
  "$PY" launch.py -m "${SLURM[@]}" seed=0,1 n_grpo_steps=12 hydra.sweep.dir="$OUT/killed" \
    hydra.launcher.name=demo-killed-$$ > "$OUT/killed1.log" 2>&1 &
  launcher=$!
  until grep -q RUNNING <(squeue -h -r -n demo-killed-$$ -o %T) 2>/dev/null; do sleep 1; done
  kill -9 "$launcher"; wait "$launcher" 2>/dev/null || true
  echo "  launcher SIGKILLed; SLURM still runs: $(squeue -h -r -n demo-killed-$$ -o '%i %T' | tr '\n' ' ')"
  "$PY" launch.py -m "${SLURM[@]}" seed=0,1 n_grpo_steps=12 hydra.sweep.dir="$OUT/killed" \
    hydra.launcher.name=demo-killed-$$ 2>&1 | grep -E "^relaunch|^Sweep|^  #"
  echo "  SLURM jobs named demo-killed-$$ (squeue -r -t all, every array task slurmctld knows): $(squeue -h -r -t all -n demo-killed-$$ -o %i | sort | tr '\n' ' ')"
fi

echo "== 4. the 480-job dry run beside its 20-job slice"
"$PY" bench/dry_run_scale.py
