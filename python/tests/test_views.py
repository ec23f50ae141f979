"""Parameters are NumPy views of the model's memory: training shows through them, writes
reach the engine, and what would move the memory raises while a view is alive."""
import gc

import numpy as np
import pytest

import vjit


def test_views_share_the_model_memory_while_the_engine_lives(tiny_tree_lstm):
    model, program, batch = tiny_tree_lstm
    engine = vjit.Engine(program)
    W = model["W_iou"]
    assert W.shape == model.shape("W_iou") and W.dtype == np.float32
    before = W.copy()
    engine.train_step(batch, vjit.SGD(0.5))
    assert not np.array_equal(W, before), "the step's update shows through the view"
    assert np.array_equal(W, model["W_iou"])
    objective = engine.infer(batch).objective
    model["W_out"][:] = 0.0  # zero logits: every labelled vertex costs log 5
    labelled = int(np.count_nonzero(batch.to_arrays()["labels"] >= 0))
    assert engine.infer(batch).objective == pytest.approx(labelled * np.log(5.0), rel=1e-5)
    assert objective != pytest.approx(labelled * np.log(5.0), rel=1e-5)
    del engine
    gc.collect()
    W[0, 0] = 1.5  # the Model outlives the engine; the view keeps it alive
    assert model["W_iou"][0, 0] == 1.5


def test_moving_the_memory_raises_while_views_live(tiny_tree_lstm):
    model, program, _ = tiny_tree_lstm
    view = model["embedding"]
    assert model.live_views == 1
    with pytest.raises(vjit.UserError, match="NumPy view"):
        vjit.Engine(program)
    with pytest.raises(vjit.UserError, match="NumPy view"):
        model.add("extra", (3,))
    row = view[2]  # an array made from a view holds it
    del view
    assert model.live_views == 1
    del row
    assert model.live_views == 0
    vjit.Engine(program)  # nothing alive: it may move the block now
    model.add("extra", (3,))


def test_pushed_values_outlive_the_engine(tiny_tree_lstm):
    _, program, batch = tiny_tree_lstm
    engine = vjit.Engine(program)
    result = engine.infer(batch)
    logits = result.push(0, 0)
    expected = logits.copy()
    del engine, result
    gc.collect()
    assert np.array_equal(logits, expected)
    assert not logits.flags.writeable
    with pytest.raises(ValueError):
        logits[0] = 1.0


def test_frozen_parameters_and_constants():
    model = vjit.Model()
    table = model.add_frozen("table", (2, 2), np.array([[1, 2], [3, 4]], dtype=np.float32))
    W, b = model.add("W", (2, 2)), model.add("b", (2,))
    model.freeze(W)
    program = vjit.Program(model)

    def body(f):
        x = f.pull(2)
        y = f.add(f.add(f.matmul(table, x), f.matmul(W, x)), b)
        f.add_loss(f.sum(f.mul(y, f.constant((2,), np.array([1, -1], dtype=np.float32)))))

    program.add_type("t", body)
    assert model.is_frozen("table") and model.is_frozen(W) and not model.is_frozen(b)
    assert "t.constant0" in model.names and np.array_equal(model["t.constant0"], [1, -1])
    frozen, trained = model["W"].copy(), model["b"].copy()
    engine = vjit.Engine(program)
    batch = vjit.GraphBatch.from_lists([[(0, [], -1, -1, [1.0, 2.0])]])
    engine.train_step(batch, vjit.SGD(0.1))
    assert np.array_equal(model["W"], frozen)
    assert np.allclose(model["b"], trained - 0.1 * np.array([1, -1]))
