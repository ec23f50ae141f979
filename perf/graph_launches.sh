#!/usr/bin/env bash
# Host launches per training step of the Tree-LSTM (SST where it exists,
# hidden 256, batch 64) on the CUDA device with VJIT_CUDA_GRAPHS and
# VJIT_CUDA_RESIDENT_PARAMS off and on, counted by the driver double of the
# tests (build/tests/cuda_double: the host code runs, no kernel does). A host
# launch is a cuGraphLaunch, or a kernel or cuBLASLt product launched on its
# own (not captured into a graph); the copies to the host (and their bytes)
# are counted too: the objective, the pushed values, the optimizer's norm and
# flag, and by default every updated parameter.
# Per step = (the process's count at 2N steps − at N steps) / N, so the
# engine's start, the warm-up and the GEMM peak (three products with
# --peak-seconds 1e-9) cancel out; --no-lower-bound leaves out the forward
# passes vjit-bench otherwise runs after the timed steps. Counts of the host code, not timings: a GPU
# measures what they are worth (perf/run_gpu_benchmarks.sh). Writes
# perf/results/graph_launches.jsonl and prints a table. Build first:
# scripts/build.sh Release vjit-bench vjit_cuda_driver_double vjit_cublaslt_double.
#   perf/graph_launches.sh [build-dir] [steps N]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-8}
data=../shared/data
out=perf/results
mkdir -p "$out"
bench="$build/perf/vjit-bench"
double="$build/tests/cuda_double"
[ -f "$double/libcuda.so.1" ] || { echo "graph_launches: no driver double in $double (build with the CUDA toolkit)" >&2; exit 1; }

# shellcheck source=perf/model_data.sh
source perf/model_data.sh

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
: > "$out/graph_launches.jsonl"
for resident in off on; do
for graphs in off on; do
  for n in "$steps" $((2 * steps)); do
    # shellcheck disable=SC2046
    VJIT_DOUBLE_SUMMARY="$scratch/$graphs-$resident-$n.json" VJIT_CUDA_GRAPHS=$graphs \
      VJIT_CUDA_RESIDENT_PARAMS=$resident LD_LIBRARY_PATH="$double${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "$bench" --model tree_lstm --mode train --device cuda --hidden 256 --batch 64 --steps "$n" --warmup 2 \
      --peak-seconds 1e-9 --no-check --no-lower-bound $(data_of tree_lstm) > /dev/null
  done
done
done
python3 - "$scratch" "$steps" "$out/graph_launches.jsonl" <<'EOF'
import json, sys
scratch, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print("| VJIT_CUDA_RESIDENT_PARAMS | VJIT_CUDA_GRAPHS | host launches per step | graph launches | kernels alone "
      "| products alone | captured per step | instantiations per step | updates per step "
      "| copies to the host per step | bytes to the host per step |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
with open(out, "w") as jsonl:
    for resident in ("off", "on"):
        for graphs in ("off", "on"):
            few = json.load(open(f"{scratch}/{graphs}-{resident}-{steps}.json"))
            many = json.load(open(f"{scratch}/{graphs}-{resident}-{2 * steps}.json"))
            per = {k: (many[k] - few[k]) / steps for k in few}
            host = per["graph_launches"] + per["kernel_launches"] + per["product_launches"]
            jsonl.write(json.dumps({"model": "tree_lstm", "hidden": 256, "batch": 64, "cuda_graphs": graphs,
                                    "cuda_resident_params": resident, "host_launches_per_step": host,
                                    **{k + "_per_step": v for k, v in per.items()}}) + "\n")
            print(f'| {resident} | {graphs} | {host:.1f} | {per["graph_launches"]:.1f} | {per["kernel_launches"]:.1f} '
                  f'| {per["product_launches"]:.1f} | {per["captured"]:.1f} | {per["instantiations"]:.2f} '
                  f'| {per["updates"]:.2f} | {per["downloads"]:.1f} | {per["download_bytes"]:.0f} |')
EOF
