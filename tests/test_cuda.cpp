// The GPU back end's checks that need no GPU: the generated CUDA source, built
// for the host through the shim and run against the reference kernel; NVRTC
// compiling every kernel the example models generate for sm_80 and sm_90; the
// disk cache's atomic writes, corruption and concurrency; device selection.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "codegen/cuda_source.h"
#include "ir/dropout.h"
#include "cuda_test_util.h"
#include "jit/disk_cache.h"
#include "jit/nvrtc.h"
#include "runtime/cuda_driver.h"
#include "runtime/optimizer_access.h"
#include "user_error.h"

namespace vjit::testing {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& what) {
  fs::path dir = fs::temp_directory_path() / ("vjit-" + what + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The entries in `dir`, each checked not to be a temporary file left behind.
int finished_entries(const fs::path& dir) {
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++entries;
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
  return entries;
}

// The module source of every example kernel and the index kernels, compiled
// for the host with the shim, loaded once.
class HostModule {
 public:
  static HostModule& get() {
    static HostModule module;
    return module;
  }
  const std::vector<codegen::KernelSpec>& specs() const { return specs_; }
  using HostEntry = void (*)(void**, unsigned, unsigned);
  HostEntry entry(const std::string& name) const {
    auto fn = reinterpret_cast<HostEntry>(::dlsym(handle_, (name + "_host").c_str()));
    EXPECT_NE(fn, nullptr) << name;
    return fn;
  }
  std::string error;

 private:
  HostModule() : specs_(example_kernel_specs()) {
    std::vector<codegen::CudaKernelSource> kernels;
    for (const codegen::KernelSpec& spec : specs_) kernels.push_back(codegen::cuda_fused_kernel(spec));
    kernels.push_back({"index", codegen::cuda_index_kernels_source()});
    kernels.push_back({"runtime", codegen::cuda_runtime_kernels_source()});
    fs::path dir = fresh_dir("host-shim");
    std::ofstream(dir / "module.cu") << codegen::cuda_module_source(kernels);
    std::string command = std::string(VJIT_HOST_CXX) +
                          " -std=c++20 -O1 -ffp-contract=off -fPIC -shared -DVJIT_CUDA_HOST_SHIM -include " +
                          VJIT_TESTS_DIR "/cuda_host_shim.h -x c++ " + (dir / "module.cu").string() + " -o " +
                          (dir / "module.so").string() + " 2> " + (dir / "log.txt").string();
    if (std::system(command.c_str()) != 0) {
      std::ifstream log(dir / "log.txt");
      error = "host compile failed: " + command + "\n" + std::string(std::istreambuf_iterator<char>(log), {});
      return;
    }
    handle_ = ::dlopen((dir / "module.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle_) error = ::dlerror();
  }
  std::vector<codegen::KernelSpec> specs_;
  void* handle_ = nullptr;
};

TEST(CudaSource, EveryExampleModelHasFusedKernels) {
  EXPECT_GE(HostModule::get().specs().size(), 10u);
}

TEST(CudaSource, RefusesAMalformedSpec) {
  codegen::KernelSpec spec;
  spec.width = 4;
  spec.inputs.resize(1);
  spec.instrs.push_back({ir::Op::Add, 0, 3, 0.0f});  // operand 3 does not exist yet
  spec.outputs.push_back(0);
  EXPECT_THROW(codegen::cuda_fused_kernel(spec), InternalError);
  spec.instrs[0] = {ir::Op::MatMul, 0, 0, 0.0f};
  EXPECT_THROW(codegen::cuda_fused_kernel(spec), InternalError);
}

// The same generated source, built for the host: every example kernel equals
// the reference kernel bit for bit (the shim's expf/tanhf/logf are the
// reference's), over a grid too small for the rows so the grid-stride loop wraps.
TEST(CudaHostShim, EveryExampleKernelMatchesTheReference) {
  HostModule& module = HostModule::get();
  ASSERT_TRUE(module.error.empty()) << module.error;
  uint32_t seed = 1;
  for (const codegen::KernelSpec& spec : module.specs()) {
    for (int64_t rows : {int64_t(1), int64_t(7), int64_t(37)}) {
      FusedOperands in(spec, rows, seed++);
      std::vector<std::vector<float>> expected = reference_outputs(spec, in);
      FusedOperands out = in;
      std::vector<uint64_t> pointers;
      for (const auto& v : out.inputs) pointers.push_back(reinterpret_cast<uint64_t>(v.data()));
      for (auto& v : out.outputs) pointers.push_back(reinterpret_cast<uint64_t>(v.data()));
      std::vector<void*> params = fused_params(out.rows, pointers, out.input_ld, out.output_ld);
      module.entry(codegen::cuda_fused_kernel(spec).name)(params.data(), 3, 32);
      for (size_t o = 0; o < expected.size(); ++o)
        EXPECT_EQ(out.outputs[o], expected[o]) << spec.key() << " rows " << rows << " output " << o;
    }
  }
}

// The executor's kernels, built for the host: dropout draws ir::dropout_keeps'
// mask bit for bit, the unfused elementwise op equals the op semantics, the
// softmax cross-entropy and its gradient equal a direct loop.
TEST(CudaHostShim, RuntimeKernelsMatchTheCpuSemantics) {
  HostModule& module = HostModule::get();
  ASSERT_TRUE(module.error.empty()) << module.error;
  long long rows = 3, width = 50, ld = 53;
  std::vector<float> x(size_t(rows * ld)), out(size_t(rows * ld), -7.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 17) - 8) * 0.25f;
  std::vector<int> ids{0, 3, 2, 1, 5, 9};
  const float* xp = x.data();
  float* op = out.data();
  const int* idp = ids.data();
  unsigned long long seed = 77;
  int key = 4, training = 1;
  double rate = 0.3;
  float scale = float(1.0 / (1.0 - rate));
  std::vector<void*> dropout{&rows, &width, &xp, &ld, &op, &ld, &idp, &seed, &key, &rate, &scale, &training};
  module.entry("vjit_dropout")(dropout.data(), 2, 32);
  for (long long r = 0; r < rows; ++r)
    for (long long i = 0; i < width; ++i) {
      bool keep = ir::dropout_keeps(seed, ids[size_t(2 * r)], ids[size_t(2 * r + 1)], key, i, rate);
      EXPECT_EQ(out[size_t(r * ld + i)], keep ? x[size_t(r * ld + i)] * scale : 0.0f) << r << "," << i;
    }

  // Sub with b a vector broadcast over the rows (n = 10 of a 50-wide row).
  const float* bp = x.data() + 1;
  long long na = width, nb = 10, lb = 0;
  int sub = int(ir::Op::Sub);
  float c = 0.0f;
  std::vector<void*> elementwise{&sub, &rows, &width, &xp, &ld, &na, &bp, &lb, &nb, &c, &op, &ld};
  module.entry("vjit_elementwise")(elementwise.data(), 3, 16);
  for (long long r = 0; r < rows; ++r)
    for (long long i = 0; i < width; ++i)
      EXPECT_EQ(out[size_t(r * ld + i)], x[size_t(r * ld + i)] - bp[i % 10]) << r << "," << i;

  std::vector<int> labels{3, -1, 49};
  const int* lp = labels.data();
  std::vector<float> up{2.0f, 5.0f, -1.5f};
  const float* upp = up.data();
  long long one = 1;
  int gradient = 1;
  std::vector<void*> softmax{&rows, &width, &xp, &ld, &lp, &upp, &one, &gradient, &op, &ld};
  module.entry("vjit_softmax_ce")(softmax.data(), 1, 2);
  for (long long r = 0; r < rows; ++r) {
    const float* row = x.data() + r * ld;
    float max = *std::max_element(row, row + width), total = 0.0f;
    for (long long i = 0; i < width; ++i) total += std::exp(row[i] - max);
    float g = labels[size_t(r)] < 0 ? 0.0f : up[size_t(r)];
    for (long long i = 0; i < width; ++i) {
      float expected = std::exp(row[i] - max) * (g / total) - (i == labels[size_t(r)] ? g : 0.0f);
      EXPECT_NEAR(out[size_t(r * ld + i)], expected, 1e-6f) << r << "," << i;
    }
  }
}

// SymOuter and its gradient, built for the host, against the reference
// interpreter's loops (rows with a leading dimension past their width).
TEST(CudaHostShim, SymOuterKernelsMatchTheReferenceLoops) {
  HostModule& module = HostModule::get();
  ASSERT_TRUE(module.error.empty()) << module.error;
  long long rows = 3, n = 7, packed = n * (n + 1) / 2, xld = 9, gld = 31, ld = 30;
  std::vector<float> x(size_t(rows * xld)), g(size_t(rows * gld)), out(size_t(rows * ld), -7.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 13) - 6) * 0.25f;
  for (size_t i = 0; i < g.size(); ++i) g[i] = float(int(i % 11) - 5) * 0.5f;
  const float *xp = x.data(), *gp = g.data();
  float* op = out.data();
  std::vector<void*> forward{&rows, &xp, &xld, &n, &op, &ld, &packed};
  module.entry("vjit_sym_outer")(forward.data(), 2, 8);
  for (long long r = 0; r < rows; ++r) {
    long long at = 0;
    for (long long a = 0; a < n; ++a)
      for (long long b = a; b < n; ++b, ++at)
        EXPECT_EQ(out[size_t(r * ld + at)], x[size_t(r * xld + a)] * x[size_t(r * xld + b)])
            << r << ": " << a << "," << b;
    EXPECT_EQ(at, packed);
  }
  std::vector<void*> gradient{&rows, &xp, &xld, &n, &gp, &gld, &packed, &op, &ld, &n};
  module.entry("vjit_sym_outer_grad")(gradient.data(), 2, 4);
  for (long long r = 0; r < rows; ++r) {
    std::vector<double> want(size_t(n), 0.0);
    long long at = 0;
    for (long long a = 0; a < n; ++a)
      for (long long b = a; b < n; ++b, ++at) {
        want[size_t(a)] += double(g[size_t(r * gld + at)]) * x[size_t(r * xld + b)];
        want[size_t(b)] += double(g[size_t(r * gld + at)]) * x[size_t(r * xld + a)];
      }
    for (long long c = 0; c < n; ++c) EXPECT_NEAR(out[size_t(r * ld + c)], want[size_t(c)], 1e-5) << r << ", " << c;
  }
}

// The device optimizer, built for the host, leaves the same weights bit for bit
// as Optimizer::step on the CPU: Adam, and SGD with momentum and clipping.
// LayerNorm and its gradient, built for the host (one thread per row, fewer
// threads than rows), against the formulas in float64; the padding past each
// row's width is left alone.
TEST(CudaHostShim, LayerNormKernelsMatchTheFormulaInFloat64) {
  HostModule& module = HostModule::get();
  ASSERT_TRUE(module.error.empty()) << module.error;
  long long rows = 5, n = 7, xld = 9, gld = 11, ld = 10;
  std::vector<float> x(size_t(rows * xld)), g(size_t(rows * gld)), out(size_t(rows * ld), -7.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 13) - 6) * 0.25f + float(i / 9) * 0.5f;
  for (size_t i = 0; i < g.size(); ++i) g[i] = float(int(i % 11) - 5) * 0.5f;
  const float *xp = x.data(), *gp = g.data();
  float* op = out.data();
  struct Moments {
    double mean, sigma;
  };
  auto moments = [&](long long r) {
    double mean = 0, var = 0;
    for (long long i = 0; i < n; ++i) mean += x[size_t(r * xld + i)] / double(n);
    for (long long i = 0; i < n; ++i) var += std::pow(x[size_t(r * xld + i)] - mean, 2) / double(n);
    return Moments{mean, std::sqrt(var + 1e-5)};
  };
  std::vector<void*> forward{&rows, &xp, &xld, &n, &op, &ld, &n};
  module.entry("vjit_layer_norm")(forward.data(), 1, 2);
  for (long long r = 0; r < rows; ++r) {
    const Moments m = moments(r);
    for (long long i = 0; i < n; ++i)
      EXPECT_NEAR(out[size_t(r * ld + i)], (x[size_t(r * xld + i)] - m.mean) / m.sigma, 2e-6) << r << ", " << i;
    for (long long i = n; i < ld; ++i) EXPECT_EQ(out[size_t(r * ld + i)], -7.0f) << r << ", " << i;
  }
  std::vector<void*> gradient{&rows, &xp, &xld, &n, &gp, &gld, &n, &op, &ld, &n};
  module.entry("vjit_layer_norm_grad")(gradient.data(), 2, 2);
  for (long long r = 0; r < rows; ++r) {
    const Moments m = moments(r);
    double g_mean = 0, gy_mean = 0;
    for (long long i = 0; i < n; ++i) {
      g_mean += g[size_t(r * gld + i)] / double(n);
      gy_mean += g[size_t(r * gld + i)] * (x[size_t(r * xld + i)] - m.mean) / m.sigma / double(n);
    }
    for (long long i = 0; i < n; ++i) {
      const double y = (x[size_t(r * xld + i)] - m.mean) / m.sigma;
      EXPECT_NEAR(out[size_t(r * ld + i)], (g[size_t(r * gld + i)] - g_mean - y * gy_mean) / m.sigma, 1e-5)
          << r << ", " << i;
    }
  }
}

TEST(CudaHostShim, OptimizerKernelEqualsTheCpuStep) {
  HostModule& module = HostModule::get();
  ASSERT_TRUE(module.error.empty()) << module.error;
  Adam cpu_adam(0.01f, 0.9f, 0.999f, 1e-8f, 0.01f), gpu_adam(0.01f, 0.9f, 0.999f, 1e-8f, 0.01f);
  SGD cpu_sgd(0.1f, 0.9f, 0.001f, 0.5f), gpu_sgd(0.1f, 0.9f, 0.001f, 0.5f);
  for (Optimizer* pair : {static_cast<Optimizer*>(&cpu_adam), static_cast<Optimizer*>(&cpu_sgd)}) {
    Optimizer& cpu = *pair;
    Optimizer& gpu = pair == &cpu_adam ? static_cast<Optimizer&>(gpu_adam) : static_cast<Optimizer&>(gpu_sgd);
    Model on_cpu, on_gpu;
    on_cpu.add("w", Shape::mat(5, 7));
    on_gpu.add("w", Shape::mat(5, 7));
    on_gpu.param(0).value = on_cpu.param(0).value;
    std::vector<float> slot0(35, 0.0f), slot1(35, 0.0f);
    OptimizerState state;
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> grads{std::vector<float>(35)};
      for (size_t i = 0; i < 35; ++i) grads[0][i] = float(int((i * 7 + size_t(step)) % 11) - 5) * 0.3f;
      cpu.step(on_cpu, grads);
      double sum = 0;
      for (float g : grads[0]) sum += double(g) * double(g);
      runtime::DeviceUpdate rule = runtime::OptimizerAccess::begin_device_step(gpu, on_gpu, state, sum);
      std::vector<unsigned long long> ptrs{reinterpret_cast<unsigned long long>(on_gpu.param(0).value.data()),
                                           reinterpret_cast<unsigned long long>(grads[0].data()),
                                           reinterpret_cast<unsigned long long>(slot0.data()),
                                           reinterpret_cast<unsigned long long>(slot1.data())};
      long long rows = 1, width = 35;
      const unsigned long long* p = ptrs.data();
      int kind = rule.kind == runtime::DeviceUpdate::Kind::Adam ? 3 : 2;
      float omb1 = 1.0f - rule.beta1, omb2 = 1.0f - rule.beta2;
      int preview = 1;
      unsigned non_finite = 0;
      unsigned* flag = &non_finite;
      std::vector<void*> params{&rows, &width, &p, &kind, &rule.lr, &rule.weight_decay, &rule.momentum, &rule.beta1,
                                &rule.beta2, &omb1, &omb2, &rule.correction1, &rule.correction2, &rule.eps,
                                &rule.decay, &rule.scale, &preview, &flag};
      // The preview stores nothing and finds every value finite; then the update.
      const std::vector<float> before = on_gpu.param(0).value;
      module.entry("vjit_optimizer_update")(params.data(), 2, 8);
      EXPECT_EQ(on_gpu.param(0).value, before) << "step " << step;
      EXPECT_EQ(non_finite, 0u);
      preview = 0;
      module.entry("vjit_optimizer_update")(params.data(), 2, 8);
      EXPECT_EQ(on_gpu.param(0).value, on_cpu.param(0).value) << "step " << step;
      EXPECT_NEAR(gpu.last_grad_norm(), cpu.last_grad_norm(), 1e-12 * cpu.last_grad_norm());
    }
  }
}

// One step's gradients of a model and the multi-tensor table over them: per
// parameter a row of (weights, gradient, slot 0, slot 1) addresses, an
// embedding table (rows not all) a row per touched row, and each row's start.
struct MultiTensorTable {
  std::vector<std::vector<float>> grads;
  double sum_of_squares = 0;
  std::vector<unsigned long long> ptrs;
  std::vector<long long> starts{0};

  MultiTensorTable(Model& model, std::vector<std::vector<float>>& slots, const std::vector<GradientRows>& touched,
                   int step) {
    for (int p = 0; p < model.size(); ++p) {
      const GradientRows& rows = touched[size_t(p)];
      const int64_t cols = model.param(p).shape.cols(), numel = model.param(p).shape.numel();
      std::vector<float>& g = grads.emplace_back(size_t(numel), 0.0f);
      for (int64_t i = 0; i < numel; ++i) {
        if (!rows.all && std::count(rows.rows.begin(), rows.rows.end(), int32_t(i / cols)) == 0) continue;
        g[size_t(i)] = float(int((i * 7 + p * 3 + step) % 11) - 5) * 0.3f;
        sum_of_squares += double(g[size_t(i)]) * double(g[size_t(i)]);
      }
      auto row = [&](int64_t first, int64_t width) {
        for (float* base : {model.param(p).value.data(), g.data(), slots[size_t(2 * p)].data(),
                            slots[size_t(2 * p + 1)].data()})
          ptrs.push_back(reinterpret_cast<unsigned long long>(base + first));
        starts.push_back(starts.back() + width);
      };
      if (rows.all) row(0, numel);
      else
        for (int32_t r : rows.rows) row(r * cols, cols);
    }
  }
};

// The multi-tensor kernels (one launch over every parameter) over parameters
// of three widths, an embedding table's touched rows among them, equal the
// CPU step bit for bit for each rule with a device form: SGD, SGD with
// momentum (and clipping), Adam. Σ g² is the host's, up to the order of the sum.
TEST(CudaHostShim, MultiTensorOptimizerEqualsTheCpuStep) {
  HostModule& module = HostModule::get();
  ASSERT_TRUE(module.error.empty()) << module.error;
  auto make = [](int rule) -> std::unique_ptr<Optimizer> {
    if (rule == 0) return std::make_unique<SGD>(0.1f, 0.0f, 0.001f);
    if (rule == 1) return std::make_unique<SGD>(0.1f, 0.9f, 0.001f, 0.5f);
    return std::make_unique<Adam>(0.01f, 0.9f, 0.999f, 1e-8f, 0.01f);
  };
  const std::vector<GradientRows> touched{{}, {}, {false, {1, 4}}};
  for (int rule : {0, 1, 2}) {
    std::unique_ptr<Optimizer> cpu = make(rule), gpu = make(rule);
    Model on_cpu, on_gpu;
    for (Model* model : {&on_cpu, &on_gpu}) {
      model->add("w", Shape::mat(5, 7));
      model->add("b", Shape::mat(1, 3));
      model->add("table", Shape::mat(6, 4));
    }
    std::vector<std::vector<float>> slots;
    for (int p = 0; p < 3; ++p) {
      on_gpu.param(p).value = on_cpu.param(p).value;
      slots.insert(slots.end(), 2, std::vector<float>(size_t(on_cpu.param(p).shape.numel()), 0.0f));
    }
    OptimizerState state;
    for (int step = 0; step < 3; ++step) {
      MultiTensorTable table(on_gpu, slots, touched, step);
      cpu->step(on_cpu, table.grads, touched);
      long long rows = (long long)(table.starts.size() - 1);
      const unsigned long long* ptrs = table.ptrs.data();
      const long long* starts = table.starts.data();
      double sum = 0;
      double* sum_at = &sum;
      std::vector<void*> norm_params{&rows, &ptrs, &starts, &sum_at};
      module.entry("vjit_sum_squares_multi")(norm_params.data(), 2, 8);
      EXPECT_NEAR(sum, table.sum_of_squares, 1e-12 * sum) << "rule " << rule << ", step " << step;
      runtime::DeviceUpdate u = runtime::OptimizerAccess::begin_device_step(*gpu, on_gpu, state, table.sum_of_squares);
      int kind = u.kind == runtime::DeviceUpdate::Kind::Adam ? 3 : u.kind == runtime::DeviceUpdate::Kind::SgdMomentum ? 2 : 1;
      EXPECT_EQ(kind, rule + 1);
      float omb1 = 1.0f - u.beta1, omb2 = 1.0f - u.beta2;
      int preview = 1;
      unsigned non_finite = 0;
      unsigned* flag = &non_finite;
      std::vector<void*> params{&rows,   &ptrs,          &starts,        &kind,  &u.lr,    &u.weight_decay,
                                &u.momentum, &u.beta1,   &u.beta2,       &omb1,  &omb2,    &u.correction1,
                                &u.correction2, &u.eps,  &u.decay,       &u.scale, &preview, &flag};
      const std::vector<float> before(on_gpu.param(0).value.begin(), on_gpu.param(0).value.end());
      module.entry("vjit_optimizer_update_multi")(params.data(), 2, 8);
      EXPECT_EQ(std::vector<float>(on_gpu.param(0).value.begin(), on_gpu.param(0).value.end()), before);
      EXPECT_EQ(non_finite, 0u);
      preview = 0;
      module.entry("vjit_optimizer_update_multi")(params.data(), 2, 8);
      for (int p = 0; p < 3; ++p)
        EXPECT_EQ(on_gpu.param(p).value, on_cpu.param(p).value)
            << "rule " << rule << ", step " << step << ", " << on_cpu.param(p).name;
    }
  }
}

// The multi-tensor update with preview 0 stores nothing while the flag its
// preview sets is set (the update queued after a preview that found a
// non-finite value).
TEST(CudaHostShim, MultiTensorUpdateStoresNothingAfterAFlag) {
  HostModule& module = HostModule::get();
  ASSERT_TRUE(module.error.empty()) << module.error;
  std::vector<float> w{1.0f, 2.0f, 3.0f}, g{0.5f, 0.25f, -1.0f}, m(3, 0.0f), v(3, 0.0f);
  std::vector<unsigned long long> ptrs;
  for (float* base : {w.data(), g.data(), m.data(), v.data()}) ptrs.push_back(reinterpret_cast<unsigned long long>(base));
  std::vector<long long> starts{0, 3};
  long long rows = 1;
  const unsigned long long* p = ptrs.data();
  const long long* s = starts.data();
  int kind = 2, preview = 0;
  float lr = 0.5f, wd = 0.0f, momentum = 0.9f, beta1 = 0.9f, beta2 = 0.999f, omb1 = 0.1f, omb2 = 0.001f;
  float c1 = 1.0f, c2 = 1.0f, eps = 1e-8f, decay = 1.0f, scale = 1.0f;
  unsigned non_finite = 1;
  unsigned* flag = &non_finite;
  std::vector<void*> params{&rows, &p,  &s,  &kind, &lr,  &wd,    &momentum, &beta1,   &beta2,
                            &omb1, &omb2, &c1, &c2,   &eps, &decay, &scale,    &preview, &flag};
  const std::vector<float> w0 = w;
  module.entry("vjit_optimizer_update_multi")(params.data(), 1, 4);
  EXPECT_EQ(w, w0) << "stored after a flag";
  EXPECT_EQ(m, std::vector<float>(3, 0.0f));
  non_finite = 0;
  module.entry("vjit_optimizer_update_multi")(params.data(), 1, 4);
  EXPECT_NE(w, w0) << "stored nothing without a flag";
  EXPECT_EQ(w[0], 1.0f - 0.5f * 0.5f);  // velocity 0.5, w − lr·velocity
}

// The kernel's preview flags an update that would leave a non-finite weight
// or slot value (as Optimizer::step's preview does) and stores nothing; the
// update with preview 0 stores them (what the executor never runs after a flag).
TEST(CudaHostShim, OptimizerKernelPreviewFlagsNonFiniteValues) {
  HostModule& module = HostModule::get();
  ASSERT_TRUE(module.error.empty()) << module.error;
  for (int kind : {1, 2, 3}) {
    std::vector<float> w{1.0f, -3e38f, 2.0f}, g{0.5f, 3e38f, 1e30f}, m(3, 0.0f), v(3, 0.0f);
    if (kind == 2) m[1] = 3e38f;  // μ·v + g overflows the velocity
    std::vector<unsigned long long> ptrs{reinterpret_cast<unsigned long long>(w.data()),
                                         reinterpret_cast<unsigned long long>(g.data()),
                                         reinterpret_cast<unsigned long long>(m.data()),
                                         reinterpret_cast<unsigned long long>(v.data())};
    const unsigned long long* p = ptrs.data();
    long long rows = 1, width = 3;
    float lr = 1.0f, wd = 0.0f, momentum = 0.9f, beta1 = 0.9f, beta2 = 0.999f, omb1 = 0.1f, omb2 = 0.001f;
    float c1 = 0.1f, c2 = 0.001f, eps = 1e-8f, decay = 1.0f, scale = 1.0f;
    int preview = 1;
    unsigned non_finite = 0;
    unsigned* flag = &non_finite;
    std::vector<void*> params{&rows, &width, &p,  &kind, &lr,  &wd,   &momentum, &beta1,   &beta2,
                              &omb1, &omb2,  &c1, &c2,   &eps, &decay, &scale,   &preview, &flag};
    const std::vector<float> w0 = w, m0 = m, v0 = v;
    module.entry("vjit_optimizer_update")(params.data(), 1, 4);
    EXPECT_EQ(non_finite, 1u) << "kind " << kind;  // SGD: w[1] = −3e38 − 3e38; Adam: v[2] = 0.001·1e60
    EXPECT_EQ(w, w0) << "kind " << kind;
    EXPECT_EQ(m, m0) << "kind " << kind;
    EXPECT_EQ(v, v0) << "kind " << kind;
    // Finite values only: no flag.
    g = {0.5f, 0.25f, -1.0f};
    w[1] = 1.0f;
    m[1] = 0.0f;
    non_finite = 0;
    module.entry("vjit_optimizer_update")(params.data(), 1, 4);
    EXPECT_EQ(non_finite, 0u) << "kind " << kind;
  }
}

TEST(CudaHostShim, IndexKernelsMatchLoops) {
  HostModule& module = HostModule::get();
  ASSERT_TRUE(module.error.empty()) << module.error;
  std::vector<float> base(64);
  for (size_t i = 0; i < base.size(); ++i) base[i] = float(i) * 0.5f;
  long long rows = 3, width = 4, ld = 6;
  std::vector<long long> src{8, 0, 40};
  std::vector<float> dst(size_t(rows * ld), -1.0f);
  const long long* src_p = src.data();
  const float* base_p = base.data();
  float* dst_p = dst.data();
  void* gather[] = {&rows, &width, &src_p, &base_p, &dst_p, &ld};
  module.entry("vjit_gather_rows")(gather, 2, 5);
  for (long long r = 0; r < rows; ++r)
    for (long long i = 0; i < ld; ++i)
      EXPECT_EQ(dst[size_t(r * ld + i)], i < width ? base[size_t(src[size_t(r)] + i)] : -1.0f) << r << " " << i;

  // Scatter-add with two rows into one destination (a child with two parents).
  std::vector<long long> dst_offsets{4, 4, 20};
  std::vector<float> grads = base;
  float* grads_p = grads.data();
  const long long* off_p = dst_offsets.data();
  const float* rows_p = dst.data();
  void* scatter[] = {&rows, &width, &off_p, &grads_p, &rows_p, &ld};
  module.entry("vjit_scatter_add_rows")(scatter, 1, 7);
  std::vector<float> expected = base;
  for (long long r = 0; r < rows; ++r)
    for (long long i = 0; i < width; ++i) expected[size_t(dst_offsets[size_t(r)] + i)] += dst[size_t(r * ld + i)];
  EXPECT_EQ(grads, expected);

  // GatherSum and GatherAll through a row table: row 0 has sources {0, 8},
  // row 1 none, row 2 {40}, each read at its address.
  std::vector<int> begin{0, 2, 2, 3};
  std::vector<long long> sources{0, 8, 40};
  std::vector<unsigned long long> addresses;
  for (long long source : sources) addresses.push_back(reinterpret_cast<uintptr_t>(base.data() + source));
  const int* begin_p = begin.data();
  const unsigned long long* addresses_p = addresses.data();
  for (int stack : {0, 1}) {
    long long out_ld = stack ? 2 * width : width;
    std::vector<float> out(size_t(rows * out_ld), 0.0f);
    float* out_p = out.data();
    void* params[] = {&rows, &width, &begin_p, &addresses_p, &out_p, &out_ld, &stack};
    module.entry("vjit_gather_sum")(params, 2, 3);
    for (long long r = 0; r < rows; ++r)
      for (long long i = 0; i < width; ++i) {
        float sum = 0.0f;
        for (int k = begin[size_t(r)]; k < begin[size_t(r) + 1]; ++k) {
          float x = base[size_t(sources[size_t(k)] + i)];
          if (stack) {
            EXPECT_EQ(out[size_t(r * out_ld + (k - begin[size_t(r)]) * width + i)], x);
          }
          sum += x;
        }
        if (!stack) {
          EXPECT_EQ(out[size_t(r * out_ld + i)], sum);
        }
      }
  }

  float value = 2.5f;
  void* fill[] = {&rows, &width, &value, &dst_p, &ld};
  module.entry("vjit_fill_rows")(fill, 1, 1);
  for (long long r = 0; r < rows; ++r)
    for (long long i = 0; i < width; ++i) EXPECT_EQ(dst[size_t(r * ld + i)], 2.5f);
}

// The children-block kernels, built for the host, against the reference
// interpreter's definitions of the ops (ir/interpreter.cpp, transcribed below
// per vertex): blocks of K = 3 rows of 4 columns with a leading dimension past
// their width, rows with 0, 1, 2 and 5 (more than K) variadic children, ties in
// a column (the first largest row wins: row 3, column 1) and fewer threads than elements.
TEST(CudaHostShim, ChildrenBlockKernelsMatchTheInterpreter) {
  HostModule& module = HostModule::get();
  ASSERT_TRUE(module.error.empty()) << module.error;
  long long rows = 4, block_rows = 3, block_cols = 4, xld = 13, gld = 6, ld = 21;
  std::vector<float> x(size_t(rows * xld)), g(size_t(rows * gld));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 7 % 11) - 5) * 0.5f;  // repeats: ties
  for (size_t i = 0; i < g.size(); ++i) g[i] = float(int(i % 9) + 1) * 0.25f;
  x[size_t(3 * xld + 0 * block_cols + 1)] = x[size_t(3 * xld + 2 * block_cols + 1)] = 9.0f;  // a tie: row 0 wins
  const std::vector<int> children{0, 1, 2, 5};
  // Element (k, j) of row r's block.
  auto at = [&](long long r, long long k, long long j) { return x[size_t(r * xld + k * block_cols + j)]; };
  // Per op: its start and width, and the interpreter's value of element i of row r.
  struct Case {
    const char* kernel;
    long long start, width;
    std::function<float(long long r, long long i)> expected;
  };
  auto first_max = [&](long long r, long long j) {
    const long long n = std::min<long long>(children[size_t(r)], block_rows);
    long long best = 0;
    for (long long k = 1; k < n; ++k)
      if (at(r, k, j) > at(r, best, j)) best = k;
    return std::pair{n, best};
  };
  const Case cases[] = {
      {"vjit_slice_cols", 1, block_rows * 2, [&](long long r, long long i) { return at(r, i / 2, 1 + i % 2); }},
      {"vjit_pad_cols", 2, block_rows * 7,
       [&](long long r, long long i) {
         const long long j = i % 7 - 2;
         return j >= 0 && j < block_cols ? at(r, i / 7, j) : 0.0f;
       }},
      {"vjit_transpose", 0, block_rows * block_cols,
       [&](long long r, long long i) { return at(r, i % block_rows, i / block_rows); }},
      {"vjit_child_count", 0, 1, [&](long long r, long long) { return float(children[size_t(r)]); }},
      {"vjit_max_children", 0, block_cols,
       [&](long long r, long long j) {
         const auto [n, best] = first_max(r, j);
         return n > 0 ? at(r, best, j) : 0.0f;
       }},
      {"vjit_max_children_grad", 0, block_rows * block_cols,
       [&](long long r, long long i) {
         const auto [n, best] = first_max(r, i % block_cols);
         return n > 0 && i / block_cols == best ? g[size_t(r * gld + i % block_cols)] : 0.0f;
       }},
  };
  const float *xp = x.data(), *gp = g.data();
  const int* cp = children.data();
  for (const Case& c : cases) {
    std::vector<float> out(size_t(rows * ld), -7.0f);
    float* op = out.data();
    long long start = c.start, width = c.width;
    void* params[] = {&rows, &width, &block_rows, &block_cols, &start, &xp, &xld, &gp, &gld, &cp, &op, &ld};
    module.entry(c.kernel)(params, 2, 5);
    for (long long r = 0; r < rows; ++r)
      for (long long i = 0; i < ld; ++i)
        EXPECT_EQ(out[size_t(r * ld + i)], i < width ? c.expected(r, i) : -7.0f) << c.kernel << " " << r << "," << i;
  }
}

#define VJIT_SKIP_WITHOUT_NVRTC()                                                             \
  do {                                                                                        \
    std::string why = jit::nvrtc_unavailable_reason();                                        \
    if (!why.empty()) GTEST_SKIP() << "skipped: no NVRTC (" << why << ")";                    \
  } while (0)

// Every kernel the example models generate compiles with NVRTC and assembles
// (NVRTC runs ptxas for a cubin) for the A100's and the H100's architectures.
// Compiled modules go to VJIT_CACHE_DIR when it is set, else to the user's
// cache directory ($XDG_CACHE_HOME/vjit, then $HOME/.cache/vjit).
TEST(DiskCache, ModulesGoToTheUsersCacheDirectoryByDefault) {
  auto saved = [](const char* name) {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  const std::optional<std::string> xdg = saved("XDG_CACHE_HOME"), home = saved("HOME");
  auto restore = [](const char* name, const std::optional<std::string>& v) {
    if (v) setenv(name, v->c_str(), 1);
    else unsetenv(name);
  };
  EXPECT_EQ(jit::cuda_module_cache_dir("/tmp/mine"), "/tmp/mine");
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  setenv("HOME", "/tmp/home", 1);
  EXPECT_EQ(jit::cuda_module_cache_dir(""), "/tmp/xdg/vjit");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(jit::cuda_module_cache_dir(""), "/tmp/home/.cache/vjit");
  unsetenv("HOME");
  EXPECT_EQ(jit::cuda_module_cache_dir(""), "") << "nowhere to put it: memory only";
  restore("XDG_CACHE_HOME", xdg);
  restore("HOME", home);
}

TEST(Nvrtc, EveryExampleKernelCompilesForSm80AndSm90) {
  VJIT_SKIP_WITHOUT_NVRTC();
  std::vector<codegen::CudaKernelSource> kernels;
  for (const codegen::KernelSpec& spec : HostModule::get().specs()) kernels.push_back(codegen::cuda_fused_kernel(spec));
  kernels.push_back({"index", codegen::cuda_index_kernels_source()});
  kernels.push_back({"runtime", codegen::cuda_runtime_kernels_source()});
  const std::string source = codegen::cuda_module_source(kernels);
  for (int arch : {80, 90}) {
    jit::CudaModuleImage image = jit::compile_cuda_module(source, arch, "", "example kernels");
    EXPECT_EQ(image.arch, arch);
    EXPECT_FALSE(image.ptx);
    ASSERT_GT(image.image.size(), 4u);
    EXPECT_EQ(image.image.substr(0, 4), "\x7f" "ELF") << "not a cubin for sm_" << arch;
    for (const codegen::CudaKernelSource& k : kernels)
      if (k.name != "index" && k.name != "runtime") {
        EXPECT_NE(image.image.find(k.name), std::string::npos) << k.name << " sm_" << arch;
      }
  }
  // The second request is a memory hit.
  EXPECT_TRUE(jit::compile_cuda_module(source, 90, "", "example kernels").from_memory);
}

TEST(Nvrtc, AnArchitectureNewerThanNvrtcGetsPtx) {
  VJIT_SKIP_WITHOUT_NVRTC();
  jit::CudaModuleImage image = jit::compile_cuda_module(codegen::cuda_index_kernels_source(), 990, "", "index");
  EXPECT_TRUE(image.ptx);
  EXPECT_NE(image.image.find(".entry vjit_gather_rows"), std::string::npos);
}

TEST(Nvrtc, ACompileErrorCarriesTheLog) {
  VJIT_SKIP_WITHOUT_NVRTC();
  try {
    jit::compile_cuda_module("extern \"C\" __global__ void broken() { undeclared_name = 1; }", 90, "", "broken");
    FAIL() << "expected InternalError";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("compiler log"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("undeclared_name"), std::string::npos) << e.what();
  }
}

TEST(Nvrtc, ModulesGoToTheDiskCache) {
  VJIT_SKIP_WITHOUT_NVRTC();
  fs::path dir = fresh_dir("nvrtc-cache");
  // A source no earlier test compiled (the memory cache would answer first).
  const std::string source = codegen::cuda_index_kernels_source() + "// " + dir.string() + "\n";
  jit::NvrtcCounters before = jit::nvrtc_counters();
  jit::CudaModuleImage image = jit::compile_cuda_module(source, 80, dir.string(), "index");
  EXPECT_FALSE(image.from_disk);
  EXPECT_EQ(jit::nvrtc_counters().compiles, before.compiles + 1);
  EXPECT_EQ(finished_entries(dir), 1);
  fs::remove_all(dir);
}

TEST(DiskCache, RoundTripsAndRejectsDamagedEntries) {
  fs::path dir = fresh_dir("disk-cache");
  jit::DiskCache cache(dir.string());
  bool damaged = true;
  EXPECT_FALSE(cache.load("key", &damaged).has_value());
  EXPECT_FALSE(damaged);
  const std::string payload(1000, 'x');
  cache.store("key", payload);
  EXPECT_EQ(cache.load("key").value(), payload);
  EXPECT_FALSE(cache.load("other key").has_value());

  const std::string path = cache.path("key");
  auto rewrite = [&](auto&& change) {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    in.close();
    change(bytes);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };
  rewrite([](std::string& b) { b[b.size() - 10] ^= 1; });  // a flipped bit in the payload
  EXPECT_FALSE(cache.load("key", &damaged).has_value());
  EXPECT_TRUE(damaged);
  cache.store("key", payload);
  rewrite([](std::string& b) { b.resize(b.size() / 2); });  // truncated
  EXPECT_FALSE(cache.load("key", &damaged).has_value());
  EXPECT_TRUE(damaged);
  rewrite([](std::string& b) { b = "garbage"; });
  EXPECT_FALSE(cache.load("key", &damaged).has_value());
  EXPECT_TRUE(damaged);
  cache.store("key", payload);  // rebuilt and stored again
  EXPECT_EQ(cache.load("key").value(), payload);
  fs::remove_all(dir);
}

// Writers and readers of one key at once: a reader sees no entry or a whole
// one, never a damaged one, and no temporary file is left behind.
TEST(DiskCache, ConcurrentWritersAndReadersSeeWholeEntries) {
  fs::path dir = fresh_dir("disk-cache-concurrent");
  jit::DiskCache cache(dir.string());
  std::atomic<int> damaged_seen{0}, wrong_seen{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      const std::string mine(size_t(20000 + t), char('a' + t));
      for (int i = 0; i < 40; ++i) {
        if ((i + t) % 2 == 0) cache.store("shared", mine);
        bool damaged = false;
        std::optional<std::string> got = cache.load("shared", &damaged);
        if (damaged) ++damaged_seen;
        if (got && (got->size() < 20000 || got->size() > 20007 || got->find_first_not_of((*got)[0]) != std::string::npos))
          ++wrong_seen;
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(damaged_seen.load(), 0);
  EXPECT_EQ(wrong_seen.load(), 0);
  EXPECT_EQ(finished_entries(dir), 1);
  fs::remove_all(dir);
}

TEST(DiskCache, AnUnwritableDirectoryIsAUserError) {
  jit::DiskCache cache("/proc/vjit-cannot-write-here");
  EXPECT_THROW(cache.store("key", "payload"), UserError);
}

// VJIT_DEVICE=cuda never runs on the CPU: without a device it says what is
// missing; auto runs on the CPU and says why, once per process. With a usable
// GPU both run there, and auto says nothing.
TEST(DeviceSelection, CudaFailsWithTheReasonAndAutoFallsBackOnce) {
  models::Bundle bundle = models::make_model("tree_lstm", small_config(8));
  Options options = Options::defaults();
  options.device = vjit::Options::Device::Cuda;
  const runtime::CudaProbe& probe = runtime::probe_cuda();
  const bool gpu = probe.ok && jit::nvrtc_unavailable_reason().empty();
  GraphBatch batch = models::make_batch(bundle.train, {0, 1, 2, 3, 4, 5, 6, 7});
  try {
    Engine engine(*bundle.program, options);
    EXPECT_TRUE(gpu) << "VJIT_DEVICE=cuda built an engine without a usable GPU";
    EXPECT_EQ(engine.options().device, vjit::Options::Device::Cuda);
    EXPECT_TRUE(std::isfinite(engine.forward(batch, RunOptions{})));
  } catch (const UserError& e) {
    EXPECT_FALSE(gpu) << e.what();
    std::string message = e.what();
    EXPECT_NE(message.find("VJIT_DEVICE=cuda"), std::string::npos) << message;
    if (!probe.ok) {
      EXPECT_NE(message.find(probe.reason), std::string::npos) << message;
    }
  }
  options.device = vjit::Options::Device::Auto;
  ::testing::internal::CaptureStderr();
  {
    Engine first(*bundle.program, options);
    Engine second(*bundle.program, options);
    EXPECT_EQ(first.options().device, gpu ? vjit::Options::Device::Cuda : vjit::Options::Device::Cpu);
    EXPECT_TRUE(std::isfinite(first.forward(batch, RunOptions{})));
  }
  std::string said = ::testing::internal::GetCapturedStderr();
  size_t at = said.find("VJIT_DEVICE=auto");
  if (gpu) {
    EXPECT_EQ(at, std::string::npos) << said;
    return;
  }
  ASSERT_NE(at, std::string::npos) << said;
  EXPECT_EQ(said.find("VJIT_DEVICE=auto", at + 1), std::string::npos) << "said more than once: " << said;
  EXPECT_NE(said.find("CPU"), std::string::npos) << said;
}

// The dense gradient sum over rows, built for the host: pairwise as the CPU
// executor's (blocks of 32 rows, then a tree), so over 100k rows near 1 it
// stays within a few float roundings of the double sum, where one chain of
// additions per column is off by about 1e-6 of it.
TEST(CudaHostShim, SumColumnsIntoIsPairwise) {
  HostModule& module = HostModule::get();
  ASSERT_TRUE(module.error.empty()) << module.error;
  long long rows = 100000, width = 3, ld = 5;
  std::vector<float> x(size_t(rows * ld), 1e30f);  // past the width: never read
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 1e-3f);
  std::vector<double> exact(size_t(width), 0.5);
  for (long long r = 0; r < rows; ++r)
    for (long long i = 0; i < width; ++i) exact[size_t(i)] += x[size_t(r * ld + i)] = 1.0f + noise(rng);
  std::vector<float> dst(size_t(width), 0.5f);
  const float* xp = x.data();
  float* dp = dst.data();
  std::vector<void*> params{&rows, &width, &xp, &ld, &dp};
  module.entry("vjit_sum_columns_into")(params.data(), 1, 2);
  for (long long i = 0; i < width; ++i)
    EXPECT_NEAR(dst[size_t(i)], exact[size_t(i)], 2e-7 * exact[size_t(i)]) << "column " << i;
}

}  // namespace
}  // namespace vjit::testing
