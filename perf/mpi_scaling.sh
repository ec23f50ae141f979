#!/usr/bin/env bash
# Data-parallel scaling on this machine: perf/mpi_bench (Tree-LSTM, global batch
# 64, hidden 150 unless given) under mpirun with 1, 2 and 4 processes of one
# thread each (VJIT_THREADS=1). On a 2-core machine 4 processes are
# oversubscribed (two per core): that line measures contention, not scaling.
# Prints one JSON line per process count (samples/s, seconds per step, the part
# in collectives, bytes per step) and writes them to perf/results/mpi_scaling.jsonl.
# The environment passes through: VJIT_DIST_OVERLAP=on measures the exchange
# overlapped with the backward pass, VJIT_DETERMINISTIC=off MPI_Allreduce.
#   perf/mpi_scaling.sh [build-dir] [steps] [hidden]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-20}
hidden=${3:-150}
out=perf/results/mpi_scaling.jsonl
bench="$build/perf/mpi_bench"
export VJIT_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$(dirname "$out")"
: > "$out"
for np in 1 2 4; do
  line=$(mpirun --oversubscribe --mca btl self,vader -np "$np" --bind-to none "$bench" --steps "$steps" --hidden "$hidden")
  echo "$line" | tee -a "$out"
done
