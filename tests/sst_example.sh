#!/usr/bin/env bash
# The example trainer on the SST shipped in data/sst/ (ctest sst_example):
#   sst_example.sh TREE_LSTM SST_DIR WORK_DIR
# 1. a tiny run on slices of the shipped splits (the dev slice gzip-compressed)
#    with --dev: every epoch is scored on dev, the best epoch's checkpoint is
#    written and at the end scored on the test slice;
# 2. --sst finds the shipped files: all 8544 / 1101 / 2210 trees load (--epochs 0,
#    a tiny model, so only the untrained model is scored);
# 3. a missing --dev file is refused naming it; --save-best without --dev is refused;
# 4. --vectors FILE (made here, GloVe's text format) sets the embedding rows of
#    the words it holds: it says how many it found, and the untrained model's
#    test loss changes; a malformed line is refused naming the file and line.
set -euo pipefail
tree_lstm="$(realpath "$1")"  # absolute: the script works inside WORK_DIR
sst="$(realpath "$2")"
work="$3"
rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }

# Whole files first: head closing the pipe early would fail gunzip under pipefail.
for split in train dev test; do gunzip -c "$sst/$split.txt.gz" > "full_$split.txt"; done
head -n 300 full_train.txt > train.txt
head -n 60 full_dev.txt | gzip -c > dev.txt.gz
head -n 60 full_test.txt > test.txt
small=(--hidden 16 --embed 16 --batch 25 --threads 1)

"$tree_lstm" "${small[@]}" --data train.txt --dev dev.txt.gz --test test.txt --epochs 2 \
  --save-best best.safetensors > slice.txt
cat slice.txt
grep -q "^tree_lstm: 300 train / 60 dev / 60 test samples" slice.txt || fail "the slice sizes are not printed"
for epoch in 1 2; do
  grep -Eq "^epoch $epoch: loss [0-9.]+  train acc [0-9.]+  dev acc [0-9.]+ \(root [0-9.]+\)  [0-9.]+ samples/s" slice.txt ||
    fail "no dev scores for epoch $epoch"
done
grep -q "^best dev root accuracy so far: saved best.safetensors" slice.txt || fail "no best checkpoint saved"
[[ -s best.safetensors ]] || fail "best.safetensors was not written"
grep -Eq "^best epoch [12] \(dev acc [0-9.]+, root [0-9.]+\) from best.safetensors: test acc [0-9.]+ \(root [0-9.]+\)" \
  slice.txt || fail "the best epoch is not scored on the test set"

"$tree_lstm" --sst --hidden 8 --embed 8 --epochs 0 --threads 1 > sst.txt
cat sst.txt
grep -q "^tree_lstm: 8544 train / 1101 dev / 2210 test samples" sst.txt || fail "--sst does not load the shipped splits"
grep -q "^evaluation after epoch 0: test acc" sst.txt || fail "--sst --epochs 0 does not score the test set"

status=0
"$tree_lstm" "${small[@]}" --data train.txt --dev missing.txt --epochs 1 > refused.txt 2>&1 || status=$?
cat refused.txt
[[ "$status" -ne 0 ]] && grep -q "missing.txt" refused.txt || fail "a missing --dev file was not refused naming it"
status=0
"$tree_lstm" "${small[@]}" --data train.txt --save-best b.safetensors --epochs 1 > refused.txt 2>&1 || status=$?
cat refused.txt
[[ "$status" -ne 0 ]] && grep -q "needs --dev" refused.txt || fail "--save-best without --dev was not refused"
# Word vectors of width 16 for three words of the slice (which holds them also
# capitalised: "The" takes the vector of "the") and one word the data lacks.
vector() { for ((i = 0; i < 16; ++i)); do printf ' %s' "0.$(( ($1 * 7 + i * 3) % 10 ))"; done; }
{ echo "the$(vector 1)"; echo "film$(vector 2)"; echo "good$(vector 3)"; echo "zzzqx$(vector 4)"; } > vectors.txt
untrained=(--hidden 16 --embed 16 --threads 1 --data train.txt --test test.txt --epochs 0)
"$tree_lstm" "${untrained[@]}" > plain.txt
"$tree_lstm" "${untrained[@]}" --vectors vectors.txt > vectors_run.txt
cat vectors_run.txt
grep -Eq "^vectors vectors.txt: ([3-9]|[1-9][0-9]+) of [0-9]+ words found \([1-9][0-9]* only in lower case\), [0-9]+ keep their initialisation; 4 vectors in the file" \
  vectors_run.txt || fail "--vectors does not say what it found"
plain_loss=$(grep "^evaluation after epoch 0" plain.txt)
vectors_loss=$(grep "^evaluation after epoch 0" vectors_run.txt)
[[ -n "$plain_loss" && "$plain_loss" != "$vectors_loss" ]] || fail "--vectors did not change the embedding"
echo "bad 0.1 0.2" > bad_vectors.txt
status=0
"$tree_lstm" "${untrained[@]}" --vectors bad_vectors.txt > refused.txt 2>&1 || status=$?
cat refused.txt
[[ "$status" -ne 0 ]] && grep -q "bad_vectors.txt:1:1" refused.txt || fail "a malformed vectors file was not refused"
echo "sst_example: passed"
