// The optimizers: SGD, Adam and AdaGrad, and rules written in Python — a
// subclass of vjit.Optimizer whose update() runs on the host, as a C++
// subclass of vjit::Optimizer does, with the base class's checks, clipping,
// state, undo log and checkpoints.
#include <exception>

#include "bindings.h"

namespace vjit::python {

namespace {

// The C++ side of a Python subclass of vjit.Optimizer: each virtual function
// calls the Python method of that name (with the GIL held: the engine calls
// update() from its worker threads with the GIL released, so the Python
// updates of one step run one at a time).
class PythonRule : public Optimizer {
 public:
  using HyperParameters = std::vector<std::pair<std::string, double>>;  // a macro argument without a comma
  PythonRule(float lr, float clip_norm) : Optimizer(lr, clip_norm) {}

  std::string kind() const override { PYBIND11_OVERRIDE(std::string, Optimizer, kind, ); }
  std::vector<std::string> state_slot_names() const override {
    PYBIND11_OVERRIDE(std::vector<std::string>, Optimizer, state_slot_names, );
  }
  HyperParameters hyper_parameters() const override {
    PYBIND11_OVERRIDE(HyperParameters, Optimizer, hyper_parameters, );
  }

 protected:
  // A rule keeps as many state slots as its state_slot_names() names (none without it).
  int state_slots() const override {
    py::gil_scoped_acquire gil;
    py::function names = py::get_override(static_cast<const Optimizer*>(this), "state_slot_names");
    return names ? int(py::len(names())) : 0;
  }
  void begin_update(int64_t t) override { PYBIND11_OVERRIDE(void, Optimizer, begin_update, t); }

  // update(index, begin, w, state, g, grad_scale) with NumPy views of
  // elements [begin, end) of the weights, of each state slot and of the
  // gradient (read-only; None for rows updated with a zero gradient), valid
  // during the call only.
  void update(int index, float* w, float* const* state, const float* g, int64_t begin, int64_t end,
              float grad_scale) override {
    py::gil_scoped_acquire gil;
    py::function rule = py::get_override(static_cast<const Optimizer*>(this), "update");
    VJIT_USER_CHECK(rule, "a subclass of vjit.Optimizer defines update(self, index, begin, w, state, g, grad_scale)");
    const std::vector<py::ssize_t> shape{py::ssize_t(end - begin)};
    const py::none owner;  // the views do not own the memory; the call does not outlive it
    py::list slots;
    for (int k = 0; k < state_slots(); ++k) slots.append(view(state[k] + begin, shape, owner));
    py::object gradient = g == nullptr ? py::object(py::none()) : view(const_cast<float*>(g) + begin, shape, owner, false);
    try {
      rule(index, begin, view(w + begin, shape, owner), slots, gradient, grad_scale);
    } catch (py::error_already_set& e) {
      // Nested, the Python exception reaches the caller as it was (module.cpp).
      std::throw_with_nested(
          UserError(std::string(py::str(py::type::of(py::cast(static_cast<const Optimizer*>(this))).attr("__name__"))) +
                    ".update of parameter " + std::to_string(index) + " failed: " + e.what()));
    }
  }
};

}  // namespace

void bind_optimizers(py::module_& m) {
  py::class_<Optimizer, PythonRule>(
      m, "Optimizer",
      (std::string(cpp_doc("vjit::Optimizer")) +
       "\n\nA rule of your own in Python: subclass it, call Optimizer.__init__(self, lr, clip_norm) and define\n"
       "update(self, index, begin, w, state, g, grad_scale), which updates elements [begin, end) of\n"
       "parameter `index`: w, each array of the list `state` and the read-only g (None for rows updated\n"
       "with a zero gradient) are NumPy views of those elements, valid during the call only; update\n"
       "them in place. Optionally state_slot_names() (one name per state slot; their number is the\n"
       "slots kept), kind(), hyper_parameters() and begin_update(t). The base class checks the\n"
       "gradients, clips, keeps the state and undoes a step that leaves a non-finite value. It runs\n"
       "on the host (on a GPU too), the GIL held for each call: slower than the built-in rules. An\n"
       "exception update raises ends the step as that exception itself, with a note naming the rule\n"
       "and the parameter.\n\n" +
       cpp_doc("vjit::Optimizer::update"))
          .c_str())
      .def(py::init_alias<float, float>(), py::arg("lr"), py::arg("clip_norm") = 0.0f,
           cpp_doc("vjit::Optimizer::Optimizer", 1))
      .def_property("lr", &Optimizer::lr, &Optimizer::set_lr,
                    (std::string(cpp_doc("vjit::Optimizer::lr")) + "; settable (set_lr): " +
                     cpp_doc("vjit::Optimizer::set_lr"))
                        .c_str())
      .def_property_readonly("clip_norm", &Optimizer::clip_norm, cpp_doc("vjit::Optimizer::clip_norm"))
      .def_property_readonly("steps", &Optimizer::steps, cpp_doc("vjit::Optimizer::steps"))
      .def_property_readonly("last_grad_norm", &Optimizer::last_grad_norm, cpp_doc("vjit::Optimizer::last_grad_norm"))
      .def_property("dense_updates", &Optimizer::dense_updates, &Optimizer::set_dense_updates,
                    cpp_doc("vjit::Optimizer::dense_updates"))
      .def("kind", &Optimizer::kind, cpp_doc("vjit::Optimizer::kind"))
      .def("state_slot_names", &Optimizer::state_slot_names, cpp_doc("vjit::Optimizer::state_slot_names"))
      .def("hyper_parameters", &Optimizer::hyper_parameters, cpp_doc("vjit::Optimizer::hyper_parameters"))
      .def("reset", &Optimizer::reset, cpp_doc("vjit::Optimizer::reset"))
      .def(
          "step",
          [](Optimizer& optimizer, Model& model, const std::vector<py::array_t<float, py::array::c_style | py::array::forcecast>>& grads) {
            std::vector<std::vector<float>> values;
            for (const auto& g : grads) values.emplace_back(g.data(), g.data() + g.size());
            py::gil_scoped_release unlocked;
            optimizer.step(model, values);
          },
          py::arg("model"), py::arg("grads"), cpp_doc("vjit::Optimizer::step"));
  py::class_<SGD, Optimizer>(m, "SGD", cpp_doc("vjit::SGD"))
      .def(py::init<float, float, float, float>(), py::arg("lr"), py::arg("momentum") = 0.0f,
           py::arg("weight_decay") = 0.0f, py::arg("clip_norm") = 0.0f);
  py::class_<Adam, Optimizer>(m, "Adam", cpp_doc("vjit::Adam"))
      .def(py::init<float, float, float, float, float, float>(), py::arg("lr") = 1e-3f, py::arg("beta1") = 0.9f,
           py::arg("beta2") = 0.999f, py::arg("eps") = 1e-8f, py::arg("weight_decay") = 0.0f,
           py::arg("clip_norm") = 0.0f);
  py::class_<AdaGrad, Optimizer>(m, "AdaGrad", cpp_doc("vjit::AdaGrad"))
      .def(py::init<float, float, float, float>(), py::arg("lr") = 1e-2f, py::arg("eps") = 1e-10f,
           py::arg("weight_decay") = 0.0f, py::arg("clip_norm") = 0.0f);
}

}  // namespace vjit::python
