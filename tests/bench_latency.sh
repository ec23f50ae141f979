#!/usr/bin/env bash
# vjit-bench --mode latency: one line whose latency_s counts every call of
# --batch sentences and orders its figures (median ≤ p99 ≤ max, mean within
# [min call, max]); a bad --mode is refused with its value named.
#   tests/bench_latency.sh VJIT_BENCH
set -euo pipefail
bench=$1
line=$("$bench" --model tree_lstm --mode latency --hidden 16 --batch 4 --sentences 10 --warmup 1 \
  --no-lower-bound --peak-seconds 0.01)
python3 - "$line" <<'PY'
import json, sys
d = json.loads(sys.argv[1])
lat = d["latency_s"]
assert d["mode"] == "latency", d["mode"]
assert lat["calls"] == 3, lat  # 10 sentences, 4 per call: 3 calls
assert 0 < lat["median"] <= lat["p99"] <= lat["max"], lat
assert 0 < lat["mean"] <= lat["max"], lat
assert d["samples_per_s"] > 0
print("latency_s:", lat)
PY
if out=$("$bench" --mode fast 2>&1); then
  echo "vjit-bench accepted --mode fast" >&2
  exit 1
fi
grep -q "got 'fast'" <<< "$out"
