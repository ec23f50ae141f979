// The synthetic sentiment treebank and the conversion of bracket trees to
// GraphBatch samples for tree models.
#include <algorithm>
#include <array>

#include "data/text.h"
#include "vjit/data.h"
#include "vjit/error.h"
#include "vjit/random.h"

namespace vjit {

namespace {

struct Word {
  const char* text;
  int polarity;
};

constexpr std::array<Word, 24> kPolarWords{{
    {"excellent", 2}, {"wonderful", 2}, {"brilliant", 2},  {"superb", 2},   {"delightful", 2},
    {"masterful", 2}, {"good", 1},      {"nice", 1},       {"fun", 1},      {"charming", 1},
    {"solid", 1},     {"pleasant", 1},  {"bad", -1},       {"dull", -1},    {"boring", -1},
    {"weak", -1},     {"flat", -1},     {"tedious", -1},   {"awful", -2},   {"terrible", -2},
    {"dreadful", -2}, {"horrible", -2}, {"atrocious", -2}, {"abysmal", -2},
}};
constexpr std::array<const char*, 12> kNeutralWords{"the",    "film", "movie", "a",   "story", "plot",
                                                    "actors", "is",   "was",   "and", "it",    "this"};
constexpr std::array<const char*, 4> kNegators{"not", "never", "hardly", "n't"};

// A generated node before it becomes a BracketTree node.
struct Scored {
  int score = 0;
  bool negator = false;
};

int clamp_score(int score) { return std::clamp(score, -2, 2); }

class TreeMaker {
 public:
  TreeMaker(uint64_t seed, const SyntheticTreebankOptions& options) : rng_(seed), options_(options) {}

  BracketTree make() {
    tree_ = BracketTree{};
    scores_.clear();
    int length = rng_.uniform_int(options_.min_length, options_.max_length);
    build(length);
    return std::move(tree_);
  }

 private:
  // Appends a random binary tree over `length` words; returns its root index.
  int build(int length) {
    if (length == 1) return leaf();
    int split = rng_.uniform_int(1, length - 1);
    int left = build(split);
    int right = build(length - split);
    const Scored& a = scores_[size_t(left)];
    const Scored& b = scores_[size_t(right)];
    int score = a.score + b.score;
    if (a.negator != b.negator) score = a.negator ? -b.score : -a.score;
    return append(BracketTree::Node{clamp_score(score) + 2, "", {left, right}}, {clamp_score(score), false});
  }

  int leaf() {
    double u = rng_.uniform();
    if (u < options_.negator_rate)
      return append_word(kNegators[size_t(rng_.uniform_int(0, int(kNegators.size()) - 1))], 0, true);
    if (u < options_.negator_rate + options_.neutral_rate)
      return append_word(kNeutralWords[size_t(rng_.uniform_int(0, int(kNeutralWords.size()) - 1))], 0, false);
    const Word& w = kPolarWords[size_t(rng_.uniform_int(0, int(kPolarWords.size()) - 1))];
    return append_word(w.text, w.polarity, false);
  }

  int append_word(const char* word, int polarity, bool negator) {
    return append(BracketTree::Node{polarity + 2, word, {}}, {polarity, negator});
  }

  int append(BracketTree::Node node, Scored scored) {
    tree_.nodes.push_back(std::move(node));
    scores_.push_back(scored);
    return int(tree_.nodes.size()) - 1;
  }

  Rng rng_;
  SyntheticTreebankOptions options_;
  BracketTree tree_;
  std::vector<Scored> scores_;
};

void check_options(const SyntheticTreebankOptions& o) {
  VJIT_USER_CHECK(o.min_length >= 1 && o.min_length <= o.max_length,
                  "make_synthetic_treebank: need 1 <= min_length <= max_length, got " << o.min_length << ".."
                                                                                      << o.max_length);
  VJIT_USER_CHECK(o.negator_rate >= 0 && o.neutral_rate >= 0 && o.negator_rate + o.neutral_rate <= 1,
                  "make_synthetic_treebank: negator_rate and neutral_rate must be >= 0 with a sum <= 1, got "
                      << o.negator_rate << " and " << o.neutral_rate);
}

std::string tree_label(const std::string& name) { return name.empty() ? "the tree" : "'" + name + "'"; }

// Checks node `index` of a tree about to become a sample.
void check_node(const BracketTree& tree, int index, const std::string& name) {
  const BracketTree::Node& node = tree.nodes[size_t(index)];
  VJIT_USER_CHECK(node.word.empty() != node.children.empty(),
                  "tree_to_sample: " << tree_label(name) << ", node " << index
                                     << (node.word.empty() ? " has neither a word nor children"
                                                           : " has both a word and children"));
  for (int child : node.children)
    VJIT_USER_CHECK(child >= 0 && child < index,
                    "tree_to_sample: " << tree_label(name) << ", node " << index << " has child " << child
                                       << " (children come before their parents)");
}

}  // namespace

std::vector<BracketTree> make_synthetic_treebank(int num_trees, uint64_t seed,
                                                 SyntheticTreebankOptions options) {
  VJIT_USER_CHECK(num_trees >= 0, "make_synthetic_treebank: num_trees must be >= 0, got " << num_trees);
  check_options(options);
  TreeMaker maker(seed, options);
  std::vector<BracketTree> trees;
  trees.reserve(size_t(num_trees));
  for (int i = 0; i < num_trees; ++i) trees.push_back(maker.make());
  return trees;
}

Sample tree_to_sample(const BracketTree& tree, const Vocabulary& vocab, TreeTypes types, std::string name) {
  VJIT_USER_CHECK(!tree.nodes.empty(), "tree_to_sample: " << tree_label(name) << " has no nodes");
  Sample sample;
  sample.name = std::move(name);
  std::vector<int> vertex_of(tree.nodes.size(), -1);
  for (int i = 0; i < int(tree.nodes.size()); ++i) {
    check_node(tree, i, sample.name);
    const BracketTree::Node& node = tree.nodes[size_t(i)];
    if (node.children.size() == 1) {  // a unary node: its child stands for it, with its label
      vertex_of[size_t(i)] = vertex_of[size_t(node.children[0])];
      sample.vertices[size_t(vertex_of[size_t(i)])].label = node.label;
      continue;
    }
    std::vector<int> children;
    for (int child : node.children) children.push_back(vertex_of[size_t(child)]);
    int type = node.children.empty() ? types.leaf : types.internal;
    int token = node.children.empty() ? vocab.id(node.word) : -1;
    vertex_of[size_t(i)] = sample.add_vertex(type, std::move(children), token, node.label);
  }
  return sample;
}

GraphBatch trees_to_batch(std::span<const BracketTree> trees, const Vocabulary& vocab, TreeTypes types,
                          int first_index) {
  GraphBatch batch;
  batch.samples.reserve(trees.size());
  for (size_t i = 0; i < trees.size(); ++i)
    batch.samples.push_back(
        tree_to_sample(trees[i], vocab, types, "tree " + std::to_string(first_index + int(i))));
  return batch;
}

}  // namespace vjit
