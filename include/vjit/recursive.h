#pragma once
// Models written as recursion (after Jeong et al., EuroSys'18): a model over
// the user's own tree or DAG type, defined as a few branches ("leaf",
// "internal", ...), each the body of a vertex function in which call(i)
// stands for the recursive result on child i. vjit builds one vertex type per
// branch once, when the branch is added; each batch's graphs come from walking
// the user's objects, so nothing of a body runs per sample. The independent
// sub-calls (the children of a node, the nodes of different samples) are
// evaluated together by the engine's batching, and training differentiates
// through the whole recursion.
//
//   struct Tree { int word, label; std::unique_ptr<Tree> left, right; };
//   vjit::Recursive<Tree> rnn(program, vjit::Shape::vec(H));     // what every call returns
//   rnn.children([](const Tree& t) { return t.left ? std::vector<const Tree*>{t.left.get(), t.right.get()}
//                                                  : std::vector<const Tree*>{}; })
//      .branch([](const Tree& t) { return t.left ? 1 : 0; })     // the index add_branch returned
//      .token([](const Tree& t) { return t.word; })
//      .label([](const Tree& t) { return t.label; });
//   rnn.add_branch("leaf", vjit::Arity::exactly(0), [&](vjit::Builder& f, vjit::Calls&) {
//     return f.tanh(f.pull_embedding(E));
//   });
//   rnn.add_branch("internal", vjit::Arity::exactly(2), [&](vjit::Builder& f, vjit::Calls& calls) {
//     return f.tanh(f.add(f.matmul(W, f.concat({calls.call(0), calls.call(1)})), b));
//   });
//   vjit::GraphBatch batch = rnn.batch({&tree_a, &tree_b});     // one sample per root
//
// A body returns the node's result (the front end scatters it; a body does not
// call scatter) and may push, add losses and read the node's token, label and
// feature row (pull_embedding, label, pull) like any vertex function. For a
// variable number of children, calls.call_sum() is Σ of their results and
// calls.call_all(max) the [max, n] block of them (zero rows past the last).
//
// A DAG: a node reached twice (the same address) becomes one vertex with
// several parents; its result is computed once. Bad input is a UserError naming
// the sample and the node (its path from the root, e.g. "root/1/0", and what
// Recursive::describe says of it): a cycle, a branch index out of range, a
// child count the branch does not take, a null child, a token, label or
// feature row the branch cannot use. A body calling call(i) past its declared
// arity, or not reading every declared child, is a UserError from add_branch.
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "vjit/graph.h"
#include "vjit/program.h"
#include "vjit/shape.h"

namespace vjit {

/// How many children a branch takes: `fixed` ones read as call(0) to
/// call(fixed − 1), then, when `variadic`, any number more (at most
/// `max_children` when that is >= 0) read together by call_sum or call_all.
struct Arity {
  int fixed = 0;          ///< children read one by one
  bool variadic = false;  ///< whether any number more follow
  int max_children = -1;  ///< the most variadic children (-1: no bound)

  static Arity exactly(int children) { return {children, false, -1}; }  ///< `children` read one by one
  /// Any number of children (at most max_children when >= 0), read by call_sum / call_all.
  static Arity any(int max_children = -1) { return {0, true, max_children}; }
  /// `fixed` children read one by one, then any number more.
  static Arity at_least(int fixed, int max_more = -1) { return {fixed, true, max_more}; }
  std::string str() const;  ///< for error messages, e.g. "2 children"
};

/// The recursive results a branch body reads: each stands for what the body of
/// the child's own branch returned.
class Calls {
 public:
  /// The calls of branch `branch`, written with `builder`: each result has
  /// shape `result`, and the children are as `arity` says.
  Calls(Builder& builder, Shape result, Arity arity, std::string branch);
  Value call(int child);               ///< the result on child `child` < Arity::fixed
  Value call_sum();                    ///< Σ of the results on the variadic children (zeros without any)
  Value call_all(int max_children);    ///< [max_children, n]: their results row by row, zero rows after
  /// Throws UserError unless every declared child was read.
  void check_all_read() const;

 private:
  [[noreturn]] void fail(const std::string& what) const;

  Builder& builder_;
  Shape result_;
  Arity arity_;
  std::string branch_;
  std::vector<bool> read_;
  bool variadic_read_ = false;
};

using BranchBody = std::function<Value(Builder&, Calls&)>;

/// The part of Recursive<Node> that does not depend on the node type: nodes are
/// `const void*` here. Use Recursive<Node>.
class RecursiveProgram {
 public:
  /// `result`: the shape every branch returns (what call(i) reads).
  RecursiveProgram(Program& program, Shape result);

  /// Builds the branch's vertex type (Program::add_type, named `name`) from its
  /// body, once. Returns the branch index the branch function picks it by
  /// (0, 1, ... in the order added). On a UserError nothing is added.
  int add_branch(const std::string& name, Arity arity, const BranchBody& body);

  int num_branches() const { return int(branches_.size()); }  ///< branches added so far
  /// The Program's vertex type of a branch (Vertex::type of its nodes).
  int vertex_type(int branch) const;
  const std::string& branch_name(int branch) const;  ///< the name it was added with
  const Shape& result_shape() const { return result_; }  ///< what every branch returns
  Program& program() const { return *program_; }  ///< the Program the branches are vertex types of

 protected:
  /// How the walk reads a node; the typed wrapper fills these.
  struct NodeAccess {
    std::function<void(const void*, std::vector<const void*>&)> children;  ///< appends the node's children
    std::function<int(const void*)> branch;                               ///< the node's branch index
    std::function<int(const void*)> token;                                ///< its token
    std::function<int(const void*)> label;                                ///< its label
    std::function<std::vector<float>(const void*)> features;              ///< its feature row
    std::function<std::string(const void*)> describe;                     ///< how errors name it
  };
  /// One sample: a vertex per distinct node reachable from the roots, children
  /// before parents, each root's vertex after all of its descendants. When
  /// `nodes` is given, (*nodes)[v] is the node of vertex v.
  Sample walk(const std::vector<const void*>& roots, std::string name, const NodeAccess& access,
              std::vector<const void*>* nodes) const;

 private:
  struct Branch {
    std::string name;
    Arity arity;
    int type = -1;
  };
  class Walk;

  Program* program_;
  Shape result_;
  std::vector<Branch> branches_;
};

/// A model over the user's node type `Node`. Set children (required), branch
/// (required with more than one branch) and, as the bodies need them, token,
/// label and features; then add the branches and build batches.
template <typename Node>
class Recursive : public RecursiveProgram {
 public:
  using RecursiveProgram::RecursiveProgram;

  /// `list(node)` returns the node's children in order, as a range of pointers
  /// (raw, unique_ptr, shared_ptr); a null one is a UserError.
  template <typename ListChildren>
  Recursive& children(ListChildren list) {
    access_.children = [list](const void* node, std::vector<const void*>& out) {
      for (auto&& child : list(as_node(node))) out.push_back(address_of(child));
    };
    return *this;
  }
  /// The branch index (from add_branch) that evaluates a node.
  Recursive& branch(std::function<int(const Node&)> pick) { return set(access_.branch, std::move(pick)); }
  /// The node's token (for pull_embedding), label (for label(); -1: none) and feature row (for pull).
  /// @{
  Recursive& token(std::function<int(const Node&)> f) { return set(access_.token, std::move(f)); }
  Recursive& label(std::function<int(const Node&)> f) { return set(access_.label, std::move(f)); }
  Recursive& features(std::function<std::vector<float>(const Node&)> f) { return set(access_.features, std::move(f)); }
  /// @}
  /// Optional: how error messages name a node, beside its path from the root.
  Recursive& describe(std::function<std::string(const Node&)> f) { return set(access_.describe, std::move(f)); }

  /// One sample over the nodes reachable from `root` (or several roots sharing
  /// nodes). nodes, when given, receives the node of each vertex: read a node's
  /// pushes at the index of its pointer there. The root's vertex is the last.
  Sample sample(const Node& root, std::string name = {}, std::vector<const Node*>* nodes = nullptr) const {
    return sample(std::vector<const Node*>{&root}, std::move(name), nodes);
  }
  /// The same over several roots, which may share nodes.
  Sample sample(const std::vector<const Node*>& roots, std::string name = {},
                std::vector<const Node*>* nodes = nullptr) const {
    std::vector<const void*> erased(roots.begin(), roots.end()), order;
    Sample s = walk(erased, std::move(name), access_, nodes ? &order : nullptr);
    if (nodes) {
      nodes->clear();
      for (const void* node : order) nodes->push_back(static_cast<const Node*>(node));
    }
    return s;
  }
  /// One sample per root, named "<first_index + i>" in errors.
  GraphBatch batch(const std::vector<const Node*>& roots, int first_index = 0) const {
    GraphBatch out;
    out.samples.reserve(roots.size());
    for (size_t i = 0; i < roots.size(); ++i)
      out.samples.push_back(sample(std::vector<const Node*>{roots[i]}, "sample " + std::to_string(first_index + int(i))));
    return out;
  }

 private:
  static const Node& as_node(const void* node) { return *static_cast<const Node*>(node); }
  template <typename Pointer>
  static const void* address_of(const Pointer& child) {
    if constexpr (std::is_pointer_v<std::remove_cvref_t<Pointer>>)
      return static_cast<const void*>(child);
    else
      return static_cast<const void*>(child.get());
  }
  template <typename R>
  Recursive& set(std::function<R(const void*)>& slot, std::function<R(const Node&)> f) {
    if (f)
      slot = [f = std::move(f)](const void* node) { return f(as_node(node)); };
    else
      slot = nullptr;
    return *this;
  }

  NodeAccess access_;
};

}  // namespace vjit
