#pragma once
// An execution plan is data: for each vertex type, the steps of F and ∂F that
// run before the tasks over every vertex (eager), task by task (core) and after
// the last task over every vertex (lazy). A step is one IR node or one fused
// elementwise kernel. Kernels are data too — a target, an entry point, the
// argument layout and a name — so an executor launches them without knowing
// how they were made. The jit pipeline makes plans (jit/pipeline.h); an
// executor runs them (runtime/executor.h).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/classify.h"
#include "ir/kernel_abi.h"
#include "ir/ops.h"

namespace vjit::runtime {

// Where a kernel's code runs. An executor refuses a kernel of a target it
// cannot launch (a CUDA kernel on the CPU executor, AVX-512 code on a CPU
// without it).
enum class KernelTarget : uint8_t {
  HostReference,  // portable C++ (the reference kernel)
  X86Avx2,
  X86Avx512,
  A64Neon,  // AArch64 Advanced SIMD
  Cuda,  // a kernel of ExecPlan::cuda's module, launched by name (entry is null)
};

const char* kernel_target_name(KernelTarget target);

// A compiled elementwise kernel over rows: entry(&args) with args.context =
// `context` and the pointers of the step's inputs and outputs, in order.
struct Kernel {
  std::string name;  // for logs, profiles and the perf map
  KernelTarget target = KernelTarget::HostReference;
  ir::KernelFn entry = nullptr;
  const void* context = nullptr;
  std::shared_ptr<const void> owner;  // keeps code and context alive
};

struct FusedStep {
  Kernel kernel;
  std::vector<ir::ValueId> inputs;   // read from buffers, in kernel argument order
  std::vector<ir::ValueId> outputs;  // written to buffers, in kernel argument order
  int64_t width = 0;                 // elements per row of the group's values
  // The last this many outputs repeat earlier ones: parts of the scattered row
  // written a second time, into the parents' gathers (runtime/forwarding.h).
  int forwarded_outputs = 0;
  // VJIT_ROW_PLACEMENT=tables (∂F, CPU, core phase): a kernel that adds the
  // outputs `accumulated` (indices into `outputs`: gradient parts,
  // runtime/row_pointers.h) into what their rows hold instead of writing them.
  // It reads each such output's rows as one more input, after `inputs`.
  // No entry: the step has none.
  Kernel accumulating{};
  std::vector<int> accumulated{};
};

// A part of a type's scattered row that a fused kernel computes: the value,
// and its columns in the row (runtime/forwarding.h).
struct ForwardedPart {
  ir::ValueId value = -1;
  int64_t start = 0, width = 0;
};

struct Step {
  ir::ValueId node = -1;  // an IR node, or
  int fused = -1;         // an index into FunctionPlan::fused
  // > 1: the first of this many consecutive steps that are row GEMMs of one
  // shape, none reading another's output (a weight's product over the rows,
  // or the add it is folded into), run as one batched GEMM; the others run
  // with it (or, where the steps run one by one, each alone).
  int batched = 1;
};

struct FunctionPlan {
  const ir::Function* function = nullptr;
  std::vector<ir::Phase> phases;  // per node
  // Nodes computed inside another step, with no buffer of their own: Outer
  // nodes whose only reader is a ParamGrad (which computes Σ_rows a bᵀ as one
  // GEMM over its rows: every vertex of the type when lazy, the task's vertices
  // otherwise), MatMul nodes whose only reader adds a bias (the GEMM writes the
  // sum: its output rows start as the bias, beta = 1), and fused nodes that
  // nothing outside their group reads.
  std::vector<bool> folded;
  std::vector<FusedStep> fused;
  // Per node: the index of the fused step that computes it (-1: none, or a
  // plan made without fusion). Its operands from outside the group are the
  // step's inputs, read row by row.
  std::vector<int> fused_of;
  bool in_fused_step(ir::ValueId id) const { return !fused_of.empty() && fused_of[size_t(id)] >= 0; }
  // Per fused step, what a forward pass that no backward follows runs instead
  // (VJIT_INFER_KERNELS, forward plans): a kernel that writes only the outputs
  // a forward step reads (outputs kept for the backward alone are left out)
  // and computes only what those need; no outputs: the step is skipped. Equal
  // to `fused` where nothing can be left out, and in backward plans.
  std::vector<FusedStep> inference_fused;
  // Whether inference runs less than fused step `g` (a smaller kernel, or none).
  bool inference_differs(size_t g) const { return inference_fused[g].outputs.size() < fused[g].outputs.size(); }
  std::vector<Step> eager, core, lazy;
  ir::ValueId scatter_value = -1;  // the value F scatters (forward plans)
  // VJIT_ROW_PLACEMENT=tables (forward plans): the parts of the scattered row its
  // fused kernels also write into the parents' gathers.
  std::vector<ForwardedPart> forwarded;
  // Per node: a children-block value [K, d] whose padding rows change no
  // result (ir/child_rows.h), run in child row space: one row of d per actual
  // child of the rows' vertices, in vertex order, instead of K rows per
  // vertex. Empty where no value of the type is one (and in plans for the
  // CUDA device, which runs every block padded).
  std::vector<bool> child_rows;
  bool in_child_rows(ir::ValueId id) const { return !child_rows.empty() && child_rows[size_t(id)]; }
  // Elements per row of value `id` as its steps run it: d for a value in
  // child row space, else its whole per-vertex value.
  int64_t row_width(ir::ValueId id) const {
    const ir::Node& n = (*function)[id];
    return in_child_rows(id) ? n.shape.dims[1] : n.shape.numel();
  }
  // Value `id`'s shape as its rows hold it: [1, d] per child row in child row space.
  Shape stored_shape(ir::ValueId id) const {
    const Shape& shape = (*function)[id].shape;
    return in_child_rows(id) ? Shape::mat(1, shape.dims[1]) : shape;
  }
};

struct TypePlan {
  FunctionPlan forward, backward;
};

// dst[i] = f(src[i]) for i < n: a vectorised unary function.
struct UnaryKernelRef {
  void (*entry)(const float* src, float* dst, int64_t n) = nullptr;
  std::shared_ptr<const void> owner;
};

// The CUDA module of a plan lowered for the GPU (VJIT_DEVICE=cuda): every fused
// kernel of every type and the fixed kernels the CUDA executor runs for the
// other steps (codegen/cuda_source.h), compiled by NVRTC for one architecture.
struct CudaModule {
  int arch = 0;       // sm_<arch> (compute_<arch> for PTX)
  bool ptx = false;
  std::string image;  // what cuModuleLoadData takes; empty: the plan is for the CPU
};

enum class Pass : uint8_t { Forward, Backward };

struct RowPlacement;  // runtime/row_placement.h

struct ExecPlan {
  std::vector<TypePlan> types;
  // Where rows are read and written, decided once for the whole program
  // (runtime/row_placement.h); set by jit::lower_program.
  std::shared_ptr<const RowPlacement> placement;
  // The lowered F and ∂F of every type (FunctionPlan::function points into them).
  std::vector<std::shared_ptr<const ir::Function>> functions;
  // exp, vectorised: the softmax of the loss ops runs through it (a std::exp
  // loop where there is none).
  UnaryKernelRef exp;
  CudaModule cuda;
};

}  // namespace vjit::runtime
