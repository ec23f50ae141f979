"""The engine driven from Python: against the reference interpreter, against the same
model built by the C++ zoo, and batches built from arrays, lists and samples."""
import numpy as np

import models
import vjit


def test_engine_matches_the_reference_interpreter(tiny_tree_lstm):
    model, program, batch = tiny_tree_lstm
    engine = vjit.Engine(program, threads=2)
    objective = engine.forward(batch, training=False, backward=True)
    engine.backward()
    reference = vjit.reference_evaluate(program, batch, training=False, backward=True)
    assert abs(objective - reference.objective) <= 1e-4 * abs(reference.objective)
    result = engine.last_result()
    assert np.allclose(result.values, reference.values, rtol=1e-4, atol=1e-5)
    for ours, theirs in zip(engine.gradients(), reference.param_grads):
        assert np.allclose(ours.ravel(), theirs, rtol=1e-3, atol=1e-5)
    inferred = engine.infer(batch)
    assert inferred.num_samples == len(batch)
    assert np.array_equal(inferred.push(0, 0), result.push(0, 0))


def test_python_model_trains_as_the_zoo_model():
    """Same IR, same initial values, same batches: the same losses, step by step."""
    bundle = vjit.models.make_model("tree_lstm", hidden=16, embed=12, dropout=0.3, train_samples=40, seed=4)
    model = vjit.Model(seed=4)
    program = vjit.Program(model)
    models.tree_lstm(program, bundle.model.shape("embedding")[0], 16, 12, 0.3)
    train = bundle.train
    losses = []
    for prog in (bundle.program, program):
        engine, adam = vjit.Engine(prog, threads=1), vjit.Adam(0.01, clip_norm=5.0)
        losses.append([engine.train_step(train.select(range(b, b + 10)), adam) for b in range(0, 40, 10)])
    assert losses[0] == losses[1]
    assert losses[0][-1] != losses[0][0]


def test_batches_from_arrays_lists_and_samples_agree(tiny_tree_lstm):
    _, program, batch = tiny_tree_lstm
    arrays = batch.to_arrays()
    from_arrays = vjit.GraphBatch.from_arrays(**arrays)
    assert {k: v.tolist() for k, v in from_arrays.to_arrays().items()} == {k: v.tolist() for k, v in arrays.items()}
    offsets, child_offsets = arrays["sample_offsets"], arrays["child_offsets"]
    nested = []
    for s in range(len(offsets) - 1):
        sample = []
        for v in range(offsets[s], offsets[s + 1]):
            children = arrays["children"][child_offsets[v]:child_offsets[v + 1]].tolist()
            sample.append({"type": int(arrays["types"][v]), "children": children, "token": int(arrays["tokens"][v]),
                           "label": int(arrays["labels"][v])})
        nested.append(sample)
    from_lists = vjit.GraphBatch.from_lists(nested)
    engine = vjit.Engine(program)
    objectives = {engine.infer(b).objective for b in (batch, from_arrays, from_lists)}
    assert len(objectives) == 1


def test_feature_rows_reach_pull():
    model = vjit.Model()
    W = model.add("W", (2, 3))
    program = vjit.Program(model)
    program.add_type("v", lambda f: f.push(f.matmul(W, f.pull(3))))
    features = np.arange(6, dtype=np.float32).reshape(2, 3)
    batch = vjit.GraphBatch.from_arrays([0, 2], [0, 0], [0, 0, 0], [], features=features)
    result = vjit.Engine(program).infer(batch)
    assert np.allclose(result.push(0, 1), model["W"] @ features[1], rtol=1e-5)


def test_options_as_keywords():
    model = vjit.Model()
    W = model.add("W", (4, 4))
    program = vjit.Program(model)
    program.add_type("t", lambda f: f.scatter(f.tanh(f.matmul(W, f.pull(4)))))
    engine = vjit.Engine(program, threads=1, fusion=False, policy="depth")
    assert engine.options.fusion is False and engine.options.policy == "depth"
    assert "fusion=off" in str(engine.options)
    assert "threads" in vjit.option_names()


def test_layer_norm_matches_numpy():
    model = vjit.Model()
    program = vjit.Program(model)
    program.add_type("v", lambda f: f.push(f.layer_norm(f.pull(4))))
    x = np.array([[1.0, 2.0, 4.0, 8.0]], dtype=np.float32)
    result = vjit.Engine(program).infer(vjit.GraphBatch.from_arrays([0, 1], [0], [0, 0], [], features=x))
    expected = (x[0] - x[0].mean()) / np.sqrt(x[0].var() + 1e-5)
    assert np.allclose(result.push(0, 0), expected, rtol=1e-5, atol=1e-6)
