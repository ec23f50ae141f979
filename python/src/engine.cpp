// Engine, its options as keyword arguments, the optimizers, the results of a
// run (Evaluation, with NumPy views of the pushed values), the reference
// interpreter and checkpoints. Every call that runs the engine releases the GIL.
#include <map>

#include "bindings.h"

namespace vjit::python {

namespace {

// Options from the VJIT_* variables, then each keyword as its flag
// (threads=2 is --threads 2; a bool is on or off).
Options options_from(const py::kwargs& keywords) {
  Options options = Options::from_env();
  for (const auto& [key, value] : keywords) {
    std::string text;
    if (py::isinstance<py::bool_>(value)) text = value.cast<bool>() ? "on" : "off";
    else text = py::str(value).cast<std::string>();
    apply_flag(options, key.cast<std::string>(), text);
  }
  return options;
}

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
                   "What a run returns: the objective, the pushed values and, from the reference\n"
                   "interpreter with backward, the gradients. push() and values are NumPy views of its\n"
                   "own buffer, valid while any of them or the Evaluation lives.")
      .def_readonly("objective", &Eval::objective, "Σ of every add_loss over the batch")
      .def_property_readonly("num_samples", [](const Eval& e) { return e.pushes.num_samples(); })
      .def("num_vertices", [](const Eval& e, int s) { return e.pushes.num_vertices(s); }, py::arg("sample"))
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
          "d objective / d parameter per parameter, flattened (copies).");

  m.def(
      "reference_evaluate",
      [](const Program& program, const GraphBatch& batch, bool training, bool backward, uint64_t seed) {
        py::gil_scoped_release unlocked;
        return reference_evaluate(program, batch, run_options(training, backward, seed));
      },
      py::arg("program"), py::arg("batch"), py::arg("training") = true, py::arg("backward") = true,
      py::arg("seed") = 0, "The scalar reference interpreter: F (and ∂F) vertex by vertex, in float.");
}

void bind_optimizers(py::module_& m) {
  py::class_<Optimizer>(m, "Optimizer", "The base of the optimizers: checks, clipping, state.")
      .def_property("lr", &Optimizer::lr, &Optimizer::set_lr, "the learning rate (settable, for schedules)")
      .def_property_readonly("clip_norm", &Optimizer::clip_norm)
      .def_property_readonly("kind", &Optimizer::kind)
      .def("reset", &Optimizer::reset, "Forgets the state (moments, step count).");
  py::class_<SGD, Optimizer>(m, "SGD", "Stochastic gradient descent, with momentum and weight decay as torch.optim.SGD.")
      .def(py::init<float, float, float, float>(), py::arg("lr"), py::arg("momentum") = 0.0f,
           py::arg("weight_decay") = 0.0f, py::arg("clip_norm") = 0.0f);
  py::class_<Adam, Optimizer>(m, "Adam", "Adam (AdamW with weight_decay), LazyAdam on embedding tables.")
      .def(py::init<float, float, float, float, float, float>(), py::arg("lr") = 1e-3f, py::arg("beta1") = 0.9f,
           py::arg("beta2") = 0.999f, py::arg("eps") = 1e-8f, py::arg("weight_decay") = 0.0f,
           py::arg("clip_norm") = 0.0f);
  py::class_<AdaGrad, Optimizer>(m, "AdaGrad", "AdaGrad, as torch.optim.Adagrad.")
      .def(py::init<float, float, float, float>(), py::arg("lr") = 1e-2f, py::arg("eps") = 1e-10f,
           py::arg("weight_decay") = 0.0f, py::arg("clip_norm") = 0.0f);
}

void bind_engine_class(py::module_& m) {
  using gil_release = py::call_guard<py::gil_scoped_release>;
  py::class_<Engine>(m, "Engine",
                     "Runs batches of graphs through a Program's vertex functions, compiled once into plans.\n\n"
                     "Engine(program, **options): the VJIT_* variables, then each keyword as the option of\n"
                     "that name (threads=2, policy=\"agenda\", fusion=False, ...; vjit.option_names()).\n"
                     "Every call releases the GIL: Python threads may run engines of their own at once.")
      .def(py::init([](const Program& program, const py::kwargs& keywords) {
             Options options = options_from(keywords);
             check_no_live_views(program.model(), "building an Engine (VJIT_PARAM_LAYOUT)");
             py::gil_scoped_release unlocked;
             return std::make_unique<Engine>(program, options);
           }),
           py::arg("program"), py::keep_alive<1, 2>())
      .def(
          "train_step", [](Engine& e, const GraphBatch& batch, Optimizer& optimizer) { return e.train_step(batch, optimizer); },
          py::arg("batch"), py::arg("optimizer"), gil_release(),
          "Forward (training, a fresh dropout seed per step), backward, optimizer step; returns the objective.")
      .def(
          "forward",
          [](Engine& e, const GraphBatch& batch, bool training, bool backward, uint64_t seed) {
            return e.forward(batch, run_options(training, backward, seed));
          },
          py::arg("batch"), py::arg("training") = true, py::arg("backward") = true, py::arg("seed") = 0, gil_release(),
          "Runs F over the batch; returns the objective (last_result() holds the pushes).")
      .def("backward", &Engine::backward, gil_release(), "∂F for the last forward (which had backward=True).")
      .def("infer", &Engine::infer, py::arg("batch"), gil_release(),
           "Forward without dropout or gradients: an Evaluation with the objective and the pushed values.")
      .def("last_result", &Engine::last_result, "A copy of the last forward's objective and pushes.")
      .def(
          "gradients", [](const Engine& e) { return gradient_arrays(e.program().model(), e.gradients()); },
          "The last backward's gradients, one array per parameter in the model's order (copies).")
      .def_property("train_steps", &Engine::train_steps, &Engine::set_train_steps)
      .def("upload_parameters", &Engine::upload_parameters, gil_release(),
           "Copies the Model's values to the device after they were changed from outside (GPU).")
      .def("stats", [](const Engine& e) { return stats_dict(e.stats()); }, "Counters and seconds since the last reset_stats().")
      .def("reset_stats", &Engine::reset_stats)
      .def_property_readonly("options", [](const Engine& e) { return e.options().describe(); },
                             "The options the engine runs, one line.")
      .def_property_readonly("memory_planner", &Engine::memory_planner)
      .def_property_readonly("fused_groups", [](const Engine& e) { return e.compile_info().fused_groups; });
  m.def("option_names", &option_names, "The option names Engine accepts as keywords.");
}

void bind_checkpoints(py::module_& m) {
  m.def("save_checkpoint", &save_checkpoint, py::arg("path"), py::arg("engine"), py::arg("optimizer") = nullptr,
        py::arg("metadata") = std::map<std::string, std::string>{}, py::call_guard<py::gil_scoped_release>(),
        "Saves the parameters, train_steps, the program's signature, the optimizer's state (when given)\n"
        "and `metadata` to a safetensors file (atomic and durable).");
  m.def("load_checkpoint", &load_checkpoint, py::arg("path"), py::arg("engine"), py::arg("optimizer") = nullptr,
        py::call_guard<py::gil_scoped_release>(),
        "Resumes from save_checkpoint's file (validated whole before anything changes); returns the metadata.");
  m.def("save_parameters", &save_parameters, py::arg("path"), py::arg("model"),
        py::arg("metadata") = std::map<std::string, std::string>{}, py::call_guard<py::gil_scoped_release>(),
        "The parameters only, as safetensors.torch.save_file(state_dict) writes them.");
  m.def("load_parameters", &load_parameters, py::arg("path"), py::arg("model"), py::call_guard<py::gil_scoped_release>(),
        "Reads the parameters from a safetensors file of one F32 tensor per parameter.");
}

}  // namespace

void bind_engine(py::module_& m) {
  bind_evaluation(m);
  bind_optimizers(m);
  bind_engine_class(m);
  bind_checkpoints(m);
}

}  // namespace vjit::python
