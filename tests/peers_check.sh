#!/usr/bin/env bash
# The PyTorch peers' equal-work check on tiny batches (run by ctest as
# peers_check): for the Tree-LSTM, Var-LSTM and Tree-FC (built-in data, hidden
# 16, batches of 3), peers-export writes vjit's initial weights, batches and
# losses, and perf/peers/peers.py --check-only asserts, for both PyTorch styles,
# that the first batch's loss equals vjit's within 1e-4 relative and the next
# batch's loss after one Adam step within 1e-3.
#   peers_check.sh PEERS_EXPORT SOURCE_DIR WORK_DIR
# Skips (exit 77, saying why) when no Python with torch and safetensors is
# found: PEERS_PYTHON, else SOURCE_DIR/build/peers-venv (perf/peers/setup.sh).
# CI does not install torch, so this test skips there.
set -euo pipefail
export_tool=$1 src=$2 work=$3
python=${PEERS_PYTHON:-$src/build/peers-venv/bin/python}
if ! "$python" -c 'import torch, safetensors' >/dev/null 2>&1; then
  echo "peers_check skipped: $python cannot import torch and safetensors (install them with perf/peers/setup.sh)"
  exit 77
fi
mkdir -p "$work"
for model in tree_lstm var_lstm tree_fc; do
  "$export_tool" --model "$model" --hidden 16 --batch 3 --steps 1 --warmup 1 --out "$work/$model"
done
"$python" "$src/perf/peers/peers.py" "$work/tree_lstm" "$work/var_lstm" "$work/tree_fc" --style both --threads 1 --check-only
echo "peers_check: both PyTorch styles match vjit's losses on all three models"
