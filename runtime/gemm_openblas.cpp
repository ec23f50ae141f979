// OpenBLAS back end, loaded at run time with dlopen by its exact soname.
//
// Why not link it. OpenBLAS and BLIS (and the reference libblas.so.3 that the
// Debian alternatives system may put in front of either) all export the same
// BLAS/CBLAS names: `nm -D --defined-only` shows 306 common symbols between
// libopenblas.so.0 and libblis.so.4, cblas_sgemm and sgemm_ among them. With
// both linked, a call to cblas_sgemm binds to whichever library the dynamic
// linker meets first, which depends on link order and on update-alternatives —
// the "OpenBLAS" back end could silently run BLIS. BLIS has a unique native
// entry point (bli_sgemm_ex) and oneDNN has dnnl_sgemm, so those two are linked;
// OpenBLAS has no unique GEMM symbol, so it is the one we load privately:
//
//   dlopen(VJIT_OPENBLAS_SONAME = "libopenblas.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)
//
// * the exact soname picks OpenBLAS, never the generic libblas.so.3;
// * RTLD_LOCAL keeps its symbols out of the global scope, so it cannot capture
//   calls meant for BLIS (or libxsmm's BLAS fallback) either;
// * RTLD_DEEPBIND makes OpenBLAS resolve its own references to exported names
//   to itself first. Without it they go to the global scope first: with BLIS
//   linked, LD_DEBUG=bindings shows OpenBLAS's own `sgemm_` and `xerbla_`
//   references binding to libblis.so.4; with it, to libopenblas.so.0;
// * dlsym(handle, "cblas_sgemm") asks that handle only.
// RTLD_DEEPBIND is refused by AddressSanitizer and ThreadSanitizer, so
// sanitizer builds drop it (vjit never calls OpenBLAS's exported names other
// than through the handle).
//
// Threads. OpenBLAS's thread count is process-wide (openblas_set_num_threads).
// A single-threaded call needs it at 1; we set it once and only touch it again
// when the benchmark asks for the library's own threading.
#include "runtime/gemm_backends.h"

#include "vjit/error.h"

#ifdef VJIT_HAVE_OPENBLAS
#include <dlfcn.h>

#include <atomic>
#include <climits>
#include <mutex>
#endif

// GCC defines __SANITIZE_*__; clang answers __has_feature.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define VJIT_SANITIZER_REFUSES_DEEPBIND
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define VJIT_SANITIZER_REFUSES_DEEPBIND
#endif
#endif

#ifndef VJIT_OPENBLAS_SONAME
#define VJIT_OPENBLAS_SONAME "libopenblas.so.0"
#endif

namespace vjit::runtime::gemm_detail {

#ifdef VJIT_HAVE_OPENBLAS

namespace {

// CBLAS enumerators (cblas.h): the values are part of the CBLAS ABI.
constexpr int kCblasRowMajor = 101;
constexpr int kCblasNoTrans = 111;
constexpr int kCblasTrans = 112;

// Debian's libopenblas.so.0 is the LP64 build: blasint is a 32-bit int
// (the 64-bit-index build has its own soname, libopenblas64.so.0).
using CblasSgemm = void (*)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                            int lda, const float* b, int ldb, float beta, float* c, int ldc);
using SetNumThreads = void (*)(int);
using GetString = char* (*)();

struct OpenBlas {
  void* handle = nullptr;
  std::string error;  // why it could not be loaded; empty when loaded
  CblasSgemm sgemm = nullptr;
  SetNumThreads set_num_threads = nullptr;
  GetString get_config = nullptr;
  GetString get_corename = nullptr;
  std::mutex threads_mutex;
  std::atomic<int> threads{-1};  // what we last set, -1 = not yet

  OpenBlas() {
    int flags = RTLD_NOW | RTLD_LOCAL;
#if !defined(VJIT_SANITIZER_REFUSES_DEEPBIND)
    flags |= RTLD_DEEPBIND;
#endif
    handle = dlopen(VJIT_OPENBLAS_SONAME, flags);
    if (handle == nullptr) {
      const char* why = dlerror();
      error = std::string("dlopen(\"" VJIT_OPENBLAS_SONAME "\") failed: ") + (why ? why : "unknown error") +
              " (install libopenblas0)";
      return;
    }
    sgemm = reinterpret_cast<CblasSgemm>(dlsym(handle, "cblas_sgemm"));
    set_num_threads = reinterpret_cast<SetNumThreads>(dlsym(handle, "openblas_set_num_threads"));
    get_config = reinterpret_cast<GetString>(dlsym(handle, "openblas_get_config"));
    get_corename = reinterpret_cast<GetString>(dlsym(handle, "openblas_get_corename"));
    if (sgemm == nullptr || set_num_threads == nullptr) {
      error = VJIT_OPENBLAS_SONAME " lacks cblas_sgemm or openblas_set_num_threads: not an OpenBLAS library";
      sgemm = nullptr;
    }
  }

  void use_threads(int n) {
    if (threads.load(std::memory_order_acquire) == n) return;
    std::lock_guard<std::mutex> lock(threads_mutex);
    if (threads.load(std::memory_order_relaxed) == n) return;
    set_num_threads(n);
    threads.store(n, std::memory_order_release);
  }
};

OpenBlas& openblas() {
  static OpenBlas library;  // loaded once, on first use; never unloaded
  return library;
}

}  // namespace

std::string openblas_unavailable() { return openblas().error; }

std::string openblas_info() {
  OpenBlas& lib = openblas();
  std::string out = lib.get_config ? lib.get_config() : "OpenBLAS";
  if (lib.get_corename) out += std::string(" (core: ") + lib.get_corename() + ")";
  return out + " via dlopen(" VJIT_OPENBLAS_SONAME ")";
}

void openblas_sgemm(const GemmArgs& g, int threads) {
  OpenBlas& lib = openblas();
  VJIT_USER_CHECK(g.m <= INT_MAX && g.n <= INT_MAX && g.k <= INT_MAX && g.lda <= INT_MAX && g.ldb <= INT_MAX &&
                      g.ldc <= INT_MAX,
                  "sgemm(openblas): sizes m=" << g.m << " n=" << g.n << " k=" << g.k
                                              << " or leading dimensions exceed OpenBLAS's 32-bit integers");
  lib.use_threads(threads);
  lib.sgemm(kCblasRowMajor, g.trans_a ? kCblasTrans : kCblasNoTrans, g.trans_b ? kCblasTrans : kCblasNoTrans,
            int(g.m), int(g.n), int(g.k), g.alpha, g.a, int(g.lda), g.b, int(g.ldb), g.beta, g.c, int(g.ldc));
  // The library's own threading is for measurement only; go back to one thread so
  // that later single-threaded calls (possibly concurrent) never share its pool.
  if (threads != 1) lib.use_threads(1);
}

#else  // !VJIT_HAVE_OPENBLAS

std::string openblas_unavailable() {
  return "not built: OpenBLAS (libopenblas) was not found when vjit was configured (install libopenblas-dev and "
         "reconfigure)";
}
std::string openblas_info() { return ""; }
void openblas_sgemm(const GemmArgs&, int) { VJIT_INTERNAL_CHECK(false, "OpenBLAS back end not built"); }

#endif

}  // namespace vjit::runtime::gemm_detail
