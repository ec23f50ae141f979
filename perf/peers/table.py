#!/usr/bin/env python3
"""The peers table: vjit's speedup over each PyTorch style, from the JSON lines
of perf/peers/run_peers.sh (vjit-bench lines have no "peer" field).

    table.py perf/results/peers.jsonl [--json]

Repeated rounds (run_peers.sh --rounds) are reduced to the median samples/s
of each of vjit and the two styles. Prints a Markdown table (or, with --json,
one JSON line per model and mode with the speedups)."""
import json
import pathlib
import statistics
import sys


def rows(path):
    lines = [json.loads(l) for l in pathlib.Path(path).read_text().splitlines() if l.strip().startswith("{")]
    runs = {}
    for d in lines:
        key = (d["model"], d["data"], d["mode"], d["hidden"], d["batch"])
        runs.setdefault(key, {}).setdefault("vjit" if "peer" not in d else d["style"], []).append(d)
    for (model, data, mode, hidden, batch), by_who in runs.items():
        if not {"vjit", "eager", "level"} <= by_who.keys():
            continue
        g = {who: dict(r[0], samples_per_s=statistics.median(x["samples_per_s"] for x in r), rounds=len(r))
             for who, r in by_who.items()}
        vjit = g["vjit"]["samples_per_s"]
        yield {"model": model, "data": "built-in" if data == "built-in" else pathlib.Path(data).parent.name,
               "mode": mode, "hidden": hidden, "batch": batch, "threads": g["vjit"]["threads"],
               "cpu": g["vjit"].get("cpu", "?"), "torch": g["eager"]["torch"], "rounds": g["vjit"]["rounds"],
               "vjit_samples_per_s": vjit, "eager_samples_per_s": g["eager"]["samples_per_s"],
               "level_samples_per_s": g["level"]["samples_per_s"],
               "speedup_vs_eager": vjit / g["eager"]["samples_per_s"],
               "speedup_vs_level": vjit / g["level"]["samples_per_s"],
               "vjit_first_loss": g["eager"]["vjit_first_loss"], "eager_first_loss": g["eager"]["first_loss"],
               "level_first_loss": g["level"]["first_loss"]}


def main():
    table = list(rows(sys.argv[1]))
    if "--json" in sys.argv:
        for r in table:
            print(json.dumps(r))
        return
    if table:
        print(f"CPU: {table[0]['cpu']}, {table[0]['threads']} threads (vjit and torch.set_num_threads); "
              f"PyTorch {table[0]['torch']}; medians of {table[0]['rounds']} rounds.")
        print()
    print("| model | data | mode | hidden | batch | vjit samples/s | PyTorch per-sample samples/s | "
          "PyTorch level-batched samples/s | vjit / per-sample | vjit / level-batched | first-step loss (vjit = both peers) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in table:
        print(f"| {r['model']} | {r['data']} | {r['mode']} | {r['hidden']} | {r['batch']} | "
              f"{r['vjit_samples_per_s']:.0f} | {r['eager_samples_per_s']:.1f} | {r['level_samples_per_s']:.0f} | "
              f"{r['speedup_vs_eager']:.1f}x | {r['speedup_vs_level']:.1f}x | {r['vjit_first_loss']:.4f} |")


if __name__ == "__main__":
    main()
