#!/usr/bin/env bash
# Builds the libFuzzer targets (scripts/build.sh Fuzz -> build-fuzz/) when
# needed and runs each for a bounded time on a scratch copy of its seed corpus
# (fuzz/corpus/<target>/; the repository is not modified).
#   scripts/fuzz.sh [seconds-per-target] [target...]    (default 30 s, every target)
# Prints one JSON line per target:
#   {"target": "bracket", "seconds": 30, "executions": 123456, "crashes": 0, "corpus": 42}
# (corpus: the inputs in the scratch corpus at the end, seeds included). A
# finding (crash, sanitizer report, uncaught exception, broken invariant, hang
# past 30 s, leak, out of memory) sets crashes to 1, keeps the input in
# build-fuzz/findings/<target>/ and its log next to it, and makes the script
# exit 1 after the other targets ran. Targets run side by side, one per core. Reproduce one with
#   build-fuzz/fuzz/fuzz_<target> build-fuzz/findings/<target>/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-30}"
if [[ $# -gt 0 ]]; then shift; fi
if ! [[ "$seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: seconds per target must be a positive integer, got '$seconds'" >&2
  exit 2
fi

scripts/build.sh Fuzz fuzzers >&2
mapfile -t all_targets < build-fuzz/fuzz-targets.txt
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then targets=("${all_targets[@]}"); fi

scratch="$(mktemp -d "${TMPDIR:-/tmp}/vjit-fuzz.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT

# Findings abort at once (UBSan does not recover; -fno-sanitize-recover), and
# leaks count; libFuzzer's own flags below bound each input's time and memory.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# Runs one target for `seconds` and prints its JSON line; returns 1 on a finding.
run_target() {
  local target="$1" program="build-fuzz/fuzz/fuzz_$1"
  local corpus="$scratch/$target" findings="build-fuzz/findings/$target"
  mkdir -p "$corpus" "$findings"
  cp -R "fuzz/corpus/$target/." "$corpus/"
  local dict=()
  if [[ -f "fuzz/dict/$target.dict" ]]; then dict=(-dict="fuzz/dict/$target.dict"); fi
  local log="$findings/last-run.log" rc=0
  "$program" "$corpus" "${dict[@]}" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$findings/" >"$log" 2>&1 || rc=$?
  local executions crashes=0 inputs
  executions="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  if [[ $rc -ne 0 ]]; then
    crashes=1
    echo "fuzz.sh: $target found a problem (exit $rc); input and log in $findings/:" >&2
    ls "$findings" | grep -v '^last-run.log$' >&2 || true
    tail -n 40 "$log" >&2
  fi
  inputs="$(find "$corpus" -type f | wc -l)"
  printf '{"target": "%s", "seconds": %s, "executions": %s, "crashes": %s, "corpus": %s}\n' \
    "$target" "$seconds" "${executions:-0}" "$crashes" "$inputs"
  return "$crashes"
}

for target in "${targets[@]}"; do
  if [[ ! -x "build-fuzz/fuzz/fuzz_$target" ]]; then
    echo "fuzz.sh: no fuzz target '$target'; targets: ${all_targets[*]}" >&2
    exit 2
  fi
done

# One target per core at a time (each libFuzzer process runs one thread), so
# every target gets its `seconds` of a core and the run takes about
# seconds × targets / cores. Each target's JSON line goes out when it ends.
cores="$(nproc 2>/dev/null || echo 1)"
status=0
running=0
for target in "${targets[@]}"; do
  if (( running >= cores )); then
    wait -n || status=1
    running=$((running - 1))
  fi
  run_target "$target" &
  running=$((running + 1))
done
while (( running > 0 )); do
  wait -n || status=1
  running=$((running - 1))
done
exit "$status"
