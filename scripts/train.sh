#!/usr/bin/env bash
# Installs what is missing, builds Release and trains the Tree-LSTM example on
# its built-in data. Arguments are passed to the example unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/build.sh Release
exec build/examples/tree_lstm "$@"
