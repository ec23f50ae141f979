#include "runtime/cuda_driver.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

#include "runtime/cuda_graph.h"
#include "vjit/error.h"

#ifdef VJIT_HAVE_CUDA
#include <cublasLt.h>
#include <cuda.h>
#endif

namespace vjit::runtime {

void* open_first_library(std::initializer_list<const char*> paths, const char* what, std::string& error) {
  std::string tried;
  for (const char* path : paths) {
    if (void* handle = ::dlopen(path, RTLD_NOW | RTLD_LOCAL)) return handle;
    const char* why = ::dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + "dlopen(\"" + path + "\"): " + (why ? why : "failed");
  }
  error = std::string(what) + " could not be loaded (" + tried + ")";
  return nullptr;
}

namespace {

// A non-negative integer from the environment, -1 when unset or not one.
int env_index(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return -1;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  return *end == '\0' && parsed >= 0 && parsed < (1L << 20) ? int(parsed) : -1;
}

}  // namespace

int local_rank_from_env() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const int rank = env_index(name); rank >= 0) return rank;
  return 0;
}

int cuda_device_for_local_rank(int local_rank, int devices) {
  return devices > 0 && local_rank > 0 ? local_rank % devices : 0;
}

#ifdef VJIT_HAVE_CUDA

namespace {

// The driver entry points vjit uses. Each is resolved with cuGetProcAddress for
// the CUDA version of the header it was compiled against, so a newer driver
// hands out the ABI this code expects (cuMemAlloc_v2, not cuMemAlloc).
#define VJIT_CUDA_DRIVER_FUNCTIONS(X)                                                                      \
  X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)                    \
  X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)              \
  X(cuStreamCreate) X(cuMemAlloc) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemsetD8Async)            \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel) X(cuStreamSynchronize)    \
  X(cuCtxSynchronize) X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime)        \
  X(cuStreamWaitEvent) X(cuEventDestroy) X(cuEventQuery)                                                  \
  X(cuGetErrorString) X(cuMemAllocHost) X(cuMemFreeHost) X(cuMemHostRegister) X(cuMemHostUnregister) X(cuMemFree) \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphExecUpdate) X(cuGraphLaunch)  \
  X(cuGraphDestroy) X(cuGraphExecDestroy)

struct Driver {
#define VJIT_X(fn) decltype(&::fn) fn = nullptr;
  VJIT_CUDA_DRIVER_FUNCTIONS(VJIT_X)
#undef VJIT_X
  std::string error;
};

const Driver& driver() {
  static const Driver loaded = [] {
    Driver d;
    void* handle = open_first_library({"libcuda.so.1"}, "the CUDA driver library", d.error);
    if (!handle) return d;
    auto get_proc = reinterpret_cast<decltype(&::cuGetProcAddress)>(::dlsym(handle, "cuGetProcAddress_v2"));
    if (!get_proc) {
      d.error = "the CUDA driver is older than CUDA 12 (libcuda.so.1 has no cuGetProcAddress_v2)";
      return d;
    }
#define VJIT_X(fn)                                                                                        \
  {                                                                                                       \
    void* p = nullptr;                                                                                    \
    CUdriverProcAddressQueryResult status{};                                                              \
    if (get_proc(#fn, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || !p) {    \
      if (d.error.empty())                                                                                \
        d.error = "the CUDA driver lacks " #fn " for CUDA " + std::to_string(CUDA_VERSION / 1000) + "." + \
                  std::to_string(CUDA_VERSION % 1000 / 10) + " (update the driver)";                      \
    } else {                                                                                              \
      d.fn = reinterpret_cast<decltype(d.fn)>(p);                                                         \
    }                                                                                                     \
  }
    VJIT_CUDA_DRIVER_FUNCTIONS(VJIT_X)
#undef VJIT_X
    return d;
  }();
  return loaded;
}

std::string error_text(CUresult result) {
  const char* text = nullptr;
  if (driver().cuGetErrorString) driver().cuGetErrorString(result, &text);
  return std::to_string(int(result)) + " (" + (text ? text : "unknown error") + ")";
}

#define VJIT_CU_CHECK(call)                                                                     \
  do {                                                                                          \
    CUresult vjit_result_ = (call);                                                             \
    VJIT_INTERNAL_CHECK(vjit_result_ == CUDA_SUCCESS, #call " failed: " << error_text(vjit_result_)); \
  } while (0)

// cuBLASLt, loaded on the first GEMM.
#define VJIT_CUBLASLT_FUNCTIONS(X)                                                                    \
  X(cublasLtCreate) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)                         \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)     \
  X(cublasLtMatrixLayoutSetAttribute)                                                                \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                               \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

struct BlasLt {
#define VJIT_X(fn) decltype(&::fn) fn = nullptr;
  VJIT_CUBLASLT_FUNCTIONS(VJIT_X)
#undef VJIT_X
  std::string error;
};

const BlasLt& blas_lt() {
  static const BlasLt loaded = [] {
    BlasLt b;
    void* handle = open_first_library({VJIT_CUBLASLT_SONAME, VJIT_CUDA_LIBRARY_DIR "/" VJIT_CUBLASLT_SONAME},
                                      "cuBLASLt", b.error);
    if (!handle) return b;
#define VJIT_X(fn)                                                                 \
  b.fn = reinterpret_cast<decltype(b.fn)>(::dlsym(handle, #fn));                   \
  if (!b.fn && b.error.empty()) b.error = "cuBLASLt lacks the symbol " #fn;
    VJIT_CUBLASLT_FUNCTIONS(VJIT_X)
#undef VJIT_X
    return b;
  }();
  return loaded;
}

#define VJIT_LT_CHECK(call)                                                                              \
  do {                                                                                                   \
    cublasStatus_t vjit_status_ = (call);                                                                \
    VJIT_INTERNAL_CHECK(vjit_status_ == CUBLAS_STATUS_SUCCESS, #call " failed: status " << int(vjit_status_)); \
  } while (0)

// A strided batch on cuBLASLt's layouts of its first operand (our B), its
// second (our A) and the output.
void set_batch(const BlasLt& lt, cublasLtMatrixLayout_t first, cublasLtMatrixLayout_t second,
               cublasLtMatrixLayout_t out, const GemmBatch& batch) {
  const int32_t count = int32_t(batch.count);
  for (auto [layout, stride] :
       {std::pair{first, batch.stride_b}, std::pair{second, batch.stride_a}, std::pair{out, batch.stride_c}}) {
    VJIT_LT_CHECK(lt.cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
    VJIT_LT_CHECK(
        lt.cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
}

constexpr size_t kArenaBlock = size_t(256) << 20;  // 256 MiB
constexpr size_t kWorkspace = size_t(32) << 20;    // cuBLASLt's workspace

}  // namespace

const CudaProbe& probe_cuda() {
  static const CudaProbe probe = [] {
    CudaProbe p;
    const Driver& d = driver();
    if (!d.error.empty()) {
      p.reason = d.error;
      return p;
    }
    CUresult init = d.cuInit(0);
    if (init != CUDA_SUCCESS) {
      p.reason = "the CUDA driver is installed but cuInit failed: " + error_text(init) +
                 (init == CUDA_ERROR_NO_DEVICE ? " (no CUDA device)" : "");
      return p;
    }
    int count = 0;
    if (d.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
      p.reason = "the CUDA driver found no CUDA device";
      return p;
    }
    p.info.devices = count;
    p.info.ordinal = cuda_device_for_local_rank(local_rank_from_env(), count);
    CUdevice device = 0;
    d.cuDeviceGet(&device, p.info.ordinal);
    char name[256] = {};
    d.cuDeviceGetName(name, sizeof name, device);
    p.info.name = name;
    d.cuDeviceGetAttribute(&p.info.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
    d.cuDeviceGetAttribute(&p.info.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
    d.cuDeviceGetAttribute(&p.info.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
    d.cuDeviceTotalMem(&p.info.memory_bytes, device);
    d.cuDriverGetVersion(&p.info.driver_version);
    if (p.info.major < 7) {
      p.reason = "the CUDA device " + p.info.name + " is sm_" + std::to_string(p.info.arch()) +
                 "; vjit needs sm_70 or newer";
      return p;
    }
    p.ok = true;
    return p;
  }();
  return probe;
}

struct CudaDevice::Impl {
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream streams[2] = {nullptr, nullptr};
  CUevent start = nullptr, stop = nullptr, sync = nullptr;
  struct Block {
    CUdeviceptr base = 0;
    size_t size = 0, used = 0;
  };
  std::vector<Block> blocks;
  std::mutex mutex;
  cublasLtHandle_t lt = nullptr;
  CUdeviceptr workspace[2] = {0, 0};  // one per stream: GEMMs on the two streams may run at once
  // Per GEMM shape (transposes, m, n, k, leading dimensions, TF32): the
  // descriptors and the algorithm cuBLASLt's heuristic chose, made on the
  // first call of that shape; a Tree-LSTM step repeats a few dozen shapes
  // hundreds of times, and making them costs more host time than the product.
  struct GemmPlan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  std::map<std::array<int64_t, 13>, GemmPlan> gemm_plans;
  GraphStructure* structure = nullptr;  // while a stream is captured (begin_capture)
};

CudaDevice& CudaDevice::get() {
  const CudaProbe& probe = probe_cuda();
  VJIT_USER_CHECK(probe.ok, "no usable CUDA device: " << probe.reason);
  static CudaDevice device;
  driver().cuCtxSetCurrent(device.impl_->context);
  return device;
}

CudaDevice::CudaDevice() : impl_(std::make_unique<Impl>()), info_(probe_cuda().info) {
  const Driver& d = driver();
  VJIT_CU_CHECK(d.cuDeviceGet(&impl_->device, info_.ordinal));
  VJIT_CU_CHECK(d.cuDevicePrimaryCtxRetain(&impl_->context, impl_->device));
  VJIT_CU_CHECK(d.cuCtxSetCurrent(impl_->context));
  for (CUstream& s : impl_->streams) VJIT_CU_CHECK(d.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  VJIT_CU_CHECK(d.cuEventCreate(&impl_->start, CU_EVENT_DEFAULT));
  VJIT_CU_CHECK(d.cuEventCreate(&impl_->stop, CU_EVENT_DEFAULT));
  VJIT_CU_CHECK(d.cuEventCreate(&impl_->sync, CU_EVENT_DISABLE_TIMING));
}

// The process keeps the primary context until exit (the driver releases it).
CudaDevice::~CudaDevice() = default;

DevicePtr CudaDevice::alloc(size_t bytes) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  bytes = (std::max<size_t>(bytes, 1) + 255) & ~size_t(255);
  for (Impl::Block& b : impl_->blocks)
    if (b.size - b.used >= bytes) {
      DevicePtr p = b.base + b.used;
      b.used += bytes;
      return p;
    }
  Impl::Block block;
  block.size = std::max(bytes, kArenaBlock);
  CUresult result = driver().cuMemAlloc(&block.base, block.size);
  VJIT_USER_CHECK(result == CUDA_SUCCESS, "cannot allocate " << block.size << " bytes on " << info_.name << ": "
                                                             << error_text(result));
  block.used = bytes;
  impl_->blocks.push_back(block);
  return block.base;
}

DevicePtr CudaDevice::alloc_owned(size_t bytes) {
  CUdeviceptr p = 0;
  CUresult result = driver().cuMemAlloc(&p, std::max<size_t>(bytes, 1));
  VJIT_USER_CHECK(result == CUDA_SUCCESS, "cannot allocate " << bytes << " bytes on " << info_.name << ": "
                                                             << error_text(result));
  return p;
}

void CudaDevice::free_owned(DevicePtr p) {
  if (p) driver().cuMemFree(p);  // an error here leaves nothing to recover
}

void CudaDevice::release_all() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (Impl::Block& b : impl_->blocks) b.used = 0;
}

void CudaDevice::upload(DevicePtr dst, const void* src, size_t bytes, int stream) {
  if (bytes && impl_->structure) impl_->structure->copy(true, stream);
  if (bytes) VJIT_CU_CHECK(driver().cuMemcpyHtoDAsync(dst, src, bytes, impl_->streams[stream]));
}

void CudaDevice::download(void* dst, DevicePtr src, size_t bytes, int stream) {
  if (!bytes) return;
  VJIT_INTERNAL_CHECK(!impl_->structure, "a download waited for while a stream is captured");
  VJIT_CU_CHECK(driver().cuMemcpyDtoHAsync(dst, src, bytes, impl_->streams[stream]));
  VJIT_CU_CHECK(driver().cuStreamSynchronize(impl_->streams[stream]));
}

void CudaDevice::download_async(void* dst, DevicePtr src, size_t bytes, int stream) {
  if (bytes && impl_->structure) impl_->structure->copy(false, stream);
  if (bytes) VJIT_CU_CHECK(driver().cuMemcpyDtoHAsync(dst, src, bytes, impl_->streams[stream]));
}

void* CudaDevice::alloc_pinned(size_t bytes) {
  void* p = nullptr;
  CUresult result = driver().cuMemAllocHost(&p, std::max<size_t>(bytes, 1));
  VJIT_USER_CHECK(result == CUDA_SUCCESS, "cannot allocate " << bytes << " bytes of pinned host memory: "
                                                             << error_text(result));
  return p;
}

void CudaDevice::free_pinned(void* p) {
  if (p) driver().cuMemFreeHost(p);
}

bool CudaDevice::pin(void* p, size_t bytes) {
  return p && bytes && driver().cuMemHostRegister(p, bytes, 0) == CUDA_SUCCESS;
}

void CudaDevice::unpin(void* p) {
  if (p) driver().cuMemHostUnregister(p);
}

void CudaDevice::memset_zero(DevicePtr dst, size_t bytes, int stream) {
  if (bytes && impl_->structure) impl_->structure->fill(stream);
  if (bytes) VJIT_CU_CHECK(driver().cuMemsetD8Async(dst, 0, bytes, impl_->streams[stream]));
}

void* CudaDevice::load_module(const std::string& image) {
  CUmodule module = nullptr;
  VJIT_CU_CHECK(driver().cuModuleLoadData(&module, image.data()));
  return module;
}

void CudaDevice::unload_module(void* module) {
  if (module) driver().cuModuleUnload(static_cast<CUmodule>(module));  // an error here leaves nothing to recover
}

void* CudaDevice::function(void* module, const std::string& name) {
  CUfunction fn = nullptr;
  CUresult result = driver().cuModuleGetFunction(&fn, static_cast<CUmodule>(module), name.c_str());
  VJIT_INTERNAL_CHECK(result == CUDA_SUCCESS, "kernel " << name << " not in its module: " << error_text(result));
  return fn;
}

unsigned CudaDevice::grid_for(int64_t elements) {
  // Enough blocks to fill the device; the grid-stride loop covers the rest.
  int64_t blocks = (std::max<int64_t>(elements, 1) + 255) / 256;
  return unsigned(std::min<int64_t>(blocks, 65535));
}

void CudaDevice::launch(void* function, unsigned grid, unsigned block, void** params, int stream) {
  if (impl_->structure) impl_->structure->kernel(function, block, stream);
  VJIT_CU_CHECK(driver().cuLaunchKernel(static_cast<CUfunction>(function), grid, 1, 1, block, 1, 1, 0,
                                        impl_->streams[stream], params, nullptr));
}

void CudaDevice::synchronize() {
  VJIT_INTERNAL_CHECK(!impl_->structure, "a synchronize while a stream is captured");
  for (CUstream s : impl_->streams) VJIT_CU_CHECK(driver().cuStreamSynchronize(s));
}

void CudaDevice::wait(int waiter, int signaller) {
  VJIT_CU_CHECK(driver().cuEventRecord(impl_->sync, impl_->streams[signaller]));
  VJIT_CU_CHECK(driver().cuStreamWaitEvent(impl_->streams[waiter], impl_->sync, 0));
}

void* CudaDevice::create_event() {
  CUevent event = nullptr;
  VJIT_CU_CHECK(driver().cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  return event;
}

void CudaDevice::destroy_event(void* event) {
  if (event) driver().cuEventDestroy(static_cast<CUevent>(event));
}

void CudaDevice::record(void* event, int stream) {
  VJIT_CU_CHECK(driver().cuEventRecord(static_cast<CUevent>(event), impl_->streams[stream]));
}

void CudaDevice::wait_event(int stream, void* event) {
  VJIT_CU_CHECK(driver().cuStreamWaitEvent(impl_->streams[stream], static_cast<CUevent>(event), 0));
}

bool CudaDevice::event_done(void* event) {
  const CUresult result = driver().cuEventQuery(static_cast<CUevent>(event));
  VJIT_INTERNAL_CHECK(result == CUDA_SUCCESS || result == CUDA_ERROR_NOT_READY,
                      "cuEventQuery failed: " << error_text(result));
  return result == CUDA_SUCCESS;
}

void* CudaDevice::stream_handle(int stream) { return impl_->streams[stream]; }

void CudaDevice::begin_capture(int stream, GraphStructure* structure) {
  VJIT_INTERNAL_CHECK(!impl_->structure, "a capture begun while another is on");
  VJIT_CU_CHECK(driver().cuStreamBeginCapture(impl_->streams[stream], CU_STREAM_CAPTURE_MODE_RELAXED));
  impl_->structure = structure;
}

void* CudaDevice::end_capture(int stream) {
  impl_->structure = nullptr;
  CUgraph graph = nullptr;
  VJIT_CU_CHECK(driver().cuStreamEndCapture(impl_->streams[stream], &graph));
  return graph;
}

void* CudaDevice::instantiate_graph(void* graph) {
  CUgraphExec exec = nullptr;
  VJIT_CU_CHECK(driver().cuGraphInstantiate(&exec, static_cast<CUgraph>(graph), 0));
  return exec;
}

bool CudaDevice::update_graph_exec(void* exec, void* graph) {
  CUgraphExecUpdateResultInfo info{};
  const CUresult result =
      driver().cuGraphExecUpdate(static_cast<CUgraphExec>(exec), static_cast<CUgraph>(graph), &info);
  VJIT_INTERNAL_CHECK(result == CUDA_SUCCESS || result == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE,
                      "cuGraphExecUpdate failed: " << error_text(result));
  return result == CUDA_SUCCESS;
}

void CudaDevice::launch_graph(void* exec, int stream) {
  VJIT_CU_CHECK(driver().cuGraphLaunch(static_cast<CUgraphExec>(exec), impl_->streams[stream]));
}

void CudaDevice::destroy_graph(void* graph) {
  if (graph) driver().cuGraphDestroy(static_cast<CUgraph>(graph));  // an error here leaves nothing to recover
}

void CudaDevice::destroy_graph_exec(void* exec) {
  if (exec) driver().cuGraphExecDestroy(static_cast<CUgraphExec>(exec));
}

void CudaDevice::record_start() { VJIT_CU_CHECK(driver().cuEventRecord(impl_->start, impl_->streams[0])); }

double CudaDevice::record_stop_ms() {
  VJIT_CU_CHECK(driver().cuEventRecord(impl_->stop, impl_->streams[0]));
  VJIT_CU_CHECK(driver().cuEventSynchronize(impl_->stop));
  float ms = 0;
  VJIT_CU_CHECK(driver().cuEventElapsedTime(&ms, impl_->start, impl_->stop));
  return double(ms);
}

// Row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ: cuBLASLt gets
// B as its first operand and A as its second, with m and n swapped.
void CudaDevice::sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, DevicePtr a, int64_t lda,
                       DevicePtr b, int64_t ldb, float beta, DevicePtr c, int64_t ldc, bool tf32, int stream,
                       DevicePtr c_in, const GemmBatch& batch) {
  const BlasLt& lt = blas_lt();
  VJIT_USER_CHECK(lt.error.empty(), lt.error);
  if (!impl_->lt) {
    VJIT_LT_CHECK(lt.cublasLtCreate(&impl_->lt));
    for (CUdeviceptr& w : impl_->workspace) w = alloc(kWorkspace);
  }
  const std::array<int64_t, 13> key{int64_t(ta), int64_t(tb), m,          n,          k,
                                    lda,         ldb,         ldc,        int64_t(tf32), batch.count,
                                    batch.stride_a, batch.stride_b, batch.stride_c};
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto found_plan = impl_->gemm_plans.find(key);
  if (found_plan == impl_->gemm_plans.end()) {
    Impl::GemmPlan plan;
    VJIT_LT_CHECK(lt.cublasLtMatmulDescCreate(&plan.desc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                              CUDA_R_32F));
    cublasOperation_t op_first = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    lt.cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first);
    lt.cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second);
    VJIT_LT_CHECK(
        lt.cublasLtMatrixLayoutCreate(&plan.first, CUDA_R_32F, uint64_t(tb ? k : n), uint64_t(tb ? n : k), ldb));
    VJIT_LT_CHECK(
        lt.cublasLtMatrixLayoutCreate(&plan.second, CUDA_R_32F, uint64_t(ta ? m : k), uint64_t(ta ? k : m), lda));
    VJIT_LT_CHECK(lt.cublasLtMatrixLayoutCreate(&plan.out, CUDA_R_32F, uint64_t(n), uint64_t(m), ldc));
    if (batch.count > 1) set_batch(lt, plan.first, plan.second, plan.out, batch);
    cublasLtMatmulPreference_t preference = nullptr;
    VJIT_LT_CHECK(lt.cublasLtMatmulPreferenceCreate(&preference));
    size_t workspace = kWorkspace;
    lt.cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                            sizeof workspace);
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    cublasStatus_t status = lt.cublasLtMatmulAlgoGetHeuristic(impl_->lt, plan.desc, plan.first, plan.second, plan.out,
                                                              plan.out, preference, 1, &heuristic, &found);
    lt.cublasLtMatmulPreferenceDestroy(preference);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
      lt.cublasLtMatrixLayoutDestroy(plan.first);
      lt.cublasLtMatrixLayoutDestroy(plan.second);
      lt.cublasLtMatrixLayoutDestroy(plan.out);
      lt.cublasLtMatmulDescDestroy(plan.desc);
      VJIT_INTERNAL_CHECK(false, "cuBLASLt has no algorithm for sgemm m=" << m << " n=" << n << " k=" << k
                                                                          << ": status " << int(status));
    }
    plan.algo = heuristic.algo;
    found_plan = impl_->gemm_plans.emplace(key, plan).first;
  }
  const Impl::GemmPlan& plan = found_plan->second;
  if (impl_->structure) impl_->structure->gemm(key, stream);
  cublasStatus_t status =
      lt.cublasLtMatmul(impl_->lt, plan.desc, &alpha, reinterpret_cast<const void*>(b), plan.first,
                        reinterpret_cast<const void*>(a), plan.second, &beta,
                        reinterpret_cast<const void*>(c_in ? c_in : c), plan.out, reinterpret_cast<void*>(c), plan.out, &plan.algo, reinterpret_cast<void*>(impl_->workspace[stream]),
                        kWorkspace, impl_->streams[stream]);
  VJIT_INTERNAL_CHECK(status == CUBLAS_STATUS_SUCCESS,
                      "cuBLASLt sgemm m=" << m << " n=" << n << " k=" << k << " failed: status " << int(status));
}

#else  // built without the CUDA toolkit

const CudaProbe& probe_cuda() {
  static const CudaProbe probe{
      false, "vjit was built without the CUDA toolkit (configure with the toolkit installed and -DVJIT_CUDA=ON)", {}};
  return probe;
}

struct CudaDevice::Impl {};
CudaDevice& CudaDevice::get() {
  VJIT_USER_CHECK(false, "no usable CUDA device: " << probe_cuda().reason);
}
CudaDevice::CudaDevice() = default;
CudaDevice::~CudaDevice() = default;
DevicePtr CudaDevice::alloc(size_t) { return 0; }
DevicePtr CudaDevice::alloc_owned(size_t) { return 0; }
void CudaDevice::free_owned(DevicePtr) {}
void CudaDevice::release_all() {}
void CudaDevice::upload(DevicePtr, const void*, size_t, int) {}
void CudaDevice::download(void*, DevicePtr, size_t, int) {}
void CudaDevice::memset_zero(DevicePtr, size_t, int) {}
void CudaDevice::download_async(void*, DevicePtr, size_t, int) {}
void* CudaDevice::alloc_pinned(size_t) { return nullptr; }
void CudaDevice::free_pinned(void*) {}
bool CudaDevice::pin(void*, size_t) { return false; }
void CudaDevice::unpin(void*) {}
void* CudaDevice::load_module(const std::string&) { return nullptr; }
void CudaDevice::unload_module(void*) {}
void* CudaDevice::function(void*, const std::string&) { return nullptr; }
unsigned CudaDevice::grid_for(int64_t) { return 1; }
void CudaDevice::launch(void*, unsigned, unsigned, void**, int) {}
void CudaDevice::synchronize() {}
void CudaDevice::wait(int, int) {}
void* CudaDevice::create_event() { return nullptr; }
void CudaDevice::destroy_event(void*) {}
void CudaDevice::record(void*, int) {}
void CudaDevice::wait_event(int, void*) {}
bool CudaDevice::event_done(void*) { return true; }
void* CudaDevice::stream_handle(int) { return nullptr; }
void CudaDevice::sgemm(bool, bool, int64_t, int64_t, int64_t, float, DevicePtr, int64_t, DevicePtr, int64_t, float,
                       DevicePtr, int64_t, bool, int, DevicePtr, const GemmBatch&) {}
void CudaDevice::begin_capture(int, GraphStructure*) {}
void* CudaDevice::end_capture(int) { return nullptr; }
void* CudaDevice::instantiate_graph(void*) { return nullptr; }
bool CudaDevice::update_graph_exec(void*, void*) { return false; }
void CudaDevice::launch_graph(void*, int) {}
void CudaDevice::destroy_graph(void*) {}
void CudaDevice::destroy_graph_exec(void*) {}
void CudaDevice::record_start() {}
double CudaDevice::record_stop_ms() { return 0; }

#endif

}  // namespace vjit::runtime
