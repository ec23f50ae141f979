#pragma once
// The host shim: lets the host C++ compiler build the CUDA source vjit
// generates (codegen/cuda_source.h) unchanged, so its arithmetic and indexing
// are tested on machines with no GPU. Force-included (-include) before the
// generated source, compiled with -DVJIT_CUDA_HOST_SHIM. The grid is emulated
// by loops over blockIdx and threadIdx (vjit_shim_run), one thread at a time;
// atomicAdd is a plain add (atomicOr a plain or), exact under that sequential order.
#include <cmath>
#include <cstdint>
#include <cstring>

#define __global__
#define __device__
#define __restrict__ __restrict

struct vjit_dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline vjit_dim3 blockIdx, threadIdx, blockDim, gridDim;

template <typename Body>
void vjit_shim_run(unsigned grid, unsigned block, Body&& body) {
  gridDim.x = grid;
  blockDim.x = block;
  for (unsigned b = 0; b < grid; ++b)
    for (unsigned t = 0; t < block; ++t) {
      blockIdx.x = b;
      threadIdx.x = t;
      body();
    }
}

inline float __int_as_float(unsigned bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline unsigned __float_as_uint(float x) {
  unsigned bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}
inline unsigned atomicOr(unsigned* address, unsigned value) {
  unsigned old = *address;
  *address = old | value;
  return old;
}
inline float atomicAdd(float* address, float value) {
  float old = *address;
  *address = old + value;
  return old;
}
inline double atomicAdd(double* address, double value) {
  double old = *address;
  *address = old + value;
  return old;
}
// expf, logf, sqrtf and tanhf are <cmath>'s (the C library's, as the reference's std:: overloads for float).
