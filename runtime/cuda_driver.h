#pragma once
// The CUDA driver, loaded with dlopen("libcuda.so.1") at run time, so one
// binary runs on machines with and without a driver and says which; and
// cuBLASLt, loaded the same way (VJIT_CUBLASLT_SONAME) when the first GEMM is
// asked for. This header needs no CUDA header: handles are opaque here.
//
// CudaDevice is device 0's primary context with two streams (eager and core
// work) and a device arena: memory comes from cuMemAlloc in large blocks and is
// sub-allocated, never one cuMemAlloc per tensor.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace vjit::runtime {

using DevicePtr = uint64_t;  // CUdeviceptr
class GraphStructure;        // runtime/cuda_graph.h

// dlopen(RTLD_NOW | RTLD_LOCAL) of the first of `paths` that loads; nullptr
// when none does, with `error` = "<what> could not be loaded (dlopen("p"): why; ...)".
void* open_first_library(std::initializer_list<const char*> paths, const char* what, std::string& error);

struct CudaDeviceInfo {
  std::string name;            // "NVIDIA H100 80GB HBM3"
  int major = 0, minor = 0;    // compute capability
  int multiprocessors = 0;
  size_t memory_bytes = 0;
  int driver_version = 0;      // 13000 for 13.0
  int ordinal = 0;             // which of the machine's devices (cuda_device_for_local_rank)
  int devices = 0;             // how many the machine has
  int arch() const { return major * 10 + minor; }
};

// This process's rank among the processes of its job on this machine, from
// the launcher's environment (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID,
// SLURM_LOCALID); 0 when not launched as one of several.
int local_rank_from_env();
// The device a process uses: one GPU per process of a data-parallel job, the
// local rank's (wrapping around when there are more processes than devices;
// NCCL refuses two ranks on one device, see runtime/nccl.h). 0 alone.
int cuda_device_for_local_rank(int local_rank, int devices);

// Whether a CUDA device can be used here. `reason` says what is missing when
// not: the driver library, a device, or an initialisation failure (with the
// driver's error). Probed once per process.
struct CudaProbe {
  bool ok = false;
  std::string reason;
  CudaDeviceInfo info;
};
const CudaProbe& probe_cuda();

// A strided batch of products (cuBLASLt's CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT
// and STRIDED_BATCH_OFFSET): product i reads A at a + i·stride_a floats, B at
// b + i·stride_b, and writes C (and reads C_in) at c + i·stride_c.
struct GemmBatch {
  int64_t count = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};

class CudaDevice {
 public:
  // The primary context of device cuda_device_for_local_rank(local rank)
  // (device 0 when not one of several processes), made current on the calling thread. Throws
  // UserError with probe_cuda().reason when there is none.
  static CudaDevice& get();
  ~CudaDevice();

  const CudaDeviceInfo& info() const { return info_; }

  // Memory. alloc rounds up to 256 bytes and takes from the arena.
  DevicePtr alloc(size_t bytes);
  void release_all();  // every arena block is reused from its start (per-batch memory)
  void upload(DevicePtr dst, const void* src, size_t bytes, int stream = 0);
  void download(void* dst, DevicePtr src, size_t bytes, int stream = 0);
  void memset_zero(DevicePtr dst, size_t bytes, int stream = 0);
  // Queued on `stream`; `dst` is valid after synchronize(). Asynchronous
  // only for pinned memory.
  void download_async(void* dst, DevicePtr src, size_t bytes, int stream = 0);
  // Memory of its own (cuMemAlloc), outside the arena, for what lives as long
  // as an executor; see DeviceBuffer.
  DevicePtr alloc_owned(size_t bytes);
  void free_owned(DevicePtr p);
  // Page-locked host memory (cuMemAllocHost): the staging of batch inputs.
  void* alloc_pinned(size_t bytes);
  void free_pinned(void* p);
  // Page-locks memory the caller owns (cuMemHostRegister), so copies from and
  // to it run at full speed; false when the driver refuses. unpin before it is freed.
  bool pin(void* p, size_t bytes);
  void unpin(void* p);

  // Modules and launches. `image` is a cubin or PTX (jit/nvrtc.h); a module
  // is unloaded once no queued work runs its kernels (see DeviceModule).
  void* load_module(const std::string& image);
  void unload_module(void* module);
  void* function(void* module, const std::string& name);
  void launch(void* function, unsigned grid, unsigned block, void** params, int stream = 0);
  // A grid for a grid-stride loop over `elements` with 256 threads a block.
  static unsigned grid_for(int64_t elements);
  void synchronize();
  // Stream `waiter` waits for the work queued on `signaller` so far.
  void wait(int waiter, int signaller);
  // Events of the caller's own (no timing), destroyed by it: record() marks
  // the work queued on `stream` so far; wait_event() makes `stream` wait for
  // the work the event's last record() marked.
  void* create_event();
  void destroy_event(void* event);
  void record(void* event, int stream);
  void wait_event(int stream, void* event);
  // Whether the work the event's last record() marked has finished (cuEventQuery), without blocking.
  bool event_done(void* event);
  // The CUstream behind `stream`, for libraries that queue work on it (NCCL).
  void* stream_handle(int stream);

  // C = alpha·op(A)·op(B) + beta·C, row-major, FP32 (TF32 tensor cores when
  // `tf32`), on `stream`, through cuBLASLt (a workspace per stream). With
  // `c_in` (0: C), the beta term reads that matrix, laid out as C, instead:
  // C = alpha·op(A)·op(B) + beta·C_in. With `batch`, its count of products in
  // one call.
  void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, DevicePtr a, int64_t lda, DevicePtr b,
             int64_t ldb, float beta, DevicePtr c, int64_t ldc, bool tf32 = false, int stream = 0, DevicePtr c_in = 0,
             const GemmBatch& batch = {});

  // CUDA graphs (runtime/cuda_graph.h). Between begin_capture and
  // end_capture the work queued on `stream` is recorded into a graph, not
  // run (relaxed capture: memory may be allocated meanwhile), and each call
  // queued is described to `structure`; synchronize() is a bug then.
  // end_capture returns the graph (a CUgraph). update_graph_exec is false where the driver refuses to
  // update `exec` from `graph` (another structure).
  void begin_capture(int stream, GraphStructure* structure);
  void* end_capture(int stream);
  void* instantiate_graph(void* graph);
  bool update_graph_exec(void* exec, void* graph);
  void launch_graph(void* exec, int stream);
  void destroy_graph(void* graph);
  void destroy_graph_exec(void* exec);

  // Milliseconds `body` takes on stream 0, measured with events.
  template <typename Body>
  double time_ms(Body&& body) {
    record_start();
    body();
    return record_stop_ms();
  }

 private:
  CudaDevice();
  void record_start();
  double record_stop_ms();

  struct Impl;
  std::unique_ptr<Impl> impl_;
  CudaDeviceInfo info_;
};

// Device memory owned by one object (an executor's parameters, gradients,
// optimizer slots, per-pass arenas), freed with it: engines made and dropped
// in one process give their memory back. Movable, not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(CudaDevice& device, size_t bytes) : device_(&device), ptr_(device.alloc_owned(bytes)) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept : device_(other.device_), ptr_(other.ptr_) { other.ptr_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      device_ = other.device_;
      ptr_ = other.ptr_;
      other.ptr_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }
  DevicePtr get() const { return ptr_; }

 private:
  void release() {
    if (ptr_) device_->free_owned(ptr_);
    ptr_ = 0;
  }
  CudaDevice* device_ = nullptr;
  DevicePtr ptr_ = 0;
};

// A module loaded for one object (an executor's kernels), unloaded with it:
// engines made and dropped in one process give their code's memory back.
// Movable, not copyable.
class DeviceModule {
 public:
  DeviceModule() = default;
  DeviceModule(CudaDevice& device, const std::string& image) : device_(&device), module_(device.load_module(image)) {}
  DeviceModule(DeviceModule&& other) noexcept : device_(other.device_), module_(other.module_) {
    other.module_ = nullptr;
  }
  DeviceModule& operator=(DeviceModule&& other) noexcept {
    if (this != &other) {
      release();
      device_ = other.device_;
      module_ = other.module_;
      other.module_ = nullptr;
    }
    return *this;
  }
  DeviceModule(const DeviceModule&) = delete;
  DeviceModule& operator=(const DeviceModule&) = delete;
  ~DeviceModule() { release(); }
  void* get() const { return module_; }

 private:
  void release() {
    if (module_) device_->unload_module(module_);
    module_ = nullptr;
  }
  CudaDevice* device_ = nullptr;
  void* module_ = nullptr;
};

}  // namespace vjit::runtime
