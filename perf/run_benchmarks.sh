#!/usr/bin/env bash
# Runs every benchmark whose figures docs/benchmarks.md reports and writes JSON lines
# to perf/results/. Build first: scripts/build.sh Release.
#   perf/run_benchmarks.sh [build-dir] [section...]
# Sections: models, roofline, levers, merge, ablation, policies (all when none
# is named). ROOFLINE_ROUNDS (default 3): how many times the roofline
# configurations take turns; summarize.py prints each one's median.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
all_sections="models roofline levers merge ablation policies"
sections=${*:-$all_sections}
for section in $sections; do
  if [[ " $all_sections " != *" $section "* ]]; then
    echo "run_benchmarks.sh: unknown section '$section' (sections: $all_sections)" >&2
    exit 2
  fi
done
wants() { [[ " $sections " == *" $1 "* ]]; }
data=../shared/data
out=perf/results
mkdir -p "$out"
bench="$build/perf/vjit-bench"

# Every model, training, hidden 256, batch 64, with the per-sample comparison.
if wants models; then
  : > "$out/models.jsonl"
  for model in tree_lstm tree_fc var_lstm fixed_lstm bilstm_tagger tree_gru mv_rnn tree_lstm_2type tree_lstm_outputs lattice_lstm; do
    hidden=256
    [ "$model" = mv_rnn ] && hidden=64   # MV-RNN's per-word matrices are hidden² values
    "$bench" --model "$model" --mode train --hidden "$hidden" --batch 64 --steps 5 --compare-unbatched >> "$out/models.jsonl"
  done
  # The Tree-LSTM on the real SST trees, when the data is there.
  if [ -f "$data/sst/train.txt" ]; then
    "$bench" --model tree_lstm --mode train --hidden 256 --batch 64 --data "$data/sst/train.txt" --compare-unbatched > "$out/tree_lstm_sst.jsonl"
    "$bench" --model tree_lstm --mode infer --hidden 256 --batch 64 --data "$data/sst/train.txt" >> "$out/tree_lstm_sst.jsonl"
  fi
fi
# The roofline targets of the CPU-speed issue, each on its real data, the
# configurations taking turns ROOFLINE_ROUNDS times (~1.6 min a round).
if wants roofline; then
  : > "$out/roofline.jsonl"
  for round in $(seq "${ROOFLINE_ROUNDS:-3}"); do
    if [ -f "$data/sst/train.txt" ]; then
      for mode in train infer; do
        "$bench" --model tree_lstm --mode "$mode" --hidden 256 --batch 64 --data "$data/sst/train.txt" >> "$out/roofline.jsonl"
        "$bench" --model tree_lstm --mode "$mode" --hidden 512 --batch 256 --steps 5 --data "$data/sst/train.txt" >> "$out/roofline.jsonl"
      done
      "$bench" --model tree_gru --mode train --hidden 256 --batch 64 --data "$data/sst/train.txt" >> "$out/roofline.jsonl"
    fi
    if [ -f "$data/ptb/dev.txt" ]; then
      "$bench" --model var_lstm --mode train --hidden 256 --batch 64 --data "$data/ptb/dev.txt" >> "$out/roofline.jsonl"
    fi
    if [ -f "$data/lattice/train.txt" ]; then
      "$bench" --model lattice_lstm --mode train --hidden 256 --batch 64 --data "$data/lattice/train.txt" >> "$out/roofline.jsonl"
    fi
    "$bench" --model mv_rnn --mode train --hidden 64 --batch 64 >> "$out/roofline.jsonl"
  done
fi
# Each CPU-speed lever off in turn, the configurations taking turns three
# times, on the SST Tree-LSTM (~5 min); then on MV-RNN, whose per-vertex
# products other levers act on, nine times (a step is short: ~1 min).
if wants levers && [ -f "$data/sst/train.txt" ]; then
  : > "$out/levers.jsonl"
  for mode in train infer; do
    "$bench" --levers --rounds 3 --model tree_lstm --mode "$mode" --hidden 256 --batch 64 --data "$data/sst/train.txt" \
      >> "$out/levers.jsonl"
  done
fi
if wants levers; then
  "$bench" --levers --rounds 9 --model mv_rnn --mode train --hidden 64 --batch 64 > "$out/levers_mv_rnn.jsonl"
fi
# Matmul merging: the Var-LSTM written with one weight per gate, merged (the
# default) and not, at three sizes; on and off alternate, eight times, so that
# the medians summarize.py prints see the same machine load (~3 min).
if wants merge; then
  : > "$out/merge_matmuls.jsonl"
  for rep in 1 2 3 4 5 6 7 8; do
    for hidden in 64 128 256; do
      for merge in on off; do
        "$bench" --model var_lstm_gates --mode train --hidden "$hidden" --batch 64 --steps 20 --merge-matmuls "$merge" \
          >> "$out/merge_matmuls.jsonl"
      done
    done
  done
fi
# Cavs Fig. 10 ablation.
if wants ablation; then
  "$bench" --ablation --steps 5 > "$out/ablation.jsonl"
fi
# Batches per step of every policy (ED-Batch), and fsm against agenda end to end on lattices.
if wants policies; then
  "$build/perf/policy-table" --markdown --data-dir "$data" > "$out/policy_table.txt"
  "$bench" --model lattice_lstm --policy fsm --compare-policy agenda --hidden 256 --batch 64 --steps 5 > "$out/lattice_fsm.jsonl"
  if [ -f "$data/lattice/train.txt" ]; then
    "$bench" --model lattice_lstm --policy fsm --compare-policy agenda --hidden 256 --batch 64 --steps 5 \
      --data "$data/lattice/train.txt" >> "$out/lattice_fsm.jsonl"
  fi
fi
echo "results in $out/"
