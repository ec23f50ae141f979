#include "vjit/models.h"

#include <functional>
#include <map>

#include "vjit/error.h"

namespace vjit::models {

namespace {
const std::map<std::string, std::function<Bundle(const Config&)>>& registry() {
  static const std::map<std::string, std::function<Bundle(const Config&)>> models = {
      {"tree_lstm", make_tree_lstm},         {"tree_fc", make_tree_fc},
      {"tree_gru", make_tree_gru},           {"mv_rnn", make_mv_rnn},
      {"tree_lstm_2type", make_tree_lstm_2type}, {"tree_lstm_outputs", make_tree_lstm_outputs},
      {"var_lstm", make_var_lstm},           {"var_lstm_gates", make_var_lstm_gates},
      {"fixed_lstm", make_fixed_lstm},       {"bilstm_tagger", make_bilstm_tagger},
      {"lattice_lstm", make_lattice_lstm},   {"child_sum_tree_lstm", make_child_sum_tree_lstm},
      {"seq2seq", make_seq2seq},
      {"rntn", make_rntn},                   {"tree_rnn", make_tree_rnn},
  };
  return models;
}
}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& [name, make] : registry()) names.push_back(name);
  return names;
}

Bundle make_model(const std::string& name, const Config& config) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string valid;
    for (const std::string& n : model_names()) valid += (valid.empty() ? "" : ", ") + n;
    throw UserError("unknown model '" + name + "' (valid: " + valid + ")");
  }
  Bundle bundle = it->second(config);
  bundle.name = name;
  return bundle;
}

GraphBatch make_batch(const std::vector<Sample>& samples, const std::vector<int>& indices) {
  GraphBatch batch;
  batch.samples.reserve(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    const int i = indices[k];
    if (i < 0 || size_t(i) >= samples.size())
      throw UserError("make_batch: index " + std::to_string(i) + " (indices[" + std::to_string(k) +
                      "]) is outside the " + std::to_string(samples.size()) + " samples");
    batch.samples.push_back(samples[size_t(i)]);
  }
  return batch;
}

}  // namespace vjit::models
