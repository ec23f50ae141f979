#include "runtime/gemm.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "runtime/gemm_backends.h"
#include "vjit/error.h"

namespace vjit::runtime {

namespace {

// The measured choice; see perf/GEMM.md for the numbers behind it.
constexpr GemmBackend kMeasuredDefault = GemmBackend::OneDnn;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

std::string valid_names() {
  std::string out = "auto";
  for (GemmBackend b : kGemmBackends) out += std::string(", ") + gemm_backend_name(b);
  return out;
}

void check_args(const char* who, GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, const float* c, int64_t ldc) {
  VJIT_USER_CHECK(m >= 0 && n >= 0 && k >= 0, who << "(" << gemm_backend_name(backend) << "): negative size m=" << m
                                                  << " n=" << n << " k=" << k);
  const int64_t a_cols = trans_a ? m : k;
  const int64_t b_cols = trans_b ? k : n;
  VJIT_USER_CHECK(lda >= std::max<int64_t>(1, a_cols) && ldb >= std::max<int64_t>(1, b_cols) &&
                      ldc >= std::max<int64_t>(1, n),
                  who << "(" << gemm_backend_name(backend) << "): leading dimension too small for row-major A "
                      << (trans_a ? "[k,m]" : "[m,k]") << " lda=" << lda << " (needs >= " << std::max<int64_t>(1, a_cols)
                      << "), B " << (trans_b ? "[n,k]" : "[k,n]") << " ldb=" << ldb << " (needs >= "
                      << std::max<int64_t>(1, b_cols) << "), C [m,n] ldc=" << ldc << " (needs >= "
                      << std::max<int64_t>(1, n) << ") with m=" << m << " n=" << n << " k=" << k);
  if (m == 0 || n == 0) return;
  VJIT_USER_CHECK(c != nullptr, who << "(" << gemm_backend_name(backend) << "): C is null for m=" << m << " n=" << n);
  if (k > 0 && alpha != 0.0f)
    VJIT_USER_CHECK(a != nullptr && b != nullptr,
                    who << "(" << gemm_backend_name(backend) << "): A or B is null for k=" << k);
}

void check_available(GemmBackend backend) {
  const std::string why = gemm_backend_unavailable_reason(backend);
  VJIT_USER_CHECK(why.empty(), "GEMM back end '" << gemm_backend_name(backend) << "' cannot be used: " << why);
}

}  // namespace

namespace gemm_detail {

void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  if (beta == 1.0f) return;
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f) {
      std::fill(row, row + n, 0.0f);
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

void reference_sgemm(const GemmArgs& g) {
  for (int64_t i = 0; i < g.m; ++i) {
    for (int64_t j = 0; j < g.n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < g.k; ++p) {
        const float x = g.trans_a ? g.a[p * g.lda + i] : g.a[i * g.lda + p];
        const float y = g.trans_b ? g.b[j * g.ldb + p] : g.b[p * g.ldb + j];
        acc += double(x) * double(y);
      }
      float& out = g.c[i * g.ldc + j];
      const double prior = g.beta == 0.0f ? 0.0 : double(g.beta) * double(out);
      out = float(double(g.alpha) * acc + prior);
    }
  }
}

}  // namespace gemm_detail

const char* gemm_backend_name(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::OneDnn: return "onednn";
    case GemmBackend::OpenBlas: return "openblas";
    case GemmBackend::Blis: return "blis";
    case GemmBackend::Libxsmm: return "libxsmm";
    case GemmBackend::OneDnnBf16: return "onednn_bf16";
    case GemmBackend::Reference: return "reference";
  }
  return "unknown";
}

GemmBackend parse_gemm_backend(std::string_view name) {
  const std::string key = lower(name);
  if (key == "auto") return default_gemm_backend();
  for (GemmBackend b : kGemmBackends)
    if (key == gemm_backend_name(b)) return b;
  throw UserError("unknown GEMM back end '" + std::string(name) + "'; valid values: " + valid_names());
}

bool gemm_backend_built(GemmBackend backend) {
  switch (backend) {
#ifdef VJIT_HAVE_DNNL
    case GemmBackend::OneDnn:
    case GemmBackend::OneDnnBf16: return true;
#endif
#ifdef VJIT_HAVE_OPENBLAS
    case GemmBackend::OpenBlas: return true;
#endif
#ifdef VJIT_HAVE_BLIS
    case GemmBackend::Blis: return true;
#endif
#ifdef VJIT_HAVE_LIBXSMM
    case GemmBackend::Libxsmm: return true;
#endif
    case GemmBackend::Reference: return true;
    default: return false;
  }
}

std::string gemm_backend_unavailable_reason(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::OneDnn: return gemm_detail::onednn_unavailable();
    case GemmBackend::OpenBlas: return gemm_detail::openblas_unavailable();
    case GemmBackend::Blis: return gemm_detail::blis_unavailable();
    case GemmBackend::Libxsmm: return gemm_detail::libxsmm_unavailable();
    case GemmBackend::OneDnnBf16: return gemm_detail::onednn_bf16_unavailable();
    case GemmBackend::Reference: return "";
  }
  return "unknown back end";
}

bool gemm_backend_available(GemmBackend backend) { return gemm_backend_unavailable_reason(backend).empty(); }

bool gemm_backend_rounds_operands(GemmBackend backend) { return backend == GemmBackend::OneDnnBf16; }

std::string gemm_backend_info(GemmBackend backend) {
  if (!gemm_backend_available(backend)) return "unavailable: " + gemm_backend_unavailable_reason(backend);
  switch (backend) {
    case GemmBackend::OneDnn: return gemm_detail::onednn_info();
    case GemmBackend::OpenBlas: return gemm_detail::openblas_info();
    case GemmBackend::Blis: return gemm_detail::blis_info();
    case GemmBackend::Libxsmm: return gemm_detail::libxsmm_info();
    case GemmBackend::OneDnnBf16: return gemm_detail::onednn_bf16_info();
    case GemmBackend::Reference: return "scalar triple loop, double accumulation";
  }
  return "";
}

GemmBackend default_gemm_backend() {
  if (gemm_backend_available(kMeasuredDefault)) return kMeasuredDefault;
  for (GemmBackend b : kGemmBackends)
    if (gemm_backend_available(b) && !gemm_backend_rounds_operands(b)) return b;
  return GemmBackend::Reference;
}

GemmBackend select_gemm_backend(std::string_view option, std::string_view variable) {
  if (option.empty()) return default_gemm_backend();
  const std::string value(option);
  GemmBackend backend;
  try {
    backend = parse_gemm_backend(value);
  } catch (const UserError&) {
    throw UserError(std::string(variable) + "=" + value + ": unknown GEMM back end; valid values: " + valid_names());
  }
  const std::string why = gemm_backend_unavailable_reason(backend);
  if (!why.empty()) {
    std::string usable = "auto";
    for (GemmBackend b : kGemmBackends)
      if (gemm_backend_available(b)) usable += std::string(", ") + gemm_backend_name(b);
    throw UserError(std::string(variable) + "=" + value + ": back end '" + gemm_backend_name(backend) +
                    "' cannot be used: " + why + "; usable here: " + usable);
  }
  return backend;
}

void validate_sgemm(GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, const float* c, int64_t ldc) {
  check_args("sgemm", backend, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, c, ldc);
  check_available(backend);
}

bool gemm_backend_has_library_threading(GemmBackend backend) {
  return backend == GemmBackend::OneDnn || backend == GemmBackend::OpenBlas || backend == GemmBackend::Blis;
}

namespace {

void run(const char* who, GemmBackend backend, int threads, bool trans_a, bool trans_b, int64_t m, int64_t n,
         int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
         int64_t ldc) {
  check_args(who, backend, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, c, ldc);
  check_available(backend);
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) {  // no product: C = beta * C, the same for every back end
    gemm_detail::scale_c(m, n, beta, c, ldc);
    return;
  }
  const gemm_detail::GemmArgs args{trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
  switch (backend) {
    case GemmBackend::OneDnn: gemm_detail::onednn_sgemm(args, threads); return;
    case GemmBackend::OpenBlas: gemm_detail::openblas_sgemm(args, threads); return;
    case GemmBackend::Blis: gemm_detail::blis_sgemm(args, threads); return;
    case GemmBackend::Libxsmm: gemm_detail::libxsmm_sgemm(args); return;
    case GemmBackend::OneDnnBf16: gemm_detail::onednn_bf16_sgemm(args, threads); return;
    case GemmBackend::Reference: gemm_detail::reference_sgemm(args); return;
  }
}

}  // namespace

void sgemm(GemmBackend backend, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  run("sgemm", backend, 1, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void sgemm_library_threaded(GemmBackend backend, int threads, bool trans_a, bool trans_b, int64_t m, int64_t n,
                            int64_t k, float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                            float beta, float* c, int64_t ldc) {
  VJIT_USER_CHECK(gemm_backend_has_library_threading(backend),
                  "sgemm_library_threaded: back end '" << gemm_backend_name(backend)
                                                       << "' has no threading of its own");
  VJIT_USER_CHECK(threads >= 1, "sgemm_library_threaded: threads=" << threads << " must be >= 1");
  run("sgemm_library_threaded", backend, threads, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace vjit::runtime
