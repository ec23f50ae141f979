#!/usr/bin/env bash
# The GPU figures of docs/gpu.md (VJIT_DEVICE=cuda), as JSON lines in one file:
# the Tree-LSTM on SST at hidden 256 and 512, batch 64 and 256, training and
# inference (FP32, and TF32 at hidden 512, batch 256); the Var-LSTM and the
# Tree-FC on their built-in data; the engine's cold and warm start (NVRTC
# compile against the disk cache). Each line's peak is cuBLASLt's FP32 8192³
# product measured in the same process. Last, the Tree-LSTM again with each
# pass run as a CUDA graph (VJIT_CUDA_GRAPHS=on, off by default) next to the
# same settings without, each line tagged "cuda_graphs"; then inference latency
# (--mode latency: 1,000 SST sentences at hidden 256, batch 1, 8 and 64, each
# call timed alone; median and 99th percentile), graphs off and on; then
# training with the parameters kept on the GPU (VJIT_CUDA_RESIDENT_PARAMS=on,
# off by default), graphs off and on, tagged "cuda_resident_params". Build first:
# scripts/build.sh Release.
#   perf/run_gpu_benchmarks.sh [vjit-bench] [sst train.txt] [output.jsonl]
set -euo pipefail
bench=${1:-build/perf/vjit-bench}
sst=${2:-../shared/data/sst/train.txt}
out=${3:-perf/results/gpu.jsonl}
mkdir -p "$(dirname "$out")"
: > "$out"
export VJIT_DEVICE=cuda
run() { "$bench" --peak-seconds 0.5 --steps 10 "$@" >> "$out"; }

# Cold and warm start: a fresh cache directory, then the same one again (the
# timed engine is the process's first: --no-check).
cache=$(mktemp -d)
for start in cold warm; do
  VJIT_CACHE_DIR=$cache "$bench" --peak-seconds 0.1 --steps 1 --warmup 1 --no-check --model tree_lstm \
    --data "$sst" --hidden 256 --batch 64 | sed "s/^{/{\"start\":\"$start\",/" >> "$out"
done
rm -rf "$cache"

for hidden in 256 512; do
  for batch in 64 256; do
    for mode in train infer; do
      run --model tree_lstm --data "$sst" --hidden "$hidden" --batch "$batch" --mode "$mode"
    done
  done
done
VJIT_TF32=on run --model tree_lstm --data "$sst" --hidden 512 --batch 256 --mode train --no-check
for model in var_lstm tree_fc; do
  for batch in 64 256; do
    for mode in train infer; do
      run --model "$model" --hidden 256 --batch "$batch" --mode "$mode"
    done
  done
done

# CUDA graphs against launches, the same settings one after the other; every
# line checked against the reference first (vjit-bench's default).
for setting in "256 64 train" "512 256 train" "256 64 infer"; do
  read -r hidden batch mode <<< "$setting"
  for graphs in off on; do
    VJIT_CUDA_GRAPHS=$graphs "$bench" --peak-seconds 0.5 --steps 10 --model tree_lstm --data "$sst" \
      --hidden "$hidden" --batch "$batch" --mode "$mode" | sed "s/^{/{\"cuda_graphs\":\"$graphs\",/" >> "$out"
  done
done

# Inference latency: 1,000 sentences, --batch per call, each call timed alone.
for batch in 1 8 64; do
  for graphs in off on; do
    VJIT_CUDA_GRAPHS=$graphs "$bench" --peak-seconds 0.5 --model tree_lstm --data "$sst" --hidden 256 \
      --batch "$batch" --mode latency --sentences 1000 | sed "s/^{/{\"cuda_graphs\":\"$graphs\",/" >> "$out"
  done
done

# Resident parameters against the lines above of the same settings: the
# optimizer's multi-tensor kernels, nothing copied back per step.
for setting in "256 64" "512 256"; do
  read -r hidden batch <<< "$setting"
  for graphs in off on; do
    VJIT_CUDA_RESIDENT_PARAMS=on VJIT_CUDA_GRAPHS=$graphs "$bench" --peak-seconds 0.5 --steps 10 --model tree_lstm \
      --data "$sst" --hidden "$hidden" --batch "$batch" --mode train |
      sed "s/^{/{\"cuda_resident_params\":\"on\",\"cuda_graphs\":\"$graphs\",/" >> "$out"
  done
done
