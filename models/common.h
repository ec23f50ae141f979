#pragma once
// Pieces shared by the example models: cells written with the Builder and the
// loading of their data.
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
