// The x86 generator for fused elementwise kernels (codegen/x86_fused_kernel.h).
//
// Compiling a spec has two steps:
//   1. plan (pure C++, no code): check the spec, drop instructions nothing
//      reads, choose the registers every value lives in over one step of each
//      loop body (BodyPlanner: Belady's furthest-next-use eviction over the
//      DAG in instruction order, unrolled copies interleaved), and lay out the
//      stack frame;
//   2. emit (FusedJit::generate): walk the plan and write the machine code.
//
// A generated kernel, void kernel(const ir::KernelArgs* args):
//
//   prologue      save the callee-saved registers used; rbp = entry rsp, rsp
//                 aligned down to 64 below the frame; row pointers of the
//                 streams (used inputs, then outputs) into their GPRs, or into
//                 8-byte stack slots once the GPRs run out
//                 (or, where args->row_tables gives the operand a table, its
//                 row 0 from there); the row index r = 0 into its stack slot
//   row loop      for r < args->rows:
//     unrolled loop the body on U full vectors at a time (U = 4, 2 or none)
//     single loop   the body on each full vector left (fewer than U)
//     tail          the body once more, masked, on the width % lanes last lanes
//     advance       (before each row but the first) r += 1; every stream
//                   pointer += ld[stream] * 4, or = table[r] where it has one
//   epilogue      rsp = rbp, restore, vzeroupper, ret
//   data          the VMathEmitter's constant table, then this kernel's
//
// The width is a compile-time constant, so the loop bounds and the tail mask
// are immediates; only the row count and the pointers are read at run time.
#include "codegen/x86_fused_kernel.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "codegen/x86_jit_generator.h"
#include "codegen/x86_vmath.h"
#include "vjit/error.h"

namespace vjit::codegen {

namespace {

using ir::Op;

// ---------------------------------------------------------------------------
// The spec: what the generator accepts

// The transcendental ops the VMathEmitter computes, as its UnaryFn.
bool vmath_fn(Op op, UnaryFn* fn) {
  switch (op) {
    case Op::Exp: *fn = UnaryFn::Exp; return true;
    case Op::Log: *fn = UnaryFn::Log; return true;
    case Op::Tanh: *fn = UnaryFn::Tanh; return true;
    case Op::Sigmoid: *fn = UnaryFn::Sigmoid; return true;
    default: return false;
  }
}

// The generator emits every fusable op of the op table (vjit/ir.h).

// Entries of the VMathEmitter's constant table, at most.
constexpr size_t kVMathConstants = 0
#define VJIT_VMATH_COUNT(name, bits) +1
    VJIT_VMATH_CONSTANTS(VJIT_VMATH_COUNT)
#undef VJIT_VMATH_COUNT
    ;

// Largest width whose byte offset (width * 4) is an int32 immediate.
constexpr int64_t kMaxWidth = int64_t(1) << 28;

// Rejects anything the generator would otherwise turn into wrong code.
void check_spec(const KernelSpec& spec) {
  VJIT_INTERNAL_CHECK(spec.width >= 0 && spec.width <= kMaxWidth,
                      "fused kernel: width " << spec.width << " out of range [0, " << kMaxWidth
                                             << "] in spec '" << spec.key() << "'");
  check_kernel_spec(spec);
}

}  // namespace

// "vjit_fused_avx512_w64_sigmoid3_tanh2_mul3_add1_9f3c21d0": ISA, width, op
// counts in order of first use (at most six kinds), and a hash of the key so
// that different kernels have different names in a profile.
std::string fused_kernel_name(const KernelSpec& spec, Isa isa) { return kernel_name(spec, isa_name(isa)); }

namespace {

// ---------------------------------------------------------------------------
// Register allocation over one vector step of the body

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

// Instructions whose value reaches an output (the others are not computed).
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

// ---------------------------------------------------------------------------
// The kernel plan: registers, streams, frame

// A row pointer the kernel walks: a used input or an output.
struct Stream {
  bool output = false;
  int index = 0;        // input or output index
  bool scalar = false;  // a Scalar input: one float per row, broadcast
};

struct KernelPlan {
  Isa isa = Isa::Avx2;
  int lanes = 0;
  int vector_bytes = 0;
  int64_t full_vectors = 0;    // width / lanes
  int64_t unrolled_steps = 0;  // steps of `unrolled` (unrolled.copies vectors each)
  int64_t single_steps = 0;    // the full vectors left: steps of `single`
  int tail_lanes = 0;          // width % lanes, done by `tail`
  std::vector<UnaryFn> vmath_fns;       // the transcendental functions used
  std::vector<int> vmath_scratch_vmms;  // clobbered by the VMathEmitter
  std::vector<int> vmath_scratch_opmasks;
  int avx2_tail_mask_vmm = -1;  // Avx2 tail only: vmaskmovps lane mask
  BodyPlan unrolled, single, tail;
  std::vector<Stream> streams;
  std::vector<int> stream_of_input;  // -1 when the input is unused
  std::vector<int> stream_of_output;
  size_t max_code_bytes = 0;
  FusedKernelStats stats;
};

int spill_traffic(const BodyPlan& body) { return body.spills + body.reloads; }

// The most vectors per loop step that still fit: unrolling gives the
// out-of-order core independent chains to overlap (a fused body is one long
// dependency chain per vector), but only while it adds no spill traffic per
// vector. Widest first: 4 (Avx512's 32 registers) or 2.
BodyPlan plan_unrolled(const KernelSpec& spec, const std::vector<int>& pool, Isa isa, int64_t full_vectors,
                       const BodyPlan& single) {
  for (int copies : isa == Isa::Avx512 ? std::vector<int>{4, 2} : std::vector<int>{2}) {
    if (full_vectors < copies) continue;
    BodyPlan body = BodyPlanner(spec, pool, copies).run();
    if (spill_traffic(body) <= copies * spill_traffic(single)) return body;
  }
  return {};
}

KernelPlan make_plan(const KernelSpec& spec, Isa isa) {
  KernelPlan plan;
  plan.isa = isa;
  plan.lanes = vector_lanes(isa);
  plan.vector_bytes = vector_bytes(isa);
  plan.full_vectors = spec.width / plan.lanes;
  plan.tail_lanes = int(spec.width % plan.lanes);
  const std::vector<bool> needed = needed_instructions(spec);

  // Scratch for the transcendentals: as many registers as the hungriest needs,
  // taken from the top of the register file.
  ScratchNeeds scratch;
  for (size_t k = 0; k < spec.instrs.size(); ++k) {
    UnaryFn fn;
    if (!needed[k] || !vmath_fn(spec.instrs[k].op, &fn)) continue;
    if (std::find(plan.vmath_fns.begin(), plan.vmath_fns.end(), fn) == plan.vmath_fns.end())
      plan.vmath_fns.push_back(fn);
    const ScratchNeeds n = VMathEmitter::scratch_needs(fn, isa);
    scratch.vmms = std::max(scratch.vmms, n.vmms);
    scratch.opmasks = std::max(scratch.opmasks, n.opmasks);
  }
  const int num_vmms = isa == Isa::Avx512 ? 32 : 16;
  for (int i = 0; i < scratch.vmms; ++i) plan.vmath_scratch_vmms.push_back(num_vmms - scratch.vmms + i);
  if (scratch.opmasks > 0) plan.vmath_scratch_opmasks = {2};  // k1: tail mask, k3: Step

  // The bodies: full vectors (unrolled, then one at a time), the masked tail.
  std::vector<int> pool;
  for (int i = 0; i < num_vmms - scratch.vmms; ++i) pool.push_back(i);
  if (plan.full_vectors > 0) {
    const BodyPlan single = BodyPlanner(spec, pool, 1).run();
    plan.unrolled = plan_unrolled(spec, pool, isa, plan.full_vectors, single);
    if (plan.unrolled.copies > 0) plan.unrolled_steps = plan.full_vectors / plan.unrolled.copies;
    plan.single_steps = plan.full_vectors - plan.unrolled_steps * plan.unrolled.copies;
    if (plan.single_steps > 0) plan.single = single;
  }
  if (plan.tail_lanes > 0) {
    std::vector<int> tail_pool = pool;
    if (isa == Isa::Avx2) {
      plan.avx2_tail_mask_vmm = tail_pool.back();
      tail_pool.pop_back();
    }
    plan.tail = BodyPlanner(spec, tail_pool, 1).run();
  }

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

  // An upper bound on the code: a transcendental is at most ~45 instructions,
  // any other op at most two; a load, reload, spill or store at most two (a
  // stream pointer from the stack, then the access); each of at most 12 bytes.
  constexpr size_t kInsnBytes = 12;
  size_t body_insns = 0;
  const BodyPlan* bodies[] = {&plan.unrolled, &plan.single, &plan.tail};
  for (const BodyPlan* body : bodies) {
    for (const Action& a : body->actions) {
      UnaryFn fn;
      const bool vmath = a.kind == Action::Kind::Compute &&
                         vmath_fn(spec.instrs[size_t(a.value) - spec.inputs.size()].op, &fn);
      body_insns += vmath ? 48 : 2;
    }
  }
  const size_t tables = (kVMathConstants + spec.instrs.size() + 8) * size_t(plan.vector_bytes);
  // Per stream: its pointer loaded, moved on by ld, or loaded from its row table (at row 0 and after).
  plan.max_code_bytes = 4096 + (body_insns + 40 * plan.streams.size()) * kInsnBytes + tables + 256;

  plan.stats.value_registers = int(pool.size());
  plan.stats.unroll = std::max(1, plan.unrolled.copies);
  for (const BodyPlan* body : bodies) {
    plan.stats.peak_live = std::max(plan.stats.peak_live, body->peak_live);
    plan.stats.spill_slots = std::max(plan.stats.spill_slots, body->spill_slots);
    plan.stats.spills += body->spills;
    plan.stats.reloads += body->reloads;
    plan.stats.input_loads += body->input_loads;
  }
  return plan;
}

// ---------------------------------------------------------------------------
// The generator

// Registers:
//   rdi       reg_args    the ir::KernelArgs*                     (argument 1)
//   rsi       reg_rows    rows left
//   rdx       reg_off     byte offset of the current vector in the row;
//                         between rows, a scratch for the pointer advance
//   rax       reg_tmp     a stack-resident stream pointer, the ld array
//   rcx       reg_table   the VMathEmitter's constant table (when used;
//                         otherwise a stream pointer)
//   rbp                   rsp at entry (the frame is aligned below it)
//   r8..r11, rbx, r12..r15 (and rcx)   stream pointers, in stream order; the
//                         streams past them live in 8-byte stack slots
//   vmm 0..n-1            values (the allocator's pool)
//   vmm n..last           VMathEmitter scratch; on Avx2 the tail also takes
//                         the highest pool register for the vmaskmovps mask
//   k1 tail mask, k2 VMathEmitter scratch, k3 Step's comparison (Avx512)
// Stack (from the aligned rsp): the stream pointer slots, then the vector spill
// slots, 64-byte aligned.
class FusedJit final : public JitGenerator {
 public:
  FusedJit(const KernelSpec& spec, KernelPlan plan, std::string name)
      : JitGenerator(std::move(name), plan.max_code_bytes),
        spec_(spec),
        plan_(std::move(plan)),
        isa_(plan_.isa),
        vmath_(*this, isa_, reg_table_, plan_.vmath_scratch_vmms, plan_.vmath_scratch_opmasks) {
    std::vector<Xbyak::Reg64> gprs{r8, r9, r10, r11, rbx, r12, r13, r14, r15};
    if (plan_.vmath_fns.empty()) gprs.push_back(rcx);
    for (size_t s = 0; s < plan_.streams.size(); ++s) {
      const bool in_register = s < gprs.size();
      stream_reg_.push_back(in_register ? gprs[s] : reg_tmp_);  // reg_tmp_: loaded per access
      stream_slot_.push_back(in_register ? -1 : int(s - gprs.size()) * 8);
    }
    const int pointer_bytes = int(std::max<size_t>(plan_.streams.size(), gprs.size()) - gprs.size()) * 8;
    row_slot_ = pointer_bytes;
    spill_base_ = (pointer_bytes + 8 + 63) / 64 * 64;
    frame_bytes_ = spill_base_ + plan_.stats.spill_slots * plan_.vector_bytes;
  }

  const FusedKernelStats& stats() const { return plan_.stats; }

 private:
  const Xbyak::Reg64 reg_args_ = abi_param1;
  const Xbyak::Reg64 reg_rows_ = rsi;
  const Xbyak::Reg64 reg_off_ = rdx;
  const Xbyak::Reg64 reg_tmp_ = rax;
  const Xbyak::Reg64 reg_table_ = rcx;
  const Xbyak::Opmask k_tail_{1};
  const Xbyak::Opmask k_step_{3};

  Vmm vmm(int idx) const { return make_vmm(isa_, idx); }

  void generate() override {
    Xbyak::Label row_loop, unrolled_loop, single_loop, done;
    std::vector<Xbyak::Reg64> saved{rbp};
    for (size_t s = 0; s < stream_reg_.size(); ++s) {
      const Xbyak::Reg64& reg = stream_reg_[s];
      if (stream_slot_[s] < 0 && (reg.getIdx() == Xbyak::Operand::RBX || reg.getIdx() >= Xbyak::Operand::R12))
        saved.push_back(reg);
    }
    preamble_with(saved);

    // Frame and loop-invariant state.
    mov(rbp, rsp);
    if (frame_bytes_ > 0) {
      sub(rsp, frame_bytes_);
      and_(rsp, -64);
    }
    if (!plan_.vmath_fns.empty()) vmath_.load_table_address();
    if (isa_ == Isa::Avx512 && plan_.tail_lanes > 0) {
      mov(eax, (1u << plan_.tail_lanes) - 1);
      kmovw(k_tail_, eax);
    }
    load_stream_pointers();
    mov(qword[rsp + row_slot_], 0);
    load_table_rows(false);

    mov(reg_rows_, ptr[reg_args_ + offsetof(ir::KernelArgs, rows)]);
    test(reg_rows_, reg_rows_);
    jle(done, T_NEAR);

    L(row_loop);
    {
      xor_(reg_off_, reg_off_);
      // Full vectors: unrolled steps, then the rest one vector at a time.
      if (plan_.unrolled_steps > 0) {
        const int step_bytes = plan_.unrolled.copies * plan_.vector_bytes;
        L(unrolled_loop);
        emit_body(plan_.unrolled, false);
        add(reg_off_, step_bytes);
        if (plan_.unrolled_steps > 1) {
          cmp(reg_off_, int(plan_.unrolled_steps * step_bytes));
          jb(unrolled_loop, T_NEAR);
        }
      }
      if (plan_.single_steps > 0) {
        L(single_loop);
        emit_body(plan_.single, false);
        add(reg_off_, plan_.vector_bytes);
        if (plan_.single_steps > 1) {
          cmp(reg_off_, int(plan_.full_vectors * plan_.vector_bytes));
          jb(single_loop, T_NEAR);
        }
      }
      // Tail: the last width % lanes elements, masked.
      if (plan_.tail_lanes > 0) {
        if (isa_ == Isa::Avx2) vmovups(vmm(plan_.avx2_tail_mask_vmm), ptr[rip + avx2_tail_mask_]);
        emit_body(plan_.tail, true);
      }
      dec(reg_rows_);
      jz(done, T_NEAR);
      advance_stream_pointers();
      jmp(row_loop, T_NEAR);
    }

    L(done);
    mov(rsp, rbp);
    postamble();

    if (!plan_.vmath_fns.empty()) vmath_.emit_table();
    emit_constant_table();
  }

  void preamble_with(const std::vector<Xbyak::Reg64>& saved) {
    switch (saved.size()) {  // preamble takes an initializer_list
      case 1: preamble({saved[0]}); break;
      case 2: preamble({saved[0], saved[1]}); break;
      case 3: preamble({saved[0], saved[1], saved[2]}); break;
      case 4: preamble({saved[0], saved[1], saved[2], saved[3]}); break;
      case 5: preamble({saved[0], saved[1], saved[2], saved[3], saved[4]}); break;
      case 6: preamble({saved[0], saved[1], saved[2], saved[3], saved[4], saved[5]}); break;
      default: VJIT_INTERNAL_CHECK(false, "fused kernel: " << saved.size() << " callee-saved registers");
    }
  }

  // ---- Row pointers

  // stream s = args->inputs[j] or args->outputs[o], into its register or slot.
  void load_stream_pointers() {
    for (bool outputs : {false, true}) {
      mov(reg_tmp_, ptr[reg_args_ + (outputs ? offsetof(ir::KernelArgs, outputs) : offsetof(ir::KernelArgs, inputs))]);
      for_each_stream(outputs, [&](size_t s, int index) {
        if (stream_slot_[s] < 0) {
          mov(stream_reg_[s], ptr[reg_tmp_ + index * 8]);
        } else {
          mov(reg_off_, ptr[reg_tmp_ + index * 8]);
          mov(ptr[rsp + stream_slot_[s]], reg_off_);
        }
      });
    }
  }

  // Before every row but the first: r += 1, and each stream to its row r.
  void advance_stream_pointers() {
    Xbyak::Label by_ld, advanced;
    inc(qword[rsp + row_slot_]);
    mov(reg_tmp_, ptr[reg_args_ + offsetof(ir::KernelArgs, row_tables)]);
    test(reg_tmp_, reg_tmp_);
    jz(by_ld, T_NEAR);
    load_table_rows(true);
    jmp(advanced, T_NEAR);
    L(by_ld);
    advance_by_ld(-1);
    L(advanced);
  }

  // With args->row_tables (not null): each stream whose operand has a table
  // to table[r]; with `others_by_ld`, each other one on by its ld.
  void load_table_rows(bool others_by_ld) {
    Xbyak::Label none;
    if (!others_by_ld) {
      mov(reg_tmp_, ptr[reg_args_ + offsetof(ir::KernelArgs, row_tables)]);
      test(reg_tmp_, reg_tmp_);
      jz(none, T_NEAR);
    }
    const int num_inputs = int(spec_.inputs.size());
    for (size_t s = 0; s < plan_.streams.size(); ++s) {
      Xbyak::Label by_ld, next;
      const int operand = (plan_.streams[s].output ? num_inputs : 0) + plan_.streams[s].index;
      mov(reg_tmp_, ptr[reg_args_ + offsetof(ir::KernelArgs, row_tables)]);
      mov(reg_off_, ptr[reg_tmp_ + operand * 8]);
      test(reg_off_, reg_off_);
      jz(others_by_ld ? by_ld : next, T_NEAR);
      mov(reg_tmp_, ptr[rsp + row_slot_]);
      mov(reg_off_, ptr[reg_off_ + reg_tmp_ * 8]);
      if (stream_slot_[s] < 0) mov(stream_reg_[s], reg_off_);
      else mov(ptr[rsp + stream_slot_[s]], reg_off_);
      if (others_by_ld) {
        jmp(next, T_NEAR);
        L(by_ld);
        advance_by_ld(int(s));
      }
      L(next);
    }
    L(none);
  }

  // stream s += ld[index] * sizeof(float): every stream (s = -1), or stream s.
  void advance_by_ld(int only) {
    for (bool outputs : {false, true}) {
      if (only >= 0 && plan_.streams[size_t(only)].output != outputs) continue;
      mov(reg_tmp_, ptr[reg_args_ + (outputs ? offsetof(ir::KernelArgs, output_ld) : offsetof(ir::KernelArgs, input_ld))]);
      for_each_stream(outputs, [&](size_t s, int index) {
        if (only >= 0 && s != size_t(only)) return;
        mov(reg_off_, ptr[reg_tmp_ + index * 8]);
        shl(reg_off_, 2);
        if (stream_slot_[s] < 0) add(stream_reg_[s], reg_off_);
        else add(ptr[rsp + stream_slot_[s]], reg_off_);
      });
    }
  }

  template <typename Fn>
  void for_each_stream(bool outputs, Fn fn) {
    for (size_t s = 0; s < plan_.streams.size(); ++s)
      if (plan_.streams[s].output == outputs) fn(s, plan_.streams[s].index);
  }

  // Vector `copy` of the current step of stream s: [pointer + reg_off + copy
  // vectors], or [pointer] for a Scalar input. A stack-resident pointer is
  // first loaded into reg_tmp.
  Xbyak::Address stream_address(size_t s, int copy) {
    Xbyak::Reg64 base = stream_reg_[s];
    if (stream_slot_[s] >= 0) {
      mov(reg_tmp_, ptr[rsp + stream_slot_[s]]);
      base = reg_tmp_;
    }
    if (plan_.streams[s].scalar) return ptr[base];
    return ptr[base + reg_off_ + copy * plan_.vector_bytes];
  }

  Xbyak::Address spill_address(int slot) { return ptr[rsp + spill_base_ + slot * plan_.vector_bytes]; }

  // ---- The body: one vector step, as planned

  void emit_body(const BodyPlan& body, bool tail) {
    for (const Action& a : body.actions) {
      switch (a.kind) {
        case Action::Kind::Load: emit_load(a, tail); break;
        case Action::Kind::Reload: vmovaps(vmm(a.reg), spill_address(a.slot)); break;
        case Action::Kind::Spill: vmovaps(spill_address(a.slot), vmm(a.reg)); break;
        case Action::Kind::Compute: emit_op(spec_.instrs[size_t(a.value) - spec_.inputs.size()], a); break;
        case Action::Kind::Store: emit_store(a, tail); break;
      }
    }
  }

  // Masked-off tail lanes are neither read (no fault past the row) nor written.
  void emit_load(const Action& a, bool tail) {
    const size_t s = size_t(plan_.stream_of_input[size_t(a.value)]);
    const Vmm dst = vmm(a.reg);
    const Xbyak::Address src = stream_address(s, a.copy);
    if (plan_.streams[s].scalar) {
      vbroadcastss(dst, src);
    } else if (!tail) {
      vmovups(dst, src);
    } else if (isa_ == Isa::Avx512) {
      vmovups(dst | k_tail_ | T_z, src);
    } else {
      vmaskmovps(dst, vmm(plan_.avx2_tail_mask_vmm), src);
    }
  }

  void emit_store(const Action& a, bool tail) {
    const size_t s = size_t(plan_.stream_of_output[size_t(a.slot)]);
    const Vmm src = vmm(a.reg);
    const Xbyak::Address dst = stream_address(s, a.copy);
    if (!tail) {
      vmovups(dst, src);
    } else if (isa_ == Isa::Avx512) {
      vmovups(dst | k_tail_, src);
    } else {
      vmaskmovps(dst, vmm(plan_.avx2_tail_mask_vmm), src);
    }
  }

  // dst = op(a, b), each op as run_reference_kernel computes it.
  void emit_op(const KernelInstr& in, const Action& act) {
    const Vmm dst = vmm(act.reg), a = vmm(act.a_reg);
    const Vmm b = act.b_reg >= 0 ? vmm(act.b_reg) : a;
    constexpr std::uint8_t kCmpGtOq = 0x1e;  // a > b, false for NaN
    UnaryFn fn;
    if (vmath_fn(in.op, &fn)) {  // in place: dst = f(dst)
      if (dst.getIdx() != a.getIdx()) vmovaps(dst, a);
      vmath_.emit(fn, dst);
      return;
    }
    switch (in.op) {
      case Op::Neg: vxorps(dst, a, constant(0x80000000u)); break;  // flip the sign bit
      // max(a, 0) returns its second operand, 0, when a is NaN: as a > 0 ? a : 0.
      case Op::Relu: vmaxps(dst, a, constant(0)); break;
      case Op::Step:  // a > 0 ? 1 : 0 (0 for NaN)
        if (isa_ == Isa::Avx512) {
          vcmpps(k_step_, a, constant(0), kCmpGtOq);
          vmovaps(dst | k_step_ | T_z, constant(std::bit_cast<std::uint32_t>(1.0f)));
        } else {
          vcmpps(dst, a, constant(0), kCmpGtOq);
          vandps(dst, dst, constant(std::bit_cast<std::uint32_t>(1.0f)));
        }
        break;
      case Op::Scale: vmulps(dst, a, constant(std::bit_cast<std::uint32_t>(in.scalar))); break;
      case Op::AddScalar: vaddps(dst, a, constant(std::bit_cast<std::uint32_t>(in.scalar))); break;
      case Op::Sqrt: vsqrtps(dst, a); break;
      case Op::Add: vaddps(dst, a, b); break;
      case Op::Sub: vsubps(dst, a, b); break;
      case Op::Mul: vmulps(dst, a, b); break;
      case Op::Div: vdivps(dst, a, b); break;
      default: VJIT_INTERNAL_CHECK(false, "fused kernel: no code for " << ir::op_name(in.op));
    }
  }

  // ---- Constants

  // A full vector of `bits` in this kernel's constant table.
  Xbyak::Address constant(std::uint32_t bits) {
    auto it = std::find(constants_.begin(), constants_.end(), bits);
    if (it == constants_.end()) it = constants_.insert(constants_.end(), bits);
    return ptr[rip + constant_table_ + int(it - constants_.begin()) * plan_.vector_bytes];
  }

  // Each constant replicated across a vector, then the Avx2 tail mask (lane i
  // all-ones when i < width % lanes).
  void emit_constant_table() {
    align(64);
    L(constant_table_);
    for (std::uint32_t bits : constants_)
      for (int lane = 0; lane < plan_.lanes; ++lane) dd(bits);
    if (isa_ == Isa::Avx2 && plan_.tail_lanes > 0) {
      L(avx2_tail_mask_);
      for (int lane = 0; lane < plan_.lanes; ++lane) dd(lane < plan_.tail_lanes ? 0xffffffffu : 0u);
    }
  }

  const KernelSpec& spec_;
  const KernelPlan plan_;
  const Isa isa_;
  VMathEmitter vmath_;
  std::vector<Xbyak::Reg64> stream_reg_;  // per stream: its pointer register (reg_tmp_ when in a slot)
  std::vector<int> stream_slot_;          // per stream: its stack slot offset, or -1
  int spill_base_ = 0;
  int row_slot_ = 0;  // the row index r (8 bytes), for the row tables
  int frame_bytes_ = 0;
  std::vector<std::uint32_t> constants_;
  Xbyak::Label constant_table_, avx2_tail_mask_;
};

class FusedKernel final : public X86FusedKernel {
 public:
  FusedKernel(const KernelSpec& spec, Isa isa, bool perf_map)
      : spec_(spec), jit_(std::make_unique<FusedJit>(spec_, make_plan(spec_, isa), fused_kernel_name(spec_, isa))) {
    jit_->create_kernel(perf_map);
    fn_ = jit_->entry<ir::KernelFn>();
  }

  ir::KernelFn function() const override { return fn_; }
  const std::string& name() const override { return jit_->name(); }
  size_t code_bytes() const override { return jit_->getSize(); }
  const FusedKernelStats& stats() const override { return jit_->stats(); }

 private:
  const KernelSpec spec_;  // the generator refers to it while generating
  std::unique_ptr<FusedJit> jit_;
  ir::KernelFn fn_ = nullptr;
};

}  // namespace

std::shared_ptr<const X86FusedKernel> compile_fused_kernel(const KernelSpec& spec, Isa isa, bool perf_map) {
  VJIT_INTERNAL_CHECK(isa == Isa::Avx2 || isa == Isa::Avx512,
                      "compile_fused_kernel: no JIT for ISA '" << isa_name(isa)
                                                               << "' (the reference kernel runs it)");
  require_isa(isa);
  check_spec(spec);
  return std::make_shared<FusedKernel>(spec, isa, perf_map);
}

}  // namespace vjit::codegen
