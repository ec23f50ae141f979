// The bracket-tree reader (data/bracket.cpp) and what a treebank goes through
// after it (data/treebank.cpp, graph validation, the scheduler): any text is
// parsed or rejected with a UserError. What parses must be a well-formed tree,
// print and parse back to the same tree, become a sample whose vertices come
// children first, and schedule with every policy into at least the lower
// bound's number of tasks.
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "vjit/batching.h"
#include "vjit/data.h"
#include "vjit/graph.h"
#include "vjit/validate.h"

namespace {

using vjit::BracketTree;
using vjit::fuzz::finding;

void check_well_formed(const BracketTree& tree) {
  if (tree.nodes.empty()) finding("a parsed tree has no nodes");
  for (size_t i = 0; i < tree.nodes.size(); ++i) {
    const BracketTree::Node& node = tree.nodes[i];
    if (node.word.empty() == node.children.empty())
      finding("node " + std::to_string(i) + " has both or neither of a word and children");
    for (int child : node.children)
      if (child < 0 || size_t(child) >= i) finding("node " + std::to_string(i) + " has child " + std::to_string(child));
  }
}

bool same_tree(const BracketTree& a, const BracketTree& b) {
  if (a.nodes.size() != b.nodes.size()) return false;
  for (size_t i = 0; i < a.nodes.size(); ++i)
    if (a.nodes[i].label != b.nodes[i].label || a.nodes[i].word != b.nodes[i].word ||
        a.nodes[i].children != b.nodes[i].children)
      return false;
  return true;
}

// A child-sum tree model's types (leaf: embedding; internal: any number of
// children), labels in [0, 5) on every vertex.
std::vector<vjit::TypeSignature> tree_signatures(int vocab_size) {
  vjit::TypeSignature leaf;
  leaf.name = "leaf";
  leaf.scatters = true;
  leaf.scatter_shape = vjit::Shape::vec(2);
  leaf.vocab_size = vocab_size;
  leaf.needs_label = true;
  leaf.num_classes = 5;
  vjit::TypeSignature internal = leaf;
  internal.name = "internal";
  internal.vocab_size = -1;
  internal.variadic = true;
  internal.variadic_shape = vjit::Shape::vec(2);
  return {leaf, internal};
}

void check_order(const vjit::GraphBatch& batch, const std::vector<std::vector<int>>& order) {
  if (order.size() != batch.samples.size()) finding("validate_and_order: one order per sample expected");
  for (size_t s = 0; s < order.size(); ++s) {
    const std::vector<vjit::Vertex>& vertices = batch.samples[s].vertices;
    std::vector<int> position(vertices.size(), -1);
    for (size_t i = 0; i < order[s].size(); ++i) {
      int v = order[s][i];
      if (v < 0 || size_t(v) >= vertices.size() || position[size_t(v)] >= 0)
        finding("validate_and_order: sample " + std::to_string(s) + " order is not a permutation");
      position[size_t(v)] = int(i);
    }
    if (order[s].size() != vertices.size()) finding("validate_and_order: order misses vertices");
    for (size_t v = 0; v < vertices.size(); ++v)
      for (int child : vertices[v].children)
        if (position[size_t(child)] >= position[v]) finding("validate_and_order: a child comes after its parent");
  }
}

void check_batch(const std::vector<BracketTree>& trees) {
  const vjit::Vocabulary vocab = vjit::Vocabulary::from_trees(trees);
  const vjit::GraphBatch batch = vjit::trees_to_batch(trees, vocab, vjit::TreeTypes{0, 1});
  for (const vjit::Sample& sample : batch.samples)
    for (size_t v = 0; v < sample.vertices.size(); ++v)
      for (int child : sample.vertices[v].children)
        if (child < 0 || size_t(child) >= v) finding("tree_to_sample: a child does not come before its parent");
  vjit::fuzz::runs_or_rejects([&] { check_order(batch, vjit::validate_and_order(tree_signatures(vocab.size()), batch)); });
  for (const char* policy : {"depth", "agenda", "frontier", "ratio"}) {
    const vjit::ScheduleSummary summary = vjit::summarize_schedule(batch, 2, policy);
    if (summary.tasks < summary.lower_bound)
      finding(std::string(policy) + " schedules " + std::to_string(summary.tasks) + " tasks, below the lower bound " +
              std::to_string(summary.lower_bound));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = vjit::fuzz::as_text(data, size);
  std::vector<BracketTree> trees;
  if (!vjit::fuzz::runs_or_rejects([&] { trees = vjit::parse_bracket_trees(text, "fuzz"); })) return 0;
  for (const BracketTree& tree : trees) check_well_formed(tree);
  const std::string printed = vjit::format_bracket_trees(trees);  // parsed words always print
  const std::vector<BracketTree> again = vjit::parse_bracket_trees(printed, "printed");
  if (again.size() != trees.size()) finding("printing and parsing again changes the number of trees");
  for (size_t i = 0; i < trees.size(); ++i)
    if (!same_tree(trees[i], again[i])) finding("tree " + std::to_string(i) + " changes when printed and parsed again");
  // Parsed trees are well formed: only the program's checks (validate_and_order) may reject them.
  if (!vjit::fuzz::runs_or_rejects([&] { check_batch(trees); }))
    finding("converting or scheduling parsed trees threw a UserError");
  return 0;
}
