#pragma once
// CUDA C source for the GPU back end, generated as text: NVRTC compiles it on
// the machine that runs it (jit/nvrtc.h), and the host shim
// (tests/cuda_host_shim.h) compiles the same text with the host compiler so
// that the arithmetic and indexing are tested on machines with no GPU.
//
// A fused kernel computes exactly what run_reference_kernel computes
// (codegen/kernel_spec.h) for every row r < rows and element i < width, as a
// grid-stride loop over the rows × width elements (one thread per element;
// consecutive threads take consecutive elements of a row, so loads coalesce).
// Arithmetic is the same IEEE float operation as the reference: the source is
// compiled with --fmad=false and without --use_fast_math, so Add, Sub, Mul,
// Div, Sqrt, Neg, Relu, Step, Scale and AddScalar agree bit for bit; Exp, Log,
// Tanh and Sigmoid call CUDA's expf, logf and tanhf, whose maximum errors the
// CUDA Math API documents (expf 2 ulp, logf 1 ulp, tanhf 2 ulp). No fast-math
// intrinsic (__expf, __fdividef) is used: none is measured yet.
//
// Kernel parameters are passed one by one, in the order cuLaunchKernel's
// kernelParams lists them:
//   fused:  long long rows, then per input (const float* data, long long ld),
//           then per output (float* data, long long ld)
// Under VJIT_CUDA_HOST_SHIM the source also defines, per kernel,
//   extern "C" void <name>_host(void** params, unsigned grid, unsigned block)
// which unpacks kernelParams exactly as the driver does and runs the grid as
// loops over blockIdx and threadIdx.
#include <string>
#include <string_view>
#include <vector>

#include "codegen/kernel_spec.h"

namespace vjit::codegen {

struct CudaKernelSource {
  std::string name;    // the extern "C" entry point
  std::string source;  // the kernel, without the module prelude
};

// The kernel of one fused group. Throws InternalError on a malformed spec (an
// operand out of range or referring forward, an op that is not fusable, an
// output out of range), like the x86 generator.
CudaKernelSource cuda_fused_kernel(const KernelSpec& spec);

// The index-copy kernels every plan uses, one launch per task phase (never one
// per row). Offsets are in floats from `base`; rows lie at r·ld.
//   vjit_gather_rows(long long rows, long long width, const long long* src,
//                    const float* base, float* dst, long long ld)
//       dst[r·ld + i] = base[src[r] + i]                 (gather, pull, embedding)
//   vjit_scatter_add_rows(long long rows, long long width, const long long* dst,
//                         float* base, const float* src, long long ld)
//       base[dst[r] + i] += src[r·ld + i]   (atomic: two rows may share a destination;
//                                            gather gradients, embedding gradients)
//   vjit_gather_sum(long long rows, long long width, const int* begin, const unsigned long long* src,
//                   float* dst, long long ld, int stack)
//       a row table: source k is the row at address src[k], wherever it lies (a child's
//       scattered row, a child row of either pass's arena);
//       sources begin[r] .. begin[r+1]: stack = 0 sums them into dst row r (GatherSum, SumRows);
//       stack = 1 writes source k at dst[r·ld + k·width + i] (GatherAll; the caller zeroes
//       the rows past the last child)
//   vjit_fill_rows(long long rows, long long width, float value, float* dst, long long ld)
inline constexpr std::string_view kCudaGatherRows = "vjit_gather_rows";
inline constexpr std::string_view kCudaScatterAddRows = "vjit_scatter_add_rows";
inline constexpr std::string_view kCudaGatherSum = "vjit_gather_sum";
inline constexpr std::string_view kCudaFillRows = "vjit_fill_rows";
std::string cuda_index_kernels_source();

// The fixed kernels the CUDA executor runs for the steps that are not fused
// groups, each the device form of a CPU executor step (runtime/cpu_executor.cpp):
//   vjit_move_rows(rows, width, const unsigned long long* pairs, int mode)
//       per row r, dst = (float*)pairs[2r], src = (const float*)pairs[2r+1]:
//       mode 0 dst[i] = src[i], 1 atomicAdd(dst + i, src[i]), 2 dst[i] = 0
//   vjit_copy_rows(rows, width, src, sld, dst, dld)      (sld 0: one row to every row)
//   vjit_elementwise(op, rows, width, a, lda, na, b, ldb, nb, c, out, ld)
//       one unfused unary or binary op (int(ir::Op)); an operand of n elements
//       is read at i mod n (n = width, 1 for a scalar, a broadcast vector); b null for unary
//   vjit_dropout(rows, width, x, xld, out, ld, ids, seed, key, rate, scale, training)
//       ir::dropout_keeps bit for bit; ids = (sample, vertex) per row
//   vjit_broadcast(rows, width, src, sld, mod, dst, dld)  Broadcast (mod 0), BroadcastRows
//   vjit_sum_mod(rows, width, n, src, sld, dst, dld)       Sum (width 1), SumRows
//   vjit_sum_columns_into(rows, width, src, ld, dst)       dst[i] += Σ_r src[r·ld + i], pairwise
//   vjit_loss_sum(rows, x, ld, double* total)              *total += Σ_r x[r·ld]
//   vjit_outer(rows, m, n, a, lda, b, ldb, out, ld)        out_r = a_r b_rᵀ
//   <RowOp::cuda_kernel>(rows, in0, ld0, n0, [in1, ld1, n1,] out, ld, width)
//       each row op's (ir/row_op.h), made around the device function its
//       unit defines: out row r from the operands' rows r (nk floats each),
//       one thread per element (CudaRowForm::Element) or per row (Row)
//   vjit_batched_matmul(rows, m, n, k, a, lda, a_cols, ta, b, ldb, b_cols, tb, out, ld)
//   vjit_softmax_ce(rows, classes, x, xld, labels, up, uld, gradient, out, ld)
//   vjit_slice_cols, vjit_pad_cols, vjit_transpose, vjit_child_count, vjit_max_children,
//   vjit_max_children_grad (rows, width, block_rows, block_cols, start, x, xld, g, gld,
//                           const int* children, out, ld)
//       the ops of the children block, as ir/interpreter.cpp defines them, one thread per
//       element of out row r (width floats): x row r is a block_rows × block_cols block,
//       g MaxChildrenGrad's upstream gradient, children[r] the row's variadic children
//   vjit_sum_squares(rows, width, ptrs, double* sum)        *sum += Σ g² (g = ptrs[4r+1])
//   vjit_optimizer_update(rows, width, ptrs, kind, lr, weight_decay, momentum, beta1, beta2,
//                         1−beta1, 1−beta2, correction1, correction2, eps, decay, scale,
//                         preview, unsigned* non_finite)
//       runtime/optimizer.cpp's loops (kind 1 SGD, 2 SGD with momentum, 3 Adam) over
//       rows of (weights, gradient, slot 0, slot 1) = ptrs[4r..4r+3]; preview 1:
//       nothing stored, *non_finite = 1 when a value it would store is NaN or ±Inf
//   vjit_sum_squares_multi(rows, ptrs, starts, double* sum)
//   vjit_optimizer_update_multi(rows, ptrs, starts, kind, ... as above ..., preview, non_finite)
//       the same over every parameter at once (multi-tensor): row r is
//       elements [starts[r], starts[r+1]) of one flattened range, of width
//       starts[r+1] − starts[r]; with preview 0 nothing is stored when
//       *non_finite is set (by the preview queued before it)
std::string cuda_runtime_kernels_source();

// One module's source: the prelude (types, the grid-stride helper) followed by
// the given kernels' sources.
std::string cuda_module_source(const std::vector<CudaKernelSource>& kernels);

// The NVRTC options the sources above are written for (see the accuracy note):
// "--fmad=false", "--std=c++17", without -arch (the compiler adds it).
std::vector<std::string> cuda_compile_options();

}  // namespace vjit::codegen
