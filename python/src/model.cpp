// Model, Param and Init: parameters whose values are NumPy arrays sharing the
// Model's memory.
#include <unordered_map>

#include "bindings.h"

namespace vjit::python {

namespace {

// Live views per Model, changed only with the GIL held (array creation and
// deallocation).
std::unordered_map<const Model*, int>& view_counts() {
  static std::unordered_map<const Model*, int> counts;
  return counts;
}

// What keeps a parameter view's Model alive: the Python object holding it.
struct ViewOwner {
  py::object model_object;
  const Model* model;
};

// A view of parameter `id`'s values (its shape), counted until it and every
// array made from it are gone.
py::array_t<float> param_view(py::object model_object, int id) {
  Model& model = model_object.cast<Model&>();
  ParamData& param = model.param(id);
  auto* owner = new ViewOwner{model_object, &model};
  ++view_counts()[&model];
  py::capsule base(owner, [](void* pointer) {
    auto* done = static_cast<ViewOwner*>(pointer);
    auto count = view_counts().find(done->model);
    if (count != view_counts().end() && --count->second == 0) view_counts().erase(count);
    delete done;
  });
  return view(param.value.data(), numpy_shape(param.shape), base);
}

int param_id(const Model& model, const py::handle& key) {
  if (py::isinstance<py::str>(key)) return model.find(key.cast<std::string>()).id;
  if (py::isinstance<Param>(key)) return key.cast<Param>().id;
  const int id = key.cast<int>();
  VJIT_USER_CHECK(id >= 0 && id < model.size(),
                  "Model: parameter index " << id << " is outside the model's " << model.size() << " parameters");
  return id;
}

}  // namespace

int live_views(const Model& model) {
  auto count = view_counts().find(&model);
  return count == view_counts().end() ? 0 : count->second;
}

void check_no_live_views(const Model& model, const std::string& what) {
  const int views = live_views(model);
  VJIT_USER_CHECK(views == 0, what << " may move the model's parameter memory, but " << views
                                   << " NumPy view(s) of its parameters are alive and would be left dangling: "
                                      "delete them first (del), or take them after");
}

void bind_model(py::module_& m) {
  py::enum_<Init>(m, "Init", cpp_doc("vjit::Init"))
      .value("Xavier", Init::Xavier, cpp_doc("vjit::Init::Xavier"))
      .value("Uniform", Init::Uniform, cpp_doc("vjit::Init::Uniform"))
      .value("Zeros", Init::Zeros, cpp_doc("vjit::Init::Zeros"))
      .value("Ones", Init::Ones, cpp_doc("vjit::Init::Ones"));

  py::class_<Param>(m, "Param", cpp_doc("vjit::Param"))
      .def_readonly("id", &Param::id, cpp_doc("vjit::Param::id"))
      .def_readonly("shape", &Param::shape, cpp_doc("vjit::Param::shape"))
      .def("__repr__", [](const Param& p) { return "vjit.Param(id=" + std::to_string(p.id) + ", shape=" + p.shape.str() + ")"; });

  py::class_<Model>(m, "Model",
                    (std::string(cpp_doc("vjit::Model")) +
                    "\n\nmodel[name] (or a Param, or an index) is a float32 NumPy array sharing the parameter's\n"
                    "memory: training updates it in place and writing it changes the parameter. While such\n"
                    "a view is alive, what may move the memory (adding a parameter, a vertex type with\n"
                    "constant tensors, building an Engine) raises vjit.UserError instead of leaving it\n"
                    "dangling: take views after building the engines.")
                        .c_str())
      .def(py::init<uint64_t>(), py::arg("seed") = 1, "`seed` makes every Init draw the same values on every platform.")
      .def(
          "add",
          [](Model& model, const std::string& name, Shape shape, Init init, float scale) {
            check_no_live_views(model, "Model.add");
            return model.add(name, shape, init, scale);
          },
          py::arg("name"), py::arg("shape"), py::arg("init") = Init::Xavier, py::arg("scale") = 0.1f,
          cpp_doc("vjit::Model::add"))
      .def(
          "add_frozen",
          [](Model& model, const std::string& name, Shape shape, py::array_t<float, py::array::c_style | py::array::forcecast> values) {
            check_no_live_views(model, "Model.add_frozen");
            return model.add_frozen(name, shape, std::vector<float>(values.data(), values.data() + values.size()));
          },
          py::arg("name"), py::arg("shape"), py::arg("values"),
          cpp_doc("vjit::Model::add_frozen"))
      .def(
          "freeze", [](Model& model, const Param& p, bool frozen) { model.freeze(p, frozen); }, py::arg("param"),
          py::arg("frozen") = true,
          cpp_doc("vjit::Model::freeze"))
      .def("find", &Model::find, py::arg("name"), cpp_doc("vjit::Model::find"))
      .def("__len__", &Model::size, cpp_doc("vjit::Model::size"))
      .def_property_readonly("total_numel", &Model::total_numel, cpp_doc("vjit::Model::total_numel"))
      .def_property_readonly("value_moves", &Model::value_moves,
                             cpp_doc("vjit::Model::value_moves"))
      .def_property_readonly("live_views", [](const Model& model) { return live_views(model); },
                             "NumPy views of the parameters alive now.")
      .def_property_readonly(
          "names",
          [](const Model& model) {
            std::vector<std::string> names;
            for (int i = 0; i < model.size(); ++i) names.push_back(model.param(i).name);
            return names;
          },
          "the parameters' names, in order")
      .def("name", [](const Model& model, int id) { return model.param(id).name; }, py::arg("id"),
           cpp_doc("vjit::ParamData::name"))
      .def("shape", [](const Model& model, py::handle key) { return model.param(param_id(model, key)).shape; },
           py::arg("param"), cpp_doc("vjit::ParamData::shape"))
      .def("param", [](const Model& model, int id) { return Param{id, model.param(id).shape}; }, py::arg("id"),
           cpp_doc("vjit::Model::param"))
      .def("is_frozen", [](const Model& model, py::handle key) { return model.param(param_id(model, key)).frozen; },
           py::arg("param"), cpp_doc("vjit::ParamData::frozen"))
      .def(
          "__getitem__",
          [](py::object self, py::handle key) { return param_view(self, param_id(self.cast<Model&>(), key)); },
          py::arg("param"), "The parameter's values: a NumPy view of its memory (name, Param or index).")
      .def(
          "__setitem__",
          [](Model& model, py::handle key, py::array_t<float, py::array::c_style | py::array::forcecast> values) {
            ParamData& param = model.param(param_id(model, key));
            VJIT_USER_CHECK(values.size() == int64_t(param.value.size()),
                            "Model: parameter '" << param.name << "' " << param.shape.str() << " holds "
                                                 << param.value.size() << " values, got " << values.size());
            param.value = std::span<const float>(values.data(), size_t(values.size()));
          },
          py::arg("param"), py::arg("values"), "Copies `values` (as many as the parameter holds) into the parameter.")
      .def(
          "__contains__",
          [](const Model& model, const std::string& name) {
            for (int i = 0; i < model.size(); ++i)
              if (model.param(i).name == name) return true;
            return false;
          },
          py::arg("name"), "Whether the model has a parameter named `name`.");
}

}  // namespace vjit::python
