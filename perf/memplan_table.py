#!/usr/bin/env python3
"""Prints the tables of perf/memplan_table.sh from its JSON lines.

Per configuration (model, mode, batch, hidden): the copy baseline (every
child row read and every stacked weight is copied: VJIT_MEMPLAN=copy with
VJIT_ROW_PLACEMENT=slices and VJIT_PARAM_LAYOUT off), copy and pqtree (the defaults otherwise), each the
median over its runs: copy calls, bytes copied (all, and those the layout
decides: gathers, their gradients, Concat copies), the weights matmul
merging copies into one block per pass where the Model does not hold them so,
kernels, latency per step and the planner's time per batch; the ratios to the baseline; which planner
VJIT_MEMPLAN=auto kept and its time. Then the planner's time against the batch
size. With --speed, the table of perf/memplan_speed.sh instead: per
configuration, the three layouts' median step times over rounds that took
turns, and the per-round speedups (median, min–max).
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


def layout_of(r):
    """baseline, copy, pqtree or auto: the baseline is copy with the rows read where they lie off
    (row_placement=slices; in lines recorded before the row placement, gather_pointers=off)."""
    options = r.get("options", "")
    if r["memplan"] == "copy" and ("row_placement=slices" in options or "gather_pointers=off" in options):
        return "baseline"
    return r["memplan"]


def drop(base, other):
    return f"{base / other:.1f}x" if other > 0 else ("all" if base > 0 else "-")


def layout_table(rows):
    groups = defaultdict(lambda: defaultdict(list))
    for r in rows:
        groups[(r["model"], r["mode"], r["batch"], r["hidden"])][layout_of(r)].append(r)
    print("| model | mode | batch | hidden | copy calls base/copy/pq | layout KB base/copy/pq (drop copy, pq) "
          "| all KB base/copy/pq | stacked weights KB base/copy/pq | kernels base/copy/pq | views pq | aligned pq "
          "| ms base/copy/pq (speedup copy, pq) | planner ms pq (% of step) | auto keeps (ms) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(groups, key=lambda k: (k[0], k[1] != "train", k[2], k[3])):
        b, c, p = groups[key]["baseline"], groups[key]["copy"], groups[key]["pqtree"]
        if not b or not c or not p:
            continue
        lb, lc, lp = (median(x, "layout_copy_bytes") / 1e3 for x in (b, c, p))
        tb, tc, tp = total_ms(b), total_ms(c), total_ms(p)
        aligned = f"{median(p, 'aligned_satisfied'):.0f}/{median(p, 'aligned_batches'):.0f}"

        def three(field, scale=1.0):
            return " / ".join(f"{median(x, field) / scale:.0f}" for x in (b, c, p))

        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} "
              f"| {three('copy_calls')} "
              f"| {lb:.0f} / {lc:.0f} / {lp:.0f} ({drop(lb, lc)}, {drop(lb, lp)}) "
              f"| {three('copy_bytes', 1e3)} "
              f"| {three('stacked_weight_bytes', 1e3)} "
              f"| {three('kernels')} "
              f"| {median(p, 'gather_views'):.0f} | {aligned} "
              f"| {tb:.2f} / {tc:.2f} / {tp:.2f} ({tb / tc:.2f}x, {tb / tp:.2f}x) "
              f"| {plan_ms(p):.3f} ({100 * plan_ms(p) / tp:.1f}%) | {auto_kept(groups[key]['auto'])} |")


def scaling_table(rows):
    by_batch = defaultdict(dict)
    for r in rows:
        by_batch[(r["model"], r["batch"])][r["memplan"]] = r
    print("\n| model | batch | vertices/step | planner ms copy | planner ms pqtree | pqtree µs per vertex "
          "| pqtree planner % of step | step ms copy / pqtree |")
    print("|---|---|---|---|---|---|---|---|")
    for model, batch in sorted(by_batch):
        c, p = by_batch[(model, batch)].get("copy"), by_batch[(model, batch)].get("pqtree")
        if not c or not p:
            continue
        vertices = p.get("vertices", 0)
        per_vertex = p["time_s"]["plan"] * 1e6 / vertices if vertices else float("nan")
        print(f"| {model} | {batch} | {vertices:.0f} | {c['time_s']['plan'] * 1e3:.3f} "
              f"| {p['time_s']['plan'] * 1e3:.3f} "
              f"| {per_vertex:.3f} | {100 * p['time_s']['plan'] / p['time_s']['total']:.2f}% "
              f"| {c['time_s']['total'] * 1e3:.1f} / {p['time_s']['total'] * 1e3:.1f} |")


def speed_table(rows):
    by_config = defaultdict(dict)
    for r in rows:
        by_config[(r["model"], r["mode"], r["batch"], r["hidden"])][r["config"]] = r

    def ratio(s):
        return f"{s['median']:.2f} ({s['min']:.2f}–{s['max']:.2f})"

    print("| model | mode | batch | hidden | rounds | ms base / copy / pq (medians) "
          "| copy vs base | pq vs base | pq vs copy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key in sorted(by_config, key=lambda k: (k[0], k[1] != "train", k[2], k[3])):
        b, c, p = (by_config[key].get(name) for name in ("baseline", "copy", "pqtree"))
        if not b or not c or not p:
            continue
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {p['rounds']} "
              f"| {b['ms_per_step']:.2f} / {c['ms_per_step']:.2f} / {p['ms_per_step']:.2f} "
              f"| {ratio(c['speedup_vs_baseline'])} | {ratio(p['speedup_vs_baseline'])} "
              f"| {ratio(p['speedup_vs_copy'])} |")


def main():
    if sys.argv[1] == "--speed":
        speed_table(load(sys.argv[2]))
        return
    layout_table(load(sys.argv[1]))
    if len(sys.argv) > 2:
        scaling_table(load(sys.argv[2]))


if __name__ == "__main__":
    main()
