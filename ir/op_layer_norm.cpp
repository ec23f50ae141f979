// LayerNorm, x [n] → [n]: (x − μ) / σ with μ = Σ x_i / n, σ² = Σ (x_i − μ)² / n
// + ε (the biased variance, ε = 1e-5 as PyTorch's default); gain and bias are
// the user's mul and add. LayerNormGrad, its gradient (x [n], g [n]) → [n]:
// dx = (g − mean(g) − y · mean(g ⊙ y)) / σ with y = LayerNorm(x), μ, σ and y
// computed again from x.
#include "ir/row_op.h"

#include <cmath>

#include "ir/lane_sums.h"
#include "ir/vector_clones.h"
#include "vjit/program.h"

namespace vjit {

Value Builder::layer_norm(Value x) { return row_op(ir::Op::LayerNorm, "layer_norm", {x}); }

namespace ir {

namespace {

#define VJIT_LAYER_NORM_EPS 1e-5
#define VJIT_LAYER_NORM_TEXT(x) #x
#define VJIT_LAYER_NORM_STRING(x) VJIT_LAYER_NORM_TEXT(x)
constexpr double kEps = VJIT_LAYER_NORM_EPS;

bool accepts_vector(std::span<const Shape> in) {
  for (const Shape& s : in)
    if (s.rank != 1 || s.numel() == 0 || s != in[0]) return false;
  return true;
}
Shape first_shape(std::span<const Shape> in) { return in[0]; }

// μ and 1/σ of x, in T.
template <typename T>
void moments(std::span<const T> x, T& mean, T& inv_sigma) {
  const T n = T(x.size());
  T sum = T(0);
  for (T v : x) sum += v;
  mean = sum / n;
  T squares = T(0);
  for (T v : x) squares += (v - mean) * (v - mean);
  inv_sigma = T(1) / std::sqrt(squares / n + T(kEps));
}

template <typename T>
void layer_norm_reference(const RowValues<T>& v) {
  T mean, inv_sigma;
  moments(v.in[0], mean, inv_sigma);
  for (size_t i = 0; i < v.out.size(); ++i) v.out[i] = (v.in[0][i] - mean) * inv_sigma;
}

template <typename T>
void layer_norm_grad_reference(const RowValues<T>& v) {
  const std::span<const T> x = v.in[0], g = v.in[1];
  T mean, inv_sigma;
  moments(x, mean, inv_sigma);
  const T n = T(x.size());
  T g_sum = T(0), gy_sum = T(0);
  for (size_t i = 0; i < x.size(); ++i) {
    g_sum += g[i];
    gy_sum += g[i] * (x[i] - mean) * inv_sigma;
  }
  for (size_t i = 0; i < x.size(); ++i)
    v.out[i] = (g[i] - g_sum / n - (x[i] - mean) * inv_sigma * (gy_sum / n)) * inv_sigma;
}

void layer_norm_gradient(GradientEmitter& df, const Function& f, ValueId id, ValueId g) {
  const ValueId x = f[id].args[0];
  df.add_gradient(x, df.emit(Node::make(Op::LayerNormGrad, f[x].shape, {df.forward(x), g})));
}

// A sum, a subtraction, a square and its sum, a multiplication per element.
int64_t layer_norm_flops(std::span<const Shape> in, const Shape&) { return 5 * in[0].numel(); }
// The moments again, two sums and five operations per element for dx.
int64_t layer_norm_grad_flops(std::span<const Shape> in, const Shape&) { return 12 * in[0].numel(); }

// The CPU loops: Σ in kLaneSums independent partial sums, so that they
// vectorise (ir/lane_sums.h; lane_sum is its own).
VJIT_VECTOR_CLONES float lane_squares(const float* x, float mean, int64_t n) {
  float lanes[kLaneSums] = {};
  int64_t i = 0;
  for (; i + kLaneSums <= n; i += kLaneSums)
    for (int64_t j = 0; j < kLaneSums; ++j) lanes[j] += (x[i + j] - mean) * (x[i + j] - mean);
  float total = 0.0f;
  for (; i < n; ++i) total += (x[i] - mean) * (x[i] - mean);
  for (int64_t j = 0; j < kLaneSums; ++j) total += lanes[j];
  return total;
}

// y = (x − mean) · inv_sigma into out; returns Σ g_i y_i when g is given.
VJIT_VECTOR_CLONES float normalise(const float* __restrict x, float mean, float inv_sigma, const float* __restrict g,
                                   int64_t n, float* __restrict out) {
  float gy = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = (x[i] - mean) * inv_sigma;
    if (g != nullptr) gy += g[i] * out[i];
  }
  return gy;
}

void layer_norm_rows(const RowBlock& b) {
  const int64_t n = b.in_width[0];
  for (int64_t r = 0; r < b.rows; ++r) {
    const float* x = b.in[0] + r * b.in_ld[0];
    const float mean = lane_sum(x, n) / float(n);
    const float inv_sigma = 1.0f / std::sqrt(lane_squares(x, mean, n) / float(n) + float(kEps));
    normalise(x, mean, inv_sigma, nullptr, n, b.out + r * b.out_ld);
  }
}

VJIT_VECTOR_CLONES void layer_norm_grad_row(const float* __restrict g, float g_mean, float gy_mean, float inv_sigma,
                                            int64_t n, float* __restrict out) {
  for (int64_t i = 0; i < n; ++i) out[i] = (g[i] - g_mean - out[i] * gy_mean) * inv_sigma;
}

void layer_norm_grad_rows(const RowBlock& b) {
  const int64_t n = b.in_width[0];
  for (int64_t r = 0; r < b.rows; ++r) {
    const float* x = b.in[0] + r * b.in_ld[0];
    const float* g = b.in[1] + r * b.in_ld[1];
    float* out = b.out + r * b.out_ld;
    const float mean = lane_sum(x, n) / float(n);
    const float inv_sigma = 1.0f / std::sqrt(lane_squares(x, mean, n) / float(n) + float(kEps));
    const float gy = normalise(x, mean, inv_sigma, g, n, out);  // out = y for now
    layer_norm_grad_row(g, lane_sum(g, n) / float(n), gy / float(n), inv_sigma, n, out);
  }
}

// One thread per row: the moments once, then the row.
constexpr std::string_view kLayerNormCuda =
    "__device__ void vjit_layer_norm_moments(const float* x, long long n, float* mean, float* inv_sigma) {\n"
    "  float sum = 0.0f;\n"
    "  for (long long i = 0; i < n; ++i) sum += x[i];\n"
    "  *mean = sum / (float)n;\n"
    "  float squares = 0.0f;\n"
    "  for (long long i = 0; i < n; ++i) squares += (x[i] - *mean) * (x[i] - *mean);\n"
    "  *inv_sigma = 1.0f / sqrtf(squares / (float)n + " VJIT_LAYER_NORM_STRING(VJIT_LAYER_NORM_EPS) "f);\n"
    "}\n"
    "__device__ void vjit_layer_norm_row(const float* x0, long long n0, float* out, long long width) {\n"
    "  float mean, inv_sigma;\n"
    "  vjit_layer_norm_moments(x0, n0, &mean, &inv_sigma);\n"
    "  for (long long i = 0; i < width; ++i) out[i] = (x0[i] - mean) * inv_sigma;\n"
    "}\n";

// vjit_layer_norm_moments is LayerNorm's: the table lists LayerNorm first, and
// codegen/cuda_source.cpp writes the row ops' sources in the table's order.
constexpr std::string_view kLayerNormGradCuda =
    "__device__ void vjit_layer_norm_grad_row(const float* x0, long long n0, const float* x1, long long n1,\n"
    "                                         float* out, long long width) {\n"
    "  float mean, inv_sigma;\n"
    "  vjit_layer_norm_moments(x0, n0, &mean, &inv_sigma);\n"
    "  float g_sum = 0.0f, gy_sum = 0.0f;\n"
    "  for (long long i = 0; i < width; ++i) {\n"
    "    g_sum += x1[i];\n"
    "    gy_sum += x1[i] * ((x0[i] - mean) * inv_sigma);\n"
    "  }\n"
    "  const float g_mean = g_sum / (float)n0, gy_mean = gy_sum / (float)n0;\n"
    "  for (long long i = 0; i < width; ++i)\n"
    "    out[i] = (x1[i] - g_mean - (x0[i] - mean) * inv_sigma * gy_mean) * inv_sigma;\n"
    "}\n";

}  // namespace

const RowOp kLayerNormRow{accepts_vector,          "a vector of at least one element",
                          first_shape,             layer_norm_reference<double>,
                          layer_norm_reference<float>, layer_norm_gradient,
                          layer_norm_flops,        Primitive::Reduce,
                          layer_norm_rows,         "vjit_layer_norm",
                          CudaRowForm::Row,        kLayerNormCuda};

const RowOp kLayerNormGradRow{accepts_vector,       "two vectors of one length",
                              first_shape,          layer_norm_grad_reference<double>,
                              layer_norm_grad_reference<float>, nullptr,
                              layer_norm_grad_flops, Primitive::Reduce,
                              layer_norm_grad_rows, "vjit_layer_norm_grad",
                              CudaRowForm::Row,     kLayerNormGradCuda};

}  // namespace ir
}  // namespace vjit
