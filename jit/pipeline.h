#pragma once
// Lowers every vertex function of a program and its derivative to an
// execution plan (runtime/exec_plan.h).
#include "runtime/exec_plan.h"
#include "vjit/options.h"
#include "vjit/program.h"

namespace vjit::jit {

runtime::ExecPlan lower_program(const Program& program, const Options& options);

}  // namespace vjit::jit
