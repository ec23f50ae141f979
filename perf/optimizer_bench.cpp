// optimizer_bench: milliseconds per Adam step on a model shaped like the SST
// Tree-LSTM's (a 20000 x 256 embedding table and a few 256 x 512 matrices):
// dense (every element) vs with the rows a batch of 64 sentences of ~20 tokens
// touches (GradientRows), on one thread vs on all of them (the engine's pool).
// Prints one JSON line:
//   {"bench":"optimizer","vocab":20000,"dim":256,"matrices":4,"touched_rows":1280,"threads":N,
//    "ms_per_step":{"dense_1_thread":..,"dense_all_threads":..,"rows_1_thread":..,"rows_all_threads":..}}
// Usage: optimizer_bench [steps] (default 50; the median step is reported).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/optimizer_access.h"
#include "runtime/parallel_for.h"
#include "runtime/thread_pool.h"
#include "vjit/optimizer.h"

namespace {

constexpr int kVocab = 20000, kDim = 256, kMatrices = 4, kTouched = 64 * 20;

vjit::Model make_model() {
  vjit::Model model(1);
  model.add("embedding", vjit::Shape::mat(kVocab, kDim), vjit::Init::Uniform, 0.1f);
  for (int i = 0; i < kMatrices; ++i) {
    model.add("W" + std::to_string(i), vjit::Shape::mat(kDim, 2 * kDim));
    model.add("b" + std::to_string(i), vjit::Shape::vec(kDim), vjit::Init::Zeros);
  }
  return model;
}

// Median milliseconds of `steps` Adam steps (after two warm-up steps).
double ms_per_step(int steps, bool with_rows, vjit::runtime::ParallelFor* parallel) {
  vjit::Model model = make_model();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1e-3f, 1e-3f);
  std::vector<int32_t> rows(kVocab);
  for (int32_t r = 0; r < kVocab; ++r) rows[size_t(r)] = r;
  std::shuffle(rows.begin(), rows.end(), rng);
  rows.resize(kTouched);
  std::sort(rows.begin(), rows.end());

  std::vector<std::vector<float>> grads;
  for (int p = 0; p < model.size(); ++p) grads.emplace_back(size_t(model.param(p).shape.numel()), 0.0f);
  for (int32_t r : rows)
    for (int k = 0; k < kDim; ++k) grads[0][size_t(r) * kDim + size_t(k)] = uniform(rng);
  for (int p = 1; p < model.size(); ++p)
    for (float& g : grads[size_t(p)]) g = uniform(rng);
  std::vector<vjit::GradientRows> gradient_rows;
  if (with_rows) {
    gradient_rows.resize(size_t(model.size()));
    gradient_rows[0].all = false;
    gradient_rows[0].rows = rows;
  }

  vjit::Adam adam(1e-4f);
  std::vector<double> ms;
  for (int s = 0; s < steps + 2; ++s) {
    const auto start = std::chrono::steady_clock::now();
    vjit::runtime::OptimizerAccess::step(adam, model, grads, gradient_rows, parallel);
    const double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (s >= 2) ms.push_back(elapsed);
  }
  std::nth_element(ms.begin(), ms.begin() + ptrdiff_t(ms.size() / 2), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  vjit::runtime::ThreadPool one(1), all(0);
  vjit::runtime::PoolParallelFor on_one(one), on_all(all);
  nlohmann::json line = {{"bench", "optimizer"},
                         {"vocab", kVocab},
                         {"dim", kDim},
                         {"matrices", kMatrices},
                         {"touched_rows", kTouched},
                         {"threads", all.size()},
                         {"steps", steps}};
  line["ms_per_step"] = {{"dense_1_thread", ms_per_step(steps, false, &on_one)},
                         {"dense_all_threads", ms_per_step(steps, false, &on_all)},
                         {"rows_1_thread", ms_per_step(steps, true, &on_one)},
                         {"rows_all_threads", ms_per_step(steps, true, &on_all)}};
  std::printf("%s\n", line.dump().c_str());
  return 0;
}
