#pragma once
// The op table of the IR (vjit/ir.h declares Op; its values are the
// compiler's): every op with its kind, execution class, fusability, arity and
// attributes, the semantics and gradient of each in one line, and the queries
// the passes, code generators and executors make of them. The ops of the
// derivative function ∂F alone (Fwd, ScatterGrad, GatherGrad, ParamGrad,
// EmbeddingGrad) are here too: autodiff makes them, no Builder method does.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>

#include "vjit/ir.h"

namespace vjit::ir {

// The op table: X(name, kind, exec, fusable, arity, flops, attributes...), one row per op.
//   kind        the operand pattern (OpKind): Source ops read none, Unary one, ...
//   exec        how the executor runs it (ExecClass): View (no kernel; the value
//               aliases memory that exists already), Copy (data movement between
//               vertices, rows or buffers), Compute (everything else)
//   fusable     whether it may join a fused elementwise kernel (codegen lowers every
//               fusable op; its scalar semantics are in ir/op_semantics.h)
//   arity       how many operands it reads (-1: any number but none, Concat's)
//   flops       how its useful floating-point operations are counted (FlopRule,
//               ir/flops.h)
//   attributes  the Node fields it reads (Attr); every other attribute stays at its
//               default, which verify() checks and CSE relies on
// Each op's semantics and gradient, one line each:
//   Gather         src   value = what child `child_slot` scattered       grad: GatherGrad(Slot, child_slot, start)
//                  from flat element `start` on, as many as the shape holds (0 and all of it as
//                  built; ir::gather_slices makes the others from slices of a gather)
//   GatherSum      src   Σ of what the variadic children scattered       grad: GatherGrad(EveryVariadic)
//                        (the children after the gather(k) slots; zeros when there are none)
//   GatherAll      src   [K, d]: row k = variadic child k's scatter,     grad: GatherGrad(VariadicRows)
//                        zero rows past the last child (K = max_children)
//   Pull           src   the vertex's feature row [d]                    no grad
//   PullEmbedding  src   row `token` of table param `param`              grad: EmbeddingGrad
//   Param          src   parameter `param` (uniform)                     grad: ParamGrad
//   Constant       src   every element = value                           no grad
//   Neg/Sigmoid/Tanh/Relu/Exp/Log/Sqrt  elementwise unary (ir/op_semantics.h)
//   Step           unary 1 where x > 0 else 0 (relu's derivative)        no grad
//   Scale          unary x * factor
//   AddScalar      unary x + addend
//   Dropout        unary x * mask / (1 - rate); the mask is drawn per (sample, vertex, element)
//                        from the run's seed and `dropout_key` (one per forward Dropout node),
//                        so ∂F redraws it
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
//   SymOuter       x [n] → [n(n+1)/2]: x_a x_b for a ≤ b, row by row (the upper triangle of x xᵀ);
//                  matmul(P, sym_outer(x)) is the bilinear form xᵀ V x for P packed from V + Vᵀ
//   SymOuterGrad   (x [n], g [n(n+1)/2]) → [n]: the gradient of SymOuter, Σ_b g(c,b) x_b + Σ_a g(a,c) x_a
//   SoftmaxCE      −log softmax(logits)[label] → scalar; 0 when the vertex has no label
//   SoftmaxCEGrad  (softmax(logits) − onehot(label)) · g, with g the scalar upstream gradient
//   Scatter        sink: the vertex's output read by its parents' gather
//   Push           sink: a per-vertex output returned to the caller
//   Loss           sink: adds a scalar to the objective
//   Fwd            src (∂F only): forward value `forward_value` of the same vertex
//   ScatterGrad    src (∂F only): the gradient accumulated into this vertex's scatter by its parents
//   GatherGrad     sink (∂F only): adds the operand into the scatter gradient of the children
//                  `target` names (GatherGradTarget); with target Slot, from flat element `start` on
//   ParamGrad      sink (∂F only): adds the operand into the gradient of parameter `param`
//   EmbeddingGrad  sink (∂F only): adds the operand into row `token` of table `param`'s gradient
// Ops over a vertex's [K, d] children block (gather_all) and other matrices:
//   SliceCols      [m, n] → [m, len]: columns [start, start + len)       grad: PadCols(start)
//   PadCols        inverse of SliceCols: x placed at column `start` of zeros   grad: SliceCols(start)
//   Transpose      [m, n] → [n, m]                                       grad: Transpose
//   ChildCount     src   the number of variadic children, as a scalar    no grad
//   MaxChildren    [K, d] → [d]: column max over rows [0, ChildCount)    grad: MaxChildrenGrad
//                  (the actual children, never the zero padding rows); 0 when there are none
//   MaxChildrenGrad  (block [K, d], g [d]) → [K, d]: g[j] in row argmax_k block[k, j] (ties → the
//                  first), over the actual children as MaxChildren; zeros elsewhere
//   LayerNorm      x [n] → [n]: (x − mean(x)) / √(var(x) + 1e-5), the biased variance  grad: LayerNormGrad
//   LayerNormGrad  (x [n], g [n]) → [n]: (g − mean(g) − y·mean(g ⊙ y)) / √(var(x) + 1e-5), y = LayerNorm(x)
#define VJIT_IR_OPS(X)                                                \
  /* name          kind      exec     fusable arity flops    attributes */      \
  X(Gather,         Source,   Copy,    false,  0, None,     ChildSlot, Start)   \
  X(GatherSum,      Source,   Copy,    false,  0, None)                         \
  X(GatherAll,      Source,   Copy,    false,  0, None,     MaxChildren)        \
  X(Pull,           Source,   Copy,    false,  0, None)                         \
  X(PullEmbedding,  Source,   Copy,    false,  0, None,     Param)              \
  X(Param,          Source,   View,    false,  0, None,     Param)              \
  X(Constant,       Source,   Compute, false,  0, None,     Value)              \
  X(Neg,            Unary,    Compute, true,   1, Result)                       \
  X(Sigmoid,        Unary,    Compute, true,   1, Result)                       \
  X(Tanh,           Unary,    Compute, true,   1, Result)                       \
  X(Relu,           Unary,    Compute, true,   1, Result)                       \
  X(Exp,            Unary,    Compute, true,   1, Result)                       \
  X(Log,            Unary,    Compute, true,   1, Result)                       \
  X(Sqrt,           Unary,    Compute, true,   1, Result)                       \
  X(Step,           Unary,    Compute, true,   1, Result)                       \
  X(Scale,          Unary,    Compute, true,   1, Result,   Factor)             \
  X(AddScalar,      Unary,    Compute, true,   1, Result,   Addend)             \
  X(Dropout,        Unary,    Compute, false,  1, Result,   Rate, DropoutKey)   \
  X(Add,            Binary,   Compute, true,   2, Result)                       \
  X(Sub,            Binary,   Compute, true,   2, Result)                       \
  X(Mul,            Binary,   Compute, true,   2, Result)                       \
  X(Div,            Binary,   Compute, true,   2, Result)                       \
  X(Concat,         Shape,    Compute, false, -1, None)                         \
  X(Slice,          Shape,    View,    false,  1, None,     Start)              \
  X(Pad,            Shape,    Compute, false,  1, None,     Start)              \
  X(Reshape,        Shape,    View,    false,  1, None)                         \
  X(Sum,            Reduce,   Compute, false,  1, Operand)                      \
  X(SumRows,        Reduce,   Compute, false,  1, Operand)                      \
  X(Broadcast,      Shape,    Compute, false,  1, None)                         \
  X(BroadcastRows,  Shape,    Compute, false,  1, None)                         \
  X(MatMul,         Contract, Compute, false,  2, Product,  TransA, TransB)     \
  X(Outer,          Contract, Compute, false,  2, Result)                       \
  X(SymOuter,       Row,      Compute, false,  1, Defined)                      \
  X(SymOuterGrad,   Row,      Compute, false,  2, Defined)                      \
  X(SoftmaxCE,      Loss,     Compute, false,  1, Softmax)                      \
  X(SoftmaxCEGrad,  Loss,     Compute, false,  2, Softmax)                      \
  X(Scatter,        Sink,     Compute, false,  1, None)                         \
  X(Push,           Sink,     Copy,    false,  1, None)                         \
  X(Loss,           Sink,     Compute, false,  1, None)                         \
  X(Fwd,            Source,   View,    false,  0, None,     ForwardValue)       \
  X(ScatterGrad,    Source,   View,    false,  0, None)                         \
  X(GatherGrad,     Sink,     Copy,    false,  1, None,     Target, ChildSlot, Start)\
  X(ParamGrad,      Sink,     Compute, false,  1, Operand,  Param)              \
  X(EmbeddingGrad,  Sink,     Copy,    false,  1, None,     Param)              \
  X(SliceCols,      Shape,    Compute, false,  1, None,     Start)              \
  X(PadCols,        Shape,    Compute, false,  1, None,     Start)              \
  X(Transpose,      Shape,    Compute, false,  1, None)                         \
  X(ChildCount,     Source,   Compute, false,  0, None)                         \
  X(MaxChildren,    Reduce,   Compute, false,  1, Operand)                      \
  X(MaxChildrenGrad,Shape,    Compute, false,  2, Operand)                      \
  X(LayerNorm,      Row,      Compute, false,  1, Defined)                      \
  X(LayerNormGrad,  Row,      Compute, false,  2, Defined)

enum class Op : uint8_t {  // declared in vjit/ir.h
#define VJIT_X(name, ...) name,
  VJIT_IR_OPS(VJIT_X)
#undef VJIT_X
};

/// An op's operand pattern. Row: a per-vertex function of whole operand values,
/// defined in its own unit by a RowOp (ir/row_op.h).
enum class OpKind : uint8_t { Source, Unary, Binary, Shape, Reduce, Contract, Loss, Sink, Row };

/// How an op's useful FLOPs per vertex are counted (ir/flops.h).
enum class FlopRule : uint8_t {
  None,     ///< 0: data movement, constants, sinks
  Result,   ///< 1 per result element
  Operand,  ///< 1 per element of the first operand
  Product,  ///< 2·m·n·k of a matrix product
  Softmax,  ///< kSoftmaxFlopsPerClass per class
  Defined,  ///< a row op's own count (RowOp::flops)
};

/// How the executor runs an op (see the table above). Scatter is Compute with no
/// work: its operand's rows are what the parents gather.
enum class ExecClass : uint8_t { View, Copy, Compute };

/// Which scatter gradients a GatherGrad adds its operand into.
enum class GatherGradTarget : uint8_t {  // declared in vjit/ir.h
  Slot,           ///< child `child_slot`'s (the gradient of Gather)
  EveryVariadic,  ///< every variadic child's (the gradient of GatherSum)
  VariadicRows,   ///< row k into variadic child k's (the gradient of GatherAll)
};
const char* target_name(GatherGradTarget target);  ///< "slot", "every_variadic", "variadic_rows"
std::ostream& operator<<(std::ostream& out, GatherGradTarget target);

// The attributes of a node: X(Attr, Node field, name in the text form).
#define VJIT_IR_ATTRS(X)                        \
  X(Target, target, "target")                                                   \
  X(ChildSlot, child_slot, "slot")                                              \
  X(MaxChildren, max_children, "max_children")                                  \
  X(ForwardValue, forward_value, "forward")                                     \
  X(DropoutKey, dropout_key, "key")                                             \
  X(Param, param, "param")                                                      \
  X(Start, start, "start")                                                      \
  X(Value, value, "value")                                                      \
  X(Factor, factor, "factor")                                                   \
  X(Addend, addend, "addend")                                                   \
  X(Rate, rate, "rate")                                                         \
  X(TransA, trans_a, "trans_a")                                                 \
  X(TransB, trans_b, "trans_b")

enum class Attr : uint8_t {
#define VJIT_X(attr, field, text) attr,
  VJIT_IR_ATTRS(VJIT_X)
#undef VJIT_X
};

/// A set of attributes (one bit each).
class AttrSet {
 public:
  constexpr AttrSet() = default;
  /// The set of `attrs`.
  constexpr AttrSet(std::initializer_list<Attr> attrs) {
    for (Attr a : attrs) bits_ = uint16_t(bits_ | bit(a));
  }
  constexpr bool has(Attr a) const { return (bits_ & bit(a)) != 0; }  ///< whether `a` is in the set
  /// The set less `a`.
  constexpr AttrSet without(Attr a) const {
    AttrSet s = *this;
    s.bits_ = uint16_t(s.bits_ & ~bit(a));
    return s;
  }
  constexpr bool operator==(const AttrSet&) const = default;  ///< the same attributes

 private:
  static constexpr uint16_t bit(Attr a) { return uint16_t(1u << unsigned(a)); }
  uint16_t bits_ = 0;
};

/// One row of the op table.
struct OpInfo {
  const char* name;     ///< as the text form prints it
  OpKind kind;          ///< its kind (OpKind)
  ExecClass exec;       ///< how the executor runs it
  bool fusable;         ///< whether a fused kernel may compute it
  int arity;            ///< how many operands it reads; -1: one or more (Concat)
  FlopRule flops;       ///< how its FLOPs are counted
  AttrSet attributes;   ///< the attributes of Node it reads
};

constexpr OpInfo op_info(Op op) {
  using enum OpKind;
  using enum ExecClass;
  using enum Attr;
  switch (op) {
#define VJIT_X(name, kind, exec, fusable, arity, flops, ...) \
  case Op::name: return OpInfo{#name, kind, exec, fusable, arity, FlopRule::flops, AttrSet{__VA_ARGS__}};
    VJIT_IR_OPS(VJIT_X)
#undef VJIT_X
  }
  return OpInfo{"?", Sink, Compute, false, 0, FlopRule::None, AttrSet{}};
}

constexpr const char* op_name(Op op) { return op_info(op).name; }
constexpr OpKind op_kind(Op op) { return op_info(op).kind; }
constexpr ExecClass exec_class(Op op) { return op_info(op).exec; }
constexpr bool is_view(Op op) { return exec_class(op) == ExecClass::View; }
constexpr bool is_copy(Op op) { return exec_class(op) == ExecClass::Copy; }
constexpr bool is_sink(Op op) { return op_kind(op) == OpKind::Sink; }
/// Unary and binary ops that map elements to elements.
constexpr bool is_elementwise(Op op) {
  OpKind k = op_kind(op);
  return k == OpKind::Unary || k == OpKind::Binary;
}
/// The op part of ir::is_fusable (ir/fusion.h): the elementwise ops with scalar
/// semantics, i.e. every elementwise op but Dropout.
constexpr bool is_fusable_op(Op op) { return op_info(op).fusable; }

inline constexpr int kNumOps = 0
#define VJIT_X(name, ...) +1
    VJIT_IR_OPS(VJIT_X)
#undef VJIT_X
    ;

/// The attributes node `n` reads: its op's, less child_slot for a GatherGrad
/// whose target is not one slot.
inline AttrSet used_attributes(const Node& n) {
  AttrSet used = op_info(n.op).attributes;
  if (n.op == Op::GatherGrad && n.target != GatherGradTarget::Slot)
    used = used.without(Attr::ChildSlot).without(Attr::Start);
  return used;
}

/// Whether a and b (of the same op) have equal used attributes; and a hash of
/// the used attributes consistent with it. CSE's notion of "the same node".
bool same_attributes(const Node& a, const Node& b);
size_t hash_attributes(const Node& n);

}  // namespace vjit::ir
