#include "codegen/x86_unary_kernel.h"

#include <cmath>
#include <numeric>
#include <vector>

#include "codegen/vmath_reference.h"
#include "codegen/x86_jit_generator.h"
#include "vjit/error.h"

namespace vjit::codegen {

namespace {

// ---------------------------------------------------------------------------
// Scalar reference kernels

template <UnaryFn kFn>
void scalar_kernel(const float* src, float* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = unary_reference(kFn, src[i]);
}

UnaryKernel::Entry scalar_entry(UnaryFn fn) {
  switch (fn) {
    case UnaryFn::Exp: return scalar_kernel<UnaryFn::Exp>;
    case UnaryFn::Log: return scalar_kernel<UnaryFn::Log>;
    case UnaryFn::Tanh: return scalar_kernel<UnaryFn::Tanh>;
    case UnaryFn::Sigmoid: return scalar_kernel<UnaryFn::Sigmoid>;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------
// The JIT kernel: void(const float* src, float* dst, int64_t n)
//
// Registers:
//   rdi  reg_src    next source element          (argument 1)
//   rsi  reg_dst    next destination element     (argument 2)
//   rdx  reg_n      elements left                (argument 3)
//   r8   reg_table  the VMathEmitter's constant table
//   rax, rcx        tail mask construction
//   vmm0            the values being computed
//   vmm1..vmm6      VMathEmitter scratch
//   vmm7            Avx2 tail mask (lane i all-ones when i < n)
//   k1              Avx512 tail mask; k2 VMathEmitter scratch
// Only caller-saved registers are used, so the prologue saves nothing.
class UnaryJit final : public JitGenerator {
 public:
  UnaryJit(Isa isa, UnaryFn fn, std::string name)
      : JitGenerator(std::move(name)),
        isa_(isa),
        fn_(fn),
        vmm_x_(make_vmm(isa, 0)),
        vmm_tail_mask_(make_vmm(isa, 7)),
        vmath_(*this, isa, reg_table_, scratch_vmms(fn, isa), scratch_opmasks(isa)) {}

 private:
  static std::vector<int> scratch_vmms(UnaryFn fn, Isa isa) {
    std::vector<int> idx(static_cast<std::size_t>(VMathEmitter::scratch_needs(fn, isa).vmms));
    std::iota(idx.begin(), idx.end(), 1);  // vmm1, vmm2, ...: at most vmm6
    return idx;
  }
  static std::vector<int> scratch_opmasks(Isa isa) {
    if (isa == Isa::Avx512) return {2};  // k1 is the tail mask
    return {};
  }

  void generate() override {
    const int lanes = vector_lanes(isa_);
    Xbyak::Label vector_loop, tail, done;

    preamble();
    vmath_.load_table_address();

    L(vector_loop);
    cmp(reg_n_, lanes);
    jl(tail, T_NEAR);
    vmovups(vmm_x_, ptr[reg_src_]);
    vmath_.emit(fn_, vmm_x_);
    vmovups(ptr[reg_dst_], vmm_x_);
    add(reg_src_, vector_bytes(isa_));
    add(reg_dst_, vector_bytes(isa_));
    sub(reg_n_, lanes);
    jmp(vector_loop, T_NEAR);

    L(tail);  // 0 <= n < lanes elements left (or n < 0 from the caller)
    test(reg_n_, reg_n_);
    jle(done, T_NEAR);
    if (isa_ == Isa::Avx512) {
      tail_avx512();
    } else {
      tail_avx2();
    }

    L(done);
    postamble();

    vmath_.emit_table();
    if (isa_ == Isa::Avx2) {
      align(32);
      L(lane_index_);  // 0, 1, ..., 7: compared with n to build the tail mask
      for (int lane = 0; lane < lanes; ++lane) dd(static_cast<std::uint32_t>(lane));
    }
  }

  // k1 = (1 << n) - 1; masked-off lanes are neither loaded (no fault) nor stored.
  void tail_avx512() {
    const Xbyak::Opmask k_tail(1);
    mov(ecx, reg_n_.cvt32());
    mov(eax, 1);
    shl(eax, cl);
    sub(eax, 1);
    kmovw(k_tail, eax);
    vmovups(vmm_x_ | k_tail | T_z, ptr[reg_src_]);
    vmath_.emit(fn_, vmm_x_);
    vmovups(ptr[reg_dst_] | k_tail, vmm_x_);
  }

  // mask lane i = (n > i); vmaskmovps loads zeros and stores nothing in the
  // other lanes, without faulting.
  void tail_avx2() {
    const Xbyak::Xmm xmm_tail_mask(vmm_tail_mask_.getIdx());
    vmovd(xmm_tail_mask, reg_n_.cvt32());
    vpbroadcastd(vmm_tail_mask_, xmm_tail_mask);
    vpcmpgtd(vmm_tail_mask_, vmm_tail_mask_, ptr[rip + lane_index_]);
    vmaskmovps(vmm_x_, vmm_tail_mask_, ptr[reg_src_]);
    vmath_.emit(fn_, vmm_x_);
    vmaskmovps(ptr[reg_dst_], vmm_tail_mask_, vmm_x_);
  }

  const Isa isa_;
  const UnaryFn fn_;
  const Xbyak::Reg64 reg_src_ = abi_param1;
  const Xbyak::Reg64 reg_dst_ = abi_param2;
  const Xbyak::Reg64 reg_n_ = abi_param3;
  const Xbyak::Reg64 reg_table_ = r8;
  const Vmm vmm_x_;
  const Vmm vmm_tail_mask_;
  VMathEmitter vmath_;
  Xbyak::Label lane_index_;
};

}  // namespace

UnaryKernel::UnaryKernel(Isa isa, UnaryFn fn, bool perf_map)
    : isa_(isa),
      fn_(fn),
      name_(std::string("vjit_unary_") + unary_fn_name(fn) + "_" + isa_name(isa)) {
  require_isa(isa);
  if (isa == Isa::Scalar) {
    entry_ = scalar_entry(fn);
    return;
  }
  jit_ = std::make_unique<UnaryJit>(isa, fn, name_);
  jit_->create_kernel(perf_map);
  entry_ = jit_->entry<Entry>();
}

UnaryKernel::~UnaryKernel() = default;
UnaryKernel::UnaryKernel(UnaryKernel&&) noexcept = default;
UnaryKernel& UnaryKernel::operator=(UnaryKernel&&) noexcept = default;

std::size_t UnaryKernel::code_size() const { return jit_ ? jit_->getSize() : 0; }

}  // namespace vjit::codegen
