#include "runtime/nccl.h"

#include <dlfcn.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "vjit/error.h"

#ifdef VJIT_HAVE_NCCL
#include <nccl.h>
#endif

namespace vjit::runtime {

void check_gpu_per_rank(int local_rank, int gpus) {
  VJIT_USER_CHECK(local_rank < gpus, "NCCL needs a GPU of its own for every process: this process is number "
                                         << local_rank << " on its machine (local rank), which has " << gpus
                                         << " GPU(s); start at most " << gpus
                                         << " processes per machine, or set VJIT_DIST_NCCL=off to sum the "
                                            "gradients through host memory over MPI");
}

#ifdef VJIT_HAVE_NCCL

namespace {

#define VJIT_NCCL_FUNCTIONS(X)                                                                              \
  X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) X(ncclCommAbort) X(ncclAllReduce)             \
  X(ncclGroupStart) X(ncclGroupEnd) X(ncclGetErrorString) X(ncclCommGetAsyncError)

struct Nccl {
#define VJIT_X(fn) decltype(&::fn) fn = nullptr;
  VJIT_NCCL_FUNCTIONS(VJIT_X)
#undef VJIT_X
  std::string error;
};

const Nccl& nccl() {
  static const Nccl loaded = [] {
    Nccl n;
    void* handle = open_first_library({VJIT_NCCL_SONAME, VJIT_NCCL_LIBRARY}, "NCCL", n.error);
    if (!handle) return n;
#define VJIT_X(fn)                                                   \
  n.fn = reinterpret_cast<decltype(n.fn)>(::dlsym(handle, #fn));     \
  if (!n.fn && n.error.empty()) n.error = "NCCL lacks the symbol " #fn;
    VJIT_NCCL_FUNCTIONS(VJIT_X)
#undef VJIT_X
    return n;
  }();
  return loaded;
}

const Nccl& loaded_nccl() {
  const Nccl& n = nccl();
  VJIT_USER_CHECK(n.error.empty(), n.error << " (set VJIT_DIST_NCCL=off to sum GPU gradients through host memory)");
  return n;
}

std::string result_text(ncclResult_t result) {
  const char* text = nccl().ncclGetErrorString ? nccl().ncclGetErrorString(result) : nullptr;
  return std::to_string(int(result)) + " (" + (text ? text : "unknown error") + ")";
}

#define VJIT_NCCL_CHECK(call)                                                                              \
  do {                                                                                                     \
    ncclResult_t vjit_result_ = (call);                                                                    \
    VJIT_USER_CHECK(vjit_result_ == ncclSuccess, #call " failed: " << result_text(vjit_result_));         \
  } while (0)

}  // namespace

bool nccl_built() { return true; }

std::string nccl_unavailable_reason() { return nccl().error; }

NcclId nccl_unique_id() {
  const Nccl& n = loaded_nccl();
  ncclUniqueId id;
  VJIT_NCCL_CHECK(n.ncclGetUniqueId(&id));
  static_assert(sizeof id == kNcclIdBytes);
  NcclId bytes;
  std::memcpy(bytes.data(), &id, kNcclIdBytes);
  return bytes;
}

struct NcclCommunicator::Impl {
  CudaDevice& device;
  ncclComm_t comm = nullptr;
  int rank = 0, size = 1;
  double timeout_s = 300;
  void* done = nullptr;  // recorded after each group
  bool aborted = false;

  Impl(CudaDevice& d) : device(d) {}
};

NcclCommunicator::NcclCommunicator(CudaDevice& device, int rank, int size, const NcclId& id, double timeout_s)
    : impl_(std::make_unique<Impl>(device)) {
  const Nccl& n = loaded_nccl();
  impl_->rank = rank;
  impl_->size = size;
  impl_->timeout_s = timeout_s;
  ncclUniqueId nccl_id;
  std::memcpy(&nccl_id, id.data(), kNcclIdBytes);
  VJIT_NCCL_CHECK(n.ncclCommInitRank(&impl_->comm, size, nccl_id, rank));
  impl_->done = device.create_event();
}

NcclCommunicator::~NcclCommunicator() {
  const Nccl& n = nccl();
  if (impl_->comm) (impl_->aborted ? n.ncclCommAbort : n.ncclCommDestroy)(impl_->comm);
  if (impl_->done) impl_->device.destroy_event(impl_->done);
}

void NcclCommunicator::begin() {
  VJIT_USER_CHECK(!impl_->aborted, "NCCL: rank " << impl_->rank << ": a collective failed before; the "
                                                 "communicator cannot be used");
  VJIT_NCCL_CHECK(nccl().ncclGroupStart());
}

void NcclCommunicator::sum(DevicePtr data, int64_t floats) {
  void* buffer = reinterpret_cast<void*>(uintptr_t(data));
  VJIT_NCCL_CHECK(nccl().ncclAllReduce(buffer, buffer, size_t(floats), ncclFloat, ncclSum, impl_->comm,
                                       static_cast<cudaStream_t>(impl_->device.stream_handle(0))));
}

void NcclCommunicator::end() {
  Impl& m = *impl_;
  VJIT_NCCL_CHECK(nccl().ncclGroupEnd());
  m.device.record(m.done, 0);
  const auto start = std::chrono::steady_clock::now();
  auto fail = [&](const std::string& why) {
    nccl().ncclCommAbort(m.comm);
    m.comm = nullptr;
    m.aborted = true;
    throw DistributedError("vjit NCCL: rank " + std::to_string(m.rank) + " of " + std::to_string(m.size) +
                           ": ncclAllReduce " + why + "; the communicator was aborted");
  };
  while (!m.device.event_done(m.done)) {
    ncclResult_t async = ncclSuccess;
    nccl().ncclCommGetAsyncError(m.comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) fail("failed: " + result_text(async));
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > m.timeout_s)
      fail("did not complete within " + std::to_string(int(m.timeout_s)) +
           " s (VJIT_DIST_TIMEOUT): another rank died, hangs or left the job");
    std::this_thread::yield();
  }
}

#else  // without NCCL

bool nccl_built() { return false; }

std::string nccl_unavailable_reason() {
  return "vjit was built without NCCL (it needs the CUDA back end, MPI and nccl.h at build time)";
}

NcclId nccl_unique_id() { VJIT_USER_CHECK(false, nccl_unavailable_reason()); }

struct NcclCommunicator::Impl {};

NcclCommunicator::NcclCommunicator(CudaDevice&, int, int, const NcclId&, double) {
  VJIT_USER_CHECK(false, nccl_unavailable_reason());
}
NcclCommunicator::~NcclCommunicator() = default;
void NcclCommunicator::begin() {}
void NcclCommunicator::sum(DevicePtr, int64_t) {}
void NcclCommunicator::end() {}

#endif

}  // namespace vjit::runtime
