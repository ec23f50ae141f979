#pragma once
// vjit's IR: one vertex function in SSA form. Node i defines value i; values are
// per-vertex tensors (the batch dimension is implicit) except Param nodes and
// Concats of them (stacked weights), which are uniform across vertices. Sink nodes (scatter, push, loss and the
// gradient sinks of the backward function) define no value and are never
// removed by DCE. A Builder writes F; Program::forward and Program::backward
// return F and its derivative ∂F, to print (to_string) or verify. The ops
// themselves, ∂F's included, are the compiler's own: nothing outside the
// library names one.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "vjit/shape.h"

namespace vjit::ir {

/// An op of the IR. Its values are the compiler's own (the library's op
/// table); a Function's text form (to_string) prints each by name.
enum class Op : uint8_t;
/// Which children's scatter gradients a gradient sink of ∂F adds into (the
/// compiler's own, like Op).
enum class GatherGradTarget : uint8_t;

using ValueId = int;

/// One node of a Function: an op, its operands and its attributes; node i
/// defines value i.
struct Node {
  Op op{};               ///< what it computes (set by make)
  Shape shape;           ///< per-vertex shape of the value (scalar for sinks)
  bool uniform = false;  ///< same for every vertex: a Param, or a Concat of uniform values (merge_matmuls)
  std::vector<ValueId> args;  ///< its operands, values defined by earlier nodes
  /// Attributes. An op reads only those its row of the op table lists; the
  /// others keep these defaults.
  int child_slot = 0;                                ///< Gather, and its gradient in ∂F
  GatherGradTarget target{};                         ///< GatherGrad (∂F): whose scatter gradients
  int max_children = 0;                              ///< GatherAll: K, the rows of its [K, d] value
  ValueId forward_value = -1;                        ///< ∂F's read of a forward value: that value's id
  int dropout_key = 0;                               ///< Dropout: the mask's key
  int param = -1;                                    ///< Param, PullEmbedding, and ∂F's gradient sinks
  int start = 0;                                     ///< Slice, Pad, Gather and its gradient: the flat offset;
                                                     ///< SliceCols, PadCols: the column
  double value = 0.0;                                ///< Constant
  double factor = 1.0;                               ///< Scale
  double addend = 0.0;                               ///< AddScalar
  double rate = 0.0;                                 ///< Dropout: the probability an element is dropped
  bool trans_a = false;                              ///< MatMul
  bool trans_b = false;                              ///< MatMul

  /// A node of `op` with the default attributes.
  static Node make(Op op, Shape shape, std::vector<ValueId> args = {}) {
    Node n;
    n.op = op;
    n.shape = shape;
    n.args = std::move(args);
    return n;
  }
};

/// A vertex function in SSA form (see the top of this header).
struct Function {
  std::string name;         ///< the vertex type's (F) or its derivative's (∂F)
  std::vector<Node> nodes;  ///< node i defines value i

  /// Appends a node; the value it defines.
  ValueId add(Node node) {
    nodes.push_back(std::move(node));
    return ValueId(nodes.size()) - 1;
  }
  const Node& operator[](ValueId id) const { return nodes.at(size_t(id)); }  ///< the node defining `id`
  int size() const { return int(nodes.size()); }  ///< the number of nodes
};

/// Readable text form, one node per line: `%5 = tanh(%4) : [64]`.
std::string to_string(const Function& function);
std::string to_string(const Function& function, ValueId id);

/// Checks SSA order, operand counts, attributes (an attribute the op does not
/// use must be at its default) and shapes; throws InternalError with the printed
/// node on a violation.
void verify(const Function& function);

}  // namespace vjit::ir
