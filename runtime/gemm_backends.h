#pragma once
// The interface between runtime/gemm.cpp (validation, edge cases, dispatch) and
// the one translation unit per library (runtime/gemm_<library>.cpp). Private to
// the GEMM code; everything else includes runtime/gemm.h.
//
// Each library lives in its own .cpp so that its header (blis.h, dnnl.h, libxsmm.h
// are large C headers with macros of their own) is seen by nothing else, and so
// that a library missing at configure time only empties its own file
// (VJIT_HAVE_DNNL, VJIT_HAVE_OPENBLAS, VJIT_HAVE_BLIS, VJIT_HAVE_LIBXSMM).
#include <cstdint>
#include <string>

namespace vjit::runtime::gemm_detail {

// One row-major product, already validated by sgemm(): m, n, k >= 1, alpha != 0,
// leading dimensions large enough. beta == 0 means C must not be read.
struct GemmArgs {
  bool trans_a;
  bool trans_b;
  int64_t m, n, k;
  float alpha;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float beta;
  float* c;
  int64_t ldc;
};

// Per library: "" when usable, else why not; a one-line description; and the
// product on `threads` library threads (1 = on the calling thread only).
std::string onednn_unavailable();
std::string onednn_info();
void onednn_sgemm(const GemmArgs& args, int threads);

// The bf16 product (GemmBackend::OneDnnBf16): "" only on a CPU with AVX-512
// BF16 or AMX, as oneDNN sees it.
std::string onednn_bf16_unavailable();
std::string onednn_bf16_info();
void onednn_bf16_sgemm(const GemmArgs& args, int threads);

std::string openblas_unavailable();
std::string openblas_info();
void openblas_sgemm(const GemmArgs& args, int threads);

std::string blis_unavailable();
std::string blis_info();
void blis_sgemm(const GemmArgs& args, int threads);

std::string libxsmm_unavailable();
std::string libxsmm_info();
void libxsmm_sgemm(const GemmArgs& args);

void reference_sgemm(const GemmArgs& args);

// C = beta * C over the m x n block (beta == 0 writes zeros without reading C).
void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc);

}  // namespace vjit::runtime::gemm_detail
