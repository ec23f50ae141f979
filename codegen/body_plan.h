#pragma once
// Register allocation for the JIT code generators of every ISA
// (x86_fused_kernel.cpp, a64_fused_kernel.cpp): the plan of one loop body of a
// fused elementwise kernel — which vector register each value lives in over
// one step, when an input is loaded, a value spilled, reloaded, computed and
// stored. Pure C++: a generator walks the plan and writes its own machine code.
#include <vector>

#include "codegen/jit_kernels.h"
#include "codegen/kernel_spec.h"
#include "codegen/vmath_constants.h"

namespace vjit::codegen {

// One step of the body plan. Values are numbered as spec operands: input j is
// value j, instruction k is value num_inputs + k. A body unrolled U times
// computes U consecutive vectors of the row at once; `copy` says which.
struct Action {
  enum class Kind {
    Load,     // reg = the input row's vector `copy` (or its broadcast scalar)
    Reload,   // reg = spill slot `slot`
    Spill,    // spill slot `slot` = reg
    Compute,  // reg = op(a_reg, b_reg) of instruction value - num_inputs
    Store,    // output `slot`'s vector `copy` = reg
  };
  Kind kind;
  int value;
  int copy = 0;
  int reg = -1;
  int slot = -1;
  int a_reg = -1, b_reg = -1;
};

struct BodyPlan {
  int copies = 0;  // vectors per step (0: no such body)
  std::vector<Action> actions;
  int spill_slots = 0;
  int spills = 0, reloads = 0, input_loads = 0;
  int peak_live = 0;
};

// The transcendental ops the vector-math emitters compute in place (x = f(x)),
// as their UnaryFn; false for every other op.
bool vmath_fn(ir::Op op, UnaryFn* fn);

// Instructions whose value reaches an output (the others are not computed).
std::vector<bool> needed_instructions(const KernelSpec& spec);

// The plan of one step of `copies` vectors, values in the registers of `pool`
// (vector register indices, at least 3, each < 32); see body_plan.cpp.
BodyPlan plan_body(const KernelSpec& spec, std::vector<int> pool, int copies);

// A row pointer the kernel walks: a used input or an output.
struct Stream {
  bool output = false;
  int index = 0;        // input or output index
  bool scalar = false;  // a Scalar input: one float per row, broadcast
};

// The loops of a kernel over one row, `lanes` floats a vector:
//   unrolled  unrolled_steps steps of unrolled.copies full vectors
//   single    single_steps steps of one full vector (those left)
//   tail      once on the width % lanes last elements
// and the row pointers it walks: the used inputs in order of first use, then
// the outputs.
struct LoopPlan {
  int lanes = 0;
  int64_t full_vectors = 0;    // width / lanes
  int64_t unrolled_steps = 0;  // steps of `unrolled` (unrolled.copies vectors each)
  int64_t single_steps = 0;    // the full vectors left: steps of `single`
  int tail_lanes = 0;          // width % lanes, done by `tail`
  BodyPlan unrolled, single, tail;
  std::vector<Stream> streams;
  std::vector<int> stream_of_input;  // -1 when the input is unused
  std::vector<int> stream_of_output;
  FusedKernelStats stats;
};

// Plans the loops: the full-vector bodies over `pool`, the tail's over
// `tail_pool`, unrolled by the first of `unroll_choices` (widest first) that
// fits: unrolling gives the out-of-order core independent chains to overlap
// (a fused body is one long dependency chain per vector), but only while it
// adds no spill traffic per vector.
LoopPlan plan_loops(const KernelSpec& spec, int lanes, const std::vector<int>& pool,
                    const std::vector<int>& tail_pool, const std::vector<int>& unroll_choices);

// Instructions the bodies of `plan` emit at most when a transcendental takes
// `per_vmath` and any other action `per_action`.
size_t body_instructions(const LoopPlan& plan, const KernelSpec& spec, size_t per_vmath, size_t per_action);

}  // namespace vjit::codegen
