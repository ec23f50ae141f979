#include "ir/child_rows.h"

#include <numeric>

#include "ir/ops.h"

namespace vjit::ir {

bool ChildRowValues::any() const {
  for (const std::vector<bool>* values : {&forward, &backward})
    for (bool v : *values)
      if (v) return true;
  return false;
}

namespace {

// F's values and ∂F's in one index space: F's value v is v, ∂F's is |F| + v.
class RowGroups {
 public:
  RowGroups(const Function& forward, const Function* backward)
      : forward_(forward), backward_(backward), size_(forward.size() + (backward ? backward->size() : 0)) {
    parent_.resize(size_t(size_));
    std::iota(parent_.begin(), parent_.end(), 0);
    zero_.assign(size_t(size_), false);
    member_.assign(size_t(size_), false);
    gathers_.assign(size_t(size_), false);
    matters_.assign(size_t(size_), false);
  }

  ChildRowValues run() {
    walk(forward_, 0, [&](const Function& f, int base, ValueId id) { join(f, base, id); });
    if (backward_) walk(*backward_, forward_.size(), [&](const Function& f, int base, ValueId id) { join(f, base, id); });
    walk(forward_, 0, [&](const Function& f, int base, ValueId id) { observe(f, base, id); });
    if (backward_)
      walk(*backward_, forward_.size(), [&](const Function& f, int base, ValueId id) { observe(f, base, id); });
    ChildRowValues out;
    for (int g = 0; g < size_; ++g) {
      const bool child_rows = block(g) && !matters_[size_t(find(g))];
      (g < forward_.size() ? out.forward : out.backward).push_back(child_rows);
    }
    return out;
  }

 private:
  template <class Visit>
  static void walk(const Function& f, int base, Visit visit) {
    for (ValueId id = 0; id < f.size(); ++id) visit(f, base, id);
  }

  int find(int g) {
    while (parent_[size_t(g)] != g) g = parent_[size_t(g)] = parent_[size_t(parent_[size_t(g)])];
    return g;
  }
  void unite(int a, int b) {
    a = find(a), b = find(b);
    if (a == b) return;
    parent_[size_t(b)] = a;
    gathers_[size_t(a)] = gathers_[size_t(a)] || gathers_[size_t(b)];
    matters_[size_t(a)] = matters_[size_t(a)] || matters_[size_t(b)];
  }
  bool block(int g) { return gathers_[size_t(find(g))]; }
  void set_matters(int g) { matters_[size_t(find(g))] = true; }

  // Whether operand `arg` of `n` is read row k for row k (a row-wise read
  // joins its row group), given that `n` computes row by row: a per-vertex
  // matrix (an elementwise op's other operands are scalars or broadcast rows).
  static bool same_rows(const Function& f, const Node& n, ValueId arg) {
    const Node& a = f[arg];
    return !a.uniform && a.shape.rank == 2 && a.shape.dims[0] == n.shape.dims[0];
  }

  // The row-wise ops: which operands share the node's rows, and whether its
  // padding rows are zero whatever the parameters. Everything else is no member.
  void join(const Function& f, int base, ValueId id) {
    const Node& n = f[id];
    const int g = base + id;
    auto zero_of = [&](size_t i) { return same_rows(f, n, n.args[i]) && zero_[size_t(base + n.args[i])]; };
    // A [K, d] parameter (row k: child k's weight) or a per-vertex operand
    // broadcast over the rows has no child rows to be read in: the group stays padded.
    auto join_rows = [&](size_t i) {
      if (same_rows(f, n, n.args[i])) unite(g, base + n.args[i]);
      else if (f[n.args[i]].shape.rank == 2 || !f[n.args[i]].uniform) set_matters(g);
    };
    if (n.shape.rank != 2) {
      if (n.op == Op::Fwd) unite(g, n.forward_value);  // a forward vector is no member; harmless
      return;
    }
    member_[size_t(g)] = true;
    switch (n.op) {
      case Op::GatherAll: gathers_[size_t(g)] = zero_[size_t(g)] = true; return;
      case Op::Fwd: unite(g, n.forward_value); zero_[size_t(g)] = zero_[size_t(n.forward_value)]; return;
      case Op::BroadcastRows: return;  // every row the vector: a member where its group is a block
      case Op::SliceCols:
      case Op::PadCols:
      case Op::Neg:
      case Op::Tanh:
      case Op::Relu:
      case Op::Sqrt:
      case Op::Step:
      case Op::Scale: join_rows(0); zero_[size_t(g)] = zero_of(0); return;
      case Op::Sigmoid:
      case Op::Exp:
      case Op::Log:
      case Op::AddScalar: join_rows(0); return;
      case Op::Add:
      case Op::Sub: join_rows(0), join_rows(1); zero_[size_t(g)] = zero_of(0) && zero_of(1); return;
      case Op::Mul: join_rows(0), join_rows(1); zero_[size_t(g)] = zero_of(0) || zero_of(1); return;
      case Op::Div: join_rows(0), join_rows(1); return;
      case Op::MatMul:
        if (row_wise_product(f, n)) {
          unite(g, base + n.args[0]);
          zero_[size_t(g)] = zero_[size_t(base + n.args[0])];
          return;
        }
        break;
      default: break;
    }
    member_[size_t(g)] = false;
  }

  // block · W: row k of the product is row k of the block times a weight.
  static bool row_wise_product(const Function& f, const Node& n) {
    const Node& a = f[n.args[0]];
    const Node& b = f[n.args[1]];
    return !n.trans_a && !a.uniform && a.shape.rank == 2 && b.uniform && b.shape.rank == 2;
  }

  // Marks the row groups whose padding rows node `id` reads where they may be
  // non-zero, and the groups with a value that is not child k's in row k.
  void observe(const Function& f, int base, ValueId id) {
    const Node& n = f[id];
    const int g = base + id;
    if (n.op == Op::Fwd) return;
    const bool row_wise = member_[size_t(g)] && n.op != Op::BroadcastRows;
    if (n.shape.rank == 2 && !member_[size_t(g)]) set_matters(g);  // no row-wise op: rows are not children
    for (size_t i = 0; i < n.args.size(); ++i) {
      const int x = base + n.args[i];
      if (!block(x) || (row_wise && find(x) == find(g))) continue;
      if (!reads_actual_children_only(f, base, n, i)) set_matters(x);
    }
  }

  bool reads_actual_children_only(const Function& f, int base, const Node& n, size_t i) {
    const int x = base + n.args[i];
    switch (n.op) {
      case Op::GatherGrad: return true;
      case Op::SumRows: return zero_[size_t(x)];
      case Op::MatMul: {  // aᵀ b: a sum over the rows, zero where a row of either is zero
        if (!n.trans_a || f[n.args[0]].uniform || f[n.args[1]].uniform || !weight_gradient(f, id_of(f, n))) return false;
        return zero_[size_t(base + n.args[0])] || zero_[size_t(base + n.args[1])];
      }
      default: return false;
    }
  }

  static ValueId id_of(const Function& f, const Node& n) { return ValueId(&n - f.nodes.data()); }

  // Whether a weight's gradient is all that reads `id` (Σ over every row of
  // the type: one GEMM over the child rows; a per-vertex aᵀ b would be a
  // product per vertex over its own rows).
  static bool weight_gradient(const Function& f, ValueId id) {
    bool read = false;
    for (ValueId r = id + 1; r < f.size(); ++r)
      for (ValueId arg : f[r].args)
        if (arg == id) {
          if (f[r].op != Op::ParamGrad) return false;
          read = true;
        }
    return read;
  }

  const Function& forward_;
  const Function* backward_;
  const int size_;
  std::vector<int> parent_;
  std::vector<bool> zero_;     // per value: its padding rows are zero
  std::vector<bool> member_;   // per value: made row by row (a possible group member)
  std::vector<bool> gathers_;  // per group root: a gather_all is a member
  std::vector<bool> matters_;  // per group root: its padding rows can change a result
};

}  // namespace

ChildRowValues child_row_values(const Function& forward, const Function* backward) {
  return RowGroups(forward, backward).run();
}

}  // namespace vjit::ir
