// oneDNN back end: dnnl_sgemm, oneDNN's row-major BLAS-like entry point. The
// name is unique to oneDNN (no BLAS library exports it), so linking libdnnl
// directly cannot clash with OpenBLAS or BLIS.
//
// Threads. Debian's oneDNN uses the OpenMP runtime (libgomp): one dnnl_sgemm
// call uses omp_get_max_threads() threads of the *calling* thread's OpenMP
// state. For a single-threaded call we set that count to 1 around the call and
// restore it afterwards, so the setting never leaks into other OpenMP code that
// runs on the same thread. (oneDNN runs a one-thread region inline, without
// opening an OpenMP team, so our pool's workers never start OpenMP threads.)
#include "runtime/gemm_backends.h"

#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <map>
#include <tuple>
#include <vector>

#include "vjit/error.h"

#ifdef VJIT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#endif
#endif

namespace vjit::runtime::gemm_detail {

#ifdef VJIT_HAVE_DNNL

namespace {

// Sets the calling thread's OpenMP thread count for one scope.
class ScopedLibraryThreads {
 public:
  explicit ScopedLibraryThreads(int threads) {
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
    previous_ = omp_get_max_threads();
    if (previous_ != threads) omp_set_num_threads(threads);
    wanted_ = threads;
#else
    (void)threads;  // sequential oneDNN: always one thread
#endif
  }
  ~ScopedLibraryThreads() {
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
    if (previous_ != wanted_) omp_set_num_threads(previous_);
#endif
  }
  ScopedLibraryThreads(const ScopedLibraryThreads&) = delete;
  ScopedLibraryThreads& operator=(const ScopedLibraryThreads&) = delete;

 private:
  [[maybe_unused]] int previous_ = 1;
  [[maybe_unused]] int wanted_ = 1;
};

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

}  // namespace

std::string onednn_unavailable() { return ""; }

std::string onednn_info() {
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         " (isa: " + isa_name(dnnl_get_effective_cpu_isa()) +
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
         ", threading: OpenMP)";
#else
         ", threading: not OpenMP)";
#endif
}

void onednn_sgemm(const GemmArgs& g, int threads) {
  ScopedLibraryThreads scope(threads);
  const dnnl_status_t status =
      dnnl_sgemm(g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N', g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb,
                 g.beta, g.c, g.ldc);
  VJIT_INTERNAL_CHECK(status == dnnl_success, "dnnl_sgemm failed with status " << int(status) << " for m=" << g.m
                                                                               << " n=" << g.n << " k=" << g.k);
}

// --- bf16 products: the matmul primitive on bfloat16 operands ---------------

namespace {

bool cpu_has_bf16() {
  const unsigned isa = unsigned(dnnl_get_effective_cpu_isa());
  return (isa & unsigned(dnnl_cpu_isa_avx512_core_bf16)) == unsigned(dnnl_cpu_isa_avx512_core_bf16);
}

// float -> bfloat16, rounding to nearest even (NaN stays NaN).
uint16_t to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

// `count` floats to bfloat16 with vcvtne2ps2bf16 (round to nearest even, as
// to_bf16, except that it reads denormal inputs as zero), 32 at a time. Only
// called where oneDNN found AVX-512 BF16 (cpu_has_bf16), which only x86 has:
// elsewhere the loop of to_bf16 (never reached: cpu_has_bf16 is false).
#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bf16"))) void to_bf16_row(const float* x, int64_t count, uint16_t* out) {
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m512bh pair = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(out + i, reinterpret_cast<__m512i>(pair));
  }
  for (; i < count; ++i) out[i] = to_bf16(x[i]);
}
#else
void to_bf16_row(const float* x, int64_t count, uint16_t* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = to_bf16(x[i]);
}
#endif

// A stored matrix (rows × cols, row-major with leading dimension ld) as a
// packed row-major bf16 matrix, row by row; transposes are left to the
// primitive's strides.
void pack_bf16(int64_t rows, int64_t cols, const float* x, int64_t ld, std::vector<uint16_t>& out) {
  if (out.size() < size_t(rows * cols)) out.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) to_bf16_row(x + r * ld, cols, out.data() + r * cols);
}

void check(dnnl_status_t status, const char* what) {
  VJIT_INTERNAL_CHECK(status == dnnl_success, "oneDNN " << what << " failed with status " << int(status));
}

// One thread's engine, stream and matmul primitives, kept for the thread's
// life. A primitive is made once per (transposes, n, k, alpha, beta) with the
// row count and the leading dimension of C left to run time
// (DNNL_RUNTIME_DIM_VAL): a task's row count changes from call to call, and a
// primitive per shape cost more to create than the products saved. Both
// operands are rounded to bf16 on every call, vectorised (a weight's
// conversion is a few percent of its product: 58 rows by a [768, 512] weight,
// one Zen 4 core, 167–192 GFLOP/s with it against 85 for dnnl_sgemm).
class Bf16Matmuls {
 public:
  Bf16Matmuls() {
    check(dnnl_engine_create(&engine_, dnnl_cpu, 0), "engine creation");
    check(dnnl_stream_create(&stream_, engine_, dnnl_stream_default_flags), "stream creation");
  }
  ~Bf16Matmuls() {
    for (auto& [key, primitive] : primitives_) dnnl_primitive_destroy(primitive);
    dnnl_stream_destroy(stream_);
    dnnl_engine_destroy(engine_);
  }
  Bf16Matmuls(const Bf16Matmuls&) = delete;
  Bf16Matmuls& operator=(const Bf16Matmuls&) = delete;

  void run(const GemmArgs& g) {
    // Stored shapes: A is [m, k] or, transposed, [k, m]; B [k, n] or [n, k].
    pack_bf16(g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.a, g.lda, a_);
    pack_bf16(g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.b, g.ldb, b_);
    dnnl_primitive_t primitive = primitive_for(g);
    dnnl_memory_desc_t a_md, b_md, c_md;
    describe(g, g.m, g.m, g.ldc, a_md, b_md, c_md);
    dnnl_memory_t a_mem, b_mem, c_mem;
    check(dnnl_memory_create(&a_mem, &a_md, engine_, a_.data()), "memory creation");
    check(dnnl_memory_create(&b_mem, &b_md, engine_, b_.data()), "memory creation");
    check(dnnl_memory_create(&c_mem, &c_md, engine_, g.c), "memory creation");
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}};
    const dnnl_status_t status = dnnl_primitive_execute(primitive, stream_, 3, args);
    if (status == dnnl_success) check(dnnl_stream_wait(stream_), "stream wait");
    dnnl_memory_destroy(a_mem);
    dnnl_memory_destroy(b_mem);
    dnnl_memory_destroy(c_mem);
    check(status, "bf16 matmul");
  }

 private:
  // The packed operands and C, with `m`, A's leading dimension when
  // transposed (`lda_t`, = m packed) and C's `ldc` given, or
  // DNNL_RUNTIME_DIM_VAL for the primitive.
  static void describe(const GemmArgs& g, int64_t m, int64_t lda_t, int64_t ldc, dnnl_memory_desc_t& a_md,
                       dnnl_memory_desc_t& b_md, dnnl_memory_desc_t& c_md) {
    dnnl_dims_t a_dims = {m, g.k}, b_dims = {g.k, g.n}, c_dims = {m, g.n};
    dnnl_dims_t a_strides = {g.k, 1}, b_strides = {g.n, 1}, c_strides = {ldc, 1};
    if (g.trans_a) a_strides[0] = 1, a_strides[1] = lda_t;
    if (g.trans_b) b_strides[0] = 1, b_strides[1] = g.k;
    check(dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, dnnl_bf16, a_strides), "memory descriptor");
    check(dnnl_memory_desc_init_by_strides(&b_md, 2, b_dims, dnnl_bf16, b_strides), "memory descriptor");
    check(dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_strides), "memory descriptor");
  }

  dnnl_primitive_t primitive_for(const GemmArgs& g) {
    const Key key{g.trans_a, g.trans_b, g.n, g.k, g.alpha, g.beta};
    auto found = primitives_.find(key);
    if (found != primitives_.end()) return found->second;
    dnnl_memory_desc_t a_md, b_md, c_md;
    describe(g, DNNL_RUNTIME_DIM_VAL, DNNL_RUNTIME_DIM_VAL, DNNL_RUNTIME_DIM_VAL, a_md, b_md, c_md);
    dnnl_primitive_attr_t attr;
    check(dnnl_primitive_attr_create(&attr), "attribute creation");
    if (g.alpha != 1.0f) check(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &g.alpha), "output scale");
    dnnl_post_ops_t post_ops = nullptr;
    if (g.beta != 0.0f) {  // C = alpha·AB + beta·C
      check(dnnl_post_ops_create(&post_ops), "post-op creation");
      check(dnnl_post_ops_append_sum(post_ops, g.beta), "sum post-op");
      check(dnnl_primitive_attr_set_post_ops(attr, post_ops), "post-ops");
    }
    dnnl_matmul_desc_t desc;
    check(dnnl_matmul_desc_init(&desc, &a_md, &b_md, nullptr, &c_md), "matmul descriptor");
    dnnl_primitive_desc_t pd;
    const dnnl_status_t made = dnnl_primitive_desc_create(&pd, &desc, attr, engine_, nullptr);
    if (post_ops) dnnl_post_ops_destroy(post_ops);
    dnnl_primitive_attr_destroy(attr);
    check(made, "bf16 matmul primitive descriptor");
    dnnl_primitive_t primitive;
    const dnnl_status_t created = dnnl_primitive_create(&primitive, pd);
    dnnl_primitive_desc_destroy(pd);
    check(created, "bf16 matmul primitive");
    primitives_.emplace(key, primitive);
    return primitive;
  }

  using Key = std::tuple<bool, bool, int64_t, int64_t, float, float>;
  dnnl_engine_t engine_ = nullptr;
  dnnl_stream_t stream_ = nullptr;
  std::map<Key, dnnl_primitive_t> primitives_;
  std::vector<uint16_t> a_, b_;
};

}  // namespace

std::string onednn_bf16_unavailable() {
  const std::string why = onednn_unavailable();
  if (!why.empty()) return why;
  if (!cpu_has_bf16())
    return std::string("needs a CPU with AVX-512 BF16 or AMX; oneDNN's best ISA here is ") +
           isa_name(dnnl_get_effective_cpu_isa());
  return "";
}

std::string onednn_bf16_info() {
  return onednn_info() + ", matmul primitive on bf16 operands with float accumulation";
}

void onednn_bf16_sgemm(const GemmArgs& g, int threads) {
  thread_local Bf16Matmuls matmuls;
  ScopedLibraryThreads scope(threads);
  matmuls.run(g);
}

#else  // !VJIT_HAVE_DNNL

std::string onednn_unavailable() {
  return "not built: oneDNN (libdnnl, header oneapi/dnnl/dnnl.h) or OpenMP was not found when vjit was configured "
         "(install libdnnl-dev and reconfigure)";
}
std::string onednn_info() { return ""; }
void onednn_sgemm(const GemmArgs&, int) { VJIT_INTERNAL_CHECK(false, "oneDNN back end not built"); }
std::string onednn_bf16_unavailable() { return onednn_unavailable(); }
std::string onednn_bf16_info() { return ""; }
void onednn_bf16_sgemm(const GemmArgs&, int) { VJIT_INTERNAL_CHECK(false, "oneDNN back end not built"); }

#endif

}  // namespace vjit::runtime::gemm_detail
