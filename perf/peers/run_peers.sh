#!/usr/bin/env bash
# vjit against the same models written in PyTorch, in one run on the same data,
# hyper-parameters, initial weights and thread count: per-sample eager and
# batched by level (DGL's way). For each model: peers-export writes vjit's
# initial parameters and vjit-bench's batches; vjit-bench times vjit; peers.py
# checks that each PyTorch style's first-step loss equals vjit's (1e-4
# relative) and times it; training and inference. Prints the JSON lines, one
# JSON line per model and mode with vjit's speedups, and a Markdown table
# (perf/peers/table.py); keeps them in perf/results/peers{.jsonl,_summary.jsonl,.md}.
#
#   perf/peers/setup.sh                 # once: PyTorch into build/peers-venv
#   scripts/build.sh Release vjit-bench peers_export
#   perf/peers/run_peers.sh [--rounds N] [--quick] [--threads N] [--models "tree_lstm var_lstm tree_fc"]
#
# --rounds N (default 3): vjit and the two styles take turns N times, each a
# fresh process, and the table reports the medians (the machine is shared:
# one run alone can be off by 2x); ~3 min a round here. --quick: fewer timed
# batches (a smoke run). Environment: PEERS_PYTHON (default
# build/peers-venv/bin/python), BUILD (default build).
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=2
quick=0
rounds=3
models="tree_lstm var_lstm tree_fc"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --rounds) rounds=$2; shift ;;
    --threads) threads=$2; shift ;;
    --models) models=$2; shift ;;
    *) echo "run_peers.sh: unknown flag $1 (--rounds N, --quick, --threads N, --models LIST)" >&2; exit 2 ;;
  esac
  shift
done
build=${BUILD:-build}
python=${PEERS_PYTHON:-build/peers-venv/bin/python}
data=../shared/data
out=perf/results
work=$build/peers
for tool in "$build/perf/vjit-bench" "$build/perf/peers-export"; do
  [ -x "$tool" ] || { echo "run_peers.sh: $tool missing: scripts/build.sh Release vjit-bench peers_export" >&2; exit 2; }
done
"$python" -c 'import torch, safetensors' 2>/dev/null || { echo "run_peers.sh: $python has no torch: run perf/peers/setup.sh" >&2; exit 2; }
mkdir -p "$out" "$work"
export VJIT_THREADS=$threads

# model data hidden batch timed-batches (and --quick's)
configs() {
  echo "tree_lstm $data/sst/train.txt 256 64 10 3"
  echo "var_lstm $data/ptb/dev.txt 256 64 5 2"
  echo "tree_fc built-in 256 64 3 1"
}
results=$out/peers.jsonl
: > "$results"
while read -r model file hidden batch steps quick_steps; do
  case " $models " in *" $model "*) ;; *) continue ;; esac
  [ "$quick" = 1 ] && steps=$quick_steps
  data_flag=()
  if [ "$file" != built-in ]; then
    [ -f "$file" ] || { echo "run_peers.sh: $file missing, $model skipped" >&2; continue; }
    data_flag=(--data "$file")
  fi
  dir=$work/$model
  "$build/perf/peers-export" --model "$model" --hidden "$hidden" --batch "$batch" --steps "$steps" "${data_flag[@]}" \
    --out "$dir" >&2
  for round in $(seq "$rounds"); do
    for mode in train infer; do
      "$build/perf/vjit-bench" --model "$model" --mode "$mode" --hidden "$hidden" --batch "$batch" --steps "$steps" \
        "${data_flag[@]}" | tee -a "$results"
      for style in eager level; do
        "$python" perf/peers/peers.py "$dir" --style "$style" --mode "$mode" --threads "$threads" | tee -a "$results"
      done
    done
  done
done < <(configs)
"$python" perf/peers/table.py "$results" --json | tee "$out/peers_summary.jsonl"
"$python" perf/peers/table.py "$results" | tee "$out/peers.md"
