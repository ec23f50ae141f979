// SymOuter, x [n] → [n(n+1)/2]: the products x_a x_b for a ≤ b, row by row of
// the upper triangle of x xᵀ (matmul(P, sym_outer(x)) is the bilinear form
// xᵀ V x for P packed from V + Vᵀ); and SymOuterGrad, its gradient (x [n],
// g [n(n+1)/2]) → [n]: out_c = Σ_{b ≥ c} g(c,b) x_b + Σ_{a ≤ c} g(a,c) x_a.
#include "ir/row_op.h"

#include <algorithm>

#include "ir/lane_sums.h"
#include "ir/vector_clones.h"
#include "vjit/program.h"

namespace vjit {

Value Builder::sym_outer(Value x) { return row_op(ir::Op::SymOuter, "sym_outer", {x}); }

namespace ir {

namespace {

int64_t triangle(int64_t n) { return n * (n + 1) / 2; }

// --- SymOuter ---

bool accepts_vector(std::span<const Shape> in) { return in[0].rank == 1; }
Shape packed_shape(std::span<const Shape> in) { return Shape::vec(int(triangle(in[0].numel()))); }

template <typename T>
void sym_outer_reference(const RowValues<T>& v) {
  const std::span<const T> x = v.in[0];
  size_t at = 0;
  for (size_t a = 0; a < x.size(); ++a)
    for (size_t b = a; b < x.size(); ++b) v.out[at++] = x[a] * x[b];
}

void sym_outer_gradient(GradientEmitter& df, const Function& f, ValueId id, ValueId g) {
  const ValueId x = f[id].args[0];
  df.add_gradient(x, df.emit(Node::make(Op::SymOuterGrad, f[x].shape, {df.forward(x), g})));
}

int64_t sym_outer_flops(std::span<const Shape>, const Shape& result) { return result.numel(); }

VJIT_VECTOR_CLONES void sym_outer_row(const float* __restrict x, int64_t n, float* __restrict out) {
  for (int64_t a = 0; a < n; ++a) {
    const float xa = x[a];
    for (int64_t b = a; b < n; ++b) out[b - a] = xa * x[b];
    out += n - a;
  }
}

void sym_outer_rows(const RowBlock& b) {
  for (int64_t r = 0; r < b.rows; ++r) sym_outer_row(b.in[0] + r * b.in_ld[0], b.in_width[0], b.out + r * b.out_ld);
}

// Element i finds its (a, b) by walking the rows of the triangle.
constexpr std::string_view kSymOuterCuda =
    "__device__ float vjit_sym_outer_element(const float* x0, long long n0, long long i) {\n"
    "  long long a = 0, rest = i;\n"
    "  while (rest >= n0 - a) { rest -= n0 - a; ++a; }\n"
    "  return x0[a] * x0[a + rest];\n"
    "}\n";

// --- SymOuterGrad ---

bool accepts_vector_and_packed(std::span<const Shape> in) {
  return in[0].rank == 1 && in[1].rank == 1 && in[1].numel() == triangle(in[0].numel());
}
Shape first_shape(std::span<const Shape> in) { return in[0]; }

template <typename T>
void sym_outer_grad_reference(const RowValues<T>& v) {  // d(x_a x_b) = x_b dx_a + x_a dx_b
  const std::span<const T> x = v.in[0], g = v.in[1];
  std::fill(v.out.begin(), v.out.end(), T(0));
  size_t at = 0;
  for (size_t a = 0; a < x.size(); ++a)
    for (size_t b = a; b < x.size(); ++b, ++at) {
      v.out[a] += g[at] * x[b];
      v.out[b] += g[at] * x[a];
    }
}

int64_t sym_outer_grad_flops(std::span<const Shape> in, const Shape&) {
  return 4 * in[1].numel();  // two multiply-adds per product x_a x_b
}

// Row a of the triangle gives the first sum's dot product for c = a and its
// share of the second for every c ≥ a.
VJIT_VECTOR_CLONES void sym_outer_grad_row(const float* __restrict x, const float* __restrict g, int64_t n,
                                           float* __restrict out) {
  std::fill_n(out, size_t(n), 0.0f);
  for (int64_t a = 0; a < n; ++a) {
    const float xa = x[a];
    for (int64_t b = a; b < n; ++b) out[b] += g[b - a] * xa;
    out[a] += lane_dot(g, x + a, n - a);
    g += n - a;
  }
}

void sym_outer_grad_rows(const RowBlock& b) {
  for (int64_t r = 0; r < b.rows; ++r)
    sym_outer_grad_row(b.in[0] + r * b.in_ld[0], b.in[1] + r * b.in_ld[1], b.in_width[0], b.out + r * b.out_ld);
}

// g(a,b) at a·n − a(a−1)/2 + b − a.
constexpr std::string_view kSymOuterGradCuda =
    "__device__ float vjit_sym_outer_grad_element(const float* x0, long long n0, const float* x1, long long n1,\n"
    "                                             long long i) {\n"
    "  const long long row_c = i * n0 - i * (i - 1) / 2;\n"
    "  float total = 0.0f;\n"
    "  for (long long b = i; b < n0; ++b) total += x1[row_c + b - i] * x0[b];\n"
    "  for (long long a = 0; a <= i; ++a) total += x1[a * n0 - a * (a - 1) / 2 + i - a] * x0[a];\n"
    "  return total;\n"
    "}\n";

}  // namespace

const RowOp kSymOuterRow{accepts_vector,       "a vector",        packed_shape,
                         sym_outer_reference<double>, sym_outer_reference<float>, sym_outer_gradient,
                         sym_outer_flops,      Primitive::Outer,  sym_outer_rows,
                         "vjit_sym_outer",     CudaRowForm::Element, kSymOuterCuda};

const RowOp kSymOuterGradRow{accepts_vector_and_packed,  "a vector [n] and its packed triangle [n(n+1)/2]",
                             first_shape,                sym_outer_grad_reference<double>,
                             sym_outer_grad_reference<float>, nullptr,
                             sym_outer_grad_flops,       Primitive::Outer,
                             sym_outer_grad_rows,        "vjit_sym_outer_grad",
                             CudaRowForm::Element,       kSymOuterGradCuda};

}  // namespace ir
}  // namespace vjit
