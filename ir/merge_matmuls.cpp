#include "ir/merge_matmuls.h"
#include "ir/ops.h"

#include <map>

namespace vjit::ir {

namespace {

// W·x with W a parameter matrix and x a per-vertex vector, neither transposed.
bool is_mergeable(const Function& f, ValueId id) {
  const Node& n = f[id];
  if (n.op != Op::MatMul || n.trans_a || n.trans_b) return false;
  const Node& w = f[n.args[0]];
  const Node& x = f[n.args[1]];
  return w.op == Op::Param && w.shape.rank == 2 && !x.uniform && x.shape.rank == 1;
}

}  // namespace

Function merge_matmuls(const Function& forward) {
  // The mergeable products of each operand, in function order.
  std::map<ValueId, std::vector<ValueId>> products_of;
  for (ValueId id = 0; id < forward.size(); ++id)
    if (is_mergeable(forward, id)) products_of[forward[id].args[1]].push_back(id);
  std::vector<const std::vector<ValueId>*> group_of(forward.nodes.size(), nullptr);
  for (const auto& [operand, products] : products_of)
    if (products.size() >= 2)
      for (ValueId id : products) group_of[size_t(id)] = &products;

  Function out;
  out.name = forward.name;
  std::vector<ValueId> new_id(forward.nodes.size(), -1);
  for (ValueId id = 0; id < forward.size(); ++id) {
    const std::vector<ValueId>* group = group_of[size_t(id)];
    if (group == nullptr) {
      Node node = forward[id];
      for (ValueId& arg : node.args) arg = new_id[size_t(arg)];
      new_id[size_t(id)] = out.add(std::move(node));
      continue;
    }
    if (group->front() != id) continue;  // placed with the first product of its group
    // Every product of the group reads x, which precedes the first of them; the
    // parameters are sources, emitted here again so they precede the Concat.
    std::vector<ValueId> weights;
    int rows = 0;
    for (ValueId product : *group) {
      const Node& w = forward[forward[product].args[0]];
      weights.push_back(out.add(w));
      rows += w.shape.dims[0];
    }
    const int cols = forward[forward[id].args[0]].shape.dims[1];
    Node stacked = Node::make(Op::Concat, Shape::mat(rows, cols), weights);
    stacked.uniform = true;
    ValueId stacked_id = out.add(std::move(stacked));
    ValueId merged = out.add(Node::make(Op::MatMul, Shape::vec(rows), {stacked_id, new_id[size_t(forward[id].args[1])]}));
    int start = 0;
    for (ValueId product : *group) {
      Node slice = Node::make(Op::Slice, forward[product].shape, {merged});
      slice.start = start;
      start += int(forward[product].shape.numel());
      new_id[size_t(product)] = out.add(std::move(slice));
    }
  }
  return out;
}

}  // namespace vjit::ir
