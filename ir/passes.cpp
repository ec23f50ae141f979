#include "ir/passes.h"

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

}  // namespace vjit::ir
