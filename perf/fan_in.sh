#!/usr/bin/env bash
# What a vertex pays for the children it may have: trains child_sum_tree_lstm
# (hidden 256, batch 64, the built-in trees: at most 5 children) with its
# gather_all declaring the data's most children and 4× as many, on the same
# data, and prints one JSON object: per declaration, samples/s and primitives
# per step (total and GEMMs), and the slowdown of the wide declaration. A quick
# run (3 timed steps): on a shared machine the timings move by 10-20%, the
# primitive counts do not. Build first: scripts/build.sh Release vjit-bench.
#   perf/fan_in.sh [build-dir] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-3}
bench="$build/perf/vjit-bench"
actual=5  # kMaxFanIn of models/tree_models.cpp: the built-in trees' most children
run() {
  "$bench" --model child_sum_tree_lstm --mode train --device cpu --hidden 256 --batch 64 --steps "$steps" \
    --warmup 1 --peak-seconds 0.05 --no-check --declared-children "$1"
}
python3 - "$(run $actual)" "$(run $((4 * actual)))" <<'PY'
import json, sys
runs = [json.loads(line) for line in sys.argv[1:]]
def row(r):
    return {"declared_children": r["declared_children"], "samples_per_s": round(r["samples_per_s"], 1),
            "primitives_per_step": r["primitives"]["total"], "gemms_per_step": r["primitives"].get("gemm", 0)}
print(json.dumps({"model": "child_sum_tree_lstm", "hidden": 256, "batch": 64,
                  "runs": [row(r) for r in runs],
                  "wide_over_actual_time": round(runs[0]["samples_per_s"] / runs[1]["samples_per_s"], 2)}))
PY
