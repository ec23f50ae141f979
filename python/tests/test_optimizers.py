"""Optimizers written in Python: a subclass of vjit.Optimizer whose update() runs on the host,
checked, clipped and undone by the C++ base class as a C++ rule of the user's own is."""
import re
import sys

import numpy as np
import pytest

import vjit


class PythonSGD(vjit.Optimizer):
    """torch.optim.SGD with momentum, written in Python."""

    def __init__(self, lr, momentum, clip_norm=0.0):
        vjit.Optimizer.__init__(self, lr, clip_norm)
        self.momentum = momentum
        self.calls = 0

    def kind(self):
        return "python_sgd"

    def state_slot_names(self):
        return ["momentum_buffer"]

    def hyper_parameters(self):
        return [("lr", self.lr), ("momentum", self.momentum)]

    def update(self, index, begin, w, state, g, grad_scale):
        self.calls += 1
        (velocity,) = state
        gradient = np.zeros_like(w) if g is None else g * np.float32(grad_scale)
        velocity *= np.float32(self.momentum)
        velocity += gradient
        w -= np.float32(self.lr) * velocity


class Explodes(vjit.Optimizer):
    def update(self, index, begin, w, state, g, grad_scale):
        w[:] = np.inf


class Raises(vjit.Optimizer):
    def update(self, index, begin, w, state, g, grad_scale):
        raise KeyError("boom")


def train(program_and_batch, optimizer, steps=3, threads=2):
    model, program, batch = program_and_batch
    engine = vjit.Engine(program, threads=threads)
    losses = [engine.train_step(batch, optimizer) for _ in range(steps)]
    return losses, [model[name].copy() for name in model.names], engine


def test_a_python_rule_trains_as_the_same_cpp_rule(tiny_tree_lstm):
    model, program, batch = tiny_tree_lstm
    start = [model[name].copy() for name in model.names]
    ours = PythonSGD(0.1, 0.9, clip_norm=1.0)
    python_losses, python_values, engine = train(tiny_tree_lstm, ours)
    del engine
    for name, values in zip(model.names, start):
        model[name] = values
    cpp_losses, cpp_values, _ = train(tiny_tree_lstm, vjit.SGD(0.1, momentum=0.9, clip_norm=1.0))
    assert ours.calls > 0 and ours.steps == 3 and ours.last_grad_norm > 0
    assert python_losses[-1] != python_losses[0]
    # The same float operations on every element: close to rounding (numpy may fuse differently).
    assert np.allclose(python_losses, cpp_losses, rtol=1e-5)
    for a, b in zip(python_values, cpp_values):
        assert np.allclose(a, b, rtol=1e-4, atol=1e-6)
    assert ours.kind() == "python_sgd" and ours.state_slot_names() == ["momentum_buffer"]


def test_a_python_rule_steps_a_model_alone():
    model = vjit.Model(seed=1)
    model.add("w", (3,), vjit.Init.Ones)
    rule = PythonSGD(0.5, 0.0)
    rule.step(model, [np.array([1.0, 2.0, 4.0], dtype=np.float32)])
    assert np.array_equal(model["w"], np.array([0.5, 0.0, -1.0], dtype=np.float32))


def test_a_python_rule_is_checkpointed(tiny_tree_lstm, tmp_path):
    model, program, batch = tiny_tree_lstm
    ours = PythonSGD(0.1, 0.9)
    engine = vjit.Engine(program, threads=1)
    engine.train_step(batch, ours)
    path = str(tmp_path / "python_rule.safetensors")
    vjit.save_checkpoint(path, engine, ours)
    resumed = PythonSGD(0.1, 0.9)
    vjit.load_checkpoint(path, vjit.Engine(program, threads=1), resumed)
    with pytest.raises(vjit.UserError):
        vjit.load_checkpoint(path, vjit.Engine(program, threads=1), vjit.Adam(0.1))


def test_a_non_finite_update_is_undone(tiny_tree_lstm):
    model, program, batch = tiny_tree_lstm
    engine = vjit.Engine(program, threads=2)
    before = [model[name].copy() for name in model.names]
    with pytest.raises(vjit.UserError, match="inf"):
        engine.train_step(batch, Explodes(0.1))
    for name, values in zip(model.names, before):
        assert np.array_equal(model[name], values), name


def test_an_exception_in_update_is_raised_as_it_was_naming_the_rule(tiny_tree_lstm):
    model, program, batch = tiny_tree_lstm
    engine = vjit.Engine(program, threads=2)
    with pytest.raises(KeyError, match="boom") as caught:
        engine.train_step(batch, Raises(0.1))
    assert not isinstance(caught.value, vjit.Error)
    assert "update" in [frame.name for frame in caught.traceback], "the rule's traceback is kept"
    if sys.version_info >= (3, 11):
        assert len(caught.value.__notes__) == 1
        assert re.fullmatch(r"vjit: Raises\.update of parameter \d+ failed", caught.value.__notes__[0])
    assert engine.train_step(batch, vjit.SGD(0.1)) > 0, "the engine is usable after the rule's exception"


def test_a_rule_without_update_or_with_a_bad_setting_is_refused(tiny_tree_lstm):
    model, program, batch = tiny_tree_lstm
    with pytest.raises(vjit.UserError, match="defines update"):
        vjit.Engine(program, threads=1).train_step(batch, vjit.Optimizer(0.1))
    with pytest.raises(vjit.UserError, match="lr"):
        PythonSGD(-1.0, 0.9)
