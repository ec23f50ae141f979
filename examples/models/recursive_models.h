#pragma once
// Models written as recursion over plain user structs (vjit/recursive.h),
// shared by examples/recursive_tree_lstm.cpp and tests/test_recursive.cpp:
//   - the binary Tree-LSTM of the model zoo (tree_lstm in vjit/models.h: the
//     same parameter names, shapes and order, so a Model with the same seed
//     holds the same values) over `struct Tree`;
//   - a child-sum tree RNN over `struct NaryTree` (any number of children, or a
//     DAG whose nodes share children): h = tanh(W x + U Σ_k h_k + b), x the
//     node's feature row, with a softmax classifier on h where a node has a label.
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "vjit/vjit.h"

namespace vjit::examples {

struct Tree {
  int word = -1;   // leaves: the word's id
  int label = -1;  // sentiment class 0..4, -1: none
  std::unique_ptr<Tree> left, right;
};

constexpr int kSentimentClasses = 5;

// The Tree-LSTM of models/tree_models.cpp, written as two branches: "leaf" on
// the word and "internal" on call(0) and call(1), each returning [h; c].
class RecursiveTreeLstm {
 public:
  RecursiveTreeLstm(Model& model, int vocab, int hidden, int embed)
      : program(model), recursion(program, Shape::vec(2 * hidden)), hidden_(hidden) {
    // Added in the order and with the names and initialisations of the zoo's tree_lstm.
    embedding_ = model.add("embedding", Shape::mat(vocab, embed), Init::Uniform, 0.1f);
    w_iou_ = model.add("W_iou", Shape::mat(3 * hidden, embed));
    b_iou_ = model.add("b_iou", Shape::vec(3 * hidden), Init::Zeros);
    b_f_ = model.add("b_f", Shape::vec(hidden), Init::Ones);
    w_out_ = model.add("W_out", Shape::mat(kSentimentClasses, hidden));
    u_iou_ = model.add("U_iou", Shape::mat(3 * hidden, 2 * hidden));
    u_f1_ = model.add("U_f1", Shape::mat(hidden, hidden));
    u_f2_ = model.add("U_f2", Shape::mat(hidden, hidden));

    recursion
        .children([](const Tree& t) {
          return t.left || t.right ? std::vector<const Tree*>{t.left.get(), t.right.get()} : std::vector<const Tree*>{};
        })
        .branch([](const Tree& t) { return t.left || t.right ? 1 : 0; })
        .token([](const Tree& t) { return t.word; })
        .label([](const Tree& t) { return t.label; });
    recursion.add_branch("leaf", Arity::exactly(0), [this](Builder& f, Calls&) {
      return cell(f, f.matmul(w_iou_, f.pull_embedding(embedding_)), std::nullopt);
    });
    recursion.add_branch("internal", Arity::exactly(2), [this](Builder& f, Calls& calls) {
      Value left = calls.call(0), right = calls.call(1);
      Value h1 = f.slice(left, 0, hidden_), c1 = f.slice(left, hidden_, hidden_);
      Value h2 = f.slice(right, 0, hidden_), c2 = f.slice(right, hidden_, hidden_);
      Value f1 = f.sigmoid(f.add(f.matmul(u_f1_, h1), b_f_));
      Value f2 = f.sigmoid(f.add(f.matmul(u_f2_, h2), b_f_));
      Value forget = f.add(f.mul(f1, c1), f.mul(f2, c2));
      return cell(f, f.matmul(u_iou_, f.concat({h1, h2})), forget);
    });
  }
  RecursiveTreeLstm(const RecursiveTreeLstm&) = delete;  // `recursion` points to `program`

  Program program;
  Recursive<Tree> recursion;

 private:
  // i, o, u from one product: c = σ(i) ⊙ tanh(u) + forget, h = σ(o) ⊙ tanh(c);
  // classifies h against the node's label and returns [h; c].
  Value cell(Builder& f, Value iou_product, std::optional<Value> forget) const {
    Value iou = f.add(iou_product, b_iou_);
    Value i = f.sigmoid(f.slice(iou, 0, hidden_));
    Value o = f.sigmoid(f.slice(iou, hidden_, hidden_));
    Value u = f.tanh(f.slice(iou, 2 * hidden_, hidden_));
    Value c = f.mul(i, u);
    if (forget) c = f.add(c, *forget);
    Value h = f.mul(o, f.tanh(c));
    Value logits = f.matmul(w_out_, h);
    f.push(logits);
    f.add_loss(f.softmax_cross_entropy(logits, f.label(kSentimentClasses)));
    return f.concat({h, c});
  }

  int hidden_;
  Param embedding_, w_iou_, b_iou_, b_f_, w_out_, u_iou_, u_f1_, u_f2_;
};

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
