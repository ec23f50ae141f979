#include "ir/passes.h"
#include "ir/ops.h"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <vector>

namespace vjit::ir {

namespace {

// Copies the nodes for which keep[id] holds, renumbering their operands.
Function compact(const Function& function, const std::vector<bool>& keep, const std::vector<ValueId>& replace) {
  Function out;
  out.name = function.name;
  std::vector<ValueId> new_id(function.nodes.size(), -1);
  for (ValueId id = 0; id < function.size(); ++id) {
    if (!keep[size_t(id)]) continue;
    Node node = function[id];
    for (ValueId& arg : node.args) arg = new_id[size_t(replace[size_t(arg)])];
    new_id[size_t(id)] = out.add(std::move(node));
  }
  return out;
}

std::vector<ValueId> identity_map(const Function& function) {
  std::vector<ValueId> map(function.nodes.size());
  for (ValueId id = 0; id < function.size(); ++id) map[size_t(id)] = id;
  return map;
}

}  // namespace

Function dead_code_elimination(const Function& function) {
  std::vector<bool> live(function.nodes.size(), false);
  for (ValueId id = function.size() - 1; id >= 0; --id) {
    if (is_sink(function[id].op)) live[size_t(id)] = true;
    if (!live[size_t(id)]) continue;
    for (ValueId arg : function[id].args) live[size_t(arg)] = true;
  }
  return compact(function, live, identity_map(function));
}

namespace {

// Nodes compute the same value when they have the same op, operands, shape and
// used attributes (the op table says which attributes an op uses).
bool same_value(const Node& a, const Node& b) {
  return a.op == b.op && a.args == b.args && a.shape == b.shape && a.uniform == b.uniform && same_attributes(a, b);
}

size_t hash_value(const Node& n) {
  size_t seed = hash_attributes(n);
  auto combine = [&](size_t h) { seed ^= h + 0x9e3779b97f4a7c15ull + (seed << 6) + (seed >> 2); };
  for (ValueId arg : n.args) combine(std::hash<ValueId>{}(arg));
  combine(std::hash<int>{}(n.shape.rank));
  for (int i = 0; i < n.shape.rank; ++i) combine(std::hash<int>{}(n.shape.dims[size_t(i)]));
  return seed;
}

}  // namespace

Function common_subexpression_elimination(const Function& function) {
  std::unordered_map<size_t, std::vector<ValueId>> seen;  // hash -> kept nodes with that hash
  std::vector<Node> renamed(function.nodes.size());       // node id with its operands replaced
  std::vector<ValueId> replace = identity_map(function);
  std::vector<bool> keep(function.nodes.size(), true);
  for (ValueId id = 0; id < function.size(); ++id) {
    if (is_sink(function[id].op)) continue;
    Node& n = renamed[size_t(id)] = function[id];
    for (ValueId& arg : n.args) arg = replace[size_t(arg)];
    std::vector<ValueId>& bucket = seen[hash_value(n)];
    auto same = std::find_if(bucket.begin(), bucket.end(),
                             [&](ValueId kept) { return same_value(renamed[size_t(kept)], n); });
    if (same == bucket.end()) {
      bucket.push_back(id);
    } else {
      replace[size_t(id)] = *same;
      keep[size_t(id)] = false;
    }
  }
  return compact(function, keep, replace);
}

Function simplify(const Function& function) {
  return dead_code_elimination(common_subexpression_elimination(function));
}

namespace {

// Rebuilds a function node by node, rewriting slices and adds of pads as they
// are emitted (their operands already rewritten).
class SliceSimplifier {
 public:
  explicit SliceSimplifier(const Function& function) : f_(function) { out_.name = function.name; }

  Function run() {
    std::vector<ValueId> new_id(f_.nodes.size(), -1);
    for (ValueId id = 0; id < f_.size(); ++id) {
      Node node = f_[id];
      for (ValueId& arg : node.args) arg = new_id[size_t(arg)];
      new_id[size_t(id)] = emit(std::move(node));
    }
    return std::move(out_);
  }

 private:
  ValueId emit(Node node) {
    if (node.op == Op::Slice) return slice(std::move(node));
    if (node.op == Op::Add) return add_of_pads(std::move(node));
    if (node.op == Op::Pad && node.start == 0 && out_[node.args[0]].shape == node.shape) return node.args[0];
    return out_.add(std::move(node));
  }

  ValueId slice_of(ValueId x, int start, Shape shape) {
    Node s = Node::make(Op::Slice, shape, {x});
    s.start = start;
    return slice(std::move(s));
  }

  ValueId slice(Node node) {
    const Node& x = out_[node.args[0]];
    if (node.start == 0 && x.shape == node.shape) return node.args[0];
    if (x.op == Op::Slice) return slice_of(x.args[0], x.start + node.start, node.shape);
    if (x.op == Op::Concat) {
      int64_t offset = 0;
      for (ValueId part : x.args) {
        if (offset == node.start && out_[part].shape == node.shape) return part;
        offset += out_[part].shape.numel();
      }
    }
    if (x.op == Op::Outer && node.shape.rank == 2) {
      const int64_t cols = x.shape.dims[1];
      if (node.shape.dims[1] == cols && node.start % cols == 0) {
        ValueId rows = slice_of(x.args[0], int(node.start / cols), Shape::vec(node.shape.dims[0]));
        return out_.add(Node::make(Op::Outer, node.shape, {rows, x.args[1]}));
      }
    }
    return out_.add(std::move(node));
  }

  // add(pad(a) at s, pad(b) at s + |a|) of vectors → pad(concat(a, b)) at s.
  ValueId add_of_pads(Node node) {
    const Node* p = &out_[node.args[0]];
    const Node* q = &out_[node.args[1]];
    if (p->op != Op::Pad || q->op != Op::Pad || node.shape.rank != 1 || p->shape != node.shape ||
        q->shape != node.shape)
      return out_.add(std::move(node));
    if (q->start < p->start) std::swap(p, q);
    const Shape& a = out_[p->args[0]].shape;
    const Shape& b = out_[q->args[0]].shape;
    if (a.rank != 1 || b.rank != 1 || p->start + a.numel() != q->start) return out_.add(std::move(node));
    const int start = p->start;
    ValueId joined = out_.add(Node::make(Op::Concat, Shape::vec(int(a.numel() + b.numel())), {p->args[0], q->args[0]}));
    if (start == 0 && out_[joined].shape == node.shape) return joined;
    Node pad = Node::make(Op::Pad, node.shape, {joined});
    pad.start = start;
    return out_.add(std::move(pad));
  }

  const Function& f_;
  Function out_;
};

}  // namespace

Function simplify_slices(const Function& function) { return SliceSimplifier(function).run(); }

Function gather_slices(const Function& function) {
  Function out = function;
  std::vector<bool> sliced_only(function.nodes.size(), true);
  for (const Node& n : function.nodes)
    for (ValueId arg : n.args)
      if (n.op != Op::Slice) sliced_only[size_t(arg)] = false;
  for (ValueId id = 0; id < function.size(); ++id) {
    const Node& slice = function[id];
    if (slice.op != Op::Slice) continue;
    const Node& whole = function[slice.args[0]];
    if (whole.op != Op::Gather || !sliced_only[size_t(slice.args[0])]) continue;
    Node part = Node::make(Op::Gather, slice.shape);
    part.child_slot = whole.child_slot;
    part.start = whole.start + slice.start;
    out.nodes[size_t(id)] = std::move(part);  // no operands: the order stays valid
  }
  return simplify(out);
}

Function join_gather_grads(const Function& function) {
  // Per slot, its Slot GatherGrads by start.
  std::vector<std::vector<std::pair<int, ValueId>>> by_slot;
  for (ValueId id = 0; id < function.size(); ++id) {
    const Node& n = function[id];
    if (n.op != Op::GatherGrad || n.target != GatherGradTarget::Slot) continue;
    if (by_slot.size() <= size_t(n.child_slot)) by_slot.resize(size_t(n.child_slot) + 1);
    by_slot[size_t(n.child_slot)].emplace_back(n.start, id);
  }
  Function out = function;
  std::vector<bool> keep(function.nodes.size(), true);
  auto width = [&](ValueId grad) { return int(function[function[grad].args[0]].shape.numel()); };
  for (size_t slot = 0; slot < by_slot.size(); ++slot) {
    std::vector<std::pair<int, ValueId>>& grads = by_slot[slot];
    std::sort(grads.begin(), grads.end());
    for (size_t first = 0; first < grads.size();) {
      size_t end = first + 1;
      int next = grads[first].first + width(grads[first].second);
      while (end < grads.size() && grads[end].first == next) next += width(grads[end++].second);
      if (end - first > 1) {
        std::vector<ValueId> parts;
        for (size_t i = first; i < end; ++i) {
          ValueId part = function[grads[i].second].args[0];
          if (function[part].shape.rank != 1)
            part = out.add(Node::make(Op::Reshape, Shape::vec(width(grads[i].second)), {part}));
          parts.push_back(part);
          keep[size_t(grads[i].second)] = false;
        }
        const ValueId concat = out.add(Node::make(Op::Concat, Shape::vec(next - grads[first].first), parts));
        Node joined = Node::make(Op::GatherGrad, Shape::scalar(), {concat});
        joined.child_slot = int(slot);
        joined.start = grads[first].first;
        out.add(std::move(joined));
      }
      first = end;
    }
  }
  keep.resize(out.nodes.size(), true);
  return compact(out, keep, identity_map(out));
}

namespace {

// Aᵀ·B of two per-vertex matrices with the same rows ([m, k] and [m, n]): its
// sum over the vertices is GEMMs over the matrices' rows.
bool is_stacked_product(const Function& f, const Node& product) {
  const Shape& a = f[product.args[0]].shape;
  const Shape& b = f[product.args[1]].shape;
  return product.trans_a && !product.trans_b && a.rank == 2 && b.rank == 2 && a.dims[0] == b.dims[0];
}

}  // namespace

std::vector<bool> fold_outer_products(const Function& backward, bool per_vertex_matmuls) {
  const std::vector<int> readers = reader_counts(backward);
  std::vector<bool> folded(backward.nodes.size(), false);
  for (const Node& node : backward.nodes) {
    if (node.op != Op::ParamGrad) continue;
    ValueId term = node.args[0];
    const Node& product = backward[term];
    bool foldable = product.op == Op::Outer ||
                    (product.op == Op::MatMul && (per_vertex_matmuls || is_stacked_product(backward, product)));
    bool per_vertex_operands = foldable &&
                               !backward[product.args[0]].uniform && !backward[product.args[1]].uniform;
    if (per_vertex_operands && readers[size_t(term)] == 1) folded[size_t(term)] = true;
  }
  return folded;
}

bool is_row_gemm(const Function& f, const Node& n) {
  if (n.op != Op::MatMul || n.uniform) return false;
  const Node& a = f[n.args[0]];
  const Node& b = f[n.args[1]];
  return (a.uniform && !b.uniform && b.shape.rank == 1) || (b.uniform && !a.uniform && a.shape.rank == 1);
}

namespace {

// A per-vertex [m, k] matrix (a children block) times a uniform weight: the
// CPU executor runs it as GEMMs over the rows of every vertex's matrix, each
// output row [n] taking a bias [n] in the epilogue.
bool is_block_gemm(const Function& f, const Node& n) {
  if (n.op != Op::MatMul || n.uniform || n.trans_a) return false;
  const Node& a = f[n.args[0]];
  const Node& b = f[n.args[1]];
  return b.uniform && !a.uniform && a.shape.rank == 2 && b.shape.rank == 2;
}

// A GEMM whose every output row the uniform row `bias` is added to: a
// product of a weight and per-vertex vectors, or with `block_products` of a
// children block and a weight. Or a product of a weight and per-vertex
// vectors to which a per-vertex value of its shape is added (terms of a
// gradient: a Tree-LSTM's dh = U_fᵀ·df + (U_iouᵀ·diou)[h's columns]).
bool is_biased_gemm(const Function& f, ValueId product, ValueId bias, bool block_products) {
  if (!f[bias].uniform) return is_row_gemm(f, f[product]) && f[bias].shape == f[product].shape;
  const bool block = block_products && is_block_gemm(f, f[product]);
  if (!is_row_gemm(f, f[product]) && !block) return false;
  const int64_t bias_width = block ? f[product].shape.dims[1] : f[product].shape.numel();
  return f[bias].shape.rank == 1 && f[bias].shape.numel() == bias_width;
}

// A per-vertex outer product u·vᵀ that an add to a per-vertex matrix of its
// shape can take in the same pass (the CPU executor's rank-one update).
bool is_rank_one_term(const Function& f, const Node& add, ValueId outer, ValueId addend) {
  const Node& n = f[outer];
  if (n.op != Op::Outer || n.uniform || f[addend].uniform) return false;
  return !f[n.args[0]].uniform && !f[n.args[1]].uniform && f[addend].shape == add.shape;
}

// A product whose rows a slice `slice` takes whole: rows [start / n, …) of
// an [m, n] product with n columns.
bool takes_whole_rows(const Node& slice, const Node& product) {
  const int64_t n = product.shape.dims[1];
  return slice.op == Op::Slice && slice.start % n == 0 && slice.shape.numel() % n == 0 &&
         slice.shape.rank == 2 && slice.shape.dims[1] == n;
}

// A product of two per-vertex [m, k]·[k, n] matrices, or of a uniform matrix
// and a per-vertex one (MV-RNN's W_Mᵀ·dP): one small GEMM per vertex, whose
// rows the CPU executor can compute in any number of parts.
bool is_per_vertex_matrix_product(const Function& f, const Node& n) {
  if (n.op != Op::MatMul || n.uniform || n.shape.rank != 2) return false;
  const Node& a = f[n.args[0]];
  const Node& b = f[n.args[1]];
  return !b.uniform && a.shape.rank == 2 && b.shape.rank == 2;
}

// Marks the per-vertex matrix products read only through whole-row slices,
// each the addend of an add that takes a rank-one term (folded in `folded`):
// each add computes its rows of the product straight into its output and
// then adds the term, so the product is never written whole.
void fold_products_into_rank_one_adds(const Function& f, const std::vector<Phase>& phases,
                                      const std::vector<int>& group_of, const std::vector<bool>& keep,
                                      std::vector<bool>& folded) {
  std::vector<std::vector<ValueId>> users(f.nodes.size());
  for (ValueId id = 0; id < f.size(); ++id)
    for (ValueId arg : f[id].args) users[size_t(arg)].push_back(id);
  auto adds_rank_one_term = [&](ValueId slice, ValueId add) {
    const Node& n = f[add];
    if (n.op != Op::Add || group_of[size_t(add)] >= 0 || phases[size_t(add)] != phases[size_t(slice)]) return false;
    const ValueId other = n.args[0] == slice ? n.args[1] : n.args[0];
    return other != slice && folded[size_t(other)] && f[other].op == Op::Outer;
  };
  for (ValueId id = 0; id < f.size(); ++id) {
    const Node& product = f[id];
    if (!is_per_vertex_matrix_product(f, product) || keep[size_t(id)] || group_of[size_t(id)] >= 0 ||
        folded[size_t(id)] || users[size_t(id)].empty())
      continue;
    bool all = true;
    for (ValueId slice : users[size_t(id)])
      all = all && takes_whole_rows(f[slice], product) && users[size_t(slice)].size() == 1 &&
            phases[size_t(slice)] == phases[size_t(id)] && adds_rank_one_term(slice, users[size_t(slice)][0]);
    if (all) folded[size_t(id)] = true;
  }
}

}  // namespace

std::vector<bool> fold_bias_adds(const Function& f, const std::vector<Phase>& phases, const std::vector<int>& group_of,
                                 const std::vector<bool>& keep, bool block_products) {
  const std::vector<int> readers = reader_counts(f);
  std::vector<bool> folded(f.nodes.size(), false);
  for (ValueId id = 0; id < f.size(); ++id) {
    const Node& add = f[id];
    if (add.op != Op::Add || add.uniform || group_of[size_t(id)] >= 0) continue;
    for (int side = 0; side < 2; ++side) {
      ValueId product = add.args[size_t(side)], bias = add.args[size_t(1 - side)];
      if (product == bias) continue;
      const bool takes = is_biased_gemm(f, product, bias, block_products) ||
                         (block_products && is_rank_one_term(f, add, product, bias));
      if (!takes) continue;
      if (readers[size_t(product)] != 1 || keep[size_t(product)] || group_of[size_t(product)] >= 0) continue;
      if (phases[size_t(product)] != phases[size_t(id)]) continue;
      folded[size_t(product)] = true;
      break;
    }
  }
  if (block_products) fold_products_into_rank_one_adds(f, phases, group_of, keep, folded);
  return folded;
}

std::vector<int> reader_counts(const Function& function) {
  std::vector<int> readers(function.nodes.size(), 0);
  for (const Node& node : function.nodes)
    for (ValueId arg : node.args) ++readers[size_t(arg)];
  return readers;
}

ValueId under_reshapes(const Function& function, ValueId id) {
  while (function[id].op == Op::Reshape) id = function[id].args[0];
  return id;
}

}  // namespace vjit::ir
