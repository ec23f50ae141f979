#pragma once
// GEMM back ends of the CPU runtime. Every matrix product of an execution plan
// ends here: one row-major single-precision GEMM
//
//     C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C[m,n]
//
// with op(X) = X or X^T, handed to a vendor library chosen by measurement
// (perf/gemm_bench.cpp, results in perf/GEMM.md). Each call runs on the calling
// thread only: the executor gets its parallelism by splitting one product into
// per-thread blocks (parallel_sgemm in runtime/thread_pool.h), which measured
// faster than the libraries' own threading on these shapes.
//
// Storage is row-major. A is stored [m,k] (lda >= k) or, with trans_a, [k,m]
// (lda >= m); B is stored [k,n] (ldb >= n) or, with trans_b, [n,k] (ldb >= k);
// C is [m,n] (ldc >= n). BLAS semantics for the scalars: beta == 0 means C is
// written without being read (NaN or Inf there is ignored); k == 0 or alpha == 0
// means C = beta * C. All back ends behave the same on these edge cases because
// sgemm() handles them before dispatching.
//
// The dispatch list, in order: oneDNN, OpenBLAS, BLIS, libxsmm, and the scalar
// reference last. A library missing at configure time leaves its back end "not
// built" (VJIT_HAVE_* undefined); calling it is a UserError that says so.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace vjit::runtime {

enum class GemmBackend {
  OneDnn,     // dnnl_sgemm (oneDNN, x64 JIT kernels)
  OpenBlas,   // cblas_sgemm of libopenblas.so.0, loaded with dlopen
  Blis,       // bli_sgemm_ex (BLIS typed API, threads set per call)
  Libxsmm,    // libxsmm JIT kernels, cache-blocked by vjit
  // oneDNN's matmul primitive on bf16 operands (A and B rounded to bfloat16,
  // to nearest even), accumulating in float: AVX-512 BF16 or AMX only. Not
  // float-exact, so "auto" never picks it (gemm_backend_rounds_operands).
  OneDnnBf16,
  Reference,  // plain triple loop with double accumulation; the oracle of the tests
};

// Every back end, in dispatch-list order (Reference last).
inline constexpr std::array<GemmBackend, 6> kGemmBackends{GemmBackend::OneDnn,     GemmBackend::OpenBlas,
                                                          GemmBackend::Blis,       GemmBackend::Libxsmm,
                                                          GemmBackend::OneDnnBf16, GemmBackend::Reference};

// True for a back end that rounds its operands to a narrower type (bf16): its
// results differ from float products by far more than float rounding.
bool gemm_backend_rounds_operands(GemmBackend backend);

// "onednn", "openblas", "blis", "libxsmm", "onednn_bf16", "reference" (the VJIT_GEMM values).
const char* gemm_backend_name(GemmBackend backend);

// Parses a back-end name, case-insensitively. "auto" means default_gemm_backend().
// Anything else is a UserError listing the valid names. Does not check that the
// back end was built (see gemm_backend_available).
GemmBackend parse_gemm_backend(std::string_view name);

// True when the back end was compiled in (its library was found at configure time).
bool gemm_backend_built(GemmBackend backend);

// True when the back end is built and its library can be used in this process
// (OpenBLAS is loaded at run time and may be missing even when built).
bool gemm_backend_available(GemmBackend backend);

// Why a back end is unavailable ("" when it is available), e.g. "not built: the
// BLIS library was not found when vjit was configured".
std::string gemm_backend_unavailable_reason(GemmBackend backend);

// The library's version and the kernel family it picked on this CPU, for logs and
// benchmark headers, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH ... (core: Zen)".
std::string gemm_backend_info(GemmBackend backend);

// The measured choice (perf/GEMM.md): oneDNN. When it is unavailable, the first
// available float-exact back end of the dispatch list (Reference at worst).
GemmBackend default_gemm_backend();

// The back end Options::Tuning::gemm (VJIT_GEMM) names: "auto" or empty =
// default_gemm_backend(). An unknown name, or a back end that is not available,
// is a UserError naming VJIT_GEMM, the value and the valid (or usable) values.
// The runtime never reads the environment; jit/options.cpp does.
GemmBackend select_gemm_backend(std::string_view option, std::string_view variable = "VJIT_GEMM");

// Throws the UserError sgemm() would throw for these arguments (sizes, leading
// dimensions, null pointers, unavailable back end); does nothing when they are valid.
void validate_sgemm(GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, const float* c, int64_t ldc);

// C = alpha * op(A) * op(B) + beta * C, row-major, on the calling thread only.
// Thread-safe: several threads may call it at once on disjoint C blocks.
// Throws UserError for negative sizes, too-small leading dimensions, null
// pointers where data is read, or an unavailable back end.
void sgemm(GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// --- For measurement only (perf/gemm_bench.cpp) ------------------------------

// True when the library can thread one call itself (oneDNN, OpenBLAS, BLIS).
bool gemm_backend_has_library_threading(GemmBackend backend);

// The same product with the library's own threading, `threads` threads. The
// thread count is set for this call and restored afterwards (OpenBLAS's count is
// process-wide: do not run this concurrently with other OpenBLAS calls).
// Throws UserError when the back end has no library threading.
void sgemm_library_threaded(GemmBackend backend, int threads, bool trans_a, bool trans_b, int64_t m, int64_t n,
                            int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                            float beta, float* c, int64_t ldc);

}  // namespace vjit::runtime
