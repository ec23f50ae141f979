// Program and Builder: vertex types written as Python functions over the
// Builder's ops, traced once when the type is added.
#include <memory>

#include "bindings.h"

namespace vjit::python {

Builder& BuilderRef::get() const {
  VJIT_USER_CHECK(builder != nullptr, "the Builder of vertex type '" << type_name
                                          << "' is used after Program.add_type returned: a vertex function "
                                             "is traced once, while add_type runs its body");
  return *builder;
}

ScopedBuilder::ScopedBuilder(Builder& builder, std::string type_name)
    : ref_(std::make_shared<BuilderRef>(BuilderRef{&builder, std::move(type_name)})) {}

namespace {

using Ref = BuilderRef;
using ValueOp = Value (Builder::*)(Value);
using BinaryOp = Value (Builder::*)(Arg, Arg);

// Binds `name` as a method applying a Builder op of one per-vertex value.
void unary(py::class_<Ref, std::shared_ptr<Ref>>& c, const char* name, ValueOp op, const char* doc) {
  c.def(name, [op](const Ref& f, Value x) { return (f.get().*op)(x); }, py::arg("x"), doc);
}

void binary(py::class_<Ref, std::shared_ptr<Ref>>& c, const char* name, BinaryOp op, const char* doc) {
  c.def(name, [op](const Ref& f, Arg a, Arg b) { return (f.get().*op)(a, b); }, py::arg("a"), py::arg("b"), doc);
}

void bind_values(py::module_& m) {
  py::class_<Value>(m, "Value", "A value of the vertex function being built (per vertex).")
      .def_readonly("id", &Value::id, "the node of the function that defines it")
      .def_readonly("shape", &Value::shape, "its per-vertex shape")
      .def("__repr__", [](const Value& v) { return "vjit.Value(id=" + std::to_string(v.id) + ", shape=" + v.shape.str() + ")"; });
  py::class_<Label>(m, "Label", "The vertex's label, for per-vertex losses (Builder.label).")
      .def_readonly("num_classes", &Label::num_classes);
  py::class_<Arg>(m, "Arg", "An operand: a Value or a Param (broadcast over the batch).")
      .def(py::init<Value>())
      .def(py::init<Param>());
  py::implicitly_convertible<Value, Arg>();
  py::implicitly_convertible<Param, Arg>();
}

void bind_inputs(py::class_<Ref, std::shared_ptr<Ref>>& c) {
  c.def("gather", [](const Ref& f, int slot, Shape expected) { return f.get().gather(slot, expected); },
        py::arg("slot"), py::arg("expected"), "What child `slot` scattered.")
      .def("gather_sum", [](const Ref& f, Shape expected) { return f.get().gather_sum(expected); },
           py::arg("expected"), "Σ over the variadic children (those after the gather(k) slots).")
      .def("gather_all", [](const Ref& f, int max_children, Shape expected) { return f.get().gather_all(max_children, expected); },
           py::arg("max_children"), py::arg("expected"), "[max_children, n]: the variadic children's values, zero rows past the last.")
      .def("pull", [](const Ref& f, int width) { return f.get().pull(width); }, py::arg("width"), "The vertex's feature row.")
      .def("pull_embedding", [](const Ref& f, Param table) { return f.get().pull_embedding(table); }, py::arg("table"),
           "Row `token` of an embedding table [vocab, n].")
      .def("label", [](const Ref& f, int num_classes) { return f.get().label(num_classes); }, py::arg("num_classes"),
           "The vertex's label in [0, num_classes).")
      .def("param", [](const Ref& f, Param p) { return f.get().param(p); }, py::arg("param"),
           "The parameter as a value, uniform across vertices.")
      .def(
          "constant",
          [](const Ref& f, Shape shape, py::object value) {
            if (py::isinstance<py::float_>(value) || py::isinstance<py::int_>(value))
              return f.get().constant(shape, value.cast<double>());
            auto values = value.cast<py::array_t<float, py::array::c_style | py::array::forcecast>>();
            return f.get().constant(shape, std::vector<float>(values.data(), values.data() + values.size()));
          },
          py::arg("shape"), py::arg("value"),
          "A number: every element `value`. An array: a constant tensor (row-major), kept as a frozen\n"
          "parameter \"<type>.constant<k>\" of the model.");
}

void bind_ops(py::class_<Ref, std::shared_ptr<Ref>>& c) {
  c.def("matmul", [](const Ref& f, Arg a, Arg b) { return f.get().matmul(a, b); }, py::arg("a"), py::arg("b"),
        "[m,k]·[k,n], [m,k]·[k] (column), [k]·[k,n] (row).");
  binary(c, "add", &Builder::add, "Elementwise a + b (a scalar or a row vector broadcasts; at most one Param).");
  binary(c, "sub", &Builder::sub, "Elementwise a − b.");
  binary(c, "mul", &Builder::mul, "Elementwise a · b.");
  binary(c, "div", &Builder::div, "Elementwise a / b.");
  unary(c, "neg", &Builder::neg, "−x");
  unary(c, "sigmoid", &Builder::sigmoid, "σ(x) = 1 / (1 + e^−x)");
  unary(c, "tanh", &Builder::tanh, "tanh x");
  unary(c, "relu", &Builder::relu, "max(x, 0)");
  unary(c, "exp", &Builder::exp, "e^x");
  unary(c, "log", &Builder::log, "ln x");
  unary(c, "sqrt", &Builder::sqrt, "√x");
  unary(c, "sum", &Builder::sum, "Σ of every element, a scalar.");
  unary(c, "sum_rows", &Builder::sum_rows, "[m, n] → [n]: the sum of the rows.");
  unary(c, "transpose", &Builder::transpose, "[m, n] → [n, m].");
  unary(c, "mean_children", &Builder::mean_children, "Σ_k rows / count over the actual children of a [K, d] block.");
  unary(c, "max_children", &Builder::max_children, "Column max over the actual children of a [K, d] block.");
  unary(c, "layer_norm", &Builder::layer_norm,
        "Layer normalisation of a vector: (x − mean(x)) / √(var(x) + 1e-5), no gain or bias.");
  unary(c, "sym_outer", &Builder::sym_outer, "x [n] → [n(n+1)/2]: x_a x_b for a ≤ b, row by row.");
  c.def("scale", [](const Ref& f, Value x, double factor) { return f.get().scale(x, factor); }, py::arg("x"), py::arg("factor"), "factor·x")
      .def("add_scalar", [](const Ref& f, Value x, double c) { return f.get().add_scalar(x, c); }, py::arg("x"), py::arg("c"), "x + c")
      .def("dropout", [](const Ref& f, Value x, double rate) { return f.get().dropout(x, rate); }, py::arg("x"), py::arg("rate"),
           "Dropout, active only in training runs.")
      .def("concat", [](const Ref& f, const std::vector<Value>& parts) { return f.get().concat(parts); }, py::arg("parts"),
           "Vectors end to end into one vector; matrices of equal columns stacked by rows.")
      .def("slice", [](const Ref& f, Value x, int start, int length) { return f.get().slice(x, start, length); },
           py::arg("x"), py::arg("start"), py::arg("length"), "Elements [start, start + length) of a vector; rows of a matrix.")
      .def("reshape", [](const Ref& f, Value x, Shape shape) { return f.get().reshape(x, shape); }, py::arg("x"), py::arg("shape"),
           "The same elements under another shape.")
      .def("split", [](const Ref& f, Value x, int parts) { return f.get().split(x, parts); }, py::arg("x"), py::arg("parts"),
           "Equal parts.")
      .def("slice_cols", [](const Ref& f, Value x, int start, int length) { return f.get().slice_cols(x, start, length); },
           py::arg("x"), py::arg("start"), py::arg("length"), "[m, n] → [m, length]: columns [start, start + length).")
      .def("child_count", [](const Ref& f) { return f.get().child_count(); },
           "The number of variadic children, a scalar (no gradient); needs gather_all or gather_sum first.")
      .def("outer", [](const Ref& f, Value a, Value b) { return f.get().outer(a, b); }, py::arg("a"), py::arg("b"),
           "a [m], b [n] → [m, n] = a bᵀ.")
      .def("bilinear", [](const Ref& f, Value x, Param v) { return f.get().bilinear(x, v); }, py::arg("x"), py::arg("V"),
           "y [k], y_i = xᵀ V_i x for V = [V_0; ...; V_{k−1}] stored as [k·n, n].")
      .def("softmax_cross_entropy", [](const Ref& f, Value logits, Label label) { return f.get().softmax_cross_entropy(logits, label); },
           py::arg("logits"), py::arg("label"), "−log softmax(logits)[label], the per-vertex loss.")
      .def("squared_error", [](const Ref& f, Value prediction, Value target) { return f.get().squared_error(prediction, target); },
           py::arg("prediction"), py::arg("target"), "Σ (prediction − target)².")
      .def("add_loss", [](const Ref& f, Value loss) { f.get().add_loss(loss); }, py::arg("loss"),
           "Adds a scalar to the objective (summed over the batch's vertices).")
      .def("scatter", [](const Ref& f, Value v) { f.get().scatter(v); }, py::arg("value"),
           "What the parents of the vertex gather from it (once per function).")
      .def("push", [](const Ref& f, Value v) { f.get().push(v); }, py::arg("value"),
           "A result of the vertex, returned by the run (Evaluation.push).")
      .def_property_readonly("type_name", [](const Ref& f) { return f.type_name; }, "the vertex type's name");
}

}  // namespace

void bind_program(py::module_& m) {
  bind_values(m);
  py::class_<Ref, std::shared_ptr<Ref>> builder(
      m, "Builder",
      "Writes the vertex function of one vertex type, op by op: each call checks its operands'\n"
      "shapes (a UserError names the type and the op) and returns the Value it defines.\n"
      "Program.add_type passes one to the type's body, valid while the body runs.");
  bind_inputs(builder);
  bind_ops(builder);

  py::class_<Program>(m, "Program", "The vertex types of a model: one vertex function each, with its derivative.")
      .def(py::init<Model&>(), py::arg("model"), py::keep_alive<1, 2>(),
           "The program reads the model's parameters; an Engine training it updates them.")
      .def(
          "add_type",
          [](Program& program, const std::string& name, const py::function& body) {
            // A constant tensor of the body adds a parameter, which may move the block.
            check_no_live_views(program.model(), "Program.add_type");
            return program.add_type(name, [&](Builder& b) {
              ScopedBuilder builder(b, name);
              body(builder.ref());
            });
          },
          py::arg("name"), py::arg("body"),
          "Traces body(builder) once into the vertex function of a new type, verifies and\n"
          "differentiates it; returns the type index used in the graphs.")
      .def_property_readonly("num_types", &Program::num_types)
      .def("type_index", &Program::type_index, py::arg("name"), cpp_doc("vjit::Program::type_index"))
      .def("type_name", &Program::type_name, py::arg("type"), cpp_doc("vjit::Program::type_name"))
      .def_property_readonly(
          "type_names",
          [](const Program& program) {
            std::vector<std::string> names;
            for (int t = 0; t < program.num_types(); ++t) names.push_back(program.type_name(t));
            return names;
          },
          "the types' names, in type order")
      .def("forward_ir", [](const Program& program, int type) { return ir::to_string(program.forward(type)); },
           py::arg("type"), "The text form of the type's vertex function F.")
      .def("backward_ir", [](const Program& program, int type) { return ir::to_string(program.backward(type)); },
           py::arg("type"), "The text form of the derivative ∂F vjit built.")
      .def("signature_string", &Program::signature_string,
           "The vertex types with their arity and shapes, one line each.")
      .def_property_readonly("model", &Program::model, py::return_value_policy::reference_internal);
}

}  // namespace vjit::python
