// BLIS back end: bli_sgemm_ex, BLIS's native typed API. It takes general row and
// column strides (row-major is rs = ld, cs = 1), and the "_ex" form takes a
// runtime object (rntm_t) that fixes the thread count for this call only —
// unlike bli_thread_set_num_threads, which is process-wide — so concurrent calls
// from our pool's threads each run on their own thread.
//
// Only bli_* names are used: BLIS also exports cblas_sgemm and sgemm_, which
// clash with OpenBLAS's (see runtime/gemm_openblas.cpp), and vjit never calls
// those.
#include "runtime/gemm_backends.h"

#include "vjit/error.h"

#ifdef VJIT_HAVE_BLIS
#include <blis.h>
#endif

namespace vjit::runtime::gemm_detail {

#ifdef VJIT_HAVE_BLIS

std::string blis_unavailable() { return ""; }

std::string blis_info() {
  std::string out = std::string("BLIS ") + bli_info_get_version_str();
  const arch_t arch = bli_arch_query_id();
  out += std::string(" (config: ") + bli_arch_string(arch) + ", threading: " +
         (bli_info_get_enable_openmp() ? "OpenMP)" : "pthreads or none)");
  return out;
}

void blis_sgemm(const GemmArgs& g, int threads) {
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(threads, &rntm);
  float alpha = g.alpha;
  float beta = g.beta;
  // BLIS does not write through A and B; its typed API just is not const-qualified.
  bli_sgemm_ex(g.trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, g.trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, g.m,
               g.n, g.k, &alpha, const_cast<float*>(g.a), g.lda, 1, const_cast<float*>(g.b), g.ldb, 1, &beta, g.c,
               g.ldc, 1, nullptr, &rntm);
}

#else  // !VJIT_HAVE_BLIS

std::string blis_unavailable() {
  return "not built: BLIS (libblis, header blis.h) was not found when vjit was configured (install libblis-dev "
         "and reconfigure)";
}
std::string blis_info() { return ""; }
void blis_sgemm(const GemmArgs&, int) { VJIT_INTERNAL_CHECK(false, "BLIS back end not built"); }

#endif

}  // namespace vjit::runtime::gemm_detail
