#!/usr/bin/env python3
"""Prints the benchmark tables of docs/benchmarks.md from perf/results/*.jsonl (run perf/run_benchmarks.sh first)."""
import json
import pathlib
import statistics

results = pathlib.Path(__file__).parent / "results"


def lines(name):
    path = results / name
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []


def ms(d, key):
    return f"{d['time_s'][key] * 1e3:.1f}"


def pct(x, d):
    """x GFLOP/s as a percentage of the GEMM peak measured in the same process as line d."""
    return f"{100 * x / d['peak_gflops_per_s']:.0f}%"


every = [d for name in ("models.jsonl", "tree_lstm_sst.jsonl", "roofline.jsonl", "levers.jsonl") for d in lines(name)]
cpus = sorted({d["cpu"] for d in every if "cpu" in d})
if cpus:
    print("Machine: " + "; ".join(cpus) + f", {every[0]['threads']} threads.")
    print()

roofline = lines("roofline.jsonl")
if roofline:
    targets = {("tree_lstm", 256, "train"): 0.70, ("tree_lstm", 256, "infer"): 0.70, ("tree_lstm", 512, "train"): 0.80,
               ("tree_lstm", 512, "infer"): 0.80, ("var_lstm", 256, "train"): 0.65, ("tree_gru", 256, "train"): 0.65,
               ("lattice_lstm", 256, "train"): 0.55, ("mv_rnn", 64, "train"): 0.45}
    # One row per configuration: the medians of its rounds (run_benchmarks.sh
    # ROOFLINE_ROUNDS), and the lowest and highest ratio when there are several.
    configs = {}
    for d in roofline:
        data = "built-in" if d["data"] == "built-in" else pathlib.Path(d["data"]).parent.name
        configs.setdefault((d["model"], data, d["mode"], d["hidden"], d["batch"]), []).append(d)
    print("| model | data | mode | hidden | batch | runs | samples/s | useful GFLOP/s | GEMM peak GFLOP/s (same process) | "
          "roofline ratio (median; lowest–highest) | target |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (model, data, mode, hidden, batch), runs in configs.items():
        def median(key):
            return statistics.median(r[key] for r in runs)
        ratios = [r["roofline_ratio"] for r in runs]
        spread = f"; {min(ratios):.3f}–{max(ratios):.3f}" if len(runs) > 1 else ""
        target = targets.get((model, hidden, mode))
        verdict = "-" if target is None else f"{target:.2f} ({'met' if median('roofline_ratio') >= target else 'not met'})"
        print(f"| {model} | {data} | {mode} | {hidden} | {batch} | {len(runs)} | {median('samples_per_s'):.0f} | "
              f"{median('useful_gflops_per_s'):.1f} | {median('peak_gflops_per_s'):.0f} | "
              f"{median('roofline_ratio'):.3f}{spread} | {verdict} |")
    print()

levers = lines("levers.jsonl")
if levers:
    print("| mode | configuration | samples/s (median of rounds) | roofline ratio (median; against the GEMM peak the process measured with the first configuration, fp32) | lever speedup (all on / this; this / all on for a lever turned on) |")
    print("|---|---|---|---|---|")
    for d in levers:
        if "skipped" in d:
            print(f"| {d['mode']} | {d['config']} | skipped: {d['skipped']} | - | - |")
            continue
        print(f"| {d['mode']} | {d['config']} | {d['samples_per_s']:.0f} | {d['roofline_ratio']:.3f} | {d['lever_speedup']:.3f} |")
    print()

throughput = lines("models.jsonl") + lines("tree_lstm_sst.jsonl")
if throughput:
    peaks = [d["peak_gflops_per_s"] for d in throughput]
    one = [d["peak_gflops_per_s_one_thread"] for d in throughput]
    print(f"GEMM peak measured in each process ({throughput[0]['peak_gemm']['backend']}, "
          f"{throughput[0]['peak_gemm']['size']}³): {min(peaks):.0f}–{max(peaks):.0f} GFLOP/s on "
          f"{throughput[0]['peak_gemm']['threads']} threads, {min(one):.0f}–{max(one):.0f} on one.")
    print()
print("| model | data | mode | hidden | samples/s | per-sample samples/s | batching speedup | tasks | lower bound | GEMM GFLOP/s (% of peak) | useful GFLOP/s | roofline ratio | ms per step: total / GEMM / elementwise / copy / optimizer / schedule |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for d in throughput:
    data = "built-in" if d["data"] == "built-in" else pathlib.Path(d["data"]).parent.name
    speed = f"{d['batching_speedup']:.1f}x" if "batching_speedup" in d else "-"
    unbatched = f"{d['unbatched_samples_per_s']:.0f}" if "unbatched_samples_per_s" in d else "-"
    print(f"| {d['model']} | {data} | {d['mode']} | {d['hidden']} | {d['samples_per_s']:.0f} | {unbatched} | {speed} | "
          f"{d['tasks']:.1f} | {d['lower_bound']:.1f} | {d['gemm_gflops_per_s']:.1f} ({pct(d['gemm_gflops_per_s'], d)}) | "
          f"{d['useful_gflops_per_s']:.1f} | {100 * d['roofline_ratio']:.0f}% | "
          f"{ms(d, 'total')} / {ms(d, 'gemm')} / {ms(d, 'elementwise')} / {ms(d, 'copy')} / {ms(d, 'optimizer')} / {ms(d, 'schedule')} |")

print()
print("| model | hidden | config | samples/s | kernels/step | fused groups | weight-gradient GEMMs/step | ms per step: total / GEMM / elementwise |")
print("|---|---|---|---|---|---|---|---|")
for d in lines("ablation.jsonl"):
    print(f"| {d['model']} | {d['hidden']} | {d['config']} | {d['samples_per_s']:.0f} | {d['kernels']:.0f} | {d['fused_groups']} | "
          f"{d['param_grad_gemms']:.0f} | {ms(d, 'total')} / {ms(d, 'gemm')} / {ms(d, 'elementwise')} |")

print()
print("| model | hidden | merge_matmuls | runs | samples/s (median) | on/off (median of pairs) | GEMMs/step | weight-gradient GEMMs/step | ms per step (median): total / GEMM / elementwise |")
print("|---|---|---|---|---|---|---|---|---|")
runs = {}
for d in lines("merge_matmuls.jsonl"):
    merge = "on" if "merge_matmuls=on" in d["options"] else "off"
    runs.setdefault((d["model"], d["hidden"], merge), []).append(d)
for (model, hidden, merge), ds in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] == "off")):
    pairs = zip(runs.get((model, hidden, "on"), []), runs.get((model, hidden, "off"), []))
    ratio = statistics.median([a["samples_per_s"] / b["samples_per_s"] for a, b in pairs] or [float("nan")])
    med = lambda f: statistics.median(f(d) for d in ds)
    print(f"| {model} | {hidden} | {merge} | {len(ds)} | {med(lambda d: d['samples_per_s']):.0f} | "
          f"{ratio:.3f} | {ds[0]['gemm_calls']:.0f} | {ds[0]['param_grad_gemms']:.0f} | "
          f"{med(lambda d: d['time_s']['total']) * 1e3:.1f} / {med(lambda d: d['time_s']['gemm']) * 1e3:.1f} / "
          f"{med(lambda d: d['time_s']['elementwise']) * 1e3:.1f} |")

print()
for d in lines("lattice_fsm.jsonl"):
    data = "built-in" if d["data"] == "built-in" else pathlib.Path(d["data"]).parent.name
    print(f"lattice_lstm fsm vs agenda ({data}): "
          f"{d['samples_per_s']:.0f} vs {d['compare_samples_per_s']:.0f} samples/s = {d['speedup_vs_compare_policy']:.2f}x, "
          f"tasks {d['tasks']:.1f} vs {d['compare_tasks']:.1f}")
