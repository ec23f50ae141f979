// fused_bench: one LSTM cell's elementwise part as a fused JIT kernel
// (codegen/x86_fused_kernel.h) against the same ops run one at a time by the
// reference kernel, after checking that they agree. Per (shape, ISA) it prints
// one JSON line:
//   {"bench":"lstm_cell","isa":"avx512","rows":64,"width":256,"code_bytes":5760,"compile_us":..,
//    "max_abs_err":..,"fused_jit_ns_per_elem":..,"unfused_reference_ns_per_elem":..,
//    "fused_reference_ns_per_elem":..,"unfused_jit_ns_per_elem":..,"speedup":..}
// where an element is one (row, column) of the cell, ns are best-of-5 and
// speedup = unfused_reference / fused_jit. fused_reference runs the whole spec
// through the reference kernel (what Isa::Scalar does); unfused_jit runs each
// op as its own JIT kernel through memory, separating what fusion saves from
// what vectorisation does.
// Usage: fused_bench [rows width]... (default: 64 256, 256 128, 1024 512).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "codegen/kernel_spec.h"
#include "codegen/x86_fused_kernel.h"
#include "codegen/isa.h"
#include "ir/ops.h"

namespace {

using vjit::codegen::Isa;
using vjit::codegen::KernelInstr;
using vjit::codegen::KernelSpec;
using vjit::ir::KernelArgs;
using vjit::ir::Op;

// i, f, o, g pre-activations and c_prev in; c, h and the four gates out (the
// gates are what the backward pass reads).
KernelSpec lstm_cell(int64_t width) {
  KernelSpec spec;
  spec.width = width;
  spec.inputs.assign(5, {false});
  spec.instrs = {
      {Op::Sigmoid, 0, -1, 0},  // 5: i
      {Op::Sigmoid, 1, -1, 0},  // 6: f
      {Op::Sigmoid, 2, -1, 0},  // 7: o
      {Op::Tanh, 3, -1, 0},     // 8: g
      {Op::Mul, 6, 4, 0},       // 9: f c_prev
      {Op::Mul, 5, 8, 0},       // 10: i g
      {Op::Add, 9, 10, 0},      // 11: c
      {Op::Tanh, 11, -1, 0},    // 12: tanh c
      {Op::Mul, 7, 12, 0},      // 13: h
  };
  spec.outputs = {6, 8, 0, 1, 2, 3};
  return spec;
}

// Buffers for one run: inputs, every instruction's value (the unfused path
// writes them all), rows × width each, dense.
struct Buffers {
  Buffers(const KernelSpec& spec, int64_t rows) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
    const size_t n = size_t(rows * spec.width);
    for (size_t j = 0; j < spec.inputs.size(); ++j) {
      inputs.emplace_back(n);
      for (float& x : inputs.back()) x = dist(rng);
    }
    values.assign(spec.instrs.size(), std::vector<float>(n));
  }
  std::vector<std::vector<float>> inputs, values;
};

// The arguments of the fused spec: outputs into their instruction's buffer.
struct FusedArgs {
  FusedArgs(const KernelSpec& spec, int64_t rows, Buffers& b) {
    for (auto& in : b.inputs) in_ptrs.push_back(in.data());
    in_ld.assign(in_ptrs.size(), spec.width);
    for (int o : spec.outputs) out_ptrs.push_back(b.values[size_t(o)].data());
    out_ld.assign(out_ptrs.size(), spec.width);
    args = {rows, in_ptrs.data(), in_ld.data(), out_ptrs.data(), out_ld.data()};
  }
  std::vector<const float*> in_ptrs;
  std::vector<int64_t> in_ld;
  std::vector<float*> out_ptrs;
  std::vector<int64_t> out_ld;
  KernelArgs args;
};

// One single-op spec per instruction, reading and writing whole buffers.
struct UnfusedStep {
  KernelSpec spec;
  std::vector<const float*> in_ptrs;
  std::vector<int64_t> in_ld;
  float* out_ptr = nullptr;
  int64_t out_ld = 0;
  KernelArgs args;
};

std::vector<std::unique_ptr<UnfusedStep>> unfused_steps(const KernelSpec& spec, int64_t rows, Buffers& b) {
  const int n = int(spec.inputs.size());
  auto buffer = [&](int operand) -> const float* {
    return operand < n ? b.inputs[size_t(operand)].data() : b.values[size_t(operand - n)].data();
  };
  std::vector<std::unique_ptr<UnfusedStep>> steps;
  for (size_t k = 0; k < spec.instrs.size(); ++k) {
    const KernelInstr& in = spec.instrs[k];
    auto step = std::make_unique<UnfusedStep>();
    step->spec.width = spec.width;
    step->spec.inputs.assign(in.b >= 0 ? 2 : 1, {false});
    step->spec.instrs = {{in.op, 0, in.b >= 0 ? 1 : -1, in.scalar}};
    step->spec.outputs = {0};
    step->in_ptrs.push_back(buffer(in.a));
    if (in.b >= 0) step->in_ptrs.push_back(buffer(in.b));
    step->in_ld.assign(step->in_ptrs.size(), spec.width);
    step->out_ptr = b.values[k].data();
    step->out_ld = spec.width;
    step->args = {rows, step->in_ptrs.data(), step->in_ld.data(), &step->out_ptr, &step->out_ld};
    steps.push_back(std::move(step));
  }
  return steps;
}

// Best-of-5 nanoseconds per element, each trial running >= 50 ms.
double ns_per_elem(const std::function<void()>& run, int64_t elements) {
  using Clock = std::chrono::steady_clock;
  double best = 1e30;
  for (int trial = 0; trial < 5; ++trial) {
    int64_t reps = 0;
    const auto start = Clock::now();
    auto now = start;
    do {
      for (int i = 0; i < 4; ++i) run();
      reps += 4;
      now = Clock::now();
    } while (now - start < std::chrono::milliseconds(50));
    best = std::min(best, std::chrono::duration<double, std::nano>(now - start).count() / double(reps * elements));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int i = 1; i + 1 < argc; i += 2) shapes.emplace_back(std::atoll(argv[i]), std::atoll(argv[i + 1]));
  if (shapes.empty()) shapes = {{64, 256}, {256, 128}, {1024, 512}};
  int status = 0;
  for (auto [rows, width] : shapes) {
    const KernelSpec spec = lstm_cell(width);
    const int64_t elements = rows * width;
    // Each path writes its own buffers, so the reference stays the reference.
    Buffers reference(spec, rows), fused(spec, rows), unfused(spec, rows);
    FusedArgs reference_args(spec, rows, reference), fused_args(spec, rows, fused);
    auto steps = unfused_steps(spec, rows, reference);
    auto jit_steps = unfused_steps(spec, rows, unfused);
    auto run_unfused_reference = [&] {
      for (auto& s : steps) vjit::codegen::run_reference_kernel(s->spec, s->args);
    };
    run_unfused_reference();
    const double unfused_reference_ns = ns_per_elem(run_unfused_reference, elements);
    const double fused_reference_ns =
        ns_per_elem([&] { vjit::codegen::run_reference_kernel(spec, reference_args.args); }, elements);

    for (Isa isa : {Isa::Avx512, Isa::Avx2}) {
      nlohmann::json line = {{"bench", "lstm_cell"}, {"isa", vjit::codegen::isa_name(isa)}, {"rows", rows},
                             {"width", width}};
      if (!vjit::codegen::cpu_has(isa)) {
        line["skipped"] = "this CPU lacks " + std::string(vjit::codegen::isa_name(isa));
        std::printf("%s\n", line.dump().c_str());
        continue;
      }
      const auto compile_start = std::chrono::steady_clock::now();
      auto kernel = vjit::codegen::compile_fused_kernel(spec, isa);
      line["compile_us"] =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - compile_start).count();
      line["kernel"] = kernel->name();
      line["unroll"] = kernel->stats().unroll;
      line["code_bytes"] = kernel->code_bytes();
      kernel->function()(&fused_args.args);
      double max_err = 0;  // check before timing: every output against the unfused reference
      for (int o : spec.outputs)
        for (int64_t i = 0; i < elements; ++i)
          max_err = std::max(max_err, double(std::abs(fused.values[size_t(o)][size_t(i)] -
                                                      reference.values[size_t(o)][size_t(i)])));
      line["max_abs_err"] = max_err;
      if (!(max_err <= 1e-5)) {
        line["error"] = "fused kernel differs from the reference by more than 1e-5; not timed";
        status = 1;
        std::printf("%s\n", line.dump().c_str());
        continue;
      }
      std::vector<std::shared_ptr<const vjit::codegen::FusedKernel>> op_kernels;
      for (auto& s : jit_steps) op_kernels.push_back(vjit::codegen::compile_fused_kernel(s->spec, isa));
      const double fused_jit_ns = ns_per_elem([&] { kernel->function()(&fused_args.args); }, elements);
      const double unfused_jit_ns = ns_per_elem(
          [&] {
            for (size_t k = 0; k < jit_steps.size(); ++k) op_kernels[k]->function()(&jit_steps[k]->args);
          },
          elements);
      line["fused_jit_ns_per_elem"] = fused_jit_ns;
      line["unfused_jit_ns_per_elem"] = unfused_jit_ns;
      line["fused_reference_ns_per_elem"] = fused_reference_ns;
      line["unfused_reference_ns_per_elem"] = unfused_reference_ns;
      line["speedup"] = unfused_reference_ns / fused_jit_ns;
      line["speedup_over_unfused_jit"] = unfused_jit_ns / fused_jit_ns;
      std::printf("%s\n", line.dump().c_str());
    }
  }
  return status;
}
