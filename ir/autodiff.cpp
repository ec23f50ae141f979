#include "ir/autodiff.h"

#include <algorithm>
#include <map>

#include "ir/ops.h"
#include "ir/row_op.h"
#include "vjit/error.h"

namespace vjit::ir {

namespace {

class Differentiator final : GradientEmitter {
 public:
  explicit Differentiator(const Function& forward) : f_(forward), grads_(forward.nodes.size()) {
    out_.name = "d_" + forward.name;
  }

  Function run() {
    seed_from_sinks();
    for (ValueId id = f_.size() - 1; id >= 0; --id) {
      if (is_sink(f_[id].op) || grads_[size_t(id)].empty()) continue;
      if (f_[id].op == Op::Param) {
        // One ParamGrad per use keeps each term (often an outer product) separate.
        for (ValueId g : grads_[size_t(id)]) emit_sink(Op::ParamGrad, g, [&](Node& n) { n.param = f_[id].param; });
        continue;
      }
      propagate(id, total_gradient(id));
    }
    return std::move(out_);
  }

 private:
  // --- emitting ∂F nodes ---
  ValueId emit(Op op, Shape shape, std::vector<ValueId> args) {
    return out_.add(Node::make(op, shape, std::move(args)));
  }
  template <typename Setup>
  ValueId emit(Op op, Shape shape, std::vector<ValueId> args, Setup setup) {
    Node n = Node::make(op, shape, std::move(args));
    setup(n);
    return out_.add(std::move(n));
  }
  template <typename Setup>
  void emit_sink(Op op, ValueId arg, Setup setup) {
    emit(op, Shape::scalar(), {arg}, setup);
  }
  const Shape& shape_of(ValueId g) const { return out_[g].shape; }

  // Forward value `id` inside ∂F: a parameter is read again, and so is a uniform
  // Concat of parameters (matmul merging's stacked weights: recomputed, not
  // stored per vertex); anything else via Fwd.
  ValueId fwd(ValueId id) {
    auto it = fwd_.find(id);
    if (it != fwd_.end()) return it->second;
    const Node& n = f_[id];
    ValueId v = -1;
    if (n.op == Op::Param) {
      v = emit(Op::Param, n.shape, {}, [&](Node& p) {
        p.param = n.param;
        p.uniform = true;
      });
    } else if (n.uniform) {
      VJIT_INTERNAL_CHECK(n.op == Op::Concat,
                          "no uniform values but parameters and their concatenations: " << to_string(f_, id));
      std::vector<ValueId> parts;
      for (ValueId arg : n.args) parts.push_back(fwd(arg));
      v = emit(Op::Concat, n.shape, parts, [](Node& c) { c.uniform = true; });
    } else {
      v = emit(Op::Fwd, n.shape, {}, [&](Node& p) { p.forward_value = id; });
    }
    fwd_.emplace(id, v);
    return v;
  }

  void seed_from_sinks() {
    for (ValueId id = 0; id < f_.size(); ++id) {
      const Node& n = f_[id];
      if (n.op == Op::Loss) {
        accumulate(n.args[0], emit(Op::Constant, Shape::scalar(), {}, [](Node& c) { c.value = 1.0; }));
      } else if (n.op == Op::Scatter) {
        accumulate(n.args[0], emit(Op::ScatterGrad, f_[n.args[0]].shape, {}));
      }
    }
  }

  void accumulate(ValueId forward_id, ValueId gradient) { grads_[size_t(forward_id)].push_back(gradient); }

  // Sums the contributions to value `id`. Pads that exactly tile the value (the
  // gradients of slices of one GEMM result, e.g. LSTM gates) become one Concat.
  ValueId total_gradient(ValueId id) {
    std::vector<ValueId>& parts = grads_[size_t(id)];
    if (parts.size() == 1) return parts[0];
    if (ValueId tiled = concat_if_tiled(parts, f_[id].shape); tiled >= 0) return tiled;
    ValueId sum = parts[0];
    for (size_t i = 1; i < parts.size(); ++i) sum = emit(Op::Add, f_[id].shape, {sum, parts[i]});
    return sum;
  }

  ValueId concat_if_tiled(const std::vector<ValueId>& parts, const Shape& shape) {
    std::vector<std::pair<int, ValueId>> pads;
    for (ValueId g : parts) {
      if (out_[g].op != Op::Pad) return -1;
      pads.emplace_back(out_[g].start, out_[g].args[0]);
    }
    std::sort(pads.begin(), pads.end());
    int64_t next = 0;
    std::vector<ValueId> pieces;
    for (auto [start, piece] : pads) {
      if (start != next) return -1;
      next += shape_of(piece).numel();
      pieces.push_back(piece);
    }
    if (next != shape.numel()) return -1;
    // A matrix is concatenated along rows only when every piece is whole rows.
    if (shape.rank == 2)
      for (ValueId piece : pieces)
        if (shape_of(piece).rank != 2) return -1;
    return emit(Op::Concat, shape, pieces);
  }

  // Reduces a gradient of the result's shape to an operand that was broadcast.
  ValueId reduce_to(ValueId g, const Shape& operand) {
    const Shape& s = shape_of(g);
    if (s == operand) return g;
    if (operand.rank == 0) return emit(Op::Sum, operand, {g});
    VJIT_INTERNAL_CHECK(s.rank == 2 && operand.rank == 1, "cannot reduce " << s.str() << " to " << operand.str());
    return emit(Op::SumRows, operand, {g});
  }

  void propagate(ValueId id, ValueId g) {
    const Node& n = f_[id];
    const Shape& shape = n.shape;
    auto arg = [&](int i) { return n.args[size_t(i)]; };
    auto arg_shape = [&](int i) { return f_[arg(i)].shape; };
    auto to_arg = [&](int i, ValueId grad) { accumulate(arg(i), reduce_to(grad, arg_shape(i))); };
    switch (n.op) {
      case Op::Gather:
        emit_sink(Op::GatherGrad, g, [&](Node& s) {
          s.target = GatherGradTarget::Slot;
          s.child_slot = n.child_slot;
          s.start = n.start;
        });
        break;
      case Op::GatherSum:
        emit_sink(Op::GatherGrad, g, [](Node& s) { s.target = GatherGradTarget::EveryVariadic; });
        break;
      case Op::GatherAll:
        emit_sink(Op::GatherGrad, g, [](Node& s) { s.target = GatherGradTarget::VariadicRows; });
        break;
      case Op::PullEmbedding: emit_sink(Op::EmbeddingGrad, g, [&](Node& s) { s.param = n.param; }); break;
      case Op::Pull:
      case Op::Constant:
      case Op::Step:
      case Op::ChildCount: break;
      case Op::Neg: to_arg(0, emit(Op::Neg, shape, {g})); break;
      case Op::Sigmoid: {  // y' = y − y²
        ValueId y = fwd(id);
        to_arg(0, emit(Op::Mul, shape, {g, emit(Op::Sub, shape, {y, emit(Op::Mul, shape, {y, y})})}));
        break;
      }
      case Op::Tanh: {  // y' = 1 − y²
        ValueId y = fwd(id);
        ValueId one_minus = emit(Op::AddScalar, shape, {emit(Op::Neg, shape, {emit(Op::Mul, shape, {y, y})})},
                                 [](Node& c) { c.addend = 1.0; });
        to_arg(0, emit(Op::Mul, shape, {g, one_minus}));
        break;
      }
      case Op::Relu: to_arg(0, emit(Op::Mul, shape, {g, emit(Op::Step, shape, {fwd(arg(0))})})); break;
      case Op::Exp: to_arg(0, emit(Op::Mul, shape, {g, fwd(id)})); break;
      case Op::Log: to_arg(0, emit(Op::Div, shape, {g, fwd(arg(0))})); break;
      case Op::Sqrt:
        to_arg(0, emit(Op::Div, shape, {g, emit(Op::Scale, shape, {fwd(id)}, [](Node& c) { c.factor = 2.0; })}));
        break;
      case Op::Scale: to_arg(0, emit(Op::Scale, shape, {g}, [&](Node& c) { c.factor = n.factor; })); break;
      case Op::AddScalar: to_arg(0, g); break;
      case Op::Dropout:
        to_arg(0, emit(Op::Dropout, shape, {g}, [&](Node& c) {
                 c.rate = n.rate;
                 c.dropout_key = n.dropout_key;
               }));
        break;
      case Op::Add:
        to_arg(0, g);
        to_arg(1, g);
        break;
      case Op::Sub:
        to_arg(0, g);
        to_arg(1, emit(Op::Neg, shape, {g}));
        break;
      case Op::Mul:
        to_arg(0, emit(Op::Mul, shape, {g, fwd(arg(1))}));
        to_arg(1, emit(Op::Mul, shape, {g, fwd(arg(0))}));
        break;
      case Op::Div: {  // d/da = g / b, d/db = −g · y / b
        ValueId b = fwd(arg(1));
        to_arg(0, emit(Op::Div, shape, {g, b}));
        to_arg(1, emit(Op::Neg, shape, {emit(Op::Div, shape, {emit(Op::Mul, shape, {g, fwd(id)}), b})}));
        break;
      }
      case Op::Concat: {
        int offset = 0;
        for (int i = 0; i < int(n.args.size()); ++i) {
          Shape part = arg_shape(i);
          accumulate(arg(i), emit(Op::Slice, part, {g}, [&](Node& s) { s.start = offset; }));
          offset += int(part.numel());
        }
        break;
      }
      case Op::Slice: accumulate(arg(0), emit(Op::Pad, arg_shape(0), {g}, [&](Node& s) { s.start = n.start; })); break;
      case Op::Pad: accumulate(arg(0), emit(Op::Slice, arg_shape(0), {g}, [&](Node& s) { s.start = n.start; })); break;
      case Op::Reshape: accumulate(arg(0), emit(Op::Reshape, arg_shape(0), {g})); break;
      case Op::Sum: accumulate(arg(0), emit(Op::Broadcast, arg_shape(0), {g})); break;
      case Op::SumRows: accumulate(arg(0), emit(Op::BroadcastRows, arg_shape(0), {g})); break;
      case Op::Broadcast: accumulate(arg(0), emit(Op::Sum, arg_shape(0), {g})); break;
      case Op::BroadcastRows: accumulate(arg(0), emit(Op::SumRows, arg_shape(0), {g})); break;
      case Op::MatMul: propagate_matmul(n, g); break;
      case Op::Outer:  // y = a bᵀ: da = y·b... = g b, db = gᵀ a
        accumulate(arg(0), emit(Op::MatMul, arg_shape(0), {g, fwd(arg(1))}));
        accumulate(arg(1), emit(Op::MatMul, arg_shape(1), {fwd(arg(0)), g}));
        break;
      case Op::SliceCols:
        accumulate(arg(0), emit(Op::PadCols, arg_shape(0), {g}, [&](Node& s) { s.start = n.start; }));
        break;
      case Op::PadCols:
        accumulate(arg(0), emit(Op::SliceCols, arg_shape(0), {g}, [&](Node& s) { s.start = n.start; }));
        break;
      case Op::Transpose: accumulate(arg(0), emit(Op::Transpose, arg_shape(0), {g})); break;
      case Op::MaxChildren: accumulate(arg(0), emit(Op::MaxChildrenGrad, arg_shape(0), {fwd(arg(0)), g})); break;
      case Op::SoftmaxCE: accumulate(arg(0), emit(Op::SoftmaxCEGrad, arg_shape(0), {fwd(arg(0)), g})); break;
      default: {
        const RowOp* row = row_op(n.op);
        VJIT_INTERNAL_CHECK(row && row->gradient, "no gradient rule for " << to_string(f_, id));
        row->gradient(*this, f_, id, g);
      }
    }
  }

  // Forward matmuls are never transposed (the Builder makes none), so three cases.
  void propagate_matmul(const Node& n, ValueId g) {
    ValueId a_id = n.args[0], b_id = n.args[1];
    const Shape& sa = f_[a_id].shape;
    const Shape& sb = f_[b_id].shape;
    VJIT_INTERNAL_CHECK(!n.trans_a && !n.trans_b, "differentiating a transposed matmul");
    ValueId a = fwd(a_id), b = fwd(b_id);
    auto transposed = [](bool ta, bool tb) { return [=](Node& m) { m.trans_a = ta; m.trans_b = tb; }; };
    if (sb.rank == 1) {  // y[m] = A[m,k] x[k]: dA = g xᵀ, dx = Aᵀ g
      accumulate(a_id, emit(Op::Outer, sa, {g, b}));
      accumulate(b_id, emit(Op::MatMul, sb, {a, g}, transposed(true, false)));
    } else if (sa.rank == 1) {  // y[n] = xᵀ[k] B[k,n]: dx = B g, dB = x gᵀ
      accumulate(a_id, emit(Op::MatMul, sa, {b, g}));
      accumulate(b_id, emit(Op::Outer, sb, {a, g}));
    } else {  // C = A B: dA = G Bᵀ, dB = Aᵀ G
      accumulate(a_id, emit(Op::MatMul, sa, {g, b}, transposed(false, true)));
      accumulate(b_id, emit(Op::MatMul, sb, {a, g}, transposed(true, false)));
    }
  }

  // GradientEmitter: what a row op's gradient rule (ir/row_op.h) writes through.
  ValueId forward(ValueId forward_id) override { return fwd(forward_id); }
  ValueId emit(Node node) override { return out_.add(std::move(node)); }
  void add_gradient(ValueId forward_id, ValueId gradient) override { accumulate(forward_id, gradient); }

  const Function& f_;
  Function out_;
  std::vector<std::vector<ValueId>> grads_;  // per forward value: its gradient terms in ∂F
  std::map<ValueId, ValueId> fwd_;
};

}  // namespace

Function differentiate(const Function& forward) { return Differentiator(forward).run(); }

}  // namespace vjit::ir
