#pragma once
// The driver double: libcuda.so.1 and libcublasLt.so.N built from
// tests/cuda_double/, which answer the entry points vjit resolves with success,
// report one fake device and record every call, so the CUDA device's host code
// runs the whole engine on a machine with no GPU (tests/test_cuda_double.cpp).
//
// Nothing runs on a device: a launch is recorded, not executed. Memory is host
// memory (cuMemAlloc callocs, so memory never written reads as zeros), and
// copies and memsets really move bytes, checked against the live allocations.
// Stream capture is modelled: work queued on a captured stream goes into the
// graph (recorded, marked captured) and moves bytes only when an executable
// graph made from it is launched; a synchronisation or a copy from pageable
// host memory while capturing is refused, as by the driver; an executable
// graph's update is refused where the structure differs (node count and kinds,
// kernel functions, cuBLASLt shapes) or a copy's or fill's device memory is
// another allocation.
// Handles are checked too (a destroyed event, a stream never created, a
// function of no loaded module): a bad one is the driver's error, as on a GPU,
// and is recorded with its status.
//
// With VJIT_DOUBLE_SUMMARY=path set, the double appends at exit one JSON line
// to that file counting the host's launches (perf/graph_launches.sh).
//
// The log is reached through the C functions below, looked up with dlsym on
// the loaded libcuda.so.1 (dlopen with RTLD_NOLOAD), so the library stays a
// drop-in for the real one. This header is C, shared by the doubles and the tests.
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { VJIT_DOUBLE_MAX_PARAMS = 64 };

// One call, as the double saw it. Handles and device pointers are integers.
typedef struct VjitDoubleCall {
  char name[40];      // "cuLaunchKernel", "cublasLtMatmul", ...
  int status;         // what the double returned (CUresult or cublasStatus_t; 0 = success)
  int injected;       // 1: a failure vjit_double_fail_next asked for
  int captured;       // 1: queued on a stream being captured: put into its graph, not run
  uint64_t args[6];   // the call's leading arguments, as integers (see each entry point)
  // cuLaunchKernel: the function's name (as given to cuModuleGetFunction), its
  // module, grid, block, shared memory and stream, and the argument block.
  char function[96];
  uint64_t module;
  unsigned grid[3], block[3], shared_bytes;
  uint64_t stream;
  int params_null;       // kernelParams was NULL
  int param_count;       // from the kernel's signature in the module image; -1 when unknown
  uint64_t params[VJIT_DOUBLE_MAX_PARAMS];  // each argument's bytes, zero-extended
  // cublasLtMatmul, column-major as cuBLASLt sees it: D = alpha·op(A)·op(B) + beta·C.
  int64_t m, n, k, lda, ldb, ldc;
  int trans_a, trans_b, compute_type;
  float alpha, beta;
  // A strided batch: its products (1: none) and each operand's stride in
  // floats (A, B, C, D as cuBLASLt sees them).
  int batch_count;
  int64_t batch_stride[4];
} VjitDoubleCall;

// The calls recorded since the last reset, oldest first; *count their number.
// The array stays valid until the next call into the double from any thread:
// copy what you need.
typedef const VjitDoubleCall* (*VjitDoubleCallsFn)(size_t* count);
const VjitDoubleCall* vjit_double_calls(size_t* count);
void vjit_double_reset(void);
// What is alive now: device allocations (cuMemAlloc not yet freed) and their
// bytes, pinned host allocations, host registrations, events, modules, graphs.
typedef struct VjitDoubleLive {
  size_t allocations, allocated_bytes, pinned, registered, events, streams, modules;
  size_t graphs, graph_execs;  // CUgraph and CUgraphExec handles not yet destroyed
} VjitDoubleLive;
VjitDoubleLive vjit_double_live(void);
// The bytes of a device allocation range [pointer, pointer + bytes) are in
// one live allocation.
int vjit_double_is_device_range(uint64_t pointer, size_t bytes);

// Makes the `nth` next call (1 = the next) of `name` fail as a driver would:
// cuMemAlloc and cuMemAllocHost with CUDA_ERROR_OUT_OF_MEMORY, cuLaunchKernel with
// CUDA_ERROR_LAUNCH_FAILED; the call does nothing else. nth 0 cancels.
void vjit_double_fail_next(const char* name, int nth);

// For the cuBLASLt double: appends a call to the driver double's log.
void vjit_double_record(const VjitDoubleCall* call);

#ifdef __cplusplus
}
#endif
