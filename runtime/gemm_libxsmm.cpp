// libxsmm back end: libxsmm's JIT-generated small-matrix kernels, cache-blocked
// by us. libxsmm 1.17 (Debian's libxsmm-dev, static libraries only) has no
// general large-GEMM entry point of its own: libxsmm_sgemm hands anything above
// LIBXSMM_MAX_MNK (64^3) to the BLAS symbol sgemm_, i.e. to whichever BLAS is in
// the global scope — measuring that would measure BLIS or OpenBLAS again. So we
// call only the JIT kernels (libxsmm_smmdispatch) and the JIT transpose
// (libxsmm_otrans), and tile the product ourselves.
//
// libxsmm is column-major. A row-major C = op(A) op(B) is the column-major
// C' = op(B)' op(A)' on the same memory, with the roles of A and B swapped:
//   C'  [n x m], ld = ldc
//   A'  = B memory: [n x k] col-major with ld = ldb when !trans_b. With trans_b
//         libxsmm would need TRANS_A, which its generator does not support, so B
//         is first transposed into a per-thread scratch buffer (libxsmm_otrans).
//   B'  = A memory: [k x m] col-major with ld = lda when !trans_a; with trans_a
//         it is [m x k] and the kernel uses LIBXSMM_GEMM_FLAG_TRANS_B.
// Kernels support alpha == 1 and beta in {0, 1} only: beta outside that set
// scales C first, alpha != 1 computes the product into scratch and combines.
//
// Linking: libxsmm.a references sgemm_/dgemm_/sgemv_/dgemv_ for that fallback,
// which vjit never takes. CMake links libxsmm before BLIS so those references
// resolve to BLIS's copies, or to libxsmmnoblas.a (stubs) when BLIS is absent.
#include "runtime/gemm_backends.h"

#include "vjit/error.h"

#ifdef VJIT_HAVE_LIBXSMM
#include <libxsmm.h>

#include <algorithm>
#include <array>
#include <vector>
#endif

namespace vjit::runtime::gemm_detail {

#ifdef VJIT_HAVE_LIBXSMM

namespace {

// Tile of one kernel call, in row-major terms: kTileN columns of C (contiguous,
// the kernel's register-blocked M'), kTileM rows of C (its N'), kTileK of the
// reduction. A' tile = kTileN x kTileK floats = 64 KiB, resident in L2 while the
// kernel sweeps the rows of C.
constexpr int64_t kTileN = 64;
constexpr int64_t kTileM = 64;
constexpr int64_t kTileK = 256;

// One JIT kernel for a tile shape. libxsmm caches generated code in its own
// registry, so dispatching the same shape again is a hash lookup.
libxsmm_smmfunction kernel_for(int64_t tile_n, int64_t tile_m, int64_t tile_k, int64_t lda, int64_t ldb,
                               int64_t ldc, bool beta0, bool trans_b_prime) {
  const libxsmm_blasint m = libxsmm_blasint(tile_n), n = libxsmm_blasint(tile_m), k = libxsmm_blasint(tile_k);
  const libxsmm_blasint la = libxsmm_blasint(lda), lb = libxsmm_blasint(ldb), lc = libxsmm_blasint(ldc);
  const float alpha = 1.0f;
  const float beta = beta0 ? 0.0f : 1.0f;
  const int flags = (trans_b_prime ? LIBXSMM_GEMM_FLAG_TRANS_B : 0) | (beta0 ? LIBXSMM_GEMM_FLAG_BETA_0 : 0);
  const int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
  libxsmm_smmfunction f = libxsmm_smmdispatch(m, n, k, &la, &lb, &lc, &alpha, &beta, &flags, &prefetch);
  VJIT_USER_CHECK(f != nullptr, "sgemm(libxsmm): libxsmm could not generate a kernel for the column-major tile m="
                                    << m << " n=" << n << " k=" << k << " lda=" << la << " ldb=" << lb
                                    << " ldc=" << lc << (trans_b_prime ? " trans_b" : "")
                                    << " on target " << libxsmm_get_target_arch());
  return f;
}

// C = P (beta0) or C += P, with alpha == 1; the tiled loop described above.
void tiled_product(const GemmArgs& g, bool beta0, float* c, int64_t ldc) {
  // A' (from B).
  const float* a1 = g.b;
  int64_t lda1 = g.ldb;
  thread_local std::vector<float> transposed_b;
  if (g.trans_b) {
    // B is [n x k] row-major = [k x n] col-major (ld = ldb); store its transpose,
    // [n x k] col-major = B^T row-major [k x n] with ld = n.
    transposed_b.resize(size_t(g.k * g.n));
    libxsmm_otrans(transposed_b.data(), g.b, sizeof(float), libxsmm_blasint(g.k), libxsmm_blasint(g.n),
                   libxsmm_blasint(g.ldb), libxsmm_blasint(g.n));
    a1 = transposed_b.data();
    lda1 = g.n;
  }
  // Up to two extents per dimension (full tile, remainder) and two betas.
  std::array<libxsmm_smmfunction, 16> kernels{};
  auto kernel = [&](int64_t tn, int64_t tm, int64_t tk, bool b0) {
    const int slot = (tn == kTileN ? 0 : 1) | (tm == kTileM ? 0 : 2) | (tk == kTileK ? 0 : 4) | (b0 ? 8 : 0);
    if (kernels[size_t(slot)] == nullptr)
      kernels[size_t(slot)] = kernel_for(tn, tm, tk, lda1, g.lda, ldc, b0, g.trans_a);
    return kernels[size_t(slot)];
  };
  for (int64_t p0 = 0; p0 < g.k; p0 += kTileK) {
    const int64_t tk = std::min(kTileK, g.k - p0);
    const bool b0 = beta0 && p0 == 0;
    for (int64_t j0 = 0; j0 < g.n; j0 += kTileN) {
      const int64_t tn = std::min(kTileN, g.n - j0);
      const float* a_tile = a1 + j0 + p0 * lda1;
      for (int64_t i0 = 0; i0 < g.m; i0 += kTileM) {
        const int64_t tm = std::min(kTileM, g.m - i0);
        const float* b_tile = g.trans_a ? g.a + i0 + p0 * g.lda : g.a + p0 + i0 * g.lda;
        kernel(tn, tm, tk, b0)(a_tile, b_tile, c + j0 + i0 * ldc);
      }
    }
  }
}

}  // namespace

std::string libxsmm_unavailable() { return ""; }

std::string libxsmm_info() {
  return std::string("libxsmm ") + LIBXSMM_CONFIG_VERSION + " (target: " + libxsmm_get_target_arch() +
         ", JIT kernels tiled by vjit)";
}

void libxsmm_sgemm(const GemmArgs& g) {
  if (g.alpha == 1.0f) {
    if (g.beta != 0.0f && g.beta != 1.0f) scale_c(g.m, g.n, g.beta, g.c, g.ldc);
    tiled_product(g, g.beta == 0.0f, g.c, g.ldc);
    return;
  }
  // alpha != 1: P = op(A) op(B) into scratch, then C = alpha * P + beta * C.
  thread_local std::vector<float> product;
  product.resize(size_t(g.m * g.n));
  tiled_product(g, true, product.data(), g.n);
  for (int64_t i = 0; i < g.m; ++i) {
    float* row = g.c + i * g.ldc;
    const float* p = product.data() + i * g.n;
    for (int64_t j = 0; j < g.n; ++j) row[j] = g.alpha * p[j] + (g.beta == 0.0f ? 0.0f : g.beta * row[j]);
  }
}

#else  // !VJIT_HAVE_LIBXSMM

std::string libxsmm_unavailable() {
  return "not built: libxsmm (libxsmm.a, header libxsmm.h) was not found when vjit was configured (install "
         "libxsmm-dev and reconfigure)";
}
std::string libxsmm_info() { return ""; }
void libxsmm_sgemm(const GemmArgs&) { VJIT_INTERNAL_CHECK(false, "libxsmm back end not built"); }

#endif

}  // namespace vjit::runtime::gemm_detail
