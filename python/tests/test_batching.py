"""Batching policies from Python: ED-Batch's learned FSM policy (learn, save, load, give to an
engine) and graphs that grow while they run, with growth callbacks written in Python."""
import sys

import numpy as np
import pytest

import vjit


def test_fsm_policy_learns_saves_and_loads(tiny_tree_lstm, tmp_path):
    model, program, batch = tiny_tree_lstm
    policy = vjit.FsmPolicy.learn(batch, program.num_types)
    info = policy.info()
    assert info.num_types == program.num_types and info.states > 0 and info.tasks >= info.lower_bound > 0
    assert "fsm policy" in policy.describe() and str(policy) == policy.describe()
    path = str(tmp_path / "tree.fsm.json")
    policy.save(path, program.signature_string())
    loaded = vjit.FsmPolicy.load(path, program.signature_string())
    assert loaded.info().states == info.states
    with pytest.raises(vjit.UserError, match="tree.fsm.json"):
        vjit.FsmPolicy.load(path, "another program")
    fsm = vjit.summarize_schedule(batch, program.num_types, "fsm", loaded)
    depth = vjit.summarize_schedule(batch, program.num_types, "depth")
    assert fsm.lower_bound == depth.lower_bound and fsm.tasks >= fsm.lower_bound and depth.tasks >= depth.lower_bound
    with pytest.raises(vjit.UserError):
        vjit.summarize_schedule(batch, program.num_types, "fsm")  # fsm needs the policy
    with pytest.raises(vjit.UserError, match="nope"):
        vjit.summarize_schedule(batch, program.num_types, "nope")


def test_an_engine_runs_the_fsm_policy_given_to_it(tiny_tree_lstm, tmp_path):
    model, program, batch = tiny_tree_lstm
    engine = vjit.Engine(program, policy="fsm", threads=1)
    assert engine.fsm_policy() is None
    learned = engine.learn_fsm_policy(batch)
    assert engine.fsm_policy().info().states == learned.info().states
    path = str(tmp_path / "engine.fsm.json")
    engine.save_fsm_policy(path)
    other = vjit.Engine(program, policy="fsm", threads=1)
    other.load_fsm_policy(path)
    agenda = vjit.Engine(program, policy="agenda", threads=1)
    expected = agenda.forward(batch, training=False, backward=False)
    for e in (engine, other):
        assert abs(e.forward(batch, training=False, backward=False) - expected) <= 1e-5 * abs(expected)
    # A policy learned for a program of another number of types is refused.
    wrong = vjit.FsmPolicy.learn(vjit.GraphBatch.from_lists([[(0,)]]), 1)
    with pytest.raises(vjit.UserError, match="type"):
        other.set_fsm_policy(wrong)


def counter_program():
    """One type: h = tanh(W·[x; child]) with x the vertex's feature; pushes h."""
    model = vjit.Model(seed=3)
    W = model.add("W", (2, 3))
    program = vjit.Program(model)

    def step(f):
        h = f.tanh(f.matmul(W, f.concat([f.pull(1), f.gather_sum((2,))])))
        f.scatter(h)
        f.push(h)

    program.add_type("step", step)
    return model, program


def grow_until(length):
    """A callback adding one vertex after each new one until the sample has `length` vertices."""
    def callback(step):
        assert step.num_pushes == 1 and step.push(0).shape == (2,)
        if len(step.sample) < length[step.sample_index]:
            step.add_vertex(0, [step.vertex], features=[float(step.push(0)[0])])
    return callback


def test_graphs_grow_with_a_python_callback():
    model, program = counter_program()
    engine = vjit.Engine(program, threads=1)
    lengths = [3, 5]
    engine.set_growth(0, grow_until(lengths))
    batch = vjit.GraphBatch.from_lists([[(0, [], -1, -1, [0.5])], [(0, [], -1, -1, [-1.0])]])
    result = engine.infer(batch)
    grown = engine.grown_batch()
    assert [len(s) for s in grown.samples] == lengths
    assert engine.stats()["batches"] >= 2
    # The grown graph gives what the reference interpreter gives on it.
    reference = vjit.reference_evaluate(program, grown, training=False, backward=False)
    assert np.allclose(result.values, reference.values, rtol=1e-5, atol=1e-6)
    # None makes the type static again.
    engine.set_growth(0, None)
    engine.infer(batch)
    with pytest.raises(vjit.UserError):
        engine.grown_batch()


def test_an_exception_of_a_callback_is_raised_as_it_was_naming_the_vertex():
    model, program = counter_program()
    engine = vjit.Engine(program, threads=1)
    raised = []

    def fails(step):
        raised.append(ValueError("no more"))
        raise raised[-1]

    engine.set_growth(0, fails)
    batch = vjit.GraphBatch.from_lists([[(0, [], -1, -1, [0.5])]])
    with pytest.raises(ValueError, match="no more") as caught:
        engine.infer(batch)
    assert caught.value is raised[-1]
    assert "fails" in [frame.name for frame in caught.traceback], "the callback's traceback is kept"
    if sys.version_info >= (3, 11):
        assert caught.value.__notes__ == ["vjit: sample 0 vertex 0 (type 'step'): growth callback failed"]

    class OwnError(Exception):
        pass

    def fails_with_its_own(step):
        raise OwnError("of the caller's own type")

    engine.set_growth(0, fails_with_its_own)
    with pytest.raises(OwnError):
        engine.infer(batch)
    engine.set_growth(0, None)
    assert engine.infer(batch).num_samples == 1, "the engine is usable after the callback's exception"
    kept = []
    engine.set_growth(0, kept.append)
    engine.infer(batch)
    with pytest.raises(vjit.UserError, match="after its growth callback returned"):
        kept[0].add_vertex(0, [0])
    # vjit's own errors inside a callback come back as they were raised there.
    engine.set_growth(0, lambda step: step.add_vertex(0, [7], features=[0.0]))
    with pytest.raises(vjit.UserError, match="add_vertex: child 0 is vertex 7, which does not exist"):
        engine.infer(batch)
    engine.set_growth_limit(4)
    engine.set_growth(0, lambda step: step.add_vertex(0, [step.vertex], features=[0.0]))
    with pytest.raises(vjit.UserError, match="the growth limit") as caught:
        engine.infer(batch)
    if sys.version_info >= (3, 11):
        assert caught.value.__notes__[0].endswith("(type 'step'): growth callback failed")
