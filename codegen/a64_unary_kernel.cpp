#include "codegen/a64_unary_kernel.h"

#include <vector>

#include "codegen/a64_code.h"
#include "codegen/a64_vmath.h"
#include "codegen/isa.h"

namespace vjit::codegen {

namespace {

namespace a64 = asmjit::a64;

constexpr int kLanes = 4;
constexpr int kVectorBytes = 16;

// void kernel(const float* src, float* dst, int64_t n) (AAPCS64):
//   x0  next source element                 (argument 1)
//   x1  next destination element            (argument 2)
//   x2  elements left                       (argument 3)
//   x3  the vector-math constant table
//   x4  the address of a tail lane
//   v0  the values being computed
//   v16.. vector-math scratch: caller-saved, unlike v8-v15, so the kernel
//         saves nothing
const a64::GpX kSrc = a64::x0, kDst = a64::x1, kLeft = a64::x2, kTable = a64::x3, kLane = a64::x4;
constexpr int kValue = 0;
constexpr int kFirstScratch = 16;

std::vector<int> scratch_registers(UnaryFn fn) {
  std::vector<int> scratch;
  for (int i = 0; i < A64VMathEmitter::scratch_needs(fn); ++i) scratch.push_back(kFirstScratch + i);
  return scratch;
}

// The 1-3 last elements, lane by lane: after the load or store of lane i,
// on to `done` when lane i + 1 is past the end.
void tail_lanes(a64::Assembler& a, bool store, const a64::GpX& base, const asmjit::Label& done) {
  const a64::VecV value(kValue);
  for (int lane = 0; lane < kLanes - 1; ++lane) {
    if (lane > 0) {
      a.cmp(kLeft, lane);
      a.b_le(done);
    }
    a.add(kLane, base, lane * 4);  // a lane's load or store takes no offset
    if (store) a.st1(value.s(uint32_t(lane)), a64::ptr(kLane));
    else a.ld1(value.s(uint32_t(lane)), a64::ptr(kLane));
  }
  a.bind(done);
}

void emit_kernel(a64::Assembler& a, UnaryFn fn) {
  A64VMathEmitter vmath(a, kTable, scratch_registers(fn));
  const a64::VecV value(kValue);
  asmjit::Label vector_loop = a.newLabel(), tail = a.newLabel(), loaded = a.newLabel(), done = a.newLabel();

  vmath.load_table_address();
  a.bind(vector_loop);
  a.cmp(kLeft, kLanes);
  a.b_lt(tail);
  a.ldr(value, a64::ptr(kSrc));
  vmath.emit(fn, kValue);
  a.str(value, a64::ptr(kDst));
  a.add(kSrc, kSrc, kVectorBytes);
  a.add(kDst, kDst, kVectorBytes);
  a.sub(kLeft, kLeft, kLanes);
  a.b(vector_loop);

  a.bind(tail);  // 0 <= n < 4 elements left (or n < 0 from the caller)
  a.cmp(kLeft, 0);
  a.b_le(done);
  a.movi(value.b16(), 0);  // the lanes past the end compute fn(0), never stored
  tail_lanes(a, false, kSrc, loaded);
  vmath.emit(fn, kValue);
  tail_lanes(a, true, kDst, done);
  a.ret(a64::x30);

  vmath.emit_table();
}

}  // namespace

A64UnaryKernel::A64UnaryKernel(UnaryFn fn, bool perf_map)
    : name_(std::string("vjit_unary_") + unary_fn_name(fn) + "_neon") {
  require_isa(Isa::Neon);
  code_ = std::make_unique<A64Code>(name_, [&](a64::Assembler& a) { emit_kernel(a, fn); }, perf_map);
  entry_ = reinterpret_cast<Entry>(const_cast<std::uint8_t*>(code_->data()));
}

A64UnaryKernel::~A64UnaryKernel() = default;

std::size_t A64UnaryKernel::code_size() const { return code_->size(); }

}  // namespace vjit::codegen
