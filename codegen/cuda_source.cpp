#include "codegen/cuda_source.h"

#include <bit>
#include <cstdint>
#include <cstdio>
#include <sstream>

#include "ir/ops.h"
#include "ir/row_op.h"
#include "vjit/error.h"

namespace vjit::codegen {

namespace {

using ir::Op;

// A float constant as its bits, so the text round-trips every value exactly.
std::string float_literal(float value) {
  char text[48];
  std::snprintf(text, sizeof text, "__int_as_float(0x%08x)", std::bit_cast<uint32_t>(value));
  return text;
}

// The expression of one instruction over operands `a` and `b` (C names), with
// the semantics of ir/op_semantics.h.
std::string expression(const KernelInstr& k, const std::string& a, const std::string& b) {
  switch (k.op) {
    case Op::Neg: return "-" + a;
    case Op::Sigmoid: return "1.0f / (1.0f + expf(-" + a + "))";
    case Op::Tanh: return "tanhf(" + a + ")";
    case Op::Relu: return a + " > 0.0f ? " + a + " : 0.0f";
    case Op::Exp: return "expf(" + a + ")";
    case Op::Log: return "logf(" + a + ")";
    case Op::Sqrt: return "sqrtf(" + a + ")";
    case Op::Step: return a + " > 0.0f ? 1.0f : 0.0f";
    case Op::Scale: return a + " * " + float_literal(k.scalar);
    case Op::AddScalar: return a + " + " + float_literal(k.scalar);
    case Op::Add: return a + " + " + b;
    case Op::Sub: return a + " - " + b;
    case Op::Mul: return a + " * " + b;
    case Op::Div: return a + " / " + b;
    default: break;
  }
  VJIT_INTERNAL_CHECK(false, "CUDA fused kernel: no code for " << ir::op_name(k.op));
}

// The grid-stride loop over rows × width elements; the body sees r and i.
constexpr const char* kLoopBegin =
    "  if (width <= 0) return;\n"
    "  const long long total = rows * width;\n"
    "  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;\n"
    "       e += (long long)gridDim.x * blockDim.x) {\n"
    "    const long long r = e / width;\n"
    "    const long long i = e - r * width;\n";

// The host entry of a kernel under the shim: unpacks kernelParams as the
// driver does (params[j] points at parameter j) and runs the grid.
std::string host_entry(const std::string& name, const std::vector<std::string>& param_types) {
  std::ostringstream out;
  out << "#ifdef VJIT_CUDA_HOST_SHIM\n"
      << "extern \"C\" void " << name << "_host(void** params, unsigned grid, unsigned block) {\n"
      << "  vjit_shim_run(grid, block, [&] { " << name << "(";
  for (size_t j = 0; j < param_types.size(); ++j)
    out << (j ? ", " : "") << "*static_cast<" << param_types[j] << "*>(params[" << j << "])";
  out << "); });\n}\n#endif\n";
  return out.str();
}

// The kernel of a row op around its device function (ir/row_op.h): long long
// rows, then per operand k (const float* ink, long long ldk, long long nk),
// then (float* out, long long ld, long long width).
std::string row_op_kernel(const ir::RowOp& op, int arity) {
  const std::string name = op.cuda_kernel;
  std::vector<std::string> param_types{"long long"};
  std::ostringstream out, operands;
  out << op.cuda << "extern \"C\" __global__ void " << name << "(long long rows";
  for (int k = 0; k < arity; ++k) {
    out << ", const float* __restrict__ in" << k << ", long long ld" << k << ", long long n" << k;
    operands << "in" << k << " + r * ld" << k << ", n" << k << ", ";
    param_types.insert(param_types.end(), {"const float*", "long long", "long long"});
  }
  out << ", float* __restrict__ out, long long ld, long long width) {\n";
  param_types.insert(param_types.end(), {"float*", "long long", "long long"});
  if (op.cuda_form == ir::CudaRowForm::Element) {
    out << kLoopBegin << "    out[r * ld + i] = " << name << "_element(" << operands.str() << "i);\n  }\n}\n";
  } else {
    out << "  for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < rows;\n"
           "       r += (long long)gridDim.x * blockDim.x)\n"
        << "    " << name << "_row(" << operands.str() << "out + r * ld, width);\n}\n";
  }
  return out.str() + host_entry(name, param_types);
}

// The optimizer's kernels (runtime/optimizer.cpp's update loops, the same
// float operations): per row r, ptrs[4r..4r+3] = weights, gradient, state
// slot 0, 1. A kernel per group of rows of one width, and the multi-tensor
// forms over rows of any widths, row r the elements [starts[r], starts[r + 1])
// of one flattened range (its row found by a binary search of starts).

// The grid-stride loop of the multi-tensor kernels; the body sees r and i.
std::string multi_tensor_loop_begin() {
  const std::string loop = std::string(kLoopBegin).substr(std::string(kLoopBegin).find("  for (long long e"));
  return "  const long long total = starts[rows];\n" + loop.substr(0, loop.find("    const long long r")) +
         "    const long long r = vjit_row_of(starts, rows, e);\n"
         "    const long long i = e - starts[r];\n";
}

// Σ g² into *sum, in double.
std::string sum_squares_kernels() {
  const char* body =
      "    const double g = ((const float*)ptrs[4 * r + 1])[i];\n"
      "    partial += g * g;\n  }\n"
      "#ifndef VJIT_CUDA_HOST_SHIM\n"
      "  for (int lane = 16; lane > 0; lane /= 2) partial += __shfl_down_sync(0xffffffffu, partial, lane);\n"
      "  if ((threadIdx.x & 31) != 0) return;\n"
      "#endif\n"
      "  if (partial != 0.0 || partial != partial) atomicAdd(sum, partial);\n}\n";
  std::ostringstream out;
  out << "__device__ inline long long vjit_row_of(const long long* starts, long long rows, long long e) {\n"
         "  long long lo = 0, hi = rows - 1;\n"
         "  while (lo < hi) {\n"
         "    const long long mid = (lo + hi + 1) / 2;\n"
         "    if (starts[mid] <= e) lo = mid; else hi = mid - 1;\n"
         "  }\n"
         "  return lo;\n}\n";
  out << "extern \"C\" __global__ void vjit_sum_squares(long long rows, long long width, "
         "const unsigned long long* __restrict__ ptrs, double* sum) {\n"
         "  double partial = 0.0;\n"
      << std::string(kLoopBegin).substr(std::string(kLoopBegin).find("  const long long total")) << body
      << host_entry("vjit_sum_squares", {"long long", "long long", "const unsigned long long*", "double*"});
  out << "extern \"C\" __global__ void vjit_sum_squares_multi(long long rows, "
         "const unsigned long long* __restrict__ ptrs, const long long* __restrict__ starts, double* sum) {\n"
         "  double partial = 0.0;\n"
      << multi_tensor_loop_begin() << body
      << host_entry("vjit_sum_squares_multi", {"long long", "const unsigned long long*", "const long long*", "double*"});
  return out.str();
}

// preview = 1: the same float operations, nothing stored; *non_finite is set
// to 1 when any weight or slot value the update would store is NaN or ±Inf
// (the device form of Optimizer's preview: check, then apply). The
// multi-tensor update with preview 0 stores nothing when *non_finite is set
// (its preview ran before it on the stream).
std::string optimizer_update_kernels() {
  const char* rule_params =
      "int kind,\n"
      "    float lr, float weight_decay, float momentum, float beta1, float beta2, float one_minus_beta1,\n"
      "    float one_minus_beta2, float correction1, float correction2, float eps, float decay, float scale,\n"
      "    int preview, unsigned* non_finite) {\n";
  const char* element_call =
      "    vjit_optimizer_element((float*)ptrs[4 * r] + i, (float*)ptrs[4 * r + 2] + i, (float*)ptrs[4 * r + 3] + i,\n"
      "        ((const float*)ptrs[4 * r + 1])[i], kind, lr, weight_decay, momentum, beta1, beta2,\n"
      "        one_minus_beta1, one_minus_beta2, correction1, correction2, eps, decay, scale, preview, non_finite);\n"
      "  }\n}\n";
  const std::vector<std::string> rule_types{"int",   "float", "float", "float", "float", "float", "float", "float",
                                            "float", "float", "float", "float", "float", "int",   "unsigned*"};
  std::ostringstream out;
  out << "__device__ inline unsigned vjit_non_finite(float x) {\n"
         "  return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u;\n}\n"
         "__device__ inline void vjit_optimizer_element(float* w, float* m, float* v, float g, "
      << rule_params
      << "  float nw, nm = 0.0f, nv = 0.0f;\n"
         "  if (kind == 1) {\n"
         "    nw = *w - lr * (g * scale + weight_decay * *w);\n"
         "  } else if (kind == 2) {\n"
         "    const float d = g * scale + weight_decay * *w;\n"
         "    nm = momentum * *m + d;\n"
         "    nw = *w - lr * nm;\n"
         "  } else {\n"
         "    const float gk = g * scale;\n"
         "    nm = beta1 * *m + one_minus_beta1 * gk;\n"
         "    nv = beta2 * *v + one_minus_beta2 * gk * gk;\n"
         "    nw = *w * decay - lr * (nm / correction1) / (sqrtf(nv / correction2) + eps);\n"
         "  }\n"
         "  if (preview) {\n"
         "    if (vjit_non_finite(nw) | vjit_non_finite(nm) | vjit_non_finite(nv)) atomicOr(non_finite, 1u);\n"
         "    return;\n"
         "  }\n"
         "  *w = nw;\n"
         "  if (kind >= 2) *m = nm;\n"
         "  if (kind == 3) *v = nv;\n}\n";
  std::vector<std::string> types{"long long", "long long", "const unsigned long long*"};
  types.insert(types.end(), rule_types.begin(), rule_types.end());
  out << "extern \"C\" __global__ void vjit_optimizer_update(long long rows, long long width, "
         "const unsigned long long* __restrict__ ptrs, "
      << rule_params << kLoopBegin << element_call << host_entry("vjit_optimizer_update", types);
  types = {"long long", "const unsigned long long*", "const long long*"};
  types.insert(types.end(), rule_types.begin(), rule_types.end());
  out << "extern \"C\" __global__ void vjit_optimizer_update_multi(long long rows, "
         "const unsigned long long* __restrict__ ptrs, const long long* __restrict__ starts, "
      << rule_params << "  if (!preview && *non_finite != 0u) return;\n"
      << multi_tensor_loop_begin() << element_call << host_entry("vjit_optimizer_update_multi", types);
  return out.str();
}

// The children-block kernels: ir/interpreter.cpp's meaning of each op, one
// thread per element of a row's result (`width` floats). Every one takes the
// same parameters: the operand block is block_rows × block_cols floats per row
// (x at r·xld), `start` the op's column, g the upstream gradient of
// MaxChildrenGrad (its block_cols floats per row at r·gld) and children[r] the
// row's number of variadic children (ChildCount, and MaxChildren's rows past
// the last child, which take no part).
struct ChildrenBlockKernel {
  const char* name;
  const char* element;  // the body: sets `v` from r and i
};

constexpr ChildrenBlockKernel kChildrenBlockKernels[] = {
    {"vjit_slice_cols",  // out [block_rows, width / block_rows] = columns start.. of the block
     "    const long long cols = width / block_rows, k = i / cols;\n"
     "    v = x[r * xld + k * block_cols + start + (i - k * cols)];\n"},
    {"vjit_pad_cols",  // out [block_rows, width / block_rows]: the block at column start, zeros around it
     "    const long long cols = width / block_rows, k = i / cols, j = i - k * cols - start;\n"
     "    v = j >= 0 && j < block_cols ? x[r * xld + k * block_cols + j] : 0.0f;\n"},
    {"vjit_transpose",  // out [block_cols, block_rows]
     "    const long long j = i / block_rows, k = i - j * block_rows;\n"
     "    v = x[r * xld + k * block_cols + j];\n"},
    {"vjit_child_count",  // out [1]
     "    v = (float)children[r];\n"},
    {"vjit_max_children",  // out [block_cols]: per column, the first largest of the actual children's rows
     "    const float* block = x + r * xld;\n"
     "    const long long n = children[r] < block_rows ? children[r] : block_rows;\n"
     "    long long best = 0;\n"
     "    for (long long k = 1; k < n; ++k)\n"
     "      if (block[k * block_cols + i] > block[best * block_cols + i]) best = k;\n"
     "    v = n > 0 ? block[best * block_cols + i] : 0.0f;\n"},
    {"vjit_max_children_grad",  // out [block_rows, block_cols]: g[j] at that row of column j, zeros elsewhere
     "    const float* block = x + r * xld;\n"
     "    const long long n = children[r] < block_rows ? children[r] : block_rows;\n"
     "    const long long k = i / block_cols, j = i - k * block_cols;\n"
     "    long long best = 0;\n"
     "    for (long long q = 1; q < n; ++q)\n"
     "      if (block[q * block_cols + j] > block[best * block_cols + j]) best = q;\n"
     "    v = n > 0 && k == best ? g[r * gld + j] : 0.0f;\n"},
};

std::string children_block_kernels() {
  std::ostringstream out;
  for (const ChildrenBlockKernel& kernel : kChildrenBlockKernels)
    out << "extern \"C\" __global__ void " << kernel.name
        << "(long long rows, long long width, long long block_rows, long long block_cols,\n"
           "    long long start, const float* __restrict__ x, long long xld, const float* __restrict__ g, "
           "long long gld,\n"
           "    const int* __restrict__ children, float* __restrict__ out, long long ld) {\n"
        << kLoopBegin << "    float v;\n"
        << kernel.element << "    out[r * ld + i] = v;\n  }\n}\n"
        << host_entry(kernel.name, {"long long", "long long", "long long", "long long", "long long", "const float*",
                                    "long long", "const float*", "long long", "const int*", "float*", "long long"});
  return out.str();
}

}  // namespace

CudaKernelSource cuda_fused_kernel(const KernelSpec& spec) {
  check_kernel_spec(spec);
  CudaKernelSource kernel;
  kernel.name = kernel_name(spec, "cuda");
  const int num_inputs = int(spec.inputs.size());
  std::vector<std::string> param_types{"long long"};
  std::ostringstream out;
  out << "// " << spec.key() << "\n"
      << "extern \"C\" __global__ void " << kernel.name << "(long long rows";
  for (int j = 0; j < num_inputs; ++j) {
    out << ", const float* __restrict__ in" << j << ", long long in_ld" << j;
    param_types.insert(param_types.end(), {"const float*", "long long"});
  }
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    out << ", float* __restrict__ out" << o << ", long long out_ld" << o;
    param_types.insert(param_types.end(), {"float*", "long long"});
  }
  out << ") {\n  const long long width = " << spec.width << ";\n" << kLoopBegin;
  auto operand = [&](int o) { return o < num_inputs ? "x" + std::to_string(o) : "v" + std::to_string(o - num_inputs); };
  for (int j = 0; j < num_inputs; ++j)
    out << "    const float x" << j << " = in" << j << "[r * in_ld" << j << (spec.inputs[size_t(j)].scalar ? "" : " + i")
        << "];\n";
  for (size_t k = 0; k < spec.instrs.size(); ++k) {
    const KernelInstr& in = spec.instrs[k];
    out << "    const float v" << k << " = " << expression(in, operand(in.a), in.b >= 0 ? operand(in.b) : "")
        << ";\n";
  }
  for (size_t o = 0; o < spec.outputs.size(); ++o)
    out << "    out" << o << "[r * out_ld" << o << " + i] = v" << spec.outputs[o] << ";\n";
  out << "  }\n}\n" << host_entry(kernel.name, param_types);
  kernel.source = out.str();
  return kernel;
}

std::string cuda_index_kernels_source() {
  std::ostringstream out;
  out << "extern \"C\" __global__ void vjit_gather_rows(long long rows, long long width, "
         "const long long* __restrict__ src,\n"
         "    const float* __restrict__ base, float* __restrict__ dst, long long ld) {\n"
      << kLoopBegin << "    dst[r * ld + i] = base[src[r] + i];\n  }\n}\n"
      << host_entry("vjit_gather_rows", {"long long", "long long", "const long long*", "const float*", "float*",
                                         "long long"})
      << "extern \"C\" __global__ void vjit_scatter_add_rows(long long rows, long long width, "
         "const long long* __restrict__ dst,\n"
         "    float* base, const float* __restrict__ src, long long ld) {\n"
      << kLoopBegin << "    atomicAdd(base + dst[r] + i, src[r * ld + i]);\n  }\n}\n"
      << host_entry("vjit_scatter_add_rows",
                    {"long long", "long long", "const long long*", "float*", "const float*", "long long"})
      << "extern \"C\" __global__ void vjit_gather_sum(long long rows, long long width, "
         "const int* __restrict__ begin,\n"
         "    const unsigned long long* __restrict__ src, float* __restrict__ dst, long long ld, int stack) {\n"
      << kLoopBegin
      << "    float sum = 0.0f;\n"
         "    for (int k = begin[r]; k < begin[r + 1]; ++k) {\n"
         "      const float x = ((const float*)src[k])[i];\n"
         "      if (stack) dst[r * ld + (k - begin[r]) * width + i] = x;\n"
         "      else sum += x;\n"
         "    }\n"
         "    if (!stack) dst[r * ld + i] = sum;\n  }\n}\n"
      << host_entry("vjit_gather_sum", {"long long", "long long", "const int*", "const unsigned long long*",
                                        "float*", "long long", "int"})
      << "extern \"C\" __global__ void vjit_fill_rows(long long rows, long long width, float value, "
         "float* __restrict__ dst, long long ld) {\n"
      << kLoopBegin << "    dst[r * ld + i] = value;\n  }\n}\n"
      << host_entry("vjit_fill_rows", {"long long", "long long", "float", "float*", "long long"});
  return out.str();
}

std::string cuda_runtime_kernels_source() {
  std::ostringstream out;
  // Index moves: rows addressed by absolute device pointers, so one launch
  // covers rows of several buffers and vertex types.
  out << "extern \"C\" __global__ void vjit_move_rows(long long rows, long long width, "
         "const unsigned long long* __restrict__ pairs, int mode) {\n"
      << kLoopBegin
      << "    float* d = (float*)pairs[2 * r] + i;\n"
         "    if (mode == 2) { *d = 0.0f; continue; }\n"
         "    const float x = ((const float*)pairs[2 * r + 1])[i];\n"
         "    if (mode == 1) atomicAdd(d, x);\n"
         "    else *d = x;\n  }\n}\n"
      << host_entry("vjit_move_rows", {"long long", "long long", "const unsigned long long*", "int"});
  out << "extern \"C\" __global__ void vjit_copy_rows(long long rows, long long width, const float* src, "
         "long long sld, float* dst, long long dld) {\n"
      << kLoopBegin << "    dst[r * dld + i] = src[r * sld + i];\n  }\n}\n"
      << host_entry("vjit_copy_rows", {"long long", "long long", "const float*", "long long", "float*", "long long"});
  // One unfused unary or binary op (ir::Op as a number); an operand's `n` is
  // its element count: the row width (same shape), 1 (a scalar) or a vector
  // broadcast over the rows of a matrix (element i mod n).
  out << "extern \"C\" __global__ void vjit_elementwise(int op, long long rows, long long width, "
         "const float* a, long long lda, long long na,\n"
         "    const float* b, long long ldb, long long nb, float c, float* out, long long ld) {\n"
      << kLoopBegin
      << "    const float x = a[r * lda + (na == width ? i : i % na)];\n"
         "    const float y = b ? b[r * ldb + (nb == width ? i : i % nb)] : 0.0f;\n"
         "    float v = 0.0f;\n"
         "    switch (op) {\n";
  for (ir::Op op : {Op::Neg, Op::Sigmoid, Op::Tanh, Op::Relu, Op::Exp, Op::Log, Op::Sqrt, Op::Step, Op::Add, Op::Sub,
                    Op::Mul, Op::Div})
    out << "      case " << int(op) << ": v = " << expression({op, 0, 0, 0.0f}, "x", "y") << "; break;\n";
  out << "      case " << int(Op::Scale) << ": v = x * c; break;\n"
      << "      case " << int(Op::AddScalar) << ": v = x + c; break;\n"
      << "    }\n    out[r * ld + i] = v;\n  }\n}\n"
      << host_entry("vjit_elementwise", {"int", "long long", "long long", "const float*", "long long", "long long",
                                         "const float*", "long long", "long long", "float", "float*", "long long"});
  // Dropout with ir/dropout.h's keep rule: the mask hashes (seed, sample,
  // vertex, key, element) with mix64 (vjit/random.h); ids holds (sample,
  // vertex) per row.
  out << "__device__ unsigned long long vjit_mix64(unsigned long long x) {\n"
         "  x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 27; x *= 0x94D049BB133111EBull; x ^= x >> 31;\n"
         "  return x;\n}\n"
         "extern \"C\" __global__ void vjit_dropout(long long rows, long long width, const float* x, long long xld, "
         "float* out, long long ld,\n"
         "    const int* ids, unsigned long long seed, int key, double rate, float scale, int training) {\n"
      << kLoopBegin
      << "    bool keep = true;\n"
         "    if (training) {\n"
         "      unsigned long long h = vjit_mix64(seed + 0x9E3779B97F4A7C15ull);\n"
         "      h = vjit_mix64(h ^ (unsigned long long)(unsigned)ids[2 * r]);\n"
         "      h = vjit_mix64(h ^ ((unsigned long long)(unsigned)ids[2 * r + 1] << 20) ^ "
         "(unsigned long long)(unsigned)key);\n"
         "      h = vjit_mix64(h ^ (unsigned long long)i);\n"
         "      keep = (double)(h >> 11) * 0x1.0p-53 >= rate;\n"
         "    }\n"
         "    out[r * ld + i] = keep ? x[r * xld + i] * scale : 0.0f;\n  }\n}\n"
      << host_entry("vjit_dropout", {"long long", "long long", "const float*", "long long", "float*", "long long",
                                     "const int*", "unsigned long long", "int", "double", "float", "int"});
  // Broadcast (mod 0: element 0 of the row) and BroadcastRows (element i mod `mod`).
  out << "extern \"C\" __global__ void vjit_broadcast(long long rows, long long width, const float* src, "
         "long long sld, long long mod, float* dst, long long dld) {\n"
      << kLoopBegin << "    dst[r * dld + i] = src[r * sld + (mod ? i % mod : 0)];\n  }\n}\n"
      << host_entry("vjit_broadcast",
                    {"long long", "long long", "const float*", "long long", "long long", "float*", "long long"});
  // Sum (width 1) and SumRows: dst[j] = Σ over the n source elements ≡ j mod width, in order.
  out << "extern \"C\" __global__ void vjit_sum_mod(long long rows, long long width, long long n, const float* src, "
         "long long sld, float* dst, long long dld) {\n"
      << kLoopBegin
      << "    float total = 0.0f;\n"
         "    for (long long k = i; k < n; k += width) total += src[r * sld + k];\n"
         "    dst[r * dld + i] = total;\n  }\n}\n"
      << host_entry("vjit_sum_mod", {"long long", "long long", "long long", "const float*", "long long", "float*",
                                     "long long"});
  // A dense parameter gradient from per-row terms: dst[i] += Σ_r src[r·ld + i],
  // summed pairwise as the CPU executor does (add_rows_pairwise): blocks of 32
  // rows in order, then the blocks' sums as a binary tree (level l: 2^l
  // blocks), so rounding grows with log(rows), not rows.
  out << "extern \"C\" __global__ void vjit_sum_columns_into(long long rows, long long width, const float* src, "
         "long long ld, float* dst) {\n"
         "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < width;\n"
         "       i += (long long)gridDim.x * blockDim.x) {\n"
         "    float level[64];\n"
         "    long long blocks = 0;\n"
         "    for (long long begin = 0; begin < rows; begin += 32, ++blocks) {\n"
         "      const long long end = begin + 32 < rows ? begin + 32 : rows;\n"
         "      float sum = 0.0f;\n"
         "      for (long long r = begin; r < end; ++r) sum += src[r * ld + i];\n"
         "      int l = 0;\n"
         "      for (long long k = blocks; k & 1; k >>= 1) sum += level[l++];\n"
         "      level[l] = sum;\n"
         "    }\n"
         "    float total = 0.0f;\n"
         "    for (int l = 0; l < 64; ++l)\n"
         "      if ((blocks >> l) & 1) total += level[l];\n"
         "    dst[i] += total;\n  }\n}\n"
      << host_entry("vjit_sum_columns_into", {"long long", "long long", "const float*", "long long", "float*"});
  // The objective: Σ_r x[r·ld], accumulated in double.
  out << "extern \"C\" __global__ void vjit_loss_sum(long long rows, const float* x, long long ld, double* total) {\n"
         "  for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < rows;\n"
         "       r += (long long)gridDim.x * blockDim.x)\n"
         "    atomicAdd(total, (double)x[r * ld]);\n}\n"
      << host_entry("vjit_loss_sum", {"long long", "const float*", "long long", "double*"});
  // out = a bᵀ per row (a: m floats, b: n floats).
  out << "extern \"C\" __global__ void vjit_outer(long long rows, long long m, long long n, const float* a, "
         "long long lda, const float* b, long long ldb, float* out, long long ld) {\n"
         "  const long long width = m * n;\n"
      << kLoopBegin
      << "    out[r * ld + i] = a[r * lda + i / n] * b[r * ldb + i % n];\n  }\n}\n"
      << host_entry("vjit_outer", {"long long", "long long", "long long", "const float*", "long long", "const float*",
                                   "long long", "float*", "long long"});
  // Per-vertex products (MV-RNN): out_r = op(A_r) op(B_r), A_r an a_rows×a_cols
  // row-major matrix at a + r·lda, B_r b_rows×b_cols at b + r·ldb, out_r m×n.
  out << "extern \"C\" __global__ void vjit_batched_matmul(long long rows, long long m, long long n, long long k,\n"
         "    const float* a, long long lda, long long a_cols, int ta, const float* b, long long ldb, "
         "long long b_cols, int tb, float* out, long long ld) {\n"
         "  const long long width = m * n;\n"
      << kLoopBegin
      << "    const long long row = i / n, col = i % n;\n"
         "    const float* pa = a + r * lda;\n"
         "    const float* pb = b + r * ldb;\n"
         "    float total = 0.0f;\n"
         "    for (long long q = 0; q < k; ++q)\n"
         "      total += (ta ? pa[q * a_cols + row] : pa[row * a_cols + q]) * (tb ? pb[col * b_cols + q] : pb[q * b_cols + col]);\n"
         "    out[r * ld + i] = total;\n  }\n}\n"
      << host_entry("vjit_batched_matmul",
                    {"long long", "long long", "long long", "long long", "const float*", "long long", "long long",
                     "int", "const float*", "long long", "long long", "int", "float*", "long long"});
  // Softmax cross-entropy per row (one thread a row): the loss log Σ e^(x−max)
  // + max − x[label], or its gradient g·softmax − g·onehot(label); label < 0: 0.
  out << "extern \"C\" __global__ void vjit_softmax_ce(long long rows, long long classes, const float* x, "
         "long long xld, const int* labels,\n"
         "    const float* up, long long uld, int gradient, float* out, long long ld) {\n"
         "  for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < rows;\n"
         "       r += (long long)gridDim.x * blockDim.x) {\n"
         "    const float* row = x + r * xld;\n"
         "    float* dst = out + r * ld;\n"
         "    const int label = labels[r];\n"
         "    float max = -__int_as_float(0x7f800000);\n"
         "    for (long long c = 0; c < classes; ++c) max = row[c] > max ? row[c] : max;\n"
         "    float total = 0.0f;\n"
         "    for (long long c = 0; c < classes; ++c) total += expf(row[c] - max);\n"
         "    if (!gradient) { dst[0] = label < 0 ? 0.0f : logf(total) + max - row[label]; continue; }\n"
         "    const float g = label < 0 ? 0.0f : up[r * uld];\n"
         "    const float scale = g / total;\n"
         "    for (long long c = 0; c < classes; ++c) dst[c] = expf(row[c] - max) * scale;\n"
         "    if (label >= 0) dst[label] -= g;\n  }\n}\n"
      << host_entry("vjit_softmax_ce", {"long long", "long long", "const float*", "long long", "const int*",
                                        "const float*", "long long", "int", "float*", "long long"});
  for (int op = 0; op < ir::kNumOps; ++op)
    if (const ir::RowOp* row = ir::row_op(Op(op))) out << row_op_kernel(*row, ir::op_info(Op(op)).arity);
  out << children_block_kernels() << sum_squares_kernels() << optimizer_update_kernels();
  return out.str();
}

std::string cuda_module_source(const std::vector<CudaKernelSource>& kernels) {
  std::string source =
      "// Generated by vjit (codegen/cuda_source.cpp). Compiled by NVRTC with --fmad=false, or by the host\n"
      "// compiler under VJIT_CUDA_HOST_SHIM (tests/cuda_host_shim.h).\n";
  for (const CudaKernelSource& k : kernels) source += k.source;
  return source;
}

std::vector<std::string> cuda_compile_options() { return {"--fmad=false", "--std=c++17"}; }

}  // namespace vjit::codegen
