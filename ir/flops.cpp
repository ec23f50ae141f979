#include "ir/flops.h"

#include <vector>

#include "ir/row_op.h"

namespace vjit::ir {

int64_t flops_of_node(const Function& function, ValueId id) {
  const Node& n = function[id];
  auto operand = [&](size_t i) -> const Shape& { return function[n.args.at(i)].shape; };
  switch (n.op) {
    case Op::MatMul: {
      // A vector on the left is a row [1, k]; a matrix contributes its rows or
      // columns, as op(a) reads them.
      const Shape& a = operand(0);
      int64_t k = a.rank == 2 ? (n.trans_a ? a.dims[0] : a.dims[1]) : a.numel();
      return 2 * n.shape.numel() * k;
    }
    case Op::Outer: return n.shape.numel();
    case Op::ParamGrad: return operand(0).numel();
    case Op::Sum:
    case Op::SumRows:
    case Op::MaxChildren:
    case Op::MaxChildrenGrad: return operand(0).numel();
    case Op::SoftmaxCE:
    case Op::SoftmaxCEGrad: return kSoftmaxFlopsPerClass * operand(0).numel();
    default:
      if (const RowOp* row = row_op(n.op)) {
        std::vector<Shape> operands;
        for (ValueId arg : n.args) operands.push_back(function[arg].shape);
        return row->flops(operands, n.shape);
      }
      return is_elementwise(n.op) ? n.shape.numel() : 0;
  }
}

int64_t flops_per_vertex(const Function& function) {
  int64_t total = 0;
  for (ValueId id = 0; id < function.size(); ++id) total += flops_of_node(function, id);
  return total;
}

}  // namespace vjit::ir
