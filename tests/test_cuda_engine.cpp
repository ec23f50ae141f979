// The CUDA executor end to end (ctest label `gpu`): every example model on the
// GPU equals the double reference interpreter (objective, pushed values,
// every gradient) under the lowering options that change what the executor
// runs, inference equals the CPU engine's, and training steps leave the same
// weights as on the CPU. Without a usable device every test says
// "skipped: no CUDA device (reason)".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine_check.h"
#include "examples/models/models.h"
#include "jit/nvrtc.h"
#include "runtime/cuda_driver.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

#define VJIT_SKIP_WITHOUT_CUDA()                                                                        \
  do {                                                                                                  \
    const runtime::CudaProbe& probe = runtime::probe_cuda();                                            \
    if (!probe.ok) GTEST_SKIP() << "skipped: no CUDA device (" << probe.reason << ")";                  \
    std::string nvrtc = jit::nvrtc_unavailable_reason();                                                \
    if (!nvrtc.empty()) GTEST_SKIP() << "skipped: no CUDA device usable without NVRTC (" << nvrtc << ")"; \
  } while (0)

constexpr double kTolerance = 1e-4;

std::vector<int> first_indices(int n) {
  std::vector<int> indices(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) indices[size_t(i)] = i;
  return indices;
}

Options cuda_options() {
  Options options = Options::defaults();
  options.device = "cuda";
  return options;
}

class CudaEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaEngine, MatchesTheReferenceUnderEveryLowering) {
  VJIT_SKIP_WITHOUT_CUDA();
  const std::string& model = GetParam();
  models::Bundle bundle = models::make_model(model, testing::small_config());
  struct Variant {
    const char* name;
    void (*apply)(Options&);
  };
  const Variant variants[] = {
      {"default", [](Options&) {}},
      {"fusion=off", [](Options& o) { o.fusion = false; }},
      {"lazy=off", [](Options& o) { o.lazy = false; }},
      {"memplan=padded", [](Options& o) { o.memplan = "padded"; }},
      {"epilogue=off inplace_concat=off merge_matmuls=off",
       [](Options& o) {
         o.epilogue = false;
         o.inplace_concat = false;
         o.merge_matmuls = false;
       }},
      {"policy=depth fuse_across_phases=off",
       [](Options& o) {
         o.policy = "depth";
         o.fuse_across_phases = false;
       }},
  };
  for (const Variant& v : variants) {
    Options options = cuda_options();
    v.apply(options);
    Engine engine(*bundle.program, options);
    for (int batch_size : {1, 7, 64}) {
      GraphBatch batch = models::make_batch(bundle.train, first_indices(batch_size));
      testing::expect_matches_reference(engine, *bundle.program, batch, kTolerance,
                                        model + " " + v.name + " batch " + std::to_string(batch_size));
    }
  }
}

TEST_P(CudaEngine, InferenceEqualsTheCpu) {
  VJIT_SKIP_WITHOUT_CUDA();
  const std::string& model = GetParam();
  models::Bundle bundle = models::make_model(model, testing::small_config());
  Engine gpu(*bundle.program, cuda_options()), cpu(*bundle.program, Options::defaults());
  GraphBatch batch = models::make_batch(bundle.train, first_indices(32));
  Evaluation<float> on_gpu = gpu.infer(batch), on_cpu = cpu.infer(batch);
  EXPECT_NEAR(on_gpu.objective, on_cpu.objective, kTolerance * std::max(1.0, std::abs(on_cpu.objective)));
  EXPECT_LE(testing::tensor_error(on_gpu.pushes.values(), on_cpu.pushes.values()), kTolerance);
}

// Three Adam steps on the GPU and on the CPU from the same weights: the same
// weights after (the optimizer runs runtime/optimizer.cpp on both).
TEST_P(CudaEngine, TrainingStepsEqualTheCpu) {
  VJIT_SKIP_WITHOUT_CUDA();
  const std::string& model = GetParam();
  models::Bundle on_gpu = models::make_model(model, testing::small_config());
  models::Bundle on_cpu = models::make_model(model, testing::small_config());
  Engine gpu(*on_gpu.program, cuda_options()), cpu(*on_cpu.program, Options::defaults());
  Adam gpu_adam(0.01f), cpu_adam(0.01f);
  GraphBatch batch = models::make_batch(on_gpu.train, first_indices(16));
  for (int step = 0; step < 3; ++step) {
    double g = gpu.train_step(batch, gpu_adam), c = cpu.train_step(batch, cpu_adam);
    EXPECT_NEAR(g, c, kTolerance * std::max(1.0, std::abs(c))) << model << " step " << step;
  }
  for (int p = 0; p < on_gpu.model->size(); ++p)
    EXPECT_LE(testing::tensor_error(on_gpu.model->param(p).value, on_cpu.model->param(p).value), 1e-3)
        << model << ": " << on_gpu.model->param(p).name;
  EXPECT_EQ(gpu.gradient_rows().size(), cpu.gradient_rows().size());
  for (size_t p = 0; p < cpu.gradient_rows().size(); ++p) {
    EXPECT_EQ(gpu.gradient_rows()[p].all, cpu.gradient_rows()[p].all);
    EXPECT_EQ(gpu.gradient_rows()[p].rows, cpu.gradient_rows()[p].rows);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryModel, CudaEngine, ::testing::ValuesIn(models::model_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace vjit
