#pragma once
// Pieces shared by the example models: cells written with the Builder and the
// loading of their data.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "vjit/models.h"
#include "vjit/data.h"

namespace vjit::models {

inline Shape vec(int n) { return Shape::vec(n); }
inline Shape mat(int m, int n) { return Shape::mat(m, n); }

// Creates the bundle's model and program.
Model& start_bundle(Bundle& bundle, const Config& config);

// Splits a scattered [h; c] state into h and c.
std::pair<Value, Value> split_state(Builder& b, Value state, int hidden);

// An LSTM step on input x and previous state [h; c] (zeros for the first
// step): gates = W x + U h + b, c' = f⊙c + i⊙u, h' = o⊙tanh(c'). Returns (h', c').
// Gate order of W, U and b: i, f, o, g (g is the candidate u).
struct LstmCell {
  int hidden;
  Param w, u, b;
  LstmCell(Model& m, const std::string& prefix, int input, int hidden_size) : hidden(hidden_size) {
    w = m.add(prefix + "W", mat(4 * hidden, input));
    u = m.add(prefix + "U", mat(4 * hidden, hidden));
    b = m.add(prefix + "b", vec(4 * hidden), Init::Zeros);
  }
  std::pair<Value, Value> step(Builder& bl, Value x, Value state, std::optional<Value> extra_c = {}) const {
    auto [h, c] = split_state(bl, state, hidden);
    Value gates = bl.add(bl.add(bl.matmul(w, x), bl.matmul(u, h)), b);
    Value i = bl.sigmoid(bl.slice(gates, 0, hidden));
    Value f = bl.sigmoid(bl.slice(gates, hidden, hidden));
    Value o = bl.sigmoid(bl.slice(gates, 2 * hidden, hidden));
    Value g = bl.tanh(bl.slice(gates, 3 * hidden, hidden));
    Value c_next = bl.add(bl.mul(f, c), bl.mul(i, g));
    if (extra_c) c_next = bl.add(c_next, *extra_c);
    return {bl.mul(o, bl.tanh(c_next)), c_next};
  }
};

// The classifier head: logits = W_out h, pushed, with a cross-entropy loss
// against the vertex label (0 where the vertex has none).
void classify(Builder& b, Param w_out, Value h, int classes);

// Trees with their vocabulary: the synthetic treebank, or SST-format files.
struct TreeData {
  Vocabulary vocab;
  std::vector<BracketTree> train, dev, test;
};
TreeData load_trees(const Config& config);

// Samples from token sequences: vertex i of a chain has child i − 1 (none for
// the first), token tokens[i] and label labels[i].
Sample chain_sample(int type, const std::vector<int>& tokens, const std::vector<int>& labels, std::string name);

}  // namespace vjit::models
