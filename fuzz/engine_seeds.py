#!/usr/bin/env python3
"""Writes fuzz/corpus/engine/: graph batches encoded as fuzz_engine.cpp decodes
them (one configuration each, valid batches plus a few with a known error), so
the fuzzer starts from inputs that reach the engine's plans. Run from anywhere:
    python3 fuzz/engine_seeds.py
"""
import os

LEAF, FEATURE, BINARY, CHILD_SUM, GATHER_ALL = range(5)
NO_TOKEN = 8  # decodes to token -1


def vertex(kind, children=(), token=NO_TOKEN, label=-1, features=(1.0, -0.5, 2.0)):
    """The bytes of one vertex; children are earlier vertices."""
    out = [kind]
    if kind in (LEAF, FEATURE):
        out.append(1)  # no child
    elif kind in (CHILD_SUM, GATHER_ALL):
        out.append(len(children))
    out += [c * 8 for c in children]  # b % 8 != 7: the earlier vertex (b / 8) % i
    out += [token, label + 1]
    if kind == FEATURE:
        out.append(1)  # the full row
        out += [max(0, min(255, int(round(f * 32)) + 128)) for f in features]
    return out


def batch(config, mode, seed, samples):
    out = [config, mode, seed, len(samples) - 1]
    for sample in samples:
        out.append(len(sample) - 1)
        for v in sample:
            out += v
    return bytes(out)


def tree():
    return [
        vertex(LEAF, token=1, label=0),
        vertex(LEAF, token=4, label=2),
        vertex(BINARY, [0, 1], label=1),
        vertex(FEATURE),
        vertex(BINARY, [2, 3], label=2),
        vertex(CHILD_SUM, [0, 2, 4]),
        vertex(GATHER_ALL, [5, 1]),
    ]


def chain():
    return [vertex(LEAF, token=3, label=1)] + [vertex(CHILD_SUM, [i]) for i in range(5)]


def main():
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "engine")
    os.makedirs(folder, exist_ok=True)
    seeds = {f"config{c}-train.bin": batch(c, 0, 7, [tree(), chain()]) for c in range(6)}
    seeds["config0-infer.bin"] = batch(0, 2, 0, [tree()])
    seeds["config2-forward.bin"] = batch(2, 1, 3, [chain(), tree(), chain()])
    # Errors the engine must reject: a token past the table, a missing label.
    seeds["bad-token.bin"] = batch(0, 0, 1, [[vertex(LEAF, token=7, label=0)]])
    seeds["bad-label.bin"] = batch(1, 0, 1, [[vertex(LEAF, token=2, label=-1)]])
    for name, data in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
