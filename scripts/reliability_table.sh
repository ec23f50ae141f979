#!/usr/bin/env bash
# The reliability table of docs/development.md, produced by one command:
#   scripts/reliability_table.sh [--fuzz-seconds N] [--skip-fuzz] [--skip-sanitizers] [--out DIR]
# Builds what it needs with scripts/build.sh (Release test programs; with the
# sanitizers, build-asan/ and build-tsan/; with fuzzing, build-fuzz/), runs
#   - the bad-input and rejection tests (ctest regex below, Release),
#   - the checkpoint kill test (writers killed mid-save; it prints "[ kill-test ]"),
#   - the determinism tests (test_determinism: each model and GEMM back end
#     trained on every thread count it lists; each passing case prints
#     "[ determinism ]"), and the concurrency tests (test_concurrency),
#   - every fuzz target for N seconds (scripts/fuzz.sh N; default 60),
#   - the test suite under ASan + UBSan and the `threads`-labelled tests under
#     TSan, as scripts/test.sh runs them (the longest part: many minutes),
# and prints a Markdown table (what, figure, result), also written to
# DIR/reliability.md and DIR/reliability.json (default perf/results/). Logs go
# to build/reliability-logs/. Exits 1 when any row fails; a row left out by a
# flag says so and does not fail.
set -uo pipefail
cd "$(dirname "$0")/.."

fuzz_seconds=60
run_fuzz=1
run_sanitizers=1
out_dir=perf/results
flags=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --fuzz-seconds)
      fuzz_seconds="${2:-}"
      flags+=("$1" "$fuzz_seconds")
      shift 2
      ;;
    --skip-fuzz) run_fuzz=0; flags+=("$1"); shift ;;
    --skip-sanitizers) run_sanitizers=0; flags+=("$1"); shift ;;
    --out) out_dir="${2:-}"; shift 2 ;;
    *)
      echo "reliability_table.sh: unknown argument '$1'; usage: scripts/reliability_table.sh" \
        "[--fuzz-seconds N] [--skip-fuzz] [--skip-sanitizers] [--out DIR]" >&2
      exit 2
      ;;
  esac
done
if ! [[ "$fuzz_seconds" =~ ^[1-9][0-9]*$ ]]; then
  echo "reliability_table.sh: --fuzz-seconds needs a positive integer, got '$fuzz_seconds'" >&2
  exit 2
fi

# The tests that feed vjit bad input and check the UserError (and that the
# engine, model or file is left as it was): the suites made for it, and any
# test whose name says it rejects, refuses or damages something. GPU-only
# tests (label gpu) are left out: they skip on a machine without one.
bad_input_regex='^(BadInput|GraphErrors|BuilderErrors|EngineErrors|Rejections|NonFiniteInputs)[.]|Reject|Refuse|Malformed|Corrupt|Truncat|Damaged|[.]Bad'
tsan_options="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp"

logs=build/reliability-logs
mkdir -p "$logs" "$out_dir"
stage() { echo "=== reliability_table.sh: $* ($(date +%T))" >&2; }

rows_what=()
rows_figure=()
rows_result=()
add_row() { rows_what+=("$1"); rows_figure+=("$2"); rows_result+=("$3"); }
pass_or_fail() { if [[ "$1" == 1 ]]; then echo pass; else echo fail; fi; }

# Runs ctest in build dir $1 with the remaining arguments, its output in $logs/$name.log
# ($name: the first argument after the dir); sets ct_total, ct_failed, ct_skipped, ct_log.
run_ctest() {
  local dir="$1" name="$2"
  shift 2
  ct_log="$logs/$name.log"
  ctest --test-dir "$dir" "$@" >"$ct_log" 2>&1
  ct_total="$(sed -n 's/.* tests\{0,1\} failed out of \([0-9][0-9]*\).*/\1/p' "$ct_log" | tail -n 1)"
  ct_failed="$(sed -n 's/.*, \([0-9][0-9]*\) tests\{0,1\} failed out of.*/\1/p' "$ct_log" | tail -n 1)"
  ct_skipped="$(grep -c '(Skipped)$' "$ct_log")"
  ct_total="${ct_total:-0}"
  ct_failed="${ct_failed:-0}"
  # A test that passes but skips counts as not run; ctest lists it as Skipped.
  ct_passed=$((ct_total - ct_failed - ct_skipped))
}
ctest_ok() { [[ "$ct_total" -gt 0 && "$ct_failed" -eq 0 ]]; }

stage "Release test programs"
if ! scripts/build.sh Release all_tests >"$logs/build-release.log" 2>&1; then
  tail -n 30 "$logs/build-release.log" >&2
  echo "reliability_table.sh: the Release build failed (log: $logs/build-release.log)" >&2
  exit 1
fi

stage "bad-input and rejection tests"
run_ctest build bad-input -j2 -LE gpu -R "$bad_input_regex"
suites="$(sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([A-Za-z0-9_/]*\)[.].*/\1/p' "$ct_log" | sed 's,^[A-Za-z]*/,,' | sort -u | wc -l)"
ok=0; ctest_ok && ok=1
add_row "Bad input rejected with a UserError naming it, state left unchanged (ctest -R, regex below)" \
  "$ct_total tests in $suites suites, $ct_passed passed, $ct_failed failed, $ct_skipped skipped" "$(pass_or_fail $ok)"

stage "checkpoint kill test"
run_ctest build kill-test -V -R '^Checkpoint[.]KilledWritersLeaveAWholeCheckpoint$'
kill_line="$(grep -o '\[ kill-test \] .*' "$ct_log" | tail -n 1)"
ok=0; ctest_ok && [[ -n "$kill_line" ]] && ok=1
add_row "Writers SIGKILLed at random points mid-save; the checkpoint then loads whole (Checkpoint.KilledWritersLeaveAWholeCheckpoint)" \
  "${kill_line#\[ kill-test \] }" "$(pass_or_fail $ok)"

stage "determinism across thread counts"
run_ctest build determinism -V -j2 -R '^(Models/Determinism|DeterminismStreaming|DeterminismOff)[.]'
equal_cases="$(grep -c '\[ determinism \]' "$ct_log")"
thread_counts="$(grep -o '\[ determinism \] .*: threads [0-9,]*' "$ct_log" | sed 's/.*threads //' | sort -u | paste -sd' ')"
ok=0; ctest_ok && [[ "$equal_cases" -gt 0 ]] && ok=1
add_row "Bitwise-identical parameters, losses and inference after 6 Adam steps on every thread count (test_determinism, default options)" \
  "threads ${thread_counts:-none}: $equal_cases model × GEMM back-end cases equal ($ct_skipped skipped: back end unavailable on this CPU or build); streaming and off-mode tests included; $ct_passed of $ct_total tests passed" \
  "$(pass_or_fail $ok)"

stage "concurrent inference"
run_ctest build concurrency -V -R '^Concurrency[.]'
concurrency_line="$(grep -o '\[ concurrency \] .*' "$ct_log" | tail -n 1)"
ok=0; ctest_ok && [[ -n "$concurrency_line" ]] && ok=1
add_row "Concurrent inference (test_concurrency: one Engine from many threads, two Engines of one Program, train and infer serialised, a thread that cannot start)" \
  "${concurrency_line#\[ concurrency \] }; $ct_passed of $ct_total tests passed" "$(pass_or_fail $ok)"

if [[ $run_fuzz == 1 ]]; then
  stage "fuzzing, $fuzz_seconds s per target"
  scripts/fuzz.sh "$fuzz_seconds" >"$logs/fuzz.jsonl" 2>"$logs/fuzz.log"
  fuzz_rc=$?
  json_field() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^\",}]*\).*/\1/p" <<<"$2"; }
  targets=0
  while IFS= read -r line; do
    [[ "$line" == \{* ]] || continue
    targets=$((targets + 1))
    target="$(json_field target "$line")"
    executions="$(json_field executions "$line")"
    crashes="$(json_field crashes "$line")"
    ok=0; [[ "$crashes" == 0 && "${executions:-0}" -gt 0 ]] && ok=1
    add_row "Fuzz target $target (scripts/fuzz.sh $fuzz_seconds $target)" \
      "$executions executions in $fuzz_seconds s, $crashes crashes" "$(pass_or_fail $ok)"
  done <"$logs/fuzz.jsonl"
  if [[ $targets == 0 ]]; then
    tail -n 30 "$logs/fuzz.log" >&2
    add_row "Fuzz targets (scripts/fuzz.sh $fuzz_seconds)" "none ran (exit $fuzz_rc; log: $logs/fuzz.log)" fail
  fi
else
  add_row "Fuzz targets (scripts/fuzz.sh)" "not run (--skip-fuzz)" skipped
fi

if [[ $run_sanitizers == 1 ]]; then
  stage "ASan + UBSan: build and every test but the layering probes"
  if scripts/build.sh Sanitize all_tests >"$logs/build-asan.log" 2>&1; then
    run_ctest build-asan asan -j2 -E '^layering[.]'
    ok=0; ctest_ok && ok=1
    add_row "Test suite under ASan + UBSan (build-asan, ctest -E '^layering[.]')" \
      "$ct_total tests run, $ct_passed passed, $ct_failed failed, $ct_skipped skipped" "$(pass_or_fail $ok)"
  else
    add_row "Test suite under ASan + UBSan" "build failed (log: $logs/build-asan.log)" fail
  fi
  stage "TSan: build and the tests labelled threads"
  if scripts/build.sh Thread threaded_tests >"$logs/build-tsan.log" 2>&1; then
    TSAN_OPTIONS="$tsan_options" run_ctest build-tsan tsan -j2 -L threads
    ok=0; ctest_ok && ok=1
    add_row "Threaded tests under TSan (build-tsan, ctest -L threads)" \
      "$ct_total tests run, $ct_passed passed, $ct_failed failed, $ct_skipped skipped" "$(pass_or_fail $ok)"
  else
    add_row "Threaded tests under TSan" "build failed (log: $logs/build-tsan.log)" fail
  fi
else
  add_row "Test suite under ASan + UBSan" "not run (--skip-sanitizers)" skipped
  add_row "Threaded tests under TSan" "not run (--skip-sanitizers)" skipped
fi

# The table, its provenance, and the same as JSON.
cpu="$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n 1)"
command_line="scripts/reliability_table.sh${flags[*]:+ ${flags[*]}}"
when="$(date +%F)"
status=0
md_cell() { printf '%s' "${1//|/\\|}"; }  # a | would end the table cell
{
  echo "Produced by \`$command_line\` on $when; $cpu, $(nproc) cores."
  echo
  echo "| What | Figure | Result |"
  echo "|---|---|---|"
  for i in "${!rows_what[@]}"; do
    echo "| $(md_cell "${rows_what[$i]}") | $(md_cell "${rows_figure[$i]}") | ${rows_result[$i]} |"
  done
  echo
  echo "Bad-input tests: \`ctest -LE gpu -R '$(md_cell "$bad_input_regex")'\` (Release)."
} >"$out_dir/reliability.md"
json_string() {
  local s="${1//\\/\\\\}"
  s="${s//\"/\\\"}"
  printf '"%s"' "$s"
}
{
  printf '{"command": %s, "date": %s, "cpu": %s, "cores": %s, "rows": [' \
    "$(json_string "$command_line")" "$(json_string "$when")" "$(json_string "$cpu")" "$(nproc)"
  for i in "${!rows_what[@]}"; do
    [[ $i -gt 0 ]] && printf ', '
    printf '{"what": %s, "figure": %s, "result": %s}' "$(json_string "${rows_what[$i]}")" \
      "$(json_string "${rows_figure[$i]}")" "$(json_string "${rows_result[$i]}")"
    [[ "${rows_result[$i]}" == fail ]] && status=1
  done
  printf '], "pass": %s}\n' "$([[ $status == 0 ]] && echo true || echo false)"
} >"$out_dir/reliability.json"
cat "$out_dir/reliability.md"
echo "(also in $out_dir/reliability.json; logs in $logs/)" >&2
exit "$status"
