#pragma once
// What the benchmark programs under perf/ share: flag values read with a clear
// error, vjit-bench's batches and learning rate (peers-export must hand the
// PyTorch peers exactly vjit-bench's work), and a main() that turns an error
// into a message and an exit code instead of an abort.
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "vjit/error.h"

namespace vjit::bench {

// vjit-bench's Adam learning rate (small: timed steps must not diverge).
inline constexpr float kLearningRate = 1e-4f;

// The value of `flag` as an integer ≥ `least`; a UserError naming the flag otherwise.
inline int int_flag(const std::string& flag, const std::string& value, int least = 1) {
  try {
    size_t used = 0;
    int v = std::stoi(value, &used);
    if (used == value.size() && v >= least) return v;
  } catch (const std::exception&) {
  }
  throw UserError(flag + " needs an integer of at least " + std::to_string(least) + ", got '" + value + "'");
}

// The value of `flag` as a positive number of seconds.
inline double seconds_flag(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    double v = std::stod(value, &used);
    if (used == value.size() && v > 0) return v;
  } catch (const std::exception&) {
  }
  throw UserError(flag + " needs a positive number of seconds, got '" + value + "'");
}

// vjit-bench's batch `i` of `batch` samples: consecutive samples, wrapping around.
inline std::vector<int> batch_indices(int num_samples, int batch, int i) {
  std::vector<int> indices;
  for (int j = 0; j < batch; ++j) indices.push_back((i * batch + j) % num_samples);
  return indices;
}

// Runs body(argc, argv); a vjit error or any other exception becomes a line on
// stderr prefixed with the tool's name and exit code 2.
template <class Body>
int guarded_main(const char* tool, Body body, int argc, char** argv) {
  try {
    return body(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << tool << ": " << e.what() << "\n";
    return 2;
  }
}

}  // namespace vjit::bench
