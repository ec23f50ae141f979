#pragma once
// vjit's IR: one vertex function in SSA form. Node i defines value i; values are
// per-vertex tensors (the batch dimension is implicit) except Param nodes and
// Concats of them (stacked weights), which are uniform across vertices. Sink nodes (scatter, push, loss and the
// gradient sinks of the backward function) define no value and are never
// removed by DCE.
#include <cstdint>
#include <string>
#include <vector>

#include "vjit/shape.h"

namespace vjit::ir {

// X(name, kind). Each op's semantics and gradient, one line each:
//   Gather         src   value = what child `slot` scattered            grad: GatherGrad(slot)
//   GatherSum      src   Σ of what the variadic children scattered      grad: GatherGrad(-1) to each of them
//                        (the children after the gather(k) slots; zeros when there are none)
//   GatherAll      src   [K, d]: row k = variadic child k's scatter,     grad: GatherGrad(-2), row k to child k
//                        zero rows past the last child (K = slot)
//   Pull           src   the vertex's feature row [d]                    no grad
//   PullEmbedding  src   row `token` of table param `param`              grad: EmbeddingGrad
//   Param          src   parameter `param` (uniform)                     grad: ParamGrad
//   Constant       src   every element = scalar                          no grad
//   Neg/Sigmoid/Tanh/Relu/Exp/Log/Sqrt  elementwise unary
//   Step           unary 1 where x > 0 else 0 (relu's derivative)        no grad
//   Scale          unary x * scalar
//   AddScalar      unary x + scalar
//   Dropout        unary x * mask / (1 - scalar); the mask is drawn per (sample, vertex, element)
//                        from the run's seed and key `slot` (the forward node id), so ∂F redraws it
//   Add/Sub/Mul/Div      elementwise; one operand may be a scalar, a Param of the other's shape, or a
//                        vector [n] broadcast over the rows of an [m, n] matrix
//   Concat         flat concatenation of the operands (vectors, or matrices along rows)
//   Slice          flat elements [start, start + len) of a vector (or rows of a matrix)
//   Reshape        the same elements under another shape (storage is row-major and flat)
//   Pad            inverse of Slice: x placed at `start` in zeros of this node's shape
//   Sum            sum of all elements → scalar                          grad: Broadcast
//   SumRows        [m, n] → [n]                                          grad: BroadcastRows
//   Broadcast      scalar → this node's shape
//   BroadcastRows  [n] → [m, n]
//   MatMul         op(a) · op(b), op = transpose when trans_a/trans_b; a vector on the right is a
//                  column, on the left a row; the result drops the vector dimension
//   Outer          a [m], b [n] → [m, n] = a bᵀ
//   SoftmaxCE      −log softmax(logits)[label] → scalar; 0 when the vertex has no label
//   SoftmaxCEGrad  (softmax(logits) − onehot(label)) · g, with g the scalar upstream gradient
//   Scatter        sink: the vertex's output read by its parents' gather
//   Push           sink: a per-vertex output returned to the caller
//   Loss           sink: adds a scalar to the objective
//   Fwd            src (∂F only): forward value `slot` of the same vertex
//   ScatterGrad    src (∂F only): the gradient accumulated into this vertex's scatter by its parents
//   GatherGrad     sink (∂F only): adds the operand into the scatter gradient of child `slot`
//                  (-1: of every child, -2: row k to child k)
//   ParamGrad      sink (∂F only): adds the operand into the gradient of parameter `param`
//   EmbeddingGrad  sink (∂F only): adds the operand into row `token` of table `param`'s gradient
#define VJIT_IR_OPS(X) \
  X(Gather, Source)          \
  X(GatherSum, Source)       \
  X(GatherAll, Source)       \
  X(Pull, Source)            \
  X(PullEmbedding, Source)   \
  X(Param, Source)           \
  X(Constant, Source)        \
  X(Neg, Unary)              \
  X(Sigmoid, Unary)          \
  X(Tanh, Unary)             \
  X(Relu, Unary)             \
  X(Exp, Unary)              \
  X(Log, Unary)              \
  X(Sqrt, Unary)             \
  X(Step, Unary)             \
  X(Scale, Unary)            \
  X(AddScalar, Unary)        \
  X(Dropout, Unary)          \
  X(Add, Binary)             \
  X(Sub, Binary)             \
  X(Mul, Binary)             \
  X(Div, Binary)             \
  X(Concat, Shape)           \
  X(Slice, Shape)            \
  X(Pad, Shape)              \
  X(Reshape, Shape)          \
  X(Sum, Reduce)             \
  X(SumRows, Reduce)         \
  X(Broadcast, Shape)        \
  X(BroadcastRows, Shape)    \
  X(MatMul, Contract)        \
  X(Outer, Contract)         \
  X(SoftmaxCE, Loss)         \
  X(SoftmaxCEGrad, Loss)     \
  X(Scatter, Sink)           \
  X(Push, Sink)              \
  X(Loss, Sink)              \
  X(Fwd, Source)             \
  X(ScatterGrad, Source)     \
  X(GatherGrad, Sink)        \
  X(ParamGrad, Sink)         \
  X(EmbeddingGrad, Sink)

enum class Op : uint8_t {
#define VJIT_X(name, kind) name,
  VJIT_IR_OPS(VJIT_X)
#undef VJIT_X
};

enum class OpKind : uint8_t { Source, Unary, Binary, Shape, Reduce, Contract, Loss, Sink };

const char* op_name(Op op);
OpKind op_kind(Op op);
inline bool is_sink(Op op) { return op_kind(op) == OpKind::Sink; }
// Unary and binary ops that map elements to elements (fusion candidates).
inline bool is_elementwise(Op op) {
  OpKind k = op_kind(op);
  return k == OpKind::Unary || k == OpKind::Binary;
}

using ValueId = int;

struct Node {
  Op op = Op::Constant;
  Shape shape;           // per-vertex shape of the value (scalar for sinks)
  bool uniform = false;  // same for every vertex: a Param, or a Concat of uniform values (merge_matmuls)
  std::vector<ValueId> args;
  int slot = 0;          // Gather/GatherGrad child slot, GatherAll K, Fwd value id, Dropout key
  int param = -1;        // Param, PullEmbedding, ParamGrad, EmbeddingGrad
  int start = 0;         // Slice, Pad
  double scalar = 0.0;   // Constant, Scale, AddScalar, Dropout rate
  bool trans_a = false;  // MatMul
  bool trans_b = false;

  static Node make(Op op, Shape shape, std::vector<ValueId> args = {}) {
    Node n;
    n.op = op;
    n.shape = shape;
    n.args = std::move(args);
    return n;
  }
};

struct Function {
  std::string name;
  std::vector<Node> nodes;

  ValueId add(Node node) {
    nodes.push_back(std::move(node));
    return ValueId(nodes.size()) - 1;
  }
  const Node& operator[](ValueId id) const { return nodes.at(size_t(id)); }
  int size() const { return int(nodes.size()); }
};

// Readable text form, one node per line: `%5 = tanh(%4) : [64]`.
std::string to_string(const Function& function);
std::string to_string(const Function& function, ValueId id);

// Checks SSA order, operand counts, attributes and shapes; throws InternalError
// with the printed node on a violation.
void verify(const Function& function);

}  // namespace vjit::ir
