#!/usr/bin/env bash
# Does overlapping the gradient exchange with the backward pass pay
# (VJIT_DIST_OVERLAP)? perf/mpi_bench at 2 processes of one thread each
# (Tree-LSTM, global batch 64, hidden 150 unless given), off and on taking
# turns --rounds times so that both see the same machine load. Writes
# perf/results/mpi_overlap.jsonl (one line per run, with "round" and
# "overlap") and prints the median ms per step, the median ms in collectives
# and on / off of the median steps (< 1: the overlap pays).
#   perf/mpi_overlap.sh [build-dir] [rounds] [steps] [hidden]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-5}
steps=${3:-40}
hidden=${4:-150}
out=perf/results/mpi_overlap.jsonl
export VJIT_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$(dirname "$out")"
: > "$out"
for round in $(seq 1 "$rounds"); do
  for overlap in off on; do
    line=$(VJIT_DIST_OVERLAP=$overlap mpirun --oversubscribe --mca btl self,vader -np 2 --bind-to none \
      "$build/perf/mpi_bench" --steps "$steps" --hidden "$hidden")
    echo "{\"round\": $round, \"overlap\": \"$overlap\", \"run\": $line}" >> "$out"
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
def med(overlap, key):
    return statistics.median(r["run"][key] for r in runs if r["overlap"] == overlap)
for overlap in ("off", "on"):
    print(json.dumps({"overlap": overlap, "rounds": sum(r["overlap"] == overlap for r in runs),
                      "median_ms_per_step": 1e3 * med(overlap, "step_s"),
                      "median_ms_in_collectives": 1e3 * med(overlap, "comm_s_per_step")}))
print(json.dumps({"on_over_off_step": med("on", "step_s") / med("off", "step_s")}))
PY
