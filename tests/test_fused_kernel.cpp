// Tests of the fused elementwise kernels of every JIT ISA (codegen/jit_kernels.h:
// x86_fused_kernel.h on x86-64, a64_fused_kernel.h on AArch64) and of the
// kernel cache that holds them (jit/kernel_cache.h).
//
// The property test draws random KernelSpecs (fixed seed) and checks each JIT
// kernel against run_reference_kernel on guarded buffers: the last row of every
// input and output ends at a page followed by a PROT_NONE page, so a tail that
// reads or writes one element too many faults; output padding between rows is
// filled with a sentinel that must survive.
//
// Tolerance. The ops other than Exp, Log, Tanh and Sigmoid are single IEEE
// operations in both implementations, so given equal operands they agree bit
// for bit, and a spec without transcendentals must match exactly (NaN equals
// NaN). The transcendentals differ: the JIT's (x86_vmath.h, a64_vmath.h) are within 1 ulp of
// the correctly rounded result (sigmoid 2), glibc's expf/logf within 1, tanhf
// within 2, and the reference's sigmoid 1 / (1 + expf(-x)) within ~2.5; so one
// transcendental may differ by K ulp of its result, K = 4 (6 for sigmoid).
// Such a difference then flows through the rest of the DAG, where it can grow
// without bound (x − y of near-equal values, exp of a large value), so no
// fixed ulp or relative tolerance is right for a chain. The test therefore
// carries, next to each reference value v, a rigorous bound E on |jit − v|,
// derived from the operands' bounds by each op's exact worst case:
//   neg, relu: E_a        tanh: E_a + K ulp    sigmoid: E_a / 4 + K ulp + 2^-126
//   a ± b: E_a + E_b + ulp                     a · b: |b|E_a + |a|E_b + E_aE_b + ulp
//   a / b: (|b|E_a + |a|E_b) / (|b|(|b| − E_b)) + ulp   (∞ when |b| <= E_b)
//   exp: e^a (e^E_a − 1) + K ulp              log: E_a / (a − E_a) + K ulp
//   sqrt: E_a / (√(a − E_a) + √a) + ulp       step: 1 when |a| <= E_a, else 0
// where "ulp" is the float spacing at |v| + E (the two sides round different
// exact values), added for the IEEE ops only when an operand already differs
// (E_a + E_b > 0). Sigmoid's 2^-126: below a = -88.72 the reference's
// expf(-a) overflows and it returns 0 where the JIT returns e^a < 2^-126. A
// transcendental of an exact non-finite operand or result must match exactly
// (special values). A value whose interval reaches past FLT_MAX gets E = ∞:
// its elements are counted as unchecked unless both sides are equal. The
// test reports the largest |jit − v| / E seen; it must be <= 1.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <latch>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "codegen/kernel_spec.h"
#include "codegen/isa.h"
#include "codegen/jit_kernels.h"
#include "jit/kernel_cache.h"
#include "vjit/error.h"

namespace vjit::codegen {
namespace {

using ir::Op;

constexpr double kInfD = std::numeric_limits<double>::infinity();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr std::uint32_t kSentinel = 0x7fa00badu;  // a NaN payload no op produces

#define SKIP_IF_NO_ISA(isa) \
  if (!cpu_has(isa)) GTEST_SKIP() << "this CPU lacks " << isa_name(isa) << " (best: " << isa_name(best_isa()) << ")"

// ---------------------------------------------------------------------------
// Guarded buffers

// `floats` floats ending exactly at a PROT_NONE page.
class GuardedBuffer {
 public:
  explicit GuardedBuffer(size_t floats) {
    const size_t page = size_t(::sysconf(_SC_PAGESIZE));
    const size_t data_pages = (floats * sizeof(float) + page - 1) / page;
    bytes_ = (data_pages + 1) * page;
    void* base = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<char*>(base);
    if (::mprotect(base_ + data_pages * page, page, PROT_NONE) != 0) throw std::runtime_error("mprotect failed");
    data_ = reinterpret_cast<float*>(base_ + data_pages * page) - floats;
    size_ = floats;
  }
  ~GuardedBuffer() { ::munmap(base_, bytes_); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  float* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0;
  float* data_ = nullptr;
  size_t size_ = 0;
};

// ---------------------------------------------------------------------------
// Cases: a spec with the rows and leading dimensions it runs on

struct Case {
  KernelSpec spec;
  int64_t rows = 0;
  std::vector<int64_t> input_ld, output_ld;
};

int64_t buffer_floats(int64_t rows, int64_t ld, int64_t row_len) {
  if (rows == 0) return 0;
  return ld == 0 ? row_len : (rows - 1) * ld + row_len;
}

// Error bounds (see the file comment).
double float_ulp(double x) {
  x = std::abs(x);
  if (!(x <= FLT_MAX)) return kInfD;
  if (x < FLT_MIN) return 0x1p-149;
  int e = 0;
  std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1)
  return std::ldexp(1.0, e - 24);
}

int transcendental_ulps(Op op) {
  switch (op) {
    case Op::Exp:
    case Op::Log:
    case Op::Tanh: return 4;
    case Op::Sigmoid: return 6;
    default: return 0;
  }
}

// The bound E of instruction `in` with reference value v and operands (a, Ea), (b, Eb).
double propagate(const KernelInstr& in, float v, float a, double ea, float b, double eb) {
  const double da = std::abs(double(a)), db = std::abs(double(b));
  const int k = transcendental_ulps(in.op);
  double e = 0;
  switch (in.op) {
    case Op::Neg:
    case Op::Relu: return ea;
    case Op::Step: return ea > 0 && !(da > ea) ? 1.0 : 0.0;
    case Op::Scale: e = std::abs(double(in.scalar)) * ea; break;
    case Op::AddScalar: e = ea; break;
    case Op::Add:
    case Op::Sub: e = ea + eb; break;
    case Op::Mul: e = (ea > 0 ? db * ea : 0) + (eb > 0 ? da * eb : 0) + ea * eb; break;
    case Op::Div:
      if (ea == 0 && eb == 0) return 0;
      e = db > eb ? (db * ea + (eb > 0 ? da * eb : 0)) / (db * (db - eb)) : kInfD;
      break;
    case Op::Sqrt:
      if (ea == 0) return 0;
      e = da > ea ? ea / (std::sqrt(double(a) - ea) + std::sqrt(double(a))) : kInfD;
      break;
    case Op::Exp: e = ea > 0 ? std::exp(double(a)) * std::expm1(ea) : 0; break;
    case Op::Log: e = ea > 0 ? (double(a) > ea ? ea / (double(a) - ea) : kInfD) : 0; break;
    case Op::Tanh: e = ea; break;
    // The reference's 1 / (1 + expf(-a)) is 0 once expf(-a) overflows (a < -88.72),
    // where the JIT returns e^a < 2^-126 (down to the denormals): an absolute floor.
    case Op::Sigmoid: e = ea / 4 + 0x1p-126; break;
    default: ADD_FAILURE() << "no bound for " << ir::op_name(in.op); return kInfD;
  }
  if (k > 0) {
    if (ea == 0 && (!std::isfinite(a) || !std::isfinite(v))) return 0;  // special values are exact
    e += k * float_ulp(std::abs(double(v)) + e);
  } else {
    if (e == 0) return 0;  // equal operands: the same IEEE operation
    e += float_ulp(std::abs(double(v)) + e);
  }
  if (!(std::abs(double(v)) + e <= FLT_MAX)) return kInfD;
  return e;
}

// The bound of every output element: bounds[o][r * width + i]. The values
// the bounds start from are run_reference_kernel's own, for every
// instruction (one reference run with every instruction as an output).
std::vector<std::vector<double>> reference_bounds(const Case& c, const std::vector<const float*>& inputs) {
  const KernelSpec& spec = c.spec;
  const int n = int(spec.inputs.size());
  const size_t elements = size_t(c.rows * spec.width);
  KernelSpec all = spec;
  all.outputs.clear();
  for (size_t k = 0; k < spec.instrs.size(); ++k) all.outputs.push_back(int(k));
  std::vector<std::vector<float>> values(spec.instrs.size(), std::vector<float>(elements));
  std::vector<float*> value_ptrs;
  for (std::vector<float>& v : values) value_ptrs.push_back(v.data());
  const std::vector<int64_t> value_ld(spec.instrs.size(), spec.width);
  run_reference_kernel(all, ir::KernelArgs{c.rows, inputs.data(), c.input_ld.data(), value_ptrs.data(), value_ld.data()});

  std::vector<std::vector<double>> bounds(spec.outputs.size(), std::vector<double>(elements));
  std::vector<double> e(spec.instrs.size());
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t i = 0; i < spec.width; ++i) {
      const size_t at = size_t(r * spec.width + i);
      auto operand = [&](int o) -> std::pair<float, double> {
        if (o < 0) return {0.0f, 0.0};
        if (o >= n) return {values[size_t(o - n)][at], e[size_t(o - n)]};
        const float* row = inputs[size_t(o)] + r * c.input_ld[size_t(o)];
        return {spec.inputs[size_t(o)].scalar ? row[0] : row[i], 0.0};
      };
      for (size_t k = 0; k < spec.instrs.size(); ++k) {
        const KernelInstr& in = spec.instrs[k];
        auto [a, ea] = operand(in.a);
        auto [b, eb] = operand(in.b);
        e[k] = propagate(in, values[k][at], a, ea, b, eb);
      }
      for (size_t o = 0; o < spec.outputs.size(); ++o) bounds[o][at] = e[size_t(spec.outputs[o])];
    }
  }
  return bounds;
}

bool same(float x, float y) { return (std::isnan(x) && std::isnan(y)) || x == y; }

std::int64_t ulp_distance(float x, float y) {
  auto ordinal = [](float f) {
    const auto bits = std::bit_cast<std::int32_t>(f);
    return bits >= 0 ? std::int64_t(bits) : -std::int64_t(bits & 0x7fffffff);
  };
  return std::abs(ordinal(x) - ordinal(y));
}

struct Stats {
  int cases = 0;
  int spilling_cases = 0;
  int unrolled_cases = 0;  // main loop on 2 or 4 vectors per step
  int64_t elements = 0;
  int64_t exact = 0;      // bit-equal (NaN-aware)
  int64_t unchecked = 0;  // unequal, with an infinite bound
  double worst_ratio = 0;  // max |jit − ref| / E over checked unequal elements
  // Checked unequal elements by ulp distance: <= 1, <= 4, <= 64, <= 2^16, more.
  int64_t ulp_histogram[5] = {};
  std::string worst_case;
};

// Random input values: mostly in [-2, 2], sometimes a special one.
float random_value(std::mt19937_64& rng) {
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  if (std::uniform_int_distribution<int>(0, 49)(rng) != 0) return uniform(rng);
  constexpr float kSpecial[] = {kInf, -kInf, kNaN, 0.0f, -0.0f, 1e30f, -1e30f, 1e-40f, 80.0f, -100.0f};
  return kSpecial[std::uniform_int_distribution<size_t>(0, std::size(kSpecial) - 1)(rng)];
}

// Runs the JIT kernel and the reference on the same guarded inputs; every
// output element must be within its bound, and padding must be untouched.
void check_case(const Case& c, Isa isa, std::mt19937_64& rng, Stats& stats, const std::string& what) {
  const KernelSpec& spec = c.spec;
  std::shared_ptr<const FusedKernel> kernel = compile_fused_kernel(spec, isa);
  ++stats.cases;
  if (kernel->stats().spills > 0) ++stats.spilling_cases;
  if (kernel->stats().unroll > 1) ++stats.unrolled_cases;

  std::vector<std::unique_ptr<GuardedBuffer>> in_buffers;
  std::vector<const float*> inputs;
  for (size_t j = 0; j < spec.inputs.size(); ++j) {
    const int64_t row_len = spec.inputs[j].scalar ? 1 : spec.width;
    in_buffers.push_back(std::make_unique<GuardedBuffer>(size_t(buffer_floats(c.rows, c.input_ld[j], row_len))));
    for (size_t i = 0; i < in_buffers.back()->size(); ++i) in_buffers.back()->data()[i] = random_value(rng);
    inputs.push_back(in_buffers.back()->data());
  }
  std::vector<std::unique_ptr<GuardedBuffer>> jit_out, ref_out;
  std::vector<float*> jit_ptrs, ref_ptrs;
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    const size_t floats = size_t(buffer_floats(c.rows, c.output_ld[o], spec.width));
    for (auto* list : {&jit_out, &ref_out}) {
      list->push_back(std::make_unique<GuardedBuffer>(floats));
      std::fill_n(reinterpret_cast<std::uint32_t*>(list->back()->data()), floats, kSentinel);
    }
    jit_ptrs.push_back(jit_out.back()->data());
    ref_ptrs.push_back(ref_out.back()->data());
  }
  const ir::KernelArgs jit_args{c.rows, inputs.data(), c.input_ld.data(), jit_ptrs.data(), c.output_ld.data()};
  kernel->function()(&jit_args);
  run_reference_kernel(spec, ir::KernelArgs{c.rows, inputs.data(), c.input_ld.data(), ref_ptrs.data(), c.output_ld.data()});
  const std::vector<std::vector<double>> bounds = reference_bounds(c, inputs);

  int failures = 0;
  for (size_t o = 0; o < spec.outputs.size(); ++o) {
    const float* got = jit_ptrs[o];
    const float* want = ref_ptrs[o];
    for (size_t x = 0; x < jit_out[o]->size(); ++x) {
      const int64_t ld = c.output_ld[o];
      const int64_t r = ld == 0 ? 0 : int64_t(x) / ld, i = ld == 0 ? int64_t(x) : int64_t(x) % ld;
      if (i >= spec.width) {  // padding between rows
        if (std::bit_cast<std::uint32_t>(got[x]) != kSentinel && failures++ < 5)
          ADD_FAILURE() << what << ": output " << o << " row " << r << " padding element " << i << " was written";
        continue;
      }
      if (ld == 0 && c.rows > 1) continue;  // every row wrote here; the last one wins on both sides
      ++stats.elements;
      const double e = bounds[o][size_t(r * spec.width + i)];
      if (same(got[x], want[x])) {
        ++stats.exact;
        continue;
      }
      if (!(e < kInfD)) {
        ++stats.unchecked;
        continue;
      }
      const double diff = std::abs(double(got[x]) - double(want[x]));
      const double ratio = e > 0 ? diff / e : kInfD;
      const std::int64_t ulps = ulp_distance(got[x], want[x]);
      ++stats.ulp_histogram[ulps <= 1 ? 0 : ulps <= 4 ? 1 : ulps <= 64 ? 2 : ulps <= 65536 ? 3 : 4];
      if (ratio > stats.worst_ratio) {
        stats.worst_ratio = ratio;
        stats.worst_case = what;
      }
      if (!(diff <= e) && failures++ < 5) {
        ADD_FAILURE() << what << ": output " << o << " row " << r << " element " << i << ": jit " << got[x]
                      << " reference " << want[x] << " bound " << e << "\nspec " << spec.key();
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Random specs

constexpr Op kAllOps[] = {Op::Neg, Op::Sigmoid, Op::Tanh, Op::Relu, Op::Exp,       Op::Log, Op::Sqrt,
                          Op::Step, Op::Scale,  Op::AddScalar, Op::Add, Op::Sub, Op::Mul, Op::Div};

bool is_binary(Op op) { return op == Op::Add || op == Op::Sub || op == Op::Mul || op == Op::Div; }

// How operands are drawn: mostly recent values (deep chains, short lives),
// any earlier value (longer lives), or, for register pressure, inputs only for
// the first half of the instructions and then values nothing has read yet,
// mostly by binary ops, with every value nothing reads an output (most of the
// first half live at once: spills on Avx2).
enum class Operands { Recent, Any, Pressure };

// 1–6 inputs (a quarter scalar), `instructions` instructions over every op
// (log and sqrt read x·x + 0.5, div divides by y·y + 0.5, so their operands
// are >= 0.5), 1–4 outputs: the last instruction, and values nothing reads
// or any (Pressure: as many as values nothing reads).
KernelSpec random_spec(std::mt19937_64& rng, int num_inputs, int instructions, int64_t width, Operands operands) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  KernelSpec spec;
  spec.width = width;
  for (int j = 0; j < num_inputs; ++j) spec.inputs.push_back({uniform(0, 3) == 0});
  auto value_count = [&] { return num_inputs + int(spec.instrs.size()); };
  std::vector<int> unread;  // instruction values nothing reads yet
  auto pick = [&] {
    const int n = value_count();
    const bool first_half = 2 * int(spec.instrs.size()) < instructions;
    switch (operands) {
      case Operands::Recent: return uniform(0, 9) < 7 ? std::max(0, n - 1 - uniform(0, 7)) : uniform(0, n - 1);
      case Operands::Any: return uniform(0, 9) < 3 ? n - 1 : uniform(0, n - 1);
      case Operands::Pressure:
        if (first_half) return uniform(0, num_inputs - 1);
        if (!unread.empty()) return unread[size_t(uniform(0, int(unread.size()) - 1))];
        return uniform(0, n - 1);
    }
    return 0;
  };
  auto push = [&](Op op, int a, int b, float scalar) {
    spec.instrs.push_back({op, a, b, scalar});
    for (int operand : {a, b}) unread.erase(std::remove(unread.begin(), unread.end(), operand), unread.end());
    unread.push_back(value_count() - 1);
    return value_count() - 1;
  };
  auto safe_positive = [&](int x) { return push(Op::AddScalar, push(Op::Mul, x, x, 0), -1, 0.5f); };
  while (int(spec.instrs.size()) < instructions) {
    Op op = kAllOps[std::uniform_int_distribution<size_t>(0, std::size(kAllOps) - 1)(rng)];
    if (operands == Operands::Pressure && 2 * int(spec.instrs.size()) >= instructions && uniform(0, 9) < 7)
      op = std::array{Op::Add, Op::Sub, Op::Mul}[size_t(uniform(0, 2))];  // read the first half's values
    const bool guarded = op == Op::Log || op == Op::Sqrt || op == Op::Div;
    if (guarded && int(spec.instrs.size()) + 3 > instructions) op = Op::Mul;
    if (op == Op::Log || op == Op::Sqrt) {
      push(op, safe_positive(pick()), -1, 0);
    } else if (op == Op::Div) {
      const int a = pick();
      push(op, a, safe_positive(pick()), 0);
    } else if (is_binary(op)) {
      push(op, pick(), pick(), 0);
    } else {
      const float scalar = op == Op::Scale ? std::uniform_real_distribution<float>(-2, 2)(rng)
                                           : std::uniform_real_distribution<float>(-1, 1)(rng);
      push(op, pick(), -1, op == Op::Scale || op == Op::AddScalar ? scalar : 0.0f);
    }
  }
  const int num_instrs = int(spec.instrs.size());
  const int outputs = operands == Operands::Pressure ? int(unread.size()) : uniform(1, 4);
  spec.outputs.push_back(num_instrs - 1);
  for (int o = 1; o < outputs; ++o) {  // preferably a value nothing reads (else it would be dead)
    const bool take_unread = !unread.empty() && uniform(0, 1) == 0;
    spec.outputs.push_back(take_unread ? unread[size_t(uniform(0, int(unread.size()) - 1))] - num_inputs
                                       : uniform(0, num_instrs - 1));
  }
  return spec;
}

int64_t random_width(std::mt19937_64& rng) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  if (uniform(0, 1) == 0) return uniform(1, 300);
  const int base = uniform(0, 1) == 0 ? 8 : 16;  // near a multiple of either vector length
  return std::max(1, base * uniform(0, 300 / base) + uniform(-1, 1));
}

// A random spec (operands drawn as given, or each way at random) with random
// rows (0–9) and leading dimensions (a fifth of the inputs ld 0, others a row
// plus 0–3 floats of padding).
Case random_case(std::mt19937_64& rng, int num_inputs, int instructions, std::optional<Operands> operands = {}) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Case c;
  constexpr Operands kDraws[] = {Operands::Recent, Operands::Recent, Operands::Any, Operands::Pressure};
  if (!operands) operands = kDraws[uniform(0, 3)];
  c.spec = random_spec(rng, num_inputs, instructions, random_width(rng), *operands);
  c.rows = uniform(0, 9);
  for (const KernelInput& in : c.spec.inputs) {
    const int64_t row_len = in.scalar ? 1 : c.spec.width;
    c.input_ld.push_back(uniform(0, 4) == 0 ? 0 : row_len + uniform(0, 3));
  }
  for (size_t o = 0; o < c.spec.outputs.size(); ++o) c.output_ld.push_back(c.spec.width + uniform(0, 3));
  return c;
}

void report(const char* test, Isa isa, const Stats& s) {
  const int64_t* h = s.ulp_histogram;
  std::printf(
      "[%s %s] cases %d (spilling %d, unrolled %d), elements %lld: bit-equal %lld, unchecked (infinite bound) %lld, "
      "others by ulp distance <=1: %lld, <=4: %lld, <=64: %lld, <=2^16: %lld, more: %lld; "
      "worst |jit-ref|/bound %.3g%s%s\n",
      test, isa_name(isa), s.cases, s.spilling_cases, s.unrolled_cases, static_cast<long long>(s.elements),
      static_cast<long long>(s.exact), static_cast<long long>(s.unchecked), static_cast<long long>(h[0]),
      static_cast<long long>(h[1]), static_cast<long long>(h[2]), static_cast<long long>(h[3]),
      static_cast<long long>(h[4]), s.worst_ratio, s.worst_case.empty() ? "" : " in ", s.worst_case.c_str());
}

// ---------------------------------------------------------------------------
// Property tests, per ISA

class FusedKernelTest : public ::testing::TestWithParam<Isa> {};

constexpr int kRandomCases = 1000;

TEST_P(FusedKernelTest, RandomSpecsMatchTheReference) {
  const Isa isa = GetParam();
  SKIP_IF_NO_ISA(isa);
  std::mt19937_64 rng(20240611);
  Stats stats;
  for (int n = 0; n < kRandomCases; ++n) {
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const Case c = random_case(rng, uniform(1, 6), uniform(1, 40));
    check_case(c, isa, rng, stats, "case " + std::to_string(n));
    if (HasFailure()) break;
  }
  report("random", isa, stats);
  EXPECT_EQ(stats.cases, kRandomCases);
  EXPECT_LE(stats.worst_ratio, 1.0);
  EXPECT_LT(stats.unchecked, stats.elements / 20) << "too few elements have a finite bound";
}

// Long random DAGs built for register pressure: dozens of values live at
// once, so both ISAs spill.
TEST_P(FusedKernelTest, RandomHighPressureSpecsMatchTheReference) {
  const Isa isa = GetParam();
  SKIP_IF_NO_ISA(isa);
  std::mt19937_64 rng(424242);
  Stats stats;
  for (int n = 0; n < 150; ++n) {
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const Case c = random_case(rng, uniform(1, 6), uniform(60, 140), Operands::Pressure);
    check_case(c, isa, rng, stats, "pressure case " + std::to_string(n));
    if (HasFailure()) break;
  }
  report("pressure", isa, stats);
  EXPECT_GT(stats.spilling_cases, 50);
  EXPECT_LE(stats.worst_ratio, 1.0);
}

// Without transcendentals both sides do the same IEEE operations: bit-equal.
TEST_P(FusedKernelTest, ExactOpsAreBitEqual) {
  const Isa isa = GetParam();
  SKIP_IF_NO_ISA(isa);
  std::mt19937_64 rng(7);
  Stats stats;
  for (int n = 0; n < 100; ++n) {
    Case c = random_case(rng, 1 + n % 6, 1 + n % 40);
    for (KernelInstr& in : c.spec.instrs)
      if (transcendental_ulps(in.op) > 0) in.op = Op::Neg;
    check_case(c, isa, rng, stats, "exact case " + std::to_string(n));
  }
  report("exact", isa, stats);
  EXPECT_EQ(stats.exact, stats.elements);
}

// 60 values live at once: 60 products of the inputs, then summed in the
// opposite order, with transcendentals in between so the scratch registers
// are taken too.
KernelSpec many_live_values(int live) {
  KernelSpec spec;
  spec.width = 37;
  spec.inputs = {{false}, {false}, {true}, {false}};
  for (int v = 0; v < live; ++v) {
    const int input = v % 4;
    spec.instrs.push_back({Op::Scale, input, -1, 0.25f + 0.01f * float(v)});
    if (v % 10 == 3) spec.instrs.push_back({Op::Tanh, 4 + int(spec.instrs.size()) - 1, -1, 0});
  }
  std::vector<int> values;
  for (size_t k = 0; k < spec.instrs.size(); ++k) values.push_back(4 + int(k));
  int acc = values.back();
  for (size_t v = values.size() - 1; v-- > 0;) {
    spec.instrs.push_back({v % 7 == 0 ? Op::Mul : Op::Add, acc, values[v], 0});
    acc = 4 + int(spec.instrs.size()) - 1;
    if (v % 13 == 0) {
      spec.instrs.push_back({Op::Sigmoid, acc, -1, 0});
      acc = 4 + int(spec.instrs.size()) - 1;
    }
  }
  spec.outputs = {int(spec.instrs.size()) - 1, 0, live / 2};
  return spec;
}

TEST_P(FusedKernelTest, SpillsWhenValuesOutnumberRegisters) {
  const Isa isa = GetParam();
  SKIP_IF_NO_ISA(isa);
  std::mt19937_64 rng(11);
  Stats stats;
  for (int live : {20, 40, 60}) {
    Case c;
    c.spec = many_live_values(live);
    c.rows = 5;
    c.input_ld = {37, 40, 1, 0};
    c.output_ld = {37, 38, 39};
    const FusedKernelStats ks = compile_fused_kernel(c.spec, isa)->stats();
    if (live >= 40) {
      EXPECT_GT(ks.spills, 0) << live << " live values";
      EXPECT_GT(ks.reloads, 0) << live << " live values";
    }
    EXPECT_LT(ks.spill_slots, live) << "spill slots are reused";
    check_case(c, isa, rng, stats, std::to_string(live) + " live values");
  }
  report("spill", isa, stats);
  EXPECT_GT(stats.spilling_cases, 0);
}

// More streams than general-purpose registers: the extra row pointers live on
// the stack.
TEST_P(FusedKernelTest, ManyInputsAndOutputs) {
  const Isa isa = GetParam();
  SKIP_IF_NO_ISA(isa);
  std::mt19937_64 rng(13);
  Stats stats;
  for (int transcendental = 0; transcendental < 2; ++transcendental) {
    Case c;
    c.spec.width = 45;
    for (int j = 0; j < 14; ++j) c.spec.inputs.push_back({j % 5 == 4});
    int acc = 0;
    for (int j = 1; j < 14; ++j) {
      c.spec.instrs.push_back({j % 2 ? Op::Add : Op::Mul, acc, j, 0});
      acc = 14 + int(c.spec.instrs.size()) - 1;
      if (transcendental && j % 4 == 0) {
        c.spec.instrs.push_back({Op::Tanh, acc, -1, 0});
        acc = 14 + int(c.spec.instrs.size()) - 1;
      }
      c.spec.outputs.push_back(acc - 14);
    }
    c.rows = 4;
    for (int j = 0; j < 14; ++j) c.input_ld.push_back(j % 3 == 0 ? 0 : (c.spec.inputs[size_t(j)].scalar ? 2 : 46));
    c.output_ld.assign(c.spec.outputs.size(), 47);
    check_case(c, isa, rng, stats, transcendental ? "many streams, tanh" : "many streams");
  }
  report("streams", isa, stats);
}

// Every width from 1 to 70 (each tail length of both ISAs, several times) and
// rows 0..3, on a fixed small LSTM-like spec.
TEST_P(FusedKernelTest, EveryTailLength) {
  const Isa isa = GetParam();
  SKIP_IF_NO_ISA(isa);
  std::mt19937_64 rng(17);
  Stats stats;
  for (int64_t width = 1; width <= 70; ++width) {
    Case c;
    c.spec.width = width;
    c.spec.inputs = {{false}, {false}, {true}};
    c.spec.instrs = {{Op::Sigmoid, 0, -1, 0}, {Op::Tanh, 1, -1, 0}, {Op::Mul, 3, 4, 0}, {Op::Mul, 5, 2, 0}};
    c.spec.outputs = {3, 0};
    c.rows = width % 4;
    c.input_ld = {width, width + 1, 1};
    c.output_ld = {width, width};
    check_case(c, isa, rng, stats, "width " + std::to_string(width));
  }
  report("tails", isa, stats);
}

TEST_P(FusedKernelTest, DeadInstructionsAndUnusedInputs) {
  const Isa isa = GetParam();
  SKIP_IF_NO_ISA(isa);
  std::mt19937_64 rng(19);
  Stats stats;
  Case c;
  c.spec.width = 19;
  c.spec.inputs = {{false}, {false}, {false}};  // input 1 is never read
  c.spec.instrs = {{Op::Exp, 0, -1, 0}, {Op::Log, 3, -1, 0}, {Op::Add, 0, 2, 0}};
  c.spec.outputs = {2};  // exp and log are dead
  c.rows = 3;
  c.input_ld = {19, 19, 0};
  c.output_ld = {20};
  check_case(c, isa, rng, stats, "dead code");
  EXPECT_EQ(stats.exact, stats.elements);  // no transcendental was computed
  // A spec with nothing to write compiles to a kernel that writes nothing.
  KernelSpec empty;
  empty.width = 10;
  empty.inputs = {{false}};
  const ir::KernelArgs args{3, nullptr, nullptr, nullptr, nullptr};
  compile_fused_kernel(empty, isa)->function()(&args);
}

// A malformed spec is refused with InternalError, never compiled.
TEST_P(FusedKernelTest, RejectsMalformedSpecs) {
  const Isa isa = GetParam();
  SKIP_IF_NO_ISA(isa);
  KernelSpec good;
  good.width = 8;
  good.inputs = {{false}, {false}};
  good.instrs = {{Op::Add, 0, 1, 0}, {Op::Tanh, 2, -1, 0}};
  good.outputs = {1};
  EXPECT_NO_THROW(compile_fused_kernel(good, isa));
  auto expect_rejected = [&](KernelSpec spec, const char* what) {
    EXPECT_THROW(compile_fused_kernel(spec, isa), InternalError) << what;
  };
  KernelSpec s = good;
  s.instrs[0].b = 5;
  expect_rejected(s, "operand out of range");
  s = good;
  s.instrs[0].a = 2;  // its own value
  expect_rejected(s, "operand refers forward");
  s = good;
  s.instrs[1].a = -1;
  expect_rejected(s, "negative operand");
  s = good;
  s.instrs[1].b = 0;
  expect_rejected(s, "unary op with a second operand");
  s = good;
  s.instrs[0].b = -1;
  expect_rejected(s, "binary op without a second operand");
  s = good;
  s.instrs[0].op = Op::MatMul;
  expect_rejected(s, "not elementwise");
  s = good;
  s.instrs[0].op = Op::Dropout;
  expect_rejected(s, "dropout is not fusable here");
  s = good;
  s.outputs = {2};
  expect_rejected(s, "output out of range");
  s = good;
  s.width = -1;
  expect_rejected(s, "negative width");
  EXPECT_THROW(compile_fused_kernel(good, Isa::Scalar), InternalError);
}

TEST_P(FusedKernelTest, NamedForProfilers) {
  const Isa isa = GetParam();
  SKIP_IF_NO_ISA(isa);
  KernelSpec spec;
  spec.width = 64;
  spec.inputs = {{false}, {false}};
  spec.instrs = {{Op::Sigmoid, 0, -1, 0}, {Op::Mul, 2, 1, 0}};
  spec.outputs = {1};
  const std::string path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
  std::remove(path.c_str());
  std::shared_ptr<const FusedKernel> kernel = compile_fused_kernel(spec, isa, /*perf_map=*/true);
  EXPECT_EQ(kernel->name().rfind(std::string("vjit_fused_") + isa_name(isa) + "_w64_sigmoid1_mul1_", 0), 0u)
      << kernel->name();
  std::ifstream in(path);
  std::string line, found;
  while (std::getline(in, line))
    if (line.find(kernel->name()) != std::string::npos) found = line;
  std::remove(path.c_str());
  EXPECT_FALSE(found.empty()) << "no perf map line for " << kernel->name();
}

// An LSTM cell's elementwise part: the gates from their pre-activations, the
// new cell and hidden state, and the gate values ∂F reads.
KernelSpec lstm_cell_spec(int64_t width) {
  KernelSpec spec;
  spec.width = width;
  spec.inputs = {{false}, {false}, {false}, {false}, {false}};  // i, f, o, g pre-activations; c_prev
  spec.instrs = {
      {Op::Sigmoid, 0, -1, 0},  // 5: i
      {Op::Sigmoid, 1, -1, 0},  // 6: f
      {Op::Sigmoid, 2, -1, 0},  // 7: o
      {Op::Tanh, 3, -1, 0},     // 8: g
      {Op::Mul, 6, 4, 0},       // 9: f c_prev
      {Op::Mul, 5, 8, 0},       // 10: i g
      {Op::Add, 9, 10, 0},      // 11: c
      {Op::Tanh, 11, -1, 0},    // 12: tanh c
      {Op::Mul, 7, 12, 0},      // 13: h
  };
  spec.outputs = {6, 8, 0, 1, 2, 3};  // c, h, i, f, o, g
  return spec;
}

TEST_P(FusedKernelTest, LstmCell) {
  const Isa isa = GetParam();
  SKIP_IF_NO_ISA(isa);
  std::mt19937_64 rng(23);
  Stats stats;
  for (int64_t width : {64, 100, 256}) {
    Case c;
    c.spec = lstm_cell_spec(width);
    c.rows = 7;
    c.input_ld.assign(5, width);
    c.output_ld.assign(6, width);
    check_case(c, isa, rng, stats, "lstm width " + std::to_string(width));
    std::shared_ptr<const FusedKernel> kernel = compile_fused_kernel(c.spec, isa);
    std::printf("[lstm %s] %s: %zu bytes of code, %d value registers, %d spills\n", isa_name(isa),
                kernel->name().c_str(), kernel->code_bytes(), kernel->stats().value_registers,
                kernel->stats().spills);
  }
  report("lstm", isa, stats);
}

// ir::KernelArgs::row_tables: operands whose rows lie anywhere, each row at its
// table's entry. Random specs (spilling ones too, and stream pointers past
// the registers) with random operands given tables that visit the rows of
// their buffers in a random order: the JIT kernel writes, bit for bit, what it
// writes without tables over the same rows gathered into place, and so does
// the reference; rows nothing addresses keep their sentinel.
TEST_P(FusedKernelTest, RowTablesReadAndWriteRowsWhereverTheyLie) {
  const Isa isa = GetParam();
  SKIP_IF_NO_ISA(isa);
  std::mt19937_64 rng(20261125);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 150; ++trial) {
    const int num_inputs = uniform(1, 14);
    KernelSpec spec = random_spec(rng, num_inputs, uniform(1, 40), random_width(rng),
                                  trial % 3 == 0 ? Operands::Pressure : Operands::Recent);
    const int64_t rows = uniform(1, 9), width = spec.width;
    const size_t n_in = spec.inputs.size(), n_out = spec.outputs.size();
    // Every operand in a buffer of 2·rows rows; a tabled one visits rows
    // perm[r] of it, a plain one rows 0..rows-1.
    std::vector<std::vector<float>> buffers(n_in + n_out, std::vector<float>(size_t(2 * rows * width)));
    std::vector<std::vector<const float*>> tables(n_in + n_out);
    std::vector<const float* const*> table_of(n_in + n_out, nullptr);
    std::vector<std::vector<int>> row_of(n_in + n_out);
    for (size_t k = 0; k < n_in + n_out; ++k) {
      std::vector<int> perm(size_t(2 * rows));
      std::iota(perm.begin(), perm.end(), 0);
      const bool tabled = uniform(0, 1) == 1;
      if (tabled) std::shuffle(perm.begin(), perm.end(), rng);
      perm.resize(size_t(rows));
      row_of[k] = perm;
      for (float& x : buffers[k]) x = k < n_in ? random_value(rng) : std::bit_cast<float>(kSentinel);
      if (!tabled) continue;
      for (int r : perm) tables[k].push_back(buffers[k].data() + int64_t(r) * width);
      table_of[k] = tables[k].data();
    }
    // The same rows gathered into plain buffers, for the kernel without tables.
    std::vector<std::vector<float>> packed(n_in + n_out, std::vector<float>(size_t(rows * width)));
    for (size_t k = 0; k < n_in; ++k)
      for (int64_t r = 0; r < rows; ++r)
        std::copy_n(buffers[k].data() + int64_t(row_of[k][size_t(r)]) * width, width, packed[k].data() + r * width);
    std::vector<const float*> in_tabled(n_in), in_packed(n_in);
    std::vector<float*> out_tabled(n_out), out_packed(n_out);
    std::vector<int64_t> in_ld(n_in, width), out_ld(n_out, width);
    for (size_t k = 0; k < n_in; ++k) {
      in_tabled[k] = buffers[k].data();
      in_packed[k] = packed[k].data();
    }
    for (size_t o = 0; o < n_out; ++o) {
      out_tabled[o] = buffers[n_in + o].data();
      out_packed[o] = packed[n_in + o].data();
    }
    const std::string what = "trial " + std::to_string(trial) + ": " + spec.key();
    std::shared_ptr<const FusedKernel> kernel = compile_fused_kernel(spec, isa);
    for (bool reference : {false, true}) {
      std::vector<std::vector<float>> written = buffers;  // outputs start as sentinels
      std::vector<float*> out_written(n_out);
      for (size_t o = 0; o < n_out; ++o) out_written[o] = written[n_in + o].data();
      const ir::KernelArgs tabled{rows, in_tabled.data(), in_ld.data(), out_written.data(), out_ld.data(), nullptr,
                              table_of.data()};
      for (size_t o = 0; o < n_out; ++o)
        if (!tables[n_in + o].empty())
          for (int64_t r = 0; r < rows; ++r)
            tables[n_in + o][size_t(r)] = written[n_in + o].data() + int64_t(row_of[n_in + o][size_t(r)]) * width;
      const ir::KernelArgs plain{rows, in_packed.data(), in_ld.data(), out_packed.data(), out_ld.data()};
      if (reference) {
        run_reference_kernel(spec, tabled);
        run_reference_kernel(spec, plain);
      } else {
        kernel->function()(&tabled);
        kernel->function()(&plain);
      }
      for (size_t o = 0; o < n_out; ++o) {
        std::vector<bool> addressed(size_t(2 * rows), false);
        for (int64_t r = 0; r < rows; ++r) {
          const int at = row_of[n_in + o][size_t(r)];
          addressed[size_t(at)] = true;
          for (int64_t i = 0; i < width; ++i) {
            const float got = written[n_in + o][size_t(at * width + i)], want = packed[n_in + o][size_t(r * width + i)];
            ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want))
                << what << (reference ? " reference" : " jit") << ": output " << o << " row " << r << " element " << i;
          }
        }
        for (int64_t r = 0; r < 2 * rows; ++r) {
          if (addressed[size_t(r)]) continue;
          for (int64_t i = 0; i < width; ++i) {
            ASSERT_EQ(std::bit_cast<std::uint32_t>(written[n_in + o][size_t(r * width + i)]), kSentinel)
                << what << ": output " << o << " row " << r << " written, which no row addresses";
          }
        }
      }
    }
  }
}

// codegen::accumulating_spec (VJIT_ROW_PLACEMENT=tables): the kernel that adds
// chosen outputs into what their rows hold, reading each row as an input at
// the address it writes, leaves old + value there, bit for bit the plain
// kernel's value added to the old one; the other outputs as the plain kernel
// writes them. JIT and reference kernel, 100 random specs.
TEST_P(FusedKernelTest, AccumulatingKernelsAddOutputsIntoTheirRows) {
  const Isa isa = GetParam();
  SKIP_IF_NO_ISA(isa);
  std::mt19937_64 rng(20261126);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 100; ++trial) {
    const KernelSpec spec = random_spec(rng, uniform(1, 10), uniform(1, 30), random_width(rng), Operands::Recent);
    const int64_t rows = uniform(1, 7), width = spec.width;
    const size_t n_in = spec.inputs.size(), n_out = spec.outputs.size();
    std::vector<int> accumulated;
    for (size_t o = 0; o < n_out; ++o)
      if (uniform(0, 1) == 1) accumulated.push_back(int(o));
    if (accumulated.empty()) accumulated.push_back(uniform(0, int(n_out) - 1));
    const KernelSpec adding = codegen::accumulating_spec(spec, accumulated);
    std::vector<std::vector<float>> inputs(n_in, std::vector<float>(size_t(rows * width)));
    for (auto& in : inputs)
      for (float& x : in) x = random_value(rng);
    std::vector<std::vector<float>> old(n_out, std::vector<float>(size_t(rows * width)));
    for (auto& out : old)
      for (float& x : out) x = random_value(rng);
    const std::string what = "trial " + std::to_string(trial) + ": " + adding.key();
    std::shared_ptr<const FusedKernel> plain_kernel = compile_fused_kernel(spec, isa);
    std::shared_ptr<const FusedKernel> adding_kernel = compile_fused_kernel(adding, isa);
    for (bool reference : {false, true}) {
      std::vector<std::vector<float>> plain(n_out, std::vector<float>(size_t(rows * width))), added = old;
      std::vector<const float*> in_plain, in_added;
      for (const auto& in : inputs) in_plain.push_back(in.data());
      in_added = in_plain;
      for (int o : accumulated) in_added.push_back(added[size_t(o)].data());  // read where it is written
      std::vector<float*> out_plain, out_added;
      for (size_t o = 0; o < n_out; ++o) out_plain.push_back(plain[o].data()), out_added.push_back(added[o].data());
      const std::vector<int64_t> ld(n_in + accumulated.size(), width), out_ld(n_out, width);
      const ir::KernelArgs plain_args{rows, in_plain.data(), ld.data(), out_plain.data(), out_ld.data()};
      const ir::KernelArgs added_args{rows, in_added.data(), ld.data(), out_added.data(), out_ld.data()};
      if (reference) {
        run_reference_kernel(spec, plain_args);
        run_reference_kernel(adding, added_args);
      } else {
        plain_kernel->function()(&plain_args);
        adding_kernel->function()(&added_args);
      }
      for (size_t o = 0; o < n_out; ++o) {
        const bool adds = std::find(accumulated.begin(), accumulated.end(), int(o)) != accumulated.end();
        for (int64_t i = 0; i < rows * width; ++i) {
          const float want = adds ? plain[o][size_t(i)] + old[o][size_t(i)] : plain[o][size_t(i)];
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(added[o][size_t(i)])) << what << ": output " << o << " element " << i;
            continue;
          }
          ASSERT_EQ(std::bit_cast<std::uint32_t>(added[o][size_t(i)]), std::bit_cast<std::uint32_t>(want))
              << what << (reference ? " reference" : " jit") << ": output " << o << " element " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, FusedKernelTest, ::testing::Values(Isa::Avx2, Isa::Avx512, Isa::Neon),
                         [](const ::testing::TestParamInfo<Isa>& info) { return std::string(isa_name(info.param)); });

// ---------------------------------------------------------------------------
// The kernel cache

KernelSpec small_spec(float scale) {
  KernelSpec spec;
  spec.width = 33;
  spec.inputs = {{false}, {true}};
  spec.instrs = {{Op::Scale, 0, -1, scale}, {Op::Add, 2, 1, 0}, {Op::Sigmoid, 3, -1, 0}};
  spec.outputs = {2};
  return spec;
}

TEST(KernelCache, SameSpecCompilesOnce) {
  const Isa isa = best_isa();
  jit::KernelCache cache;
  auto first = cache.get(small_spec(1.5f), isa);
  auto second = cache.get(small_spec(1.5f), isa);
  EXPECT_EQ(first.get(), second.get());
  EXPECT_EQ(cache.counters().compiles, 1);
  EXPECT_EQ(cache.counters().hits, 1);
  EXPECT_EQ(first->isa, isa);
  // A different scalar is a different kernel.
  auto other = cache.get(small_spec(2.5f), isa);
  EXPECT_NE(other.get(), first.get());
  EXPECT_EQ(cache.counters().compiles, 2);
}

TEST(KernelCache, EachIsaCompilesSeparately) {
  jit::KernelCache cache;
  std::vector<Isa> isas;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon})
    if (cpu_has(isa)) isas.push_back(isa);
  std::vector<std::shared_ptr<const jit::CompiledKernel>> kernels;
  for (Isa isa : isas) kernels.push_back(cache.get(small_spec(1.0f), isa));
  for (Isa isa : isas) cache.get(small_spec(1.0f), isa);
  EXPECT_EQ(cache.counters().compiles, int64_t(isas.size()));
  EXPECT_EQ(cache.counters().hits, int64_t(isas.size()));
  // All of them compute the same values (sigmoid within a few ulp).
  std::vector<float> x(33), s(1, 0.25f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) / 8 - 2;
  std::vector<std::vector<float>> outs;
  for (const auto& kernel : kernels) {
    EXPECT_EQ(kernel->isa == Isa::Scalar, kernel->code_bytes == 0);
    std::vector<float> out(33);
    const float* in[2] = {x.data(), s.data()};
    const int64_t in_ld[2] = {33, 1};
    float* o[1] = {out.data()};
    const int64_t o_ld[1] = {33};
    kernel->run(ir::KernelArgs{1, in, in_ld, o, o_ld});
    outs.push_back(out);
  }
  for (size_t k = 1; k < outs.size(); ++k)
    for (size_t i = 0; i < 33; ++i) EXPECT_NEAR(outs[k][i], outs[0][i], 4e-7f) << isa_name(isas[k]) << " " << i;
}

TEST(KernelCache, ConcurrentMissesBuildOnce) {
  const Isa isa = best_isa();
  jit::KernelCache cache;
  constexpr int kThreads = 8;
  std::latch start(kThreads);
  std::vector<std::shared_ptr<const jit::CompiledKernel>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      got[size_t(t)] = cache.get(lstm_cell_spec(200), isa);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(cache.counters().compiles, 1);
  EXPECT_EQ(cache.counters().hits, kThreads - 1);
  for (const auto& kernel : got) EXPECT_EQ(kernel.get(), got[0].get());
}

TEST(KernelCache, FailedBuildIsNotCached) {
  const Isa isa = best_isa();
  if (isa == Isa::Scalar) GTEST_SKIP() << "this CPU has no JIT ISA; the reference kernel cannot fail to build";
  jit::KernelCache cache;
  KernelSpec bad = small_spec(1.0f);
  bad.instrs[1].b = 17;  // operand out of range
  EXPECT_THROW(cache.get(bad, isa), InternalError);
  EXPECT_THROW(cache.get(bad, isa), InternalError);
  EXPECT_EQ(cache.counters().compiles, 0);
  EXPECT_EQ(cache.counters().hits, 0) << "the failed build was cached";
  // The cache still works.
  cache.get(small_spec(1.0f), isa);
  EXPECT_EQ(cache.counters().compiles, 1);
}

TEST(KernelCache, ConcurrentWaitersOfAFailedBuildAllSeeTheError) {
  const Isa isa = best_isa();
  if (isa == Isa::Scalar) GTEST_SKIP() << "this CPU has no JIT ISA";
  jit::KernelCache cache;
  KernelSpec bad = small_spec(1.0f);
  bad.outputs = {9};
  constexpr int kThreads = 8;
  std::latch start(kThreads);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      try {
        cache.get(bad, isa);
      } catch (const InternalError&) {
        ++errors;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), kThreads);
  EXPECT_EQ(cache.counters().compiles, 0);
}

}  // namespace
}  // namespace vjit::codegen
