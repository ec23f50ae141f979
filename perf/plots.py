#!/usr/bin/env python3
"""CSV and PNG figures from perf/plots.sh's vjit-bench lines and the peers'.

    plots.py SWEEPS_JSONL PEERS_JSONL OUT_DIR

SWEEPS_JSONL: vjit-bench lines tagged with "sweep" (batch, hidden,
ablation:<config>); repeated points are reduced to their median samples/s
(and the per-phase times of the median run). PEERS_JSONL: the lines of
perf/peers/run_peers.sh (skipped, saying so, when missing)."""
import csv
import json
import pathlib
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PHASES = ["gemm", "elementwise", "copy", "optimizer", "schedule", "plan"]


def read_lines(path):
    path = pathlib.Path(path)
    if not path.exists():
        return []
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip().startswith("{")]


def median_runs(lines):
    """(sweep, mode, batch, hidden) -> the run with the median samples/s."""
    groups = {}
    for d in lines:
        groups.setdefault((d["sweep"], d["mode"], d["batch"], d["hidden"]), []).append(d)
    out = {}
    for key, runs in groups.items():
        runs.sort(key=lambda d: d["samples_per_s"])
        out[key] = dict(runs[len(runs) // 2], reps=len(runs),
                        samples_per_s=statistics.median(d["samples_per_s"] for d in runs))
    return out


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def sweep_figure(points, sweep, axis, out, title):
    rows = sorted(((k[1], k[2] if axis == "batch" else k[3], d["samples_per_s"], d["reps"])
                   for k, d in points.items() if k[0] == sweep))
    write_csv(out / f"{sweep}_sweep.csv", ["mode", axis, "samples_per_s", "reps"], rows)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for mode in ("train", "infer"):
        xs = [r[1] for r in rows if r[0] == mode]
        ax.plot(xs, [r[2] for r in rows if r[0] == mode], marker="o", label=mode)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r[1] for r in rows}), [str(x) for x in sorted({r[1] for r in rows})])
    ax.set_xlabel("batch size" if axis == "batch" else "hidden size")
    ax.set_ylabel("samples/s")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"{sweep}_sweep.png", dpi=110)
    plt.close(fig)


def phases_figure(points, out):
    runs = sorted((k[2], d) for k, d in points.items() if k[0] == "batch" and k[1] == "train")
    rows = []
    for batch, d in runs:
        t = d["time_s"]
        other = max(0.0, t["total"] - sum(t[p] for p in PHASES))
        rows.append([batch] + [1e3 * t[p] for p in PHASES] + [1e3 * other, 1e3 * t["total"]])
    write_csv(out / "phases.csv", ["batch"] + [f"{p}_ms" for p in PHASES] + ["other_ms", "total_ms"], rows)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    # Per sample, so that batch sizes compare: ms per step / batch.
    labels = [str(r[0]) for r in rows]
    bottom = [0.0] * len(rows)
    for i, name in enumerate(PHASES + ["other"]):
        values = [r[1 + i] / r[0] for r in rows]
        ax.bar(labels, values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xlabel("batch size")
    ax.set_ylabel("ms per sample (training step / batch)")
    ax.set_title("Tree-LSTM SST, hidden 256: where a training step goes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "phases.png", dpi=110)
    plt.close(fig)


def ablation_figure(points, out):
    order = ["baseline", "fusion", "lazy", "streaming", "all", "default"]
    got = {k[0].split(":", 1)[1]: d for k, d in points.items() if k[0].startswith("ablation:")}
    rows = [[c, got[c]["samples_per_s"], got[c]["samples_per_s"] / got["baseline"]["samples_per_s"], got[c]["reps"]]
            for c in order if c in got and "baseline" in got]
    write_csv(out / "ablation.csv", ["config", "samples_per_s", "speedup_over_baseline", "reps"], rows)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    bars = ax.bar([r[0] for r in rows], [r[1] for r in rows], color="tab:green")
    for bar, r in zip(bars, rows):
        ax.annotate(f"{r[2]:.2f}x", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                    fontsize=8)
    ax.set_ylabel("training samples/s")
    ax.set_title("Ablation (Cavs Fig. 10): Tree-LSTM SST, hidden 256, batch 64")
    fig.tight_layout()
    fig.savefig(out / "ablation.png", dpi=110)
    plt.close(fig)


def peers_figure(peers, out):
    runs = {}
    for d in peers:
        who = "vjit" if "peer" not in d else {"eager": "PyTorch per-sample", "level": "PyTorch level-batched"}[d["style"]]
        runs.setdefault((d["model"], d["mode"]), {}).setdefault(who, []).append(d["samples_per_s"])
    groups = {k: {who: statistics.median(v) for who, v in g.items()} for k, g in runs.items()}  # over rounds
    whos = ["vjit", "PyTorch level-batched", "PyTorch per-sample"]
    keys = [k for k in groups if all(w in groups[k] for w in whos)]
    write_csv(out / "peers.csv", ["model", "mode"] + [w.replace(" ", "_") + "_samples_per_s" for w in whos],
              [[k[0], k[1]] + [groups[k][w] for w in whos] for k in keys])
    fig, ax = plt.subplots(figsize=(7, 3.8))
    width = 0.27
    for i, w in enumerate(whos):
        xs = [j + (i - 1) * width for j in range(len(keys))]
        ax.bar(xs, [groups[k][w] for k in keys], width, label=w)
    ax.set_xticks(range(len(keys)), [f"{m}\n{mode}" for m, mode in keys], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("samples/s (log)")
    ax.set_title("vjit against PyTorch, same data, weights and threads")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "peers.png", dpi=110)
    plt.close(fig)


def main():
    sweeps, peers_path, out = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    points = median_runs(read_lines(sweeps))
    sweep_figure(points, "batch", "batch", out, "Tree-LSTM SST, hidden 256")
    sweep_figure(points, "hidden", "hidden", out, "Tree-LSTM SST, batch 64")
    phases_figure(points, out)
    ablation_figure(points, out)
    peers = read_lines(peers_path)
    if peers:
        peers_figure(peers, out)
    else:
        print(f"plots.py: {peers_path} missing: no peers figure (run perf/peers/run_peers.sh)", file=sys.stderr)
    print(f"plots.py: CSV and PNG files in {out}/", file=sys.stderr)


if __name__ == "__main__":
    main()
