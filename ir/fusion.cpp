#include "ir/fusion.h"
#include "ir/ops.h"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace vjit::ir {

bool is_fusable(const Function& function, ValueId id) {
  const Node& n = function[id];
  if (!is_fusable_op(n.op)) return false;
  // Operands are read element by element or as one scalar per vertex; the
  // vector-over-matrix-rows broadcast stays with the generic kernels.
  for (ValueId arg : n.args) {
    const Shape& s = function[arg].shape;
    if (s != n.shape && s.rank != 0) return false;
  }
  return true;
}

int sink_elementwise_into_core(const Function& f, std::vector<Phase>& phases, const std::vector<bool>& keep) {
  std::vector<std::vector<ValueId>> readers(f.nodes.size());
  for (ValueId id = 0; id < f.size(); ++id)
    for (ValueId arg : f[id].args) readers[size_t(arg)].push_back(id);
  int moved = 0;
  for (ValueId id = f.size() - 1; id >= 0; --id) {
    if (phases[size_t(id)] != Phase::Eager || keep[size_t(id)] || f[id].uniform || !is_fusable(f, id)) continue;
    const std::vector<ValueId>& users = readers[size_t(id)];
    bool only_core = !users.empty();
    for (ValueId user : users) only_core = only_core && phases[size_t(user)] == Phase::Core && is_fusable(f, user);
    if (!only_core) continue;
    phases[size_t(id)] = Phase::Core;
    ++moved;
  }
  return moved;
}

namespace {

class UnionFind {
 public:
  explicit UnionFind(size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  int find(int x) {
    while (parent_[size_t(x)] != x) x = parent_[size_t(x)] = parent_[size_t(parent_[size_t(x)])];
    return x;
  }
  void unite(int a, int b) { parent_[size_t(find(a))] = find(b); }

 private:
  std::vector<int> parent_;
};

class Fuser {
 public:
  Fuser(const Function& f, const std::vector<Phase>& phases) : f_(f), phases_(phases), sets_(f.nodes.size()) {
    users_.resize(f.nodes.size());
    for (ValueId id = 0; id < f.size(); ++id)
      for (ValueId arg : f[id].args) users_[size_t(arg)].push_back(id);
  }

  // Greedily, in function order, joins each fusable node with the groups of its
  // fusable operands of the same shape and phase when that keeps groups acyclic.
  UnionFind& run() {
    for (ValueId v = 0; v < f_.size(); ++v) {
      if (!is_fusable(f_, v)) continue;
      for (ValueId arg : f_[v].args) {
        if (!is_fusable(f_, arg) || f_[arg].shape != f_[v].shape || phases_[size_t(arg)] != phases_[size_t(v)]) continue;
        if (sets_.find(arg) == sets_.find(v)) continue;
        if (merge_keeps_acyclic(sets_.find(arg), sets_.find(v), v)) sets_.unite(arg, v);
      }
    }
    adopt_lone_siblings();
    return sets_;
  }

 private:
  // Sibling (input) fusion: a fusable node the pass above left alone (none of
  // its operands is a fusable node of its shape and phase) joins a group of
  // that shape and phase that already reads every one of its operands, as one
  // more output. The group's kernel loads those operands anyway, and the
  // node's own pass over every vertex goes. In ∂F such a node is often a
  // gradient part (a word cell's f ⊙ dc, which a fused kernel can then add
  // straight into the child's row, runtime/row_pointers.h).
  void adopt_lone_siblings() {
    const ValueId last = f_.size() - 1;
    std::vector<int> set_size(f_.nodes.size(), 0);
    for (ValueId id = 0; id < f_.size(); ++id)
      if (is_fusable(f_, id)) ++set_size[size_t(sets_.find(id))];
    for (ValueId v = 0; v < f_.size(); ++v) {
      if (!is_fusable(f_, v) || set_size[size_t(sets_.find(v))] != 1 || f_[v].args.empty()) continue;
      for (ValueId reader : users_[size_t(f_[v].args[0])]) {
        const int group = sets_.find(reader);
        if (reader == v || !is_fusable(f_, reader) || set_size[size_t(group)] < 2 || f_[reader].shape != f_[v].shape ||
            phases_[size_t(reader)] != phases_[size_t(v)] || !group_reads_all(group, f_[v].args) ||
            !merge_keeps_acyclic(group, sets_.find(v), last))
          continue;
        set_size[size_t(group)] += 1;
        sets_.unite(v, reader);
        set_size[size_t(sets_.find(v))] = set_size[size_t(group)];
        break;
      }
    }
  }

  // Whether nodes of set `group` read every value of `values`.
  bool group_reads_all(int group, const std::vector<ValueId>& values) {
    for (ValueId value : values) {
      const std::vector<ValueId>& readers = users_[size_t(value)];
      if (std::none_of(readers.begin(), readers.end(), [&](ValueId r) { return sets_.find(r) == group; })) return false;
    }
    return true;
  }

  // The merged set S = set(a) ∪ set(b) is acyclic when no node outside S is both
  // reachable from S and an operand of S.
  bool merge_keeps_acyclic(int a, int b, ValueId limit) {
    std::vector<char> in_set(f_.nodes.size(), 0), reached(f_.nodes.size(), 0);
    std::vector<ValueId> stack;
    for (ValueId id = 0; id <= limit; ++id) {
      int root = sets_.find(id);
      if (root == a || root == b) {
        in_set[size_t(id)] = 1;
        stack.push_back(id);
      }
    }
    std::vector<ValueId> members = stack;
    while (!stack.empty()) {
      ValueId x = stack.back();
      stack.pop_back();
      for (ValueId user : users_[size_t(x)]) {
        if (user > limit || reached[size_t(user)]) continue;
        reached[size_t(user)] = 1;
        stack.push_back(user);
      }
    }
    for (ValueId m : members)
      for (ValueId arg : f_[m].args)
        if (!in_set[size_t(arg)] && reached[size_t(arg)]) return false;
    return true;
  }

  const Function& f_;
  const std::vector<Phase>& phases_;
  UnionFind sets_;
  std::vector<std::vector<ValueId>> users_;
};

}  // namespace

std::vector<FusionGroup> find_fusion_groups(const Function& function, const std::vector<Phase>& phases,
                                            const std::vector<bool>& keep) {
  Fuser fuser(function, phases);
  UnionFind& sets = fuser.run();
  std::vector<int> group_of_root(function.nodes.size(), -1);
  std::vector<FusionGroup> groups;
  std::vector<int> group_of(function.nodes.size(), -1);
  for (ValueId id = 0; id < function.size(); ++id) {
    if (!is_fusable(function, id)) continue;
    int root = sets.find(id);
    if (group_of_root[size_t(root)] < 0) {
      group_of_root[size_t(root)] = int(groups.size());
      groups.emplace_back();
    }
    group_of[size_t(id)] = group_of_root[size_t(root)];
    groups[size_t(group_of[size_t(id)])].nodes.push_back(id);
  }
  // Inputs and outputs of each group.
  for (ValueId id = 0; id < function.size(); ++id) {
    for (ValueId arg : function[id].args) {
      int g = group_of[size_t(arg)];
      if (g >= 0 && g != group_of[size_t(id)]) {
        std::vector<ValueId>& outs = groups[size_t(g)].outputs;
        if (std::find(outs.begin(), outs.end(), arg) == outs.end()) outs.push_back(arg);
      }
      int mine = group_of[size_t(id)];
      if (mine >= 0 && group_of[size_t(arg)] != mine) {
        std::vector<ValueId>& ins = groups[size_t(mine)].inputs;
        if (std::find(ins.begin(), ins.end(), arg) == ins.end()) ins.push_back(arg);
      }
    }
  }
  for (ValueId id = 0; id < function.size(); ++id) {
    int g = group_of[size_t(id)];
    if (g < 0 || !keep[size_t(id)]) continue;
    std::vector<ValueId>& outs = groups[size_t(g)].outputs;
    if (std::find(outs.begin(), outs.end(), id) == outs.end()) outs.push_back(id);
  }
  std::vector<FusionGroup> fused;
  for (FusionGroup& g : groups) {
    if (g.nodes.size() < 2) continue;
    std::sort(g.outputs.begin(), g.outputs.end());
    fused.push_back(std::move(g));
  }
  return fused;
}

FusionGroup forward_only_part(const Function& function, const FusionGroup& group) {
  std::vector<char> member(function.nodes.size(), 0), read_outside(function.nodes.size(), 0);
  for (ValueId id : group.nodes) member[size_t(id)] = 1;
  for (ValueId id = 0; id < function.size(); ++id)
    if (!member[size_t(id)])
      for (ValueId arg : function[id].args) read_outside[size_t(arg)] = 1;
  FusionGroup part;
  std::vector<char> needed(function.nodes.size(), 0);
  for (ValueId out : group.outputs)
    if (read_outside[size_t(out)]) {
      part.outputs.push_back(out);
      needed[size_t(out)] = 1;
    }
  // Group nodes come in function order, so readers come after what they read.
  for (auto it = group.nodes.rbegin(); it != group.nodes.rend(); ++it)
    if (needed[size_t(*it)])
      for (ValueId arg : function[*it].args) needed[size_t(arg)] = 1;
  for (ValueId id : group.nodes)
    if (needed[size_t(id)]) part.nodes.push_back(id);
  for (ValueId in : group.inputs)
    if (needed[size_t(in)]) part.inputs.push_back(in);
  return part;
}

std::string to_string(const Function& function, const std::vector<FusionGroup>& groups) {
  std::ostringstream out;
  for (size_t i = 0; i < groups.size(); ++i) {
    out << "group " << i << ":";
    for (ValueId id : groups[i].nodes) out << " %" << id;
    out << " <-";
    for (ValueId id : groups[i].inputs) out << " %" << id;
    out << " ->";
    for (ValueId id : groups[i].outputs) out << " %" << id;
    out << "\n";
    for (ValueId id : groups[i].nodes) out << "    " << to_string(function, id) << "\n";
  }
  return out.str();
}

}  // namespace vjit::ir
