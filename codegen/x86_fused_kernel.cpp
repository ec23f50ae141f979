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

#include "codegen/body_plan.h"
#include "codegen/x86_jit_generator.h"
#include "codegen/x86_vmath.h"
#include "ir/ops.h"
#include "vjit/error.h"

namespace vjit::codegen {

namespace {

using ir::Op;

// ---------------------------------------------------------------------------
// The spec: what the generator accepts

// The generator emits every fusable op of the op table (vjit/ir.h).

// Largest width whose byte offset (width * 4) is an int32 immediate.
constexpr int64_t kMaxWidth = int64_t(1) << 28;

// Rejects anything the generator would otherwise turn into wrong code.
void check_spec(const KernelSpec& spec) {
  VJIT_INTERNAL_CHECK(spec.width >= 0 && spec.width <= kMaxWidth,
                      "fused kernel: width " << spec.width << " out of range [0, " << kMaxWidth
                                             << "] in spec '" << spec.key() << "'");
  check_kernel_spec(spec);
}

// ---------------------------------------------------------------------------
// The kernel plan: registers, streams, frame

// The loops (body_plan.h) and what only the x86 generator needs.
struct KernelPlan : LoopPlan {
  Isa isa = Isa::Avx2;
  int vector_bytes = 0;
  std::vector<UnaryFn> vmath_fns;       // the transcendental functions used
  std::vector<int> vmath_scratch_vmms;  // clobbered by the VMathEmitter
  std::vector<int> vmath_scratch_opmasks;
  int avx2_tail_mask_vmm = -1;  // Avx2 tail only: vmaskmovps lane mask
  size_t max_code_bytes = 0;
};

KernelPlan make_plan(const KernelSpec& spec, Isa isa) {
  KernelPlan plan;
  plan.isa = isa;
  plan.vector_bytes = vector_bytes(isa);
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

  // The bodies: full vectors (unrolled 4 or 2 at a time on Avx512's 32
  // registers, 2 on Avx2's 16, then one at a time), the masked tail; on Avx2
  // the tail's lane mask takes the highest pool register.
  std::vector<int> pool;
  for (int i = 0; i < num_vmms - scratch.vmms; ++i) pool.push_back(i);
  std::vector<int> tail_pool = pool;
  if (isa == Isa::Avx2 && spec.width % vector_lanes(isa) != 0) {
    plan.avx2_tail_mask_vmm = tail_pool.back();
    tail_pool.pop_back();
  }
  static_cast<LoopPlan&>(plan) = plan_loops(spec, vector_lanes(isa), pool, tail_pool,
                                            isa == Isa::Avx512 ? std::vector<int>{4, 2} : std::vector<int>{2});

  // An upper bound on the code: a transcendental is at most ~45 instructions,
  // any other op at most two; a load, reload, spill or store at most two (a
  // stream pointer from the stack, then the access); each of at most 12 bytes.
  constexpr size_t kInsnBytes = 12;
  const size_t body_insns = body_instructions(plan, spec, 48, 2);
  const size_t tables = (size_t(kVMathConstants) + spec.instrs.size() + 8) * size_t(plan.vector_bytes);
  // Per stream: its pointer loaded, moved on by ld, or loaded from its row table (at row 0 and after).
  plan.max_code_bytes = 4096 + (body_insns + 40 * plan.streams.size()) * kInsnBytes + tables + 256;
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

class X86Kernel final : public FusedKernel {
 public:
  X86Kernel(const KernelSpec& spec, Isa isa, bool perf_map)
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

std::shared_ptr<const FusedKernel> compile_x86_fused_kernel(const KernelSpec& spec, Isa isa, bool perf_map) {
  VJIT_INTERNAL_CHECK(isa == Isa::Avx2 || isa == Isa::Avx512,
                      "compile_x86_fused_kernel: no JIT for ISA '" << isa_name(isa)
                                                               << "' (the reference kernel runs it)");
  require_isa(isa);
  check_spec(spec);
  return std::make_shared<X86Kernel>(spec, isa, perf_map);
}

}  // namespace vjit::codegen
