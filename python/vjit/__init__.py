"""vjit: dynamic neural networks (trees, lattices, graphs) trained by a batching JIT engine.

Write a vertex function once per vertex type with the Builder's ops (traced once, when the
type is added); every sample brings its own graph; the C++ engine batches the vertices of
all samples, differentiates and runs compiled plans. Batches cross into the engine as whole
arrays, never vertex by vertex::

    import vjit
    model = vjit.Model(seed=1)
    W = model.add("W", (16, 32))
    program = vjit.Program(model)
    program.add_type("node", lambda f: f.scatter(f.tanh(f.matmul(W, f.concat(
        [f.gather(0, (16,)), f.gather(1, (16,))])))))
    engine = vjit.Engine(program, threads=2)

Errors are vjit.UserError (the caller's mistake, naming the culprit) and vjit.InternalError,
both vjit.Error, with the C++ message.
"""
from ._vjit import (  # noqa: F401  (the public API)
    AdaGrad,
    Adam,
    Arg,
    Arity,
    BracketTree,
    BracketTreeNode,
    Builder,
    Calls,
    DistributedError,
    Engine,
    Error,
    Evaluation,
    FsmPolicy,
    FsmPolicyInfo,
    GraphBatch,
    GrowthStep,
    Init,
    InternalError,
    Label,
    Model,
    Optimizer,
    Options,
    Param,
    Program,
    Recursive,
    Sample,
    SGD,
    ScheduleSummary,
    UserError,
    Value,
    Vertex,
    Vocabulary,
    load_checkpoint,
    load_parameters,
    make_synthetic_treebank,
    models,
    option_names,
    parse_bracket_trees,
    read_bracket_file,
    reference_evaluate,
    save_checkpoint,
    save_parameters,
    shuffled_indices,
    summarize_schedule,
    trees_to_batch,
)

__all__ = [name for name in dir() if not name.startswith("_")]
