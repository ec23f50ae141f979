"""The Python front end builds the IR the C++ front end builds, for every model of the zoo
(examples/python/models.py against vjit/models.h), with the same parameters and values."""
import numpy as np
import pytest

import models
import vjit
from conftest import canonical_ir

HIDDEN, EMBED = 8, 6


def zoo_sizes(name, bundle):
    """What the zoo took from its data, as models.py's keyword arguments."""
    model = bundle.model
    if name == "child_sum_tree_lstm":
        most = 1
        for split in (bundle.train, bundle.test, bundle.dev):
            offsets = split.to_arrays()["child_offsets"]
            if len(offsets) > 1:
                most = max(most, int(np.max(np.diff(offsets))))
        return {"vocab": model.shape("embedding")[0], "max_children": most}
    if name == "lattice_lstm":
        return {"vocab": model.shape("char_embedding")[0], "num_tags": model.shape("W_out")[0]}
    if name == "seq2seq":
        return {"vocab": model.shape("source_embedding")[0]}
    if name == "mv_rnn":
        return {"vocab": model.shape("word_vectors")[0]}
    sizes = {"vocab": model.shape("embedding")[0]}
    if name == "tree_fc":
        sizes["classes"] = model.shape("W_out")[0]
    if name == "bilstm_tagger":
        sizes["num_tags"] = model.shape("W_out")[0]
    return sizes


@pytest.mark.parametrize("name", vjit.models.model_names())
def test_python_model_builds_the_zoo_ir(name):
    assert name in models.MODELS, f"examples/python/models.py lacks the zoo's {name}"
    bundle = vjit.models.make_model(name, hidden=HIDDEN, embed=EMBED, train_samples=12, test_samples=4, seed=3)
    model = vjit.Model(seed=3)
    program = vjit.Program(model)
    models.MODELS[name](program, hidden=HIDDEN, embed=EMBED, **zoo_sizes(name, bundle))

    assert model.names == bundle.model.names
    for p in model.names:
        assert model.shape(p) == bundle.model.shape(p), p
        assert np.array_equal(model[p], bundle.model[p]), f"{name}: initial values of {p} differ"
    assert program.type_names == bundle.program.type_names
    assert program.signature_string() == bundle.program.signature_string()
    for t in range(program.num_types):
        ours, theirs = program.forward_ir(t), bundle.program.forward_ir(t)
        assert canonical_ir(ours) == canonical_ir(theirs), f"{name}, type {program.type_name(t)}:\n{ours}\n{theirs}"


def test_canonical_ir_tells_functions_apart():
    """The comparison above can fail: a changed op or operand order changes the canonical form."""
    def build(swap):
        model = vjit.Model()
        W = model.add("W", (4, 4))
        program = vjit.Program(model)

        def body(f):
            a, b = f.gather(0, (4,)), f.gather(1, (4,))
            f.scatter(f.tanh(f.sub(f.matmul(W, b), a) if swap else f.sub(f.matmul(W, a), b)))
        program.add_type("t", body)
        return canonical_ir(program.forward_ir(0))

    assert build(False) != build(True)
    assert build(False) == build(False)
