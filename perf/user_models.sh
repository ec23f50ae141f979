#!/usr/bin/env bash
# Issue 14's figures, in one run: the models users write against the ones they
# extend, at the same size, the pairs taking turns --rounds times so that both
# see the same machine load; medians.
#   - child_sum_tree_lstm against tree_lstm (hidden 256, batch 64, train and infer;
#     target: at least 60% of the Tree-LSTM's samples/s);
#   - rntn against tree_rnn (hidden 25, the paper's size, and 64; train and
#     infer; target: at least 40% of the plain RNN's samples/s);
#   - seq2seq greedy decoding at batch 64 against batch 1 in the same process
#     (--compare-unbatched; hidden 64, 256 and 512; target: at least 5x), with
#     one engine (VJIT_INFER_SHARDS=1) and with the batch inferred in 2 groups
#     of samples at once (VJIT_INFER_SHARDS=2; batch 1 is one group either way).
# Writes perf/results/user_models.jsonl (one line per run, with "round") and
# prints a markdown table.
#   perf/user_models.sh [build-dir] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
out=perf/results/user_models.jsonl
bench="$build/perf/vjit-bench"
export VJIT_THREADS=${VJIT_THREADS:-2}
mkdir -p "$(dirname "$out")"
: > "$out"

run() {  # round, pair name, then vjit-bench's arguments
  local round=$1 pair=$2
  shift 2
  line=$("$bench" "$@" --peak-seconds 0.5)
  echo "{\"round\": $round, \"pair\": \"$pair\", \"run\": $line}" >> "$out"
}

for round in $(seq 1 "$rounds"); do
  for mode in train infer; do
    for model in tree_lstm child_sum_tree_lstm; do
      run "$round" "child_sum_$mode" --model "$model" --mode "$mode" --hidden 256 --batch 64
    done
    for hidden in 25 64; do
      for model in tree_rnn rntn; do
        run "$round" "rntn_${mode}_$hidden" --model "$model" --mode "$mode" --hidden "$hidden" --batch 64
      done
    done
  done
  for hidden in 64 256 512; do
    # Hidden 64 decodes a batch in about a millisecond: 32 of them, so that
    # one pause of the machine does not decide the ratio.
    steps=32
    [ "$hidden" -ge 256 ] && steps=8
    [ "$hidden" -ge 512 ] && steps=4
    for shards in 1 2; do
      VJIT_INFER_SHARDS=$shards run "$round" "decode_${hidden}_s$shards" --model seq2seq --mode decode \
        --hidden "$hidden" --batch 64 --steps "$steps" --pretrain-steps 100 --compare-unbatched
    done
  done
done

python3 - "$out" <<'EOF'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
def median(pair, model, key="samples_per_s"):
    values = [r["run"][key] for r in runs if r["pair"] == pair and r["run"]["model"] == model]
    return statistics.median(values) if values else float("nan")
print("| comparison | mode | hidden | baseline samples/s | model samples/s | ratio | target |")
print("|---|---|---|---|---|---|---|")
for mode in ("train", "infer"):
    base, new = median(f"child_sum_{mode}", "tree_lstm"), median(f"child_sum_{mode}", "child_sum_tree_lstm")
    print(f"| child_sum_tree_lstm / tree_lstm | {mode} | 256 | {base:.0f} | {new:.0f} | {new / base:.2f} | >= 0.60 |")
for mode in ("train", "infer"):
    for hidden in (25, 64):
        pair = f"rntn_{mode}_{hidden}"
        base, new = median(pair, "tree_rnn"), median(pair, "rntn")
        print(f"| rntn / tree_rnn | {mode} | {hidden} | {base:.0f} | {new:.0f} | {new / base:.3f} | >= 0.40 |")
for shards in (1, 2):
    for hidden in (64, 256, 512):
        pair = f"decode_{hidden}_s{shards}"
        one = median(pair, "seq2seq", "unbatched_samples_per_s")
        many = median(pair, "seq2seq")
        speedups = sorted(r["run"]["batching_speedup"] for r in runs if r["pair"] == pair)
        spread = ", ".join(f"{s:.1f}" for s in speedups)
        print(f"| seq2seq decode, batch 64 / batch 1, VJIT_INFER_SHARDS={shards} | decode | {hidden} | {one:.0f} | "
              f"{many:.0f} | {statistics.median(speedups):.2f} (runs: {spread}) | >= 5 |")
# How far decoding could go: batch 64's roofline ratio, and the speedup it
# would reach with its GEMMs at the peak and batch 1 as measured (speedup /
# ratio; batch 1's cost stays, so this bounds what batch 64 can gain).
print("\n| decode hidden | batch 64 roofline ratio (median) | speedup at the GEMM peak (median of speedup / ratio) |")
print("|---|---|---|")
for hidden in (64, 256, 512):
    decoded = [r["run"] for r in runs if r["pair"] == f"decode_{hidden}_s1"]
    if decoded:
        ratio = statistics.median(r["roofline_ratio"] for r in decoded)
        bound = statistics.median(r["batching_speedup"] / r["roofline_ratio"] for r in decoded)
        print(f"| {hidden} | {ratio:.3f} | {bound:.1f} |")
# How far the RNTN could go: its work beyond the plain RNN's (the tensor
# products, forward and backward) at the GEMM peak of the same run, on top of
# the plain RNN's measured step; ceiling = t_rnn / (t_rnn + extra / peak). The
# RNTN cannot reach a higher ratio without doing less arithmetic than it needs.
def step(run):  # seconds and useful GFLOP per step
    t = run["time_s"]["total"]
    return t, run["useful_gflops_per_s"] * t
print("\n| RNTN mode | hidden | plain RNN ms/step | RNTN extra GFLOP/step | extra at the peak, ms | "
      "ceiling ratio at the peak (median) | measured ratio (median) |")
print("|---|---|---|---|---|---|---|")
for mode in ("train", "infer"):
    for hidden in (25, 64):
        pair = f"rntn_{mode}_{hidden}"
        ceilings, measured, rnn_ms, extra_gflop, extra_ms = [], [], [], [], []
        for rnd in sorted({r["round"] for r in runs if r["pair"] == pair}):
            both = {r["run"]["model"]: r["run"] for r in runs if r["pair"] == pair and r["round"] == rnd}
            if "tree_rnn" not in both or "rntn" not in both:
                continue
            (t_rnn, f_rnn), (t_rntn, f_rntn) = step(both["tree_rnn"]), step(both["rntn"])
            at_peak = (f_rntn - f_rnn) / both["rntn"]["peak_gflops_per_s"]
            ceilings.append(t_rnn / (t_rnn + at_peak))
            measured.append(t_rnn / t_rntn)
            rnn_ms.append(t_rnn * 1e3)
            extra_gflop.append(f_rntn - f_rnn)
            extra_ms.append(at_peak * 1e3)
        if ceilings:
            med = statistics.median
            print(f"| {mode} | {hidden} | {med(rnn_ms):.3f} | {med(extra_gflop):.4f} | {med(extra_ms):.3f} | "
                  f"{med(ceilings):.3f} | {med(measured):.3f} |")
peaks = [r["run"]["peak_gflops_per_s"] for r in runs if "peak_gflops_per_s" in r["run"]]
if peaks:
    print(f"\nGEMM peak measured by the runs: {min(peaks):.0f} to {max(peaks):.0f} GFLOP/s (median {statistics.median(peaks):.0f}).")
EOF
