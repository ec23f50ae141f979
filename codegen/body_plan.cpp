#include "codegen/body_plan.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "ir/ops.h"
#include "vjit/error.h"

namespace vjit::codegen {

using ir::Op;

bool vmath_fn(Op op, UnaryFn* fn) {
  switch (op) {
    case Op::Exp: *fn = UnaryFn::Exp; return true;
    case Op::Log: *fn = UnaryFn::Log; return true;
    case Op::Tanh: *fn = UnaryFn::Tanh; return true;
    case Op::Sigmoid: *fn = UnaryFn::Sigmoid; return true;
    default: return false;
  }
}

std::vector<bool> needed_instructions(const KernelSpec& spec) {
  const int num_inputs = int(spec.inputs.size());
  std::vector<bool> needed(spec.instrs.size(), false);
  for (int o : spec.outputs) needed[size_t(o)] = true;
  for (size_t k = spec.instrs.size(); k-- > 0;) {
    if (!needed[k]) continue;
    for (int operand : {spec.instrs[k].a, spec.instrs[k].b})
      if (operand >= num_inputs) needed[size_t(operand - num_inputs)] = true;
  }
  return needed;
}

namespace {

// Walks the needed instructions in order — each one `copies` times in a row,
// once per vector of the step, so that independent work sits side by side for
// the out-of-order core — keeping every value in a vector register from its
// definition to its last use. When `pool` is exhausted it evicts the resident
// value whose next use is furthest away (Belady), among equals preferring one
// that costs no store: an input (reloaded from its row) or a value already in
// its spill slot. Outputs are stored right after they are computed, so storing
// never extends a value's life. A spill slot is reused once its value is dead.
// A Scalar input is one value shared by all copies.
//
// Inside the planner a value of copy u is the id u * num_values + v.
class BodyPlanner {
 public:
  BodyPlanner(const KernelSpec& spec, std::vector<int> pool, int copies)
      : spec_(spec),
        num_inputs_(int(spec.inputs.size())),
        num_values_(int(spec.inputs.size() + spec.instrs.size())),
        copies_(copies),
        pool_(std::move(pool)),
        needed_(needed_instructions(spec)) {
    VJIT_INTERNAL_CHECK(pool_.size() >= 3, "fused kernel: " << pool_.size()
                                                            << " vector registers for values, at least 3 needed");
    const size_t ids = size_t(num_values_) * size_t(copies_);
    uses_.resize(ids);
    next_.assign(ids, 0);
    reg_of_.assign(ids, -1);
    slot_of_.assign(ids, -1);
    owner_.assign(32, -1);
    outputs_of_.resize(spec.instrs.size());
    for (size_t o = 0; o < spec.outputs.size(); ++o) outputs_of_[size_t(spec.outputs[o])].push_back(int(o));
    int position = 0;
    for (size_t k = 0; k < spec.instrs.size(); ++k) {
      if (!needed_[k]) continue;
      const KernelInstr& in = spec.instrs[k];
      for (int u = 0; u < copies_; ++u, ++position) {
        uses_[size_t(id(in.a, u))].push_back(position);
        if (in.b >= 0 && in.b != in.a) uses_[size_t(id(in.b, u))].push_back(position);
      }
    }
  }

  BodyPlan run() {
    plan_.copies = copies_;
    for (size_t k = 0; k < spec_.instrs.size(); ++k)
      if (needed_[k])
        for (int u = 0; u < copies_; ++u) plan_instruction(int(k), u);
    return std::move(plan_);
  }

 private:
  static constexpr int kNever = std::numeric_limits<int>::max();

  int id(int value, int copy) const {
    const bool shared = value < num_inputs_ && spec_.inputs[size_t(value)].scalar;
    return (shared ? 0 : copy) * num_values_ + value;
  }
  int value_of(int id) const { return id % num_values_; }
  int copy_of(int id) const { return id / num_values_; }
  bool is_input(int id) const { return value_of(id) < num_inputs_; }

  int next_use(int id) const {
    const std::vector<int>& u = uses_[size_t(id)];
    return next_[size_t(id)] < u.size() ? u[next_[size_t(id)]] : kNever;
  }
  void add(Action::Kind kind, int id, int reg, int slot = -1, int a_reg = -1, int b_reg = -1) {
    plan_.actions.push_back({kind, value_of(id), copy_of(id), reg, slot, a_reg, b_reg});
  }

  void plan_instruction(int k, int copy) {
    const KernelInstr& in = spec_.instrs[size_t(k)];
    const int value = id(num_inputs_ + k, copy);
    const int a = id(in.a, copy), b = in.b >= 0 ? id(in.b, copy) : -1;
    std::vector<int> operands{a};
    if (b >= 0 && b != a) operands.push_back(b);
    for (int v : operands) ensure_in_register(v, operands);
    for (int v : operands) ++next_[size_t(v)];  // this use is done

    const int a_reg = reg_of_[size_t(a)];
    const int b_reg = b >= 0 ? reg_of_[size_t(b)] : -1;
    UnaryFn fn;
    const bool in_place = vmath_fn(in.op, &fn);  // the emitters compute x = f(x)
    int dst = -1;
    if (next_use(a) == kNever) {
      dst = a_reg;
    } else if (!in_place && b >= 0 && next_use(b) == kNever) {
      dst = b_reg;
    } else {
      dst = allocate(operands);
    }
    add(Action::Kind::Compute, value, dst, -1, a_reg, b_reg);
    for (int v : operands)
      if (next_use(v) == kNever) release(v);
    owner_[size_t(dst)] = value;
    reg_of_[size_t(value)] = dst;
    plan_.peak_live = std::max(plan_.peak_live, ++live_);
    for (int o : outputs_of_[size_t(k)]) add(Action::Kind::Store, value, dst, o);
    if (next_use(value) == kNever) release(value);
  }

  void ensure_in_register(int v, const std::vector<int>& pinned) {
    if (reg_of_[size_t(v)] >= 0) return;
    const int reg = allocate(pinned);
    if (is_input(v)) {
      add(Action::Kind::Load, v, reg);
      ++plan_.input_loads;
    } else {
      VJIT_INTERNAL_CHECK(slot_of_[size_t(v)] >= 0,
                          "fused kernel: value " << value_of(v) << " is neither in a register nor spilled");
      add(Action::Kind::Reload, v, reg, slot_of_[size_t(v)]);
      ++plan_.reloads;
    }
    reg_of_[size_t(v)] = reg;
    owner_[size_t(reg)] = v;
  }

  // A free register of the pool, evicting a value not in `pinned` when none is.
  int allocate(const std::vector<int>& pinned) {
    for (int reg : pool_)
      if (owner_[size_t(reg)] < 0) return reg;
    int victim_reg = -1, victim_use = -1;
    bool victim_free = false;
    for (int reg : pool_) {
      const int v = owner_[size_t(reg)];
      if (std::find(pinned.begin(), pinned.end(), v) != pinned.end()) continue;
      const int use = next_use(v);
      const bool free = is_input(v) || slot_of_[size_t(v)] >= 0;  // no store needed
      if (use > victim_use || (use == victim_use && free && !victim_free)) {
        victim_reg = reg;
        victim_use = use;
        victim_free = free;
      }
    }
    VJIT_INTERNAL_CHECK(victim_reg >= 0, "fused kernel: every vector register is pinned");
    const int v = owner_[size_t(victim_reg)];
    if (!victim_free) {
      slot_of_[size_t(v)] = take_slot();
      add(Action::Kind::Spill, v, victim_reg, slot_of_[size_t(v)]);
      ++plan_.spills;
    }
    reg_of_[size_t(v)] = -1;
    owner_[size_t(victim_reg)] = -1;
    return victim_reg;
  }

  // A dead value gives back its register and its spill slot.
  void release(int v) {
    if (!is_input(v)) --live_;
    const int reg = reg_of_[size_t(v)];
    if (reg >= 0 && owner_[size_t(reg)] == v) owner_[size_t(reg)] = -1;
    reg_of_[size_t(v)] = -1;
    if (slot_of_[size_t(v)] >= 0) free_slots_.push_back(slot_of_[size_t(v)]);
    slot_of_[size_t(v)] = -1;
  }

  int take_slot() {
    if (!free_slots_.empty()) {
      const int slot = free_slots_.back();
      free_slots_.pop_back();
      return slot;
    }
    return plan_.spill_slots++;
  }

  const KernelSpec& spec_;
  const int num_inputs_;
  const int num_values_;
  const int copies_;
  const std::vector<int> pool_;
  const std::vector<bool> needed_;
  std::vector<std::vector<int>> uses_;        // per id: positions (instruction, copy) reading it, ascending
  std::vector<size_t> next_;                  // per id: index of its next use in uses_
  std::vector<int> reg_of_;                   // per id: its register, or -1
  std::vector<int> slot_of_;                  // per id: its spill slot, or -1
  std::vector<int> owner_;                    // per register index: its id, or -1
  std::vector<std::vector<int>> outputs_of_;  // per instruction: the outputs it writes
  std::vector<int> free_slots_;
  int live_ = 0;  // computed values live now
  BodyPlan plan_;
};

}  // namespace

BodyPlan plan_body(const KernelSpec& spec, std::vector<int> pool, int copies) {
  return BodyPlanner(spec, std::move(pool), copies).run();
}

namespace {

int spill_traffic(const BodyPlan& body) { return body.spills + body.reloads; }

BodyPlan plan_unrolled(const KernelSpec& spec, const std::vector<int>& pool, const std::vector<int>& unroll_choices,
                       int64_t full_vectors, const BodyPlan& single) {
  for (int copies : unroll_choices) {
    if (full_vectors < copies) continue;
    BodyPlan body = plan_body(spec, pool, copies);
    if (spill_traffic(body) <= copies * spill_traffic(single)) return body;
  }
  return {};
}

}  // namespace

LoopPlan plan_loops(const KernelSpec& spec, int lanes, const std::vector<int>& pool,
                    const std::vector<int>& tail_pool, const std::vector<int>& unroll_choices) {
  LoopPlan plan;
  plan.lanes = lanes;
  plan.full_vectors = spec.width / lanes;
  plan.tail_lanes = int(spec.width % lanes);
  if (plan.full_vectors > 0) {
    const BodyPlan single = plan_body(spec, pool, 1);
    plan.unrolled = plan_unrolled(spec, pool, unroll_choices, plan.full_vectors, single);
    if (plan.unrolled.copies > 0) plan.unrolled_steps = plan.full_vectors / plan.unrolled.copies;
    plan.single_steps = plan.full_vectors - plan.unrolled_steps * plan.unrolled.copies;
    if (plan.single_steps > 0) plan.single = single;
  }
  if (plan.tail_lanes > 0) plan.tail = plan_body(spec, tail_pool, 1);

  const std::vector<bool> needed = needed_instructions(spec);
  plan.stream_of_input.assign(spec.inputs.size(), -1);
  for (size_t k = 0; k < spec.instrs.size(); ++k) {
    if (!needed[k]) continue;
    for (int operand : {spec.instrs[k].a, spec.instrs[k].b}) {
      if (operand < 0 || operand >= int(spec.inputs.size()) || plan.stream_of_input[size_t(operand)] >= 0) continue;
      plan.stream_of_input[size_t(operand)] = int(plan.streams.size());
      plan.streams.push_back({false, operand, spec.inputs[size_t(operand)].scalar});
    }
  }
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    plan.stream_of_output.push_back(int(plan.streams.size()));
    plan.streams.push_back({true, int(o), false});
  }

  plan.stats.value_registers = int(pool.size());
  plan.stats.unroll = std::max(1, plan.unrolled.copies);
  for (const BodyPlan* body : {&plan.unrolled, &plan.single, &plan.tail}) {
    plan.stats.peak_live = std::max(plan.stats.peak_live, body->peak_live);
    plan.stats.spill_slots = std::max(plan.stats.spill_slots, body->spill_slots);
    plan.stats.spills += body->spills;
    plan.stats.reloads += body->reloads;
    plan.stats.input_loads += body->input_loads;
  }
  return plan;
}

size_t body_instructions(const LoopPlan& plan, const KernelSpec& spec, size_t per_vmath, size_t per_action) {
  size_t count = 0;
  for (const BodyPlan* body : {&plan.unrolled, &plan.single, &plan.tail}) {
    for (const Action& a : body->actions) {
      UnaryFn fn;
      const bool vmath = a.kind == Action::Kind::Compute &&
                         vmath_fn(spec.instrs[size_t(a.value) - spec.inputs.size()].op, &fn);
      count += vmath ? per_vmath : per_action;
    }
  }
  return count;
}

}  // namespace vjit::codegen
