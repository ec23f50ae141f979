"""Shared helpers of the Python module's tests (ctest python.pytest runs them with the
module built in <build>/python on PYTHONPATH)."""
import hashlib
import os
import re
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "examples", "python"))

_NODE = re.compile(r"^\s*(?:%(\d+) = )?(\w+)\(([^)]*)\)(.*)$")


def canonical_ir(text):
    """The vertex function printed by Program.forward_ir with each value named by what it
    computes (op, attributes, shape and, recursively, its operands) instead of its number:
    two functions with the same nodes in another topological order compare equal. Returns
    the sinks (scatter, push, loss) in order."""
    names, sinks = {}, []
    for line in text.splitlines()[1:-1]:
        match = _NODE.match(line)
        assert match, f"unparsed IR line: {line!r}"
        value, op, args, rest = match.groups()
        operands = [names[a.strip()[1:]] for a in args.split(",") if a.strip()]
        name = hashlib.sha1(f"{op}({','.join(operands)}){rest}".encode()).hexdigest()[:16]
        if value is None:
            sinks.append(f"{op}({','.join(operands)}){rest}")
        else:
            names[value] = name
    return sinks


@pytest.fixture
def tiny_tree_lstm():
    """A small Tree-LSTM written in Python on 24 synthetic trees: (model, program, batch)."""
    import models
    import vjit

    trees = vjit.make_synthetic_treebank(24, 5)
    vocab = vjit.Vocabulary.from_trees(trees)
    model = vjit.Model(seed=2)
    program = vjit.Program(model)
    leaf, internal = models.tree_lstm(program, len(vocab), 8, 6)
    return model, program, vjit.trees_to_batch(trees, vocab, leaf, internal)
