#!/usr/bin/env bash
# Data-parallel tests under mpirun (ctest mpi.*; tests/CMakeLists.txt):
#   mpi_check.sh run|fault|hang|trainer MPIEXEC NP WORK_DIR PROGRAM [args...]
# run:     mpirun -np NP PROGRAM args; passes when every rank passes.
# fault:   a rank kills itself mid-training (mpi_train_check fault): the job
#          must end within 120 s (no hang), with a non-zero exit and a message
#          saying a rank died or a collective failed.
# hang:    a rank stops answering (mpi_train_check hang): the others' collectives
#          must time out (VJIT_DIST_TIMEOUT=5 here) with DistributedError's
#          message, and the job end with a non-zero exit within 120 s.
# trainer: PROGRAM is an example trainer (tree_lstm) and COMPARE the
#          mpi_train_check binary: 1 epoch with --save under mpirun -np NP and
#          1 epoch alone; the two checkpoints' parameters must agree (compare mode).
# Run as root (CI containers), Open MPI needs --allow-run-as-root.
set -uo pipefail
mode="$1" mpiexec="$2" np="$3" work="$4"
shift 4
rm -rf "$work"
mkdir -p "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 VJIT_THREADS=1
# One machine, no network interfaces needed; more ranks than cores is allowed.
launch=("$mpiexec" --oversubscribe --mca btl self,vader --mca rmaps_base_oversubscribe 1 -np "$np")

case "$mode" in
  run)
    timeout 300 "${launch[@]}" "$@"
    status=$?
    [[ $status -eq 0 ]] || echo "FAIL: mpirun -np $np $* exited with $status"
    exit $status
    ;;
  fault|hang)
    start=$(date +%s)
    VJIT_DIST_TIMEOUT=5 timeout 120 "${launch[@]}" "$@" > "$work/out.txt" 2>&1
    status=$?
    elapsed=$(( $(date +%s) - start ))
    cat "$work/out.txt"
    if [[ $status -eq 124 ]]; then
      echo "FAIL: the job hung: still running after 120 s"
      exit 1
    fi
    if [[ $status -eq 0 ]]; then
      echo "FAIL: the job exited with 0 although a rank died"
      exit 1
    fi
    expected="did not complete within|exited on signal|killed|failed"
    [[ $mode == hang ]] && expected="did not complete within 5 s \(VJIT_DIST_TIMEOUT\)"
    if ! grep -Eq "$expected" "$work/out.txt"; then
      echo "FAIL: no message says that a rank died or a collective failed"
      exit 1
    fi
    echo "$mode: the job ended in ${elapsed} s with exit $status and a message (no hang)"
    ;;
  trainer)
    trainer="$1" compare="$2"
    small=(--train-samples 96 --test-samples 24 --hidden 16 --batch 12 --epochs 1 --threads 1)
    "$trainer" "${small[@]}" --save "$work/alone.safetensors" > "$work/alone.txt" || { cat "$work/alone.txt"; exit 1; }
    timeout 300 "${launch[@]}" "$trainer" "${small[@]}" --save "$work/mpi.safetensors" > "$work/mpi.txt" 2>&1
    status=$?
    cat "$work/mpi.txt"
    [[ $status -eq 0 ]] || { echo "FAIL: mpirun -np $np tree_lstm exited with $status"; exit 1; }
    # Counted anywhere in a line: mpirun forwards a rank's stdout and stderr
    # separately, so the summary can land in the middle of a progress line.
    if [[ "$(grep -o 'epoch 1: loss' "$work/mpi.txt" | wc -l)" -ne 1 ]]; then
      echo "FAIL: expected exactly one 'epoch 1: loss' summary (rank 0 prints, the others are silent)"
      exit 1
    fi
    "$compare" compare "$work/mpi.safetensors" "$work/alone.safetensors"
    ;;
  *)
    echo "mpi_check.sh: unknown mode '$mode'"
    exit 2
    ;;
esac
