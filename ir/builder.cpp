// The Builder writes one vertex function, checking every op's shapes as it is
// added so a mistake is reported at the line that made it, naming the vertex
// type, the op and the shapes.
#include <algorithm>
#include <utility>

#include "ir/autodiff.h"
#include "ir/model_layout.h"
#include "ir/ops.h"
#include "ir/passes.h"
#include "ir/row_op.h"
#include "vjit/error.h"
#include "vjit/program.h"

namespace vjit {

using ir::Node;
using ir::Op;

Builder::Builder(const Model& model, std::string type_name) : model_(model), type_name_(std::move(type_name)) {
  function_.name = type_name_;
  signature_.name = type_name_;
}

Builder::Builder(Model& model, std::string type_name) : Builder(std::as_const(model), std::move(type_name)) {
  mutable_model_ = &model;
}

void Builder::fail(const std::string& op, const std::string& what) const {
  throw UserError("vertex type '" + type_name_ + "', op " + op + ": " + what);
}

void Builder::check_value(const Value& v, const char* op) const {
  if (v.id < 0 || v.id >= function_.size())
    fail(op, "operand is not a value of this vertex function (was it made by another Builder?)");
}

Value Builder::emit(Node node) {
  Shape shape = node.shape;
  return Value{function_.add(std::move(node)), shape};
}

Value Builder::row_op(Op op, const char* name, std::initializer_list<Value> args) {
  std::vector<Shape> shapes;
  std::vector<ir::ValueId> ids;
  std::string got;
  for (const Value& v : args) {
    check_value(v, name);
    if (function_[v.id].uniform) fail(name, "operand is a parameter; vjit computes per-vertex values only");
    shapes.push_back(v.shape);
    ids.push_back(v.id);
    got += (got.empty() ? "" : " and ") + v.shape.str();
  }
  const ir::RowOp& def = *ir::row_op(op);
  if (!def.accepts(shapes)) fail(name, std::string("needs ") + def.expects + ", got " + got);
  return emit(Node::make(op, def.result_shape(shapes), std::move(ids)));
}

Value Builder::param(Param p) {
  if (p.id < 0 || p.id >= model_.size()) fail("param", "unknown parameter id " + std::to_string(p.id));
  Node n = Node::make(Op::Param, model_.param(p.id).shape);
  n.uniform = true;
  n.param = p.id;
  return emit(n);
}

Value Builder::operand(const Arg& a) {
  if (a.is_param) return param(a.param);
  check_value(a.value, "operand");
  return a.value;
}

// --- inputs ---

Value Builder::gather(int slot, Shape expected) {
  if (slot < 0) fail("gather", "slot must be >= 0, got " + std::to_string(slot));
  if (slot < int(signature_.slot_shapes.size()) && signature_.slot_shapes[size_t(slot)].numel() > 0 &&
      signature_.slot_shapes[size_t(slot)] != expected)
    fail("gather", "slot " + std::to_string(slot) + " gathered as " + expected.str() + " and as " +
                       signature_.slot_shapes[size_t(slot)].str());
  if (slot >= int(signature_.slot_shapes.size())) signature_.slot_shapes.resize(size_t(slot) + 1, Shape::vec(0));
  signature_.slot_shapes[size_t(slot)] = expected;
  signature_.fixed_arity = std::max(signature_.fixed_arity, slot + 1);
  Node n = Node::make(Op::Gather, expected);
  n.child_slot = slot;
  return emit(n);
}

void Builder::declare_variadic(const Shape& expected, const char* op) {
  if (signature_.variadic && signature_.variadic_shape != expected)
    fail(op, "children gathered as " + expected.str() + " and as " + signature_.variadic_shape.str());
  signature_.variadic = true;
  signature_.variadic_shape = expected;
}

Value Builder::gather_sum(Shape expected) {
  declare_variadic(expected, "gather_sum");
  return emit(Node::make(Op::GatherSum, expected));
}

Value Builder::gather_all(int max_children, Shape expected) {
  if (max_children < 1) fail("gather_all", "max_children must be >= 1");
  if (expected.rank != 1) fail("gather_all", "children must scatter vectors, got " + expected.str());
  declare_variadic(expected, "gather_all");
  if (signature_.max_children >= 0 && signature_.max_children != max_children)
    fail("gather_all", "called with two different max_children");
  signature_.max_children = max_children;
  Node n = Node::make(Op::GatherAll, Shape::mat(max_children, expected.dims[0]));
  n.max_children = max_children;
  return emit(n);
}

Value Builder::pull(int width) {
  if (width < 1) fail("pull", "width must be >= 1");
  if (signature_.feature_width >= 0 && signature_.feature_width != width)
    fail("pull", "feature rows pulled with widths " + std::to_string(signature_.feature_width) + " and " +
                     std::to_string(width));
  signature_.feature_width = width;
  return emit(Node::make(Op::Pull, Shape::vec(width)));
}

Value Builder::pull_embedding(Param table) {
  if (table.id < 0 || table.id >= model_.size()) fail("pull_embedding", "unknown parameter");
  const ParamData& data = model_.param(table.id);
  if (data.shape.rank != 2)
    fail("pull_embedding", "table '" + data.name + "' must be a matrix [vocab, width], got " + data.shape.str());
  int vocab = data.shape.dims[0];
  signature_.vocab_size = signature_.vocab_size < 0 ? vocab : std::min(signature_.vocab_size, vocab);
  Node n = Node::make(Op::PullEmbedding, Shape::vec(data.shape.dims[1]));
  n.param = table.id;
  return emit(n);
}

Label Builder::label(int num_classes) {
  if (num_classes < 1) fail("label", "num_classes must be >= 1");
  if (signature_.needs_label && signature_.num_classes != num_classes)
    fail("label", "labels read with " + std::to_string(signature_.num_classes) + " and " +
                      std::to_string(num_classes) + " classes");
  signature_.needs_label = true;
  signature_.num_classes = num_classes;
  return Label{num_classes};
}

Value Builder::constant(Shape shape, double value) {
  Node n = Node::make(Op::Constant, shape);
  n.value = value;
  return emit(n);
}

Value Builder::constant(Shape shape, std::vector<float> values) {
  if (shape.rank < 1 || int64_t(values.size()) != shape.numel())
    fail("constant", "shape " + shape.str() + " needs " + std::to_string(shape.numel()) + " values, got " +
                         std::to_string(values.size()));
  if (mutable_model_ == nullptr)
    fail("constant", "a constant tensor needs a Builder of a Program (it is kept in the model, which is const here)");
  std::string name = type_name_ + ".constant" + std::to_string(next_constant_++);
  return param(mutable_model_->add_frozen(name, shape, std::move(values)));
}

// --- ops ---

Value Builder::matmul(Arg a_arg, Arg b_arg) {
  Value a = operand(a_arg), b = operand(b_arg);
  const Node& na = function_[a.id];
  const Node& nb = function_[b.id];
  auto shapes = [&] { return a.shape.str() + " · " + b.shape.str(); };
  if (na.uniform && nb.uniform) fail("matmul", "both operands are parameters (" + shapes() + ")");
  if (a.shape.rank == 0 || b.shape.rank == 0) fail("matmul", "scalar operand (" + shapes() + "): use mul");
  if (a.shape.rank == 1 && b.shape.rank == 1) fail("matmul", "two vectors (" + shapes() + "): use mul and sum");
  int inner_a = a.shape.cols();
  int inner_b = b.shape.rank == 1 ? b.shape.dims[0] : b.shape.dims[0];
  if (inner_a != inner_b) fail("matmul", "inner dimensions differ: " + shapes());
  Shape result;
  if (a.shape.rank == 1) result = Shape::vec(b.shape.dims[1]);
  else if (b.shape.rank == 1) result = Shape::vec(a.shape.dims[0]);
  else result = Shape::mat(a.shape.dims[0], b.shape.dims[1]);
  Node n = Node::make(Op::MatMul, result);
  n.args = {a.id, b.id};
  return emit(n);
}

Value Builder::binary(Op op, Arg a_arg, Arg b_arg) {
  Value a = operand(a_arg), b = operand(b_arg);
  std::string name = ir::op_name(op);
  if (function_[a.id].uniform && function_[b.id].uniform)
    fail(name, "both operands are parameters (" + a.shape.str() + ", " + b.shape.str() + ")");
  auto broadcasts_to = [](const Shape& small, const Shape& big) {
    return small == big || small.rank == 0 || (big.rank == 2 && small.rank == 1 && small.dims[0] == big.dims[1]);
  };
  Shape result;
  if (broadcasts_to(b.shape, a.shape)) result = a.shape;
  else if (broadcasts_to(a.shape, b.shape)) result = b.shape;
  else fail(name, "shapes " + a.shape.str() + " and " + b.shape.str() + " do not broadcast");
  Node n = Node::make(op, result);
  n.args = {a.id, b.id};
  return emit(n);
}

Node Builder::unary_node(Op op, Value x) {
  check_value(x, ir::op_name(op));
  if (function_[x.id].uniform) fail(ir::op_name(op), "operand is a parameter; vjit computes per-vertex values only");
  return Node::make(op, x.shape, {x.id});
}

Value Builder::add(Arg a, Arg b) { return binary(Op::Add, a, b); }
Value Builder::sub(Arg a, Arg b) { return binary(Op::Sub, a, b); }
Value Builder::mul(Arg a, Arg b) { return binary(Op::Mul, a, b); }
Value Builder::div(Arg a, Arg b) { return binary(Op::Div, a, b); }
Value Builder::neg(Value x) { return emit(unary_node(Op::Neg, x)); }
Value Builder::sigmoid(Value x) { return emit(unary_node(Op::Sigmoid, x)); }
Value Builder::tanh(Value x) { return emit(unary_node(Op::Tanh, x)); }
Value Builder::relu(Value x) { return emit(unary_node(Op::Relu, x)); }
Value Builder::exp(Value x) { return emit(unary_node(Op::Exp, x)); }
Value Builder::log(Value x) { return emit(unary_node(Op::Log, x)); }
Value Builder::sqrt(Value x) { return emit(unary_node(Op::Sqrt, x)); }

Value Builder::scale(Value x, double factor) {
  Node n = unary_node(Op::Scale, x);
  n.factor = factor;
  return emit(n);
}

Value Builder::add_scalar(Value x, double c) {
  Node n = unary_node(Op::AddScalar, x);
  n.addend = c;
  return emit(n);
}

Value Builder::dropout(Value x, double rate) {
  if (!(rate >= 0.0 && rate < 1.0)) fail("dropout", "rate must be in [0, 1), got " + std::to_string(rate));
  Node n = unary_node(Op::Dropout, x);
  n.rate = rate;
  n.dropout_key = next_dropout_key_++;
  return emit(n);
}

Value Builder::concat(const std::vector<Value>& parts) {
  if (parts.empty()) fail("concat", "no operands");
  int rank = parts[0].shape.rank == 2 ? 2 : 1;
  int cols = parts[0].shape.cols();
  int64_t total = 0;
  for (const Value& p : parts) {
    check_value(p, "concat");
    if (function_[p.id].uniform) fail("concat", "operand is a parameter; vjit computes per-vertex values only");
    bool ok = rank == 2 ? (p.shape.rank == 2 && p.shape.cols() == cols) : p.shape.rank < 2;
    if (!ok) fail("concat", "cannot concatenate " + parts[0].shape.str() + " with " + p.shape.str());
    total += rank == 2 ? p.shape.rows() : p.shape.numel();
  }
  Node n = Node::make(Op::Concat, rank == 2 ? Shape::mat(int(total), cols) : Shape::vec(int(total)));
  for (const Value& p : parts) n.args.push_back(p.id);
  return emit(n);
}

Value Builder::slice(Value x, int start, int length) {
  check_value(x, "slice");
  if (x.shape.rank == 0) fail("slice", "cannot slice a scalar");
  if (function_[x.id].uniform) fail("slice", "operand is a parameter; vjit computes per-vertex values only");
  int extent = x.shape.rank == 2 ? x.shape.dims[0] : x.shape.dims[0];
  if (start < 0 || length < 1 || start + length > extent)
    fail("slice", "[" + std::to_string(start) + ", " + std::to_string(start + length) + ") is out of range for " +
                      x.shape.str());
  Shape result = x.shape.rank == 2 ? Shape::mat(length, x.shape.dims[1]) : Shape::vec(length);
  Node n = Node::make(Op::Slice, result);
  n.args = {x.id};
  n.start = x.shape.rank == 2 ? start * x.shape.dims[1] : start;
  return emit(n);
}

Value Builder::reshape(Value x, Shape shape) {
  check_value(x, "reshape");
  if (function_[x.id].uniform) fail("reshape", "operand is a parameter; vjit computes per-vertex values only");
  if (x.shape.numel() != shape.numel()) fail("reshape", "cannot reshape " + x.shape.str() + " to " + shape.str());
  Node n = Node::make(Op::Reshape, shape);
  n.args = {x.id};
  return emit(n);
}

std::vector<Value> Builder::split(Value x, int parts) {
  check_value(x, "split");
  int extent = x.shape.rank >= 1 ? x.shape.dims[0] : 0;
  if (parts < 1 || extent % parts != 0)
    fail("split", x.shape.str() + " does not split into " + std::to_string(parts) + " equal parts");
  std::vector<Value> out;
  for (int i = 0; i < parts; ++i) out.push_back(slice(x, i * (extent / parts), extent / parts));
  return out;
}

Value Builder::sum(Value x) {
  check_value(x, "sum");
  if (function_[x.id].uniform) fail("sum", "operand is a parameter; vjit computes per-vertex values only");
  Node n = Node::make(Op::Sum, Shape::scalar());
  n.args = {x.id};
  return emit(n);
}

Value Builder::sum_rows(Value x) {
  check_value(x, "sum_rows");
  if (x.shape.rank != 2) fail("sum_rows", "needs a matrix, got " + x.shape.str());
  if (function_[x.id].uniform) fail("sum_rows", "operand is a parameter; vjit computes per-vertex values only");
  Node n = Node::make(Op::SumRows, Shape::vec(x.shape.dims[1]));
  n.args = {x.id};
  return emit(n);
}

// --- matrices and the children block ---

Value Builder::slice_cols(Value x, int start, int length) {
  check_value(x, "slice_cols");
  if (x.shape.rank != 2) fail("slice_cols", "needs a matrix, got " + x.shape.str());
  if (function_[x.id].uniform) fail("slice_cols", "operand is a parameter; vjit computes per-vertex values only");
  if (start < 0 || length < 1 || start + length > x.shape.dims[1])
    fail("slice_cols", "columns [" + std::to_string(start) + ", " + std::to_string(start + length) +
                           ") are out of range for " + x.shape.str());
  Node n = Node::make(Op::SliceCols, Shape::mat(x.shape.dims[0], length), {x.id});
  n.start = start;
  return emit(n);
}

Value Builder::transpose(Value x) {
  check_value(x, "transpose");
  if (x.shape.rank != 2) fail("transpose", "needs a matrix, got " + x.shape.str());
  if (function_[x.id].uniform) fail("transpose", "operand is a parameter; vjit computes per-vertex values only");
  return emit(Node::make(Op::Transpose, Shape::mat(x.shape.dims[1], x.shape.dims[0]), {x.id}));
}

Value Builder::child_count() {
  if (!signature_.variadic) fail("child_count", "the vertex has no variadic children: call gather_all or gather_sum first");
  return emit(Node::make(Op::ChildCount, Shape::scalar()));
}

// Σ rows / max(count, 1): count − step(count) + 1 is the count, or 1 when there
// are no children (the sum is 0 then).
Value Builder::mean_children(Value block) {
  check_value(block, "mean_children");
  if (block.shape.rank != 2) fail("mean_children", "needs a [K, d] children block, got " + block.shape.str());
  if (!signature_.variadic) fail("mean_children", "the vertex has no variadic children: call gather_all first");
  Value count = child_count();
  Value divisor = add_scalar(sub(count, emit(unary_node(Op::Step, count))), 1.0);
  return div(sum_rows(block), divisor);
}

Value Builder::max_children(Value block) {
  check_value(block, "max_children");
  if (block.shape.rank != 2) fail("max_children", "needs a [K, d] children block, got " + block.shape.str());
  if (function_[block.id].uniform) fail("max_children", "operand is a parameter; vjit computes per-vertex values only");
  if (!signature_.variadic) fail("max_children", "the vertex has no variadic children: call gather_all first");
  return emit(Node::make(Op::MaxChildren, Shape::vec(block.shape.dims[1]), {block.id}));
}

// --- outer products and bilinear forms ---

Value Builder::outer(Value a, Value b) {
  check_value(a, "outer");
  check_value(b, "outer");
  if (function_[a.id].uniform || function_[b.id].uniform)
    fail("outer", "operand is a parameter; vjit computes per-vertex values only");
  if (a.shape.rank != 1 || b.shape.rank != 1)
    fail("outer", "needs two vectors, got " + a.shape.str() + " and " + b.shape.str());
  Node n = Node::make(Op::Outer, Shape::mat(a.shape.dims[0], b.shape.dims[0]));
  n.args = {a.id, b.id};
  return emit(n);
}

Value Builder::bilinear(Value x, Param V) {
  check_value(x, "bilinear");
  if (V.id < 0 || V.id >= model_.size()) fail("bilinear", "unknown parameter id " + std::to_string(V.id));
  if (x.shape.rank != 1) fail("bilinear", "x must be a vector, got " + x.shape.str());
  if (function_[x.id].uniform) fail("bilinear", "x is a parameter; vjit computes per-vertex values only");
  const ParamData& data = model_.param(V.id);
  const int n = x.shape.dims[0];
  if (data.shape.rank != 2 || data.shape.dims[1] != n || data.shape.dims[0] % n != 0)
    fail("bilinear", "parameter '" + data.name + "' must be [k·" + std::to_string(n) + ", " + std::to_string(n) +
                         "] for x " + x.shape.str() + ", got " + data.shape.str());
  const int k = data.shape.dims[0] / n;
  Value t = matmul(V, x);                         // [k·n]: row block i is V_i x
  return matmul(reshape(t, Shape::mat(k, n)), x);  // y_i = (V_i x) · x
}

// --- losses and outputs ---

Value Builder::softmax_cross_entropy(Value logits, Label label) {
  check_value(logits, "softmax_cross_entropy");
  if (logits.shape.rank != 1 || logits.shape.dims[0] != label.num_classes)
    fail("softmax_cross_entropy", "logits " + logits.shape.str() + " do not match " +
                                      std::to_string(label.num_classes) + " classes");
  if (function_[logits.id].uniform) fail("softmax_cross_entropy", "logits are a parameter");
  Node n = Node::make(Op::SoftmaxCE, Shape::scalar());
  n.args = {logits.id};
  return emit(n);
}

Value Builder::squared_error(Value prediction, Value target) {
  check_value(prediction, "squared_error");
  check_value(target, "squared_error");
  if (prediction.shape != target.shape)
    fail("squared_error", "prediction " + prediction.shape.str() + " and target " + target.shape.str() + " differ");
  Value d = sub(prediction, target);
  return sum(mul(d, d));
}

void Builder::add_loss(Value scalar_loss) {
  check_value(scalar_loss, "add_loss");
  if (scalar_loss.shape.rank != 0) fail("add_loss", "loss must be a scalar, got " + scalar_loss.shape.str());
  Node n = Node::make(Op::Loss, Shape::scalar());
  n.args = {scalar_loss.id};
  function_.add(n);
}

void Builder::scatter(Value v) {
  check_value(v, "scatter");
  if (signature_.scatters) fail("scatter", "a vertex function scatters once (concatenate the values)");
  if (function_[v.id].uniform) fail("scatter", "cannot scatter a parameter");
  signature_.scatters = true;
  signature_.scatter_shape = v.shape;
  Node n = Node::make(Op::Scatter, Shape::scalar());
  n.args = {v.id};
  function_.add(n);
}

void Builder::push(Value v) {
  check_value(v, "push");
  if (function_[v.id].uniform) fail("push", "cannot push a parameter");
  Node n = Node::make(Op::Push, Shape::scalar());
  n.args = {v.id};
  function_.add(n);
}

// --- Program ---

Program::Program(Model& model) : model_(&model) {}

namespace {

// ∂F less the gradient sinks of frozen parameters; simplify() then removes
// what only they read.
ir::Function without_frozen_gradients(const ir::Function& backward, const Model& model) {
  ir::Function out;
  out.name = backward.name;
  std::vector<ir::ValueId> renumbered(size_t(backward.size()), -1);
  for (int id = 0; id < backward.size(); ++id) {
    Node node = backward[id];
    if ((node.op == Op::ParamGrad || node.op == Op::EmbeddingGrad) && model.param(node.param).frozen) continue;
    for (ir::ValueId& arg : node.args) arg = renumbered[size_t(arg)];
    renumbered[size_t(id)] = out.add(std::move(node));
  }
  return out;
}

}  // namespace

Program::VertexType Program::build_type(const std::string& name, const std::function<void(Builder&)>& body) {
  Builder builder(*model_, name);
  body(builder);
  VertexType type;
  type.signature = builder.signature();
  type.forward = builder.take_function();
  bool has_sink = std::any_of(type.forward.nodes.begin(), type.forward.nodes.end(),
                              [](const Node& n) { return ir::is_sink(n.op); });
  VJIT_USER_CHECK(has_sink, "vertex type '" << name << "' has no scatter, push or loss: it computes nothing");
  for (size_t k = 0; k < type.signature.slot_shapes.size(); ++k)
    VJIT_USER_CHECK(type.signature.slot_shapes[k].numel() > 0,
                    "vertex type '" << name << "' gathers slot " << type.signature.fixed_arity - 1
                                    << " but never slot " << k);
  ir::verify(type.forward);
  type.forward = ir::simplify(type.forward);
  type.backward = ir::simplify(without_frozen_gradients(ir::differentiate(type.forward), *model_));
  ir::verify(type.backward);
  return type;
}

int Program::add_type(const std::string& name, const std::function<void(Builder&)>& body) {
  for (const VertexType& t : types_)
    VJIT_USER_CHECK(t.signature.name != name, "Program::add_type: vertex type '" << name << "' already exists");
  const int params_before = model_->size();
  try {
    types_.push_back(build_type(name, body));
  } catch (...) {
    ir::ModelLayout::truncate(*model_, params_before);  // the constant tensors of the failed type
    throw;
  }
  return int(types_.size()) - 1;
}

int Program::type_index(const std::string& name) const {
  for (size_t i = 0; i < types_.size(); ++i)
    if (types_[i].signature.name == name) return int(i);
  std::string valid;
  for (const VertexType& t : types_) valid += (valid.empty() ? "" : ", ") + t.signature.name;
  throw UserError("Program: no vertex type named '" + name + "' (valid: " + (valid.empty() ? "none" : valid) + ")");
}

std::string Program::signature_string() const {
  std::string out;
  for (const VertexType& t : types_) {
    const TypeSignature& s = t.signature;
    out += s.name + ": slots";
    for (const Shape& shape : s.slot_shapes) out += " " + shape.str();
    if (s.variadic) out += " variadic " + s.variadic_shape.str();
    out += " scatters " + (s.scatters ? s.scatter_shape.str() : std::string("nothing")) + "\n";
  }
  return out;
}

std::vector<TypeSignature> Program::signatures() const {
  std::vector<TypeSignature> out;
  for (const VertexType& t : types_) out.push_back(t.signature);
  return out;
}

}  // namespace vjit
