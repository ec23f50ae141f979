#pragma once
// Per-program layout of the parameters (issue 11, the first use of layout
// planning). The stacked weights of merged products (uniform Concats of
// parameters, ir/merge_matmuls.h) are read in place where the Model holds
// their parameters one right after another, in order (CpuExecutor; the CUDA
// executor keeps its own copies on the device and stacks them there). The
// engine asks for that when it is built: the stacked weights of every type's
// F and ∂F, largest first, planned as runs (layout/param_runs.h) and laid out
// with Model::arrange — only when the Model does not already hold them so, so
// that a second engine of the same program moves nothing.
#include <vector>

#include "runtime/exec_plan.h"
#include "vjit/model.h"

namespace vjit::runtime {

// The parameter ids of every distinct stacked weight of `plan`, largest
// (values × readers) first.
std::vector<std::vector<int>> stacked_weights(const ExecPlan& plan);

struct ParamLayout {
  int stacked = 0;   // distinct stacked weights in the plan
  int in_place = 0;  // of them, read in place after laying out
  bool moved = false;  // whether the Model's values were laid out again
};

ParamLayout lay_out_parameters(const ExecPlan& plan, Model& model);

}  // namespace vjit::runtime
