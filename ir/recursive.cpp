// The recursive front end (vjit/recursive.h): branches become vertex types
// once; each sample is a walk over the user's nodes that makes one vertex per
// distinct node, children first.
#include "vjit/recursive.h"

#include <unordered_map>

#include "vjit/error.h"

namespace vjit {

std::string Arity::str() const {
  std::string out = std::to_string(fixed) + (fixed == 1 ? " child" : " children");
  if (!variadic) return out;
  if (fixed == 0) out = "any number of children";
  else out += " and any number more";
  if (max_children >= 0) out += " (at most " + std::to_string(max_children) + (fixed ? " more)" : ")");
  return out;
}

// --- Calls ---

Calls::Calls(Builder& builder, Shape result, Arity arity, std::string branch)
    : builder_(builder), result_(result), arity_(arity), branch_(std::move(branch)), read_(size_t(arity.fixed)) {}

void Calls::fail(const std::string& what) const {
  throw UserError("recursive branch '" + branch_ + "' (" + arity_.str() + "): " + what);
}

Value Calls::call(int child) {
  if (child < 0 || child >= arity_.fixed)
    fail("call(" + std::to_string(child) + ") is past its arity" +
         (arity_.variadic ? " (variadic children are read by call_sum or call_all)" : ""));
  read_[size_t(child)] = true;
  return builder_.gather(child, result_);
}

Value Calls::call_sum() {
  if (!arity_.variadic) fail("call_sum() needs a variadic arity (Arity::any or Arity::at_least)");
  variadic_read_ = true;
  return builder_.gather_sum(result_);
}

Value Calls::call_all(int max_children) {
  if (!arity_.variadic) fail("call_all() needs a variadic arity (Arity::any or Arity::at_least)");
  if (arity_.max_children < 0 || max_children < arity_.max_children)
    fail("call_all(" + std::to_string(max_children) + ") needs the branch's Arity to bound its variadic children "
         "by at most " + std::to_string(max_children));
  variadic_read_ = true;
  return builder_.gather_all(max_children, result_);
}

void Calls::check_all_read() const {
  for (size_t k = 0; k < read_.size(); ++k)
    if (!read_[k]) fail("its body never reads call(" + std::to_string(k) + ")");
  if (arity_.variadic && !variadic_read_) fail("its body never reads its variadic children (call_sum or call_all)");
}

// --- RecursiveProgram ---

RecursiveProgram::RecursiveProgram(Program& program, Shape result) : program_(&program), result_(result) {
  VJIT_USER_CHECK(result.numel() > 0, "Recursive: the result shape " << result.str() << " is empty");
}

int RecursiveProgram::add_branch(const std::string& name, Arity arity, const BranchBody& body) {
  VJIT_USER_CHECK(arity.fixed >= 0, "recursive branch '" << name << "': negative arity " << arity.fixed);
  VJIT_USER_CHECK(!arity.variadic || arity.max_children != 0,
                  "recursive branch '" << name << "': a variadic arity of at most 0 children");
  VJIT_USER_CHECK(body, "recursive branch '" << name << "' has no body");
  int type = program_->add_type(name, [&](Builder& builder) {
    Calls calls(builder, result_, arity, name);
    Value result = body(builder, calls);
    VJIT_USER_CHECK(result.shape == result_, "recursive branch '" << name << "' returns " << result.shape.str()
                                                                    << ", the model's result is " << result_.str());
    calls.check_all_read();
    builder.scatter(result);
  });
  branches_.push_back(Branch{name, arity, type});
  return int(branches_.size()) - 1;
}

int RecursiveProgram::vertex_type(int branch) const {
  VJIT_USER_CHECK(branch >= 0 && branch < num_branches(), "Recursive: no branch " << branch);
  return branches_[size_t(branch)].type;
}

const std::string& RecursiveProgram::branch_name(int branch) const {
  VJIT_USER_CHECK(branch >= 0 && branch < num_branches(), "Recursive: no branch " << branch);
  return branches_[size_t(branch)].name;
}

// One depth-first walk over the nodes of a sample, iterative (a chain of a
// million nodes must not overflow the stack). A node is "open" while its
// descendants are walked; meeting an open node again is a cycle.
class RecursiveProgram::Walk {
 public:
  Walk(const RecursiveProgram& program, const NodeAccess& access, std::string name)
      : program_(program), access_(access), name_(std::move(name)) {
    sample_.name = name_;
  }

  Sample run(const std::vector<const void*>& roots, std::vector<const void*>* nodes) {
    VJIT_USER_CHECK(program_.num_branches() > 0, where() << ": the recursive model has no branches");
    VJIT_USER_CHECK(access_.children, where() << ": no children function (Recursive::children)");
    VJIT_USER_CHECK(access_.branch || program_.num_branches() == 1,
                    where() << ": " << program_.num_branches()
                            << " branches but no branch function (Recursive::branch) to pick one");
    for (size_t r = 0; r < roots.size(); ++r) {
      root_ = int(r);
      multiple_roots_ = roots.size() > 1;
      VJIT_USER_CHECK(roots[r] != nullptr, where() << ": root " << r << " is null");
      if (vertex_of_.count(roots[r])) continue;  // reached from an earlier root
      walk_from(roots[r]);
    }
    if (nodes) *nodes = std::move(order_);
    return std::move(sample_);
  }

 private:
  static constexpr int kOpen = -1;

  struct Frame {
    const void* node;
    int slot;    // which child of the parent frame it is
    int branch;
    std::vector<const void*> children;
    size_t next = 0;
  };

  void walk_from(const void* root) {
    enter(root, 0);
    while (!stack_.empty()) {
      Frame& top = stack_.back();
      if (top.next == top.children.size()) {
        finish(top);
        stack_.pop_back();
        continue;
      }
      int slot = int(top.next);
      const void* child = top.children[top.next++];
      auto seen = vertex_of_.find(child);
      if (seen == vertex_of_.end()) enter(child, slot);
      else if (seen->second == kOpen) cycle(child, slot);
    }
  }

  void enter(const void* node, int slot) {
    Frame frame{node, slot, access_.branch ? access_.branch(node) : 0, {}, 0};
    stack_.push_back(std::move(frame));
    Frame& top = stack_.back();
    VJIT_USER_CHECK(top.branch >= 0 && top.branch < program_.num_branches(),
                    where() << ", node " << here() << ": the branch function picked branch " << top.branch
                            << ", the model has branches 0.." << program_.num_branches() - 1);
    access_.children(node, top.children);
    for (size_t k = 0; k < top.children.size(); ++k)
      VJIT_USER_CHECK(top.children[k] != nullptr, where() << ", node " << here() << " (branch '"
                                                          << branch(top).name << "'): child " << k << " is null");
    check_arity(top);
    vertex_of_[node] = kOpen;
  }

  void check_arity(const Frame& frame) const {
    const Branch& b = branch(frame);
    int n = int(frame.children.size()), more = n - b.arity.fixed;
    int max_more = b.arity.max_children;
    const TypeSignature& signature = program_.program().signature(b.type);
    if (signature.max_children >= 0 && (max_more < 0 || signature.max_children < max_more))
      max_more = signature.max_children;
    bool fits = b.arity.variadic ? more >= 0 && (max_more < 0 || more <= max_more) : more == 0;
    VJIT_USER_CHECK(fits, where() << ", node " << here() << ": branch '" << b.name << "' takes " << b.arity.str()
                                  << ", the node has " << n);
  }

  // All children have vertices: the node's own comes after them.
  void finish(const Frame& frame) {
    const Branch& b = branch(frame);
    const TypeSignature& signature = program_.program().signature(b.type);
    Vertex vertex;
    vertex.type = b.type;
    for (const void* child : frame.children) vertex.children.push_back(vertex_of_.at(child));
    if (signature.vocab_size >= 0) vertex.token = token(frame, signature);
    if (signature.needs_label) vertex.label = label(frame, signature);
    if (signature.feature_width >= 0) vertex.features = features(frame, signature);
    sample_.vertices.push_back(std::move(vertex));
    vertex_of_[frame.node] = int(sample_.vertices.size()) - 1;
    order_.push_back(frame.node);
  }

  int token(const Frame& frame, const TypeSignature& signature) const {
    VJIT_USER_CHECK(access_.token, where() << ", node " << here() << ": branch '" << branch(frame).name
                                           << "' reads pull_embedding but the model has no token function "
                                              "(Recursive::token)");
    int token = access_.token(frame.node);
    VJIT_USER_CHECK(token >= 0 && token < signature.vocab_size,
                    where() << ", node " << here() << " (branch '" << branch(frame).name << "'): token " << token
                            << " is outside the embedding table's " << signature.vocab_size << " rows");
    return token;
  }

  int label(const Frame& frame, const TypeSignature& signature) const {
    if (!access_.label) return -1;
    int label = access_.label(frame.node);
    VJIT_USER_CHECK(label >= -1 && label < signature.num_classes,
                    where() << ", node " << here() << " (branch '" << branch(frame).name << "'): label " << label
                            << " is outside [0, " << signature.num_classes << ") (-1: no label)");
    return label;
  }

  std::vector<float> features(const Frame& frame, const TypeSignature& signature) const {
    VJIT_USER_CHECK(access_.features, where() << ", node " << here() << ": branch '" << branch(frame).name
                                              << "' reads pull but the model has no features function "
                                                 "(Recursive::features)");
    std::vector<float> row = access_.features(frame.node);
    VJIT_USER_CHECK(int(row.size()) == signature.feature_width,
                    where() << ", node " << here() << " (branch '" << branch(frame).name << "'): a feature row of "
                            << row.size() << " values, the branch pulls " << signature.feature_width);
    return row;
  }

  [[noreturn]] void cycle(const void* node, int slot) const {
    size_t open = 0;
    while (stack_[open].node != node) ++open;
    throw UserError((detail::Message() << where() << ": a cycle: node " << path(open + 1) << describe(node)
                                       << " is its own descendant (child " << slot << " of " << here() << ")")
                        .str());
  }

  const Branch& branch(const Frame& frame) const { return program_.branches_[size_t(frame.branch)]; }

  std::string where() const {
    return name_.empty() ? std::string("recursive sample") : "recursive sample '" + name_ + "'";
  }
  // The path from the root to the node of stack_[depth - 1], e.g. "root/1/0".
  std::string path(size_t depth) const {
    std::string out = multiple_roots_ ? "root " + std::to_string(root_) : std::string("root");
    for (size_t d = 1; d < depth; ++d) out += "/" + std::to_string(stack_[d].slot);
    return out;
  }
  std::string describe(const void* node) const {
    return access_.describe ? " [" + access_.describe(node) + "]" : std::string();
  }
  // The node on top of the stack: its path and description.
  std::string here() const { return path(stack_.size()) + describe(stack_.back().node); }

  const RecursiveProgram& program_;
  const NodeAccess& access_;
  std::string name_;
  Sample sample_;
  std::vector<Frame> stack_;
  std::unordered_map<const void*, int> vertex_of_;
  std::vector<const void*> order_;
  int root_ = 0;
  bool multiple_roots_ = false;
};

Sample RecursiveProgram::walk(const std::vector<const void*>& roots, std::string name, const NodeAccess& access,
                              std::vector<const void*>* nodes) const {
  VJIT_USER_CHECK(!roots.empty(), "Recursive::sample: no root");
  return Walk(*this, access, std::move(name)).run(roots, nodes);
}

}  // namespace vjit
