#!/usr/bin/env python3
"""A new model defined in Python: the Child-Sum Tree-LSTM of Tai et al. 2015 (§3.1) over
trees of any fan-in, trained on random trees whose root label says whether most of their
words are in the upper half of the vocabulary. The internal cell reads the [K, 2H] block of
its children's [h; c] states with gather_all: one product gives every child's forget gate.

    python3 examples/python/child_sum_tree_lstm.py
"""
import random

import vjit

H, VOCAB, MAX_CHILDREN, CLASSES = 32, 50, 4, 2

model = vjit.Model(seed=3)
E = model.add("E", (VOCAB, H), vjit.Init.Uniform, 0.1)
W_iou, U_iou = model.add("W_iou", (3 * H, H)), model.add("U_iou", (3 * H, H))
U_f, b_f = model.add("U_f", (H, H)), model.add("b_f", (H,), vjit.Init.Ones)
b_iou, W_out = model.add("b_iou", (3 * H,), vjit.Init.Zeros), model.add("W_out", (CLASSES, H))


def cell(f, iou_product, forget=None):
    """c = σ(i) ⊙ tanh(u) [+ Σ_k f_k ⊙ c_k], h = σ(o) ⊙ tanh(c); scatters [h; c]."""
    i, o, u = f.split(f.add(iou_product, b_iou), 3)
    c = f.mul(f.sigmoid(i), f.tanh(u))
    c = f.add(c, forget) if forget is not None else c
    h = f.mul(f.sigmoid(o), f.tanh(c))
    logits = f.matmul(W_out, h)
    f.push(logits)
    f.add_loss(f.softmax_cross_entropy(logits, f.label(CLASSES)))  # only where a label is set
    f.scatter(f.concat([h, c]))


def internal(f):
    block = f.gather_all(MAX_CHILDREN, (2 * H,))  # [K, 2H], zero rows past the last child
    h, c = f.slice_cols(block, 0, H), f.slice_cols(block, H, H)
    forget_gates = f.sigmoid(f.add(f.matmul(h, U_f), b_f))  # row k: σ(h_kᵀ U_f + b_f)
    cell(f, f.matmul(U_iou, f.sum_rows(h)), f.sum_rows(f.mul(forget_gates, c)))


program = vjit.Program(model)
LEAF = program.add_type("leaf", lambda f: cell(f, f.matmul(W_iou, f.pull_embedding(E))))
INTERNAL = program.add_type("internal", internal)


def random_tree(rng):
    """One sample as a list of (type, children, token, label) tuples, children first."""
    words = [rng.randrange(VOCAB) for _ in range(rng.randint(3, 12))]
    vertices = [(LEAF, [], w, -1) for w in words]
    level = list(range(len(words)))
    while len(level) > 1:
        fan_in = min(len(level), rng.randint(2, MAX_CHILDREN))
        vertices.append((INTERNAL, level[:fan_in], -1, -1))
        level = level[fan_in:] + [len(vertices) - 1]
    root_type, children, token, _ = vertices[-1]
    vertices[-1] = (root_type, children, token, int(2 * sum(w >= VOCAB // 2 for w in words) > len(words)))
    return vertices


rng = random.Random(7)
batch = vjit.GraphBatch.from_lists([random_tree(rng) for _ in range(128)])
engine = vjit.Engine(program)
adam = vjit.Adam(0.01)
for step in range(31):
    loss = engine.train_step(batch, adam)
    if step % 10 == 0:
        print(f"step {step}: loss {loss / len(batch):.4f}")
result = engine.infer(batch)
reference = vjit.reference_evaluate(program, batch, training=False, backward=False)
print(f"objective: engine {result.objective:.6f}, reference {reference.objective:.6f}")
assert abs(result.objective - reference.objective) <= 1e-4 * abs(reference.objective)
