// The reference interpreter: one vertex at a time, one node at a time, plain
// loops. Slow on purpose; every optimised path is compared against it.
#include "ir/interpreter.h"

#include <algorithm>
#include <cmath>

#include "ir/dropout.h"
#include "ir/op_semantics.h"
#include "ir/row_op.h"
#include "ir/ops.h"
#include "vjit/error.h"

namespace vjit::ir {

namespace {

template <typename T>
using Tensor = std::vector<T>;

// Index into an operand broadcast to the result shape (see Op::Add).
inline int64_t broadcast_index(const Shape& operand, int64_t i) {
  if (operand.rank == 0) return 0;
  if (operand.rank == 1 && operand.numel() != 0) return i % operand.numel();
  return i;
}

// A matmul operand read as a matrix: a vector is a row on the left, a column on the right.
struct MatrixView {
  int rows, cols;
  bool transposed;
  int64_t stride;
  template <typename T>
  T at(const Tensor<T>& data, int i, int j) const {
    return transposed ? data[size_t(int64_t(j) * stride + i)] : data[size_t(int64_t(i) * stride + j)];
  }
};

MatrixView matrix_view(const Shape& s, bool left, bool transposed) {
  int r = s.rank == 2 ? s.dims[0] : (left ? 1 : s.dims[0]);
  int c = s.rank == 2 ? s.dims[1] : (left ? s.dims[0] : 1);
  return transposed ? MatrixView{c, r, true, c} : MatrixView{r, c, false, c};
}

template <typename T>
Tensor<T> matmul(const Node& n, const Shape& sa, const Tensor<T>& a, const Shape& sb, const Tensor<T>& b) {
  MatrixView va = matrix_view(sa, true, n.trans_a), vb = matrix_view(sb, false, n.trans_b);
  VJIT_INTERNAL_CHECK(va.cols == vb.rows, "matmul inner dimensions " << va.cols << " vs " << vb.rows);
  Tensor<T> out(size_t(va.rows) * size_t(vb.cols), T(0));
  VJIT_INTERNAL_CHECK(int64_t(out.size()) == n.shape.numel(), "matmul result size");
  for (int i = 0; i < va.rows; ++i)
    for (int j = 0; j < vb.cols; ++j) {
      T acc = T(0);
      for (int p = 0; p < va.cols; ++p) acc += va.at(a, i, p) * vb.at(b, p, j);
      out[size_t(i) * size_t(vb.cols) + size_t(j)] = acc;
    }
  return out;
}

template <typename T>
Tensor<T> softmax(const Tensor<T>& logits) {
  T max = *std::max_element(logits.begin(), logits.end());
  Tensor<T> p(logits.size());
  T total = T(0);
  for (size_t i = 0; i < logits.size(); ++i) total += p[i] = std::exp(logits[i] - max);
  for (T& v : p) v /= total;
  return p;
}

template <typename T>
class Interpreter {
 public:
  Interpreter(const Program& program, const std::vector<std::vector<T>>& params, const GraphBatch& batch,
              const std::vector<std::vector<int>>& orders, const RunOptions& options)
      : program_(program), params_(params), batch_(batch), orders_(orders), options_(options) {}

  Evaluation<T> run() {
    size_t num_samples = batch_.samples.size();
    values_.resize(num_samples);
    pushes_.resize(num_samples);
    for (size_t s = 0; s < num_samples; ++s) {
      size_t n = batch_.samples[s].vertices.size();
      values_[s].resize(n);
      pushes_[s].resize(n);
      for (int v : orders_[s]) forward_vertex(int(s), v);
    }
    flatten_pushes();
    if (options_.backward) run_backward();
    return std::move(result_);
  }

 private:
  const Vertex& vertex(int s, int v) const { return batch_.samples[size_t(s)].vertices[size_t(v)]; }

  // What vertex (s, v) scattered, or zeros when its function does not scatter
  // (validation rules that out for gathered children).
  const Tensor<T>& scattered(int s, int v) const {
    const Function& f = program_.forward(vertex(s, v).type);
    for (const Node& n : f.nodes)
      if (n.op == Op::Scatter) return values_[size_t(s)][size_t(v)][size_t(n.args[0])];
    VJIT_INTERNAL_CHECK(false, "vertex " << v << " does not scatter");
  }

  // The vertex's variadic children: those after its gather(k) slots.
  int variadic_children(const Vertex& vx) const {
    return std::max(0, int(vx.children.size()) - program_.signature(vx.type).fixed_arity);
  }

  void forward_vertex(int s, int v) {
    const Function& f = program_.forward(vertex(s, v).type);
    std::vector<Tensor<T>>& vals = values_[size_t(s)][size_t(v)];
    vals.assign(f.nodes.size(), {});
    for (ValueId id = 0; id < f.size(); ++id) {
      const Node& n = f[id];
      switch (n.op) {
        case Op::Scatter: break;
        case Op::Push: pushes_[size_t(s)][size_t(v)].push_back(vals[size_t(n.args[0])]); break;
        case Op::Loss: result_.objective += double(vals[size_t(n.args[0])][0]); break;
        default: vals[size_t(id)] = evaluate(f, id, vals, s, v); break;
      }
    }
  }

  // The pushes in sample, vertex, push order, into the result's flat buffer.
  void flatten_pushes() {
    PushedValues<T>& out = result_.pushes;
    out.reset(int(pushes_.size()), [&](int s) { return int(pushes_[size_t(s)].size()); });
    std::vector<int64_t> widths;
    for (const auto& sample : pushes_)
      for (const auto& vertex : sample) {
        widths.clear();
        for (const Tensor<T>& value : vertex) widths.push_back(int64_t(value.size()));
        out.add_vertex(widths);
      }
    out.allocate();
    int id = 0;
    for (const auto& sample : pushes_)
      for (const auto& vertex : sample) {
        for (size_t k = 0; k < vertex.size(); ++k)
          std::copy(vertex[k].begin(), vertex[k].end(), out.data() + out.value_offset(id, int(k)));
        ++id;
      }
  }

  void run_backward() {
    result_.param_grads.resize(params_.size());
    for (size_t p = 0; p < params_.size(); ++p) result_.param_grads[p].assign(params_[p].size(), T(0));
    scatter_grads_.resize(batch_.samples.size());
    for (size_t s = 0; s < batch_.samples.size(); ++s) {
      scatter_grads_[s].assign(batch_.samples[s].vertices.size(), {});
      const std::vector<int>& order = orders_[s];
      for (auto it = order.rbegin(); it != order.rend(); ++it) backward_vertex(int(s), *it);
    }
  }

  void backward_vertex(int s, int v) {
    const Function& df = program_.backward(vertex(s, v).type);
    std::vector<Tensor<T>> vals(df.nodes.size());
    for (ValueId id = 0; id < df.size(); ++id) {
      const Node& n = df[id];
      switch (n.op) {
        case Op::GatherGrad: add_gather_grad(s, v, n, vals[size_t(n.args[0])]); break;
        case Op::ParamGrad: add_into(result_.param_grads[size_t(n.param)], 0, vals[size_t(n.args[0])]); break;
        case Op::EmbeddingGrad: {
          const Tensor<T>& g = vals[size_t(n.args[0])];
          add_into(result_.param_grads[size_t(n.param)], int64_t(vertex(s, v).token) * int64_t(g.size()), g);
          break;
        }
        default: vals[size_t(id)] = evaluate(df, id, vals, s, v); break;
      }
    }
  }

  static void add_into(Tensor<T>& dst, int64_t offset, const Tensor<T>& src) {
    for (size_t i = 0; i < src.size(); ++i) dst[size_t(offset) + i] += src[i];
  }

  Tensor<T>& scatter_grad(int s, int child) {
    Tensor<T>& g = scatter_grads_[size_t(s)][size_t(child)];
    if (g.empty()) g.assign(scattered(s, child).size(), T(0));
    return g;
  }

  void add_gather_grad(int s, int v, const Node& n, const Tensor<T>& g) {
    const std::vector<int>& children = vertex(s, v).children;
    if (n.target == GatherGradTarget::Slot) {
      add_into(scatter_grad(s, children[size_t(n.child_slot)]), n.start, g);
      return;
    }
    size_t first = size_t(program_.signature(vertex(s, v).type).fixed_arity);
    for (size_t k = first; k < children.size(); ++k) {
      Tensor<T>& dst = scatter_grad(s, children[k]);
      if (n.target == GatherGradTarget::EveryVariadic) {
        add_into(dst, 0, g);
      } else {  // VariadicRows: row k of a GatherAll gradient goes to variadic child k
        for (size_t j = 0; j < dst.size(); ++j) dst[j] += g[(k - first) * dst.size() + j];
      }
    }
  }

  Tensor<T> evaluate(const Function& f, ValueId id, const std::vector<Tensor<T>>& vals, int s, int v) {
    const Node& n = f[id];
    auto arg = [&](int i) -> const Tensor<T>& { return vals[size_t(n.args[size_t(i)])]; };
    auto arg_shape = [&](int i) -> const Shape& { return f[n.args[size_t(i)]].shape; };
    const Vertex& vx = vertex(s, v);
    size_t numel = size_t(n.shape.numel());
    switch (n.op) {
      case Op::Gather: {
        const Tensor<T>& whole = scattered(s, vx.children[size_t(n.child_slot)]);
        if (n.start == 0 && whole.size() == numel) return whole;
        return Tensor<T>(whole.begin() + n.start, whole.begin() + n.start + int64_t(numel));
      }
      case Op::GatherSum:
      case Op::GatherAll: {
        Tensor<T> out(numel, T(0));
        size_t first = size_t(program_.signature(vx.type).fixed_arity);
        int64_t row_width = n.op == Op::GatherAll ? n.shape.dims[1] : 0;
        for (size_t k = first; k < vx.children.size(); ++k)
          add_into(out, int64_t(k - first) * row_width, scattered(s, vx.children[k]));
        return out;
      }
      case Op::Reshape: return arg(0);
      case Op::Pull: return Tensor<T>(vx.features.begin(), vx.features.end());
      case Op::PullEmbedding: {
        const std::vector<T>& table = params_[size_t(n.param)];
        auto row = table.begin() + int64_t(vx.token) * int64_t(numel);
        return Tensor<T>(row, row + int64_t(numel));
      }
      case Op::Param: return params_[size_t(n.param)];
      case Op::Constant: return Tensor<T>(numel, T(n.value));
      case Op::Fwd: return values_[size_t(s)][size_t(v)][size_t(n.forward_value)];
      case Op::ScatterGrad: {
        const Tensor<T>& g = scatter_grads_[size_t(s)][size_t(v)];
        return g.empty() ? Tensor<T>(numel, T(0)) : g;
      }
      case Op::Dropout: {
        Tensor<T> out = arg(0);
        if (!options_.training) return out;
        T keep_scale = T(1) / (T(1) - T(n.rate));
        for (size_t i = 0; i < numel; ++i)
          out[i] = dropout_keeps(options_.seed, batch_.first_sample + s, v, n.dropout_key, int64_t(i), n.rate)
                       ? out[i] * keep_scale
                       : T(0);
        return out;
      }
      case Op::Add:
      case Op::Sub:
      case Op::Mul:
      case Op::Div: {
        Tensor<T> out(numel);
        const Shape &sa = arg_shape(0), &sb = arg_shape(1);
        for (size_t i = 0; i < numel; ++i)
          out[i] = apply_binary(n.op, arg(0)[size_t(broadcast_index(sa, int64_t(i)))],
                                arg(1)[size_t(broadcast_index(sb, int64_t(i)))]);
        return out;
      }
      case Op::Concat: {
        Tensor<T> out;
        for (size_t i = 0; i < n.args.size(); ++i) out.insert(out.end(), arg(int(i)).begin(), arg(int(i)).end());
        return out;
      }
      case Op::Slice: return Tensor<T>(arg(0).begin() + n.start, arg(0).begin() + n.start + int64_t(numel));
      case Op::Pad: {
        Tensor<T> out(numel, T(0));
        std::copy(arg(0).begin(), arg(0).end(), out.begin() + n.start);
        return out;
      }
      case Op::Sum: {
        T total = T(0);
        for (T x : arg(0)) total += x;
        return Tensor<T>{total};
      }
      case Op::SumRows: {
        Tensor<T> out(numel, T(0));
        for (size_t i = 0; i < arg(0).size(); ++i) out[i % numel] += arg(0)[i];
        return out;
      }
      case Op::Broadcast: return Tensor<T>(numel, arg(0)[0]);
      case Op::BroadcastRows: {
        Tensor<T> out(numel);
        for (size_t i = 0; i < numel; ++i) out[i] = arg(0)[i % arg(0).size()];
        return out;
      }
      case Op::MatMul: return matmul(n, arg_shape(0), arg(0), arg_shape(1), arg(1));
      case Op::Outer: {
        Tensor<T> out(numel);
        size_t cols = arg(1).size();
        for (size_t i = 0; i < numel; ++i) out[i] = arg(0)[i / cols] * arg(1)[i % cols];
        return out;
      }
      case Op::SliceCols:
      case Op::PadCols: {
        const bool slicing = n.op == Op::SliceCols;
        const Shape& wide = slicing ? arg_shape(0) : n.shape;
        const int rows = wide.dims[0], cols = wide.dims[1];
        const int width = slicing ? n.shape.dims[1] : arg_shape(0).dims[1];
        Tensor<T> out(numel, T(0));
        for (int r = 0; r < rows; ++r)
          for (int j = 0; j < width; ++j) {
            size_t narrow = size_t(r) * size_t(width) + size_t(j);
            size_t at_wide = size_t(r) * size_t(cols) + size_t(n.start + j);
            if (slicing) out[narrow] = arg(0)[at_wide];
            else out[at_wide] = arg(0)[narrow];
          }
        return out;
      }
      case Op::Transpose: {
        const int rows = arg_shape(0).dims[0], cols = arg_shape(0).dims[1];
        Tensor<T> out(numel);
        for (int r = 0; r < rows; ++r)
          for (int j = 0; j < cols; ++j) out[size_t(j) * size_t(rows) + size_t(r)] = arg(0)[size_t(r) * size_t(cols) + size_t(j)];
        return out;
      }
      case Op::ChildCount: return Tensor<T>{T(variadic_children(vx))};
      case Op::MaxChildren:
      case Op::MaxChildrenGrad: {
        const Shape& block = arg_shape(0);
        const int rows = std::min(variadic_children(vx), block.dims[0]), cols = block.dims[1];
        Tensor<T> out(numel, T(0));
        for (int j = 0; j < cols; ++j) {
          int best = 0;  // the first row of the largest value
          for (int r = 1; r < rows; ++r)
            if (arg(0)[size_t(r) * size_t(cols) + size_t(j)] > arg(0)[size_t(best) * size_t(cols) + size_t(j)]) best = r;
          if (rows == 0) continue;
          if (n.op == Op::MaxChildren) out[size_t(j)] = arg(0)[size_t(best) * size_t(cols) + size_t(j)];
          else out[size_t(best) * size_t(cols) + size_t(j)] = arg(1)[size_t(j)];
        }
        return out;
      }
      case Op::SoftmaxCE: {
        if (vx.label < 0) return Tensor<T>{T(0)};
        const Tensor<T>& logits = arg(0);
        T max = *std::max_element(logits.begin(), logits.end());
        T total = T(0);
        for (T x : logits) total += std::exp(x - max);
        return Tensor<T>{std::log(total) + max - logits[size_t(vx.label)]};
      }
      case Op::SoftmaxCEGrad: {
        if (vx.label < 0) return Tensor<T>(numel, T(0));
        Tensor<T> p = softmax(arg(0));
        p[size_t(vx.label)] -= T(1);
        for (T& x : p) x *= arg(1)[0];
        return p;
      }
      default:
        if (const RowOp* row = row_op(n.op)) {
          RowValues<T> values;
          for (size_t k = 0; k < n.args.size(); ++k) values.in[k] = arg(int(k));
          Tensor<T> out(numel);
          values.out = out;
          row_reference(*row, values);
          return out;
        }
        if (op_kind(n.op) == OpKind::Unary) {
          Tensor<T> out(arg(0));
          const T c = T(unary_constant(n));
          for (T& x : out) x = apply_unary(n.op, x, c);
          return out;
        }
    }
    VJIT_INTERNAL_CHECK(false, "interpreter cannot evaluate " << to_string(f, id));
  }

  const Program& program_;
  const std::vector<std::vector<T>>& params_;
  const GraphBatch& batch_;
  const std::vector<std::vector<int>>& orders_;
  RunOptions options_;
  Evaluation<T> result_;
  std::vector<std::vector<std::vector<Tensor<T>>>> values_;  // [sample][vertex][forward value id]
  std::vector<std::vector<std::vector<Tensor<T>>>> pushes_;  // [sample][vertex][k]
  std::vector<std::vector<Tensor<T>>> scatter_grads_;         // [sample][vertex]
};

}  // namespace

template <typename T>
Evaluation<T> interpret(const Program& program, const std::vector<std::vector<T>>& params, const GraphBatch& batch,
                        const std::vector<std::vector<int>>& orders, const RunOptions& options) {
  return Interpreter<T>(program, params, batch, orders, options).run();
}

template Evaluation<float> interpret(const Program&, const std::vector<std::vector<float>>&, const GraphBatch&,
                                     const std::vector<std::vector<int>>&, const RunOptions&);
template Evaluation<double> interpret(const Program&, const std::vector<std::vector<double>>&, const GraphBatch&,
                                      const std::vector<std::vector<int>>&, const RunOptions&);

}  // namespace vjit::ir
