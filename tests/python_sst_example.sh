#!/usr/bin/env bash
# The Python example against the C++ one (ctest python.sst_example):
#   python_sst_example.sh TREE_LSTM PYTHON SOURCE_DIR WORK_DIR
# Both train the Tree-LSTM on the same slices of the shipped SST with the same
# settings and seed: every epoch's loss, training accuracy and dev accuracy
# must print the same (the samples/s differ), with batches copied out of the
# training set or built from its arrays with NumPy, and the Python run must end
# with the best epoch's test accuracy.
set -euo pipefail
tree_lstm="$(realpath "$1")"
python="$2"
source_dir="$(realpath "$3")"
work="$4"
rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

for split in train dev test; do gunzip -c "$source_dir/data/sst/$split.txt.gz" > "full_$split.txt"; done
head -n 200 full_train.txt > train.txt
head -n 50 full_dev.txt > dev.txt
head -n 50 full_test.txt > test.txt
settings=(--hidden 24 --embed 20 --batch 25 --epochs 2 --data train.txt --dev dev.txt --test test.txt)

VJIT_THREADS=1 "$tree_lstm" --sst "${settings[@]}" --save-best cpp_best.safetensors > cpp.txt
VJIT_THREADS=1 "$python" "$source_dir/examples/python/tree_lstm_sst.py" "${settings[@]}" \
  --save-best python_best.safetensors > python.txt
VJIT_THREADS=1 "$python" "$source_dir/examples/python/tree_lstm_sst.py" "${settings[@]}" --batches arrays \
  --save-best arrays_best.safetensors > arrays.txt
epochs() { grep '^epoch [0-9]*:' "$1" | sed 's/  [0-9.]* samples\/s$//'; }
epochs cpp.txt > cpp_epochs.txt
epochs python.txt > python_epochs.txt
[[ $(wc -l < cpp_epochs.txt) -eq 2 ]] || fail "the C++ example printed no 2 epochs: $(cat cpp.txt)"
diff cpp_epochs.txt python_epochs.txt || fail "the Python example's epochs differ from the C++ example's"
epochs arrays.txt > arrays_epochs.txt
diff cpp_epochs.txt arrays_epochs.txt || fail "with --batches arrays the Python example's epochs differ"
grep -q '^best epoch [12] .*: test acc [0-9.]* (root [0-9.]*)$' python.txt || fail "no test accuracy: $(cat python.txt)"
cat python_epochs.txt
echo "python.sst_example: the Python and C++ examples print the same epochs"
