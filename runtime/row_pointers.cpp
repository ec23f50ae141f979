#include "runtime/row_pointers.h"

#include "ir/passes.h"

namespace vjit::runtime {

namespace {

using ir::Node;
using ir::Op;
using ir::ValueId;

// row_pointer_parts, over the readers of each value of F and of ∂F.
class RowPointerReaders {
 public:
  RowPointerReaders(const FunctionPlan& forward, const FunctionPlan& backward)
      : forward_(forward), backward_(backward), readers_(size_t(forward.function->size())),
        backward_readers_(size_t(backward.function->size())), fwd_of_(size_t(forward.function->size())) {
    for (ValueId id = 0; id < forward.function->size(); ++id)
      for (ValueId arg : (*forward.function)[id].args) readers_[size_t(arg)].push_back(id);
    const ir::Function& b = *backward.function;
    for (ValueId id = 0; id < b.size(); ++id) {
      for (ValueId arg : b[id].args) backward_readers_[size_t(arg)].push_back(id);
      if (b[id].op == Op::Fwd) fwd_of_[size_t(b[id].forward_value)].push_back(id);
    }
  }

  // See row_pointer_parts. A Concat's gathers come before it, and a gather
  // that a Concat reads does not qualify alone: each is decided once.
  std::vector<int> parts() const {
    const ir::Function& f = *forward_.function;
    std::vector<int> parts(size_t(f.size()), 0);
    for (ValueId id = 0; id < f.size(); ++id) {
      const Node& n = f[id];
      if (n.op == Op::Concat && !n.uniform && n.args.size() > 1 && concat_qualifies(id)) {
        parts[size_t(id)] = int(n.args.size());
        for (ValueId arg : n.args) parts[size_t(gather_under(arg))] = 1;
      } else if (n.op == Op::Gather && reads_qualify(id, 1, -1)) {
        parts[size_t(id)] = 1;
      }
    }
    return parts;
  }

 private:

  // The gather a part of a Concat is (through reshapes), or -1.
  ValueId gather_under(ValueId id) const {
    const ir::Function& f = *forward_.function;
    id = ir::under_reshapes(f, id);
    return f[id].op == Op::Gather ? id : -1;
  }

  bool concat_qualifies(ValueId concat) const {
    const ir::Function& f = *forward_.function;
    const Node& c = f[concat];
    for (ValueId arg : c.args) {
      if (f[arg].shape.numel() != f[c.args[0]].shape.numel() || gather_under(arg) < 0) return false;
      for (ValueId id = arg;; id = f[id].args[0]) {  // the part and every reshape down to its gather
        if (!reads_qualify(id, 1, concat)) return false;
        if (f[id].op != Op::Reshape) break;
      }
    }
    return reads_qualify(concat, int(c.args.size()), -1);
  }

  // Whether every reader of forward value `id` (`parts` parts) reads it
  // through row pointers; `concat` is a Concat reader that may (or -1).
  // A reshape's readers are checked where it is marked (its own chain).
  bool reads_qualify(ValueId id, int parts, ValueId concat) const {
    const ir::Function& f = *forward_.function;
    for (ValueId reader : readers_[size_t(id)]) {
      const Node& r = f[reader];
      const bool ok = reader == concat || (r.op == Op::Reshape && parts == 1 && reads_qualify(reader, 1, concat)) ||
                      (r.op == Op::Slice && parts == 1 && reads_qualify(reader, 1, -1)) ||
                      reader_qualifies(forward_, reader, id, parts);
      if (!ok) return false;
    }
    for (ValueId fwd : fwd_of_[size_t(id)])
      if (!backward_reads_qualify(fwd, parts)) return false;
    return true;
  }

  // The same for a value of ∂F that is forward value `id` seen through Fwd,
  // reshapes and slices.
  bool backward_reads_qualify(ValueId id, int parts) const {
    const ir::Function& b = *backward_.function;
    for (ValueId reader : backward_readers_[size_t(id)]) {
      const Op op = b[reader].op;
      const bool view = parts == 1 && (op == Op::Reshape || op == Op::Slice);
      if (!(view ? backward_reads_qualify(reader, 1) : reader_qualifies(backward_, reader, id, parts))) return false;
    }
    return true;
  }

  // Whether `reader` reads its operand `operand` (`parts` parts) from row
  // pointers: a fused elementwise kernel (run_fused gives it a table of row
  // addresses), or a product that does (product_qualifies).
  static bool reader_qualifies(const FunctionPlan& fp, ValueId reader, ValueId operand, int parts) {
    return (parts == 1 && fp.in_fused_step(reader)) || product_qualifies(fp, reader, operand, parts);
  }

  // Whether `product` runs from row pointers for its operand `operand`: a
  // per-vertex product of matrices (never the GEMM over rows of a weight),
  // run vertex by vertex, or folded into a weight gradient that joins rows
  // (A·Bᵀ); an operand in parts only as the untransposed right operand (the
  // inner dimension splits) or in that weight gradient.
  static bool product_qualifies(const FunctionPlan& fp, ValueId product, ValueId operand, int parts) {
    const ir::Function& f = *fp.function;
    const Node& p = f[product];
    if (p.op != Op::MatMul || p.args[0] == p.args[1] || f[operand].shape.rank != 2) return false;
    const bool left = p.args[0] == operand;
    const Node& other = f[p.args[left ? 1 : 0]];
    if (left && other.uniform) return false;  // matrix_times_weight reads rows at a stride
    if (fp.folded[size_t(product)]) {
      int readers = 0;
      bool param_grad = false;
      for (ValueId id = product + 1; id < f.size(); ++id)
        for (ValueId arg : f[id].args)
          if (arg == product) ++readers, param_grad = f[id].op == Op::ParamGrad;
      return readers == 1 && param_grad && !p.trans_a && p.trans_b && other.shape.rank == 2;
    }
    return parts == 1 || (!left && !p.trans_b && other.shape.rank == 2);
  }

  const FunctionPlan& forward_;
  const FunctionPlan& backward_;
  std::vector<std::vector<ValueId>> readers_, backward_readers_;  // per value of F, of ∂F
  std::vector<std::vector<ValueId>> fwd_of_;                      // per value of F: the Fwd nodes of ∂F reading it
};

}  // namespace

std::vector<int> row_pointer_parts(const FunctionPlan& forward, const FunctionPlan& backward) {
  return RowPointerReaders(forward, backward).parts();
}

std::vector<GradientPart> gradient_parts(const ir::Function& backward) {
  const ir::Function& f = backward;
  const std::vector<int> readers = ir::reader_counts(f);
  std::vector<GradientPart> out(size_t(f.size()));
  for (ValueId gg = 0; gg < f.size(); ++gg) {
    const Node& n = f[gg];
    if (n.op != Op::GatherGrad || n.target == ir::GatherGradTarget::VariadicRows) continue;
    const ValueId gradient = n.args[0];
    if (readers[size_t(gradient)] != 1 || f[gradient].uniform) continue;
    if (f[gradient].op != Op::Concat) {
      out[size_t(gradient)] = {gg, 0};
      continue;
    }
    int64_t column = 0;
    for (ValueId part : f[gradient].args) {
      if (readers[size_t(part)] == 1 && !f[part].uniform) out[size_t(part)] = {gg, column};
      column += f[part].shape.numel();
    }
  }
  return out;
}

}  // namespace vjit::runtime
