"""Type stubs of vjit's C++ module (python/src/*.cpp); the signatures are written by hand, the docstrings are the module's (written by python/stub_docs.py)."""
from typing import Callable, Iterable, Mapping, Optional, Sequence, Union, overload

import numpy as np
import numpy.typing as npt

ShapeLike = Union[int, tuple[()], tuple[int], tuple[int, int], Sequence[int]]
Shape = tuple[int, ...]
IntArray = Union[npt.ArrayLike, Sequence[int]]

class Error(RuntimeError):
    """The base of vjit's errors; the message is the C++ one."""
class UserError(Error):
    """The caller's mistake (a bad graph, shape, file, option or argument), naming the culprit."""
class InternalError(Error):
    """A broken invariant of vjit itself."""
class DistributedError(UserError):
    """A collective of data-parallel training that did not complete."""

class Init:
    """How Model::add fills a new parameter's values (from the Model's seed).

    Members:

      Xavier : uniform in ±sqrt(6 / (fan_in + fan_out))

      Uniform : uniform in ±scale

      Zeros : all 0

      Ones : all 1
    """
    Xavier: "Init"
    """uniform in ±sqrt(6 / (fan_in + fan_out))"""
    Uniform: "Init"
    """uniform in ±scale"""
    Zeros: "Init"
    """all 0"""
    Ones: "Init"
    """all 1"""

class Param:
    """A handle to a parameter of a Model, as vertex functions name it."""
    @property
    def id(self) -> int:
        """its index in the Model (Model::param)"""
    @property
    def shape(self) -> Shape:
        """its shape, as added"""

ParamKey = Union[str, Param, int]

class Model:
    """Named parameters in one block of memory, with seeded initialisation.

    A Model is copied with its values (the copy has a block of its own).

    model[name] (or a Param, or an index) is a float32 NumPy array sharing the parameter's
    memory: training updates it in place and writing it changes the parameter. While such
    a view is alive, what may move the memory (adding a parameter, a vertex type with
    constant tensors, building an Engine) raises vjit.UserError instead of leaving it
    dangling: take views after building the engines.
    """
    def __init__(self, seed: int = 1) -> None:
        """`seed` makes every Init draw the same values on every platform."""
    def add(self, name: str, shape: ShapeLike, init: Init = ..., scale: float = 0.1) -> Param:
        """Adds a parameter; the name must be unique. scale is used by Init::Uniform."""
    def add_frozen(self, name: str, shape: ShapeLike, values: npt.ArrayLike) -> Param:
        """A frozen parameter holding values (shape.numel() of them, row-major); the name must be unique."""
    def freeze(self, param: Param, frozen: bool = True) -> None:
        """Freezes or unfreezes a parameter (see ParamData::frozen).

        Freeze before Program::add_type to also skip computing its gradient.
        """
    def find(self, name: str) -> Param:
        """Looks a parameter up by name; throws UserError naming it and listing the model's parameters when absent."""
    def param(self, id: int) -> Param:
        """A parameter by index (0 to size() − 1) or by handle."""
    def name(self, id: int) -> str:
        """unique in its Model"""
    def shape(self, param: ParamKey) -> Shape:
        """Fixed by Model::add: the values, every plan and the reference interpreter are sized by it, so it is read-only (a new shape is a new parameter)."""
    def is_frozen(self, param: ParamKey) -> bool:
        """Frozen: optimizers never update it (it takes no part in the step's gradient check, norm or clipping either), and vertex types built while it is frozen compute no gradient for it (Program::add_type drops its ParamGrad).

        Constant tensors (Builder::constant) are frozen parameters.
        """
    def __len__(self) -> int:
        """the number of parameters"""
    def __contains__(self, name: str) -> bool:
        """Whether the model has a parameter named `name`."""
    def __getitem__(self, param: ParamKey) -> npt.NDArray[np.float32]:
        """The parameter's values: a NumPy view of its memory (name, Param or index)."""
    def __setitem__(self, param: ParamKey, values: npt.ArrayLike) -> None:
        """Copies `values` (as many as the parameter holds) into the parameter."""
    @property
    def names(self) -> list[str]:
        """the parameters' names, in order"""
    @property
    def total_numel(self) -> int:
        """the values of all parameters"""
    @property
    def value_moves(self) -> int:
        """How many times the values moved to another place in memory: growing the block as parameters are added, assigning another Model to this one, or an Engine laying the block out for its stacked weights when it is built (VJIT_PARAM_LAYOUT).

        A pointer or span into a ParamData::value taken while this was n is stale once it is not n; the values themselves never change by moving.
        """
    @property
    def live_views(self) -> int:
        """NumPy views of the parameters alive now."""

class Value:
    """A handle to a value of the vertex function being built."""
    @property
    def id(self) -> int:
        """the node of the function that defines it"""
    @property
    def shape(self) -> Shape:
        """its per-vertex shape"""

class Label:
    """The vertex's label, for per-vertex losses (see Builder::label)."""
    @property
    def num_classes(self) -> int:
        """labels lie in [0, num_classes)"""

class Arg:
    """An operand: a per-vertex value or a parameter (broadcast over the batch)."""
    @overload
    def __init__(self, value: Value) -> None: ...
    @overload
    def __init__(self, param: Param) -> None: ...

Operand = Union[Value, Param, Arg]

class Builder:
    """Writes the vertex function of one vertex type, op by op: each call checks its operands' shapes (a UserError names the type and the op) and returns the value it defines.

    Program::add_type passes one to the type's body. It is valid while the body runs.
    """
    @property
    def type_name(self) -> str:
        """the vertex type's name"""
    def gather(self, slot: int, expected: ShapeLike) -> Value:
        """what child slot scattered"""
    def gather_sum(self, expected: ShapeLike) -> Value:
        """gather_sum and gather_all read the variadic children: those after the gather(k) slots (all children when the function has no gather(k)).

        Σ over the variadic children (child-sum models)
        """
    def gather_all(self, max_children: int, expected: ShapeLike) -> Value:
        """[max_children, n], zero rows past the last child"""
    def pull(self, width: int) -> Value:
        """the vertex's feature row"""
    def pull_embedding(self, table: Param) -> Value:
        """row token of an embedding table [vocab, n]"""
    def label(self, num_classes: int) -> Label:
        """the vertex's label in [0, num_classes)"""
    def param(self, param: Param) -> Value:
        """the parameter as a value, uniform across vertices"""
    def constant(self, shape: ShapeLike, value: Union[float, npt.ArrayLike]) -> Value:
        """A number: every element value. An array: A constant tensor: values row-major, shape.numel() of them.

        Kept as a frozen parameter "<type>.constant<k>" of the model (so checkpoints save it and the reference interpreter reads it), and, like a parameter, uniform across vertices: combine it with per-vertex values (add, mul, matmul, ...). Pass a std::vector: a braced single value, constant(shape, {1.0f}), is the fill above.
        """
    def matmul(self, a: Operand, b: Operand) -> Value:
        """[m,k]·[k,n], [m,k]·[k] (column), [k]·[k,n] (row)"""
    def add(self, a: Operand, b: Operand) -> Value:
        """Elementwise a + b, a − b, a·b, a / b.

        The shapes are equal or one operand broadcasts: a scalar to any shape, a vector [n] to every row of a matrix [m, n]. At most one operand is a parameter.
        """
    def sub(self, a: Operand, b: Operand) -> Value:
        """Elementwise a + b, a − b, a·b, a / b.

        The shapes are equal or one operand broadcasts: a scalar to any shape, a vector [n] to every row of a matrix [m, n]. At most one operand is a parameter.
        """
    def mul(self, a: Operand, b: Operand) -> Value:
        """Elementwise a + b, a − b, a·b, a / b.

        The shapes are equal or one operand broadcasts: a scalar to any shape, a vector [n] to every row of a matrix [m, n]. At most one operand is a parameter.
        """
    def div(self, a: Operand, b: Operand) -> Value:
        """Elementwise a + b, a − b, a·b, a / b.

        The shapes are equal or one operand broadcasts: a scalar to any shape, a vector [n] to every row of a matrix [m, n]. At most one operand is a parameter.
        """
    def neg(self, x: Value) -> Value:
        """Elementwise −x, σ(x) = 1 / (1 + e^−x), tanh x, max(x, 0), e^x, ln x, √x of a per-vertex value."""
    def sigmoid(self, x: Value) -> Value:
        """Elementwise −x, σ(x) = 1 / (1 + e^−x), tanh x, max(x, 0), e^x, ln x, √x of a per-vertex value."""
    def tanh(self, x: Value) -> Value:
        """Elementwise −x, σ(x) = 1 / (1 + e^−x), tanh x, max(x, 0), e^x, ln x, √x of a per-vertex value."""
    def relu(self, x: Value) -> Value:
        """Elementwise −x, σ(x) = 1 / (1 + e^−x), tanh x, max(x, 0), e^x, ln x, √x of a per-vertex value."""
    def exp(self, x: Value) -> Value:
        """Elementwise −x, σ(x) = 1 / (1 + e^−x), tanh x, max(x, 0), e^x, ln x, √x of a per-vertex value."""
    def log(self, x: Value) -> Value:
        """Elementwise −x, σ(x) = 1 / (1 + e^−x), tanh x, max(x, 0), e^x, ln x, √x of a per-vertex value."""
    def sqrt(self, x: Value) -> Value:
        """Elementwise −x, σ(x) = 1 / (1 + e^−x), tanh x, max(x, 0), e^x, ln x, √x of a per-vertex value."""
    def scale(self, x: Value, factor: float) -> Value:
        """factor·x"""
    def add_scalar(self, x: Value, c: float) -> Value:
        """x + c"""
    def dropout(self, x: Value, rate: float) -> Value:
        """active only in training runs"""
    def concat(self, parts: Sequence[Value]) -> Value:
        """Vectors (or scalars) end to end into one vector; matrices of equal columns stacked by rows."""
    def slice(self, x: Value, start: int, length: int) -> Value:
        """elements [start, start + length) of a vector; rows of a matrix"""
    def reshape(self, x: Value, shape: ShapeLike) -> Value:
        """same number of elements"""
    def split(self, x: Value, parts: int) -> list[Value]:
        """equal parts"""
    def sum(self, x: Value) -> Value:
        """Σ of every element, a scalar."""
    def sum_rows(self, x: Value) -> Value:
        """[m, n] → [n]: the sum of the rows"""
    def slice_cols(self, x: Value, start: int, length: int) -> Value:
        """[m, n] → [m, length]: columns [start, start + length)"""
    def transpose(self, x: Value) -> Value:
        """[m, n] → [n, m]"""
    def child_count(self) -> Value:
        """The number of variadic children of the vertex, a scalar (no gradient).

        Needs gather_all or gather_sum first.
        """
    def mean_children(self, x: Value) -> Value:
        """Over the rows of the actual children of a [K, d] block (rows [0, count), never the zero padding rows after them); zeros when there are no children.

        Σ_k rows / count
        """
    def max_children(self, x: Value) -> Value:
        """column max; its gradient goes to the arg-max row (ties: the first)"""
    def outer(self, a: Value, b: Value) -> Value:
        """a [m], b [n] → [m, n] = a bᵀ (per-vertex vectors)"""
    def bilinear(self, x: Value, V: Param) -> Value:
        """y [k], y_i = xᵀ V_i x for x [n] and V = [V_0; V_1; ...; V_{k−1}] stored as a matrix [k·n, n] (slice V_i is rows [i·n, (i+1)·n)).

        Built from existing ops: t = V x, one GEMM over the task's vertices (X [N, n] · Vᵀ → [N, k·n]), then per vertex reshape(t, [k, n]) · x, a matrix-vector product per row.
        """
    def sym_outer(self, x: Value) -> Value:
        """x [n] → [n(n+1)/2]: the products x_a x_b for a ≤ b, row by row (the upper triangle of x xᵀ).

        xᵀ V x depends only on the symmetric part of V, so matmul(P, sym_outer(x)) with P [k, n(n+1)/2] is the bilinear form of bilinear(x, V) at half its multiply-adds: P_i(a,b) = V_i[a,b] + V_i[b,a] for a < b, V_i[a,a] on the diagonal (the RNTN model stores P).
        """
    def layer_norm(self, x: Value) -> Value:
        """Layer normalisation of a vector x [n] → [n]: (x − mean(x)) / √(var(x) + 1e-5), with the biased variance over the n elements (PyTorch's default ε); a learned gain and bias are a mul and an add after it."""
    def softmax_cross_entropy(self, logits: Value, label: Label) -> Value:
        """−log softmax(logits)[label]: logits [num_classes] scored against the vertex's label."""
    def squared_error(self, prediction: Value, target: Value) -> Value:
        """Σ (prediction − target)²"""
    def add_loss(self, loss: Value) -> None:
        """adds a scalar to the objective (summed over the batch's vertices)"""
    def scatter(self, value: Value) -> None:
        """what the parents of the vertex gather from it (once per function)"""
    def push(self, value: Value) -> None:
        """a result of the vertex, returned by the run (Evaluation::pushes)"""

class Program:
    """The vertex types of a model: for each, its vertex function F, the derivative ∂F vjit builds from it, and what it requires of the graph."""
    def __init__(self, model: Model) -> None:
        """The program reads the model's parameters; an Engine training it updates them."""
    def add_type(self, name: str, body: Callable[[Builder], object]) -> int:
        """Builds, verifies and differentiates the vertex function of a new type.

        Returns the type index used in Vertex::type.

        `body(builder)` is called once, with a vjit.Builder valid while it runs.
        """
    @property
    def num_types(self) -> int:
        """types are 0 to num_types() − 1, in the order added"""
    @property
    def type_names(self) -> list[str]:
        """the types' names, in type order"""
    @property
    def model(self) -> Model:
        """the Model whose parameters the types read"""
    def type_index(self, name: str) -> int:
        """throws UserError listing the types when unknown"""
    def type_name(self, type: int) -> str:
        """A vertex type's name, F, ∂F and signature (std::out_of_range for an index outside [0, num_types()))."""
    def forward_ir(self, type: int) -> str:
        """The text form of the type's vertex function F."""
    def backward_ir(self, type: int) -> str:
        """The text form of the derivative ∂F vjit built."""
    def signature_string(self) -> str:
        """The vertex types with their arity and shapes, one line each: what a saved batching policy must match to be used with this program."""

class Arity:
    """How many children a branch takes: fixed ones read as call(0) to call(fixed − 1), then, when variadic, any number more (at most max_children when that is >= 0) read together by call_sum or call_all."""
    @staticmethod
    def exactly(children: int) -> "Arity":
        """children read one by one"""
    @staticmethod
    def any(max_children: int = -1) -> "Arity":
        """Any number of children (at most max_children when >= 0), read by call_sum / call_all."""
    @staticmethod
    def at_least(fixed: int, max_more: int = -1) -> "Arity":
        """fixed children read one by one, then any number more."""

class Calls:
    """The recursive results a branch body reads: each stands for what the body of the child's own branch returned."""
    def call(self, child: int) -> Value:
        """the result on child child < Arity::fixed"""
    def call_sum(self) -> Value:
        """Σ of the results on the variadic children (zeros without any)."""
    def call_all(self, max_children: int) -> Value:
        """[max_children, n]: their results row by row, zero rows after."""

class Recursive:
    """A model over the user's node type Node.

    Set children (required), branch (required with more than one branch) and, as the bodies need them, token, label and features; then add the branches and build batches.

    In Python, a model written as recursion over your own objects: each branch is
    a vertex type whose body(f, calls) returns the node's result, calls.call(i) standing for the
    result on child i. Recursive(program, result_shape, children=, branch=, token=, label=,
    features=, describe=): functions of a node; children returns its child objects.
    """
    def __init__(self, program: Program, result: ShapeLike, children: Optional[Callable[[object], Iterable[object]]] = None,
                 branch: Optional[Callable[[object], int]] = None, token: Optional[Callable[[object], int]] = None,
                 label: Optional[Callable[[object], int]] = None,
                 features: Optional[Callable[[object], Sequence[float]]] = None,
                 describe: Optional[Callable[[object], str]] = None) -> None: ...
    def add_branch(self, name: str, arity: Arity, body: Callable[[Builder, Calls], Value]) -> int:
        """Adds a branch, a vertex type traced from body(f, calls) once; returns its index."""
    def vertex_type(self, branch: int) -> int:
        """The Program's vertex type of a branch (Vertex::type of its nodes)."""
    @property
    def num_branches(self) -> int:
        """branches added so far"""
    def sample(self, roots: Sequence[object], name: str = "") -> "Sample":
        """The same over several roots, which may share nodes. `roots`: a list of nodes; shared nodes become one vertex."""
    def batch(self, roots: Sequence[object], first_index: int = 0) -> "GraphBatch":
        """One sample per root, named "<first_index + i>" in errors."""

class Vertex:
    """One vertex of a sample: its type, its children and its own inputs."""
    type: int
    """the vertex type, an index into the Program's types (Program::type_index)"""
    children: list[int]
    """indices into the same sample, in slot order"""
    token: int
    """row of the pull_embedding table; -1: none"""
    label: int
    """the label a per-vertex loss reads; -1: no label here"""
    features: list[float]
    """the row pull() reads (its width is the type's)"""
    def __init__(self, type: int, children: Sequence[int] = ..., token: int = -1, label: int = -1,
                 features: Sequence[float] = ...) -> None: ...

class Sample:
    """One input graph: a DAG of typed vertices (in any order; the engine orders them)."""
    name: str
    """used in error messages; empty means "sample <index>\""""
    vertices: list[Vertex]
    """children are indices into this vector (a copy: assign a list to change them)"""
    def __init__(self) -> None: ...
    def add_vertex(self, type: int, children: Sequence[int] = ..., token: int = -1, label: int = -1) -> int:
        """Appends a vertex and returns its index."""
    def __len__(self) -> int: ...

class GraphBatch:
    """The samples one call of the engine runs together."""
    first_sample: int
    """The index of samples[0] in the global batch this one was cut from (Distributed::shard sets it; 0 for a whole batch).

    Dropout masks are drawn per (global sample index, vertex, op, element), so each rank's shard draws the masks the whole batch would: data-parallel training with dropout equals one process training on the global batch.
    """
    @overload
    def __init__(self) -> None: ...
    @overload
    def __init__(self, samples: Sequence[Sample]) -> None: ...
    @staticmethod
    def from_arrays(sample_offsets: IntArray, types: IntArray, child_offsets: IntArray, children: IntArray,
                    tokens: Optional[IntArray] = None, labels: Optional[IntArray] = None,
                    features: Optional[npt.ArrayLike] = None) -> "GraphBatch":
        """A batch from arrays over all its vertices: sample s holds vertices
        [sample_offsets[s], sample_offsets[s+1]); vertex v has type types[v] and the children
        children[child_offsets[v]:child_offsets[v+1]] (indices within its sample, in slot order);
        optional tokens[v], labels[v] (-1: none) and feature rows features[v] (a [V, d] matrix).
        """
    @staticmethod
    def from_lists(samples: Sequence[Sequence[Union[Sequence[object], Mapping[str, object]]]]) -> "GraphBatch":
        """A batch from nested lists: one list of vertices per sample, each vertex a tuple
        (type, children, token, label, features) — trailing ones may be left out — or a dict.
        """
    def to_arrays(self) -> dict[str, npt.NDArray[np.int64]]:
        """The batch as from_arrays takes it (without features): a dict of int64 arrays sample_offsets,
        types, child_offsets, children, tokens and labels.
        """
    def select(self, indices: Iterable[int]) -> "GraphBatch":
        """The samples at `indices` as a new batch (copies)."""
    def sample(self, index: int) -> Sample:
        """A copy of sample `index`."""
    @property
    def samples(self) -> list[Sample]:
        """in sample order; results are indexed by it (a copy)"""
    @property
    def num_vertices(self) -> int:
        """The vertices of all samples."""
    def __len__(self) -> int: ...

class BracketTreeNode:
    """One node of the tree."""
    @property
    def label(self) -> int:
        """the node's sentiment label (0 to 4 in the SST)"""
    @property
    def word(self) -> str:
        """non-empty only at leaves"""
    @property
    def children(self) -> list[int]:
        """node indices"""

class BracketTree:
    """Reads trees in PTB bracket form as in the Stanford Sentiment Treebank, one per line: (3 (2 It) (4 (2 's) (3 good))).

    Every node has a label; leaves hold a word. Malformed text throws UserError with the line and column.
    """
    @property
    def nodes(self) -> list[BracketTreeNode]:
        """children come before their parents; the root is last"""

class Vocabulary:
    """Maps words to dense ids.

    With an <unk> entry (the default) it is id 0 and every unknown word maps to it; without one (e.g. for tag sets) unknown words map to -1.
    """
    def __init__(self, with_unk: bool = True) -> None: ...
    @staticmethod
    def from_trees(trees: Sequence[BracketTree], max_size: int = -1) -> "Vocabulary":
        """Same, over the leaf words of the trees."""
    def add(self, word: str) -> int:
        """the word's id, adding it when new"""
    def id(self, word: str) -> int:
        """unk_id() when unknown"""
    def word(self, id: int) -> str:
        """throws UserError when out of range"""
    def __contains__(self, word: str) -> bool:
        """whether the word has an id of its own"""
    def __len__(self) -> int: ...

def read_bracket_file(path: str) -> list[BracketTree]:
    """Trees in bracket form, one per line, plain or gzip (the Stanford Sentiment Treebank's files)."""
def parse_bracket_trees(text: str, source_name: str = "<string>") -> list[BracketTree]:
    """The trees of text, one bracketed tree per non-blank line ("(3 (2 a) (4 b))"); UserError naming source_name, the line and the column of a malformed one."""
def make_synthetic_treebank(num_trees: int, seed: int) -> list[BracketTree]:
    """A synthetic sentiment treebank of random binary trees, the same for a seed on every platform."""
def trees_to_batch(trees: Sequence[BracketTree], vocab: Vocabulary, leaf: int = 0, internal: int = 1,
                   first_index: int = 0) -> GraphBatch:
    """One vertex per node: leaves of type `leaf` with the word's token, internal nodes of type
    `internal` with their children; every vertex carries its node's label; unary chains collapse.
    """
def shuffled_indices(n: int, seed: int) -> list[int]:
    """A permutation of 0..n-1 that depends only on (n, seed), as the C++ examples shuffle."""

class Evaluation:
    """What a run returns: the objective, the pushed values and, after a backward pass, the parameters' gradients (in float for the engine, float or double for the reference interpreter).

    push() and values are NumPy views of its own buffer, valid while any of them or the
    Evaluation lives.
    """
    @property
    def objective(self) -> float:
        """Σ of every add_loss over the batch."""
    @property
    def num_samples(self) -> int:
        """samples of the batch"""
    def num_vertices(self, sample: int) -> int:
        """How many vertices sample `sample` has (push_count and push take their indices)."""
    def push_count(self, sample: int, vertex: int) -> int:
        """How many values vertex `vertex` of sample `sample` pushed."""
    def push(self, sample: int, vertex: int, k: int = 0) -> npt.NDArray[np.float32]:
        """The k-th value vertex `vertex` of sample `sample` pushed (flattened), a read-only view."""
    @property
    def values(self) -> npt.NDArray[np.float32]:
        """Every pushed value, vertex after vertex, a read-only view."""
    def predictions(self, k: int = 0) -> npt.NDArray[np.int64]:
        """Per vertex (sample after sample), the index of the largest element of its k-th push
        (the first on ties): the class of pushed logits; -1 where the vertex pushed no k-th value.
        """
    @property
    def param_grads(self) -> list[npt.NDArray[np.float32]]:
        """param_grads[param id]: d objective / d parameter, flattened (zeros when unused). Flattened copies."""

def reference_evaluate(program: Program, batch: GraphBatch, training: bool = True, backward: bool = True,
                       seed: int = 0) -> Evaluation:
    """Uses the model's current float parameters."""

class Optimizer:
    """The base class of every optimizer: the checks, clipping, state and threads of a step (above); a rule implements update() (and, to be checked before writing, preview()).

    A rule of your own in Python: subclass it, call Optimizer.__init__(self, lr, clip_norm) and define
    update(self, index, begin, w, state, g, grad_scale), which updates elements [begin, end) of
    parameter `index`: w, each array of the list `state` and the read-only g (None for rows updated
    with a zero gradient) are NumPy views of those elements, valid during the call only; update
    them in place. Optionally state_slot_names() (one name per state slot; their number is the
    slots kept), kind(), hyper_parameters() and begin_update(t). The base class checks the
    gradients, clips, keeps the state and undoes a step that leaves a non-finite value. It runs
    on the host (on a GPU too), the GIL held for each call: slower than the built-in rules. An
    exception update raises ends the step as that exception itself, with a note naming the rule
    and the parameter.

    Updates elements [begin, end) of parameter index, whose values are w[0, numel) and whose state slots are state[0..state_slots()), with the gradient g[begin, end) times grad_scale (the clipping factor, 1 when not clipped) — or with a zero gradient when g is null (rows a GradientRows leaves out, under dense_updates()).

    Called concurrently from several threads for disjoint ranges: it must touch only those elements of w and of its state, and must not allocate.
    """
    lr: float
    """the learning rate; settable (set_lr): for schedules; must be finite and > 0"""
    dense_updates: bool
    """false (the default): rows a step's GradientRows leaves out are not updated (lazy: weights, moments, no decay).

    true: every element of every parameter is updated, the unlisted rows with a zero gradient (torch.optim semantics).
    """
    def __init__(self, lr: float, clip_norm: float = 0.0) -> None:
        """throws UserError unless lr is finite and > 0 and clip_norm >= 0"""
    @property
    def clip_norm(self) -> float:
        """the global gradient norm clipped to (0: no clipping)"""
    @property
    def steps(self) -> int:
        """Steps taken since construction or reset(), with any state."""
    @property
    def last_grad_norm(self) -> float:
        """The global L2 norm of the last step's gradients, before clipping."""
    def kind(self) -> str:
        """What a checkpoint records of the optimizer.

        kind(): "sgd", "adam", "adagrad", or "custom" (a subclass of the user's may name itself). state_slot_names(): one name per state slot, PyTorch's where it has one ("momentum_buffer"; "exp_avg", "exp_avg_sq"; "sum"), else "slot0", "slot1", ... hyper_parameters(): name and value of every setting of the rule (lr, clip_norm, dense_updates as 0 or 1, and the subclass's).
        """
    def state_slot_names(self) -> list[str]:
        """What a checkpoint records of the optimizer.

        kind(): "sgd", "adam", "adagrad", or "custom" (a subclass of the user's may name itself). state_slot_names(): one name per state slot, PyTorch's where it has one ("momentum_buffer"; "exp_avg", "exp_avg_sq"; "sum"), else "slot0", "slot1", ... hyper_parameters(): name and value of every setting of the rule (lr, clip_norm, dense_updates as 0 or 1, and the subclass's).
        """
    def hyper_parameters(self) -> list[tuple[str, float]]:
        """What a checkpoint records of the optimizer.

        kind(): "sgd", "adam", "adagrad", or "custom" (a subclass of the user's may name itself). state_slot_names(): one name per state slot, PyTorch's where it has one ("momentum_buffer"; "exp_avg", "exp_avg_sq"; "sum"), else "slot0", "slot1", ... hyper_parameters(): name and value of every setting of the rule (lr, clip_norm, dense_updates as 0 or 1, and the subclass's).
        """
    def reset(self) -> None:
        """Forgets the state (moments, step count): its own, and every state it used before, which is made again on its next step."""
    def step(self, model: Model, grads: Sequence[npt.ArrayLike]) -> None:
        """One dense update on the calling thread: every element of every parameter.

        Throws UserError (leaving the model and the state untouched) on a mismatch in count or size, a non-finite gradient, or an update that would leave a non-finite weight or state value (above).
        """

class SGD(Optimizer):
    """Stochastic gradient descent with optional (heavy-ball) momentum: g ← g + weight_decay·w (classic L2 penalty, coupled to the gradient) v ← momentum·v + g (v = g when momentum = 0) w ← w − lr·v Rows a step's GradientRows leaves out keep their weights and their velocity (no momentum step, no decay) unless dense_updates() is set, which applies the rule to them with g = 0 like torch.optim.SGD."""
    def __init__(self, lr: float, momentum: float = 0.0, weight_decay: float = 0.0, clip_norm: float = 0.0) -> None: ...

class Adam(Optimizer):
    """Adam with decoupled weight decay (AdamW, Loshchilov & Hutter): the decay is not added to the gradient, so it is not rescaled by the adaptive denominator: w ← w − lr·weight_decay·w m ← β1·m + (1−β1)·g, v ← β2·v + (1−β2)·g² w ← w − lr·m̂/(√v̂ + eps), m̂ = m/(1−β1ᵗ), v̂ = v/(1−β2ᵗ) With weight_decay = 0 this is plain Adam.

    The first step moves every weight with a non-zero gradient by lr·|g|/(|g|+eps) ≈ lr.

    For row-sparse gradients this is LazyAdam (TensorFlow Addons): a row a step's GradientRows leaves out keeps its weights and its moments m, v unchanged, and is not decayed; t still counts every step. With dense_updates() set, those rows are updated with g = 0 instead (m, v decay, the weights keep moving by the remaining momentum and decay): torch.optim.AdamW on the dense gradient.
    """
    def __init__(self, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
                 weight_decay: float = 0.0, clip_norm: float = 0.0) -> None: ...

class AdaGrad(Optimizer):
    """AdaGrad (Duchi et al.

    2011), as torch.optim.Adagrad with lr_decay 0 and initial_accumulator_value 0: g ← g + weight_decay·w (classic L2 penalty, coupled to the gradient) G ← G + g² (the state slot "sum", per element) w ← w − lr·g/(√G + eps) The first step moves every weight with a non-zero gradient by about lr. Rows a step's GradientRows leaves out keep their weights and G (lazy, like LazyAdam) unless dense_updates() is set, which applies the rule with g = 0. No device form: the CUDA executor updates with it on the host.
    """
    def __init__(self, lr: float = 1e-2, eps: float = 1e-10, weight_decay: float = 0.0, clip_norm: float = 0.0) -> None: ...

class Options:
    """Every switch of vjit, each with its VJIT_* variable; docs/options.md describes every field, its values and default.

    Options(**keywords): the VJIT_* variables, then each keyword as the option of its name
    (Options(threads=2, policy="agenda", fusion=False)); every option is also an attribute,
    read and set by name, with the variable's validation: a bad value raises vjit.UserError.
    Bools are True/False, integers and byte counts int, the others their spelling (str).
    """
    def __init__(self, **options: Union[bool, int, str, None]) -> None: ...
    @staticmethod
    def defaults(**options: Union[bool, int, str, None]) -> "Options":
        """The built-in defaults, ignoring the environment. Then each keyword, as Options() applies them."""
    @staticmethod
    def from_env() -> "Options":
        """The defaults overridden by every VJIT_* variable that is set (and non-empty).

        Throws UserError on an unknown or malformed value.
        """
    def replace(self, **options: Union[bool, int, str, None]) -> "Options":
        """A copy with each keyword applied."""
    def validate(self) -> None:
        """Throws UserError when a field holds a value outside its range (an enum outside its enumerators, threads outside 1 to max_threads, ...); for Options filled in by code rather than parsed."""
    def describe(self) -> str:
        """One line for logs: "fusion=on lazy=on streaming=on policy=agenda ..."."""
    def to_dict(self) -> dict[str, Union[bool, int, str]]:
        """Every option's value by name, in the table's order."""
    fusion: bool
    """fuse chains of elementwise ops (union-find) into JIT kernels; an elementwise op left alone joins a kernel that already reads all its operands, as one more output (`ir/fusion.h`)

    VJIT_FUSION; bool.
    """
    fuse_across_phases: bool
    """an eager elementwise node that only the tasks read (in ∂F, an activation's derivative such as `σ(1 − σ)`) moves into the tasks' fused kernel instead of a separate pass over every vertex (`ir::sink_elementwise_into_core`); needs `VJIT_FUSION`

    VJIT_FUSE_ACROSS_PHASES; bool.
    """
    lazy: bool
    """lazy batching: one GEMM per parameter gradient per batch

    VJIT_LAZY; bool.
    """
    streaming: bool
    """run the eager forward steps on a second thread while the tasks run (Cavs §3.4), on the GPU on a second stream with events for the dependencies; off by default because on two cores the GEMMs already use both and it measured no gain (docs/benchmarks.md, "Ablation"), nor on an H100 (docs/gpu.md)

    VJIT_STREAMING; bool.
    """
    merge_matmuls: bool
    """matmul merging: products of one operand by several parameter matrices (`W_i·x, W_f·x, ...`) become one GEMM over the stacked weights (`ir/merge_matmuls.h`)

    VJIT_MERGE_MATMULS; bool.
    """
    inplace_concat: bool
    """concat in place: a value that one `concat` reads is computed straight into its columns of the concat's buffer (the gate gradients before a weight-gradient GEMM, the `h, c` a Tree-LSTM cell scatters), so the concat copies nothing; on the CPU a `concat` may itself lie in another (Lattice-LSTM's gate gradients inside `[d_gate; d_gates]`, 13 MB a training step at batch 64, hidden 256) (`runtime/memplan.h`)

    VJIT_INPLACE_CONCAT; bool.
    """
    batch_gemms: str
    """batched GEMMs: consecutive steps of a vertex function that are products of a weight and per-vertex vectors of one shape, none reading another's output (a Tree-LSTM's `U_f1·h1` and `U_f2·h2`, and their gradients), are one primitive (`gemm_batched`) instead of one each; the CPU runs the same GEMMs one after another in it, the CUDA device one strided-batched cuBLASLt call where the products' operands lie one stride apart (otherwise one call per product); that call never ran on a GPU, so auto is on for the CPU only

    VJIT_BATCH_GEMMS; lever: auto, on, off.
    """
    epilogue: bool
    """GEMM epilogue: a bias add that follows a product of a weight and a per-vertex vector (`W·x + b`, not fused with other work) is done by the GEMM itself (its output rows start as `b`, beta = 1), saving a pass over the product (`ir::fold_bias_adds`); so is the add of a per-vertex value `y` of the product's shape (`W·x + y`, two terms of a gradient such as a Tree-LSTM's dh), no step of its own (the output rows start as `y`'s; on cuda, where `y` is laid out as the output, cuBLASLt reads it as its C operand); on the CPU also an outer product added to a per-vertex matrix (`x + u·vᵀ`, MV-RNN's matrix gradients), done by the add in one pass without writing the outer product, and where `x` is whole rows of a per-vertex matrix product read by nothing else (MV-RNN's W_Mᵀ·dP), the add computes those rows itself (a GEMM into its output, then u·vᵀ added), so the product is never written whole

    VJIT_EPILOGUE; bool.
    """
    pad_wide_rows: bool
    """a batched value whose rows are a multiple of 256 floats wide gets a leading dimension 16 floats longer, so consecutive rows do not share cache sets; GEMMs over such buffers (hidden 512 and up) measured up to 2× faster (`runtime/memplan.h`)

    VJIT_PAD_WIDE_ROWS; bool.
    """
    pretranspose: str
    """CPU: a weight that per-task products multiply transposed (Y = X·Wᵀ, every forward product of a weight) is copied transposed once per forward pass and those GEMMs read the copy: oneDNN's sgemm runs X·Wᵀ up to 25% slower than X·B on AVX-512 CPUs. Only for products of at most 2048 rows and 16 outputs or more, where the type multiplies at least 128 rows by the weight in the batch (`runtime/cpu_executor.h`); results equal to off within rounding. With `VJIT_GEMM=onednn_bf16`, whose matmul reads Wᵀ through its strides (the copies measured slower there), `auto` is off and `on` is refused

    VJIT_PRETRANSPOSE; lever: auto, on, off.
    """
    infer_kernels: str
    """CPU: a forward pass that no backward follows (`Engine::infer`, `forward` with `RunOptions::backward` off) runs, for each fused kernel of F, a second kernel compiled beside it that writes only the outputs a forward step reads and computes only what they need: the values kept for the backward alone (a Tree-LSTM cell's six gate activations, written beside its `h` and `c`) are neither computed into memory nor written. `CompileInfo::inference_kernels` counts the kernels that differ (`jit/pipeline.cpp`, `ir::forward_only_part`); results equal off bitwise. The CUDA executor runs the full kernels

    VJIT_INFER_KERNELS; lever: auto, on, off.
    """
    row_placement: str
    """where the rows a vertex gathers from its children are read, and its gradients for them written, decided once per program by the plans (`runtime/row_placement.h`); each level does what the one before does, and more. Under every level the memory planner (`VJIT_MEMPLAN`) reads a gather in place where the children's rows lie at a constant stride. `copy`: every other gathered row is copied into the task's rows, and every gradient sent to children is added by its `GatherGrad`. `slices`: as copy, but a gathered child state that a vertex reads only in slices (a Tree-LSTM's `h` and `c`, MV-RNN's vector and matrix) is gathered slice by slice (`ir::gather_slices`: a `gather` with a start), and a gather that a `concat` reads is copied straight into the concat's buffer (with `VJIT_INPLACE_CONCAT`), so `[h_l; h_r]` and MV-RNN's `[A; B]` are never copied a second time; the slices' gradients of one slot are joined again into one add per row (`ir::join_gather_grads`); the objective equals copy's bit for bit. `tables`: as slices, and rows are read and written where they lie, through tables of row addresses (`KernelArgs::row_tables`), in three ways. (1) A gathered child value that only per-vertex products and fused kernels read (MV-RNN's A and B; a Tree-LSTM's children's `c`) is not copied: the products and kernels read each child's row where it lies (a `concat` of such gathers that a product takes as its right operand is read in its parts, the product splitting its inner dimension: results equal the reference to rounding, not copy's bits), and such values get no buffer (`runtime/row_pointers.h`); in the backward, a child's whole gradient that products, fused kernels or elementwise nodes compute (a Tree-LSTM's `dh` and `dc` of a child) is written straight into the child's scatter-gradient row where that row has no other contribution, and into its own row, then added by the `GatherGrad`, where it has (a shared child). (2) A part of a child's scattered row that a fused kernel computes and a parent gathers into a buffer of its own (a Tree-LSTM's `h` into the parent's `[h_l; h_r]`; the `gather_sum` of a chain's predecessor or a lattice word's start character) is written there by that kernel as well, a second output pointed row by row at the parent's row (`runtime/forwarding.h`; a child with several parents forwards to the one whose gathers take most of its row, the others copy). (3) In training, a fused kernel of ∂F that computes part of the gradient a vertex sends to its children (a lattice character's `dc`, a Tree-LSTM's `dc_l` and `dc_r`) runs a second kernel, compiled beside it, that adds that part straight into each child's scatter-gradient row (`codegen::accumulating_spec`); the `GatherGrad` adds only the rest. With tables the Tree-LSTM's and Tree-GRU's layouts copy nothing in either pass (Tree-LSTM training, batch 64, hidden 256: the layout's copies per step 9.9 MB with copy → 0) and the chains' and lattices' inference copies drop 5× and more (docs/benchmarks.md, "Memory layout"). `auto`: each device's best: `tables` on the CPU; `copy` on cuda, the only level the CUDA device takes (its kernels were never run on a GPU with gathers of slices or row tables: `slices` and `tables` are refused there, naming the device)

    VJIT_ROW_PLACEMENT; choice: copy, slices, tables, auto.
    """
    child_rows: str
    """a children block (`gather_all`) whose padding rows change no result (`ir/child_rows.h`: the Child-Sum Tree-LSTM's, forward and backward) is computed in child row space, one row per actual child instead of `max_children` rows per vertex: its products are one GEMM over the children's rows, its fused kernels run over them, `sum_rows` adds each vertex's own, so a vertex pays for the children it has; never run on a GPU, so auto is on for the CPU only. Off: every block is computed padded

    VJIT_CHILD_ROWS; lever: auto, on, off.
    """
    param_layout: str
    """CPU: when an engine is built, it lays the Model's parameters out in their one block of memory so that the stacked weights of merged products (`VJIT_MERGE_MATMULS`: `[W_i; W_f; W_o; W_u]`) lie one right after another in order, and the GEMMs read them there: nothing is copied for them (`runtime/param_layout.h`). Each stacked weight asks for its parameters in sequence; the sequences that agree join into runs (`layout/param_runs.h`), largest first, and one that conflicts with those before it (two types stacking the same weights in different orders) is copied every pass, as with off. `CompileInfo::stacked_weights` and `stacked_in_place` count them; vjit-bench's `stacked_weight_bytes` what is still copied. The Model is laid out only when it does not already hold the runs so; values never change, and results equal off bit for bit. Off: every stacked weight is copied into the arena once per pass. The CUDA executor stacks its own copies on the device

    VJIT_PARAM_LAYOUT; lever: auto, on, off.
    """
    policy: str
    """batching policy of the scheduler

    VJIT_POLICY; choice: depth, agenda, frontier, ratio, fsm.
    """
    memplan: str
    """the memory planner that lays out each batch (`runtime/memplan.h`): `copy` packs rows and reads a gather in place where the children's rows already lie at a constant stride in one buffer (and only the task reads the gathered value), copying the others; `padded` is a test layout (every row padded past its width, every gather a copy, slower) that proves the executor follows the layout; `pqtree` (ED-Batch's PQ-tree layout, planned per batch at run time) orders each type's rows so that a task's children in a gather slot are consecutive and in the task's order wherever the constraints allow (`layout/aligned_order.h` over a Booth–Lueker PQ-tree, `layout/pq_tree.h`): those gathers, and `gather_sum`s whose rows have one variadic child, are read in place; steps outside the tasks that read them run task by task; where the children have no other parent, the backward computes the gather's gradient straight into their scatter-gradient rows. A constraint that conflicts is dropped and costs a copy, never a wrong result. CPU executor only (with `VJIT_DEVICE=cuda` it is refused, naming the reason); what it measured is in docs/benchmarks.md, "Memory layout". `auto` measures instead of assuming: copy and pqtree take turns on the engine's first 8 batches (copy first; a batch's time is its planning, forward and, when it trains, backward, per vertex; each one's first batch only warms up and is not counted), then the one with the lower median lays out every later batch, copy on a tie (`Engine::memory_planner()` and vjit-bench's `memory_planner` say which); it needs `VJIT_DETERMINISTIC=0`, since a choice made by timing could change the last bits of the weight gradients from run to run (otherwise refused, saying so); with `VJIT_DEVICE=cuda` it is copy

    VJIT_MEMPLAN; choice: copy, padded, pqtree, auto.
    """
    device: str
    """where plans run; `cuda` runs them on the GPU (the CUDA executor) or fails naming what is missing (driver library, device, NVRTC); `auto` uses the GPU when one can run them, else runs on the CPU and says why once

    VJIT_DEVICE; choice: cpu, cuda, auto.
    """
    tf32: str
    """GPU matrix products on TF32 tensor cores (10-bit mantissa: about 1e-3 relative per product; the Tree-LSTM's gradients within 2e-2 of the reference); FP32 when off

    VJIT_TF32; lever: auto, on, off.
    """
    cuda_graphs: str
    """each forward and backward captured on the GPU's stream and run as one CUDA graph launch; a pass whose structure (kernels, blocks, product shapes, copies and fills, in order) was seen before updates that one's executable graph in place instead of instantiating a new one (`runtime/cuda_graph.h`); checked only through the driver double, never run on a GPU, so off by default (docs/gpu.md); refused with `VJIT_STREAMING=on` (one stream is captured)

    VJIT_CUDA_GRAPHS; lever: auto, on, off.
    """
    cuda_resident_params: str
    """parameters and the optimizer's state stay on the GPU between steps: an SGD or Adam step is one launch each for Σ g², the preview and the update over every parameter (a table of parameter rows in device memory) instead of one each per parameter group, and the Model's values are copied back only when read (`Engine::download_parameters()`, a checkpoint saved, the engine destroyed, a step run on the host); with `VJIT_CUDA_GRAPHS=on` the step's kernels run as two graph launches; checked only through the driver double, never run on a GPU, so off by default (docs/gpu.md)

    VJIT_CUDA_RESIDENT_PARAMS; lever: auto, on, off.
    """
    threads: int
    """CPU worker threads (with `VJIT_DEVICE=cuda`, those of the host's optimizer step); a larger value is refused, naming it, before a pool is sized by it (more threads only oversubscribe any machine), and a thread the system cannot start is an error naming it (and the limit hit), not an abort

    VJIT_THREADS; int.
    """
    infer_shards: int
    """`Engine::infer` on the CPU splits a batch into this many groups of consecutive samples (fewer when the batch has fewer samples) and infers them at once, each by an engine of its own (one thread, same program, model and options) on a pool of min(groups, `VJIT_THREADS`) threads; the groups' pushes, objective, grown batch and counters are put back together in sample order (times in `stats()` are then thread-seconds). Every serial part of a call (scheduling, planning, small kernels and copies, growth bookkeeping) then runs on all cores at once, where one engine splits only its larger kernels; each group's GEMMs are smaller. Each sample's result is that of its group inferred as one batch (equal to one engine's to float rounding, tested); errors name the sample by its index in the caller's batch. Growth callbacks of different groups run at the same time on different threads: they must be safe to call concurrently (`GrowthStep::sample_index` is the caller's index). `forward`, `train_step` and the GPU are never split. Measured: greedy decoding at hidden 64, batch 64, 2 threads, about 1.2× the samples/s of one engine (docs/benchmarks.md, "Greedy decoding")

    VJIT_INFER_SHARDS; int.
    """
    max_memory: int
    """bounds the buffers of a batch: the vertex values, and their gradients when it trains. A batch that needs more fails before it runs, naming the bytes it needs and the bound, and the engine runs the next (smaller) batch; on the CPU the two arenas together never hold more than the bound (their growth is capped). Parameters, their gradients and the optimizer state are the model's and not counted; the GPU executor is checked per batch but its device arenas still grow with slack (to 1.5× a batch's need, or twice their size)

    VJIT_MAX_MEMORY; bytes.
    """
    deterministic: str
    """training and inference on the CPU give bitwise the same parameters, losses and outputs whatever `VJIT_THREADS` is (same seed, same data, same back end and machine): each GEMM is cut into blocks whose shape depends only on the product's size (`GemmSplit::Fixed`: one block below 0.5 MFLOP, else two, or four from 32 MFLOP; each block one single-threaded library call, the same blocks on one thread), and the per-vertex products summed into a weight gradient run in fixed row blocks added in order; off: blocks follow the thread count (a GEMM can use every thread; results change in the last bits with the thread count). Cost of on, 2 threads: see docs/benchmarks.md, "Determinism across thread counts"

    VJIT_DETERMINISTIC; lever: auto, on, off.
    """
    isa: str
    """JIT target: `avx512` or `avx2` on x86-64, `neon` on AArch64, `scalar` the reference kernels (`auto`: best the CPU has)

    VJIT_ISA; choice: auto, avx512, avx2, neon, scalar.
    """
    gemm: str
    """matrix-product back end (`auto`: chosen by measurement, never `onednn_bf16`); `onednn_bf16` runs every product on operands rounded to bfloat16 with float accumulation (oneDNN's matmul primitive, one per product shape with the row count left to run time, operands converted with AVX-512 BF16; CPUs with AVX-512 BF16 or AMX only, elsewhere an error that says so; `VJIT_PRETRANSPOSE` is off with it): every example model's objective and gradients stay within 5e-2 of the reference, Tree-FC's within 0.25 (tested); on a Zen 4 the SST Tree-LSTM ran 1.27–1.41× the samples/s of `onednn` at hidden 256 and 1.50–1.79× at hidden 512 (docs/benchmarks.md, "CPU speed")

    VJIT_GEMM; choice: auto, onednn, openblas, blis, libxsmm, onednn_bf16, reference.
    """
    vertex_gemm: str
    """CPU: the back end of the products run one per vertex (MV-RNN's W_M·[A; B] and the rows of W_Mᵀ·dP; not the weight gradient that sums six vertices per GEMM, nor any product over the rows of a weight): `auto` is `libxsmm` (its JIT kernels cost less per call than oneDNN's sgemm at 64×64) where vjit was built with it and `VJIT_GEMM` is `auto`, else `VJIT_GEMM`'s back end; `same` is `VJIT_GEMM`'s back end; a name is that back end (an error naming the variable where it cannot be used). Measured: MV-RNN training 1.04× with libxsmm (alternating runs, docs/benchmarks.md)

    VJIT_VERTEX_GEMM; choice: auto, same, onednn, openblas, blis, libxsmm, reference.
    """
    cache_dir: str
    """where learned batching policies (`fsm`) are saved and loaded, per program signature (empty: not saved; written atomically and durably, `io/atomic_file.h`; a file that does not load is reported once, moved aside to `<file>.rejected` and the policy learned again; a failed save is reported and leaves nothing behind), and where compiled CUDA modules are kept (keyed by source, architecture and NVRTC version; atomic writes, checksummed; empty: the user's cache directory, `$XDG_CACHE_HOME/vjit` or `~/.cache/vjit`); the CPU JIT kernels (x86, AArch64) are cached in memory

    VJIT_CACHE_DIR; string.
    """
    dist_timeout: int
    """how long a collective of `vjit::Distributed` (data-parallel training over MPI) waits for the other ranks before it throws `DistributedError` naming the collective and the rank: a rank that died or hangs fails the others in bounded time instead of hanging them (`include/vjit/distributed.h`)

    VJIT_DIST_TIMEOUT; int.
    """
    dist_nccl: str
    """data-parallel training on GPUs (`VJIT_DEVICE=cuda`) sums the dense gradients with `ncclAllReduce` between the GPUs; off, or `auto` where vjit was built without NCCL: through host memory over MPI, as on the CPU (`jit/gradient_exchange.h`, `runtime/nccl.h`); `on` without NCCL is refused when the Engine is built

    VJIT_DIST_NCCL; lever: auto, on, off.
    """
    dist_overlap: str
    """data-parallel training on the CPU starts each dense gradient bucket's sum during the backward pass, as soon as the last step that writes one of its gradients has run (the lazy weight-gradient GEMMs, type by type), polls it between the backward's steps and waits for it before the optimizer step; the same sums, bitwise (`jit/gradient_exchange.h`). The CUDA executor does not overlap

    VJIT_DIST_OVERLAP; lever: auto, on, off.
    """
    profile: bool
    """when an Engine is destroyed, a summary table on stderr (counters since the last `reset_stats`): the wall time inside the engine's calls and the phases within it (schedule+plan, forward, backward, optimizer; gemm, elementwise and copy as parts of forward+backward), tasks issued against the ED-Batch lower bound (on with this option), kernel-cache and FSM-policy-cache hits, and the 20 costliest steps (total ms, calls, rows per call, % of the wall time; pass, vertex type, phase, op or fused kernel, with the kernel an inference pass runs beside it where `VJIT_INFER_KERNELS` makes a smaller one). CUDA: each step is timed until the GPU has run it (the host waits for the device after every step, so the run is slower and its steps' times are the GPU's plus a launch each); with `VJIT_CUDA_GRAPHS` the passes run as graphs after their steps are issued and the table says that no step was timed. See docs/guide.md, "Profiling"

    VJIT_PROFILE; bool.
    """
    perf_map: bool
    """append `<start hex> <size hex> vjit_<kernel>` to `/tmp/perf-<pid>.map` for every x86 JIT kernel as it is generated, and for a kernel an earlier engine of the process generated (and cached) without the option, so `perf report` names JIT code; each kernel once per process

    VJIT_PERF_MAP; bool.
    """
    trace: str
    """write a Chrome trace-event JSON file (Perfetto, `chrome://tracing`) of the run: one event per engine call, schedule and plan, task, GEMM (M, N, K), fused kernel, copy, other kernel, optimizer step and, where a step splits its rows over the pool, row block; args vertex type, rows, cols, bytes; one track per thread. The file is written (atomically) when the Engine is built (an unwritable path is a `UserError` then), by `Engine::flush_trace()` and when the Engine is destroyed; at most 524288 events are kept (later ones are counted in `otherData.dropped_events`). CPU executor: every event; CUDA executor: the engine's events only. See docs/guide.md, "Profiling"

    VJIT_TRACE; string.
    """
    check_finite: bool
    """the CPU executor checks every value each forward step writes (row by row, after the step) and throws a `UserError` at the first NaN or ±Inf in execution order, naming the sample (index and name), the vertex index in the sample, the vertex type, the op (`%12 log`) and the value; a fused kernel is named with its ops (only its outputs are stored, so an intermediate that goes non-finite and comes back finite, `tanh(log 0)`, is not seen). The engine stays usable. Off costs nothing (one branch per step); on, see docs/benchmarks.md, "Cost of the non-finite checks". With `VJIT_DEVICE=cuda` (or `auto` choosing the GPU) the Engine refuses it at construction. Independently of it, an optimizer step never writes a non-finite parameter or state value: SGD, Adam and AdaGrad preview the update and apply it only when every value stays finite, otherwise the step is an error naming the parameter, element, value and step, with the model and optimizer state unchanged

    VJIT_CHECK_FINITE; bool.
    """
    log: str
    """to stderr: `passes` the IR after each lowering pass, `schedule` the tasks of each batch (type, vertices, policy), `kernels` each kernel compiled or found in the cache (name, ISA, code bytes), `primitives` each call's primitives (GEMMs, fused kernels, row copies, ...: kind, pass, vertex type, task, rows, what ran) after a line counting them by kind, `all` everything

    VJIT_LOG; choice: off, passes, schedule, kernels, primitives, all.
    """

class FsmPolicyInfo:
    """What learning a policy did (all 0 for a policy built from a table)."""
    @property
    def encoding(self) -> str:
        """of the frontier into a state: "critical", "sort", "max" or "base\""""
    @property
    def num_types(self) -> int:
        """vertex types of the program it was learned for"""
    @property
    def states(self) -> int:
        """states in its Q table"""
    @property
    def learning_seconds(self) -> float:
        """time spent learning"""
    @property
    def episodes(self) -> int:
        """learning episodes run"""
    @property
    def instances(self) -> int:
        """instances of the batch it learned on"""
    @property
    def tasks(self) -> int:
        """its tasks on that batch"""
    @property
    def lower_bound(self) -> int:
        """that batch's lower bound on tasks"""
    @property
    def departures(self) -> int:
        """states whose action is not the critical-path choice"""

class FsmPolicy:
    """ED-Batch's learned batching policy (ICML'23): a finite-state machine over the types on the frontier, learned by Q-learning.

    A cheap handle: copies share one immutable policy.
    """
    @staticmethod
    def learn(batch: GraphBatch, num_types: int) -> FsmPolicy:
        """Learns on up to 32 instances of batch (a sample of the training data), whose vertex types lie in [0, num_types) (Program::num_types())."""
    @staticmethod
    def load(path: str, signature: str) -> FsmPolicy:
        """the policy save() wrote (see save)"""
    def save(self, path: str, signature: str) -> None:
        """A small versioned JSON file.

        signature is Program::signature_string(): load rejects a file saved for another program, of another format version or malformed, naming the file and what differs.
        """
    def info(self) -> FsmPolicyInfo:
        """what learning it did"""
    def describe(self) -> str:
        """One line, e.g.

        "fsm policy (critical encoding, 3 types): 41 states, 2
        departures; learned in 0.35 s, 300 episodes on 32 instances: 27 tasks,
        lower bound 25".
        """

class ScheduleSummary:
    """What a batching policy makes of one batch."""
    @property
    def tasks(self) -> int:
        """batched evaluations of F (the backward pass replays them)"""
    @property
    def lower_bound(self) -> int:
        """ED-Batch's lower bound: no schedule has fewer tasks."""
    @property
    def fsm_fallbacks(self) -> int:
        """fsm: steps its table did not decide"""
    @property
    def schedule_seconds(self) -> float:
        """time to choose the tasks"""

def summarize_schedule(batch: GraphBatch, num_types: int, policy: str, fsm: Optional[FsmPolicy] = None) -> ScheduleSummary:
    """Schedules batch (vertex types in [0, num_types)) with policy, one of option_values::policy (vjit/options.h); "fsm" needs fsm.

    Throws UserError for an unknown policy, an out-of-range type or child, or a cycle.
    """

class GrowthStep:
    """What a growth callback sees of one just-evaluated vertex, and how it adds vertices to that vertex's sample.

    Valid only while the growth callback it was passed to runs.
    """
    @property
    def sample_index(self) -> int:
        """in the batch passed to the engine"""
    @property
    def vertex(self) -> int:
        """its index in the sample"""
    @property
    def sample(self) -> Sample:
        """as grown so far (a copy)"""
    @property
    def num_pushes(self) -> int:
        """how many values the vertex pushed"""
    def push(self, k: int = 0) -> npt.NDArray[np.float32]:
        """its k-th pushed value, flattened row-major (a copy)"""
    def add_vertex(self, type: int, children: Sequence[int] = ..., token: int = -1, label: int = -1,
                   features: Sequence[float] = ...) -> int:
        """Adds a vertex to this sample and returns its index.

        Throws UserError for a type outside the program, a child index that does not exist yet, or a sample already at the engine's growth limit. The rest (arity, shapes, tokens, labels) is checked with the next round's batch.

        `features`: the vertex's feature row, as the same, for a whole Vertex (features included).
        """

class Engine:
    """Runs batches of graphs through a Program's vertex functions, compiled once into plans: forward, backward, train_step, infer.

    See the comment at the top of vjit/engine.h for threads.

    Engine(program, options=None, **keywords): `options` (a vjit.Options; by default the
    VJIT_* variables), then each keyword as the option of that name (threads=2,
    policy="agenda", fusion=False, ...; vjit.option_names()). Every call releases the GIL:
    Python threads may run engines of their own at once.
    """
    train_steps: int
    """How many train_step calls this engine made: each draws its dropout seed from this count, so a resumed run sets it to continue the same masks."""
    def __init__(self, program: Program, options: Optional[Options] = None,
                 **keywords: Union[bool, int, str, None]) -> None: ...
    def train_step(self, batch: GraphBatch, optimizer: Optimizer) -> float:
        """forward (training, a fresh dropout seed per step), backward, optimizer step.

        When the step fails (a non-finite gradient) after a forward pass whose objective is not finite, the UserError also names the first non-finite value of that pass (sample, vertex, op): the engine runs it again with the check of VJIT_CHECK_FINITE, on the CPU, only then.
        """
    def forward(self, batch: GraphBatch, training: bool = True, backward: bool = True, seed: int = 0) -> float:
        """Runs F over the batch.

        Returns the objective; last_result() holds it with the pushed values. The engine keeps what backward() needs, so the batch may be destroyed once forward() returns.
        """
    def backward(self) -> None:
        """∂F for the last forward (which must have had RunOptions::backward set); the gradients are then in gradients()."""
    def infer(self, batch: GraphBatch) -> Evaluation:
        """Forward without dropout or gradients; returns objective and pushed values.

        With Options::Tuning::infer_shards > 1 (VJIT_INFER_SHARDS) on the CPU, the batch is inferred in that many groups of consecutive samples at once, each by an engine of its own on one thread; the results come back in sample order, and growth callbacks of different groups run concurrently.
        """
    def last_result(self) -> Evaluation:
        """The last forward's objective and pushes; UserError before any forward. A copy."""
    def gradients(self) -> list[npt.NDArray[np.float32]]:
        """One vector per parameter, in the model's order; UserError before any backward. Copies, of the parameters' shapes."""
    def upload_parameters(self) -> None:
        """Copies the Model's values to where the engine keeps the parameters, after they were changed from outside (e.g.

        by load_parameters). On the CPU the engine reads the Model itself and this does nothing; on the GPU it uploads.
        """
    def download_parameters(self) -> None:
        """Copies the parameters' values into the Model where the engine keeps newer ones: with VJIT_CUDA_RESIDENT_PARAMS the GPU's values after train_step reach the Model only through this call (one copy from the device), a checkpoint saved (save_checkpoint calls it) or the engine destroyed.

        Call it before reading the Model's values yourself, and before changing a part of them for upload_parameters(). Does nothing where the Model is current (on the CPU; on the GPU without that option; after a call already made).
        """
    def stats(self) -> dict[str, float]:
        """a copy, taken under the engine's lock"""
    def reset_stats(self) -> None:
        """zeroes stats()"""
    @property
    def options(self) -> Options:
        """The options the engine runs: the device chosen (never auto) and every lever resolved for it (Options::resolve: on or off, never auto)."""
    @property
    def memory_planner(self) -> str:
        """The memory planner that lays batches out (VJIT_MEMPLAN): options().tuning.memplan, except auto's choice once made ("copy" or "pqtree"; "auto" while the two still take turns, its first 8 timed batches), and "copy" for auto on the GPU."""
    @property
    def fused_groups(self) -> int:
        """fused elementwise kernels in the plans (F and ∂F)"""
    def set_fsm_policy(self, policy: FsmPolicy) -> None:
        """The learned policy used when options().policy is Fsm (ED-Batch learns one per program).

        Without one, the engine loads it at start from options().cache_dir when a policy for this program was saved there, and otherwise learns it on the first batch it sees (and saves it there). A policy learned for another number of vertex types than the program's is refused (UserError naming both counts) and the one in place kept; a cached one is set aside and learned again.
        """
    def fsm_policy(self) -> Optional[FsmPolicy]:
        """The learned policy used when options().policy is Fsm (ED-Batch learns one per program).

        Without one, the engine loads it at start from options().cache_dir when a policy for this program was saved there, and otherwise learns it on the first batch it sees (and saves it there). A policy learned for another number of vertex types than the program's is refused (UserError naming both counts) and the one in place kept; a cached one is set aside and learned again.
        """
    def learn_fsm_policy(self, batch: GraphBatch) -> FsmPolicy:
        """Learns the policy on batch (ED-Batch samples 32 instances of it)."""
    def save_fsm_policy(self, path: str) -> None:
        """Saves with the program's signature; load rejects a file of another program."""
    def load_fsm_policy(self, path: str) -> None:
        """Saves with the program's signature; load rejects a file of another program."""
    def set_growth(self, type: int, callback: Optional[Callable[[GrowthStep], None]]) -> None:
        """Graphs that grow during execution (vjit/growth.h): after each round of a forward, callback is called for every vertex of type that round evaluated first, and may add vertices to its sample; the rounds go on until none is added.

        A null callback makes the type static again. UserError for a type outside the program. An exception the callback throws ends the call as a UserError naming the sample, vertex and type, with the callback's exception nested in it (std::rethrow_if_nested).

        `callback(step)` gets a vjit.GrowthStep; None makes the type static again. The callback runs with the GIL held; an exception it raises ends the engine's call as that exception itself, with a note naming the sample, vertex and type.
        """
    def set_growth_limit(self, max_vertices_per_sample: int) -> None:
        """The most vertices growth may bring one sample to (default 4096): an add_vertex past it is a UserError, so a callback that never stops fails instead of running forever."""
    def grown_batch(self) -> GraphBatch:
        """The last forward's batch as it ended, with every vertex growth added: the graph last_result() and gradients() belong to.

        UserError when the last forward had no growing type (its batch is the caller's own). (a copy)
        """

def option_names() -> list[str]:
    """The option names accepted by apply_flag, in table order: "fusion", "lazy", ..."""
def save_checkpoint(path: str, engine: Engine, optimizer: Optional[Optimizer] = None,
                    metadata: Mapping[str, str] = ...) -> None:
    """Saves the parameters of the engine's model, the engine's train_steps(), the program's signature and user_metadata; with optimizer, also the state the engine keeps for it (slots and step count; zeros and step 0 when it has taken no step with this engine yet) and its kind and hyper-parameters.

    What it saves is copied under the engine's lock (one step's weights and state, as a train_step on another thread leaves them); the file is written after the lock is released.
    """
def load_checkpoint(path: str, engine: Engine, optimizer: Optional[Optimizer] = None) -> dict[str, str]:
    """Resumes from a checkpoint of save_checkpoint: the parameters go into the engine's model (and to the GPU when the engine runs there), train_steps() is restored, and with optimizer the saved state is adopted by it and handed to the engine, so that the next train_step(batch, *optimizer) continues exactly where the saved run was (bit for bit, given the same batches and hyper-parameters; the optimizer's own settings are kept, the saved ones are only recorded).

    Without optimizer the engine's optimizer state is cleared (the next step starts a fresh one). Returns the user's metadata. The file must hold optimizer state when optimizer is given, of the same kind and slots.
    """
def save_parameters(path: str, model: Model, metadata: Mapping[str, str] = ...) -> None:
    """Parameters only, as PyTorch's safetensors.torch.save_file(model.state_dict()) writes them: one F32 tensor per parameter, named and shaped as it, the checksums ("vjit.checksum", "vjit.crc32.<name>", as above) and metadata (keys not starting with "vjit.") when given."""
def load_parameters(path: str, model: Model) -> None:
    """Reads the parameters from any safetensors file with exactly one F32 tensor per parameter of the model, of its name and shape, and no other tensors (of a vjit checkpoint, the optimizer.

    - tensors are skipped); metadata is not needed. An engine running on the GPU needs Engine::upload_parameters() afterwards. It writes the Model without any engine's lock: call it when no engine of this Model runs on another thread (load_checkpoint takes the engine's lock).
    """

class _Models:
    """The model zoo of vjit/models.h, built in C++ (the reference for Python models)."""
    class Bundle:
        """A model with its data. model outlives program, which points to it."""
        name: str
        """the model's name, as given to make_model"""
        model: Model
        """the parameters"""
        program: Program
        """the vertex types"""
        train: GraphBatch
        """training samples"""
        test: GraphBatch
        """test samples"""
        dev: GraphBatch
        """from Config::dev_path (tree models), else empty"""
        vocab: Vocabulary
        """The words of the token ids (Vertex::token) when the data has words: the tree models' treebanks (the built-in one or SST files; tree_fc only from files) and the text files of var_lstm and bilstm_tagger; empty (no <unk> either) where the data is generated ids with no words."""
        classifier_types: list[int]
        """Vertex types whose first push is class logits scored against the label."""
    def model_names(self) -> list[str]:
        """The names make_model takes, in the order listed above."""
    def make_model(self, name: str, hidden: int = 64, embed: int = 0, dropout: float = 0.0, seed: int = 1,
                   train_samples: int = 1000, test_samples: int = 200, data_path: str = "", dev_path: str = "",
                   test_path: str = "", vocab_limit: int = 20000) -> "_Models.Bundle":
        """A model of the zoo with its data (vjit::models::Config's fields as keywords)."""

models: _Models
