#!/usr/bin/env bash
# Training speed of the SST Tree-LSTM driven from Python against the C++
# example, in one run: for each hidden size and batch size, the C++ example
# (build/examples/tree_lstm --sst) and the Python example
# (examples/python/tree_lstm_sst.py: batches copied out of the training set,
# and batches built with NumPy from its arrays) each train one epoch of the
# shipped SST with the same settings and seed, taking turns, ROUNDS times.
# Each prints the epoch's samples/s: the training loop as a whole, batch
# building and scoring included, not the start or the evaluation. Prints one
# line per configuration with the median of each and the ratios.
#   perf/python_vs_cpp.sh [ROUNDS [TREES]]   (needs scripts/build.sh Release)
# ROUNDS: default 2. TREES: train on the first TREES training trees only
# (default: all 8544), and score on the first 100 dev trees, for a shorter run.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-2}"
trees="${2:-}"
python="$(sed -n 's/^VJIT_PYTHON_EXECUTABLE:INTERNAL=//p' build/CMakeCache.txt)"
[[ -n "$python" ]] || { echo "python_vs_cpp: build/ has no Python module (scripts/build.sh Release)" >&2; exit 1; }
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
data=()
if [[ -n "$trees" ]]; then
  # Whole files first: head closing the pipe early would fail gunzip under pipefail.
  gunzip -c data/sst/train.txt.gz > "$work/full_train.txt"
  gunzip -c data/sst/dev.txt.gz > "$work/full_dev.txt"
  head -n "$trees" "$work/full_train.txt" > "$work/train.txt"
  head -n 100 "$work/full_dev.txt" > "$work/dev.txt"
  data=(--data "$work/train.txt" --dev "$work/dev.txt")
fi

speed() { sed -n 's/^epoch 1: .*  \([0-9.]*\) samples\/s$/\1/p' "$1"; }
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "$(date -u +%F) $(git rev-parse --short HEAD) $(nproc) cores, VJIT_THREADS=${VJIT_THREADS:-default}, $rounds rounds," \
  "${trees:-all} training trees"
printf '%-7s %-6s %12s %14s %14s %8s %8s\n' hidden batch "C++ s/s" "Py select s/s" "Py arrays s/s" select arrays
for hidden in 150 256; do
  for batch in 25 64; do
    flags=(--epochs 1 --hidden "$hidden" --batch "$batch" --test "" "${data[@]}")
    : > "$work/cpp"; : > "$work/select"; : > "$work/arrays"
    for ((r = 0; r < rounds; ++r)); do
      build/examples/tree_lstm --sst "${flags[@]}" --save-best "$work/c.safetensors" > "$work/out" 2>/dev/null
      speed "$work/out" >> "$work/cpp"
      for mode in select arrays; do
        "$python" examples/python/tree_lstm_sst.py "${flags[@]}" --batches "$mode" --save-best "$work/p.safetensors" > "$work/out"
        speed "$work/out" >> "$work/$mode"
      done
    done
    cpp=$(median < "$work/cpp") select=$(median < "$work/select") arrays=$(median < "$work/arrays")
    awk -v h="$hidden" -v b="$batch" -v c="$cpp" -v s="$select" -v a="$arrays" \
      'BEGIN {printf "%-7s %-6s %12.1f %14.1f %14.1f %8.3f %8.3f\n", h, b, c, s, a, s / c, a / c}'
  done
done
