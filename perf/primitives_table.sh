#!/usr/bin/env bash
# Primitives per step: for every example model, the primitives (GEMMs, fused
# kernels, row moves, reductions, ...; vjit/primitive.h) one training step and
# one inference batch hand the device, by kind, at batch 64 and hidden 256 on
# the real data where it exists (perf/model_data.sh), on the CPU and, where the
# CUDA back end was built, on the CUDA device through the driver double of the
# tests (build/tests/cuda_double: the host code runs, no kernel does; a model
# the CUDA device refuses is left out). The counts do not depend on the
# machine: they are the plan's, not timings. Writes perf/results/primitives.jsonl
# and prints a table (model, mode, device, total, the kinds). Build first:
# scripts/build.sh Release. About two minutes.
#   perf/primitives_table.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
data=../shared/data
out=perf/results
mkdir -p "$out"
bench="$build/perf/vjit-bench"

# shellcheck source=perf/model_data.sh
source perf/model_data.sh

models=$({ "$bench" --model list 2>&1 || true; } | sed -n 's/.*(valid: \(.*\))/\1/p' | tr -d ',')
devices=cpu
double="$build/tests/cuda_double"
[ -f "$double/libcuda.so.1" ] && devices="cpu cuda"
: > "$out/primitives.jsonl"
for model in $models; do
  for mode in train infer; do
    [ "$model" = seq2seq ] && [ "$mode" = infer ] && continue  # its inference is --mode decode, a graph that grows
    for device in $devices; do
      library_path=${LD_LIBRARY_PATH:-}
      [ "$device" = cuda ] && library_path="$double${library_path:+:$library_path}"
      # shellcheck disable=SC2046
      LD_LIBRARY_PATH=$library_path "$bench" --model "$model" --mode "$mode" --device "$device" --hidden 256 \
        --batch 64 --steps 2 --warmup 1 --peak-seconds 0.05 --no-check $(data_of "$model") \
        >> "$out/primitives.jsonl" 2> /dev/null || echo "primitives_table: $model $mode on $device: refused" >&2
    done
  done
done
python3 - "$out/primitives.jsonl" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
kinds = sorted({k for r in rows for k in r["primitives"] if k != "total"})
print("| model | mode | device | total | " + " | ".join(kinds) + " |")
print("|---|---|---|---:|" + "---:|" * len(kinds))
for r in rows:
    p = r["primitives"]
    cells = [f'{p.get(k, 0):.0f}' for k in kinds]
    print(f'| {r["model"]} | {r["mode"]} | {r["device"]} | {p["total"]:.0f} | ' + " | ".join(cells) + " |")
EOF
