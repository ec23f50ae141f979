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
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "vjit/graph.h"
#include "vjit/ir.h"
#include "vjit/model.h"

namespace vjit {

/// A handle to a value of the vertex function being built.
struct Value {
  ir::ValueId id = -1;  ///< the node of the function that defines it
  Shape shape;  ///< its per-vertex shape
};

/// The vertex's label, for per-vertex losses (see Builder::label).
struct Label {
  int num_classes = 0;  ///< labels lie in [0, num_classes)
};

/// An operand: a per-vertex value or a parameter (broadcast over the batch).
struct Arg {
  Arg(Value v) : value(v) {}  ///< a per-vertex value
  Arg(Param p) : param(p), is_param(true) {}  ///< a parameter, read as the same tensor by every vertex
  Value value;  ///< when !is_param
  Param param;  ///< when is_param
  bool is_param = false;  ///< which of the two it holds
};

/// Writes the vertex function of one vertex type, op by op: each call checks its
/// operands' shapes (a UserError names the type and the op) and returns the
/// value it defines. Program::add_type passes one to the type's body.
class Builder {
 public:
  Builder(const Model& model, std::string type_name);  ///< reads `model`'s parameters; constant(shape, values) is refused
  /// A Builder that may add constant tensors to the model (Program::add_type's).
  Builder(Model& model, std::string type_name);

  // --- inputs ---
  Value gather(int slot, Shape expected);       ///< what child `slot` scattered
  /// gather_sum and gather_all read the variadic children: those after the
  /// gather(k) slots (all children when the function has no gather(k)).
  Value gather_sum(Shape expected);             ///< Σ over the variadic children (child-sum models)
  Value gather_all(int max_children, Shape expected);  ///< [max_children, n], zero rows past the last child
  Value pull(int width);                        ///< the vertex's feature row
  Value pull_embedding(Param table);            ///< row `token` of an embedding table [vocab, n]
  Label label(int num_classes);                 ///< the vertex's label in [0, num_classes)
  Value param(Param p);  ///< the parameter as a value, uniform across vertices
  Value constant(Shape shape, double value);  ///< every element `value`
  /// A constant tensor: `values` row-major, shape.numel() of them. Kept as a
  /// frozen parameter "<type>.constant<k>" of the model (so checkpoints save it
  /// and the reference interpreter reads it), and, like a parameter, uniform
  /// across vertices: combine it with per-vertex values (add, mul, matmul, ...).
  /// Pass a std::vector: a braced single value, constant(shape, {1.0f}), is the fill above.
  Value constant(Shape shape, std::vector<float> values);

  // --- ops ---
  Value matmul(Arg a, Arg b);  ///< [m,k]·[k,n], [m,k]·[k] (column), [k]·[k,n] (row)
  /// Elementwise a + b, a − b, a·b, a / b. The shapes are equal or one operand
  /// broadcasts: a scalar to any shape, a vector [n] to every row of a matrix
  /// [m, n]. At most one operand is a parameter.
  /// @{
  Value add(Arg a, Arg b);
  Value sub(Arg a, Arg b);
  Value mul(Arg a, Arg b);
  Value div(Arg a, Arg b);
  /// @}
  /// Elementwise −x, σ(x) = 1 / (1 + e^−x), tanh x, max(x, 0), e^x, ln x, √x of a
  /// per-vertex value.
  /// @{
  Value neg(Value x);
  Value sigmoid(Value x);
  Value tanh(Value x);
  Value relu(Value x);
  Value exp(Value x);
  Value log(Value x);
  Value sqrt(Value x);
  /// @}
  Value scale(Value x, double factor);  ///< factor·x
  Value add_scalar(Value x, double c);  ///< x + c
  Value dropout(Value x, double rate);  ///< active only in training runs
  /// Vectors (or scalars) end to end into one vector; matrices of equal columns
  /// stacked by rows.
  Value concat(const std::vector<Value>& parts);
  Value slice(Value x, int start, int length);  ///< elements [start, start + length) of a vector; rows of a matrix
  Value reshape(Value x, Shape shape);  ///< same number of elements
  std::vector<Value> split(Value x, int parts);  ///< equal parts
  Value sum(Value x);  ///< Σ of every element, a scalar
  Value sum_rows(Value x);  ///< [m, n] → [n]: the sum of the rows

  // --- matrices and the [K, d] children block of gather_all ---
  // Elementwise ops and matmul(block, W) apply to every row of the block; the
  // executor runs matmul(block, W) as batched GEMMs over all the task's rows.
  Value slice_cols(Value x, int start, int length);  ///< [m, n] → [m, length]: columns [start, start + length)
  Value transpose(Value x);                          ///< [m, n] → [n, m]
  /// The number of variadic children of the vertex, a scalar (no gradient).
  /// Needs gather_all or gather_sum first.
  Value child_count();
  /// Over the rows of the actual children of a [K, d] block (rows [0, count),
  /// never the zero padding rows after them); zeros when there are no children.
  Value mean_children(Value block);  ///< Σ_k rows / count
  Value max_children(Value block);   ///< column max; its gradient goes to the arg-max row (ties: the first)
  // --- outer products and bilinear forms ---
  Value outer(Value a, Value b);  ///< a [m], b [n] → [m, n] = a bᵀ (per-vertex vectors)
  /// y [k], y_i = xᵀ V_i x for x [n] and V = [V_0; V_1; ...; V_{k−1}] stored as a
  /// matrix [k·n, n] (slice V_i is rows [i·n, (i+1)·n)). Built from existing
  /// ops: t = V x, one GEMM over the task's vertices (X [N, n] · Vᵀ → [N, k·n]),
  /// then per vertex reshape(t, [k, n]) · x, a matrix-vector product per row.
  Value bilinear(Value x, Param V);
  /// x [n] → [n(n+1)/2]: the products x_a x_b for a ≤ b, row by row (the upper
  /// triangle of x xᵀ). xᵀ V x depends only on the symmetric part of V, so
  /// matmul(P, sym_outer(x)) with P [k, n(n+1)/2] is the bilinear form of
  /// bilinear(x, V) at half its multiply-adds: P_i(a,b) = V_i[a,b] + V_i[b,a]
  /// for a < b, V_i[a,a] on the diagonal (the RNTN model stores P).
  Value sym_outer(Value x);
  /// Layer normalisation of a vector x [n] → [n]: (x − mean(x)) / √(var(x) + 1e-5),
  /// with the biased variance over the n elements (PyTorch's default ε); a
  /// learned gain and bias are a mul and an add after it.
  Value layer_norm(Value x);

  // --- losses (each returns the per-vertex loss; add_loss puts it in the objective) ---
  /// −log softmax(logits)[label]: logits [num_classes] scored against the
  /// vertex's label.
  Value softmax_cross_entropy(Value logits, Label label);
  Value squared_error(Value prediction, Value target);  ///< Σ (prediction − target)²
  void add_loss(Value scalar_loss);  ///< adds a scalar to the objective (summed over the batch's vertices)

  // --- outputs ---
  void scatter(Value v);  ///< what the parents of the vertex gather from it (once per function)
  void push(Value v);  ///< a result of the vertex, returned by the run (Evaluation::pushes)

  const ir::Function& function() const { return function_; }  ///< the function written so far
  ir::Function take_function() { return std::move(function_); }  ///< moves the function out (the Builder is then spent)
  const TypeSignature& signature() const { return signature_; }  ///< what the type requires of the graph, as written so far
  const std::string& type_name() const { return type_name_; }  ///< the vertex type's name

 private:
  Value emit(ir::Node node);
  Value operand(const Arg& a);
  ir::Node unary_node(ir::Op op, Value x);  ///< checked, not yet emitted
  /// An op defined in its own unit (ir/row_op.h), its operands checked against
  /// the definition; `name` is the method's, for errors.
  Value row_op(ir::Op op, const char* name, std::initializer_list<Value> args);
  Value binary(ir::Op op, Arg a, Arg b);
  void check_value(const Value& v, const char* op) const;
  void declare_variadic(const Shape& expected, const char* op);
  [[noreturn]] void fail(const std::string& op, const std::string& what) const;

  const Model& model_;
  Model* mutable_model_ = nullptr;  ///< where constant tensors go; null for a Builder of a const Model
  int next_constant_ = 0;
  std::string type_name_;
  ir::Function function_;
  TypeSignature signature_;
  int next_dropout_key_ = 0;
};

/// The vertex types of a model: for each, its vertex function F, the
/// derivative ∂F vjit builds from it, and what it requires of the graph.
class Program {
 public:
  /// The program reads the model's parameters; an Engine training it updates them.
  explicit Program(Model& model);

  /// Builds, verifies and differentiates the vertex function of a new type.
  /// Returns the type index used in Vertex::type.
  int add_type(const std::string& name, const std::function<void(Builder&)>& body);

  int num_types() const { return int(types_.size()); }  ///< types are 0 to num_types() − 1, in the order added
  int type_index(const std::string& name) const;  ///< throws UserError listing the types when unknown
  /// A vertex type's name, F, ∂F and signature (std::out_of_range for an index
  /// outside [0, num_types())).
  /// @{
  const std::string& type_name(int type) const { return types_.at(size_t(type)).signature.name; }
  const ir::Function& forward(int type) const { return types_.at(size_t(type)).forward; }
  const ir::Function& backward(int type) const { return types_.at(size_t(type)).backward; }
  const TypeSignature& signature(int type) const { return types_.at(size_t(type)).signature; }
  /// @}
  std::vector<TypeSignature> signatures() const;  ///< every type's, in type order
  /// The vertex types with their arity and shapes, one line each: what a saved
  /// batching policy must match to be used with this program.
  std::string signature_string() const;
  Model& model() const { return *model_; }  ///< the Model whose parameters the types read

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
