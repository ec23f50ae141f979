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

// The docstring of Builder op `name`: its comment in vjit/program.h.
const char* op_doc(const std::string& name) { return cpp_doc("vjit::Builder::" + name); }

// Binds `name` as a method applying a Builder op of one per-vertex value.
void unary(py::class_<Ref, std::shared_ptr<Ref>>& c, const char* name, ValueOp op) {
  c.def(name, [op](const Ref& f, Value x) { return (f.get().*op)(x); }, py::arg("x"), op_doc(name));
}

void binary(py::class_<Ref, std::shared_ptr<Ref>>& c, const char* name, BinaryOp op) {
  c.def(name, [op](const Ref& f, Arg a, Arg b) { return (f.get().*op)(a, b); }, py::arg("a"), py::arg("b"), op_doc(name));
}

void bind_values(py::module_& m) {
  py::class_<Value>(m, "Value", cpp_doc("vjit::Value"))
      .def_readonly("id", &Value::id, cpp_doc("vjit::Value::id"))
      .def_readonly("shape", &Value::shape, cpp_doc("vjit::Value::shape"))
      .def("__repr__", [](const Value& v) { return "vjit.Value(id=" + std::to_string(v.id) + ", shape=" + v.shape.str() + ")"; });
  py::class_<Label>(m, "Label", cpp_doc("vjit::Label"))
      .def_readonly("num_classes", &Label::num_classes, cpp_doc("vjit::Label::num_classes"));
  py::class_<Arg>(m, "Arg", cpp_doc("vjit::Arg"))
      .def(py::init<Value>())
      .def(py::init<Param>());
  py::implicitly_convertible<Value, Arg>();
  py::implicitly_convertible<Param, Arg>();
}

void bind_inputs(py::class_<Ref, std::shared_ptr<Ref>>& c) {
  c.def("gather", [](const Ref& f, int slot, Shape expected) { return f.get().gather(slot, expected); },
        py::arg("slot"), py::arg("expected"), op_doc("gather"))
      .def("gather_sum", [](const Ref& f, Shape expected) { return f.get().gather_sum(expected); },
           py::arg("expected"), op_doc("gather_sum"))
      .def("gather_all", [](const Ref& f, int max_children, Shape expected) { return f.get().gather_all(max_children, expected); },
           py::arg("max_children"), py::arg("expected"), op_doc("gather_all"))
      .def("pull", [](const Ref& f, int width) { return f.get().pull(width); }, py::arg("width"), op_doc("pull"))
      .def("pull_embedding", [](const Ref& f, Param table) { return f.get().pull_embedding(table); }, py::arg("table"), op_doc("pull_embedding"))
      .def("label", [](const Ref& f, int num_classes) { return f.get().label(num_classes); }, py::arg("num_classes"), op_doc("label"))
      .def("param", [](const Ref& f, Param p) { return f.get().param(p); }, py::arg("param"), op_doc("param"))
      .def(
          "constant",
          [](const Ref& f, Shape shape, py::object value) {
            if (py::isinstance<py::float_>(value) || py::isinstance<py::int_>(value))
              return f.get().constant(shape, value.cast<double>());
            auto values = value.cast<py::array_t<float, py::array::c_style | py::array::forcecast>>();
            return f.get().constant(shape, std::vector<float>(values.data(), values.data() + values.size()));
          },
          py::arg("shape"), py::arg("value"),
          (std::string("A number: ") + op_doc("constant") + ". An array: " + cpp_doc("vjit::Builder::constant", 1))
              .c_str());
}

void bind_ops(py::class_<Ref, std::shared_ptr<Ref>>& c) {
  c.def("matmul", [](const Ref& f, Arg a, Arg b) { return f.get().matmul(a, b); }, py::arg("a"), py::arg("b"),
        op_doc("matmul"));
  binary(c, "add", &Builder::add);
  binary(c, "sub", &Builder::sub);
  binary(c, "mul", &Builder::mul);
  binary(c, "div", &Builder::div);
  unary(c, "neg", &Builder::neg);
  unary(c, "sigmoid", &Builder::sigmoid);
  unary(c, "tanh", &Builder::tanh);
  unary(c, "relu", &Builder::relu);
  unary(c, "exp", &Builder::exp);
  unary(c, "log", &Builder::log);
  unary(c, "sqrt", &Builder::sqrt);
  unary(c, "sum", &Builder::sum);
  unary(c, "sum_rows", &Builder::sum_rows);
  unary(c, "transpose", &Builder::transpose);
  unary(c, "mean_children", &Builder::mean_children);
  unary(c, "max_children", &Builder::max_children);
  unary(c, "layer_norm", &Builder::layer_norm);
  unary(c, "sym_outer", &Builder::sym_outer);
  c.def("scale", [](const Ref& f, Value x, double factor) { return f.get().scale(x, factor); }, py::arg("x"), py::arg("factor"), op_doc("scale"))
      .def("add_scalar", [](const Ref& f, Value x, double c) { return f.get().add_scalar(x, c); }, py::arg("x"), py::arg("c"), op_doc("add_scalar"))
      .def("dropout", [](const Ref& f, Value x, double rate) { return f.get().dropout(x, rate); }, py::arg("x"), py::arg("rate"), op_doc("dropout"))
      .def("concat", [](const Ref& f, const std::vector<Value>& parts) { return f.get().concat(parts); }, py::arg("parts"), op_doc("concat"))
      .def("slice", [](const Ref& f, Value x, int start, int length) { return f.get().slice(x, start, length); },
           py::arg("x"), py::arg("start"), py::arg("length"), op_doc("slice"))
      .def("reshape", [](const Ref& f, Value x, Shape shape) { return f.get().reshape(x, shape); }, py::arg("x"), py::arg("shape"), op_doc("reshape"))
      .def("split", [](const Ref& f, Value x, int parts) { return f.get().split(x, parts); }, py::arg("x"), py::arg("parts"), op_doc("split"))
      .def("slice_cols", [](const Ref& f, Value x, int start, int length) { return f.get().slice_cols(x, start, length); },
           py::arg("x"), py::arg("start"), py::arg("length"), op_doc("slice_cols"))
      .def("child_count", [](const Ref& f) { return f.get().child_count(); }, op_doc("child_count"))
      .def("outer", [](const Ref& f, Value a, Value b) { return f.get().outer(a, b); }, py::arg("a"), py::arg("b"), op_doc("outer"))
      .def("bilinear", [](const Ref& f, Value x, Param v) { return f.get().bilinear(x, v); }, py::arg("x"), py::arg("V"), op_doc("bilinear"))
      .def("softmax_cross_entropy", [](const Ref& f, Value logits, Label label) { return f.get().softmax_cross_entropy(logits, label); },
           py::arg("logits"), py::arg("label"), op_doc("softmax_cross_entropy"))
      .def("squared_error", [](const Ref& f, Value prediction, Value target) { return f.get().squared_error(prediction, target); },
           py::arg("prediction"), py::arg("target"), op_doc("squared_error"))
      .def("add_loss", [](const Ref& f, Value loss) { f.get().add_loss(loss); }, py::arg("loss"), op_doc("add_loss"))
      .def("scatter", [](const Ref& f, Value v) { f.get().scatter(v); }, py::arg("value"), op_doc("scatter"))
      .def("push", [](const Ref& f, Value v) { f.get().push(v); }, py::arg("value"), op_doc("push"))
      .def_property_readonly("type_name", [](const Ref& f) { return f.type_name; }, op_doc("type_name"));
}

}  // namespace

void bind_program(py::module_& m) {
  bind_values(m);
  py::class_<Ref, std::shared_ptr<Ref>> builder(
      m, "Builder",
      (std::string(cpp_doc("vjit::Builder")) + " It is valid while the body runs.").c_str());
  bind_inputs(builder);
  bind_ops(builder);

  py::class_<Program>(m, "Program", cpp_doc("vjit::Program"))
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
          (std::string(cpp_doc("vjit::Program::add_type")) +
           "\n\n`body(builder)` is called once, with a vjit.Builder valid while it runs.")
              .c_str())
      .def_property_readonly("num_types", &Program::num_types, cpp_doc("vjit::Program::num_types"))
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
      .def("signature_string", &Program::signature_string, cpp_doc("vjit::Program::signature_string"))
      .def_property_readonly("model", &Program::model, py::return_value_policy::reference_internal,
                             cpp_doc("vjit::Program::model"));
}

}  // namespace vjit::python
