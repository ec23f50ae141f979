// The AArch64 generator for fused elementwise kernels (codegen/a64_fused_kernel.h).
//
// Compiling a spec has two steps, as on x86 (x86_fused_kernel.cpp):
//   1. plan (codegen/body_plan.h): check the spec, choose the registers every
//      value lives in over one step of each loop body, lay out the frame;
//   2. emit (A64Jit::generate): walk the plan and write the machine code with
//      asmjit's a64 assembler, then copy it into pages of its own that are
//      never writable and executable at once (codegen/a64_code.h).
//
// A generated kernel, void kernel(const ir::KernelArgs* args) (AAPCS64):
//
//   prologue      sp -= frame; save d8-d15 (the callee-saved halves of
//                 v8-v15) and x19-x28; row pointers of the streams (used
//                 inputs, then outputs) into their registers, or into 8-byte
//                 stack slots once the registers run out (or, where
//                 args->row_tables gives the operand a table, its row 0);
//                 the row index r = 0
//   row loop      for r < args->rows:
//     unrolled loop the body on U full vectors at a time (U = 4, 2 or none)
//     single loop   the body on each full vector left
//     tail          the body once more on the width % 4 last lanes, each
//                   loaded and stored on its own
//     advance       (before each row but the first) r += 1; every stream
//                   pointer += ld[stream] * 4, or = table[r] where it has one
//   epilogue      restore, sp += frame, ret
//   data          the vector-math constant table, then this kernel's
#include "codegen/a64_fused_kernel.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <asmjit/arm/a64assembler.h>

#include "codegen/a64_code.h"
#include "codegen/a64_vmath.h"
#include "codegen/body_plan.h"
#include "ir/ops.h"
#include "vjit/error.h"

namespace vjit::codegen {

namespace {

namespace a64 = asmjit::a64;
using ir::Op;

constexpr int kLanes = 4;
constexpr int kVectorBytes = 16;

// Registers:
//   x0        the ir::KernelArgs*                        (argument 1)
//   x1        rows left
//   x2        byte offset of the current vector in the row; between rows, a scratch
//   x3, x7    scratch: addresses, a stack-resident stream pointer, the ld array
//   x4        the vector-math constant table
//   x5        this kernel's constant table
//   x6        the row index r
//   x8..x17, x19..x28   stream pointers, in stream order; the streams past
//                       them live in 8-byte stack slots
//   v0..      values (the allocator's pool)
//   ..v30     vector-math scratch (the highest registers below v31)
//   v31       the constant or comparison an op reads
const a64::GpX kArgs = a64::x0, kRows = a64::x1, kOff = a64::x2, kTmp = a64::x3, kVMathTable = a64::x4,
               kConstTable = a64::x5, kRow = a64::x6, kTmp2 = a64::x7;
constexpr int kOpTemp = 31;

std::vector<a64::GpX> stream_registers() {
  std::vector<a64::GpX> regs;
  for (uint32_t id = 8; id <= 17; ++id) regs.push_back(a64::GpX(id));
  for (uint32_t id = 19; id <= 28; ++id) regs.push_back(a64::GpX(id));
  return regs;
}

// Frame: d8-d15 at [sp, 0), x19-x28 at [sp, 64), the stream slots, then the
// vector spill slots (16-byte aligned). Its size is an add/sub immediate.
constexpr int kSavedBytes = 64 + 80;
constexpr int kMaxFrameBytes = 4080;

struct KernelPlan : LoopPlan {
  std::vector<UnaryFn> vmath_fns;
  std::vector<int> vmath_scratch;
  int stream_slot_bytes = 0;
  int spill_base = 0;
  int frame_bytes = 0;
};

// Largest width whose loop bound (width * 4 bytes) is a 32-bit immediate.
constexpr int64_t kMaxWidth = int64_t(1) << 28;

KernelPlan make_plan(const KernelSpec& spec) {
  VJIT_INTERNAL_CHECK(spec.width <= kMaxWidth, "fused kernel (neon): width " << spec.width << " out of range [0, "
                                                                          << kMaxWidth << "] in spec '" << spec.key()
                                                                          << "'");
  KernelPlan plan;
  const std::vector<bool> needed = needed_instructions(spec);
  int scratch = 0;
  for (size_t k = 0; k < spec.instrs.size(); ++k) {
    UnaryFn fn;
    if (!needed[k] || !vmath_fn(spec.instrs[k].op, &fn)) continue;
    if (std::find(plan.vmath_fns.begin(), plan.vmath_fns.end(), fn) == plan.vmath_fns.end())
      plan.vmath_fns.push_back(fn);
    scratch = std::max(scratch, A64VMathEmitter::scratch_needs(fn));
  }
  for (int i = 0; i < scratch; ++i) plan.vmath_scratch.push_back(kOpTemp - scratch + i);
  std::vector<int> pool;
  for (int i = 0; i < kOpTemp - scratch; ++i) pool.push_back(i);
  static_cast<LoopPlan&>(plan) = plan_loops(spec, kLanes, pool, pool, {4, 2});

  const size_t in_registers = stream_registers().size();
  const int stack_streams = int(std::max(plan.streams.size(), in_registers) - in_registers);
  plan.stream_slot_bytes = (stack_streams * 8 + 15) / 16 * 16;
  plan.spill_base = kSavedBytes + plan.stream_slot_bytes;
  plan.frame_bytes = plan.spill_base + plan.stats.spill_slots * kVectorBytes;
  VJIT_INTERNAL_CHECK(plan.frame_bytes <= kMaxFrameBytes,
                      "fused kernel (neon): a frame of " << plan.frame_bytes << " bytes (" << plan.stats.spill_slots
                                                         << " spill slots, " << stack_streams
                                                         << " stack streams) is more than " << kMaxFrameBytes
                                                         << " in spec '" << spec.key() << "'");
  return plan;
}

a64::VecV vec(int idx) { return a64::VecV(uint32_t(idx)); }
a64::VecV s4(int idx) { return vec(idx).s4(); }
a64::VecV b16(int idx) { return vec(idx).b16(); }

class A64Jit {
 public:
  A64Jit(const KernelSpec& spec, KernelPlan plan, a64::Assembler& a)
      : spec_(spec),
        plan_(std::move(plan)),
        a_(a),
        vmath_(a, kVMathTable, plan_.vmath_scratch),
        constant_table_(a.newLabel()) {
    const std::vector<a64::GpX> regs = stream_registers();
    for (size_t s = 0; s < plan_.streams.size(); ++s) {
      const bool in_register = s < regs.size();
      stream_reg_.push_back(in_register ? regs[s] : kTmp);  // kTmp: loaded per access
      stream_slot_.push_back(in_register ? -1 : kSavedBytes + int(s - regs.size()) * 8);
    }
  }

  void generate() {
    asmjit::Label row_loop = a_.newLabel(), done = a_.newLabel(), by_ld = a_.newLabel(), advanced = a_.newLabel();
    prologue();
    if (!plan_.vmath_fns.empty()) vmath_.load_table_address();
    a_.adr(kConstTable, constant_table_);
    load_stream_pointers();
    a_.mov(kRow, 0);
    load_table_rows(false);
    a_.ldr(kRows, a64::ptr(kArgs, int32_t(offsetof(ir::KernelArgs, rows))));
    a_.cmp(kRows, 0);
    a_.b_le(done);

    a_.bind(row_loop);
    a_.mov(kOff, 0);
    const int unrolled_bytes = plan_.unrolled.copies * kVectorBytes;
    emit_vector_loop(plan_.unrolled, plan_.unrolled_steps, unrolled_bytes, plan_.unrolled_steps * unrolled_bytes);
    emit_vector_loop(plan_.single, plan_.single_steps, kVectorBytes, plan_.full_vectors * kVectorBytes);
    if (plan_.tail_lanes > 0) emit_body(plan_.tail, true);
    a_.subs(kRows, kRows, 1);
    a_.b_eq(done);
    a_.add(kRow, kRow, 1);
    a_.ldr(kTmp, a64::ptr(kArgs, int32_t(offsetof(ir::KernelArgs, row_tables))));
    a_.cbz(kTmp, by_ld);
    load_table_rows(true);
    a_.b(advanced);
    a_.bind(by_ld);
    advance_by_ld(-1);
    a_.bind(advanced);
    a_.b(row_loop);

    a_.bind(done);
    epilogue();

    if (!plan_.vmath_fns.empty()) vmath_.emit_table();
    emit_constant_table();
  }

 private:
  void prologue() {
    a_.sub(a64::sp, a64::sp, plan_.frame_bytes);
    for (uint32_t d = 8; d < 16; d += 2) a_.stp(a64::VecD(d), a64::VecD(d + 1), a64::ptr(a64::sp, int32_t(d - 8) * 8));
    for (uint32_t x = 19; x < 29; x += 2) a_.stp(a64::GpX(x), a64::GpX(x + 1), a64::ptr(a64::sp, 64 + int32_t(x - 19) * 8));
  }

  void epilogue() {
    for (uint32_t d = 8; d < 16; d += 2) a_.ldp(a64::VecD(d), a64::VecD(d + 1), a64::ptr(a64::sp, int32_t(d - 8) * 8));
    for (uint32_t x = 19; x < 29; x += 2) a_.ldp(a64::GpX(x), a64::GpX(x + 1), a64::ptr(a64::sp, 64 + int32_t(x - 19) * 8));
    a_.add(a64::sp, a64::sp, plan_.frame_bytes);
    a_.ret(a64::x30);
  }

  // dst = value (< 2^32) in at most two instructions.
  // `steps` runs of `body`, each advancing kOff by `step_bytes`, until kOff
  // reaches `end_bytes` (the unrolled loop, then the single-vector one).
  void emit_vector_loop(const BodyPlan& body, int64_t steps, int step_bytes, int64_t end_bytes) {
    if (steps <= 0) return;
    asmjit::Label loop = a_.newLabel();
    a_.bind(loop);
    emit_body(body, false);
    a_.add(kOff, kOff, step_bytes);
    if (steps > 1) {
      move_immediate(kTmp2, uint64_t(end_bytes));
      a_.cmp(kOff, kTmp2);
      a_.b_lo(loop);
    }
  }

  void move_immediate(const a64::GpX& dst, uint64_t value) {
    VJIT_INTERNAL_CHECK(value < (uint64_t(1) << 32), "fused kernel (neon): immediate " << value << " too large");
    a_.movz(dst, value & 0xffff, 0);
    if (value >> 16) a_.movk(dst, (value >> 16) & 0xffff, 16);
  }

  // ---- Row pointers

  void set_stream(size_t s, const a64::GpX& value) {
    if (stream_slot_[s] < 0) a_.mov(stream_reg_[s], value);
    else a_.str(value, a64::ptr(a64::sp, stream_slot_[s]));
  }

  void load_stream_pointers() {
    for (bool outputs : {false, true}) {
      a_.ldr(kTmp, a64::ptr(kArgs, int32_t(outputs ? offsetof(ir::KernelArgs, outputs) : offsetof(ir::KernelArgs, inputs))));
      for_each_stream(outputs, [&](size_t s, int index) {
        a_.ldr(kTmp2, a64::ptr(kTmp, index * 8));
        set_stream(s, kTmp2);
      });
    }
  }

  // With args->row_tables (not null): each stream whose operand has a table
  // to table[r]; with `others_by_ld`, each other one on by its ld.
  void load_table_rows(bool others_by_ld) {
    asmjit::Label none = a_.newLabel();
    if (!others_by_ld) {
      a_.ldr(kTmp, a64::ptr(kArgs, int32_t(offsetof(ir::KernelArgs, row_tables))));
      a_.cbz(kTmp, none);
    }
    const int num_inputs = int(spec_.inputs.size());
    for (size_t s = 0; s < plan_.streams.size(); ++s) {
      asmjit::Label by_ld = a_.newLabel(), next = a_.newLabel();
      const int operand = (plan_.streams[s].output ? num_inputs : 0) + plan_.streams[s].index;
      a_.ldr(kTmp, a64::ptr(kArgs, int32_t(offsetof(ir::KernelArgs, row_tables))));
      a_.ldr(kTmp2, a64::ptr(kTmp, operand * 8));
      a_.cbz(kTmp2, others_by_ld ? by_ld : next);
      a_.lsl(kTmp, kRow, 3);
      a_.ldr(kTmp2, a64::ptr(kTmp2, kTmp));
      set_stream(s, kTmp2);
      if (others_by_ld) {
        a_.b(next);
        a_.bind(by_ld);
        advance_by_ld(int(s));
      }
      a_.bind(next);
    }
    a_.bind(none);
  }

  // stream s += ld[index] * sizeof(float): every stream (only = -1), or
  // stream `only`. Between rows: x2 is free.
  void advance_by_ld(int only) {
    for (bool outputs : {false, true}) {
      if (only >= 0 && plan_.streams[size_t(only)].output != outputs) continue;
      a_.ldr(kTmp, a64::ptr(kArgs, int32_t(outputs ? offsetof(ir::KernelArgs, output_ld) : offsetof(ir::KernelArgs, input_ld))));
      for_each_stream(outputs, [&](size_t s, int index) {
        if (only >= 0 && s != size_t(only)) return;
        a_.ldr(kTmp2, a64::ptr(kTmp, index * 8));
        a_.lsl(kTmp2, kTmp2, 2);
        if (stream_slot_[s] < 0) {
          a_.add(stream_reg_[s], stream_reg_[s], kTmp2);
        } else {
          a_.ldr(kOff, a64::ptr(a64::sp, stream_slot_[s]));
          a_.add(kOff, kOff, kTmp2);
          a_.str(kOff, a64::ptr(a64::sp, stream_slot_[s]));
        }
      });
    }
  }

  template <typename Fn>
  void for_each_stream(bool outputs, Fn fn) {
    for (size_t s = 0; s < plan_.streams.size(); ++s)
      if (plan_.streams[s].output == outputs) fn(s, plan_.streams[s].index);
  }

  // The row pointer of stream s in a register (a stack-resident one loaded
  // into x3).
  a64::GpX stream_base(size_t s) {
    if (stream_slot_[s] < 0) return stream_reg_[s];
    a_.ldr(kTmp, a64::ptr(a64::sp, stream_slot_[s]));
    return kTmp;
  }

  // ---- The body: one vector step, as planned

  a64::Mem spill_address(int slot) const { return a64::ptr(a64::sp, plan_.spill_base + slot * kVectorBytes); }

  void emit_body(const BodyPlan& body, bool tail) {
    for (const Action& act : body.actions) {
      switch (act.kind) {
        case Action::Kind::Load: emit_load(act, tail); break;
        case Action::Kind::Reload: a_.ldr(vec(act.reg), spill_address(act.slot)); break;
        case Action::Kind::Spill: a_.str(vec(act.reg), spill_address(act.slot)); break;
        case Action::Kind::Compute: emit_op(spec_.instrs[size_t(act.value) - spec_.inputs.size()], act); break;
        case Action::Kind::Store: emit_store(act, tail); break;
      }
    }
  }

  // Vector `copy` of the current step: [base + x2 + copy * 16]. Full vectors
  // are one access; a tail's lanes one each, so nothing past the row is read
  // or written.
  void emit_load(const Action& act, bool tail) {
    const size_t s = size_t(plan_.stream_of_input[size_t(act.value)]);
    const a64::GpX base = stream_base(s);
    if (plan_.streams[s].scalar) {
      a_.ld1r(s4(act.reg), a64::ptr(base));
    } else if (!tail) {
      vector_access(false, act.reg, base, act.copy);
    } else {
      lane_access(false, act.reg, base);
    }
  }

  void emit_store(const Action& act, bool tail) {
    const size_t s = size_t(plan_.stream_of_output[size_t(act.slot)]);
    const a64::GpX base = stream_base(s);
    if (!tail) {
      vector_access(true, act.reg, base, act.copy);
    } else {
      lane_access(true, act.reg, base);
    }
  }

  void vector_access(bool store, int reg, const a64::GpX& base, int copy) {
    a64::Mem address = a64::ptr(base, kOff);
    if (copy > 0) {
      a_.add(kTmp2, base, kOff);
      address = a64::ptr(kTmp2, copy * kVectorBytes);
    }
    if (store) a_.str(vec(reg), address);
    else a_.ldr(vec(reg), address);
  }

  void lane_access(bool store, int reg, const a64::GpX& base) {
    a_.add(kTmp2, base, kOff);
    for (int lane = 0; lane < plan_.tail_lanes; ++lane) {
      if (lane > 0) a_.add(kTmp2, kTmp2, 4);
      if (store) a_.st1(vec(reg).s(uint32_t(lane)), a64::ptr(kTmp2));
      else a_.ld1(vec(reg).s(uint32_t(lane)), a64::ptr(kTmp2));
    }
  }

  // dst = op(a, b), each op as run_reference_kernel computes it. v31 holds
  // what an op reads besides its operands.
  void emit_op(const KernelInstr& in, const Action& act) {
    const int dst = act.reg, a = act.a_reg, b = act.b_reg >= 0 ? act.b_reg : act.a_reg;
    UnaryFn fn;
    if (vmath_fn(in.op, &fn)) {  // in place: dst = f(dst)
      if (dst != a) a_.mov(b16(dst), b16(a));
      vmath_.emit(fn, dst);
      return;
    }
    switch (in.op) {
      case Op::Neg: a_.fneg(s4(dst), s4(a)); break;
      case Op::Relu:  // a > 0 ? a : +0 (+0 for NaN and -0)
        a_.fcmgt(s4(kOpTemp), s4(a), 0);
        a_.and_(b16(dst), b16(a), b16(kOpTemp));
        break;
      case Op::Step:  // a > 0 ? 1 : 0 (0 for NaN)
        a_.fcmgt(s4(kOpTemp), s4(a), 0);
        load_constant(dst, std::bit_cast<std::uint32_t>(1.0f));
        a_.and_(b16(dst), b16(dst), b16(kOpTemp));
        break;
      case Op::Scale:
        load_constant(kOpTemp, std::bit_cast<std::uint32_t>(in.scalar));
        a_.fmul(s4(dst), s4(a), s4(kOpTemp));
        break;
      case Op::AddScalar:
        load_constant(kOpTemp, std::bit_cast<std::uint32_t>(in.scalar));
        a_.fadd(s4(dst), s4(a), s4(kOpTemp));
        break;
      case Op::Sqrt: a_.fsqrt(s4(dst), s4(a)); break;
      case Op::Add: a_.fadd(s4(dst), s4(a), s4(b)); break;
      case Op::Sub: a_.fsub(s4(dst), s4(a), s4(b)); break;
      case Op::Mul: a_.fmul(s4(dst), s4(a), s4(b)); break;
      case Op::Div: a_.fdiv(s4(dst), s4(a), s4(b)); break;
      default: VJIT_INTERNAL_CHECK(false, "fused kernel (neon): no code for " << ir::op_name(in.op));
    }
  }

  // ---- Constants

  // v<reg> = `bits` in every lane, from this kernel's constant table.
  void load_constant(int reg, std::uint32_t bits) {
    auto it = std::find(constants_.begin(), constants_.end(), bits);
    if (it == constants_.end()) it = constants_.insert(constants_.end(), bits);
    a_.ldr(vec(reg), a64::ptr(kConstTable, int32_t(it - constants_.begin()) * kVectorBytes));
  }

  void emit_constant_table() {
    a_.align(asmjit::AlignMode::kData, 16);
    a_.bind(constant_table_);
    for (std::uint32_t bits : constants_) a_.embedUInt32(bits, kLanes);
    if (constants_.empty()) a_.embedUInt32(0, kLanes);  // the label needs something to point at
  }

  const KernelSpec& spec_;
  const KernelPlan plan_;
  a64::Assembler& a_;
  A64VMathEmitter vmath_;
  asmjit::Label constant_table_;
  std::vector<a64::GpX> stream_reg_;
  std::vector<int> stream_slot_;
  std::vector<std::uint32_t> constants_;
};

class A64Kernel final : public FusedKernel {
 public:
  A64Kernel(const KernelSpec& spec, bool perf_map) : name_(fused_kernel_name(spec, Isa::Neon)) {
    KernelPlan plan = make_plan(spec);
    stats_ = plan.stats;
    code_ = std::make_unique<A64Code>(
        name_, [&](a64::Assembler& assembler) { A64Jit(spec, std::move(plan), assembler).generate(); }, perf_map);
  }

  ir::KernelFn function() const override { return reinterpret_cast<ir::KernelFn>(const_cast<std::uint8_t*>(code_->data())); }
  const std::string& name() const override { return name_; }
  size_t code_bytes() const override { return code_->size(); }
  const FusedKernelStats& stats() const override { return stats_; }

 private:
  std::string name_;
  FusedKernelStats stats_;
  std::unique_ptr<A64Code> code_;
};

}  // namespace

std::shared_ptr<const FusedKernel> compile_a64_fused_kernel(const KernelSpec& spec, bool perf_map) {
  require_isa(Isa::Neon);
  check_kernel_spec(spec);  // before make_plan: a negative width is reported as such
  return std::make_shared<A64Kernel>(spec, perf_map);
}

}  // namespace vjit::codegen
