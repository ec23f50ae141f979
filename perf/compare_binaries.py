#!/usr/bin/env python3
"""Runs vjit-bench of an older commit and of this checkout side by side.

    perf/compare_binaries.py OLD_REV [--rounds N] -- VJIT_BENCH_ARGS...

Builds OLD_REV (Release) in a git worktree under build-compare/ (once; reused
when it exists; build output goes to stderr), builds this checkout (scripts/build.sh Release), then runs the
old and the new vjit-bench alternately, N rounds each (default 3), so that both
see the same machine load. Prints every run as a JSON line with "binary": "old"
or "new", then one summary line: the median samples/s of each, their ratio,
and the median per-step time split of each.
"""
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_old(rev):
    sha = subprocess.check_output(["git", "rev-parse", "--short", rev], cwd=ROOT, text=True).strip()
    tree = os.path.join(ROOT, "build-compare", sha)
    if not os.path.isdir(tree):
        subprocess.check_call(["git", "worktree", "add", "--detach", tree, sha], cwd=ROOT, stdout=sys.stderr)
    subprocess.check_call(["scripts/build.sh", "Release", "vjit_bench"], cwd=tree, stdout=sys.stderr)
    return sha, os.path.join(tree, "build", "perf", "vjit-bench")


def main():
    argv = sys.argv[1:]
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    rev, rounds, bench_args = argv[0], 3, []
    rest = argv[1:]
    if "--" in rest:
        bench_args = rest[rest.index("--") + 1:]
        rest = rest[:rest.index("--")]
    if rest[:1] == ["--rounds"]:
        rounds = int(rest[1])
    sha, old = build_old(rev)
    subprocess.check_call(["scripts/build.sh", "Release", "vjit_bench"], cwd=ROOT, stdout=sys.stderr)
    new = os.path.join(ROOT, "build", "perf", "vjit-bench")
    runs = {"old": [], "new": []}
    for _ in range(rounds):
        for name, binary in (("old", old), ("new", new)):
            out = subprocess.check_output([binary] + bench_args, cwd=ROOT, text=True)
            line = json.loads(out.splitlines()[0])
            line["binary"] = name
            line["commit"] = sha if name == "old" else "HEAD"
            print(json.dumps(line), flush=True)
            runs[name].append(line)

    def median_split(lines):
        keys = lines[0]["time_s"].keys()
        return {k: statistics.median(l["time_s"][k] for l in lines) for k in keys}

    old_sps = statistics.median(l["samples_per_s"] for l in runs["old"])
    new_sps = statistics.median(l["samples_per_s"] for l in runs["new"])
    print(json.dumps({"summary": True, "old_commit": sha, "args": " ".join(bench_args),
                      "old_samples_per_s": old_sps, "new_samples_per_s": new_sps,
                      "speedup": new_sps / old_sps,
                      "old_time_s": median_split(runs["old"]), "new_time_s": median_split(runs["new"])}))


if __name__ == "__main__":
    main()
