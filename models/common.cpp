#include "models/common.h"

namespace vjit::models {

Model& start_bundle(Bundle& bundle, const Config& config) {
  bundle.model = std::make_unique<Model>(config.seed);
  bundle.program = std::make_unique<Program>(*bundle.model);
  return *bundle.model;
}

std::pair<Value, Value> split_state(Builder& b, Value state, int hidden) {
  return {b.slice(state, 0, hidden), b.slice(state, hidden, hidden)};
}

void classify(Builder& b, Param w_out, Value h, int classes) {
  Value logits = b.matmul(w_out, h);
  b.push(logits);
  b.add_loss(b.softmax_cross_entropy(logits, b.label(classes)));
}

TreeData load_trees(const Config& config) {
  TreeData data;
  if (config.data_path.empty()) {
    data.train = make_synthetic_treebank(config.train_samples, config.seed);
    data.test = make_synthetic_treebank(config.test_samples, config.seed + 1000003);
  } else {
    data.train = read_bracket_file(config.data_path);
    if (!config.test_path.empty()) data.test = read_bracket_file(config.test_path);
    if (!config.dev_path.empty()) data.dev = read_bracket_file(config.dev_path);
  }
  data.vocab = Vocabulary::from_trees(data.train, config.vocab_limit);
  return data;
}

Sample chain_sample(int type, const std::vector<int>& tokens, const std::vector<int>& labels, std::string name) {
  Sample sample;
  sample.name = std::move(name);
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::vector<int> children;
    if (i > 0) children.push_back(int(i) - 1);
    sample.add_vertex(type, children, tokens[i], labels[i]);
  }
  return sample;
}

}  // namespace vjit::models
