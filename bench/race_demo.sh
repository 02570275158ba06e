#!/usr/bin/env bash
# Racing across seeds, for real (docs/how-to/racing.md): the tiny model on the toy task.
#   1. a CPU race on the local launcher, from the command line to its report;
#   2. the same race killed during its second wave and relaunched with the same command: it
#      finishes, and no run is trained twice (every run's status says 0 restarts and its metrics
#      hold each step once); `make watch` shows the runs' waves and where the race stands;
#   3. the race on the local SLURM cluster (scripts/slurm_cluster.sh start): each wave one job
#      array.
# Usage: bash bench/race_demo.sh [OUT_DIR]   (about 6 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d)}
PY=.venv/bin/python
RACE=(model=tiny data=toy rollout=hf "learning_rate=1e-5,3e-4,3e-3" race.max_seeds=3
      n_grpo_steps=40 eval.eval_every=10 checkpoint.checkpoint_every=10)

check_runs() {  # every run completed in one go: no restart, each step logged once
  "$PY" - "$1" <<'EOF'
import json, sys
from pathlib import Path
runs = sorted((p for p in Path(sys.argv[1]).iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
for run in runs:
    status = json.loads((run / "status.json").read_text())
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert status["status"] == "completed" and steps == sorted(set(steps)), run
    print(f"  run {run.name}: {status['status']}, {status['restarts']} restarts, steps 0-{steps[-1]} once each")
EOF
}

echo "== 1. a CPU race on the local launcher"
time "$PY" launch.py -m "${RACE[@]}" hydra.sweep.dir="$OUT/local"
"$PY" -m analysis plots --sweep "$OUT/local" >/dev/null
sed -n '/^## Race/,/^## Failures/p' "$OUT/local/report.md" | head -n -1
check_runs "$OUT/local"

echo "== 2. the same race killed during its second wave, then relaunched"
setsid "$PY" launch.py -m "${RACE[@]}" hydra.sweep.dir="$OUT/killed" > "$OUT/killed.log" 2>&1 &
sweeper=$!
until "$PY" -c "import json,sys; w=json.load(open('$OUT/killed/race.json'))['waves']; sys.exit(len(w) < 2)" 2>/dev/null \
      && ls "$OUT/killed"/*/metrics.jsonl 2>/dev/null | wc -l | grep -qv '^[0-3]$'; do sleep 0.5; done
sleep 1
kill -9 -- -"$sweeper" 2>/dev/null || true
wait "$sweeper" 2>/dev/null || true
echo "killed the sweeper and its jobs during wave 2:"
"$PY" -c "import json; r=json.load(open('$OUT/killed/race.json')); print('  waves recorded:', len(r['waves']), '; wave 2 looked at:', r['waves'][-1]['decision'] is not None)"
echo "make watch on the killed race (each run's wave, and where the race stands):"
"$PY" -m analysis watch "$OUT/killed" | sed -n '1,/^Resumed/p'
"$PY" launch.py -m "${RACE[@]}" hydra.sweep.dir="$OUT/killed" | grep "^race"
echo "make watch on the finished race:"
"$PY" -m analysis watch "$OUT/killed" | sed -n '1,/^Resumed/p'
"$PY" - "$OUT/killed" <<'EOF'
import json, sys
from pathlib import Path
sweep = Path(sys.argv[1])
for run in sorted((p for p in sweep.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
    status = json.loads((run / "status.json").read_text())
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert status["status"] == "completed" and steps == sorted(set(steps)), run
    print(f"  run {run.name}: {status['restarts']} restarts (resumed from {status.get('resumed_from', [])}), "
          f"steps 0-{steps[-1]} once each")
EOF

echo "== 3. the race on the local SLURM cluster (one job array a wave)"
name="race-demo-$$"
"$PY" launch.py -m "${RACE[@]}" cluster=slurm_cpu hydra.launcher.array_parallelism=2 \
  hydra.launcher.name="$name" hydra.sweep.dir="$OUT/slurm" | grep "^race"
echo "SLURM job arrays of the race:"
sacct -n -X --name "$name" -o JobID%20,State%12 2>/dev/null || squeue -h -t all -n "$name" -o "%i %T"
check_runs "$OUT/slurm"
echo "outputs: $OUT"
