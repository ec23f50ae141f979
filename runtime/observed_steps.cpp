// The runner's observation of the steps it runs, for a device that turns it
// on (observe_steps): each step timed for VJIT_PROFILE (step_profile()) and,
// with VJIT_TRACE, each step that did work and each task recorded as an
// event. A step's time is the host's until the device has run it
// (Device::finish: the CUDA device waits for its stream, so profiling
// serialises the host with the GPU).
#include <algorithm>
#include <chrono>
#include <string>

#include "runtime/runner.h"

namespace vjit::runtime {

using ir::Node;

void Runner::observe_steps(bool profile, TraceRecorder* trace) {
  profile_ = profile;
  trace_ = trace;
  observe_steps_ = profile || trace;
}

void Runner::observe_step(Pass pass, const Rows& rows, const Step& step, Lane& lane) {
  const ExecStats before = *lane.stats;
  const int64_t trace_start = trace_ ? trace_->now() : 0;
  auto start = std::chrono::steady_clock::now();
  run_step(pass, rows, step, lane);
  if (profile_) device_.finish(lane);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (trace_) trace_step(pass, rows, step, lane, before, trace_start);
  if (!profile_) return;
  std::lock_guard<std::mutex> lock(step_accounts_mutex_);
  StepAccount& account = step_accounts_[&step];
  account.pass = pass;
  account.type = rows.type;
  account.seconds += seconds;
  account.calls += 1;
  account.rows += rows.count;
}

// One event for a step that did work, classified by what its counters say it
// did: a GEMM (with each product's M, N, K), a copy (with the bytes it moved;
// a gather read in place moved none and is no event), a fused kernel or
// another kernel (with the bytes of the rows it wrote).
void Runner::trace_step(Pass pass, const Rows& rows, const Step& step, const Lane& lane, const ExecStats& before,
                        int64_t start) {
  const ExecStats& after = *lane.stats;
  const FunctionPlan& fp = function_plan(pass, rows.type);
  TraceArgs args;
  args.type = rows.type;
  args.task = rows.task;
  args.rows = rows.count;
  if (step.fused >= 0) {
    const FusedStep& fused = fused_step(pass, rows.type, step.fused);
    if (fused.outputs.empty()) return;  // skipped: an inference pass needs none of its outputs
    if (fp.in_child_rows(fused.outputs[0])) args.rows = child_rows(rows).count;
    args.cols = fused.width;
    args.bytes = args.rows * fused.width * int64_t(sizeof(float)) * int64_t(fused.inputs.size() + fused.outputs.size());
    trace_->record(fused.kernel.name, TraceCategory::Fused, start, args);
    return;
  }
  if (after.kernels == before.kernels) return;  // a view, a scatter or a uniform value: no work
  const Node& n = (*fp.function)[step.node];
  const std::string_view name = ir::op_name(n.op);
  args.cols = fp.row_width(step.node);
  if (fp.in_child_rows(step.node)) args.rows = child_rows(rows).count;
  if (after.gemm_calls > before.gemm_calls) {
    args.products = after.gemm_calls - before.gemm_calls;
    args.m = lane.last_gemm.m;
    args.n = lane.last_gemm.n;
    args.k = lane.last_gemm.k;
    args.bytes = (args.m * args.k + args.k * args.n + args.m * args.n) * int64_t(sizeof(float)) * args.products;
    trace_->record(name, TraceCategory::Gemm, start, args);
  } else if (is_copy(n.op)) {
    if (after.copy_calls == before.copy_calls) return;  // read or written in place
    args.bytes = after.copy_bytes - before.copy_bytes;
    trace_->record(name, TraceCategory::Copy, start, args);
  } else {
    args.bytes = args.rows * args.cols * int64_t(sizeof(float));
    trace_->record(name, TraceCategory::Kernel, start, args);
  }
}

std::vector<StepTime> Runner::step_profile() const {
  std::vector<StepTime> out;
  for (const auto& [step, account] : step_accounts_) {
    const FunctionPlan& fp = function_plan(account.pass, account.type);
    const char* phase = step >= fp.core.data() && step < fp.core.data() + fp.core.size()   ? "core"
                        : step >= fp.eager.data() && step < fp.eager.data() + fp.eager.size() ? "eager"
                                                                                               : "lazy";
    std::string label = std::string(account.pass == Pass::Forward ? "forward " : "backward ") +
                        program_.type_name(account.type) + " " + phase + " ";
    if (step->fused >= 0) {
      // One account for both kernels where inference runs a smaller one.
      const size_t g = size_t(step->fused);
      label += fp.fused[g].kernel.name;
      if (fp.inference_differs(g)) {
        const FusedStep& inference = fp.inference_fused[g];
        label += " (inference: " + (inference.outputs.empty() ? "skipped" : inference.kernel.name) + ")";
      }
    } else {
      const Node& n = (*fp.function)[step->node];
      label += "%" + std::to_string(step->node) + " " + ir::op_name(n.op) + " " + n.shape.str();
    }
    out.push_back({std::move(label), account.seconds, account.calls, account.rows});
  }
  std::sort(out.begin(), out.end(), [](const StepTime& a, const StepTime& b) { return a.seconds > b.seconds; });
  return out;
}

void Runner::reset_step_profile() {
  std::lock_guard<std::mutex> lock(step_accounts_mutex_);
  step_accounts_.clear();
}

}  // namespace vjit::runtime
