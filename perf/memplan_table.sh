#!/usr/bin/env bash
# The memory-layout table of the PQ-tree issue (ED-Batch's Table 2 analogue):
# VJIT_MEMPLAN=copy against pqtree on Tree-LSTM, Tree-GRU, Fixed-LSTM, Var-LSTM
# and Lattice-LSTM, batch 8 and 64, hidden 64 and 256, training steps and
# inference batches, on the real data where it exists, both against the copy
# baseline that copies every child row it reads and every stacked weight
# (copy with VJIT_ROW_PLACEMENT=slices and VJIT_PARAM_LAYOUT off), with what VJIT_MEMPLAN=auto keeps after timing
# copy and pqtree and its time; then the planner's time
# at batch 16, 64, 256 and 1024 (Tree-LSTM on SST and Lattice-LSTM on the
# lattice set, hidden 256, training). The two
# planners run back to back per configuration. Results are not re-checked here
# (--no-check): tests/test_engine.cpp checks pqtree against the reference.
# Writes perf/results/memplan.jsonl and memplan_scaling.jsonl, then prints the
# tables (perf/memplan_table.py). Build first: scripts/build.sh Release. 3 min on a 2-core Zen 4.
#   perf/memplan_table.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
data=../shared/data
out=perf/results
mkdir -p "$out"
bench="$build/perf/vjit-bench"

# shellcheck source=perf/model_data.sh
source perf/model_data.sh

: > "$out/memplan.jsonl"
for model in tree_lstm tree_gru fixed_lstm var_lstm lattice_lstm; do
  for batch in 8 64; do
    for hidden in 64 256; do
      for mode in train infer; do
        steps=6
        [ "$batch" = 8 ] && steps=20
        # 8 warm-up batches for all four, so that they time the same batches
        # and auto's 8 trial batches are its warm-up: its timed steps run the
        # planner it kept (auto needs determinism off).
        for layout in baseline copy pqtree auto; do
          deterministic=1 memplan=$layout placement=auto param_layout=1
          [ "$layout" = auto ] && deterministic=0
          [ "$layout" = baseline ] && memplan=copy placement=slices param_layout=0
          # shellcheck disable=SC2046
          VJIT_MEMPLAN=$memplan VJIT_DETERMINISTIC=$deterministic VJIT_ROW_PLACEMENT=$placement \
            VJIT_PARAM_LAYOUT=$param_layout "$bench" --model "$model" --mode "$mode" \
            --hidden "$hidden" --batch "$batch" --steps "$steps" --warmup 8 --peak-seconds 0.1 --no-check \
            $(data_of "$model") >> "$out/memplan.jsonl"
        done
      done
    done
  done
done

: > "$out/memplan_scaling.jsonl"
for model in tree_lstm lattice_lstm; do
  [ -n "$(data_of "$model")" ] || continue
  for batch in 16 64 256 1024; do
    steps=6
    [ "$batch" = 1024 ] && steps=2
    for memplan in copy pqtree; do
      # shellcheck disable=SC2046
      VJIT_MEMPLAN=$memplan "$bench" --model "$model" --mode train --hidden 256 --batch "$batch" --steps "$steps" \
        --peak-seconds 0.1 --no-check $(data_of "$model") >> "$out/memplan_scaling.jsonl"
    done
  done
done
python3 perf/memplan_table.py "$out/memplan.jsonl" "$out/memplan_scaling.jsonl"
