// Lowering as one ordered list of passes (Halide's Lower.cpp): from the F that
// Program holds for each vertex type (verified and simplified) to the
// execution plan. The reference interpreter runs Program's F and ∂F as they
// are, so every pass below is checked against the unoptimised program.
//
// For each vertex type:
//   merge_matmuls        F → F     products of one operand by several parameters
//                                  become one GEMM (Options::Tuning::merge_matmuls)
//   simplify             F → F     CSE, DCE; F's value ids are final after it
//                                  (∂F's Fwd nodes name them)
//   gather_slices        F → F     slices of a gather become gathers of their own,
//                                  so a concat of them is gathered in place
//                                  (VJIT_ROW_PLACEMENT slices and tables)
//   differentiate        F → ∂F
//   join_gather_grads    ∂F → ∂F   after gather_slices: the slices' gradients of one
//                                  slot back to one add per row
//   simplify_slices      ∂F → ∂F   a stacked product's gradient back to per-part terms
//   simplify             ∂F → ∂F   CSE, DCE
// then for F and for ∂F:
//   fold_outer_products  which Outer nodes a ParamGrad computes as one GEMM
//   classify_phases      eager / core / lazy per node
//   sink_elementwise_into_core  eager elementwise nodes only tasks read join the
//                        tasks' kernels (Options::Tuning::fuse_across_phases)
//   find_fusion_groups   elementwise groups (Options::Tuning::fusion)
//   compile_kernels      a kernel per group through the kernel cache; a group the
//                        JIT refuses runs the reference kernel (logged once).
//                        For VJIT_DEVICE=cuda: CUDA source per group, compiled
//                        with the executor's fixed kernels into one NVRTC module
//   fold_bias_adds       bias adds the GEMM does in its epilogue (Options::Tuning::epilogue)
//   order_steps          the plan's eager, core and lazy steps; runs of GEMMs of one
//                        shape batched (Options::Tuning::batch_gemms)
// With VJIT_ROW_PLACEMENT=tables (a CPU level), F's kernels are compiled
// last: once every type's F is planned, the parts of each type's scattered row
// that its fused kernels compute and parents gather into buffers are known
// (runtime/forwarding.h), and only then are F's kernels compiled, writing
// those parts a second time (VJIT_LOG=passes prints the lowering of each
// type's F, with compile_kernels after order_steps, and ∂F after the IR
// passes of every type).
// VJIT_LOG=passes prints the IR (or the analysis) after each pass;
// VJIT_LOG=kernels prints each kernel compiled or found in the cache.
#include "ir/ops.h"
#include "jit/pipeline.h"

#include <algorithm>
#include <iostream>
#include <mutex>
#include <queue>
#include <set>
#include <sstream>
#include <tuple>

#include "codegen/cuda_source.h"
#include "codegen/jit_kernels.h"
#include "ir/autodiff.h"
#include "ir/child_rows.h"
#include "ir/fusion.h"
#include "ir/op_semantics.h"
#include "ir/merge_matmuls.h"
#include "ir/passes.h"
#include "jit/kernel_cache.h"
#include "jit/nvrtc.h"
#include "runtime/cuda_driver.h"
#include "runtime/forwarding.h"
#include "runtime/row_placement.h"
#include "runtime/row_pointers.h"
#include "vjit/error.h"

namespace vjit::jit {

namespace {

using ir::ValueId;

runtime::KernelTarget kernel_target(codegen::Isa isa) {
  switch (isa) {
    case codegen::Isa::Avx512: return runtime::KernelTarget::X86Avx512;
    case codegen::Isa::Avx2: return runtime::KernelTarget::X86Avx2;
    case codegen::Isa::Neon: return runtime::KernelTarget::A64Neon;
    case codegen::Isa::Scalar: break;
  }
  return runtime::KernelTarget::HostReference;
}

codegen::Isa isa_of(const Options& options) {
  codegen::Isa isa = codegen::parse_isa(std::string(to_string(options.tuning.isa)));
  codegen::require_isa(isa);
  return isa;
}

// Prints, with VJIT_LOG=passes, what each pass made of one vertex type:
// "[vjit] after merge_matmuls: cell (forward)" and the IR or the analysis.
class PassLog {
 public:
  PassLog(const Options& options, std::string type) : on_(options.logs(Options::Log::Passes)), type_(std::move(type)) {}
  // A log that prints nothing (a lowering whose plan is only looked at).
  static PassLog off() { return PassLog(); }
  // The same log, printing into `out` instead (printed later, in order).
  PassLog into(std::ostream& out) const {
    PassLog log = *this;
    log.out_ = &out;
    return log;
  }

  // The function after `pass`; "(unchanged)" when its text equals `before`'s.
  void function(const char* pass, const char* which, const ir::Function& after,
                const ir::Function* before = nullptr) const {
    if (!on_) return;
    std::string text = ir::to_string(after);
    if (before != nullptr && ir::to_string(*before) == text) text = "(unchanged)\n";
    print(pass, which, text);
  }
  void print(const char* pass, const char* which, const std::string& text) const {
    if (on_) *out_ << "[vjit] after " << pass << ": " << type_ << " (" << which << ")\n" << text;
  }
  bool on() const { return on_; }

 private:
  PassLog() : on_(false) {}
  bool on_;
  std::string type_;
  std::ostream* out_ = &std::cerr;
};

// The kernel spec of a group: inputs first, then one instruction per node.
// A group in child row space (runtime::FunctionPlan::child_rows) runs one row
// per child: its width is a block row's.
codegen::KernelSpec kernel_spec(const runtime::FunctionPlan& plan, const ir::FusionGroup& group) {
  const ir::Function& f = *plan.function;
  codegen::KernelSpec spec;
  spec.width = plan.row_width(group.nodes[0]);
  for (ValueId id : group.nodes)
    VJIT_INTERNAL_CHECK(plan.in_child_rows(id) == plan.in_child_rows(group.nodes[0]),
                        "a fused group mixes child rows and vertex rows: " << ir::to_string(f, id));
  std::vector<int> operand_of(f.nodes.size(), -1);
  for (ValueId in : group.inputs) {
    operand_of[size_t(in)] = int(spec.inputs.size());
    spec.inputs.push_back({plan.row_width(in) != spec.width});
  }
  for (ValueId id : group.nodes) {
    const ir::Node& n = f[id];
    codegen::KernelInstr instr{n.op, operand_of[size_t(n.args[0])], n.args.size() > 1 ? operand_of[size_t(n.args[1])] : -1,
                               float(ir::unary_constant(n))};
    operand_of[size_t(id)] = int(spec.inputs.size() + spec.instrs.size());
    spec.instrs.push_back(instr);
  }
  for (ValueId out : group.outputs) spec.outputs.push_back(operand_of[size_t(out)] - int(spec.inputs.size()));
  return spec;
}

// Orders the steps of one phase so that every step follows the steps it reads
// (a fused group runs where all its inputs are ready), keeping function order
// where dependencies allow.
std::vector<runtime::Step> order_steps(const ir::Function& f, const runtime::FunctionPlan& plan, ir::Phase phase,
                                       const std::vector<int>& group_of) {
  size_t n = f.nodes.size();
  // unit_of[id]: the step that computes node id (a folded outer product belongs to its ParamGrad).
  std::vector<int> unit_of(n, -1);
  std::vector<runtime::Step> units;
  std::vector<int> unit_key;
  for (ValueId id = 0; id < f.size(); ++id) {
    if (plan.phases[size_t(id)] != phase) continue;
    int g = group_of[size_t(id)];
    if (g >= 0) {
      bool first = true;
      for (ValueId other = 0; other < id; ++other) first = first && group_of[size_t(other)] != g;
      if (first) {
        units.push_back({-1, g});
        unit_key.push_back(id);
      }
      continue;
    }
    if (plan.folded[size_t(id)]) continue;
    units.push_back({id, -1});
    unit_key.push_back(id);
  }
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].node >= 0) unit_of[size_t(units[u].node)] = int(u);
    else
      for (ValueId id = 0; id < f.size(); ++id)
        if (group_of[size_t(id)] == units[u].fused) unit_of[size_t(id)] = int(u);
  }
  for (ValueId id = 0; id < f.size(); ++id)  // folded outer products join their reader
    if (plan.folded[size_t(id)] && group_of[size_t(id)] < 0)
      for (ValueId user = id + 1; user < f.size(); ++user)
        for (ValueId arg : f[user].args)
          if (arg == id) unit_of[size_t(id)] = unit_of[size_t(user)];
  std::vector<std::vector<int>> readers(units.size());
  std::vector<int> pending(units.size(), 0);
  for (ValueId id = 0; id < f.size(); ++id) {
    int u = unit_of[size_t(id)];
    if (u < 0) continue;
    for (ValueId arg : f[id].args) {
      int v = unit_of[size_t(arg)];
      if (v < 0 || v == u) continue;
      readers[size_t(v)].push_back(u);
      ++pending[size_t(u)];
    }
  }
  std::priority_queue<std::pair<int, int>, std::vector<std::pair<int, int>>, std::greater<>> ready;
  for (size_t u = 0; u < units.size(); ++u)
    if (pending[u] == 0) ready.push({unit_key[u], int(u)});
  std::vector<runtime::Step> order;
  while (!ready.empty()) {
    int u = ready.top().second;
    ready.pop();
    order.push_back(units[size_t(u)]);
    for (int r : readers[size_t(u)])
      if (--pending[size_t(r)] == 0) ready.push({unit_key[size_t(r)], r});
  }
  VJIT_INTERNAL_CHECK(order.size() == units.size(), "fusion made the steps of " << f.name << " cyclic");
  return order;
}

// The product a step runs as one GEMM over the rows: its node, or the product
// folded into the add it is (the GEMM's epilogue); -1 for any other step.
ValueId row_gemm_of(const ir::Function& f, const runtime::FunctionPlan& plan, const runtime::Step& step) {
  if (step.fused >= 0) return -1;
  const ir::Node& n = f[step.node];
  if (n.op == ir::Op::MatMul) return ir::is_row_gemm(f, n) ? step.node : -1;
  if (n.op != ir::Op::Add) return -1;
  for (ValueId arg : n.args)
    if (plan.folded[size_t(arg)] && ir::is_row_gemm(f, f[arg])) return arg;
  return -1;
}

// Runs of consecutive steps that are GEMMs over the rows of one shape (the
// weight's shape, transposes and side), none reading another's output, run
// as one batched GEMM (Step::batched): a Tree-LSTM's U_f1·h1 and U_f2·h2.
void batch_row_gemms(const ir::Function& f, const runtime::FunctionPlan& plan, std::vector<runtime::Step>& steps) {
  auto shape_key = [&](ValueId product) {
    const ir::Node& p = f[product];
    const int side = f[p.args[0]].uniform ? 0 : 1;
    const Shape& w = f[p.args[size_t(side)]].shape;
    return std::tuple{side, p.trans_a, p.trans_b, w.dims[0], w.dims[1], p.shape.numel()};
  };
  for (size_t first = 0; first < steps.size();) {
    const ValueId product = row_gemm_of(f, plan, steps[first]);
    size_t end = first + 1;
    if (product >= 0) {
      std::vector<ValueId> written{steps[first].node};
      for (; end < steps.size(); ++end) {
        const ValueId next = row_gemm_of(f, plan, steps[end]);
        if (next < 0 || shape_key(next) != shape_key(product)) break;
        bool reads_batch = false;
        for (ValueId id : {steps[end].node, next})
          for (ValueId arg : f[id].args)
            reads_batch = reads_batch || std::find(written.begin(), written.end(), arg) != written.end();
        if (reads_batch) break;
        written.push_back(steps[end].node);
      }
    }
    steps[first].batched = int(end - first);
    first = end;
  }
}

// The nodes of `function` flagged in `flags`, one per line, or "(none)".
std::string flagged_nodes(const ir::Function& function, const std::vector<bool>& flags) {
  std::string out;
  for (ValueId id = 0; id < function.size(); ++id)
    if (flags[size_t(id)]) out += "  " + ir::to_string(function, id) + "\n";
  return out.empty() ? "  (none)\n" : out;
}

// True the first time `key` is reported in this process.
bool first_report(const std::string& key) {
  static std::mutex mutex;
  static std::set<std::string> reported;
  std::lock_guard<std::mutex> lock(mutex);
  return reported.insert(key).second;
}

// The kernel of one fused group: the JIT's for `isa`, or the reference kernel
// (Isa::Scalar) when the JIT refuses the group (codegen throws). The refusal is
// reported once per kernel per process; the kernel cache does not keep the
// failed build, so a later lowering tries the JIT again.
std::shared_ptr<const CompiledKernel> compile_kernel(const codegen::KernelSpec& spec, codegen::Isa isa,
                                                     const Options& options) {
  KernelLookup found;
  try {
    found = KernelCache::global().lookup(spec, isa, options.perf_map);
  } catch (const Error& e) {
    if (isa == codegen::Isa::Scalar) throw;
    const std::string name = codegen::fused_kernel_name(spec, isa);
    if (first_report(name))
      std::cerr << "[vjit] kernel " << name << ": " << e.what() << "; using the reference kernel\n";
    found = KernelCache::global().lookup(spec, codegen::Isa::Scalar);
  }
  if (options.logs(Options::Log::Kernels))
    std::cerr << "[vjit] kernel " << found.kernel->name << " isa=" << codegen::isa_name(found.kernel->isa)
              << " code_bytes=" << found.kernel->code_bytes << (found.hit ? " cache hit" : " compiled") << "\n";
  return found.kernel;
}

// The step that runs a group's kernel (the JIT's for `isa`, else the reference kernel).
// `forwarded`: values written a second time, into the parents' gathers
// (runtime/forwarding.h): each that is an output of the group is listed again
// after the outputs.
runtime::FusedStep fused_step(const runtime::FunctionPlan& plan, ir::FusionGroup group, codegen::Isa isa,
                              const Options& options, const std::vector<ir::ValueId>& forwarded) {
  int repeated = 0;
  for (ir::ValueId v : forwarded)
    if (std::find(group.outputs.begin(), group.outputs.end(), v) != group.outputs.end()) {
      group.outputs.push_back(v);
      ++repeated;
    }
  std::shared_ptr<const CompiledKernel> kernel = compile_kernel(kernel_spec(plan, group), isa, options);
  runtime::Kernel code{kernel->name, kernel_target(kernel->isa), kernel->entry, kernel->context, kernel};
  return {std::move(code), group.inputs, group.outputs, plan.row_width(group.nodes[0]), repeated};
}

// VJIT_ROW_PLACEMENT=tables: gives a core step of ∂F whose outputs include
// gradient parts (runtime::gradient_parts: `parts`) a second kernel that adds
// those into their rows (FusedStep::accumulating).
void add_accumulating_kernel(const std::vector<runtime::GradientPart>& parts, codegen::Isa isa,
                             const Options& options, const codegen::KernelSpec& spec, runtime::FusedStep& step) {
  for (size_t o = 0; o < step.outputs.size(); ++o)
    if (parts[size_t(step.outputs[o])].gather_grad >= 0) step.accumulated.push_back(int(o));
  if (step.accumulated.empty()) return;
  std::shared_ptr<const CompiledKernel> kernel =
      compile_kernel(codegen::accumulating_spec(spec, step.accumulated), isa, options);
  step.accumulating = {kernel->name, kernel_target(kernel->isa), kernel->entry, kernel->context, kernel};
}

// What a forward pass that no backward follows runs for the group
// (FunctionPlan::inference_fused): with VJIT_INFER_KERNELS, a kernel that
// leaves out the outputs only ∂F reads, and the work only they need; `full`
// where nothing can be left out.
runtime::FusedStep inference_step(const runtime::FunctionPlan& plan, const ir::FusionGroup& group,
                                  const runtime::FusedStep& full, codegen::Isa isa, const Options& options,
                                  const std::vector<ir::ValueId>& forwarded) {
  if (!is_on(options.tuning.infer_kernels)) return full;
  const ir::FusionGroup part = ir::forward_only_part(*plan.function, group);
  if (part.outputs.size() == group.outputs.size()) return full;
  if (part.outputs.empty()) return {{}, {}, {}, full.width};  // nothing to run
  return fused_step(plan, part, isa, options, forwarded);
}

// "<kernel> (<isa>)" of fused step g, and its inference kernel where it differs; one line.
std::string describe_kernels(const runtime::FunctionPlan& plan, size_t g) {
  auto describe = [](const runtime::Kernel& code) {
    const auto& kernel = *static_cast<const CompiledKernel*>(code.owner.get());  // set by compile_kernel's callers
    return kernel.name + " (" + codegen::isa_name(kernel.isa) + ")";
  };
  const runtime::FusedStep &full = plan.fused[g], &inference = plan.inference_fused[g];
  std::string line = describe(full.kernel);
  if (inference.outputs.empty()) line += "; inference: skipped";
  else if (plan.inference_differs(g))
    line += "; inference: " + describe(inference.kernel) + ", " + std::to_string(inference.outputs.size()) + " of " +
            std::to_string(full.outputs.size()) + " outputs";
  if (full.accumulating.entry)
    line += "; accumulating " + std::to_string(full.accumulated.size()) + " outputs: " + describe(full.accumulating);
  return line + "\n";
}

// compile_kernels (CPU): the kernel of each fused group of `plan` (whose
// steps stand in plan.fused, in the groups' order), its inference kernel
// and, for a core step of ∂F that computes gradient parts, its accumulating
// one. The kernels also write plan.forwarded (F) a second time.
void compile_fused_kernels(runtime::FunctionPlan& plan, const std::vector<ir::FusionGroup>& groups,
                           const Options& options, const PassLog& log, const char* which) {
  const codegen::Isa isa = isa_of(options);
  std::vector<ValueId> forwarded;
  for (const runtime::ForwardedPart& part : plan.forwarded) forwarded.push_back(part.value);
  const std::vector<runtime::GradientPart> gradient_parts =
      uses_row_tables(options.tuning.row_placement) && !groups.empty() ? runtime::gradient_parts(*plan.function)
                                                                       : std::vector<runtime::GradientPart>{};
  std::string compiled;
  for (size_t index = 0; index < groups.size(); ++index) {
    const ir::FusionGroup& group = groups[index];
    plan.fused[index] = fused_step(plan, group, isa, options, forwarded);
    plan.inference_fused[index] = inference_step(plan, group, plan.fused[index], isa, options, forwarded);
    if (!gradient_parts.empty() && plan.phases[size_t(group.nodes[0])] == ir::Phase::Core)
      add_accumulating_kernel(gradient_parts, isa, options, kernel_spec(plan, group), plan.fused[index]);
    compiled += "  group " + std::to_string(index) + ": " + describe_kernels(plan, index);
  }
  log.print("compile_kernels", which, compiled.empty() ? "  (no groups)\n" : compiled);
}

// The passes from fold_outer_products on, for F or ∂F (see the list above).
// `keep` marks values written to memory even inside a fused group. With
// `cuda`, each group's kernel is CUDA source, added there (compiled later).
// With `deferred` (F, CPU, VJIT_ROW_PLACEMENT=tables), no kernel is compiled
// yet: the fused groups go there, for compile_fused_kernels once the parts
// the kernels forward are known (add_forwarded_parts).
runtime::FunctionPlan lower_function(const ir::Function& function, const Options& options,
                                     const std::vector<bool>& keep, const PassLog& log, const char* which,
                                     std::vector<codegen::CudaKernelSource>* cuda, const std::vector<bool>& child_rows,
                                     std::vector<ir::FusionGroup>* deferred = nullptr) {
  runtime::FunctionPlan plan;
  plan.function = &function;
  plan.child_rows = child_rows;
  for (ValueId id = 0; id < function.size(); ++id)
    if (function[id].op == ir::Op::Scatter) plan.scatter_value = function[id].args[0];

  // The CUDA device sums per-vertex matrix products with a kernel of its
  // own, except those the runner accumulates as GEMMs over the matrices' rows
  // (Runner::accumulate_stacked_products); only the CPU device accumulates
  // the others inside the ParamGrad.
  plan.folded = ir::fold_outer_products(function, /*per_vertex_matmuls=*/cuda == nullptr);
  log.print("fold_outer_products", which, flagged_nodes(function, plan.folded));

  plan.phases = ir::classify_phases(function, options.tuning.lazy);
  if (log.on()) {
    std::string text;
    for (ValueId id = 0; id < function.size(); ++id)
      text += std::string("  ") + ir::phase_name(plan.phases[size_t(id)]) + "\t" + ir::to_string(function, id) + "\n";
    log.print("classify_phases", which, text);
  }

  if (options.tuning.fusion && options.tuning.fuse_across_phases) {
    int moved = ir::sink_elementwise_into_core(function, plan.phases, keep);
    log.print("sink_elementwise_into_core", which, std::to_string(moved) + " nodes moved from eager to core\n");
  }

  std::vector<ir::FusionGroup> groups;
  if (options.tuning.fusion) groups = ir::find_fusion_groups(function, plan.phases, keep);
  log.print("find_fusion_groups", which, options.tuning.fusion ? ir::to_string(function, groups) : "(off: fusion=off)\n");

  std::vector<int> group_of(function.nodes.size(), -1);
  if (cuda != nullptr) {
    std::string compiled;
    for (const ir::FusionGroup& group : groups) {
      codegen::CudaKernelSource source = codegen::cuda_fused_kernel(kernel_spec(plan, group));
      int index = int(plan.fused.size());
      plan.fused.push_back({{source.name, runtime::KernelTarget::Cuda, nullptr, nullptr, nullptr},
                            group.inputs, group.outputs, plan.row_width(group.nodes[0])});
      plan.inference_fused.push_back(plan.fused.back());  // the CUDA executor runs the full kernel
      for (ValueId id : group.nodes) {
        group_of[size_t(id)] = index;
        plan.folded[size_t(id)] = std::find(group.outputs.begin(), group.outputs.end(), id) == group.outputs.end();
      }
      compiled += "  group " + std::to_string(index) + ": " + source.name + " (cuda)\n";
      bool known = false;
      for (const codegen::CudaKernelSource& k : *cuda) known = known || k.name == source.name;
      if (!known) cuda->push_back(std::move(source));
    }
    log.print("compile_kernels", which, compiled.empty() ? "  (no groups)\n" : compiled);
  } else {
    for (const ir::FusionGroup& group : groups) {  // each group's step, its kernels compiled below
      const int index = int(plan.fused.size());
      plan.fused.push_back({{}, group.inputs, group.outputs, plan.row_width(group.nodes[0])});
      plan.inference_fused.push_back(plan.fused.back());
      for (ValueId id : group.nodes) {
        group_of[size_t(id)] = index;
        plan.folded[size_t(id)] = std::find(group.outputs.begin(), group.outputs.end(), id) == group.outputs.end();
      }
    }
    if (deferred) *deferred = std::move(groups);
    else compile_fused_kernels(plan, groups, options, log, which);
  }
  plan.fused_of = group_of;

  if (options.tuning.epilogue) {
    // Only the CPU executor adds a bias to every row of a block product.
    std::vector<bool> products =
        ir::fold_bias_adds(function, plan.phases, group_of, keep, /*block_products=*/cuda == nullptr);
    for (ValueId id = 0; id < function.size(); ++id)
      if (products[size_t(id)]) plan.folded[size_t(id)] = true;
    log.print("fold_bias_adds", which, flagged_nodes(function, products));
  } else {
    log.print("fold_bias_adds", which, "(off: epilogue=off)\n");
  }

  plan.eager = order_steps(function, plan, ir::Phase::Eager, group_of);
  plan.core = order_steps(function, plan, ir::Phase::Core, group_of);
  plan.lazy = order_steps(function, plan, ir::Phase::Lazy, group_of);
  if (is_on(options.tuning.batch_gemms))
    for (std::vector<runtime::Step>* steps : {&plan.eager, &plan.core, &plan.lazy}) batch_row_gemms(function, plan, *steps);
  if (log.on()) {
    std::ostringstream text;
    for (auto [phase, steps] : {std::pair{"eager", &plan.eager}, std::pair{"core", &plan.core},
                                std::pair{"lazy", &plan.lazy}}) {
      text << "  " << phase << ":";
      for (size_t i = 0, batch_end = 0; i < steps->size(); ++i) {  // [a batched GEMM's steps]
        const runtime::Step& step = (*steps)[i];
        if (step.batched > 1) batch_end = i + size_t(step.batched);
        text << (step.batched > 1 ? " [" : " ");
        if (step.fused >= 0) text << "fused" << step.fused;
        else text << "%" << step.node;
        if (i + 1 == batch_end) text << "]";
      }
      text << "\n";
    }
    log.print("order_steps", which, text.str());
  }
  return plan;
}

// Forward values ∂F reads: they are written to memory even inside a fused group.
std::vector<bool> values_read_by_backward(const ir::Function& forward, const ir::Function& backward) {
  std::vector<bool> keep(forward.nodes.size(), false);
  for (const ir::Node& n : backward.nodes)
    if (n.op == ir::Op::Fwd) keep[size_t(n.forward_value)] = true;
  return keep;
}

struct LoweredFunctions {
  std::shared_ptr<const ir::Function> forward, backward;
};

// The passes from merge_matmuls to the simplification of ∂F.
LoweredFunctions lower_functions(const ir::Function& program_forward, const Options& options, const PassLog& log) {
  ir::Function forward = program_forward;
  if (options.tuning.merge_matmuls) {
    forward = ir::merge_matmuls(program_forward);
    ir::verify(forward);
    log.function("merge_matmuls", "forward", forward, &program_forward);
  } else {
    log.print("merge_matmuls", "forward", "(off: merge_matmuls=off)\n");
  }
  ir::Function simplified = ir::simplify(forward);
  log.function("simplify", "forward", simplified, &forward);
  const bool gather_slices = gathers_slices(options.tuning.row_placement);
  if (gather_slices) {
    ir::Function sliced_gathers = ir::gather_slices(simplified);
    ir::verify(sliced_gathers);
    log.function("gather_slices", "forward", sliced_gathers, &simplified);
    simplified = std::move(sliced_gathers);
  } else {
    log.print("gather_slices", "forward", "(off: row_placement=copy)\n");
  }

  ir::Function backward = ir::differentiate(simplified);
  ir::verify(backward);
  log.function("differentiate", "backward", backward);
  if (gather_slices) {
    ir::Function joined = ir::join_gather_grads(backward);
    ir::verify(joined);
    log.function("join_gather_grads", "backward", joined, &backward);
    backward = std::move(joined);
  }
  ir::Function sliced = ir::simplify_slices(backward);
  ir::verify(sliced);
  log.function("simplify_slices", "backward", sliced, &backward);
  ir::Function backward_simplified = ir::simplify(sliced);
  ir::verify(backward_simplified);
  log.function("simplify", "backward", backward_simplified, &sliced);
  return {std::make_shared<const ir::Function>(std::move(simplified)),
          std::make_shared<const ir::Function>(std::move(backward_simplified))};
}

}  // namespace

// VJIT_ROW_PLACEMENT=tables: once every type is lowered, F without kernels (the
// parents' gathers decide what is forwarded), the kernels of each type's F
// are compiled (`forward_groups`), writing the parts to forward a second time.
// `forward_logs`, `backward_logs`: each type's lowering, printed in order.
void add_forwarded_parts(const Program& program, const Options& options,
                         const std::vector<std::vector<ir::FusionGroup>>& forward_groups,
                         const std::vector<std::ostringstream>& forward_logs,
                         const std::vector<std::ostringstream>& backward_logs, runtime::ExecPlan& plan) {
  std::vector<std::vector<int>> pointers(plan.types.size());
  if (uses_row_tables(options.tuning.row_placement))
    for (size_t t = 0; t < plan.types.size(); ++t)
      pointers[t] = runtime::row_pointer_parts(plan.types[t].forward, plan.types[t].backward);
  const std::vector<TypeSignature> signatures = program.signatures();
  const std::vector<std::vector<runtime::ForwardedPart>> parts =
      runtime::forwarded_parts(plan, runtime::forward_targets(plan, signatures, pointers));
  for (int t = 0; t < program.num_types(); ++t) {
    runtime::FunctionPlan& forward = plan.types[size_t(t)].forward;
    forward.forwarded = parts[size_t(t)];
    std::cerr << forward_logs[size_t(t)].str();
    compile_fused_kernels(forward, forward_groups[size_t(t)], options, PassLog(options, program.type_name(t)),
                          "forward");
    std::cerr << backward_logs[size_t(t)].str();
  }
}

// The children-block values the type's steps run in child row space: those
// whose padding rows change no result (ir/child_rows.h), with
// VJIT_CHILD_ROWS.
// VJIT_LOG=passes lists them.
ir::ChildRowValues child_rows_of(const ir::Function& forward, const ir::Function& backward, const Options& options,
                                 const PassLog& log) {
  if (!is_on(options.tuning.child_rows)) return {};
  ir::ChildRowValues values = ir::child_row_values(forward, &backward);
  if (!values.any()) return {};
  if (log.on()) {
    std::ostringstream listing;
    for (const auto& [which, function, flags] : {std::tuple{"forward", &forward, &values.forward},
                                                 std::tuple{"backward", &backward, &values.backward}})
      for (ir::ValueId id = 0; id < function->size(); ++id)
        if ((*flags)[size_t(id)]) listing << which << " " << ir::to_string(*function, id) << "\n";
    log.print("child_rows", "values run in child row space", listing.str());
  }
  return values;
}

runtime::ExecPlan lower_program(const Program& program, const Options& given) {
  const Options options = given.resolve();
  runtime::ExecPlan plan;
  std::vector<codegen::CudaKernelSource> cuda_kernels;
  std::vector<codegen::CudaKernelSource>* cuda = options.device == Options::Device::Cuda ? &cuda_kernels : nullptr;
  codegen::Isa isa = isa_of(options);
  if (isa != codegen::Isa::Scalar) {
    codegen::ArrayKernel exp = codegen::compile_exp_kernel(isa, options.perf_map);
    plan.exp = {exp.entry, exp.owner};
  }
  // Forwarding (VJIT_ROW_PLACEMENT=tables): F's kernels are compiled once
  // every type is planned, when what each forwards is known
  // (add_forwarded_parts); each type's log is printed then, in order.
  const bool forwarding = uses_row_tables(options.tuning.row_placement) && cuda == nullptr;
  const size_t deferred_types = size_t(forwarding ? program.num_types() : 0);
  std::vector<std::ostringstream> forward_logs(deferred_types), backward_logs(deferred_types);
  std::vector<std::vector<ir::FusionGroup>> forward_groups(deferred_types);
  for (int t = 0; t < program.num_types(); ++t) {
    PassLog log(options, program.type_name(t));
    LoweredFunctions lowered = lower_functions(program.forward(t), options, log);
    plan.functions.push_back(lowered.forward);
    plan.functions.push_back(lowered.backward);
    const ir::Function& forward = *lowered.forward;
    const ir::Function& backward = *lowered.backward;
    const std::vector<bool> keep = values_read_by_backward(forward, backward);
    const ir::ChildRowValues child_rows = child_rows_of(forward, backward, options, log);
    plan.types.push_back(
        {forwarding ? lower_function(forward, options, keep, log.into(forward_logs[size_t(t)]), "forward", nullptr,
                                     child_rows.forward, &forward_groups[size_t(t)])
                    : lower_function(forward, options, keep, log, "forward", cuda, child_rows.forward),
         lower_function(backward, options, std::vector<bool>(backward.nodes.size(), false),
                        forwarding ? log.into(backward_logs[size_t(t)]) : log, "backward", cuda,
                        child_rows.backward)});
  }
  if (forwarding) add_forwarded_parts(program, options, forward_groups, forward_logs, backward_logs, plan);
  plan.placement = std::make_shared<const runtime::RowPlacement>(
      runtime::place_rows(plan, program.signatures(), uses_row_tables(options.tuning.row_placement)));
  if (cuda) {
    cuda->push_back({"executor", codegen::cuda_runtime_kernels_source() + codegen::cuda_index_kernels_source()});
    const int arch = runtime::CudaDevice::get().info().arch();
    CudaModuleImage image = compile_cuda_module(codegen::cuda_module_source(*cuda), arch,
                                                cuda_module_cache_dir(options.cache_dir), "the CUDA module of a plan");
    if (options.logs(Options::Log::Kernels))
      std::cerr << "[vjit] CUDA module: " << cuda->size() << " kernel sources for sm_" << arch
                << (image.from_memory ? " (memory cache)" : image.from_disk ? " (disk cache)" : " (compiled)") << "\n";
    plan.cuda = {image.arch, image.ptx, std::move(image.image)};
  }
  return plan;
}

}  // namespace vjit::jit
