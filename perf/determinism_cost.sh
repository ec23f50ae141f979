#!/usr/bin/env bash
# What bitwise determinism across thread counts costs (VJIT_DETERMINISTIC, on by
# default): vjit-bench with it on and off, the two taking turns --rounds times
# per model and mode so that both see the same machine load, on VJIT_THREADS
# threads (default 2). Writes perf/results/determinism.jsonl (one line per run,
# with "round") and prints, per model and mode, the median and the best
# samples/s, roofline ratio and ms per step (total and GEMM) of each setting,
# and on / off of the medians (< 1: what determinism costs).
#   perf/determinism_cost.sh [build-dir] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-5}
data=../shared/data
out=perf/results/determinism.jsonl
bench="$build/perf/vjit-bench"
export VJIT_THREADS=${VJIT_THREADS:-2}
mkdir -p "$(dirname "$out")"
: > "$out"

run() {  # round, then vjit-bench's arguments
  local round=$1
  shift
  for deterministic in on off; do
    line=$(nice -n 0 "$bench" "$@" --deterministic "$deterministic")
    echo "{\"round\": $round, \"run\": $line}" >> "$out"
  done
}

for round in $(seq 1 "$rounds"); do
  if [ -f "$data/sst/train.txt" ]; then
    for mode in train infer; do
      run "$round" --model tree_lstm --mode "$mode" --hidden 256 --batch 64 --data "$data/sst/train.txt"
    done
  else
    for mode in train infer; do run "$round" --model tree_lstm --mode "$mode" --hidden 256 --batch 64; done
  fi
  if [ -f "$data/ptb/dev.txt" ]; then
    run "$round" --model var_lstm --mode train --hidden 256 --batch 64 --data "$data/ptb/dev.txt"
  else
    run "$round" --model var_lstm --mode train --hidden 256 --batch 64
  fi
  run "$round" --model mv_rnn --mode train --hidden 64 --batch 64  # per-vertex products: the fixed row blocks
done

python3 - "$out" <<'EOF'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r = json.loads(line)["run"]
    det = "on" if "deterministic=on" in r["options"] else "off"
    runs.setdefault((r["model"], r["data"], r["mode"]), {}).setdefault(det, []).append(r)
print("| model | data | mode | deterministic | runs | samples/s median (best) | roofline median | ms per step: total / GEMM (medians) | on / off |")
print("|---|---|---|---|---|---|---|---|---|")
for (model, data, mode), by in runs.items():
    med = {d: statistics.median(x["samples_per_s"] for x in v) for d, v in by.items()}
    for det in ("on", "off"):
        v = by.get(det, [])
        if not v:
            continue
        ratio = f"{med['on'] / med['off']:.3f}" if det == "on" and "off" in med else ""
        print(f"| {model} | {data} | {mode} | {det} | {len(v)} | {med[det]:.0f} ({max(x['samples_per_s'] for x in v):.0f}) | "
              f"{statistics.median(x['roofline_ratio'] for x in v):.3f} | "
              f"{1e3 * statistics.median(x['time_s']['total'] for x in v):.1f} / "
              f"{1e3 * statistics.median(x['time_s']['gemm'] for x in v):.1f} | {ratio} |")
EOF
