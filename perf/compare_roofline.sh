#!/usr/bin/env bash
# Old binary against new on every CPU roofline target (the configurations of
# run_benchmarks.sh's roofline section, each on its real data):
#   perf/compare_roofline.sh OLD_REV [ROUNDS]
# For each configuration perf/compare_binaries.py runs the vjit-bench of
# OLD_REV and of this checkout alternately, ROUNDS times each (default 3), and
# prints every run; this script then prints its summary lines only (one JSON
# object per configuration: medians of each binary and their ratio, "speedup")
# on stdout, the runs on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: perf/compare_roofline.sh OLD_REV [ROUNDS]}
rounds=${2:-3}
data=../shared/data
configs=()
if [ -f "$data/sst/train.txt" ]; then
  for mode in train infer; do
    configs+=("--model tree_lstm --mode $mode --hidden 256 --batch 64 --data $data/sst/train.txt")
    configs+=("--model tree_lstm --mode $mode --hidden 512 --batch 256 --steps 5 --data $data/sst/train.txt")
  done
  configs+=("--model tree_gru --mode train --hidden 256 --batch 64 --data $data/sst/train.txt")
fi
[ -f "$data/ptb/dev.txt" ] && configs+=("--model var_lstm --mode train --hidden 256 --batch 64 --data $data/ptb/dev.txt")
[ -f "$data/lattice/train.txt" ] && configs+=("--model lattice_lstm --mode train --hidden 256 --batch 64 --data $data/lattice/train.txt")
configs+=("--model mv_rnn --mode train --hidden 64 --batch 64")
for config in "${configs[@]}"; do
  # shellcheck disable=SC2086  # a configuration is a list of arguments
  perf/compare_binaries.py "$old" --rounds "$rounds" -- $config | while IFS= read -r line; do
    echo "$line" >&2  # every run (not tee /dev/stderr: reopening a redirected stderr truncates its file)
    if [[ $line == *'"summary": true'* ]]; then echo "$line"; fi
  done
done
