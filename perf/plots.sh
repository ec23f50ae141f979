#!/usr/bin/env bash
# The figures of docs/benchmarks.md (Cavs-style): the Tree-LSTM on SST (hidden 256,
# batch 64 unless swept), every line from vjit-bench, then CSV and PNG files in
# perf/results/plots/:
#   batch_sweep   samples/s against batch size 1 … 128 (train and infer)
#   hidden_sweep  samples/s against hidden size 64 … 512 (train and infer)
#   ablation      Cavs Fig. 10's configurations (fusion, lazy batching,
#                 streaming; baseline, each alone, all, vjit's default), train
#   phases        ms per training step by phase (time_s) for each batch size
#   peers         vjit against the PyTorch styles (perf/peers/run_peers.sh)
#
#   scripts/build.sh Release vjit-bench peers_export && perf/peers/setup.sh
#   perf/plots.sh [--reps N] [--no-peers] [--threads N]
#
# --reps N (default 2): each sweep point runs N times, the points taking turns,
# and the CSV keeps the median (~4 min here; ~2 with --reps 1). Then
# perf/peers/run_peers.sh --rounds 1 (~5 min); --no-peers plots
# perf/results/peers.jsonl as it is instead (docs/benchmarks.md's: run_peers.sh with
# its default 3 rounds, plotted as medians). Needs PEERS_PYTHON (default
# build/peers-venv/bin/python, from perf/peers/setup.sh) for matplotlib.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=2
peers=1
threads=2
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift ;;
    --no-peers) peers=0 ;;
    --threads) threads=$2; shift ;;
    *) echo "plots.sh: unknown flag $1 (--reps N, --no-peers, --threads N)" >&2; exit 2 ;;
  esac
  shift
done
build=${BUILD:-build}
python=${PEERS_PYTHON:-build/peers-venv/bin/python}
sst=../shared/data/sst/train.txt
out=perf/results/plots
bench="$build/perf/vjit-bench"
[ -x "$bench" ] || { echo "plots.sh: $bench missing: scripts/build.sh Release vjit-bench" >&2; exit 2; }
[ -f "$sst" ] || { echo "plots.sh: $sst missing (the SST training trees)" >&2; exit 2; }
"$python" -c 'import matplotlib' 2>/dev/null || { echo "plots.sh: $python has no matplotlib: run perf/peers/setup.sh" >&2; exit 2; }
mkdir -p "$out"
export VJIT_THREADS=$threads
lines=$out/sweeps.jsonl
: > "$lines"

# One point: a tag for the plot, then vjit-bench's flags.
point() {
  local sweep=$1; shift
  "$bench" --data "$sst" --peak-seconds 0.4 --steps 8 "$@" | sed "s/^{/{\"sweep\":\"$sweep\",/" >> "$lines"
}
for rep in $(seq "$reps"); do
  echo "plots.sh: round $rep of $reps" >&2
  for mode in train infer; do
    for batch in 1 8 16 32 64 128; do point batch --model tree_lstm --mode "$mode" --hidden 256 --batch "$batch"; done
    for hidden in 64 128 256 512; do point hidden --model tree_lstm --mode "$mode" --hidden "$hidden" --batch 64; done
  done
  # run_ablation's configurations (perf/vjit_bench.cpp), on SST at hidden 256.
  point ablation:baseline --model tree_lstm --hidden 256 --batch 64 --fusion off --lazy off --streaming off
  point ablation:fusion --model tree_lstm --hidden 256 --batch 64 --fusion on --lazy off --streaming off
  point ablation:lazy --model tree_lstm --hidden 256 --batch 64 --fusion off --lazy on --streaming off
  point ablation:streaming --model tree_lstm --hidden 256 --batch 64 --fusion off --lazy off --streaming on
  point ablation:all --model tree_lstm --hidden 256 --batch 64 --fusion on --lazy on --streaming on
  point ablation:default --model tree_lstm --hidden 256 --batch 64
done
if [ "$peers" = 1 ]; then
  perf/peers/run_peers.sh --rounds 1 --threads "$threads" > /dev/null
fi
"$python" perf/plots.py "$lines" perf/results/peers.jsonl "$out"
