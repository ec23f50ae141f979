#!/usr/bin/env python3
"""Prints the tables of perf/memplan_table.sh from its JSON lines.

Per configuration (model, mode, batch, hidden): copy against pqtree, each the
median over its runs: copy calls, bytes copied (all, and those the layout
decides: gathers, their gradients, Concat copies), kernels, latency per step
and the planner's time per batch; the ratios copy/pqtree; which planner
VJIT_MEMPLAN=auto kept and its time. Then the planner's time against the batch
size.
"""
import json
import statistics
import sys
from collections import defaultdict


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def median(rows, key):
    return statistics.median(r[key] for r in rows)


def total_ms(rows):
    return statistics.median(r["time_s"]["total"] for r in rows) * 1e3


def plan_ms(rows):
    return statistics.median(r["time_s"]["plan"] for r in rows) * 1e3


def auto_kept(rows):
    """VJIT_MEMPLAN=auto: the planner it kept after its trials, and its step time."""
    if not rows:
        return "-"
    kept = sorted({r.get("memory_planner", "?") for r in rows})
    return f"{'/'.join(kept)} ({total_ms(rows):.2f})"


def layout_table(rows):
    groups = defaultdict(lambda: defaultdict(list))
    for r in rows:
        groups[(r["model"], r["mode"], r["batch"], r["hidden"])][r["memplan"]].append(r)
    print("| model | mode | batch | hidden | copy calls copy/pq | layout KB copy/pq (ratio) | all KB copy/pq "
          "| kernels copy/pq | views pq | aligned pq | ms copy/pq (speedup) | planner ms pq (% of step) "
          "| auto keeps (ms) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(groups, key=lambda k: (k[0], k[1] != "train", k[2], k[3])):
        c, p = groups[key]["copy"], groups[key]["pqtree"]
        if not c or not p:
            continue
        lc, lp = median(c, "layout_copy_bytes") / 1e3, median(p, "layout_copy_bytes") / 1e3
        tc, tp = total_ms(c), total_ms(p)
        ratio = f"{lc / lp:.1f}x" if lp > 0 else "all"
        aligned = f"{median(p, 'aligned_satisfied'):.0f}/{median(p, 'aligned_batches'):.0f}"
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} "
              f"| {median(c, 'copy_calls'):.0f} / {median(p, 'copy_calls'):.0f} "
              f"| {lc:.0f} / {lp:.0f} ({ratio}) "
              f"| {median(c, 'copy_bytes') / 1e3:.0f} / {median(p, 'copy_bytes') / 1e3:.0f} "
              f"| {median(c, 'kernels'):.0f} / {median(p, 'kernels'):.0f} "
              f"| {median(p, 'gather_views'):.0f} | {aligned} "
              f"| {tc:.2f} / {tp:.2f} ({tc / tp:.2f}x) "
              f"| {plan_ms(p):.3f} ({100 * plan_ms(p) / tp:.1f}%) | {auto_kept(groups[key]['auto'])} |")


def scaling_table(rows):
    by_batch = defaultdict(dict)
    for r in rows:
        by_batch[r["batch"]][r["memplan"]] = r
    print("\n| batch | vertices/step | planner ms copy | planner ms pqtree | pqtree µs per vertex "
          "| pqtree planner % of step | step ms copy / pqtree |")
    print("|---|---|---|---|---|---|---|")
    for batch in sorted(by_batch):
        c, p = by_batch[batch].get("copy"), by_batch[batch].get("pqtree")
        if not c or not p:
            continue
        vertices = p.get("vertices", 0)
        per_vertex = p["time_s"]["plan"] * 1e6 / vertices if vertices else float("nan")
        print(f"| {batch} | {vertices:.0f} | {c['time_s']['plan'] * 1e3:.3f} | {p['time_s']['plan'] * 1e3:.3f} "
              f"| {per_vertex:.3f} | {100 * p['time_s']['plan'] / p['time_s']['total']:.2f}% "
              f"| {c['time_s']['total'] * 1e3:.1f} / {p['time_s']['total'] * 1e3:.1f} |")


def main():
    layout_table(load(sys.argv[1]))
    if len(sys.argv) > 2:
        scaling_table(load(sys.argv[2]))


if __name__ == "__main__":
    main()
