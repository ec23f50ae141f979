#pragma once
// The example models of vjit, each a vertex program plus its data: built-in
// generated data by default, or a file of the public benchmark format named by
// Config::data_path. Examples, tests and benchmarks all build models here.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vjit/vjit.h"

namespace vjit::models {

struct Config {
  int hidden = 64;
  int embed = 0;               // 0: same as hidden
  double dropout = 0.0;
  uint64_t seed = 1;
  int train_samples = 1000;    // built-in data sizes
  int test_samples = 200;
  std::string data_path;       // empty: built-in data; else a file in the model's benchmark format
  std::string test_path;       // optional held-out file of the same format
  std::string dev_path;        // optional development file of the same format (picks the best epoch)
  int vocab_limit = 20000;     // largest vocabulary taken from a data file
  int tree_fc_leaves = 256;    // leaves of Tree-FC's complete binary trees (TensorFlow Fold uses 256)
  int embed_size() const { return embed > 0 ? embed : hidden; }
};

// A model with its data. `model` outlives `program`, which points to it.
struct Bundle {
  std::string name;
  std::unique_ptr<Model> model;
  std::unique_ptr<Program> program;
  std::vector<Sample> train;
  std::vector<Sample> test;
  std::vector<Sample> dev;     // from Config::dev_path (tree models), else empty
  // Vertex types whose first push is class logits scored against the label.
  std::vector<int> classifier_types;
};

// Names: tree_lstm, tree_fc, var_lstm, var_lstm_gates, fixed_lstm, bilstm_tagger, tree_gru,
// mv_rnn, tree_lstm_2type, tree_lstm_outputs, lattice_lstm. Throws UserError listing them for an
// unknown name.
Bundle make_model(const std::string& name, const Config& config);
std::vector<std::string> model_names();

// The samples at `indices` as one batch.
GraphBatch make_batch(const std::vector<Sample>& samples, const std::vector<int>& indices);

// --- per family (models.cpp dispatches to these) ---
Bundle make_tree_lstm(const Config& config);
Bundle make_tree_fc(const Config& config);
Bundle make_tree_gru(const Config& config);
Bundle make_mv_rnn(const Config& config);
Bundle make_tree_lstm_2type(const Config& config);
Bundle make_tree_lstm_outputs(const Config& config);
Bundle make_var_lstm(const Config& config);
Bundle make_var_lstm_gates(const Config& config);  // var_lstm with one weight per gate
Bundle make_fixed_lstm(const Config& config);
Bundle make_bilstm_tagger(const Config& config);
Bundle make_lattice_lstm(const Config& config);

}  // namespace vjit::models
