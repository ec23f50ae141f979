#!/usr/bin/env bash
# The example trainer's checkpoints (ctest checkpoint_example):
#   checkpoint_example.sh TREE_LSTM WORK_DIR
# 1. one epoch with --save; 2. --load with --epochs 0 evaluates the loaded
# model: the evaluation printed must equal the one saved; 3. a truncated copy
# is refused with a clear message and a non-zero exit.
set -euo pipefail
tree_lstm="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
cd "$work"
small=(--train-samples 200 --test-samples 100 --hidden 16 --batch 16 --threads 1)

"$tree_lstm" "${small[@]}" --epochs 1 --save m.safetensors > train.txt
"$tree_lstm" "${small[@]}" --epochs 0 --load m.safetensors > eval.txt
cat train.txt eval.txt
saved="$(sed -n 's/^saved m.safetensors after epoch 1: //p' train.txt)"
evaluated="$(sed -n 's/^evaluation after epoch 1: //p' eval.txt)"
if [[ -z "$saved" || "$saved" != "$evaluated" ]]; then
  echo "FAIL: the evaluation of the loaded model ('$evaluated') differs from the saved one ('$saved')"
  exit 1
fi

head -c 1000 m.safetensors > truncated.safetensors
status=0
"$tree_lstm" "${small[@]}" --epochs 0 --load truncated.safetensors > refused.txt 2>&1 || status=$?
cat refused.txt
if [[ "$status" -eq 0 ]] || ! grep -q "truncated.safetensors' is not a valid safetensors file" refused.txt; then
  echo "FAIL: a truncated checkpoint was not refused clearly (exit $status)"
  exit 1
fi
echo "checkpoint_example: passed"
