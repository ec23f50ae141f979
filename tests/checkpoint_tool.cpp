// The C++ side of tests/checkpoint_python.py: writes a checkpoint of a small
// trained Tree-LSTM with a JSON description of what it should hold, and loads
// a file of parameters written by Python, printing what it loaded.
//
//   checkpoint_tool write CHECKPOINT EXPECTED_JSON
//   checkpoint_tool read-parameters FILE LOADED_JSON
//
// EXPECTED_JSON: {"metadata": {...}, "tensors": {name: {"dtype", "shape", "values"}}}
// (the metadata entries the file must hold, every tensor it must hold).
// LOADED_JSON: {"tensors": {name: {...}}} of the model after load_parameters.
// Errors go to stderr with exit code 2.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "vjit/checkpoint.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace {

using nlohmann::ordered_json;
using namespace vjit;

// A small Tree-LSTM: hidden 8, embeddings of 6, 32 built-in samples.
models::Bundle small_tree_lstm() {
  models::Config config;
  config.hidden = 8;
  config.embed = 6;
  config.train_samples = 32;
  config.test_samples = 0;
  return models::make_model("tree_lstm", config);
}

ordered_json tensor_json(const std::string& dtype, const Shape& shape, const std::vector<float>& values) {
  std::vector<int> dims(shape.dims.begin(), shape.dims.begin() + shape.rank);
  return {{"dtype", dtype}, {"shape", dims}, {"values", values}};  // floats print to round-trip
}

ordered_json parameters_json(const Model& model) {
  ordered_json tensors = ordered_json::object();
  for (int p = 0; p < model.size(); ++p)
    tensors[model.param(p).name] = tensor_json("F32", model.param(p).shape, model.param(p).value);
  return tensors;
}

void write_json(const std::string& path, const ordered_json& j) {
  std::ofstream out(path);
  out << j.dump(1) << "\n";
  if (!out) throw UserError("cannot write " + path);
}

int write_checkpoint(const std::string& path, const std::string& expected_path) {
  models::Bundle bundle = small_tree_lstm();
  Engine engine(*bundle.program, Options::defaults());
  Adam adam(0.01f);
  for (int i = 0; i < 2; ++i) engine.train_step(models::make_batch(bundle.train, {4 * i, 4 * i + 1, 4 * i + 2}), adam);
  const std::map<std::string, std::string> user{{"epoch", "2"}, {"dev_accuracy", "0.8125"}, {"note", "näive ✓"}};
  save_checkpoint(path, engine, &adam, user);

  ordered_json metadata(user);
  metadata["vjit.format"] = "checkpoint";
  metadata["vjit.version"] = "1";
  metadata["vjit.signature"] = bundle.program->signature_string();
  metadata["vjit.train_steps"] = "2";
  metadata["vjit.frozen"] = "";
  metadata["vjit.optimizer"] = "adam";
  metadata["vjit.optimizer.slots"] = "exp_avg,exp_avg_sq";
  ordered_json tensors = parameters_json(*bundle.model);
  const OptimizerState state = engine.optimizer_state();
  const char* slots[] = {"exp_avg", "exp_avg_sq"};
  for (int k = 0; k < 2; ++k)
    for (int p = 0; p < bundle.model->size(); ++p)
      tensors[std::string("optimizer.") + slots[k] + "." + bundle.model->param(p).name] =
          tensor_json("F32", bundle.model->param(p).shape, state.slots[size_t(p)][size_t(k)]);
  tensors["optimizer.step"] = {{"dtype", "I64"}, {"shape", ordered_json::array()}, {"values", {state.steps}}};
  write_json(expected_path, {{"metadata", metadata}, {"tensors", tensors}});
  return 0;
}

int read_parameters(const std::string& path, const std::string& loaded_path) {
  models::Bundle bundle = small_tree_lstm();
  load_parameters(path, *bundle.model);
  write_json(loaded_path, {{"tensors", parameters_json(*bundle.model)}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string command = argc == 4 ? argv[1] : "";
    if (command == "write") return write_checkpoint(argv[2], argv[3]);
    if (command == "read-parameters") return read_parameters(argv[2], argv[3]);
    std::cerr << "usage: checkpoint_tool write CHECKPOINT EXPECTED_JSON | read-parameters FILE LOADED_JSON\n";
    return 1;
  } catch (const vjit::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
}
