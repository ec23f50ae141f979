#include "ir/flops.h"

#include <vector>

#include "ir/row_op.h"

namespace vjit::ir {

int64_t flops_of_node(const Function& function, ValueId id) {
  const Node& n = function[id];
  auto operand = [&](size_t i) -> const Shape& { return function[n.args.at(i)].shape; };
  switch (op_info(n.op).flops) {
    case FlopRule::None: return 0;
    case FlopRule::Result: return n.shape.numel();
    case FlopRule::Operand: return operand(0).numel();
    case FlopRule::Product: {
      // A vector on the left is a row [1, k]; a matrix contributes its rows or
      // columns, as op(a) reads them.
      const Shape& a = operand(0);
      const int64_t k = a.rank == 2 ? (n.trans_a ? a.dims[0] : a.dims[1]) : a.numel();
      return 2 * n.shape.numel() * k;
    }
    case FlopRule::Softmax: return kSoftmaxFlopsPerClass * operand(0).numel();
    case FlopRule::Defined: {
      std::vector<Shape> operands;
      for (ValueId arg : n.args) operands.push_back(function[arg].shape);
      return row_op(n.op)->flops(operands, n.shape);
    }
  }
  return 0;
}

int64_t flops_per_vertex(const Function& function) {
  int64_t total = 0;
  for (ValueId id = 0; id < function.size(); ++id) total += flops_of_node(function, id);
  return total;
}

}  // namespace vjit::ir
