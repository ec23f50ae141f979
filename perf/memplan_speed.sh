#!/usr/bin/env bash
# Does the step get faster? (issue 11) The copy baseline (every child row a
# vertex reads and every stacked weight copied), VJIT_MEMPLAN=copy and pqtree
# take turns in one process per configuration (vjit-bench --layouts), 9 rounds
# each, so that each round's three runs see the same machine load: per round
# the baseline's step time over copy's and over pqtree's, and copy's over
# pqtree's; the table has their medians and ranges. Five models, batch 64,
# hidden 64 and 256, training and inference, on the real data where it exists.
# Writes perf/results/memplan_speed.jsonl, then prints the table
# (perf/memplan_table.py --speed). Build first: scripts/build.sh Release.
# About 4 minutes on a 2-core Zen 4.
#   perf/memplan_speed.sh [build-dir] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-9}
data=../shared/data
out=perf/results
mkdir -p "$out"

# shellcheck source=perf/model_data.sh
source perf/model_data.sh

: > "$out/memplan_speed.jsonl"
for model in tree_lstm tree_gru fixed_lstm var_lstm lattice_lstm; do
  for hidden in 64 256; do
    for mode in train infer; do
      # shellcheck disable=SC2046
      "$build/perf/vjit-bench" --layouts --rounds "$rounds" --model "$model" --mode "$mode" --hidden "$hidden" \
        --batch 64 --steps 6 --warmup 4 --peak-seconds 0.02 $(data_of "$model") >> "$out/memplan_speed.jsonl"
    done
  done
done
python3 perf/memplan_table.py --speed "$out/memplan_speed.jsonl"
