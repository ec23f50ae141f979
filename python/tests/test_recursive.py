"""Models written as recursion over Python objects (vjit.Recursive, vjit/recursive.h)."""
import numpy as np
import pytest

import vjit

H, VOCAB = 8, 12


class Tree:
    def __init__(self, word=-1, label=-1, children=()):
        self.word, self.label, self.children = word, label, list(children)


def tree_rnn():
    model = vjit.Model(seed=5)
    E = model.add("E", (VOCAB, H), vjit.Init.Uniform, 0.1)
    W, out = model.add("W", (H, 2 * H)), model.add("out", (3, H))
    program = vjit.Program(model)
    rnn = vjit.Recursive(program, (H,), children=lambda t: t.children, branch=lambda t: 1 if t.children else 0,
                         token=lambda t: t.word, label=lambda t: t.label, describe=lambda t: f"word {t.word}")
    rnn.add_branch("leaf", vjit.Arity.exactly(0), lambda f, calls: f.tanh(f.pull_embedding(E)))

    def internal(f, calls):
        h = f.tanh(f.matmul(W, f.concat([calls.call(0), calls.call(1)])))
        f.add_loss(f.softmax_cross_entropy(f.matmul(out, h), f.label(3)))
        return h

    rnn.add_branch("internal", vjit.Arity.exactly(2), internal)
    return program, rnn


def test_recursion_over_python_objects_matches_the_reference():
    program, rnn = tree_rnn()
    shared = Tree(3)
    roots = [Tree(label=1, children=[Tree(1), Tree(label=2, children=[shared, shared])]),
             Tree(label=0, children=[Tree(4), Tree(5)])]
    batch = rnn.batch(roots)
    assert len(batch) == 2 and len(batch.sample(0)) == 4, "the node reached twice is one vertex"
    result = vjit.Engine(program).infer(batch)
    reference = vjit.reference_evaluate(program, batch, training=False, backward=False)
    assert result.objective == pytest.approx(reference.objective, rel=1e-5)
    assert rnn.num_branches == 2 and program.type_names == ["leaf", "internal"]


def test_bad_structures_are_named():
    program, rnn = tree_rnn()
    with pytest.raises(vjit.UserError, match=r"node root \[word -1\]: branch 'internal' takes 2 children"):
        rnn.batch([Tree(label=0, children=[Tree(7)])])  # one child where the branch takes two
    loop = Tree(label=0)
    loop.children = [loop, Tree(1)]
    with pytest.raises(vjit.UserError, match="cycle"):
        rnn.batch([loop])
    with pytest.raises(vjit.UserError, match="call"):
        rnn.add_branch("bad", vjit.Arity.exactly(1), lambda f, calls: calls.call(1))
