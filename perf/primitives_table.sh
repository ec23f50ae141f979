#!/usr/bin/env bash
# Primitives per step: for every example model, the primitives (GEMMs, fused
# kernels, row moves, reductions, ...; vjit/primitive.h) one training step and
# one inference batch hand the device, by kind, at batch 64 and hidden 256 on
# the real data where it exists (perf/model_data.sh), on the CPU. The counts do
# not depend on the machine: they are the plan's, not timings. Writes
# perf/results/primitives.jsonl and prints a table (model, mode, total, the
# kinds). Build first: scripts/build.sh Release. About a minute.
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
: > "$out/primitives.jsonl"
for model in $models; do
  for mode in train infer; do
    [ "$model" = seq2seq ] && [ "$mode" = infer ] && continue  # its inference is --mode decode, a graph that grows
    # shellcheck disable=SC2046
    "$bench" --model "$model" --mode "$mode" --hidden 256 --batch 64 --steps 2 --warmup 1 --peak-seconds 0.05 \
      --no-check $(data_of "$model") >> "$out/primitives.jsonl"
  done
done
python3 - "$out/primitives.jsonl" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
kinds = sorted({k for r in rows for k in r["primitives"] if k != "total"})
print("| model | mode | total | " + " | ".join(kinds) + " |")
print("|---|---|---:|" + "---:|" * len(kinds))
for r in rows:
    p = r["primitives"]
    cells = [f'{p.get(k, 0):.0f}' for k in kinds]
    print(f'| {r["model"]} | {r["mode"]} | {p["total"]:.0f} | ' + " | ".join(cells) + " |")
EOF
