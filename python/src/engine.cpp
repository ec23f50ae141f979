// Engine, its options as keyword arguments, the results of a
// run (Evaluation, with NumPy views of the pushed values), the reference
// interpreter and checkpoints. Every call that runs the engine releases the GIL.
#include <map>
#include <optional>

#include "bindings.h"

namespace vjit::python {

namespace {

RunOptions run_options(bool training, bool backward, uint64_t seed) {
  RunOptions options;
  options.training = training;
  options.backward = backward;
  options.seed = seed;
  return options;
}

// The gradients as arrays of the parameters' shapes (copies).
py::list gradient_arrays(const Model& model, const std::vector<std::vector<float>>& gradients) {
  py::list arrays;
  for (size_t p = 0; p < gradients.size(); ++p) {
    py::array_t<float> array(numpy_shape(model.param(int(p)).shape));
    std::copy(gradients[p].begin(), gradients[p].end(), array.mutable_data());
    arrays.append(array);
  }
  return arrays;
}

py::dict stats_dict(const EngineStats& s) {
  py::dict d;
  d["batches"] = s.batches;
  d["vertices"] = s.vertices;
  d["tasks"] = s.tasks;
  d["kernels"] = s.kernels;
  d["gemm_calls"] = s.gemm_calls;
  d["gemm_flops"] = s.gemm_flops;
  d["useful_flops"] = s.useful_flops;
  d["copy_bytes"] = s.copy_bytes;
  d["schedule_s"] = s.schedule_s;
  d["forward_s"] = s.forward_s;
  d["backward_s"] = s.backward_s;
  d["optimizer_s"] = s.optimizer_s;
  d["call_s"] = s.call_s;
  return d;
}

void bind_evaluation(py::module_& m) {
  using Eval = Evaluation<float>;
  py::class_<Eval>(m, "Evaluation",
                   (std::string(cpp_doc("vjit::Evaluation")) +
                    "\n\npush() and values are NumPy views of its own buffer, valid while any of them or the\n"
                    "Evaluation lives.")
                       .c_str())
      .def_readonly("objective", &Eval::objective, cpp_doc("vjit::Evaluation::objective"))
      .def_property_readonly(
          "num_samples", [](const Eval& e) { return e.pushes.num_samples(); }, cpp_doc("vjit::PushedValues::num_samples"))
      .def(
          "num_vertices", [](const Eval& e, int s) { return e.pushes.num_vertices(s); }, py::arg("sample"),
          "How many vertices sample `sample` has (push_count and push take their indices).")
      .def(
          "push_count",
          [](const Eval& e, int s, int v) {
            VJIT_USER_CHECK(s >= 0 && s < e.pushes.num_samples() && v >= 0 && v < e.pushes.num_vertices(s),
                            "Evaluation: no vertex " << v << " in sample " << s);
            return e.pushes.count(s, v);
          },
          py::arg("sample"), py::arg("vertex"), "How many values vertex `vertex` of sample `sample` pushed.")
      .def(
          "push",
          [](py::object self, int s, int v, int k) {
            const Eval& e = self.cast<const Eval&>();
            VJIT_USER_CHECK(s >= 0 && s < e.pushes.num_samples() && v >= 0 && v < e.pushes.num_vertices(s) &&
                                k >= 0 && k < e.pushes.count(s, v),
                            "Evaluation.push: sample " << s << ", vertex " << v << " has no push " << k);
            std::span<const float> values = e.pushes.at(s, v, k);
            return view(const_cast<float*>(values.data()), {py::ssize_t(values.size())}, self, false);
          },
          py::arg("sample"), py::arg("vertex"), py::arg("k") = 0,
          "The k-th value vertex `vertex` of sample `sample` pushed (flattened), a read-only view.")
      .def_property_readonly(
          "values",
          [](py::object self) {
            const Eval& e = self.cast<const Eval&>();
            return view(const_cast<float*>(e.pushes.values().data()), {py::ssize_t(e.pushes.values().size())}, self,
                        false);
          },
          "Every pushed value, vertex after vertex, a read-only view.")
      .def(
          "predictions",
          [](const Eval& e, int k) {
            int64_t vertices = 0;
            for (int s = 0; s < e.pushes.num_samples(); ++s) vertices += e.pushes.num_vertices(s);
            py::array_t<int64_t> classes(vertices);
            int64_t* out = classes.mutable_data();
            {
              py::gil_scoped_release unlocked;
              for (int s = 0; s < e.pushes.num_samples(); ++s)
                for (int v = 0; v < e.pushes.num_vertices(s); ++v) {
                  std::span<const float> logits =
                      e.pushes.count(s, v) > k ? e.pushes.at(s, v, k) : std::span<const float>();
                  *out++ = logits.empty() ? -1 : argmax(logits.data(), int(logits.size()));
                }
            }
            return classes;
          },
          py::arg("k") = 0,
          "Per vertex (sample after sample), the index of the largest element of its k-th push\n"
          "(the first on ties): the class of pushed logits; -1 where the vertex pushed no k-th value.")
      .def_property_readonly(
          "param_grads",
          [](const Eval& e) {
            py::list arrays;
            for (const auto& g : e.param_grads) arrays.append(py::array_t<float>(py::ssize_t(g.size()), g.data()));
            return arrays;
          },
          (std::string(cpp_doc("vjit::Evaluation::param_grads")) + " Flattened copies.").c_str());

  m.def(
      "reference_evaluate",
      [](const Program& program, const GraphBatch& batch, bool training, bool backward, uint64_t seed) {
        py::gil_scoped_release unlocked;
        return reference_evaluate(program, batch, run_options(training, backward, seed));
      },
      py::arg("program"), py::arg("batch"), py::arg("training") = true, py::arg("backward") = true,
      py::arg("seed") = 0, cpp_doc("vjit::reference_evaluate"));
}

void bind_engine_class(py::module_& m) {
  using gil_release = py::call_guard<py::gil_scoped_release>;
  py::class_<Engine> engine(m, "Engine",
                     (std::string(cpp_doc("vjit::Engine")) +
                      "\n\nEngine(program, options=None, **keywords): `options` (a vjit.Options; by default the\n"
                      "VJIT_* variables), then each keyword as the option of that name (threads=2,\n"
                      "policy=\"agenda\", fusion=False, ...; vjit.option_names()). Every call releases the GIL:\n"
                      "Python threads may run engines of their own at once.")
                         .c_str());
  engine.def(py::init([](const Program& program, const std::optional<Options>& base, const py::kwargs& keywords) {
             Options options = with_keywords(base ? *base : Options::from_env(), keywords);
             check_no_live_views(program.model(), "building an Engine (VJIT_PARAM_LAYOUT)");
             py::gil_scoped_release unlocked;
             return std::make_unique<Engine>(program, options);
           }),
           py::arg("program"), py::arg("options") = py::none(), py::keep_alive<1, 2>())
      .def(
          "train_step", [](Engine& e, const GraphBatch& batch, Optimizer& optimizer) { return e.train_step(batch, optimizer); },
          py::arg("batch"), py::arg("optimizer"), gil_release(),
          cpp_doc("vjit::Engine::train_step"))
      .def(
          "forward",
          [](Engine& e, const GraphBatch& batch, bool training, bool backward, uint64_t seed) {
            return e.forward(batch, run_options(training, backward, seed));
          },
          py::arg("batch"), py::arg("training") = true, py::arg("backward") = true, py::arg("seed") = 0, gil_release(),
          cpp_doc("vjit::Engine::forward"))
      .def("backward", &Engine::backward, gil_release(), cpp_doc("vjit::Engine::backward"))
      .def("infer", &Engine::infer, py::arg("batch"), gil_release(),
           cpp_doc("vjit::Engine::infer"))
      .def("last_result", &Engine::last_result, (std::string(cpp_doc("vjit::Engine::last_result")) + " A copy.").c_str())
      .def(
          "gradients", [](const Engine& e) { return gradient_arrays(e.program().model(), e.gradients()); },
          (std::string(cpp_doc("vjit::Engine::gradients")) + " Copies, of the parameters' shapes.").c_str())
      .def_property("train_steps", &Engine::train_steps, &Engine::set_train_steps, cpp_doc("vjit::Engine::train_steps"))
      .def("upload_parameters", &Engine::upload_parameters, gil_release(),
           cpp_doc("vjit::Engine::upload_parameters"))
      .def("download_parameters", &Engine::download_parameters, gil_release(),
           cpp_doc("vjit::Engine::download_parameters"))
      .def("stats", [](const Engine& e) { return stats_dict(e.stats()); }, cpp_doc("vjit::Engine::stats"))
      .def("reset_stats", &Engine::reset_stats, cpp_doc("vjit::Engine::reset_stats"))
      .def_property_readonly("options", [](const Engine& e) { return e.options(); }, cpp_doc("vjit::Engine::options"))
      .def_property_readonly("memory_planner", &Engine::memory_planner, cpp_doc("vjit::Engine::memory_planner"))
      .def_property_readonly(
          "fused_groups", [](const Engine& e) { return e.compile_info().fused_groups; },
          cpp_doc("vjit::CompileInfo::fused_groups"));
  bind_engine_batching(engine);
}

void bind_checkpoints(py::module_& m) {
  m.def("save_checkpoint", &save_checkpoint, py::arg("path"), py::arg("engine"), py::arg("optimizer") = nullptr,
        py::arg("metadata") = std::map<std::string, std::string>{}, py::call_guard<py::gil_scoped_release>(),
        cpp_doc("vjit::save_checkpoint"));
  m.def("load_checkpoint", &load_checkpoint, py::arg("path"), py::arg("engine"), py::arg("optimizer") = nullptr,
        py::call_guard<py::gil_scoped_release>(),
        cpp_doc("vjit::load_checkpoint"));
  m.def("save_parameters", &save_parameters, py::arg("path"), py::arg("model"),
        py::arg("metadata") = std::map<std::string, std::string>{}, py::call_guard<py::gil_scoped_release>(),
        cpp_doc("vjit::save_parameters"));
  m.def("load_parameters", &load_parameters, py::arg("path"), py::arg("model"), py::call_guard<py::gil_scoped_release>(),
        cpp_doc("vjit::load_parameters"));
}

}  // namespace

void bind_engine(py::module_& m) {
  bind_evaluation(m);
  bind_engine_class(m);
  bind_checkpoints(m);
}

}  // namespace vjit::python
