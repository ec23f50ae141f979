// The CUDA device's host code, run end to end on the driver double
// (tests/cuda_double/driver_double.h) on machines with no GPU: engines of the
// example models train, infer, checkpoint and are dropped on device=cuda, with
// real NVRTC modules, and every driver and cuBLASLt call they make is checked:
// launches have sane grids, blocks and argument blocks of the kernel's
// signature, on streams that exist, of functions of loaded modules; events are
// alive when recorded and waited for, and recorded before a wait; copies and
// GEMM operands stay inside allocations; a step repeats the same launches and
// products; memory, events and modules made by an engine go with it. The
// program loads the double itself: it runs by hand as under ctest, with no
// environment to set, and uses the real driver nowhere.
//
// Nothing runs on a device, so no value computed is checked. The engine reads
// device results back (the objective, pushed values, the optimizer's norm and
// its non-finite flag): memory never written reads as zeros (the double
// callocs), which the host takes for a finite loss of 0 and an update with no
// non-finite value, so a step goes through as on a GPU.
#include <dlfcn.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_double/driver_double.h"
#include "cuda_double/kernel_image.h"
#include "children_block_cases.h"
#include "cuda_test_util.h"
#include "engine_check.h"
#include "ir/row_op.h"
#include "jit/nvrtc.h"
#include "runtime/cuda_driver.h"
#include "runtime/cuda_graph.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

// The double's log, from the libcuda.so.1 this process loaded.
struct DoubleApi {
  VjitDoubleCallsFn calls = nullptr;
  void (*reset)() = nullptr;
  VjitDoubleLive (*live)() = nullptr;
  void (*fail_next)(const char*, int) = nullptr;
  std::string error;  // why the double is not there
};

// Loads the double by path before anything asks for the driver: vjit's
// dlopen("libcuda.so.1") (and of cuBLASLt's soname) then finds it loaded.
DoubleApi load_double() {
  DoubleApi api;
#ifdef VJIT_CUDA_DOUBLE_DIR
  for (const char* file : {"libcuda.so.1", VJIT_CUDA_DOUBLE_CUBLASLT}) {
    const std::string path = std::string(VJIT_CUDA_DOUBLE_DIR) + "/" + file;
    if (::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
      api.error = "cannot load the driver double: " + std::string(::dlerror());
      return api;
    }
  }
  void* driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) {
    api.error = "libcuda.so.1 is not the loaded double";
    return api;
  }
  api.calls = reinterpret_cast<VjitDoubleCallsFn>(::dlsym(driver, "vjit_double_calls"));
  api.reset = reinterpret_cast<void (*)()>(::dlsym(driver, "vjit_double_reset"));
  api.live = reinterpret_cast<VjitDoubleLive (*)()>(::dlsym(driver, "vjit_double_live"));
  api.fail_next = reinterpret_cast<void (*)(const char*, int)>(::dlsym(driver, "vjit_double_fail_next"));
  if (!api.calls || !api.reset || !api.live || !api.fail_next)
    api.error = "libcuda.so.1 lacks the double's log functions";
#else
  api.error = "skipped: vjit was built without the CUDA back end, so there is no driver double";
#endif
  return api;
}

const DoubleApi& double_api() {
  static const DoubleApi api = load_double();
  return api;
}

bool runtime_has_cuda() {
#ifdef VJIT_CUDA_DOUBLE_DIR
  return true;
#else
  return false;
#endif
}

// Without the CUDA back end: skips. With it, the double must load and be the
// device vjit finds; without NVRTC (which compiles the modules for real) skips.
#define VJIT_USE_THE_DOUBLE()                                                                              \
  do {                                                                                                     \
    if (!runtime_has_cuda()) GTEST_SKIP() << double_api().error;                                           \
    ASSERT_TRUE(double_api().error.empty()) << double_api().error;                                         \
    const runtime::CudaProbe& probe = runtime::probe_cuda();                                               \
    ASSERT_TRUE(probe.ok) << probe.reason;                                                                 \
    ASSERT_EQ(probe.info.name, "vjit driver double");                                                      \
    const std::string nvrtc = jit::nvrtc_unavailable_reason();                                             \
    if (!nvrtc.empty()) GTEST_SKIP() << "skipped: NVRTC, which compiles the modules, is missing: " << nvrtc; \
    runtime::CudaDevice::get(); /* the device's own streams and events, made once, before any baseline */ \
  } while (0)

std::string describe(const VjitDoubleCall& call) {
  std::ostringstream out;
  out << call.name << " status " << call.status;
  if (call.function[0]) out << " " << call.function;
  if (std::strcmp(call.name, "cuLaunchKernel") == 0)
    out << " grid " << call.grid[0] << "," << call.grid[1] << "," << call.grid[2] << " block " << call.block[0] << ","
        << call.block[1] << "," << call.block[2] << " params " << call.param_count;
  if (std::strcmp(call.name, "cublasLtMatmul") == 0)
    out << " m " << call.m << " n " << call.n << " k " << call.k << (call.trans_a ? " Aᵀ" : "")
        << (call.trans_b ? " Bᵀ" : "") << " ld " << call.lda << "," << call.ldb << "," << call.ldc << " alpha "
        << call.alpha << " beta " << call.beta << " batch " << call.batch_count;
  return out.str();
}

bool is(const VjitDoubleCall& call, const char* name) { return std::strcmp(call.name, name) == 0; }

// A launch of one of the plan's fused kernels (codegen/cuda_source.h names them).
bool is_fused(const VjitDoubleCall& call) { return std::strncmp(call.function, "vjit_fused_", 11) == 0; }

// The handles the double handed out, followed call by call over the whole
// process (the device's streams are made once, by the first engine), and the
// checks each call must pass.
class HandleBook {
 public:
  void follow(const VjitDoubleCall& call) {
    // NVRTC asks a loaded driver for its private tables and compiles without them.
    if (is(call, "cuGetExportTable") || call.injected) return;
    // Two engines over one Model both try to pin its values; the second is
    // refused and copies from pageable memory (CudaDevice::pin returns false).
    constexpr int kAlreadyRegistered = 712;  // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
    if (is(call, "cuMemHostRegister") && call.status == kAlreadyRegistered) return;
    // An executable graph the driver will not update (a copy's buffer is
    // another allocation now) is instantiated again (runtime/cuda_graph.h).
    constexpr int kUpdateFailure = 910;  // CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
    if (is(call, "cuGraphExecUpdate") && call.status == kUpdateFailure) return;
    EXPECT_EQ(call.status, 0) << "the double refused " << describe(call);
    if (call.status != 0) return;
    if (is(call, "cuStreamCreate")) streams_.insert(call.args[1]);
    if (is(call, "cuEventCreate")) events_.insert(call.args[1]);
    if (is(call, "cuEventDestroy")) {
      EXPECT_EQ(events_.erase(call.args[0]), 1u) << describe(call);
      recorded_.erase(call.args[0]);
    }
    if (is(call, "cuEventRecord")) {
      expect_event_and_stream(call, call.args[0], call.args[1]);
      recorded_.insert(call.args[0]);
    }
    if (is(call, "cuStreamWaitEvent")) {
      expect_event_and_stream(call, call.args[1], call.args[0]);
      EXPECT_TRUE(recorded_.count(call.args[1])) << describe(call) << ": waits for an event never recorded";
    }
    if (is(call, "cuModuleLoadData")) modules_.insert(call.args[1]);
    if (is(call, "cuModuleUnload")) modules_.erase(call.args[0]);
    if (is(call, "cuModuleGetFunction")) {
      EXPECT_TRUE(modules_.count(call.args[0])) << describe(call);
      function_module_[call.args[1]] = call.args[0];
    }
    if (is(call, "cuMemcpyHtoDAsync") || is(call, "cuMemcpyDtoHAsync") || is(call, "cuMemsetD8Async")) {
      EXPECT_TRUE(is_stream(call.args[3])) << describe(call) << ": on a stream never created";
    }
    if (is(call, "cuLaunchKernel")) check_launch(call);
    if (is(call, "cublasLtMatmul")) check_gemm(call);
  }
  size_t events() const { return events_.size(); }

 private:
  bool is_stream(uint64_t stream) const { return stream == 0 || streams_.count(stream) > 0; }

  void expect_event_and_stream(const VjitDoubleCall& call, uint64_t event, uint64_t stream) {
    EXPECT_TRUE(events_.count(event)) << describe(call) << ": an event not alive";
    EXPECT_TRUE(is_stream(stream)) << describe(call) << ": a stream never created";
  }

  void check_launch(const VjitDoubleCall& call) {
    auto module = function_module_.find(call.args[0]);
    EXPECT_TRUE(module != function_module_.end() && modules_.count(module->second))
        << describe(call) << ": a function of no loaded module";
    for (int d = 0; d < 3; ++d) {
      EXPECT_GE(call.grid[d], 1u) << describe(call);
      EXPECT_GE(call.block[d], 1u) << describe(call);
    }
    EXPECT_LE(call.grid[0], 65535u) << describe(call) << ": more blocks than grid_for hands out";
    EXPECT_LE(call.block[0] * call.block[1] * call.block[2], 1024u) << describe(call);
    EXPECT_EQ(call.params_null, 0) << describe(call);
    EXPECT_GE(call.param_count, 1) << describe(call) << ": no signature read from the module image";
    if (is_fused(call)) {  // rows, then (data, ld) per operand
      EXPECT_EQ(call.param_count % 2, 1) << describe(call);
    }
    EXPECT_TRUE(is_stream(call.stream)) << describe(call) << ": on a stream never created";
  }

  void check_gemm(const VjitDoubleCall& call) {
    EXPECT_TRUE(call.m >= 1 && call.n >= 1 && call.k >= 1) << describe(call);
    EXPECT_TRUE(call.lda >= 1 && call.ldb >= 1 && call.ldc >= call.m) << describe(call);
    EXPECT_EQ(call.alpha, 1.0f) << describe(call);
    EXPECT_TRUE(call.beta == 0.0f || call.beta == 1.0f) << describe(call);
    EXPECT_TRUE(is_stream(call.stream)) << describe(call) << ": on a stream never created";
  }

  std::set<uint64_t> streams_, events_, recorded_, modules_;
  std::map<uint64_t, uint64_t> function_module_;  // function -> its module
};

HandleBook& handle_book() {
  static HandleBook book;
  return book;
}

// The calls since the last take, each checked by the book; the log is emptied.
std::vector<VjitDoubleCall> take_calls() {
  size_t count = 0;
  const VjitDoubleCall* calls = double_api().calls(&count);
  std::vector<VjitDoubleCall> taken(calls, calls + count);
  double_api().reset();
  for (const VjitDoubleCall& call : taken) handle_book().follow(call);
  return taken;
}

bool zeroes_rows(const VjitDoubleCall& call) {
  constexpr uint64_t kMoveZero = 2;  // vjit_move_rows(rows, width, pairs, mode)
  return is(call, "cuLaunchKernel") && std::strcmp(call.function, "vjit_move_rows") == 0 &&
         call.param_count == 4 && call.params[3] == kMoveZero;
}

// What a step queued on the device, in order: a launch as its kernel, grid
// and block, a product as its shape. Without `zeroing`, no launch that zeroes
// rows (a backward zeroes the embedding gradient's rows of the step before).
std::vector<std::string> device_work(const std::vector<VjitDoubleCall>& calls, bool zeroing = true) {
  std::vector<std::string> work;
  for (const VjitDoubleCall& call : calls)
    if ((is(call, "cuLaunchKernel") || is(call, "cublasLtMatmul")) && (zeroing || !zeroes_rows(call)))
      work.push_back(describe(call));
  return work;
}

int count_of(const std::vector<VjitDoubleCall>& calls, const char* name) {
  return int(std::count_if(calls.begin(), calls.end(), [&](const VjitDoubleCall& c) { return is(c, name); }));
}

int launches_of(const std::vector<VjitDoubleCall>& calls, const char* function) {
  return int(std::count_if(calls.begin(), calls.end(), [&](const VjitDoubleCall& c) {
    return is(c, "cuLaunchKernel") && std::strcmp(c.function, function) == 0;
  }));
}

using testing::cuda_options;
using testing::first_indices;

// What the double keeps alive is as it was: device and host memory,
// events, modules, graphs and executable graphs.
void expect_nothing_left(const VjitDoubleLive& before, const VjitDoubleLive& after, const std::string& what = "") {
  EXPECT_EQ(after.allocations, before.allocations) << what;
  EXPECT_EQ(after.pinned, before.pinned) << what;
  EXPECT_EQ(after.registered, before.registered) << what;
  EXPECT_EQ(after.modules, before.modules) << what;
  EXPECT_EQ(after.events, before.events) << what;
  EXPECT_EQ(after.graphs, before.graphs) << what;
  EXPECT_EQ(after.graph_execs, before.graph_execs) << what;
}

// A small Tree-LSTM, an engine for it on device=cuda and a batch of its
// first `samples` samples: what most tests below run.
struct TreeLstmOnCuda {
  explicit TreeLstmOnCuda(int samples)
      : bundle(models::make_model("tree_lstm", testing::small_config(16))),
        engine(*bundle.program, cuda_options()),
        batch(models::make_batch(bundle.train, first_indices(samples))) {}
  models::Bundle bundle;
  Engine engine;
  GraphBatch batch;
};

// An engine's first module: NVRTC's real image for the double's sm_90, every
// kernel the executor needs found in it by name, as a GPU's driver would.
TEST(CudaDouble, EnginesLoadRealModulesAndFindTheirKernels) {
  VJIT_USE_THE_DOUBLE();
  EXPECT_EQ(runtime::probe_cuda().info.arch(), 90);
  take_calls();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(16));
  Options options = cuda_options();
  // A cache of its own: NVRTC compiles the module, unless this process did already.
  const std::string cache = ::testing::TempDir() + "vjit-cuda-double-cache-" + std::to_string(::getpid());
  options.cache_dir = cache;
  std::optional<Engine> engine(std::in_place, *bundle.program, options);
  const std::vector<VjitDoubleCall> calls = take_calls();
  engine.reset();
  std::filesystem::remove_all(cache);
  ASSERT_EQ(count_of(calls, "cuModuleLoadData"), 1);
  const auto load = std::find_if(calls.begin(), calls.end(), [](const auto& c) { return is(c, "cuModuleLoadData"); });
  EXPECT_GT(load->args[2], 1000u) << "the image's bytes";
  std::set<std::string> found;
  for (const VjitDoubleCall& call : calls)
    if (is(call, "cuModuleGetFunction") && call.status == 0) found.insert(call.function);
  for (const char* kernel : {"vjit_move_rows", "vjit_copy_rows", "vjit_softmax_ce", "vjit_loss_sum",
                             "vjit_optimizer_update", "vjit_sum_squares"})
    EXPECT_TRUE(found.count(kernel)) << kernel << " was not looked up";
}

// How the double reads a kernel's parameters (cuda_double/kernel_image.h): from
// the cubin NVRTC makes for a known architecture and from the PTX it makes for
// one newer than it knows, the same sizes in the same order.
TEST(CudaDouble, ReadsKernelSignaturesFromCubinAndPtx) {
  VJIT_USE_THE_DOUBLE();
  const std::string source =
      "extern \"C\" __global__ void vjit_probe(long long rows, float value, const float* x, int mode) {}\n";
  const int newer = jit::nvrtc_supported_archs().back() + 10;
  for (int arch : {90, newer}) {
    const jit::CudaModuleImage module = jit::compile_cuda_module(source, arch, "", "the signature probe");
    EXPECT_EQ(module.ptx, arch == newer);
    const std::optional<std::string> image = vjit_double::copy_module_image(module.image.data());
    ASSERT_TRUE(image.has_value()) << "sm_" << arch;
    EXPECT_LE(image->size(), module.image.size()) << "the image's own length, not past it";
    std::optional<vjit_double::KernelSignature> signature = vjit_double::find_kernel(*image, "vjit_probe");
    ASSERT_TRUE(signature.has_value()) << "sm_" << arch;
    EXPECT_TRUE(signature->params_known) << "sm_" << arch;
    EXPECT_EQ(signature->param_bytes, (std::vector<int>{8, 4, 8, 4})) << "sm_" << arch;
    EXPECT_FALSE(vjit_double::find_kernel(*image, "vjit_probe_absent").has_value()) << "sm_" << arch;
  }
}

// The double refuses what a driver would, so the book's status checks have
// teeth: a copy past an allocation, an event used after it was destroyed, a
// pointer freed twice.
TEST(CudaDouble, RefusesWhatADriverWould) {
  VJIT_USE_THE_DOUBLE();
  runtime::CudaDevice& device = runtime::CudaDevice::get();
  take_calls();
  const runtime::DevicePtr memory = device.alloc_owned(1024);
  std::vector<char> bytes(2048, 1);
  EXPECT_ANY_THROW(device.upload(memory, bytes.data(), bytes.size()));
  void* event = device.create_event();
  device.destroy_event(event);
  EXPECT_ANY_THROW(device.record(event, 0));
  device.free_owned(memory);
  device.free_owned(memory);  // ignored by CudaDevice: the driver's answer is in the log
  size_t count = 0;
  const VjitDoubleCall* calls = double_api().calls(&count);
  std::map<std::string, int> refused;
  for (size_t i = 0; i < count; ++i)
    if (calls[i].status != 0) ++refused[calls[i].name];
  double_api().reset();  // not through the book: these refusals are the point
  EXPECT_EQ(refused, (std::map<std::string, int>{{"cuMemcpyHtoDAsync", 1}, {"cuEventRecord", 1}, {"cuMemFree", 1}}));
}

// A launch's argument block is read as the kernel's signature in the image
// says: vjit_move_rows(long long rows, long long width, const unsigned long
// long* pairs, int mode), its grid CudaDevice::grid_for(rows · width).
TEST(CudaDouble, LaunchesCarryTheirKernelsArguments) {
  VJIT_USE_THE_DOUBLE();
  TreeLstmOnCuda tree(4);
  Engine& engine = tree.engine;
  const GraphBatch& batch = tree.batch;
  Adam adam(0.01f);
  take_calls();
  engine.train_step(batch, adam);
  int checked = 0;
  for (const VjitDoubleCall& call : take_calls()) {
    if (!is(call, "cuLaunchKernel") || std::strcmp(call.function, "vjit_move_rows") != 0) continue;
    ASSERT_EQ(call.param_count, 4) << describe(call);
    const int64_t rows = int64_t(call.params[0]), width = int64_t(call.params[1]);
    EXPECT_GE(rows, 1);
    EXPECT_GE(width, 1);
    EXPECT_LE(call.params[3], 2u) << "mode: copy, add or zero";
    EXPECT_EQ(call.grid[0], runtime::CudaDevice::grid_for(rows * width));
    EXPECT_EQ(call.block[0], 256u);
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no vjit_move_rows launch in a Tree-LSTM step";
}

// EngineStats::kernels counts the launches of the forward and backward passes
// of the calls since reset_stats() (node work, as on the CPU), and only those:
// an optimizer step's launches, and the gathers that download gradients, are
// no pass's, neither in their own call's count nor in the next one's.
TEST(CudaDouble, StatsCountTheLaunchesOfTheirOwnPasses) {
  VJIT_USE_THE_DOUBLE();
  TreeLstmOnCuda tree(5);
  Engine& engine = tree.engine;
  const GraphBatch& batch = tree.batch;
  Adam adam(0.01f);
  auto counted = [&](auto&& calls) {
    engine.reset_stats();
    take_calls();
    calls();
    const int launches = count_of(take_calls(), "cuLaunchKernel");
    return std::pair{engine.stats().kernels, launches};
  };
  auto passes = [&] {
    engine.forward(batch);
    engine.backward();
  };
  passes();  // from here on, each backward zeroes the embedding gradient's rows of the one before
  const auto [pass_kernels, pass_launches] = counted(passes);
  EXPECT_EQ(pass_kernels, pass_launches);
  engine.gradients();  // an embedding table's rows downloaded through a gather kernel
  const auto [infer_kernels, infer_launches] = counted([&] { engine.infer(batch); });
  EXPECT_EQ(infer_kernels, infer_launches) << "infer after reading the gradients";
  const auto [step_kernels, step_launches] = counted([&] { engine.train_step(batch, adam); });
  EXPECT_GT(step_launches, pass_launches) << "the optimizer launches kernels";
  EXPECT_EQ(step_kernels, pass_kernels) << "a train step's kernels are its passes'";
  const auto [after_kernels, after_launches] = counted([&] { engine.infer(batch); });
  EXPECT_EQ(after_kernels, after_launches) << "infer after a train step";
}

// VJIT_PROFILE on the CUDA device: the host waits for the device after every
// step it times (one more synchronisation per step than without), and the
// table names the costliest steps; with graphs, it says that none was timed.
TEST(CudaDouble, ProfilingTimesEachStepUntilTheDeviceHasRunIt) {
  VJIT_USE_THE_DOUBLE();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(16));
  const GraphBatch batch = models::make_batch(bundle.train, first_indices(5));
  auto synchronisations_and_table = [&](bool profile, bool graphs) {
    Options options = cuda_options();
    options.profile = profile;
    options.tuning.cuda_graphs = graphs ? Lever::On : Lever::Off;
    ::testing::internal::CaptureStderr();
    std::optional<Engine> engine(std::in_place, *bundle.program, options);
    Adam adam(0.01f);
    engine->train_step(batch, adam);
    take_calls();
    engine->train_step(batch, adam);
    const std::vector<VjitDoubleCall> calls = take_calls();
    engine.reset();  // prints the table
    const std::string table = ::testing::internal::GetCapturedStderr();
    return std::pair{count_of(calls, "cuCtxSynchronize") + count_of(calls, "cuStreamSynchronize"), table};
  };
  const auto [plain, no_table] = synchronisations_and_table(false, false);
  const auto [profiled, table] = synchronisations_and_table(true, false);
  EXPECT_EQ(no_table.find("top kernels by time"), std::string::npos) << no_table;
  EXPECT_NE(table.find("top kernels by time"), std::string::npos) << table;
  EXPECT_GT(profiled, plain + 10) << "a wait per timed step";
  const auto [graphed, graph_table] = synchronisations_and_table(true, true);
  EXPECT_EQ(graph_table.find("top kernels by time"), std::string::npos) << graph_table;
  EXPECT_NE(graph_table.find("steps not timed"), std::string::npos) << graph_table;
}

// EngineStats::primitives counts what a call had the device run, that call's
// alone: a train_step's own optimizer steps (not the next call's), GEMMs and
// fused kernels as the driver double saw them.
TEST(CudaDouble, PrimitivesAreTheirOwnCallsWork) {
  VJIT_USE_THE_DOUBLE();
  TreeLstmOnCuda tree(5);
  Engine& engine = tree.engine;
  const GraphBatch& batch = tree.batch;
  Adam adam(0.01f);
  engine.train_step(batch, adam);
  take_calls();
  engine.reset_stats();
  engine.train_step(batch, adam);
  const std::vector<VjitDoubleCall> calls = take_calls();
  const PrimitiveCounts step = engine.stats().primitives;
  EXPECT_EQ(step[Primitive::OptimizerStep], launches_of(calls, "vjit_optimizer_update"));
  const int batched = int(std::count_if(calls.begin(), calls.end(), [](const VjitDoubleCall& c) {
    return is(c, "cublasLtMatmul") && c.batch_count > 1;
  }));
  EXPECT_EQ(step[Primitive::Gemm], count_of(calls, "cublasLtMatmul") - batched);
  EXPECT_EQ(step[Primitive::GemmBatched], batched);
  int fused = 0;
  for (const VjitDoubleCall& call : calls) fused += is(call, "cuLaunchKernel") && is_fused(call);
  EXPECT_EQ(step[Primitive::Fused], fused);
  engine.reset_stats();
  engine.infer(batch);
  EXPECT_EQ(engine.stats().primitives[Primitive::OptimizerStep], 0) << "the step before's update counted in infer";
}

// VJIT_BATCH_GEMMS on the CUDA device: the Tree-LSTM's batched products
// (U_f1·h1 and U_f2·h2, and their gradients) whose operands lie one stride
// apart are one strided-batched cuBLASLt call; off, each is a call of its
// own. Either way the step runs the same products.
TEST(CudaDouble, BatchedProductsAreOneStridedCall) {
  VJIT_USE_THE_DOUBLE();
  int64_t products[2] = {}, batched_calls[2] = {}, calls_made[2] = {};
  for (bool batch_gemms : {false, true}) {
    models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(16));
    Options options = cuda_options();
    options.tuning.batch_gemms = vjit::to_lever(batch_gemms);
    Engine engine(*bundle.program, options);
    const GraphBatch batch = models::make_batch(bundle.train, first_indices(4));
    SGD sgd(0.1f);
    engine.train_step(batch, sgd);
    take_calls();
    engine.reset_stats();
    engine.train_step(batch, sgd);
    for (const VjitDoubleCall& call : take_calls()) {
      if (!is(call, "cublasLtMatmul")) continue;
      products[batch_gemms] += call.batch_count;
      batched_calls[batch_gemms] += call.batch_count > 1;
      ++calls_made[batch_gemms];
    }
    EXPECT_EQ(engine.stats().primitives[Primitive::GemmBatched], batched_calls[batch_gemms]);
  }
  EXPECT_EQ(batched_calls[0], 0);
  EXPECT_GT(batched_calls[1], 0);
  EXPECT_EQ(products[1], products[0]);
  EXPECT_LT(calls_made[1], calls_made[0]);
}

// Batches growing past the arenas (the staging buffer's first 4 MiB hold
// these batches' index lists): the old buffers go
// (after the device is idle) and no copy or launch reaches them afterwards
// (a copy into freed memory is the double's error; the book checks every call).
TEST(CudaDouble, GrowingBatchesReplaceTheirBuffers) {
  VJIT_USE_THE_DOUBLE();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(64));
  for (bool streaming : {false, true}) {
    Options options = cuda_options();
    options.tuning.streaming = streaming;
    Engine engine(*bundle.program, options);
    Adam adam(0.01f);
    take_calls();
    for (int samples : {2, 64, 3, 64})
      engine.train_step(models::make_batch(bundle.train, first_indices(samples)), adam);
    const std::vector<VjitDoubleCall> calls = take_calls();
    EXPECT_GT(count_of(calls, "cuMemFree"), 0) << "no arena was replaced";
  }
}

// The models of three shapes of graph (trees, chains, lattices): each train
// step on the same batch queues the same launches and products, in the same
// order, with one stream and with streaming; Adam updates on the device; infer
// queues no update.
class CudaDoubleModel : public ::testing::TestWithParam<std::string> {};

std::string first_difference(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i]) return "item " + std::to_string(i) + ": " + a[i] + " vs " + b[i];
  return a.size() == b.size() ? "" : "lengths " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
}

TEST_P(CudaDoubleModel, TrainStepsRepeatTheirDeviceWork) {
  VJIT_USE_THE_DOUBLE();
  for (bool streaming : {false, true}) {
    const std::string what = GetParam() + (streaming ? " streaming" : "");
    models::Bundle bundle = models::make_model(GetParam(), testing::small_config(16));
    Options options = cuda_options();
    options.tuning.streaming = streaming;
    Engine engine(*bundle.program, options);
    Adam adam(0.01f);
    GraphBatch batch = models::make_batch(bundle.train, first_indices(6));
    take_calls();
    std::vector<std::vector<std::string>> steps, first_two;
    for (int step = 0; step < 3; ++step) {
      EXPECT_TRUE(std::isfinite(engine.train_step(batch, adam))) << what;
      const std::vector<VjitDoubleCall> calls = take_calls();
      EXPECT_GT(count_of(calls, "cublasLtMatmul"), 0) << what;
      EXPECT_GT(launches_of(calls, "vjit_optimizer_update"), 0) << what << ": Adam runs on the device";
      if (streaming) {
        EXPECT_GT(count_of(calls, "cuStreamWaitEvent"), 0) << what;
      }
      steps.push_back(device_work(calls));
      if (step < 2) first_two.push_back(device_work(calls, /*zeroing=*/false));
    }
    EXPECT_EQ(first_difference(steps[1], steps[2]), "") << what << ": steps 2 and 3 differ";
    // The first step has no rows of a step before to zero; otherwise the same.
    EXPECT_EQ(first_difference(first_two[0], first_two[1]), "") << what << ": steps 1 and 2 differ";
    engine.infer(batch);
    const std::vector<VjitDoubleCall> inferred = take_calls();
    EXPECT_GT(count_of(inferred, "cuLaunchKernel"), 0) << what;
    EXPECT_EQ(launches_of(inferred, "vjit_optimizer_update"), 0) << what;
    engine.infer(batch);
    EXPECT_EQ(first_difference(device_work(take_calls()), device_work(inferred)), "") << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaDoubleModel,
                         ::testing::Values("tree_lstm", "var_lstm", "lattice_lstm", "child_sum_tree_lstm"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Engines made and dropped give back what they took: device memory (every
// cuMemAlloc of theirs freed), pinned and registered host memory, events and
// their module.
// The device's own (its streams, events and arena, where cuBLASLt's
// workspaces live) are made by the first engine and kept: the baseline is
// taken after one engine came and went.
TEST(CudaDouble, DroppedEnginesGiveBackWhatTheyTook) {
  VJIT_USE_THE_DOUBLE();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(16));
  GraphBatch batch = models::make_batch(bundle.train, first_indices(5));
  auto use_an_engine = [&](bool streaming) {
    Options options = cuda_options();
    options.tuning.streaming = streaming;
    Engine engine(*bundle.program, options);
    Adam adam(0.01f);
    engine.train_step(batch, adam);
    engine.infer(batch);
  };
  use_an_engine(false);
  take_calls();
  const VjitDoubleLive before = double_api().live();
  const size_t events_before = handle_book().events();
  for (bool streaming : {false, true}) use_an_engine(streaming);
  const std::vector<VjitDoubleCall> calls = take_calls();
  const VjitDoubleLive after = double_api().live();
  EXPECT_GT(count_of(calls, "cuMemAlloc"), 0);
  EXPECT_EQ(count_of(calls, "cuMemAlloc"), count_of(calls, "cuMemFree"));
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.pinned, before.pinned);
  EXPECT_EQ(after.registered, before.registered);
  EXPECT_GT(count_of(calls, "cuEventCreate"), 0) << "the streaming engine's events";
  EXPECT_EQ(after.events, before.events);
  EXPECT_EQ(handle_book().events(), events_before);
  EXPECT_EQ(count_of(calls, "cuModuleUnload"), count_of(calls, "cuModuleLoadData"));
  EXPECT_EQ(after.modules, before.modules) << "an engine's module outlives it";
}

// Driver failures anywhere in an engine's life: each of its allocations in
// turn refused (the UserError naming the bytes), and launches failing at
// points through a training step (the InternalError of the failed call). The
// engine, made or half made, gives back all it took when it goes.
TEST(CudaDouble, DriverFailuresLeaveNothingBehind) {
  VJIT_USE_THE_DOUBLE();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(16));
  const GraphBatch batch = models::make_batch(bundle.train, first_indices(5));
  auto an_engines_life = [&] {
    Engine engine(*bundle.program, cuda_options());
    Adam adam(0.01f);
    engine.train_step(batch, adam);
    engine.infer(batch);
  };
  an_engines_life();  // the device's own memory (cuBLASLt's workspaces) is made once
  take_calls();
  const VjitDoubleLive before = double_api().live();
  auto fails_at = [&](const char* call, int nth) {
    double_api().fail_next(call, nth);
    bool failed = false;
    try {
      an_engines_life();
    } catch (const std::exception& e) {
      failed = true;
      EXPECT_NE(std::string(e.what()).find(std::strncmp(call, "cuMemAlloc", 10) == 0 ? "cannot allocate" : call),
                std::string::npos) << e.what();
    }
    double_api().fail_next(call, 0);
    take_calls();
    const VjitDoubleLive after = double_api().live();
    expect_nothing_left(before, after, call + (" " + std::to_string(nth)));
    return failed;
  };
  int allocations = 0;
  while (fails_at("cuMemAlloc", allocations + 1)) ++allocations;
  EXPECT_GE(allocations, 5) << "parameters, gradients, scalars, arenas, staging";
  EXPECT_TRUE(fails_at("cuMemAllocHost", 1)) << "the pinned staging buffer";
  for (int nth : {1, 2, 10, 40, 80, 120}) EXPECT_TRUE(fails_at("cuLaunchKernel", nth)) << nth;
}

// A buffer that cannot grow (the driver refuses the memory) is left as it
// was: the step fails with the error that says so, and the same step, run
// again once memory is there, grows it and runs within it; when the engine
// goes, each buffer is freed once. The arenas grow for a batch of 64 trees
// after one of 4; the staging buffer's first 4 MiB hold the index lists of
// a few thousand trees, not of 8000.
TEST(CudaDouble, AFailedGrowthLeavesTheBuffersAsTheyWere) {
  VJIT_USE_THE_DOUBLE();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(8000));
  const GraphBatch small = models::make_batch(bundle.train, first_indices(4));
  const GraphBatch arenas = models::make_batch(bundle.train, first_indices(64));
  const GraphBatch staging = models::make_batch(bundle.train, first_indices(8000));
  for (auto [call, batch] : {std::pair{"cuMemAlloc", &arenas}, std::pair{"cuMemAllocHost", &staging}}) {
    Engine engine(*bundle.program, cuda_options());
    Adam adam(0.01f);
    engine.train_step(small, adam);
    take_calls();
    double_api().fail_next(call, 1);
    EXPECT_THROW(engine.train_step(*batch, adam), UserError) << call;
    double_api().fail_next(call, 0);
    EXPECT_NO_THROW(engine.train_step(*batch, adam)) << call;
    EXPECT_NO_THROW(engine.train_step(small, adam)) << call;
  }
  take_calls();  // the book: nothing freed twice, no copy or product past its buffer
}

// Each way an update runs: Adam on the device, Adam with dense updates on the
// host over downloaded gradients, SGD with momentum and clipping (the norm
// summed on the device); the gradients read after a backward; products on
// TF32 tensor cores. Every call passes the book's checks.
TEST(CudaDouble, EveryUpdatePathRunsOnTheDouble) {
  VJIT_USE_THE_DOUBLE();
  TreeLstmOnCuda tree(4);
  Engine& engine = tree.engine;
  const GraphBatch& batch = tree.batch;
  Adam adam(0.01f);
  SGD sgd(0.05f, 0.9f, 0.01f, 0.5f);
  auto compute_types = [](const std::vector<VjitDoubleCall>& calls) {
    std::set<int> types;
    for (const VjitDoubleCall& call : calls)
      if (is(call, "cublasLtMatmul")) types.insert(call.compute_type);
    return types;
  };
  take_calls();
  engine.train_step(batch, adam);
  const std::vector<VjitDoubleCall> first = take_calls();
  EXPECT_GT(launches_of(first, "vjit_optimizer_update"), 0);
  adam.set_dense_updates(true);
  engine.train_step(batch, adam);
  EXPECT_EQ(launches_of(take_calls(), "vjit_optimizer_update"), 0) << "dense Adam runs on the host";
  adam.set_dense_updates(false);
  engine.train_step(batch, adam);
  engine.train_step(batch, sgd);
  EXPECT_GT(launches_of(take_calls(), "vjit_sum_squares"), 0) << "clipping sums the gradients' squares";
  engine.forward(batch);  // RunOptions::backward is on by default
  engine.backward();
  EXPECT_EQ(engine.gradients().size(), size_t(tree.bundle.model->size()));
  take_calls();
  Options tf32 = cuda_options();
  tf32.tuning.tf32 = vjit::Lever::On;
  Engine on_tf32(*tree.bundle.program, tf32);
  on_tf32.infer(batch);
  const std::set<int> fp32_types = compute_types(first), tf32_types = compute_types(take_calls());
  EXPECT_EQ(fp32_types.size(), 1u);
  EXPECT_EQ(tf32_types.size(), 1u);
  EXPECT_NE(fp32_types, tf32_types) << "VJIT_TF32 changes every product's compute type";
}

// A checkpoint of a GPU engine goes through device memory both ways: values
// set by hand and uploaded, and optimizer slots handed to the engine, are
// what the device holds (no kernel changes them here), come back in the
// saver's Model after a step, are saved, and after a load are what the
// loader's device gives back after a step of its own.
TEST(CudaDouble, CheckpointsRoundTripThroughDeviceMemory) {
  VJIT_USE_THE_DOUBLE();
  const std::string path = ::testing::TempDir() + "vjit-cuda-double.safetensors";
  models::Bundle saved = models::make_model("tree_lstm", testing::small_config(16));
  models::Bundle resumed = models::make_model("tree_lstm", testing::small_config(16));
  Engine saver(*saved.program, cuda_options()), loader(*resumed.program, cuda_options());
  Adam saver_adam(0.01f), loader_adam(0.01f);
  GraphBatch batch = models::make_batch(saved.train, first_indices(4));
  saver.train_step(batch, saver_adam);
  for (int p = 0; p < saved.model->size(); ++p)
    for (size_t i = 0; i < saved.model->param(p).value.size(); ++i)
      saved.model->param(p).value[i] = float(p) + 1e-3f * float(i);
  saver.upload_parameters();
  OptimizerState state = saver.optimizer_state();
  for (auto& slots : state.slots)
    for (auto& slot : slots)
      for (size_t i = 0; i < slot.size(); ++i) slot[i] = 0.5f + 1e-4f * float(i);
  saver.set_optimizer_state(state);
  std::vector<std::vector<float>> values;
  for (int p = 0; p < saved.model->size(); ++p) values.push_back(saved.model->param(p).value);
  saver.train_step(batch, saver_adam);
  // An embedding table's touched rows come back through a gather kernel, which
  // does not run here: only dense parameters come back whole from the device.
  std::vector<int> dense;
  for (int p = 0; p < saved.model->size(); ++p)
    if (saver.gradient_rows()[size_t(p)].all) dense.push_back(p);
  ASSERT_FALSE(dense.empty());
  for (int p : dense) EXPECT_EQ(saved.model->param(p).value, values[size_t(p)]) << saved.model->param(p).name;
  save_checkpoint(path, saver, &saver_adam);
  EXPECT_EQ(saver.optimizer_state().slots, state.slots);
  load_checkpoint(path, loader, &loader_adam);
  loader.train_step(batch, loader_adam);
  for (int p : dense) EXPECT_EQ(resumed.model->param(p).value, values[size_t(p)]) << resumed.model->param(p).name;
  EXPECT_EQ(loader.optimizer_state().slots, state.slots);
  EXPECT_EQ(loader.optimizer_state().steps, saver.optimizer_state().steps + 1);
  take_calls();
  std::remove(path.c_str());
}

// The launch list of one Tree-LSTM training step on two trees, printed: what
// the host queues, in order (kernels with grid and block, products with shape).
TEST(CudaDouble, PrintsTheLaunchListOfOneStep) {
  VJIT_USE_THE_DOUBLE();
  TreeLstmOnCuda tree(2);
  Engine& engine = tree.engine;
  const GraphBatch& batch = tree.batch;
  SGD sgd(0.1f);
  engine.train_step(batch, sgd);
  take_calls();
  engine.train_step(batch, sgd);
  const std::vector<std::string> work = device_work(take_calls());
  ASSERT_FALSE(work.empty());
  std::cout << "one tree_lstm train_step on 2 trees: " << work.size() << " launches and products\n";
  for (const std::string& item : work) std::cout << "  " << item << "\n";
}

// The primitive a driver call is, by the kernel it launches (the module's
// own kernels, codegen/cuda_source.h) or the copy or fill it queues; empty
// for a call that is no device work (events, synchronisation, handles).
std::string primitive_of(const VjitDoubleCall& call) {
  static const std::map<std::string, std::string> kernels = {
      {"vjit_copy_rows", "move_rows"},       {"vjit_elementwise", "elementwise"},   {"vjit_dropout", "elementwise"},
      {"vjit_broadcast", "move_rows"},       {"vjit_sum_mod", "reduce"},            {"vjit_sum_columns_into", "reduce"},
      {"vjit_loss_sum", "reduce"},           {"vjit_outer", "outer"},               {"vjit_batched_matmul", "vertex_products"},
      {"vjit_softmax_ce", "softmax_ce"},     {"vjit_gather_sum", "add_rows"},       {"vjit_fill_rows", "fill"},
      {"vjit_sum_squares", "reduce"},        {"vjit_optimizer_update", "optimizer_step"},
      {"vjit_slice_cols", "move_rows"},      {"vjit_pad_cols", "move_rows"},        {"vjit_transpose", "move_rows"},
      {"vjit_child_count", "fill"},          {"vjit_max_children", "reduce"},       {"vjit_max_children_grad", "reduce"}};
  if (is(call, "cublasLtMatmul")) return call.batch_count > 1 ? "gemm_batched" : "gemm";
  if (is(call, "cuMemsetD8Async")) return "fill";
  if (is(call, "cuMemcpyHtoDAsync")) return "upload";
  if (is(call, "cuMemcpyDtoHAsync")) return "download";
  if (!is(call, "cuLaunchKernel")) return "";
  if (is_fused(call)) return "fused";
  if (std::strcmp(call.function, "vjit_move_rows") == 0) {
    constexpr uint64_t kMoveAdd = 1, kMoveZero = 2;  // vjit_move_rows(rows, width, pairs, mode)
    return call.params[3] == kMoveAdd ? "add_rows" : call.params[3] == kMoveZero ? "fill" : "move_rows";
  }
  for (int op = 0; op < ir::kNumOps; ++op)  // a row op's kernel counts as its definition says
    if (const ir::RowOp* row = ir::row_op(ir::Op(op)); row && std::strcmp(call.function, row->cuda_kernel) == 0)
      return std::string(primitive_name(row->primitive));
  const auto found = kernels.find(call.function);
  return found == kernels.end() ? std::string("unknown kernel ") + call.function : found->second;
}

// The primitives the driver saw queued by a second train step of `program`
// on `batch` with `options` (VJIT_LOG=primitives added), kind by kind,
// against the runner's list of them in the log; each fused kernel under its
// own name. Returns the second step's driver calls.
std::vector<VjitDoubleCall> expect_launch_list_is_primitive_list(const Program& program, const GraphBatch& batch,
                                                                  Options options, const std::string& what) {
  options.log = vjit::Options::Log::Primitives;
  Engine engine(program, options);
  Adam adam(0.01f);
  ::testing::internal::CaptureStderr();
  engine.train_step(batch, adam);
  take_calls();
  (void)::testing::internal::GetCapturedStderr();
  ::testing::internal::CaptureStderr();
  engine.train_step(batch, adam);
  const std::vector<VjitDoubleCall> calls = take_calls();
  const std::string log = ::testing::internal::GetCapturedStderr();

  std::vector<std::string> driver, listed;
  std::vector<std::string> launched_fused, listed_fused;
  for (const VjitDoubleCall& call : calls) {
    const std::string kind = primitive_of(call);
    if (kind.empty()) continue;
    driver.push_back(kind);
    if (kind == "fused") launched_fused.push_back(call.function);
  }
  const std::regex entry(R"(\[vjit primitives\]   \d+ (forward|backward) (\w+)( type \S+)?( task \d+)?( rows \d+)?: (.+))");
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (!std::regex_match(line, match, entry)) continue;
    listed.push_back(match[2]);
    if (match[2] == "fused") listed_fused.push_back(match[6]);
  }
  EXPECT_FALSE(driver.empty()) << what;
  EXPECT_EQ(listed, driver) << what << ": first difference: " << first_difference(listed, driver);
  EXPECT_EQ(listed_fused, launched_fused) << what;
  return calls;
}

// The same, for an example model on its first 4 samples.
std::vector<VjitDoubleCall> expect_launch_list_is_primitive_list(const std::string& model, const Options& options,
                                                                  const std::string& what) {
  models::Bundle bundle = models::make_model(model, testing::small_config(16));
  return expect_launch_list_is_primitive_list(*bundle.program, models::make_batch(bundle.train, first_indices(4)),
                                              options, what);
}

// VJIT_LOG=primitives lists a call's primitives in the order the runner
// issues them: the same list as the driver saw the device work queued.
TEST(CudaDouble, TheLaunchListIsThePrimitiveList) {
  VJIT_USE_THE_DOUBLE();
  expect_launch_list_is_primitive_list("tree_lstm", cuda_options(), "tree_lstm");
}

// The multiply-adds of a step's products (m·n·k each).
int64_t gemm_volume(const std::vector<VjitDoubleCall>& calls) {
  int64_t volume = 0;
  for (const VjitDoubleCall& call : calls)
    if (is(call, "cublasLtMatmul")) volume += call.m * call.n * call.k;
  return volume;
}

// The Child-Sum Tree-LSTM (a children block: gather_all, slice_cols, a
// product per child, sum_rows) trains on the CUDA device with its block
// padded and in child row space: the launch list is the primitive list either
// way; padded, the slices run as kernels; in child rows, they are views
// (no slice kernel), and the products do less work: one row per actual
// child, not max_children per vertex.
TEST(CudaDouble, ChildSumTrainsPaddedAndInChildRows) {
  VJIT_USE_THE_DOUBLE();
  std::vector<VjitDoubleCall> steps[2];
  for (Lever child_rows : {Lever::Off, Lever::On}) {
    Options options = cuda_options();
    options.tuning.child_rows = child_rows;
    const std::string what = std::string("child_rows ") + (child_rows == Lever::On ? "on" : "off");
    steps[child_rows == Lever::On] = expect_launch_list_is_primitive_list("child_sum_tree_lstm", options, what);
  }
  const std::vector<VjitDoubleCall>&padded = steps[0], &child_rows = steps[1];
  EXPECT_GT(launches_of(padded, "vjit_slice_cols"), 0);
  EXPECT_EQ(launches_of(child_rows, "vjit_slice_cols"), 0);
  EXPECT_GT(count_of(child_rows, "cublasLtMatmul"), 0);
  // Padded, the products over the block take max_children rows per vertex;
  // in child rows, one per actual child: less work.
  EXPECT_LT(gemm_volume(child_rows), gemm_volume(padded));
}

// Every op of the children block trains on the CUDA device (the programs of
// tests/children_block_cases.h: nodes with 3, 1, 0 and max_children
// children), padded and in child rows: the launch list is the primitive list,
// and, padded, the op's own kernels run (forward and gradient), with the
// argument blocks of their signatures in the module (the double checks).
class CudaDoubleBlockOp : public ::testing::TestWithParam<testing::BlockCase> {};

TEST_P(CudaDoubleBlockOp, TrainsPaddedAndInChildRows) {
  VJIT_USE_THE_DOUBLE();
  const std::map<std::string, std::vector<const char*>> kernels = {
      {"slice_cols", {"vjit_slice_cols", "vjit_pad_cols"}},
      {"transpose", {"vjit_transpose"}},
      {"max_children", {"vjit_max_children", "vjit_max_children_grad"}},
      {"child_count", {"vjit_child_count"}}};
  testing::BlockProgram p(GetParam().body);
  for (Lever child_rows : {Lever::Off, Lever::On}) {
    Options options = cuda_options();
    options.tuning.child_rows = child_rows;
    const std::string what = GetParam().name + (child_rows == Lever::On ? " child_rows on" : " child_rows off");
    const std::vector<VjitDoubleCall> calls = expect_launch_list_is_primitive_list(p.program, p.batch, options, what);
    const auto expected = kernels.find(GetParam().name);
    if (child_rows == Lever::On || expected == kernels.end()) continue;
    for (const char* kernel : expected->second) EXPECT_GT(launches_of(calls, kernel), 0) << what << ": " << kernel;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOp, CudaDoubleBlockOp, ::testing::ValuesIn(testing::block_cases()),
                         [](const ::testing::TestParamInfo<testing::BlockCase>& info) { return info.param.name; });

// A lever only the CPU device honours, asked on with VJIT_DEVICE=cuda, is
// refused when the engine is built, naming the device and the variable;
// off (or auto) builds, and the engine runs them off. So is a row placement
// beyond copy; copy (or auto) builds and runs copy.
TEST(CudaDouble, EnginesRefuseWhatOnlyTheCpuDoes) {
  VJIT_USE_THE_DOUBLE();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(16));
  const std::pair<const char*, const char*> cpu_only[] = {
      {"VJIT_PRETRANSPOSE", "on"},     {"VJIT_INFER_KERNELS", "on"},    {"VJIT_ROW_PLACEMENT", "slices"},
      {"VJIT_ROW_PLACEMENT", "tables"}, {"VJIT_PARAM_LAYOUT", "on"},     {"VJIT_DIST_OVERLAP", "on"},
      {"VJIT_DETERMINISTIC", "on"}};
  Options all_off = cuda_options();
  for (const auto& [variable, value] : cpu_only) {
    Options options = cuda_options();
    apply_flag(options, variable, value);
    try {
      Engine engine(*bundle.program, options);
      ADD_FAILURE() << variable << "=" << value << " with VJIT_DEVICE=cuda was accepted";
    } catch (const UserError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(std::string(variable) + "=" + value + ": the cuda device"), std::string::npos) << message;
    }
    apply_flag(all_off, variable, std::string_view(variable) == "VJIT_ROW_PLACEMENT" ? "copy" : "off");
  }
  Engine engine(*bundle.program, all_off);
  const Options::Tuning& tuning = engine.options().tuning;
  for (Lever lever : {tuning.pretranspose, tuning.infer_kernels, tuning.param_layout}) EXPECT_EQ(lever, Lever::Off);
  EXPECT_EQ(tuning.row_placement, Options::RowPlacement::Copy);
  EXPECT_EQ(Engine(*bundle.program, cuda_options()).options().tuning, tuning) << "auto on the GPU is off, and copy";
}

// --- CUDA graphs (VJIT_CUDA_GRAPHS, runtime/cuda_graph.h) ---

// A pass's structure is its calls in order: the function and block of a
// kernel, the shape of a product, the direction of a copy, that a fill is
// one, and the stream of each; nothing else (grids, rows and addresses are
// what an executable graph's update changes, so no call takes them).
TEST(CudaGraphs, StructuresAreEqualExactlyWhenTheirCallsAre) {
  int kernels[2];
  const std::vector<int64_t> shape{0, 1, 64, 128, 32, 32, 128, 128, 0};
  std::vector<int64_t> other_m = shape;
  other_m[2] = 65;
  // The same five calls, then one of these.
  const std::vector<std::pair<const char*, std::function<void(runtime::GraphStructure&)>>> endings = {
      {"a fill", [](runtime::GraphStructure& s) { s.fill(0); }},
      {"a kernel", [&](runtime::GraphStructure& s) { s.kernel(&kernels[0], 256, 0); }},
      {"another kernel", [&](runtime::GraphStructure& s) { s.kernel(&kernels[1], 256, 0); }},
      {"another block", [&](runtime::GraphStructure& s) { s.kernel(&kernels[0], 128, 0); }},
      {"a product", [&](runtime::GraphStructure& s) { s.gemm(shape, 0); }},
      {"another product shape", [&](runtime::GraphStructure& s) { s.gemm(other_m, 0); }},
      {"an upload", [](runtime::GraphStructure& s) { s.copy(true, 0); }},
      {"a download", [](runtime::GraphStructure& s) { s.copy(false, 0); }},
      {"on another stream", [](runtime::GraphStructure& s) { s.copy(false, 1); }},
  };
  auto structure = [&](size_t ending) {
    runtime::GraphStructure s;
    s.fill(0);
    s.kernel(&kernels[0], 256, 0);
    s.gemm(shape, 0);
    s.copy(true, 0);
    s.kernel(&kernels[1], 256, 0);
    endings[ending].second(s);
    return s;
  };
  for (size_t a = 0; a < endings.size(); ++a) {
    const runtime::GraphStructure first = structure(a);
    EXPECT_EQ(first.calls(), 6u);
    for (size_t b = 0; b < endings.size(); ++b) {
      const runtime::GraphStructure second = structure(b);
      EXPECT_EQ(first == second, a == b) << endings[a].first << " against " << endings[b].first;
      if (a == b) {
        EXPECT_EQ(first.hash(), second.hash()) << endings[a].first;
      } else {
        EXPECT_NE(first.hash(), second.hash()) << endings[a].first << " against " << endings[b].first;
      }
    }
  }
  runtime::GraphStructure a, b;
  a.fill(0), a.copy(true, 0);
  b.copy(true, 0), b.fill(0);
  EXPECT_FALSE(a == b) << "the same calls in another order";
  a.clear();
  EXPECT_EQ(a.calls(), 0u);
  EXPECT_TRUE(a == runtime::GraphStructure());
}

Options graph_options() {
  Options options = cuda_options();
  options.tuning.cuda_graphs = Lever::On;
  return options;
}

bool captured(const VjitDoubleCall& call) { return call.captured != 0; }

// Launches the host made itself: each graph launch, and each kernel or
// product not captured into a graph.
int host_launches(const std::vector<VjitDoubleCall>& calls) {
  return int(std::count_if(calls.begin(), calls.end(), [](const VjitDoubleCall& c) {
    return is(c, "cuGraphLaunch") || ((is(c, "cuLaunchKernel") || is(c, "cublasLtMatmul")) && !captured(c));
  }));
}

// The graph calls of train steps: each pass captured; a structure seen for
// the first time instantiated; the same structure again (the same batch, or
// its samples in another order) updated in place, never instantiated; a
// batch of another structure instantiated anew. The double refuses an update
// whose structure differs, so an update it accepted is one of equal structure.
TEST(CudaGraphs, TrainStepsCaptureInstantiateThenUpdate) {
  VJIT_USE_THE_DOUBLE();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(16));
  Engine engine(*bundle.program, graph_options());
  EXPECT_EQ(engine.options().tuning.cuda_graphs, Lever::On);
  Adam adam(0.01f);
  const GraphBatch batch = models::make_batch(bundle.train, first_indices(4));
  const GraphBatch reordered = models::make_batch(bundle.train, {2, 0, 3, 1});
  const GraphBatch other = models::make_batch(bundle.train, first_indices(7));
  take_calls();
  struct GraphCalls {
    int begins, ends, instantiations, updates, refused, launches, uncaptured_kernels;
  };
  auto step = [&](const GraphBatch& b) {
    engine.train_step(b, adam);
    const std::vector<VjitDoubleCall> calls = take_calls();
    int updates = 0, refused = 0, uncaptured_kernels = 0, graph_launches = 0;
    for (const VjitDoubleCall& call : calls) {
      if (is(call, "cuGraphExecUpdate")) (call.status == 0 ? updates : refused) += 1;
      graph_launches += is(call, "cuGraphLaunch");
      // Before the backward's graph: a pass's work left out of its graph.
      if ((is(call, "cuLaunchKernel") || is(call, "cublasLtMatmul")) && !captured(call) && graph_launches < 2)
        ++uncaptured_kernels;
    }
    return GraphCalls{count_of(calls, "cuStreamBeginCapture"), count_of(calls, "cuStreamEndCapture"),
                      count_of(calls, "cuGraphInstantiate"),   updates,
                      refused,                                 count_of(calls, "cuGraphLaunch"),
                      uncaptured_kernels};
  };
  const GraphCalls first = step(batch);
  EXPECT_EQ(first.begins, 2) << "forward and backward";
  EXPECT_EQ(first.ends, 2);
  EXPECT_EQ(first.launches, 2);
  EXPECT_EQ(first.instantiations, 2) << "two structures, both new";
  EXPECT_EQ(first.updates + first.refused, 0);
  EXPECT_EQ(first.uncaptured_kernels, 0) << "a pass's kernels are all in its graph";
  // The second backward zeroes the embedding rows the first touched: a new
  // structure; its forward is the first's.
  const GraphCalls second = step(batch);
  EXPECT_EQ(second.updates, 1);
  EXPECT_EQ(second.instantiations, 1);
  for (const GraphBatch* same : {&batch, &reordered, &batch}) {
    const GraphCalls steady = step(*same);
    EXPECT_EQ(steady.begins, 2);
    EXPECT_EQ(steady.launches, 2);
    EXPECT_EQ(steady.updates, 2) << "the same structure updates its executable graph";
    EXPECT_EQ(steady.instantiations, 0) << "the same structure is not instantiated again";
    EXPECT_EQ(steady.refused, 0);
    EXPECT_EQ(steady.uncaptured_kernels, 0);
  }
  const GraphCalls changed = step(other);
  EXPECT_EQ(changed.launches, 2);
  EXPECT_GE(changed.instantiations, 1) << "another batch shape is another structure";
  EXPECT_EQ(changed.instantiations + changed.updates, 2);
  EXPECT_EQ(changed.refused, 0) << "a structure the double would not update was taken for a known one";
  // The larger batch grew the arenas: where a pass's copies or fills now
  // reach other allocations the driver refuses the update, and that graph is
  // instantiated again; none is instantiated as a new structure.
  const GraphCalls back = step(batch);
  EXPECT_EQ(back.updates + back.refused, 2) << "the first structure's graphs are still cached";
  EXPECT_EQ(back.instantiations, back.refused);
  const GraphCalls settled = step(batch);
  EXPECT_EQ(settled.updates, 2);
  EXPECT_EQ(settled.instantiations, 0);
  // infer: one forward graph.
  engine.infer(batch);
  const std::vector<VjitDoubleCall> inferred = take_calls();
  EXPECT_EQ(count_of(inferred, "cuGraphLaunch"), 1);
  EXPECT_EQ(host_launches(inferred), 1);
}

// The device work of a step is the same with graphs as without, in the same
// order, only captured: the same kernels, grids, blocks and products. In
// steady state the host launches two graphs and the optimizer's kernels.
TEST(CudaGraphs, AGraphHoldsTheStepsOwnWork) {
  VJIT_USE_THE_DOUBLE();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(16));
  const GraphBatch batch = models::make_batch(bundle.train, first_indices(6));
  auto steady_step = [&](const Options& options) {
    Engine engine(*bundle.program, options);
    Adam adam(0.01f);
    for (int i = 0; i < 2; ++i) engine.train_step(batch, adam);
    take_calls();
    engine.train_step(batch, adam);
    return take_calls();
  };
  const std::vector<VjitDoubleCall> plain = steady_step(cuda_options());
  const std::vector<VjitDoubleCall> graphed = steady_step(graph_options());
  EXPECT_EQ(count_of(plain, "cuGraphLaunch"), 0);
  EXPECT_EQ(count_of(plain, "cuStreamBeginCapture"), 0) << "graphs are off by default";
  EXPECT_EQ(first_difference(device_work(graphed), device_work(plain)), "");
  int in_graphs = 0, after_passes = 0, graph_launches = 0;
  for (const VjitDoubleCall& call : graphed) {
    graph_launches += is(call, "cuGraphLaunch");
    if (!is(call, "cuLaunchKernel") && !is(call, "cublasLtMatmul")) continue;
    if (captured(call)) ++in_graphs;
    else if (graph_launches == 2) ++after_passes;  // the optimizer's step and the values brought back
  }
  EXPECT_GT(launches_of(plain, "vjit_optimizer_update"), 0);
  EXPECT_EQ(in_graphs + after_passes, int(device_work(plain).size()));
  EXPECT_EQ(host_launches(graphed), 2 + after_passes) << "a pass's work launched outside its graph";
  EXPECT_EQ(host_launches(plain), int(device_work(plain).size()));
  std::cout << "tree_lstm train_step on 6 trees, host launches: " << host_launches(plain) << " without graphs, "
            << host_launches(graphed) << " with (2 graphs holding " << in_graphs << ", and " << after_passes
            << " of the optimizer's step)\n";
}

// Staging buffers that grow while a pass is captured are kept until its
// graph ran; arenas that grew make copies reach other allocations, which the
// driver does not update: the graph is instantiated again. No copy reaches
// freed memory (the double checks each as the graph runs), graphs and
// executable graphs go with the engine.
TEST(CudaGraphs, GrowingBatchesAndDroppedEnginesLeaveNothingBehind) {
  VJIT_USE_THE_DOUBLE();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(64));
  {  // the device's own memory (cuBLASLt's workspaces) is made once, by the process's first engine
    Engine first(*bundle.program, cuda_options());
    Adam adam(0.01f);
    first.train_step(models::make_batch(bundle.train, first_indices(2)), adam);
  }
  take_calls();
  const VjitDoubleLive before = double_api().live();
  {
    Engine engine(*bundle.program, graph_options());
    Adam adam(0.01f);
    for (int samples : {2, 64, 3, 64, 64})
      engine.train_step(models::make_batch(bundle.train, first_indices(samples)), adam);
    engine.infer(models::make_batch(bundle.train, first_indices(64)));
    const std::vector<VjitDoubleCall> calls = take_calls();
    EXPECT_GT(count_of(calls, "cuMemFree"), 0) << "no buffer was replaced";
    EXPECT_GT(count_of(calls, "cuGraphExecUpdate"), 0);
    EXPECT_EQ(count_of(calls, "cuGraphLaunch"), 11);
    EXPECT_GT(double_api().live().graph_execs, before.graph_execs) << "the engine's graphs are cached";
    EXPECT_EQ(double_api().live().graphs, before.graphs) << "a captured graph outlives its pass";
  }
  take_calls();
  expect_nothing_left(before, double_api().live());
}

// A failure inside a captured pass ends the capture and destroys what it
// captured: the device's stream is not left captured.
TEST(CudaGraphs, AFailedLaunchEndsTheCapture) {
  VJIT_USE_THE_DOUBLE();
  TreeLstmOnCuda tree(3);
  Engine engine(*tree.bundle.program, graph_options());
  SGD sgd(0.1f);
  engine.train_step(tree.batch, sgd);
  take_calls();
  double_api().fail_next("cuLaunchKernel", 3);
  EXPECT_THROW(engine.train_step(tree.batch, sgd), std::exception);
  std::vector<VjitDoubleCall> failed = take_calls();
  EXPECT_EQ(count_of(failed, "cuStreamBeginCapture"), count_of(failed, "cuStreamEndCapture"));
  EXPECT_EQ(double_api().live().graphs, 0u) << "the abandoned capture's graph was destroyed";
  // The device's stream is not left captured: another engine's work runs.
  Engine plain(*tree.bundle.program, cuda_options());
  plain.train_step(tree.batch, sgd);
  const std::vector<VjitDoubleCall> after = take_calls();
  EXPECT_GT(count_of(after, "cuLaunchKernel"), 0);
  EXPECT_EQ(std::count_if(after.begin(), after.end(), captured), 0);
}


// --- Resident parameters (VJIT_CUDA_RESIDENT_PARAMS) ---
// The double runs no kernel, so a step leaves the device's values as they
// were: these tests check which copies move them and when (the update's
// float operations are the host shim's tests in tests/test_cuda.cpp).

Options resident_options(bool graphs = false) {
  Options options = graphs ? graph_options() : cuda_options();
  options.tuning.cuda_resident_params = Lever::On;
  return options;
}

// Where each parameter lives on the device: the destination of its upload
// from the Model's own memory when the engine was built.
struct DeviceRange {
  uint64_t begin = 0, end = 0;
};
std::vector<DeviceRange> parameter_ranges(const std::vector<VjitDoubleCall>& construction, const Model& model) {
  std::vector<DeviceRange> ranges;
  for (int p = 0; p < model.size(); ++p)
    for (const VjitDoubleCall& call : construction)
      if (is(call, "cuMemcpyHtoDAsync") && call.args[1] == uint64_t(uintptr_t(model.param(p).value.data()))) {
        ranges.push_back({call.args[0], call.args[0] + call.args[2]});
        break;
      }
  EXPECT_EQ(int(ranges.size()), model.size()) << "a parameter's upload was not found";
  return ranges;
}

// Copies to the host that read a parameter's values.
std::vector<VjitDoubleCall> parameter_downloads(const std::vector<VjitDoubleCall>& calls,
                                                const std::vector<DeviceRange>& ranges) {
  std::vector<VjitDoubleCall> found;
  for (const VjitDoubleCall& call : calls) {
    if (!is(call, "cuMemcpyDtoHAsync")) continue;
    const uint64_t begin = call.args[1], end = call.args[1] + call.args[2];
    if (std::any_of(ranges.begin(), ranges.end(), [&](const DeviceRange& r) { return begin < r.end && r.begin < end; }))
      found.push_back(call);
  }
  return found;
}

std::vector<float> all_values(const Model& model) {
  std::vector<float> values;
  for (int p = 0; p < model.size(); ++p) values.insert(values.end(), model.param(p).value.begin(), model.param(p).value.end());
  return values;
}

void fill_values(Model& model, float value) {
  for (int p = 0; p < model.size(); ++p) std::fill(model.param(p).value.begin(), model.param(p).value.end(), value);
}

// Steady train steps copy no parameter back (the default path copies every
// one it updated); a read copies the whole values block once, a second read
// nothing; the Model then holds the device's values.
TEST(ResidentParams, ParametersComeBackOnlyWhenRead) {
  VJIT_USE_THE_DOUBLE();
  for (bool resident : {false, true}) {
    models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(16));
    Model& model = *bundle.model;
    take_calls();
    Engine engine(*bundle.program, resident ? resident_options() : cuda_options());
    const std::vector<DeviceRange> ranges = parameter_ranges(take_calls(), model);
    const std::vector<float> on_device = all_values(model);
    const GraphBatch batch = models::make_batch(bundle.train, first_indices(5));
    Adam adam(0.01f);
    engine.train_step(batch, adam);
    take_calls();
    for (int step = 0; step < 3; ++step) engine.train_step(batch, adam);
    const std::vector<VjitDoubleCall> steps = take_calls();
    EXPECT_GT(launches_of(steps, resident ? "vjit_optimizer_update_multi" : "vjit_optimizer_update"), 0);
    if (!resident) {
      EXPECT_GE(parameter_downloads(steps, ranges).size(), 3u) << "the default path copies back every step";
      continue;
    }
    EXPECT_EQ(parameter_downloads(steps, ranges).size(), 0u) << "a resident step copied parameters back";
    EXPECT_EQ(launches_of(steps, "vjit_optimizer_update"), 0);
    // The Model is not written behind the user's back: values set on the host
    // stay until read from the engine.
    fill_values(model, 7.0f);
    engine.train_step(batch, adam);
    EXPECT_EQ(all_values(model), std::vector<float>(on_device.size(), 7.0f));
    take_calls();
    engine.download_parameters();
    const std::vector<VjitDoubleCall> read = parameter_downloads(take_calls(), ranges);
    ASSERT_EQ(read.size(), 1u) << "one copy of the values block";
    EXPECT_LE(read[0].args[1], ranges.front().begin);
    EXPECT_GE(read[0].args[1] + read[0].args[2], ranges.back().end);
    EXPECT_EQ(all_values(model), on_device) << "the device's values (the double runs no update)";
    engine.download_parameters();
    EXPECT_EQ(parameter_downloads(take_calls(), ranges).size(), 0u) << "the Model is current: nothing to copy";
  }
}

// A host write pushes (upload_parameters, load_checkpoint) and leaves the
// Model current; a checkpoint saved and an engine destroyed pull first.
TEST(ResidentParams, WritesPushAndReadersPull) {
  VJIT_USE_THE_DOUBLE();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(16));
  Model& model = *bundle.model;
  const GraphBatch batch = models::make_batch(bundle.train, first_indices(4));
  Adam adam(0.01f);
  const std::string path = ::testing::TempDir() + "vjit-resident-" + std::to_string(::getpid()) + ".safetensors";
  take_calls();
  std::optional<Engine> engine(std::in_place, *bundle.program, resident_options());
  const std::vector<DeviceRange> ranges = parameter_ranges(take_calls(), model);
  engine->train_step(batch, adam);
  // Pushed: the device holds the user's values; nothing to pull afterwards.
  fill_values(model, 0.25f);
  engine->upload_parameters();
  engine->train_step(batch, adam);
  fill_values(model, -1.0f);
  take_calls();
  // Saved: pulled first (the device's 0.25), then written.
  save_checkpoint(path, *engine, &adam);
  EXPECT_EQ(parameter_downloads(take_calls(), ranges).size(), 1u);
  const std::vector<float> pushed(all_values(model).size(), 0.25f);
  EXPECT_EQ(all_values(model), pushed);
  // Loaded: the file's values pushed, the Model current.
  fill_values(model, 3.0f);
  engine->upload_parameters();
  engine->train_step(batch, adam);
  load_checkpoint(path, *engine, &adam);
  take_calls();
  engine->download_parameters();
  EXPECT_EQ(parameter_downloads(take_calls(), ranges).size(), 0u) << "a load leaves the Model current";
  EXPECT_EQ(all_values(model), pushed);
  // Destroyed: the Model keeps the device's values.
  engine->train_step(batch, adam);
  fill_values(model, 5.0f);
  engine.reset();
  EXPECT_EQ(all_values(model), pushed);
  std::filesystem::remove(path);
}

// A step the host takes (dense updates of an embedding table) first pulls
// the values resident steps left on the device, and leaves the Model current.
TEST(ResidentParams, AHostStepPullsFirst) {
  VJIT_USE_THE_DOUBLE();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(16));
  Model& model = *bundle.model;
  const GraphBatch batch = models::make_batch(bundle.train, first_indices(4));
  take_calls();
  Engine engine(*bundle.program, resident_options());
  const std::vector<DeviceRange> ranges = parameter_ranges(take_calls(), model);
  Adam adam(1e-30f);  // the host step moves the values by about 1e-30
  engine.train_step(batch, adam);
  const std::vector<float> on_device = all_values(model);
  fill_values(model, 9.0f);  // not pushed: the device keeps its values
  adam.set_dense_updates(true);
  take_calls();
  engine.train_step(batch, adam);
  const std::vector<VjitDoubleCall> calls = take_calls();
  EXPECT_EQ(launches_of(calls, "vjit_optimizer_update_multi"), 0) << "dense Adam runs on the host";
  EXPECT_GE(parameter_downloads(calls, ranges).size(), 1u);
  const std::vector<float> stepped = all_values(model);
  ASSERT_EQ(stepped.size(), on_device.size());
  for (size_t i = 0; i < stepped.size(); ++i)
    ASSERT_NEAR(stepped[i], on_device[i], 1e-6f) << "element " << i << ": the host step ran on stale values";
  engine.download_parameters();
  EXPECT_EQ(parameter_downloads(take_calls(), ranges).size(), 0u);
}

// Per step, the optimizer is one launch for Σ g² and two (preview, update)
// over every parameter, whatever their number; with graphs on, a training
// step is four host launches: the forward's and backward's graphs and the
// optimizer's two.
TEST(ResidentParams, AStepIsAFewLaunches) {
  VJIT_USE_THE_DOUBLE();
  models::Bundle bundle = models::make_model("tree_lstm", testing::small_config(16));
  const GraphBatch batch = models::make_batch(bundle.train, first_indices(6));
  for (bool graphs : {false, true}) {
    Engine engine(*bundle.program, resident_options(graphs));
    Adam adam(0.01f);
    for (int i = 0; i < 2; ++i) engine.train_step(batch, adam);
    take_calls();
    engine.train_step(batch, adam);
    const std::vector<VjitDoubleCall> calls = take_calls();
    EXPECT_EQ(launches_of(calls, "vjit_sum_squares_multi"), 1);
    EXPECT_EQ(launches_of(calls, "vjit_optimizer_update_multi"), 2);
    EXPECT_EQ(launches_of(calls, "vjit_sum_squares") + launches_of(calls, "vjit_optimizer_update"), 0);
    if (!graphs) continue;
    EXPECT_EQ(count_of(calls, "cuGraphLaunch"), 4);
    EXPECT_EQ(host_launches(calls), 4) << "work launched outside a graph";
    std::cout << "tree_lstm train_step on 6 trees with resident parameters and graphs: " << host_launches(calls)
              << " host launches\n";
  }
}

}  // namespace
}  // namespace vjit
