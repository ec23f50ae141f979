#!/usr/bin/env bash
# The main job: installs what is missing, builds Release and trains the
# Tree-LSTM example on the Stanford Sentiment Treebank shipped in data/sst/
# (build/examples/tree_lstm --sst: hidden 150, embed 300, batch 25, Adam, 5
# epochs). Each epoch prints a progress bar, the loss, the dev accuracy on all
# nodes and at the root (5 classes) and samples/s; the best epoch by dev root
# accuracy is kept in build/tree_lstm_sst_best.safetensors and scored on the
# test set at the end. Arguments go to the example after --sst and override
# its settings (scripts/train.sh --epochs 2 --hidden 64). The example without
# --sst trains on its built-in synthetic treebank: build/examples/tree_lstm.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/build.sh Release
exec build/examples/tree_lstm --sst "$@"
