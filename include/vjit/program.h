#pragma once
// The C++ API for writing vertex functions. A Program holds one vertex function
// per vertex type; a Builder writes one, op by op, checking shapes as it goes.
//
//   vjit::Model model(seed);
//   auto W = model.add("W", vjit::Shape::mat(H, 2 * H));
//   vjit::Program program(model);
//   program.add_type("cell", [&](vjit::Builder& b) {
//     auto h = b.tanh(b.matmul(W, b.concat({b.gather(0, vec(H)), b.gather(1, vec(H))})));
//     b.scatter(h);
//   });
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "vjit/graph.h"
#include "vjit/ir.h"
#include "vjit/model.h"

namespace vjit {

// A handle to a value of the vertex function being built.
struct Value {
  ir::ValueId id = -1;
  Shape shape;
};

// The vertex's label, for per-vertex losses (see Builder::label).
struct Label {
  int num_classes = 0;
};

// An operand: a per-vertex value or a parameter (broadcast over the batch).
struct Arg {
  Arg(Value v) : value(v) {}
  Arg(Param p) : param(p), is_param(true) {}
  Value value;
  Param param;
  bool is_param = false;
};

class Builder {
 public:
  Builder(const Model& model, std::string type_name);
  // A Builder that may add constant tensors to the model (Program::add_type's).
  Builder(Model& model, std::string type_name);

  // --- inputs ---
  Value gather(int slot, Shape expected);       // what child `slot` scattered
  // gather_sum and gather_all read the variadic children: those after the
  // gather(k) slots (all children when the function has no gather(k)).
  Value gather_sum(Shape expected);             // Σ over the variadic children (child-sum models)
  Value gather_all(int max_children, Shape expected);  // [max_children, n], zero rows past the last child
  Value pull(int width);                        // the vertex's feature row
  Value pull_embedding(Param table);            // row `token` of an embedding table [vocab, n]
  Label label(int num_classes);                 // the vertex's label in [0, num_classes)
  Value param(Param p);
  Value constant(Shape shape, double value);
  // A constant tensor: `values` row-major, shape.numel() of them. Kept as a
  // frozen parameter "<type>.constant<k>" of the model (so checkpoints save it
  // and the reference interpreter reads it), and, like a parameter, uniform
  // across vertices: combine it with per-vertex values (add, mul, matmul, ...).
  // Pass a std::vector: a braced single value, constant(shape, {1.0f}), is the fill above.
  Value constant(Shape shape, std::vector<float> values);

  // --- ops ---
  Value matmul(Arg a, Arg b);  // [m,k]·[k,n], [m,k]·[k] (column), [k]·[k,n] (row)
  Value add(Arg a, Arg b);
  Value sub(Arg a, Arg b);
  Value mul(Arg a, Arg b);
  Value div(Arg a, Arg b);
  Value neg(Value x);
  Value sigmoid(Value x);
  Value tanh(Value x);
  Value relu(Value x);
  Value exp(Value x);
  Value log(Value x);
  Value sqrt(Value x);
  Value scale(Value x, double factor);
  Value add_scalar(Value x, double c);
  Value dropout(Value x, double rate);  // active only in training runs
  Value concat(const std::vector<Value>& parts);
  Value slice(Value x, int start, int length);
  Value reshape(Value x, Shape shape);  // same number of elements
  std::vector<Value> split(Value x, int parts);  // equal parts
  Value sum(Value x);
  Value sum_rows(Value x);

  // --- matrices and the [K, d] children block of gather_all ---
  // Elementwise ops and matmul(block, W) apply to every row of the block; the
  // executor runs matmul(block, W) as batched GEMMs over all the task's rows.
  Value slice_cols(Value x, int start, int length);  // [m, n] → [m, length]: columns [start, start + length)
  Value transpose(Value x);                          // [m, n] → [n, m]
  // The number of variadic children of the vertex, a scalar (no gradient).
  // Needs gather_all or gather_sum first.
  Value child_count();
  // Over the rows of the actual children of a [K, d] block (rows [0, count),
  // never the zero padding rows after them); zeros when there are no children.
  Value mean_children(Value block);  // Σ_k rows / count
  Value max_children(Value block);   // column max; its gradient goes to the arg-max row (ties: the first)
  // --- outer products and bilinear forms ---
  Value outer(Value a, Value b);  // a [m], b [n] → [m, n] = a bᵀ (per-vertex vectors)
  // y [k], y_i = xᵀ V_i x for x [n] and V = [V_0; V_1; ...; V_{k−1}] stored as a
  // matrix [k·n, n] (slice V_i is rows [i·n, (i+1)·n)). Built from existing
  // ops: t = V x, one GEMM over the task's vertices (X [N, n] · Vᵀ → [N, k·n]),
  // then per vertex reshape(t, [k, n]) · x, a matrix-vector product per row.
  Value bilinear(Value x, Param V);
  // x [n] → [n(n+1)/2]: the products x_a x_b for a ≤ b, row by row (the upper
  // triangle of x xᵀ). xᵀ V x depends only on the symmetric part of V, so
  // matmul(P, sym_outer(x)) with P [k, n(n+1)/2] is the bilinear form of
  // bilinear(x, V) at half its multiply-adds: P_i(a,b) = V_i[a,b] + V_i[b,a]
  // for a < b, V_i[a,a] on the diagonal (the RNTN model stores P).
  Value sym_outer(Value x);

  // --- losses (each returns the per-vertex loss; add_loss puts it in the objective) ---
  Value softmax_cross_entropy(Value logits, Label label);
  Value squared_error(Value prediction, Value target);  // Σ (prediction − target)²
  void add_loss(Value scalar_loss);

  // --- outputs ---
  void scatter(Value v);
  void push(Value v);

  const ir::Function& function() const { return function_; }
  ir::Function take_function() { return std::move(function_); }
  const TypeSignature& signature() const { return signature_; }
  const std::string& type_name() const { return type_name_; }

 private:
  Value emit(ir::Node node);
  Value operand(const Arg& a);
  ir::Node unary_node(ir::Op op, Value x);  // checked, not yet emitted
  Value binary(ir::Op op, Arg a, Arg b);
  void check_value(const Value& v, const char* op) const;
  void declare_variadic(const Shape& expected, const char* op);
  [[noreturn]] void fail(const std::string& op, const std::string& what) const;

  const Model& model_;
  Model* mutable_model_ = nullptr;  // where constant tensors go; null for a Builder of a const Model
  int next_constant_ = 0;
  std::string type_name_;
  ir::Function function_;
  TypeSignature signature_;
  int next_dropout_key_ = 0;
};

class Program {
 public:
  // The program reads the model's parameters; an Engine training it updates them.
  explicit Program(Model& model);

  // Builds, verifies and differentiates the vertex function of a new type.
  // Returns the type index used in Vertex::type.
  int add_type(const std::string& name, const std::function<void(Builder&)>& body);

  int num_types() const { return int(types_.size()); }
  int type_index(const std::string& name) const;  // throws UserError when unknown
  const std::string& type_name(int type) const { return types_.at(size_t(type)).signature.name; }
  const ir::Function& forward(int type) const { return types_.at(size_t(type)).forward; }
  const ir::Function& backward(int type) const { return types_.at(size_t(type)).backward; }
  const TypeSignature& signature(int type) const { return types_.at(size_t(type)).signature; }
  std::vector<TypeSignature> signatures() const;
  // The vertex types with their arity and shapes, one line each: what a saved
  // batching policy must match to be used with this program.
  std::string signature_string() const;
  Model& model() const { return *model_; }

 private:
  struct VertexType {
    TypeSignature signature;
    ir::Function forward;
    ir::Function backward;
  };
  VertexType build_type(const std::string& name, const std::function<void(Builder&)>& body);

  Model* model_;
  std::vector<VertexType> types_;
};

}  // namespace vjit
