#include "runtime/row_placement.h"

#include <algorithm>

#include "ir/passes.h"
#include "runtime/row_pointers.h"
#include "vjit/error.h"

namespace vjit::runtime {

using ir::Node;
using ir::Op;
using ir::ValueId;

namespace {

// Per value of `f`: the gather slots whose rows the value is a view of (bit k:
// slot k, bit `fixed_arity`: the variadic sum); `forward` gives the forward
// function's masks for Fwd (nullptr for a forward function). A Gather read
// through row pointers (`pointer_parts`, row_pointer_parts of a forward
// function; nullptr: none) is no view: its table has every row of the batch,
// so a phase step over all rows reads it as it is (no task by task).
std::vector<uint64_t> gather_alias_masks(const ir::Function& f, int fixed_arity, const std::vector<uint64_t>* forward,
                                         const std::vector<int>* pointer_parts) {
  std::vector<uint64_t> mask(size_t(f.size()), 0);
  for (ValueId id = 0; id < f.size(); ++id) {
    const Node& n = f[id];
    switch (n.op) {
      case Op::Gather:
        if (!pointer_parts || (*pointer_parts)[size_t(id)] == 0) mask[size_t(id)] = uint64_t(1) << n.child_slot;
        break;
      case Op::GatherSum: mask[size_t(id)] = uint64_t(1) << fixed_arity; break;
      case Op::Slice:
      case Op::Reshape: mask[size_t(id)] = mask[size_t(n.args[0])]; break;
      case Op::Fwd: mask[size_t(id)] = forward ? (*forward)[size_t(n.forward_value)] : 0; break;
      default: break;
    }
  }
  return mask;
}

// Whether `id` is computed and read by task-by-task (core) steps only.
bool within_tasks(const FunctionPlan& fp, ValueId id) {
  const ir::Function& f = *fp.function;
  if (fp.phases[size_t(id)] != ir::Phase::Core || fp.folded[size_t(id)] || ir::is_view(f[id].op) || f[id].uniform)
    return false;
  for (ValueId user = id + 1; user < f.size(); ++user)
    if (std::find(f[user].args.begin(), f[user].args.end(), id) != f[user].args.end() &&
        fp.phases[size_t(user)] != ir::Phase::Core)
      return false;
  return true;
}

// Whether a GatherGrad of target Slot sends the gradient of the child's whole
// scatter row, not of part of it (ir::gather_slices).
bool covers_whole_slot(const ir::Function& f, const Node& gather_grad, const TypeSignature& signature) {
  return gather_grad.start == 0 &&
         f[gather_grad.args[0]].shape.numel() == signature.slot_shapes[size_t(gather_grad.child_slot)].numel();
}

// The GatherGrad nodes of a backward whose gradient value (and each value a
// Concat of it may hold in place) lives within the tasks: read by nothing but
// the GatherGrad (and the Concat), so it may be placed in the children's
// scatter-gradient rows. Only a gradient of all of a slot's row: where it
// covers part of it (ir::gather_slices), the rest of the row is the others'.
std::vector<ValueId> gather_grads_placeable_in_place(const FunctionPlan& fp, const TypeSignature& signature) {
  const ir::Function& f = *fp.function;
  const std::vector<int> readers = ir::reader_counts(f);
  std::vector<ValueId> out;
  for (ValueId id = 0; id < f.size(); ++id) {
    const Node& n = f[id];
    if (n.op != Op::GatherGrad || n.target == ir::GatherGradTarget::VariadicRows) continue;
    const ValueId g = n.args[0];
    if (n.target == ir::GatherGradTarget::Slot && !covers_whole_slot(f, n, signature)) continue;
    bool ok = readers[size_t(g)] == 1 && within_tasks(fp, g);
    if (ok && f[g].op == Op::Concat)
      for (ValueId arg : f[g].args) {
        const ValueId part = ir::under_reshapes(f, arg);
        ok = ok && (ir::is_view(f[part].op) || within_tasks(fp, part));
      }
    if (ok) out.push_back(id);
  }
  return out;
}

// Bit k for each slot k whose gradient one GatherGrad of the backward sends
// to the child's whole scatter row (none other of slot k, start 0, the
// slot's full width).
uint64_t whole_slot_gather_grads(const ir::Function& f, const TypeSignature& signature) {
  std::vector<int> per_slot(size_t(signature.fixed_arity), 0);
  uint64_t whole = 0;
  for (ValueId id = 0; id < f.size(); ++id) {
    const Node& n = f[id];
    if (n.op != Op::GatherGrad || n.target != ir::GatherGradTarget::Slot) continue;
    ++per_slot[size_t(n.child_slot)];
    if (covers_whole_slot(f, n, signature)) whole |= uint64_t(1) << n.child_slot;
  }
  for (size_t k = 0; k < per_slot.size(); ++k)
    if (per_slot[k] != 1) whole &= ~(uint64_t(1) << k);
  return whole;
}

// Whether node `id` runs as an elementwise node of its own (CpuExecutor::
// elementwise, row by row: it may write through row pointers): a unary or
// binary op other than dropout, none of whose operands is uniform (a bias
// add) or a product folded into it (the GEMM's epilogue writes it).
bool writes_elementwise_rows(const FunctionPlan& fp, ValueId id) {
  const ir::Function& f = *fp.function;
  const Node& n = f[id];
  const ir::OpKind kind = ir::op_kind(n.op);
  if ((kind != ir::OpKind::Unary && kind != ir::OpKind::Binary) || n.op == Op::Dropout) return false;
  for (ValueId arg : n.args)
    if (f[arg].uniform || fp.folded[size_t(arg)]) return false;
  return true;
}

// VJIT_ROW_PLACEMENT=tables, in the backward: a whole-slot GatherGrad whose
// gradient per-vertex products or fused kernels write (MV-RNN's [dB·a; dA],
// each part a product vertex by vertex, or the add that computes its rows of
// W_Mᵀ·dP; a Tree-LSTM's dc of a child, a fused kernel's output) has them
// write each row straight into the child's scatter-gradient
// row where that row's one contribution is this GatherGrad
// (BatchLayout::assigned_once), else into the gradient's own buffer, which the
// GatherGrad then adds. Per backward value: the gradient whose row pointers
// it is written through and its column there (gradient -1: rows of its own).
std::vector<GradientPointer> gradient_pointers(const FunctionPlan& fp, const TypeSignature& signature) {
  const ir::Function& f = *fp.function;
  const std::vector<int> readers = ir::reader_counts(f);
  const uint64_t whole_slots = whole_slot_gather_grads(f, signature);
  auto writes_rows_by_pointer = [&](ValueId id) {
    const Node& n = f[id];
    if (fp.folded[size_t(id)] || fp.phases[size_t(id)] != ir::Phase::Core || readers[size_t(id)] != 1) return false;
    if (fp.in_fused_step(id)) return true;  // an output of a fused kernel (run_fused: row tables)
    if (writes_elementwise_rows(fp, id)) return true;
    if (n.op == Op::MatMul) return !f[n.args[0]].uniform && !f[n.args[1]].uniform;  // one product per vertex
    if (n.op != Op::Add) return false;
    for (ValueId arg : n.args) {  // a weight's GEMM over the rows, this add its epilogue (Gemm::c_rows)
      const Node& p = f[arg];
      if (fp.folded[size_t(arg)] && p.op == Op::MatMul && p.shape.rank == 1 &&
          f[p.args[0]].uniform != f[p.args[1]].uniform)
        return true;
    }
    for (int side : {0, 1}) {  // the add that computes its rows of a folded product (product_rows_plus_outer)
      const Node& outer = f[n.args[size_t(side)]];
      const Node& slice = f[n.args[size_t(1 - side)]];
      if (outer.op == Op::Outer && fp.folded[size_t(n.args[size_t(side)])] && slice.op == Op::Slice &&
          fp.folded[size_t(slice.args[0])])
        return true;
    }
    return false;
  };
  std::vector<GradientPointer> out(size_t(f.size()));
  for (ValueId g = 0; g < f.size(); ++g) {
    const Node& gg = f[g];
    if (gg.op != Op::GatherGrad || gg.target != ir::GatherGradTarget::Slot || !(whole_slots >> gg.child_slot & 1))
      continue;  // not the one GatherGrad of its slot, covering the child's whole row
    const ValueId gradient = gg.args[0];
    if (readers[size_t(gradient)] != 1 || fp.phases[size_t(gradient)] != ir::Phase::Core || f[gradient].uniform)
      continue;
    const std::vector<ValueId> parts =
        f[gradient].op == Op::Concat ? f[gradient].args : std::vector<ValueId>{gradient};
    std::vector<std::pair<ValueId, int64_t>> written;  // value, column
    bool ok = true;
    int64_t column = 0;
    for (ValueId part : parts) {
      ValueId id = part;
      for (; f[id].op == Op::Reshape && readers[size_t(id)] == 1; id = f[id].args[0]) written.emplace_back(id, column);
      ok = ok && writes_rows_by_pointer(id);
      written.emplace_back(id, column);
      column += f[part].shape.numel();
    }
    if (!ok) continue;
    out[size_t(gradient)] = {gradient, 0};
    for (auto [id, at] : written) out[size_t(id)] = {gradient, at};
  }
  return out;
}

// The gather slots a step reads in place: its inputs' masks, looking through
// nodes folded into it (a weight gradient's outer product, a biased product,
// the rows of a product an add computes).
uint64_t step_reads(const FunctionPlan& fp, const std::vector<uint64_t>& alias, const Step& step) {
  if (step.fused >= 0) {
    uint64_t mask = 0;
    for (ValueId in : fp.fused[size_t(step.fused)].inputs) mask |= alias[size_t(in)];
    return mask;
  }
  uint64_t mask = 0;
  std::vector<ValueId> pending{step.node};
  while (!pending.empty()) {
    ValueId id = pending.back();
    pending.pop_back();
    for (ValueId arg : (*fp.function)[id].args) {
      mask |= alias[size_t(arg)];
      const Node& n = (*fp.function)[arg];
      const bool slice_of_folded = n.op == Op::Slice && fp.folded[size_t(n.args[0])];  // product_rows_plus_outer
      if (fp.folded[size_t(arg)] || slice_of_folded) pending.push_back(arg);
    }
  }
  return mask;
}

// VJIT_ROW_PLACEMENT=tables: the steps of ∂F (`fp`) that run their accumulating kernel,
// and the gradient parts those add into the children's rows. A GatherGrad
// whose gradient is written through gradient pointers keeps that path (it
// assigns the rows where it is their one contribution, no zeroed row needed)
// where a part of it is no fused kernel's that accumulates (a Tree-LSTM's
// dh, an elementwise node's), and a step with a part of such a gradient runs
// its plain kernel; the other GatherGrads leave the pointer path.
// Which GatherGrads of the gradient-pointer path stay on it (keep[gg]): one
// whose gradient has a part no fused kernel may accumulate, and, to a fixed
// point, every GatherGrad a part of a step that accumulates none goes to.
std::vector<uint8_t> kept_pointer_gather_grads(const FunctionPlan& fp, const TypePlacement& placed,
                                               const std::vector<GradientPart>& parts) {
  const ir::Function& f = *fp.function;
  const std::vector<ValueId>& pointers = placed.pointer_gather_grads;
  std::vector<uint8_t> accumulable(size_t(f.size()), 0);  // per value: an output its step could accumulate
  for (const FusedStep& step : fp.fused)
    for (int o : step.accumulated) accumulable[size_t(step.outputs[size_t(o)])] = 1;
  std::vector<uint8_t> keep(size_t(f.size()), 0);
  for (size_t v = 0; v < placed.gradient_pointers.size(); ++v) {
    const ValueId gradient = placed.gradient_pointers[v].gradient;
    if (gradient < 0 || accumulable[v]) continue;
    for (ValueId gg : pointers)
      if (f[gg].args[0] == gradient && (ValueId(v) != gradient || f[gradient].op != Op::Concat)) keep[size_t(gg)] = 1;
  }
  auto gather_grad_of = [&](const FusedStep& step, int o) { return parts[size_t(step.outputs[size_t(o)])].gather_grad; };
  for (bool changed = true; changed;) {
    changed = false;
    for (const FusedStep& step : fp.fused) {
      if (std::none_of(step.accumulated.begin(), step.accumulated.end(),
                       [&](int o) { return keep[size_t(gather_grad_of(step, o))] != 0; }))
        continue;
      for (int o : step.accumulated) {  // a step that does not accumulate keeps all its parts' GatherGrads
        const ValueId gg = gather_grad_of(step, o);
        if (!keep[size_t(gg)] && std::find(pointers.begin(), pointers.end(), gg) != pointers.end())
          keep[size_t(gg)] = 1, changed = true;
      }
    }
  }
  return keep;
}

// Per GatherGrad of `accumulated` (sorted by GatherGrad): the columns of its
// gradient that none of its parts covers.
std::vector<std::vector<std::pair<int64_t, int64_t>>> uncovered_columns(const ir::Function& f,
                                                                        const std::vector<AccumulatedPart>& accumulated) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> rest(size_t(f.size()));
  for (size_t k = 0; k < accumulated.size(); ++k) {
    const ValueId gg = accumulated[k].gather_grad;
    if (k > 0 && accumulated[k - 1].gather_grad == gg) continue;
    std::vector<std::pair<int64_t, int64_t>> covered;
    for (const AccumulatedPart& part : accumulated)
      if (part.gather_grad == gg) covered.emplace_back(part.column, part.column + part.width);
    std::sort(covered.begin(), covered.end());
    int64_t column = 0;
    for (auto [begin, end] : covered) {
      if (begin > column) rest[size_t(gg)].emplace_back(column, begin);
      column = end;
    }
    const int64_t width = f[f[gg].args[0]].shape.numel();
    if (column < width) rest[size_t(gg)].emplace_back(column, width);
  }
  return rest;
}

void place_accumulated_parts(const FunctionPlan& fp, TypePlacement& placed) {
  const ir::Function& f = *fp.function;
  const std::vector<GradientPart> parts = gradient_parts(f);
  const std::vector<uint8_t> keep = kept_pointer_gather_grads(fp, placed, parts);
  std::vector<ValueId>& pointers = placed.pointer_gather_grads;
  for (ValueId gg : std::vector<ValueId>(pointers))
    if (!keep[size_t(gg)]) {
      pointers.erase(std::remove(pointers.begin(), pointers.end(), gg), pointers.end());
      for (GradientPointer& to : placed.gradient_pointers)
        if (to.gradient == f[gg].args[0]) to = {};
    }
  placed.accumulating_steps.assign(fp.fused.size(), 0);
  for (size_t s = 0; s < fp.fused.size(); ++s) {
    const FusedStep& step = fp.fused[s];
    auto kept = [&](int o) { return keep[size_t(parts[size_t(step.outputs[size_t(o)])].gather_grad)] != 0; };
    if (step.accumulated.empty() || std::any_of(step.accumulated.begin(), step.accumulated.end(), kept)) continue;
    placed.accumulating_steps[s] = 1;
    for (int o : step.accumulated) {
      const ValueId value = step.outputs[size_t(o)];
      const GradientPart& part = parts[size_t(value)];
      placed.accumulated_parts.push_back({value, part.gather_grad, part.column, f[value].shape.numel()});
    }
  }
  std::vector<AccumulatedPart>& accumulated = placed.accumulated_parts;
  std::sort(accumulated.begin(), accumulated.end(),
            [](const AccumulatedPart& a, const AccumulatedPart& b) { return a.gather_grad < b.gather_grad; });
  for (const AccumulatedPart& part : accumulated)
    if (f[part.gather_grad].target == ir::GatherGradTarget::Slot)
      placed.accumulating_slots |= uint64_t(1) << f[part.gather_grad].child_slot;
  placed.accumulated_rest = uncovered_columns(f, accumulated);
}

// Everything but the forward targets (which need every type's pointers).
TypePlacement place_type(const TypePlan& type, const TypeSignature& signature, bool gather_pointers) {
  TypePlacement placed;
  const ir::Function& f = *type.forward.function;
  const ir::Function& df = *type.backward.function;
  const int fixed = signature.fixed_arity;
  placed.row_pointer_parts =
      gather_pointers ? row_pointer_parts(type.forward, type.backward) : std::vector<int>(f.nodes.size(), 0);
  const std::vector<uint64_t> forward_alias = gather_alias_masks(f, fixed, nullptr, &placed.row_pointer_parts);
  for (ValueId id = 0; id < f.size(); ++id)
    if (forward_alias[size_t(id)] != 0 && (f[id].op == Op::Gather || f[id].op == Op::GatherSum))
      placed.view_gathers.push_back({id, f[id].op == Op::Gather ? f[id].child_slot : fixed});
  const std::vector<uint64_t> backward_alias = gather_alias_masks(df, fixed, &forward_alias, nullptr);
  placed.gradient_pointers = gather_pointers ? gradient_pointers(type.backward, signature)
                                             : std::vector<GradientPointer>(df.nodes.size());
  for (ValueId id = 0; id < df.size(); ++id)
    if (df[id].op == Op::GatherGrad && placed.gradient_pointers[size_t(df[id].args[0])].gradient == df[id].args[0])
      placed.pointer_gather_grads.push_back(id);
  placed.in_place_gather_grads = gather_grads_placeable_in_place(type.backward, signature);
  placed.whole_slot_gather_grads = whole_slot_gather_grads(df, signature);
  for (Pass pass : {Pass::Forward, Pass::Backward}) {
    const FunctionPlan& fp = pass == Pass::Forward ? type.forward : type.backward;
    const std::vector<uint64_t>& alias = pass == Pass::Forward ? forward_alias : backward_alias;
    for (const Step& step : fp.eager) placed.eager_reads[int(pass)].push_back(step_reads(fp, alias, step));
    for (const Step& step : fp.lazy) placed.lazy_reads[int(pass)].push_back(step_reads(fp, alias, step));
  }
  place_accumulated_parts(type.backward, placed);
  return placed;
}

}  // namespace

RowPlacement place_rows(const ExecPlan& plan, const std::vector<TypeSignature>& signatures, bool gather_pointers) {
  RowPlacement placement;
  std::vector<std::vector<int>> pointers;
  for (size_t t = 0; t < plan.types.size(); ++t) {
    placement.types.push_back(place_type(plan.types[t], signatures[t], gather_pointers));
    pointers.push_back(placement.types.back().row_pointer_parts);
  }
  std::vector<std::vector<ForwardTarget>> targets = forward_targets(plan, signatures, pointers);
  for (size_t t = 0; t < plan.types.size(); ++t) placement.types[t].forward_targets = std::move(targets[t]);
  return placement;
}

}  // namespace vjit::runtime
