"""Bad shapes, graphs and arguments raise vjit's errors as Python exceptions carrying the
C++ message (naming the op, the sample, the vertex, the option)."""
import numpy as np
import pytest

import vjit


def two_slot_program():
    model = vjit.Model()
    W = model.add("W", (4, 8))
    program = vjit.Program(model)
    program.add_type("leaf", lambda f: f.scatter(f.tanh(f.matmul(W, f.pull(8)))))
    program.add_type("node", lambda f: f.scatter(f.add(f.gather(0, (4,)), f.gather(1, (4,)))))
    return model, program


def test_error_hierarchy():
    assert issubclass(vjit.UserError, vjit.Error) and issubclass(vjit.InternalError, vjit.Error)
    assert issubclass(vjit.Error, RuntimeError) and issubclass(vjit.DistributedError, vjit.UserError)


def test_shape_error_names_the_type_and_the_op():
    model = vjit.Model()
    W = model.add("W", (4, 8))
    program = vjit.Program(model)
    with pytest.raises(vjit.UserError, match=r"(?s)bad.*matmul"):
        program.add_type("bad", lambda f: f.scatter(f.matmul(W, f.pull(5))))
    assert program.num_types == 0


def test_exception_of_the_body_propagates_and_leaves_the_program_as_it_was():
    model = vjit.Model()
    program = vjit.Program(model)

    def body(f):
        f.constant((2,), np.ones(2, dtype=np.float32))  # a constant tensor: a parameter of the model
        raise ValueError("not today")

    with pytest.raises(ValueError, match="not today"):
        program.add_type("t", body)
    assert len(model) == 0 and program.num_types == 0


def test_builder_used_after_add_type_raises():
    model = vjit.Model()
    program = vjit.Program(model)
    kept = []
    program.add_type("t", lambda f: (kept.append(f), f.scatter(f.pull(2))))
    with pytest.raises(vjit.UserError, match="after Program.add_type returned"):
        kept[0].pull(2)


def test_bad_graph_names_sample_and_vertex():
    _, program = two_slot_program()
    engine = vjit.Engine(program)
    batch = vjit.GraphBatch.from_lists([[(0, [], -1, -1, [0.0] * 8), (1, [0, 7])]])
    with pytest.raises(vjit.UserError, match=r"(?s)sample 0.*vertex 1"):
        engine.infer(batch)


def test_bad_arrays_name_the_array():
    with pytest.raises(vjit.UserError, match="child_offsets"):
        vjit.GraphBatch.from_arrays([0, 2], [0, 0], [0, 0], [])
    with pytest.raises(vjit.UserError, match="tokens"):
        vjit.GraphBatch.from_arrays([0, 2], [0, 0], [0, 0, 0], [], tokens=[1, 2, 3])
    with pytest.raises(vjit.UserError, match="sample_offsets"):
        vjit.GraphBatch.from_arrays([0, 3], [0, 0], [0, 0, 0], [])
    with pytest.raises(vjit.UserError, match="no type"):
        vjit.GraphBatch.from_lists([[{"children": []}]])


def test_bad_options_and_arguments():
    _, program = two_slot_program()
    with pytest.raises(vjit.UserError, match="policy"):
        vjit.Engine(program, policy="sideways")
    with pytest.raises(vjit.UserError, match="no_such_option|unknown"):
        vjit.Engine(program, no_such_option=1)
    with pytest.raises(vjit.UserError, match="lr"):
        vjit.Adam(lr=-1.0)
    with pytest.raises(TypeError):
        vjit.Model().add("W", "not a shape")
    with pytest.raises(vjit.UserError, match="at most 2"):
        vjit.Model().add("W", (1, 2, 3))
    with pytest.raises(vjit.UserError, match="nope"):
        vjit.Model().find("nope")


def test_missing_file_names_it(tmp_path):
    with pytest.raises(vjit.UserError, match="absent.txt"):
        vjit.read_bracket_file(str(tmp_path / "absent.txt"))
    with pytest.raises(vjit.UserError, match=r"<string>:1"):
        vjit.parse_bracket_trees("(3 (2 a)")
