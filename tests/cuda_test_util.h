#pragma once
// What the CUDA tests share: the fused-kernel specs every example model
// generates, random operands with leading dimensions, and the kernelParams
// array of a fused kernel (the driver's launch and the host shim read the same).
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "codegen/kernel_spec.h"
#include "engine_check.h"
#include "jit/nvrtc.h"
#include "jit/pipeline.h"
#include "runtime/cuda_driver.h"

// In a test that needs a GPU: skips, saying "skipped: no CUDA device (reason)",
// where there is none or NVRTC is missing.
#define VJIT_SKIP_WITHOUT_CUDA()                                                                        \
  do {                                                                                                  \
    const vjit::runtime::CudaProbe& probe = vjit::runtime::probe_cuda();                                \
    if (!probe.ok) GTEST_SKIP() << "skipped: no CUDA device (" << probe.reason << ")";                  \
    std::string nvrtc = vjit::jit::nvrtc_unavailable_reason();                                          \
    if (!nvrtc.empty()) GTEST_SKIP() << "skipped: no CUDA device usable without NVRTC (" << nvrtc << ")"; \
  } while (0)

namespace vjit::testing {

// The samples 0 .. n-1.
inline std::vector<int> first_indices(int n) {
  std::vector<int> indices(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) indices[size_t(i)] = i;
  return indices;
}

// The options of the environment with VJIT_DEVICE=cuda.
inline Options cuda_options() {
  Options options = Options::defaults();
  options.device = vjit::Options::Device::Cuda;
  return options;
}

// The fused groups of F and ∂F of every example model (small config), each
// spec once. With isa=scalar every fused kernel is the reference kernel, whose
// context is its spec (jit/kernel_cache.h).
inline std::vector<codegen::KernelSpec> example_kernel_specs() {
  std::vector<codegen::KernelSpec> specs;
  std::vector<std::string> keys;
  for (const std::string& name : models::model_names()) {
    models::Bundle bundle = models::make_model(name, small_config());
    Options options = Options::defaults();
    options.tuning.isa = vjit::Options::Isa::Scalar;
    runtime::ExecPlan plan = jit::lower_program(*bundle.program, options);
    for (const runtime::TypePlan& type : plan.types)
      for (const runtime::FunctionPlan* fp : {&type.forward, &type.backward})
        for (const runtime::FusedStep& step : fp->fused) {
          const auto* spec = static_cast<const codegen::KernelSpec*>(step.kernel.context);
          if (std::find(keys.begin(), keys.end(), spec->key()) != keys.end()) continue;
          keys.push_back(spec->key());
          specs.push_back(*spec);
        }
  }
  return specs;
}

// Operands of one launch over `rows` rows: inputs with ld = width + 3 (a
// Scalar input: ld 2), the last vector input a parameter (ld 0) when there are
// two or more; outputs with ld = width + 1.
struct FusedOperands {
  int64_t rows = 0;
  std::vector<std::vector<float>> inputs, outputs;
  std::vector<int64_t> input_ld, output_ld;

  FusedOperands(const codegen::KernelSpec& spec, int64_t rows_, uint32_t seed) : rows(rows_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> value(-3.0f, 3.0f), positive(0.1f, 4.0f);
    const bool logs = std::any_of(spec.instrs.begin(), spec.instrs.end(), [](const codegen::KernelInstr& k) {
      return k.op == ir::Op::Log || k.op == ir::Op::Sqrt || k.op == ir::Op::Div;
    });
    for (size_t j = 0; j < spec.inputs.size(); ++j) {
      int64_t ld = spec.inputs[j].scalar ? 2 : spec.width + 3;
      if (!spec.inputs[j].scalar && j + 1 == spec.inputs.size() && j > 0) ld = 0;
      input_ld.push_back(ld);
      std::vector<float> data(size_t(std::max<int64_t>(ld * rows, spec.width + 3)));
      for (float& x : data) x = logs ? positive(rng) : value(rng);
      inputs.push_back(std::move(data));
    }
    for (size_t o = 0; o < spec.outputs.size(); ++o) {
      output_ld.push_back(spec.width + 1);
      outputs.emplace_back(size_t((spec.width + 1) * rows), -7.0f);
    }
  }

  std::vector<const float*> input_ptrs() const {
    std::vector<const float*> p;
    for (const auto& v : inputs) p.push_back(v.data());
    return p;
  }
  std::vector<float*> output_ptrs() {
    std::vector<float*> p;
    for (auto& v : outputs) p.push_back(v.data());
    return p;
  }
};

// The reference kernel's outputs for the same operands.
inline std::vector<std::vector<float>> reference_outputs(const codegen::KernelSpec& spec, const FusedOperands& in) {
  FusedOperands out = in;
  std::vector<const float*> inputs = in.input_ptrs();
  std::vector<float*> outputs = out.output_ptrs();
  ir::KernelArgs args{in.rows, inputs.data(), in.input_ld.data(), outputs.data(), in.output_ld.data(), &spec};
  codegen::run_reference_kernel(spec, args);
  return out.outputs;
}

// kernelParams for a fused kernel: pointers to rows, then (data, ld) per input
// and per output. `pointers` holds the data pointers (host or device addresses
// as 64-bit values) and must outlive the launch, as must `rows` and the lds.
inline std::vector<void*> fused_params(int64_t& rows, std::vector<uint64_t>& pointers, std::vector<int64_t>& input_ld,
                                       std::vector<int64_t>& output_ld) {
  std::vector<void*> params{&rows};
  size_t p = 0;
  for (int64_t& ld : input_ld) params.insert(params.end(), {&pointers[p++], &ld});
  for (int64_t& ld : output_ld) params.insert(params.end(), {&pointers[p++], &ld});
  return params;
}

// Largest |a − b| / max(|b|, 1) over the rows' first `width` elements.
inline double max_error(const std::vector<float>& a, const std::vector<float>& b, int64_t rows, int64_t width,
                        int64_t ld) {
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < width; ++i) {
      double x = a[size_t(r * ld + i)], y = b[size_t(r * ld + i)];
      if (std::isnan(x) && std::isnan(y)) continue;
      worst = std::max(worst, std::abs(x - y) / std::max(std::abs(y), 1.0));
    }
  return worst;
}

}  // namespace vjit::testing
