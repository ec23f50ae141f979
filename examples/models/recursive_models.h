#pragma once
// Models written as recursion over plain user structs (vjit/recursive.h),
// shared by examples/recursive_tree_lstm.cpp and tests/test_recursive.cpp:
//   - the binary Tree-LSTM of the model zoo (tree_lstm in vjit/models.h: the
//     same parameter names, shapes and order, so a Model with the same seed
//     holds the same values) over `struct Tree`;
//   - the Child-Sum Tree-LSTM of the zoo (child_sum_tree_lstm, likewise) over
//     `struct Phrase`, whose nodes have any number of children (call_all);
//   - a child-sum tree RNN over `struct NaryTree` (any number of children, or a
//     DAG whose nodes share children): h = tanh(W x + U Σ_k h_k + b), x the
//     node's feature row, with a softmax classifier on h where a node has a label.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include "vjit/vjit.h"

namespace vjit::examples {

struct Tree {
  int word = -1;   // leaves: the word's id
  int label = -1;  // sentiment class 0..4, -1: none
  std::unique_ptr<Tree> left, right;
};

constexpr int kSentimentClasses = 5;

// The cell both Tree-LSTMs share, with the parameters the zoo's tree_lstm and
// child_sum_tree_lstm add first (same names, shapes, initialisations and order):
// the leaf cell on the word's embedding, and the end of every cell.
struct TreeLstmCell {
  TreeLstmCell(Model& model, int vocab, int hidden, int embed)
      : hidden(hidden),
        embedding(model.add("embedding", Shape::mat(vocab, embed), Init::Uniform, 0.1f)),
        w_iou(model.add("W_iou", Shape::mat(3 * hidden, embed))),
        b_iou(model.add("b_iou", Shape::vec(3 * hidden), Init::Zeros)),
        b_f(model.add("b_f", Shape::vec(hidden), Init::Ones)),
        w_out(model.add("W_out", Shape::mat(kSentimentClasses, hidden))) {}

  // A leaf: [h; c] of the cell on x = embedding[word], without a forget term.
  Value leaf(Builder& f) const { return finish(f, f.matmul(w_iou, f.pull_embedding(embedding)), std::nullopt); }

  // i, o, u from one product: c = σ(i) ⊙ tanh(u) + forget, h = σ(o) ⊙ tanh(c);
  // classifies h against the node's label and returns [h; c].
  Value finish(Builder& f, Value iou_product, std::optional<Value> forget) const {
    Value iou = f.add(iou_product, b_iou);
    Value i = f.sigmoid(f.slice(iou, 0, hidden));
    Value o = f.sigmoid(f.slice(iou, hidden, hidden));
    Value u = f.tanh(f.slice(iou, 2 * hidden, hidden));
    Value c = f.mul(i, u);
    if (forget) c = f.add(c, *forget);
    Value h = f.mul(o, f.tanh(c));
    Value logits = f.matmul(w_out, h);
    f.push(logits);
    f.add_loss(f.softmax_cross_entropy(logits, f.label(kSentimentClasses)));
    return f.concat({h, c});
  }

  int hidden;
  Param embedding, w_iou, b_iou, b_f, w_out;
};

// The Tree-LSTM of models/tree_models.cpp, written as two branches: "leaf" on
// the word and "internal" on call(0) and call(1), each returning [h; c].
class RecursiveTreeLstm {
 public:
  RecursiveTreeLstm(Model& model, int vocab, int hidden, int embed)
      : program(model),
        recursion(program, Shape::vec(2 * hidden)),
        cell_(model, vocab, hidden, embed),
        u_iou_(model.add("U_iou", Shape::mat(3 * hidden, 2 * hidden))),
        u_f1_(model.add("U_f1", Shape::mat(hidden, hidden))),
        u_f2_(model.add("U_f2", Shape::mat(hidden, hidden))) {
    recursion
        .children([](const Tree& t) {
          return t.left || t.right ? std::vector<const Tree*>{t.left.get(), t.right.get()} : std::vector<const Tree*>{};
        })
        .branch([](const Tree& t) { return t.left || t.right ? 1 : 0; })
        .token([](const Tree& t) { return t.word; })
        .label([](const Tree& t) { return t.label; });
    recursion.add_branch("leaf", Arity::exactly(0), [this](Builder& f, Calls&) { return cell_.leaf(f); });
    recursion.add_branch("internal", Arity::exactly(2), [this](Builder& f, Calls& calls) {
      const int hidden = cell_.hidden;
      Value left = calls.call(0), right = calls.call(1);
      Value h1 = f.slice(left, 0, hidden), c1 = f.slice(left, hidden, hidden);
      Value h2 = f.slice(right, 0, hidden), c2 = f.slice(right, hidden, hidden);
      Value f1 = f.sigmoid(f.add(f.matmul(u_f1_, h1), cell_.b_f));
      Value f2 = f.sigmoid(f.add(f.matmul(u_f2_, h2), cell_.b_f));
      Value forget = f.add(f.mul(f1, c1), f.mul(f2, c2));
      return cell_.finish(f, f.matmul(u_iou_, f.concat({h1, h2})), forget);
    });
  }
  RecursiveTreeLstm(const RecursiveTreeLstm&) = delete;  // `recursion` points to `program`

  Program program;
  Recursive<Tree> recursion;

 private:
  TreeLstmCell cell_;
  Param u_iou_, u_f1_, u_f2_;
};

// A phrase of a sentence with any number of parts: a leaf (no children) is a
// word; an internal node has one or more children.
struct Phrase {
  int word = -1;   // leaves: the word's id
  int label = -1;  // sentiment class 0..4, -1: none
  std::vector<std::unique_ptr<Phrase>> children;
};

// The Child-Sum Tree-LSTM of the zoo's child_sum_tree_lstm (Tai et al. 2015,
// §3.1; the same parameters) over `struct Phrase`: "leaf" on the word and
// "internal" on call_all, the [max_children, 2H] block of its children's
// [h; c] rows, with one forget gate per child from one product over the block.
class RecursiveChildSumTreeLstm {
 public:
  RecursiveChildSumTreeLstm(Model& model, int vocab, int hidden, int embed, int max_children)
      : program(model),
        recursion(program, Shape::vec(2 * hidden)),
        cell_(model, vocab, hidden, embed),
        u_iou_(model.add("U_iou", Shape::mat(3 * hidden, hidden))),
        u_f_(model.add("U_f", Shape::mat(hidden, hidden))) {
    recursion
        .children([](const Phrase& p) -> const std::vector<std::unique_ptr<Phrase>>& { return p.children; })
        .branch([](const Phrase& p) { return p.children.empty() ? 0 : 1; })
        .token([](const Phrase& p) { return p.word; })
        .label([](const Phrase& p) { return p.label; });
    recursion.add_branch("leaf", Arity::exactly(0), [this](Builder& f, Calls&) { return cell_.leaf(f); });
    recursion.add_branch("internal", Arity::any(max_children), [this, max_children](Builder& f, Calls& calls) {
      const int hidden = cell_.hidden;
      Value block = calls.call_all(max_children);  // row k: child k's [h; c]; zero rows after the last child
      Value h = f.slice_cols(block, 0, hidden), c = f.slice_cols(block, hidden, hidden);
      Value forget_gates = f.sigmoid(f.add(f.matmul(h, u_f_), cell_.b_f));  // row k: σ(h_kᵀ U_f + b_f)
      Value forget = f.sum_rows(f.mul(forget_gates, c));                    // Σ_k f_k ⊙ c_k (padding adds 0)
      return cell_.finish(f, f.matmul(u_iou_, f.sum_rows(h)), forget);
    });
  }
  RecursiveChildSumTreeLstm(const RecursiveChildSumTreeLstm&) = delete;

  Program program;
  Recursive<Phrase> recursion;

 private:
  TreeLstmCell cell_;
  Param u_iou_, u_f_;
};

// The largest number of children of a node under the roots (call_all's bound).
inline int max_fan_in(const std::vector<const Phrase*>& roots) {
  int most = 0;
  std::vector<const Phrase*> stack(roots.begin(), roots.end());
  while (!stack.empty()) {
    const Phrase* phrase = stack.back();
    stack.pop_back();
    most = std::max(most, int(phrase->children.size()));
    for (const auto& child : phrase->children) stack.push_back(child.get());
  }
  return most;
}

// A binary tree sample of the model zoo (leaves: a token, no children; internal
// vertices: two children; the root last) as a Tree.
inline std::unique_ptr<Tree> tree_from_sample(const Sample& sample, int vertex = -1) {
  if (vertex < 0) vertex = int(sample.vertices.size()) - 1;
  const Vertex& v = sample.vertices.at(size_t(vertex));
  auto tree = std::make_unique<Tree>();
  tree->label = v.label;
  if (v.children.empty()) {
    tree->word = v.token;
  } else {
    tree->left = tree_from_sample(sample, v.children.at(0));
    tree->right = tree_from_sample(sample, v.children.at(1));
  }
  return tree;
}

// A tree sample of the model zoo with any fan-in (leaves: a token; the root
// last), e.g. child_sum_tree_lstm's, as a Phrase.
inline std::unique_ptr<Phrase> phrase_from_sample(const Sample& sample, int vertex = -1) {
  if (vertex < 0) vertex = int(sample.vertices.size()) - 1;
  const Vertex& v = sample.vertices.at(size_t(vertex));
  auto phrase = std::make_unique<Phrase>();
  phrase->label = v.label;
  if (v.children.empty()) phrase->word = v.token;
  for (int child : v.children) phrase->children.push_back(phrase_from_sample(sample, child));
  return phrase;
}

struct NaryTree {
  std::vector<float> features;  // x
  int label = -1;
  std::vector<NaryTree*> children;  // not owned: a DAG may share them
};

// The nodes of NaryTree samples, owned in one place.
struct NaryForest {
  std::vector<std::unique_ptr<NaryTree>> nodes;
  std::vector<const NaryTree*> roots;

  NaryTree* add(std::vector<float> features, int label, std::vector<NaryTree*> children) {
    nodes.push_back(std::make_unique<NaryTree>(NaryTree{std::move(features), label, std::move(children)}));
    return nodes.back().get();
  }
};

// The same samples without the front end, for comparison: a hand-written walk
// over the nodes, one vertex per distinct node, children first.
inline GraphBatch hand_built_batch(const std::vector<const NaryTree*>& roots, int node_type) {
  GraphBatch batch;
  for (const NaryTree* root : roots) {
    Sample sample;
    std::unordered_map<const NaryTree*, int> vertex_of;
    auto visit = [&](auto& self, const NaryTree* node) -> int {
      if (auto seen = vertex_of.find(node); seen != vertex_of.end()) return seen->second;
      std::vector<int> children;
      for (const NaryTree* child : node->children) children.push_back(self(self, child));
      int v = sample.add_vertex(node_type, children, -1, node->label);
      sample.vertices[size_t(v)].features = node->features;
      return vertex_of[node] = v;
    };
    visit(visit, root);
    batch.samples.push_back(std::move(sample));
  }
  return batch;
}

// The child-sum tree RNN's parameters.
struct ChildSumRnn {
  ChildSumRnn(Model& model, int features, int hidden, int classes)
      : hidden(hidden),
        classes(classes),
        features(features),
        w(model.add("W", Shape::mat(hidden, features))),
        u(model.add("U", Shape::mat(hidden, hidden))),
        b(model.add("b", Shape::vec(hidden), Init::Zeros)),
        w_out(model.add("W_out", Shape::mat(classes, hidden))) {}

  // The vertex function, given Σ_k h_k: classifies and returns h.
  Value cell(Builder& f, Value child_sum) const {
    Value h = f.tanh(f.add(f.add(f.matmul(w, f.pull(features)), f.matmul(u, child_sum)), b));
    Value logits = f.matmul(w_out, h);
    f.push(logits);
    f.add_loss(f.softmax_cross_entropy(logits, f.label(classes)));
    return h;
  }

  int hidden, classes, features;
  Param w, u, b, w_out;
};

// The child-sum RNN written as recursion: one branch for every node, leaves
// included (call_sum() is zeros without children).
class RecursiveChildSumRnn {
 public:
  RecursiveChildSumRnn(Model& model, int features, int hidden, int classes)
      : program(model), recursion(program, Shape::vec(hidden)), rnn(model, features, hidden, classes) {
    recursion.children([](const NaryTree& t) { return t.children; })
        .features([](const NaryTree& t) { return t.features; })
        .label([](const NaryTree& t) { return t.label; });
    recursion.add_branch("node", Arity::any(), [this](Builder& f, Calls& calls) { return rnn.cell(f, calls.call_sum()); });
  }
  RecursiveChildSumRnn(const RecursiveChildSumRnn&) = delete;

  Program program;
  Recursive<NaryTree> recursion;
  ChildSumRnn rnn;
};

// Random trees of 1 + n nodes with 0..max_children children each and a label
// on every node (a function of the features, so that it can be learned); with
// share > 0, each node takes as an extra child, at that rate, a node already
// made for the same sample (a DAG: shared children, still acyclic).
inline NaryForest random_nary_forest(int samples, int nodes_per_sample, int max_children, int features,
                                     int classes, double share, uint64_t seed) {
  NaryForest forest;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  for (int s = 0; s < samples; ++s) {
    std::vector<NaryTree*> open;  // nodes without a parent yet
    std::vector<NaryTree*> made;
    for (int n = 0; n < nodes_per_sample; ++n) {
      std::vector<float> x(static_cast<size_t>(features));
      for (float& v : x) v = value(rng);
      int label = int((x[0] + 1.0f) * 0.5f * float(classes) * 0.999f);
      std::vector<NaryTree*> children;
      int want = int(rng() % uint64_t(max_children + 1));
      while (int(children.size()) < want && !open.empty()) {
        children.push_back(open.back());
        open.pop_back();
      }
      if (share > 0 && !made.empty() && coin(rng) < share && int(children.size()) < max_children) {
        NaryTree* shared = made[size_t(rng() % made.size())];
        bool already = false;
        for (NaryTree* c : children) already = already || c == shared;
        if (!already) children.push_back(shared);
      }
      NaryTree* node = forest.add(std::move(x), label, std::move(children));
      made.push_back(node);
      open.insert(open.begin(), node);
    }
    // One root over what is left open.
    std::vector<float> x(static_cast<size_t>(features), 0.5f);
    forest.roots.push_back(forest.add(std::move(x), -1, std::move(open)));
  }
  return forest;
}

}  // namespace vjit::examples
