#include "codegen/cuda_source.h"

#include <bit>
#include <cstdint>
#include <cstdio>
#include <sstream>

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
         "    const long long* __restrict__ src, const float* __restrict__ base, float* __restrict__ dst, "
         "long long ld, int stack) {\n"
      << kLoopBegin
      << "    float sum = 0.0f;\n"
         "    for (int k = begin[r]; k < begin[r + 1]; ++k) {\n"
         "      const float x = base[src[k] + i];\n"
         "      if (stack) dst[r * ld + (k - begin[r]) * width + i] = x;\n"
         "      else sum += x;\n"
         "    }\n"
         "    if (!stack) dst[r * ld + i] = sum;\n  }\n}\n"
      << host_entry("vjit_gather_sum", {"long long", "long long", "const int*", "const long long*", "const float*",
                                        "float*", "long long", "int"})
      << "extern \"C\" __global__ void vjit_fill_rows(long long rows, long long width, float value, "
         "float* __restrict__ dst, long long ld) {\n"
      << kLoopBegin << "    dst[r * ld + i] = value;\n  }\n}\n"
      << host_entry("vjit_fill_rows", {"long long", "long long", "float", "float*", "long long"});
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
