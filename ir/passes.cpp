#include "ir/passes.h"

#include <map>
#include <tuple>

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

Function common_subexpression_elimination(const Function& function) {
  using Key = std::tuple<Op, std::vector<ValueId>, int, int, int, double, bool, bool, int, int, int>;
  std::map<Key, ValueId> seen;
  std::vector<ValueId> replace = identity_map(function);
  std::vector<bool> keep(function.nodes.size(), true);
  for (ValueId id = 0; id < function.size(); ++id) {
    const Node& n = function[id];
    if (is_sink(n.op)) continue;
    std::vector<ValueId> args;
    for (ValueId arg : n.args) args.push_back(replace[size_t(arg)]);
    Key key{n.op, args, n.slot, n.param, n.start, n.scalar, n.trans_a, n.trans_b,
            n.shape.rank, n.shape.dims[0], n.shape.dims[1]};
    auto [it, inserted] = seen.emplace(key, id);
    if (!inserted) {
      replace[size_t(id)] = it->second;
      keep[size_t(id)] = false;
    }
  }
  return compact(function, keep, replace);
}

Function simplify(const Function& function) {
  return dead_code_elimination(common_subexpression_elimination(function));
}

}  // namespace vjit::ir
