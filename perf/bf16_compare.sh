#!/bin/bash
# fp32 against bf16 products (VJIT_GEMM=onednn and onednn_bf16) in one run:
# the two take turns ROUNDS times, so that both see the same machine load,
# and the medians are printed: samples/s, useful GFLOP/s, each back end's own
# GEMM peak and roofline ratio, and bf16's useful work over the fp32 peak.
#
#   perf/bf16_compare.sh [BUILD_DIR] ROUNDS -- <vjit-bench arguments>
#   perf/bf16_compare.sh build 5 -- --model tree_lstm --mode train --hidden 256 --batch 64 \
#       --data ../shared/data/sst/train.txt
#
# Needs a CPU with AVX-512 BF16 or AMX (elsewhere vjit-bench refuses
# onednn_bf16 and says why).
set -euo pipefail
build=build
if [ "$#" -ge 1 ] && [ "$1" != "--" ] && [ -d "$1" ]; then build="$1"; shift; fi
rounds="${1:?usage: perf/bf16_compare.sh [BUILD_DIR] ROUNDS -- <vjit-bench arguments>}"; shift
[ "${1:-}" = "--" ] && shift
for _ in $(seq "$rounds"); do
  for gemm in onednn onednn_bf16; do
    VJIT_GEMM=$gemm "$build/perf/vjit-bench" "$@" |
      python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print('$gemm', d['samples_per_s'], d['useful_gflops_per_s'], d['peak_gflops_per_s'], d['roofline_ratio'])"
  done
done | python3 -c "
import statistics as st, sys
runs = {}
for line in sys.stdin:
    name, *values = line.split()
    runs.setdefault(name, []).append([float(v) for v in values])
med = lambda name, i: st.median(r[i] for r in runs[name])
fp32_peak = med('onednn', 2)
for name in ('onednn', 'onednn_bf16'):
    print('%-12s samples/s %.0f (%s)  useful GFLOP/s %.1f  own peak %.1f  roofline ratio %.3f  useful over the fp32 peak %.3f'
          % (name, med(name, 0), ' '.join('%.0f' % r[0] for r in runs[name]), med(name, 1), med(name, 2), med(name, 3),
             med(name, 1) / fp32_peak))
print('bf16 / fp32 samples/s: %.2fx' % (med('onednn_bf16', 0) / med('onednn', 0)))
"
