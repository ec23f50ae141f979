// The CUDA executor end to end (ctest label `gpu`): every example model on the
// GPU equals the double reference interpreter (objective, pushed values,
// every gradient) under the lowering options that change what the executor
// runs (streaming on too), inference equals the CPU engine's, streaming equals
// one stream, training steps leave the same
// weights as on the CPU, and resident parameters those of the default path. Without a usable device every test says
// "skipped: no CUDA device (reason)".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "engine_check.h"
#include "jit/nvrtc.h"
#include "runtime/cuda_driver.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

constexpr double kTolerance = 1e-4;

using testing::cuda_options;
using testing::first_indices;

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
      {"fusion=off", [](Options& o) { o.tuning.fusion = false; }},
      {"lazy=off", [](Options& o) { o.tuning.lazy = false; }},
      {"memplan=padded", [](Options& o) { o.tuning.memplan = vjit::Options::MemoryPlanner::Padded; }},
      {"epilogue=off inplace_concat=off merge_matmuls=off",
       [](Options& o) {
         o.tuning.epilogue = false;
         o.tuning.inplace_concat = false;
         o.tuning.merge_matmuls = false;
       }},
      {"policy=depth fuse_across_phases=off",
       [](Options& o) {
         o.policy = vjit::Options::Policy::Depth;
         o.tuning.fuse_across_phases = false;
       }},
      {"streaming=on", [](Options& o) { o.tuning.streaming = true; }},
      {"batch_gemms=off", [](Options& o) { o.tuning.batch_gemms = vjit::Lever::Off; }},
      {"child_rows=off", [](Options& o) { o.tuning.child_rows = vjit::Lever::Off; }},
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

// Three steps on the GPU and on the CPU from the same weights leave the same
// weights: Adam and SGD with momentum and clipping run on the device
// (OptimizerAccess::device_rule), Adam with dense updates on the host; the engine
// switches between the two with the state carried over.
TEST_P(CudaEngine, TrainingStepsEqualTheCpu) {
  VJIT_SKIP_WITHOUT_CUDA();
  const std::string& model = GetParam();
  models::Bundle on_gpu = models::make_model(model, testing::small_config());
  models::Bundle on_cpu = models::make_model(model, testing::small_config());
  Engine gpu(*on_gpu.program, cuda_options()), cpu(*on_cpu.program, Options::defaults());
  Adam gpu_adam(0.01f), cpu_adam(0.01f);
  SGD gpu_sgd(0.05f, 0.9f, 0.01f, 0.5f), cpu_sgd(0.05f, 0.9f, 0.01f, 0.5f);
  GraphBatch batch = models::make_batch(on_gpu.train, first_indices(16));
  GraphBatch other = models::make_batch(on_gpu.train, {16, 17, 18, 19, 20});
  auto compare = [&](const char* what) {
    for (int p = 0; p < on_gpu.model->size(); ++p)
      EXPECT_LE(testing::tensor_error(on_gpu.model->param(p).value, on_cpu.model->param(p).value), 1e-3)
          << model << " " << what << ": " << on_gpu.model->param(p).name;
  };
  for (int step = 0; step < 3; ++step) {
    const GraphBatch& b = step == 1 ? other : batch;
    double g = gpu.train_step(b, gpu_adam), c = cpu.train_step(b, cpu_adam);
    EXPECT_NEAR(g, c, kTolerance * std::max(1.0, std::abs(c))) << model << " adam step " << step;
  }
  compare("adam");
  EXPECT_EQ(gpu.gradient_rows().size(), cpu.gradient_rows().size());
  for (size_t p = 0; p < cpu.gradient_rows().size(); ++p) {
    EXPECT_EQ(gpu.gradient_rows()[p].all, cpu.gradient_rows()[p].all);
    EXPECT_EQ(gpu.gradient_rows()[p].rows, cpu.gradient_rows()[p].rows);
  }
  gpu_adam.set_dense_updates(true);  // on the host, from the device's moments
  cpu_adam.set_dense_updates(true);
  gpu.train_step(batch, gpu_adam);
  cpu.train_step(batch, cpu_adam);
  gpu_adam.set_dense_updates(false);  // back on the device, from the host's moments
  cpu_adam.set_dense_updates(false);
  gpu.train_step(other, gpu_adam);
  cpu.train_step(other, cpu_adam);
  compare("adam, dense updates on the host and back");
  for (int step = 0; step < 2; ++step) {
    gpu.train_step(batch, gpu_sgd);
    cpu.train_step(batch, cpu_sgd);
  }
  compare("sgd with momentum and clipping");
  EXPECT_NEAR(gpu_sgd.last_grad_norm(), cpu_sgd.last_grad_norm(), 1e-4 * std::max(1.0, cpu_sgd.last_grad_norm()));
}

// Resident parameters (VJIT_CUDA_RESIDENT_PARAMS: the multi-tensor optimizer
// kernels, no copy back per step), with graphs off and on, leave the weights
// of the default path once read back, within float rounding (Σ g² is summed
// atomically in either): Adam, Adam with dense updates on the host in
// between, SGD with momentum and clipping.
TEST_P(CudaEngine, ResidentParametersEqualTheDefaultPath) {
  VJIT_SKIP_WITHOUT_CUDA();
  const std::string& model = GetParam();
  for (bool graphs : {false, true}) {
    models::Bundle one = models::make_model(model, testing::small_config());
    models::Bundle two = models::make_model(model, testing::small_config());
    Options resident = cuda_options();
    resident.tuning.cuda_resident_params = Lever::On;
    resident.tuning.cuda_graphs = graphs ? Lever::On : Lever::Off;
    Engine plain(*one.program, cuda_options()), kept(*two.program, resident);
    Adam adam_one(0.01f), adam_two(0.01f);
    SGD sgd_one(0.05f, 0.9f, 0.01f, 0.5f), sgd_two(0.05f, 0.9f, 0.01f, 0.5f);
    GraphBatch batch = models::make_batch(one.train, first_indices(16));
    const std::string what = model + (graphs ? " with graphs" : "");
    auto steps = [&](Optimizer& a, Optimizer& b, int count) {
      for (int step = 0; step < count; ++step) {
        double x = plain.train_step(batch, a), y = kept.train_step(batch, b);
        EXPECT_NEAR(y, x, 1e-5 * std::max(1.0, std::abs(x))) << what << " step " << step;
      }
    };
    steps(adam_one, adam_two, 3);
    adam_one.set_dense_updates(true);
    adam_two.set_dense_updates(true);
    steps(adam_one, adam_two, 1);
    adam_one.set_dense_updates(false);
    adam_two.set_dense_updates(false);
    steps(adam_one, adam_two, 1);
    steps(sgd_one, sgd_two, 2);
    EXPECT_NEAR(sgd_two.last_grad_norm(), sgd_one.last_grad_norm(), 1e-5 * std::max(1.0, sgd_one.last_grad_norm()));
    kept.download_parameters();
    for (int p = 0; p < one.model->size(); ++p)
      EXPECT_LE(testing::tensor_error(two.model->param(p).value, one.model->param(p).value), 1e-5)
          << what << ": " << one.model->param(p).name;
  }
}

// Streaming (eager forward steps on the second stream, events for the
// dependencies) computes what one stream does: the objective, the pushed
// values and every gradient of a training pass, then the weights after Adam
// steps, agree within float rounding (the loss is summed atomically, in
// whatever order the blocks run, on either path).
TEST_P(CudaEngine, StreamingEqualsOneStream) {
  VJIT_SKIP_WITHOUT_CUDA();
  const std::string& model = GetParam();
  models::Bundle one = models::make_model(model, testing::small_config());
  models::Bundle two = models::make_model(model, testing::small_config());
  Options streaming = cuda_options();
  streaming.tuning.streaming = true;
  Engine plain(*one.program, cuda_options()), streamed(*two.program, streaming);
  constexpr double kSame = 1e-5;
  for (int batch_size : {3, 48}) {
    GraphBatch batch = models::make_batch(one.train, first_indices(batch_size));
    RunOptions run;
    run.seed = 11;
    const std::string what = model + " batch " + std::to_string(batch_size);
    double a = plain.forward(batch, run), b = streamed.forward(batch, run);
    EXPECT_NEAR(b, a, kSame * std::max(1.0, std::abs(a))) << what;
    EXPECT_LE(testing::tensor_error(streamed.last_result().pushes.values(), plain.last_result().pushes.values()), kSame)
        << what;
    plain.backward();
    streamed.backward();
    ASSERT_EQ(streamed.gradients().size(), plain.gradients().size()) << what;
    for (size_t p = 0; p < plain.gradients().size(); ++p)
      EXPECT_LE(testing::tensor_error(streamed.gradients()[p], plain.gradients()[p]), kSame)
          << what << ": gradient of " << one.model->param(int(p)).name;
  }
  Adam adam_one(0.01f), adam_two(0.01f);
  GraphBatch batch = models::make_batch(one.train, first_indices(16));
  for (int step = 0; step < 3; ++step) {
    double a = plain.train_step(batch, adam_one), b = streamed.train_step(batch, adam_two);
    EXPECT_NEAR(b, a, kSame * std::max(1.0, std::abs(a))) << model << " step " << step;
  }
  for (int p = 0; p < one.model->size(); ++p)
    EXPECT_LE(testing::tensor_error(two.model->param(p).value, one.model->param(p).value), kSame)
        << model << ": " << one.model->param(p).name;
}

// A non-finite gradient on the device is the optimizer's UserError, naming
// the parameter, and leaves the Model's weights as they were, as on the CPU.
TEST(CudaEngineErrors, ANonFiniteGradientIsTheOptimizersError) {
  VJIT_SKIP_WITHOUT_CUDA();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config());
  ParamData& param = bundle.program->model().param(1);
  param.value[0] = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> before;
  for (int p = 0; p < bundle.model->size(); ++p) before.push_back(bundle.model->param(p).value);
  Engine engine(*bundle.program, cuda_options());
  Adam adam(0.01f);
  GraphBatch batch = models::make_batch(bundle.train, first_indices(8));
  try {
    engine.train_step(batch, adam);
    FAIL() << "a step with non-finite gradients succeeded";
  } catch (const UserError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("non-finite"), std::string::npos) << message;
  }
  for (int p = 0; p < bundle.model->size(); ++p)
    EXPECT_EQ(bundle.model->param(p).value, before[size_t(p)]) << bundle.model->param(p).name;
}

// An update that would overflow on the device: the kernel's preview flags it,
// nothing is written, and the host step names the parameter and the step; the
// weights, the step count and what infer returns are as before the step, on
// the first step (a state being made) and on a later one.
TEST(CudaEngineErrors, AnOverflowingUpdateChangesNothing) {
  VJIT_SKIP_WITHOUT_CUDA();
  for (int sane_steps : {0, 2}) {
    models::Bundle bundle = models::make_model("tree_lstm", testing::small_config());
    Engine engine(*bundle.program, cuda_options());
    GraphBatch batch = models::make_batch(bundle.train, first_indices(8));
    // lr·weight_decay = 1e-20: sane steps; after set_lr(1e30), lr·wd·w overflows every weight above ~0.04.
    SGD sgd(1e-30f, 0.0f, 1e10f);
    for (int s = 0; s < sane_steps; ++s) engine.train_step(batch, sgd);
    const std::vector<float> pushed = engine.infer(batch).pushes.values();
    std::vector<std::vector<float>> before;
    for (int p = 0; p < bundle.model->size(); ++p) before.push_back(bundle.model->param(p).value);
    sgd.set_lr(1e30f);
    try {
      engine.train_step(batch, sgd);
      FAIL() << "a step that overflows succeeded";
    } catch (const UserError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("non-finite"), std::string::npos) << message;
      EXPECT_NE(message.find("step " + std::to_string(sane_steps + 1)), std::string::npos) << message;
    }
    EXPECT_EQ(sgd.steps(), sane_steps);
    for (int p = 0; p < bundle.model->size(); ++p)
      EXPECT_EQ(bundle.model->param(p).value, before[size_t(p)]) << bundle.model->param(p).name;
    EXPECT_EQ(engine.infer(batch).pushes.values(), pushed);
    sgd.set_lr(1e-30f);
    EXPECT_TRUE(std::isfinite(engine.train_step(batch, sgd)));
    EXPECT_EQ(sgd.steps(), sane_steps + 1);
  }
}

// VJIT_CHECK_FINITE is the CPU executor's: with VJIT_DEVICE=cuda the Engine
// refuses it at construction, saying so.
TEST(CudaEngineErrors, CheckFiniteIsRefused) {
  VJIT_SKIP_WITHOUT_CUDA();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config());
  Options options = cuda_options();
  options.check_finite = true;
  try {
    Engine engine(*bundle.program, options);
    FAIL() << "VJIT_CHECK_FINITE=1 with VJIT_DEVICE=cuda was accepted";
  } catch (const UserError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("VJIT_CHECK_FINITE=on: the cuda device does not honour it"), std::string::npos) << message;
  }
}

// VJIT_TF32: products on TF32 tensor cores (10-bit mantissa). The accuracy
// Options states: the objective and gradients of the Tree-LSTM within 2e-2 of
// the double reference (FP32 is within 1e-4).
TEST(CudaEngineTf32, TreeLstmWithinTheStatedAccuracy) {
  VJIT_SKIP_WITHOUT_CUDA();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config());
  Options options = cuda_options();
  options.tuning.tf32 = vjit::Lever::On;
  Engine engine(*bundle.program, options);
  GraphBatch batch = models::make_batch(bundle.train, first_indices(32));
  testing::expect_matches_reference(engine, *bundle.program, batch, 2e-2, "tree_lstm tf32");
}

// Checkpoints of a GPU engine: the optimizer state saved is the device's
// (downloaded), a load hands it back (uploaded before the next step), and the
// resumed engine trains on as the one that saved (within float rounding: the
// device sums some gradients atomically).
TEST(CudaEngineCheckpoint, ResumedTrainingContinuesTheDevicesState) {
  VJIT_SKIP_WITHOUT_CUDA();
  const std::string path = ::testing::TempDir() + "vjit-cuda-checkpoint.safetensors";
  models::Bundle saved = models::make_model("tree_lstm", testing::small_config());
  models::Bundle resumed = models::make_model("tree_lstm", testing::small_config());
  Engine saver(*saved.program, cuda_options()), loader(*resumed.program, cuda_options());
  Adam saver_adam(0.01f), loader_adam(0.01f);
  GraphBatch batch = models::make_batch(saved.train, first_indices(16));
  GraphBatch other = models::make_batch(saved.train, {16, 17, 18, 19, 20});
  for (const GraphBatch* b : {&batch, &other}) saver.train_step(*b, saver_adam);
  save_checkpoint(path, saver, &saver_adam);
  const OptimizerState on_device = saver.optimizer_state();
  load_checkpoint(path, loader, &loader_adam);
  const OptimizerState loaded = loader.optimizer_state();
  ASSERT_EQ(loaded.slots.size(), on_device.slots.size());
  EXPECT_EQ(loaded.steps, 2);
  for (size_t p = 0; p < loaded.slots.size(); ++p) EXPECT_EQ(loaded.slots[p], on_device.slots[p]) << "parameter " << p;
  for (int p = 0; p < saved.model->size(); ++p) EXPECT_EQ(resumed.model->param(p).value, saved.model->param(p).value);
  for (const GraphBatch* b : {&batch, &other, &batch}) {
    const double a = saver.train_step(*b, saver_adam), c = loader.train_step(*b, loader_adam);
    EXPECT_NEAR(c, a, kTolerance * std::max(1.0, std::abs(a)));
  }
  for (int p = 0; p < saved.model->size(); ++p)
    EXPECT_LE(testing::tensor_error(resumed.model->param(p).value, saved.model->param(p).value), 1e-4)
        << saved.model->param(p).name;
  EXPECT_EQ(loader.optimizer_state().steps, 5);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(EveryModel, CudaEngine, ::testing::ValuesIn(models::model_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace vjit
