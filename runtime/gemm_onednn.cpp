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

#else  // !VJIT_HAVE_DNNL

std::string onednn_unavailable() {
  return "not built: oneDNN (libdnnl, header oneapi/dnnl/dnnl.h) or OpenMP was not found when vjit was configured "
         "(install libdnnl-dev and reconfigure)";
}
std::string onednn_info() { return ""; }
void onednn_sgemm(const GemmArgs&, int) { VJIT_INTERNAL_CHECK(false, "oneDNN back end not built"); }

#endif

}  // namespace vjit::runtime::gemm_detail
