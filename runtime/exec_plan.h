#pragma once
// An execution plan is data: for each vertex type, the steps of F and ∂F that
// run before the tasks over every vertex (eager), task by task (core) and after
// the last task over every vertex (lazy). A step is one IR node or one fused
// elementwise kernel; kernels are carried as callables, so the executor runs
// them without knowing how they were made. The jit pipeline makes plans
// (jit/pipeline.h); an executor runs them.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/classify.h"
#include "vjit/ir.h"
#include "vjit/kernel_abi.h"

namespace vjit::runtime {

struct FusedStep {
  std::string name;                   // for logs and profiles
  std::vector<ir::ValueId> inputs;    // read from buffers, in kernel argument order
  std::vector<ir::ValueId> outputs;   // written to buffers, in kernel argument order
  int64_t width = 0;                  // elements per row of the group's values
  std::function<void(const KernelArgs&)> run;
};

struct Step {
  ir::ValueId node = -1;  // an IR node, or
  int fused = -1;         // an index into FunctionPlan::fused
};

struct FunctionPlan {
  const ir::Function* function = nullptr;
  std::vector<ir::Phase> phases;  // per node
  // Nodes computed inside another step, with no buffer of their own: Outer
  // nodes whose only reader is a ParamGrad (which computes Σ_rows a bᵀ as one
  // GEMM over its rows: every vertex of the type when lazy, the task's vertices
  // otherwise), and fused nodes that nothing outside their group reads.
  std::vector<bool> folded;
  std::vector<FusedStep> fused;
  std::vector<Step> eager, core, lazy;
  ir::ValueId scatter_value = -1;  // the value F scatters (forward plans)
};

struct TypePlan {
  FunctionPlan forward, backward;
};

struct ExecPlan {
  std::vector<TypePlan> types;
  // The lowered F and ∂F of every type (FunctionPlan::function points into them).
  std::vector<std::shared_ptr<const ir::Function>> functions;
  // dst[i] = exp(src[i]) for i < n, vectorised: the softmax of the loss ops
  // runs through it (a std::exp loop where none is given).
  std::function<void(const float* src, float* dst, int64_t n)> exp;
};

}  // namespace vjit::runtime
