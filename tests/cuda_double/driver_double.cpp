// libcuda.so.1 of the driver double (driver_double.h): the driver entry points
// vjit resolves through cuGetProcAddress_v2, each recorded and answered as a
// driver with one idle GPU would, with nothing run.
#include "driver_double.h"

#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kernel_image.h"

namespace {

constexpr size_t kDeviceMemory = size_t(8) << 30;  // what the fake device reports and allows
constexpr int kMajor = 9, kMinor = 0, kMultiprocessors = 132;
constexpr char kDeviceName[] = "vjit driver double";

struct Function {
  uint64_t module = 0;
  std::string name;
  vjit_double::KernelSignature signature;
};

// A node of a captured graph: work queued on a captured stream, as its
// executable graph will run it.
struct Node {
  enum Kind { Kernel, CopyToDevice, CopyToHost, Fill, Matmul } kind = Kernel;
  uint64_t function = 0;           // Kernel
  int64_t shape[9] = {};           // Matmul: m, n, k, lda, ldb, ldc, trans_a, trans_b, compute type
  uint64_t dst = 0, src = 0, bytes = 0;
  unsigned char value = 0;         // Fill
  uint64_t allocation = 0;         // a copy's or fill's device memory: its allocation's base
};
using Nodes = std::vector<Node>;

// Everything the double knows, behind one lock. Never destroyed: a static's
// destructor could run before the last call of another library's exit code.
struct State {
  std::mutex mutex;
  std::vector<VjitDoubleCall> calls;
  std::map<uint64_t, size_t> allocations;  // device allocations: base -> bytes
  size_t allocated_bytes = 0;
  std::map<uint64_t, size_t> pinned;  // cuMemAllocHost: base -> bytes
  std::map<uint64_t, size_t> registered;  // cuMemHostRegister: base -> bytes
  std::set<uint64_t> events, streams, contexts;
  // Per event, when it was last recorded (host time): work is done at once,
  // so the time between two events is the host's, and a loop that times
  // itself with events (a GEMM peak) ends as it would on a device.
  std::map<uint64_t, std::chrono::steady_clock::time_point> recorded_at;
  std::map<uint64_t, std::string> modules;  // handle -> image
  std::map<uint64_t, Function> functions;
  uint64_t next_handle = 0x7e000000;  // handles: distinct, never dereferenced, of no kind's memory
  uint64_t new_handle() { return next_handle += 0x40; }
  // Stream capture: per captured stream, its graph so far and whether a
  // call refused during the capture invalidated it; graphs and executable
  // graphs by handle.
  std::map<uint64_t, Nodes> capturing;
  std::set<uint64_t> invalidated;
  std::map<uint64_t, Nodes> graphs, execs;
  std::string fail_name;  // vjit_double_fail_next: the call to fail, after fail_countdown - 1 more
  int fail_countdown = 0;
};

void write_summary();

State& state() {
  static State* s = [] {
    State* made = new State;
    if (std::getenv("VJIT_DOUBLE_SUMMARY")) std::atexit(write_summary);
    return made;
  }();
  return *s;
}

// VJIT_DOUBLE_SUMMARY=path: at exit, one JSON line appended there with what
// the host launched over the process (perf/graph_launches.sh): graph launches,
// kernels and products launched one by one, those captured into graphs, the
// graph calls, and the copies to the host with their bytes.
void write_summary() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  size_t graph_launches = 0, kernels = 0, products = 0, captured = 0, instantiations = 0, updates = 0, refused = 0;
  size_t downloads = 0, download_bytes = 0;
  for (const VjitDoubleCall& call : s.calls) {
    const std::string name = call.name;
    const bool work = name == "cuLaunchKernel" || name == "cublasLtMatmul";
    if (work && call.captured) ++captured;
    else if (name == "cuLaunchKernel") ++kernels;
    else if (name == "cublasLtMatmul") ++products;
    graph_launches += name == "cuGraphLaunch";
    instantiations += name == "cuGraphInstantiate";
    updates += name == "cuGraphExecUpdate" && call.status == CUDA_SUCCESS;
    refused += name == "cuGraphExecUpdate" && call.status != CUDA_SUCCESS;
    if (name == "cuMemcpyDtoHAsync") ++downloads, download_bytes += size_t(call.args[2]);
  }
  if (FILE* out = std::fopen(std::getenv("VJIT_DOUBLE_SUMMARY"), "a")) {
    std::fprintf(out,
                 "{\"graph_launches\":%zu,\"kernel_launches\":%zu,\"product_launches\":%zu,\"captured\":%zu,"
                 "\"instantiations\":%zu,\"updates\":%zu,\"refused_updates\":%zu,\"downloads\":%zu,"
                 "\"download_bytes\":%zu}\n",
                 graph_launches, kernels, products, captured, instantiations, updates, refused, downloads,
                 download_bytes);
    std::fclose(out);
  }
}

// A new handle, alive in `live` until destroyed.
uint64_t make_handle(State& s, std::set<uint64_t>& live) {
  const uint64_t h = s.new_handle();
  live.insert(h);
  return h;
}

VjitDoubleCall make_call(const char* name, std::initializer_list<uint64_t> args) {
  VjitDoubleCall call{};
  std::strncpy(call.name, name, sizeof call.name - 1);
  size_t i = 0;
  for (uint64_t a : args)
    if (i < std::size(call.args)) call.args[i++] = a;
  return call;
}

// Appends the call with its status; the caller holds the lock.
CUresult record(State& s, VjitDoubleCall call, CUresult status) {
  call.status = int(status);
  s.calls.push_back(call);
  return status;
}

CUresult record(State& s, const char* name, std::initializer_list<uint64_t> args, CUresult status) {
  return record(s, make_call(name, args), status);
}

uint64_t as_int(const void* p) { return uint64_t(reinterpret_cast<uintptr_t>(p)); }

// Whether this call of `name` is the one vjit_double_fail_next asked to fail.
bool fails_now(State& s, const char* name) {
  if (s.fail_countdown <= 0 || s.fail_name != name) return false;
  return --s.fail_countdown == 0;
}

CUresult record_injected(State& s, const char* name, CUresult status) {
  VjitDoubleCall call = make_call(name, {});
  call.injected = 1;
  return record(s, call, status);
}

// Whether [pointer, pointer + bytes) lies in one live device allocation.
bool in_allocation(const State& s, uint64_t pointer, size_t bytes) {
  auto after = s.allocations.upper_bound(pointer);
  if (after == s.allocations.begin()) return false;
  const auto& [base, size] = *std::prev(after);
  return pointer >= base && pointer + bytes <= base + size;
}

// The base of the live allocation holding `pointer`; 0 when none does.
uint64_t allocation_of(const State& s, uint64_t pointer) {
  auto after = s.allocations.upper_bound(pointer);
  if (after == s.allocations.begin()) return 0;
  const auto& [base, size] = *std::prev(after);
  return pointer < base + size ? base : 0;
}

// Whether [pointer, pointer + bytes) is page-locked host memory (allocated
// pinned or registered).
bool is_pinned(const State& s, const void* pointer, size_t bytes) {
  const uint64_t p = uint64_t(reinterpret_cast<uintptr_t>(pointer));
  for (const std::map<uint64_t, size_t>* ranges : {&s.pinned, &s.registered}) {
    auto after = ranges->upper_bound(p);
    if (after == ranges->begin()) continue;
    const auto& [base, size] = *std::prev(after);
    if (p + bytes <= base + size) return true;
  }
  return false;
}

// The graph being captured from `stream`; null when it is not captured.
Nodes* captured_into(State& s, CUstream stream) {
  auto found = s.capturing.find(uint64_t(reinterpret_cast<uintptr_t>(stream)));
  return found == s.capturing.end() ? nullptr : &found->second;
}

// A synchronisation while any stream is captured: refused, and the capture
// invalidated, as by the driver.
bool refused_while_capturing(State& s) {
  if (s.capturing.empty()) return false;
  for (const auto& [stream, nodes] : s.capturing) s.invalidated.insert(stream);
  return true;
}

// The default stream (0) and the two special ones are always there.
bool is_stream(const State& s, CUstream stream) {
  const uint64_t h = as_int(stream);
  return h == 0 || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD || s.streams.count(h) > 0;
}

using Lock = std::lock_guard<std::mutex>;

}  // namespace

extern "C" {

// --- the log (driver_double.h) ---

const VjitDoubleCall* vjit_double_calls(size_t* count) {
  State& s = state();
  Lock lock(s.mutex);
  *count = s.calls.size();
  return s.calls.data();
}

void vjit_double_reset(void) {
  State& s = state();
  Lock lock(s.mutex);
  s.calls.clear();
}

VjitDoubleLive vjit_double_live(void) {
  State& s = state();
  Lock lock(s.mutex);
  return {s.allocations.size(), s.allocated_bytes, s.pinned.size(), s.registered.size(), s.events.size(),
          s.streams.size(),     s.modules.size(),   s.graphs.size(),  s.execs.size()};
}

int vjit_double_is_device_range(uint64_t pointer, size_t bytes) {
  State& s = state();
  Lock lock(s.mutex);
  return in_allocation(s, pointer, bytes) ? 1 : 0;
}

void vjit_double_fail_next(const char* name, int nth) {
  State& s = state();
  Lock lock(s.mutex);
  s.fail_name = name;
  s.fail_countdown = nth;
}

void vjit_double_record(const VjitDoubleCall* call) {
  State& s = state();
  Lock lock(s.mutex);
  s.calls.push_back(*call);
  Nodes* graph = captured_into(s, reinterpret_cast<CUstream>(uintptr_t(call->stream)));
  if (graph == nullptr || std::strcmp(call->name, "cublasLtMatmul") != 0) return;
  s.calls.back().captured = 1;
  Node node;
  node.kind = Node::Matmul;
  const int64_t shape[9] = {call->m,       call->n,       call->k, call->lda, call->ldb, call->ldc,
                            call->trans_a, call->trans_b, call->compute_type};
  std::copy(std::begin(shape), std::end(shape), node.shape);
  graph->push_back(node);
}

// --- device and context ---

CUresult cuInit(unsigned flags) {
  State& s = state();
  Lock lock(s.mutex);
  return record(s, "cuInit", {flags}, CUDA_SUCCESS);
}

CUresult cuDriverGetVersion(int* version) {
  State& s = state();
  Lock lock(s.mutex);
  *version = CUDA_VERSION;
  return record(s, "cuDriverGetVersion", {}, CUDA_SUCCESS);
}

CUresult cuDeviceGetCount(int* count) {
  State& s = state();
  Lock lock(s.mutex);
  *count = 1;
  return record(s, "cuDeviceGetCount", {}, CUDA_SUCCESS);
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  State& s = state();
  Lock lock(s.mutex);
  if (ordinal != 0) return record(s, "cuDeviceGet", {uint64_t(ordinal)}, CUDA_ERROR_INVALID_DEVICE);
  *device = 0;
  return record(s, "cuDeviceGet", {uint64_t(ordinal)}, CUDA_SUCCESS);
}

CUresult cuDeviceGetName(char* name, int length, CUdevice device) {
  State& s = state();
  Lock lock(s.mutex);
  if (device != 0 || length <= 0) return record(s, "cuDeviceGetName", {uint64_t(device)}, CUDA_ERROR_INVALID_VALUE);
  std::strncpy(name, kDeviceName, size_t(length) - 1);
  name[length - 1] = '\0';
  return record(s, "cuDeviceGetName", {uint64_t(device)}, CUDA_SUCCESS);
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  State& s = state();
  Lock lock(s.mutex);
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = kMajor; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = kMinor; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = kMultiprocessors; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; break;
    default: *value = 0; break;
  }
  return record(s, "cuDeviceGetAttribute", {uint64_t(attribute), uint64_t(device)}, CUDA_SUCCESS);
}

CUresult cuDeviceTotalMem(size_t* bytes, CUdevice device) {
  State& s = state();
  Lock lock(s.mutex);
  *bytes = kDeviceMemory;
  return record(s, "cuDeviceTotalMem", {uint64_t(device)}, CUDA_SUCCESS);
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  State& s = state();
  Lock lock(s.mutex);
  if (s.contexts.empty()) s.contexts.insert(s.new_handle());
  *context = reinterpret_cast<CUcontext>(*s.contexts.begin());
  return record(s, "cuDevicePrimaryCtxRetain", {uint64_t(device)}, CUDA_SUCCESS);
}

CUresult cuCtxSetCurrent(CUcontext context) {
  State& s = state();
  Lock lock(s.mutex);
  const bool known = context == nullptr || s.contexts.count(as_int(context)) > 0;
  return record(s, "cuCtxSetCurrent", {as_int(context)}, known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT);
}

CUresult cuCtxSynchronize(void) {
  State& s = state();
  Lock lock(s.mutex);
  if (refused_while_capturing(s)) return record(s, "cuCtxSynchronize", {}, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  return record(s, "cuCtxSynchronize", {}, CUDA_SUCCESS);
}

// The driver's private tables, which NVRTC asks for when a libcuda.so.1 is
// loaded (when none answers, it compiles all the same): none here.
CUresult cuGetExportTable(const void** table, const CUuuid*) {
  State& s = state();
  Lock lock(s.mutex);
  *table = nullptr;
  return record(s, "cuGetExportTable", {}, CUDA_ERROR_NOT_SUPPORTED);
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  switch (error) {
    case CUDA_SUCCESS: *text = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *text = "invalid argument"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *text = "out of memory"; break;
    case CUDA_ERROR_INVALID_HANDLE: *text = "invalid resource handle"; break;
    case CUDA_ERROR_NOT_FOUND: *text = "named symbol not found"; break;
    case CUDA_ERROR_INVALID_IMAGE: *text = "device kernel image is invalid"; break;
    default: *text = "an error of the driver double"; break;
  }
  return CUDA_SUCCESS;
}

}  // extern "C"

// --- memory: host memory behind every device pointer ---

namespace {

// A copy queued on a captured stream: a node of its graph, moving its bytes
// when the graph runs. From or to pageable host memory it is refused (the
// driver cannot capture a copy it would have to stage at once) and the
// capture invalidated.
CUresult capture_copy(State& s, Nodes& graph, VjitDoubleCall call, Node::Kind kind, uint64_t dst, uint64_t src,
                      size_t bytes, bool host_pinned) {
  call.captured = 1;
  if (!host_pinned) {
    s.invalidated.insert(call.args[3]);
    return record(s, call, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  }
  Node node;
  node.kind = kind;
  node.dst = dst, node.src = src, node.bytes = bytes;
  node.allocation = allocation_of(s, kind == Node::CopyToDevice ? dst : src);
  graph.push_back(node);
  return record(s, call, CUDA_SUCCESS);
}

}  // namespace

extern "C" {

CUresult cuMemAlloc(CUdeviceptr* pointer, size_t bytes) {
  State& s = state();
  Lock lock(s.mutex);
  if (fails_now(s, "cuMemAlloc")) return record_injected(s, "cuMemAlloc", CUDA_ERROR_OUT_OF_MEMORY);
  if (bytes == 0) return record(s, "cuMemAlloc", {bytes}, CUDA_ERROR_INVALID_VALUE);
  void* memory = s.allocated_bytes + bytes > kDeviceMemory ? nullptr : std::calloc(1, bytes);
  if (memory == nullptr) return record(s, "cuMemAlloc", {bytes}, CUDA_ERROR_OUT_OF_MEMORY);
  *pointer = CUdeviceptr(as_int(memory));
  s.allocations[*pointer] = bytes;
  s.allocated_bytes += bytes;
  return record(s, "cuMemAlloc", {bytes, *pointer}, CUDA_SUCCESS);
}

CUresult cuMemFree(CUdeviceptr pointer) {
  State& s = state();
  Lock lock(s.mutex);
  auto found = s.allocations.find(pointer);
  if (found == s.allocations.end()) return record(s, "cuMemFree", {pointer}, CUDA_ERROR_INVALID_VALUE);
  s.allocated_bytes -= found->second;
  s.allocations.erase(found);
  std::free(reinterpret_cast<void*>(uintptr_t(pointer)));
  return record(s, "cuMemFree", {pointer}, CUDA_SUCCESS);
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  State& s = state();
  Lock lock(s.mutex);
  const bool valid = src != nullptr && in_allocation(s, dst, bytes) && is_stream(s, stream);
  VjitDoubleCall call = make_call("cuMemcpyHtoDAsync", {dst, as_int(src), bytes, as_int(stream)});
  if (!valid) return record(s, call, CUDA_ERROR_INVALID_VALUE);
  if (Nodes* graph = captured_into(s, stream))
    return capture_copy(s, *graph, call, Node::CopyToDevice, dst, as_int(src), bytes, is_pinned(s, src, bytes));
  std::memcpy(reinterpret_cast<void*>(uintptr_t(dst)), src, bytes);
  return record(s, call, CUDA_SUCCESS);
}

CUresult cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  State& s = state();
  Lock lock(s.mutex);
  const bool valid = dst != nullptr && in_allocation(s, src, bytes) && is_stream(s, stream);
  VjitDoubleCall call = make_call("cuMemcpyDtoHAsync", {as_int(dst), src, bytes, as_int(stream)});
  if (!valid) return record(s, call, CUDA_ERROR_INVALID_VALUE);
  if (Nodes* graph = captured_into(s, stream))
    return capture_copy(s, *graph, call, Node::CopyToHost, as_int(dst), src, bytes, is_pinned(s, dst, bytes));
  std::memcpy(dst, reinterpret_cast<const void*>(uintptr_t(src)), bytes);
  return record(s, call, CUDA_SUCCESS);
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t bytes, CUstream stream) {
  State& s = state();
  Lock lock(s.mutex);
  const bool valid = in_allocation(s, dst, bytes) && is_stream(s, stream);
  VjitDoubleCall call = make_call("cuMemsetD8Async", {dst, value, bytes, as_int(stream)});
  if (!valid) return record(s, call, CUDA_ERROR_INVALID_VALUE);
  if (Nodes* graph = captured_into(s, stream)) {
    Node node;
    node.kind = Node::Fill;
    node.dst = dst, node.bytes = bytes, node.value = value, node.allocation = allocation_of(s, dst);
    graph->push_back(node);
    call.captured = 1;
    return record(s, call, CUDA_SUCCESS);
  }
  std::memset(reinterpret_cast<void*>(uintptr_t(dst)), value, bytes);
  return record(s, call, CUDA_SUCCESS);
}

CUresult cuMemAllocHost(void** pointer, size_t bytes) {
  State& s = state();
  Lock lock(s.mutex);
  if (fails_now(s, "cuMemAllocHost")) return record_injected(s, "cuMemAllocHost", CUDA_ERROR_OUT_OF_MEMORY);
  *pointer = bytes == 0 ? nullptr : std::calloc(1, bytes);
  if (*pointer == nullptr) return record(s, "cuMemAllocHost", {bytes}, CUDA_ERROR_OUT_OF_MEMORY);
  s.pinned[as_int(*pointer)] = bytes;
  return record(s, "cuMemAllocHost", {bytes, as_int(*pointer)}, CUDA_SUCCESS);
}

CUresult cuMemFreeHost(void* pointer) {
  State& s = state();
  Lock lock(s.mutex);
  const auto address = as_int(pointer);  // recorded after the free, so taken before it
  if (s.pinned.erase(address) == 0) return record(s, "cuMemFreeHost", {address}, CUDA_ERROR_INVALID_VALUE);
  std::free(pointer);
  return record(s, "cuMemFreeHost", {address}, CUDA_SUCCESS);
}

// Registering the same memory twice, or overlapping memory, is the driver's
// CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED.
CUresult cuMemHostRegister(void* pointer, size_t bytes, unsigned flags) {
  State& s = state();
  Lock lock(s.mutex);
  const uint64_t base = as_int(pointer);
  auto after = s.registered.upper_bound(base + bytes - 1);
  const bool overlaps = after != s.registered.begin() && std::prev(after)->first + std::prev(after)->second > base;
  if (pointer == nullptr || bytes == 0 || overlaps)
    return record(s, "cuMemHostRegister", {base, bytes, flags},
                  overlaps ? CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED : CUDA_ERROR_INVALID_VALUE);
  s.registered[base] = bytes;
  return record(s, "cuMemHostRegister", {base, bytes, flags}, CUDA_SUCCESS);
}

CUresult cuMemHostUnregister(void* pointer) {
  State& s = state();
  Lock lock(s.mutex);
  const bool known = s.registered.erase(as_int(pointer)) > 0;
  return record(s, "cuMemHostUnregister", {as_int(pointer)},
                known ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
}

// --- streams and events: queued work is done at once, so everything is ready ---

CUresult cuStreamCreate(CUstream* stream, unsigned flags) {
  State& s = state();
  Lock lock(s.mutex);
  const uint64_t h = make_handle(s, s.streams);
  *stream = reinterpret_cast<CUstream>(h);
  return record(s, "cuStreamCreate", {flags, h}, CUDA_SUCCESS);
}

CUresult cuStreamSynchronize(CUstream stream) {
  State& s = state();
  Lock lock(s.mutex);
  if (refused_while_capturing(s))
    return record(s, "cuStreamSynchronize", {as_int(stream)}, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  return record(s, "cuStreamSynchronize", {as_int(stream)},
                is_stream(s, stream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned flags) {
  State& s = state();
  Lock lock(s.mutex);
  const bool valid = is_stream(s, stream) && s.events.count(as_int(event)) > 0;
  return record(s, "cuStreamWaitEvent", {as_int(stream), as_int(event), flags},
                valid ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

CUresult cuEventCreate(CUevent* event, unsigned flags) {
  State& s = state();
  Lock lock(s.mutex);
  const uint64_t h = make_handle(s, s.events);
  *event = reinterpret_cast<CUevent>(h);
  return record(s, "cuEventCreate", {flags, h}, CUDA_SUCCESS);
}

CUresult cuEventDestroy(CUevent event) {
  State& s = state();
  Lock lock(s.mutex);
  const bool known = s.events.erase(as_int(event)) > 0;
  s.recorded_at.erase(as_int(event));
  return record(s, "cuEventDestroy", {as_int(event)}, known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

CUresult cuEventRecord(CUevent event, CUstream stream) {
  State& s = state();
  Lock lock(s.mutex);
  const bool valid = is_stream(s, stream) && s.events.count(as_int(event)) > 0;
  if (valid) s.recorded_at[as_int(event)] = std::chrono::steady_clock::now();
  return record(s, "cuEventRecord", {as_int(event), as_int(stream)},
                valid ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

CUresult cuEventSynchronize(CUevent event) {
  State& s = state();
  Lock lock(s.mutex);
  if (refused_while_capturing(s))
    return record(s, "cuEventSynchronize", {as_int(event)}, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  return record(s, "cuEventSynchronize", {as_int(event)},
                s.events.count(as_int(event)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

CUresult cuEventQuery(CUevent event) {
  State& s = state();
  Lock lock(s.mutex);
  return record(s, "cuEventQuery", {as_int(event)},
                s.events.count(as_int(event)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent stop) {
  State& s = state();
  Lock lock(s.mutex);
  const bool valid = s.events.count(as_int(start)) && s.events.count(as_int(stop));
  if (valid) *ms = std::chrono::duration<float, std::milli>(s.recorded_at[as_int(stop)] - s.recorded_at[as_int(start)]).count();
  return record(s, "cuEventElapsedTime", {as_int(start), as_int(stop)},
                valid ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

}  // extern "C"

// --- modules and launches ---

namespace {

// The limits of a compute capability 9.0 device.
bool launch_shape_valid(const VjitDoubleCall& call) {
  const unsigned* g = call.grid;
  const unsigned* b = call.block;
  const bool grid_ok = g[0] >= 1 && g[0] <= 0x7fffffffu && g[1] >= 1 && g[1] <= 65535 && g[2] >= 1 && g[2] <= 65535;
  const bool block_ok = b[0] >= 1 && b[1] >= 1 && b[2] >= 1 && b[2] <= 64 && uint64_t(b[0]) * b[1] * b[2] <= 1024;
  return grid_ok && block_ok && call.shared_bytes <= 48 * 1024;
}

// Reads the argument block as the kernel's signature lays it out: one pointer
// per parameter, each to that many bytes (under ASan, a block shorter than
// the signature is a read past its end).
void read_params(const Function& fn, void** params, VjitDoubleCall& call) {
  call.params_null = params == nullptr ? 1 : 0;
  call.param_count = fn.signature.params_known ? int(fn.signature.param_bytes.size()) : -1;
  if (params == nullptr || !fn.signature.params_known) return;
  for (size_t i = 0; i < fn.signature.param_bytes.size() && i < VJIT_DOUBLE_MAX_PARAMS; ++i)
    std::memcpy(&call.params[i], params[i], std::min<size_t>(size_t(fn.signature.param_bytes[i]), sizeof(uint64_t)));
}

}  // namespace

extern "C" {

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  State& s = state();
  Lock lock(s.mutex);
  std::optional<std::string> copy = vjit_double::copy_module_image(image);
  if (!copy) return record(s, "cuModuleLoadData", {as_int(image)}, CUDA_ERROR_INVALID_IMAGE);
  const uint64_t h = s.new_handle();
  s.modules[h] = std::move(*copy);
  *module = reinterpret_cast<CUmodule>(h);
  return record(s, "cuModuleLoadData", {as_int(image), h, s.modules[h].size()}, CUDA_SUCCESS);
}

CUresult cuModuleUnload(CUmodule module) {
  State& s = state();
  Lock lock(s.mutex);
  const uint64_t h = as_int(module);
  if (s.modules.erase(h) == 0) return record(s, "cuModuleUnload", {h}, CUDA_ERROR_INVALID_HANDLE);
  std::erase_if(s.functions, [&](const auto& entry) { return entry.second.module == h; });
  return record(s, "cuModuleUnload", {h}, CUDA_SUCCESS);
}

// A function of the module by name: the same handle each time it is asked for.
CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  State& s = state();
  Lock lock(s.mutex);
  VjitDoubleCall call = make_call("cuModuleGetFunction", {as_int(module)});
  std::strncpy(call.function, name, sizeof call.function - 1);
  auto image = s.modules.find(as_int(module));
  if (image == s.modules.end()) return record(s, call, CUDA_ERROR_INVALID_HANDLE);
  std::optional<vjit_double::KernelSignature> signature = vjit_double::find_kernel(image->second, name);
  if (!signature) return record(s, call, CUDA_ERROR_NOT_FOUND);
  for (const auto& [h, fn] : s.functions)
    if (fn.module == image->first && fn.name == name) {
      *function = reinterpret_cast<CUfunction>(h);
      call.args[1] = h;
      return record(s, call, CUDA_SUCCESS);
    }
  const uint64_t h = s.new_handle();
  s.functions[h] = {image->first, name, *signature};
  *function = reinterpret_cast<CUfunction>(h);
  call.args[1] = h;
  return record(s, call, CUDA_SUCCESS);
}

CUresult cuLaunchKernel(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                        unsigned block_y, unsigned block_z, unsigned shared_bytes, CUstream stream, void** params,
                        void** extra) {
  State& s = state();
  Lock lock(s.mutex);
  if (fails_now(s, "cuLaunchKernel")) return record_injected(s, "cuLaunchKernel", CUDA_ERROR_LAUNCH_FAILED);
  VjitDoubleCall call = make_call("cuLaunchKernel", {as_int(f), as_int(extra)});
  call.grid[0] = grid_x, call.grid[1] = grid_y, call.grid[2] = grid_z;
  call.block[0] = block_x, call.block[1] = block_y, call.block[2] = block_z;
  call.shared_bytes = shared_bytes;
  call.stream = as_int(stream);
  call.param_count = -1;
  auto fn = s.functions.find(as_int(f));
  if (fn == s.functions.end()) return record(s, call, CUDA_ERROR_INVALID_HANDLE);
  std::strncpy(call.function, fn->second.name.c_str(), sizeof call.function - 1);
  call.module = fn->second.module;
  if (!is_stream(s, stream)) return record(s, call, CUDA_ERROR_INVALID_HANDLE);
  read_params(fn->second, params, call);
  const bool valid = launch_shape_valid(call) && (params != nullptr) != (extra != nullptr);
  if (Nodes* graph = captured_into(s, stream); graph && valid) {
    call.captured = 1;
    Node node;
    node.kind = Node::Kernel;
    node.function = as_int(f);
    graph->push_back(node);
  }
  return record(s, call, valid ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

}  // extern "C"

// --- graphs: captured from a stream, instantiated, updated, launched ---

namespace {

// Why the driver would refuse to update an executable graph made from `from`
// to `to`; CU_GRAPH_EXEC_UPDATE_SUCCESS when it would not. A kernel's
// function may change (CUDA 11.2 on); a cuBLASLt product of another shape may
// run other kernels, so it is another structure here.
CUgraphExecUpdateResult update_refusal(const Nodes& from, const Nodes& to) {
  if (from.size() != to.size()) return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
  for (size_t i = 0; i < from.size(); ++i) {
    const Node &a = from[i], &b = to[i];
    if (a.kind != b.kind) return CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
    if (a.kind == Node::Matmul && !std::equal(std::begin(a.shape), std::end(a.shape), b.shape))
      return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    if (a.kind != Node::Kernel && a.kind != Node::Matmul && a.allocation != b.allocation)
      return CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED;
  }
  return CU_GRAPH_EXEC_UPDATE_SUCCESS;
}

// Runs what moves bytes: copies and fills, in order (kernels run nowhere).
bool run_nodes(State& s, const Nodes& nodes) {
  for (const Node& n : nodes) {
    const uint64_t device = n.kind == Node::CopyToHost ? n.src : n.dst;
    if (n.kind != Node::Kernel && n.kind != Node::Matmul && !in_allocation(s, device, n.bytes)) return false;
    if (n.kind == Node::CopyToDevice) std::memcpy(reinterpret_cast<void*>(uintptr_t(n.dst)), reinterpret_cast<const void*>(uintptr_t(n.src)), n.bytes);
    if (n.kind == Node::CopyToHost) std::memcpy(reinterpret_cast<void*>(uintptr_t(n.dst)), reinterpret_cast<const void*>(uintptr_t(n.src)), n.bytes);
    if (n.kind == Node::Fill) std::memset(reinterpret_cast<void*>(uintptr_t(n.dst)), n.value, n.bytes);
  }
  return true;
}

}  // namespace

extern "C" {

CUresult cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode mode) {
  State& s = state();
  Lock lock(s.mutex);
  const uint64_t h = as_int(stream);
  // The legacy default stream cannot be captured.
  const bool valid = h != 0 && stream != CU_STREAM_LEGACY && is_stream(s, stream);
  if (!valid) return record(s, "cuStreamBeginCapture", {h, uint64_t(mode)}, CUDA_ERROR_INVALID_HANDLE);
  if (s.capturing.count(h)) return record(s, "cuStreamBeginCapture", {h, uint64_t(mode)}, CUDA_ERROR_ILLEGAL_STATE);
  s.capturing[h];
  return record(s, "cuStreamBeginCapture", {h, uint64_t(mode)}, CUDA_SUCCESS);
}

CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  State& s = state();
  Lock lock(s.mutex);
  const uint64_t h = as_int(stream);
  auto found = s.capturing.find(h);
  if (found == s.capturing.end()) return record(s, "cuStreamEndCapture", {h}, CUDA_ERROR_ILLEGAL_STATE);
  Nodes nodes = std::move(found->second);
  s.capturing.erase(found);
  if (s.invalidated.erase(h)) {
    *graph = nullptr;
    return record(s, "cuStreamEndCapture", {h}, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  }
  const uint64_t g = s.new_handle();
  const size_t count = nodes.size();
  s.graphs[g] = std::move(nodes);
  *graph = reinterpret_cast<CUgraph>(g);
  return record(s, "cuStreamEndCapture", {h, g, count}, CUDA_SUCCESS);
}

CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  State& s = state();
  Lock lock(s.mutex);
  auto found = s.graphs.find(as_int(graph));
  if (found == s.graphs.end()) return record(s, "cuGraphInstantiate", {as_int(graph), flags}, CUDA_ERROR_INVALID_VALUE);
  const uint64_t e = s.new_handle();
  s.execs[e] = found->second;
  *exec = reinterpret_cast<CUgraphExec>(e);
  return record(s, "cuGraphInstantiate", {as_int(graph), flags, e}, CUDA_SUCCESS);
}

CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  State& s = state();
  Lock lock(s.mutex);
  auto e = s.execs.find(as_int(exec));
  auto g = s.graphs.find(as_int(graph));
  if (e == s.execs.end() || g == s.graphs.end() || info == nullptr)
    return record(s, "cuGraphExecUpdate", {as_int(exec), as_int(graph)}, CUDA_ERROR_INVALID_VALUE);
  *info = {};
  info->result = update_refusal(e->second, g->second);
  if (info->result != CU_GRAPH_EXEC_UPDATE_SUCCESS)
    return record(s, "cuGraphExecUpdate", {as_int(exec), as_int(graph), uint64_t(info->result)},
                  CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  e->second = g->second;
  return record(s, "cuGraphExecUpdate", {as_int(exec), as_int(graph), 0}, CUDA_SUCCESS);
}

// args: the executable graph, the stream, its nodes, its kernels and products.
CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  State& s = state();
  Lock lock(s.mutex);
  auto e = s.execs.find(as_int(exec));
  if (e == s.execs.end() || !is_stream(s, stream) || captured_into(s, stream))
    return record(s, "cuGraphLaunch", {as_int(exec), as_int(stream)}, CUDA_ERROR_INVALID_VALUE);
  const uint64_t work = uint64_t(std::count_if(e->second.begin(), e->second.end(), [](const Node& n) {
    return n.kind == Node::Kernel || n.kind == Node::Matmul;
  }));
  const bool ran = run_nodes(s, e->second);
  return record(s, "cuGraphLaunch", {as_int(exec), as_int(stream), e->second.size(), work},
                ran ? CUDA_SUCCESS : CUDA_ERROR_ILLEGAL_ADDRESS);
}

CUresult cuGraphDestroy(CUgraph graph) {
  State& s = state();
  Lock lock(s.mutex);
  const bool known = s.graphs.erase(as_int(graph)) > 0;
  return record(s, "cuGraphDestroy", {as_int(graph)}, known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

CUresult cuGraphExecDestroy(CUgraphExec exec) {
  State& s = state();
  Lock lock(s.mutex);
  const bool known = s.execs.erase(as_int(exec)) > 0;
  return record(s, "cuGraphExecDestroy", {as_int(exec)}, known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

}  // extern "C"

// --- cuGetProcAddress: how vjit finds every entry point above ---

namespace {

struct Entry {
  const char* name;
  void* function;
};

// The name as asked for (cuMemAlloc), the function of the ABI of this
// header's CUDA version (cuda.h makes cuMemAlloc cuMemAlloc_v2).
#define VJIT_DOUBLE_ENTRY(fn) Entry{#fn, reinterpret_cast<void*>(&fn)}
const Entry kEntries[] = {
    VJIT_DOUBLE_ENTRY(cuInit), VJIT_DOUBLE_ENTRY(cuDriverGetVersion), VJIT_DOUBLE_ENTRY(cuDeviceGetCount),
    VJIT_DOUBLE_ENTRY(cuDeviceGet), VJIT_DOUBLE_ENTRY(cuDeviceGetName), VJIT_DOUBLE_ENTRY(cuDeviceGetAttribute),
    VJIT_DOUBLE_ENTRY(cuDeviceTotalMem), VJIT_DOUBLE_ENTRY(cuDevicePrimaryCtxRetain),
    VJIT_DOUBLE_ENTRY(cuCtxSetCurrent), VJIT_DOUBLE_ENTRY(cuCtxSynchronize), VJIT_DOUBLE_ENTRY(cuGetErrorString),
    VJIT_DOUBLE_ENTRY(cuMemAlloc), VJIT_DOUBLE_ENTRY(cuMemFree), VJIT_DOUBLE_ENTRY(cuMemcpyHtoDAsync),
    VJIT_DOUBLE_ENTRY(cuMemcpyDtoHAsync), VJIT_DOUBLE_ENTRY(cuMemsetD8Async), VJIT_DOUBLE_ENTRY(cuMemAllocHost),
    VJIT_DOUBLE_ENTRY(cuMemFreeHost), VJIT_DOUBLE_ENTRY(cuMemHostRegister), VJIT_DOUBLE_ENTRY(cuMemHostUnregister),
    VJIT_DOUBLE_ENTRY(cuStreamCreate), VJIT_DOUBLE_ENTRY(cuStreamSynchronize), VJIT_DOUBLE_ENTRY(cuStreamWaitEvent),
    VJIT_DOUBLE_ENTRY(cuEventCreate), VJIT_DOUBLE_ENTRY(cuEventDestroy), VJIT_DOUBLE_ENTRY(cuEventRecord),
    VJIT_DOUBLE_ENTRY(cuEventSynchronize), VJIT_DOUBLE_ENTRY(cuEventQuery), VJIT_DOUBLE_ENTRY(cuEventElapsedTime),
    VJIT_DOUBLE_ENTRY(cuModuleLoadData), VJIT_DOUBLE_ENTRY(cuModuleUnload), VJIT_DOUBLE_ENTRY(cuModuleGetFunction),
    VJIT_DOUBLE_ENTRY(cuLaunchKernel), VJIT_DOUBLE_ENTRY(cuStreamBeginCapture), VJIT_DOUBLE_ENTRY(cuStreamEndCapture),
    VJIT_DOUBLE_ENTRY(cuGraphInstantiate), VJIT_DOUBLE_ENTRY(cuGraphExecUpdate), VJIT_DOUBLE_ENTRY(cuGraphLaunch),
    VJIT_DOUBLE_ENTRY(cuGraphDestroy), VJIT_DOUBLE_ENTRY(cuGraphExecDestroy),
};
#undef VJIT_DOUBLE_ENTRY

}  // namespace

extern "C" CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                                     CUdriverProcAddressQueryResult* status) {
  State& s = state();
  Lock lock(s.mutex);
  const auto* found = std::find_if(std::begin(kEntries), std::end(kEntries),
                                   [&](const Entry& e) { return std::strcmp(e.name, symbol) == 0; });
  const bool known = found != std::end(kEntries);
  *pfn = known ? found->function : nullptr;
  if (status) *status = known ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  VjitDoubleCall call = make_call("cuGetProcAddress", {uint64_t(cuda_version), flags});
  std::strncpy(call.function, symbol, sizeof call.function - 1);
  return record(s, call, known ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND);
}
