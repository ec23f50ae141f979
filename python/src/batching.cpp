// Batching policies: ED-Batch's learned FSM policy as an object (learn, save,
// load, describe), what a policy makes of a batch, and the Engine's own FSM
// policy and graphs that grow while they run (growth callbacks written in
// Python).
#include <memory>
#include <optional>

#include "bindings.h"

namespace vjit::python {

namespace {

// The GrowthStep of one callback call, as the Python callback sees it: valid
// only while the callback runs (one kept past it raises UserError).
struct GrowthStepRef {
  GrowthStep* step;

  GrowthStep& get() const {
    VJIT_USER_CHECK(step != nullptr, "a GrowthStep is used after its growth callback returned: it describes one "
                                     "vertex of one round, and is valid only during the call");
    return *step;
  }
};

// Calls the Python callback with the GIL held (the engine released it). A
// Python exception goes on as py::error_already_set, which the engine nests in
// the UserError naming the sample and vertex; the module raises it again as
// it was (module.cpp).
GrowthCallback python_growth(py::function callback) {
  auto shared = std::shared_ptr<py::function>(new py::function(std::move(callback)), [](py::function* f) {
    py::gil_scoped_acquire gil;  // the engine may drop its callbacks without the GIL
    delete f;
  });
  return [shared](GrowthStep& step) {
    py::gil_scoped_acquire gil;
    auto ref = std::make_shared<GrowthStepRef>(GrowthStepRef{&step});
    struct Expire {
      GrowthStepRef& ref;
      ~Expire() { ref.step = nullptr; }
    } expire{*ref};
    try {
      (*shared)(ref);
    } catch (py::error_already_set& e) {
      e.what();  // its message made now, with the GIL held: the engine reads it without
      throw;
    }
  };
}

void bind_fsm_policy(py::module_& m) {
  py::class_<FsmPolicyInfo>(m, "FsmPolicyInfo", cpp_doc("vjit::FsmPolicyInfo"))
      .def_readonly("encoding", &FsmPolicyInfo::encoding, cpp_doc("vjit::FsmPolicyInfo::encoding"))
      .def_readonly("num_types", &FsmPolicyInfo::num_types, cpp_doc("vjit::FsmPolicyInfo::num_types"))
      .def_readonly("states", &FsmPolicyInfo::states, cpp_doc("vjit::FsmPolicyInfo::states"))
      .def_readonly("learning_seconds", &FsmPolicyInfo::learning_seconds,
                    cpp_doc("vjit::FsmPolicyInfo::learning_seconds"))
      .def_readonly("episodes", &FsmPolicyInfo::episodes, cpp_doc("vjit::FsmPolicyInfo::episodes"))
      .def_readonly("instances", &FsmPolicyInfo::instances, cpp_doc("vjit::FsmPolicyInfo::instances"))
      .def_readonly("tasks", &FsmPolicyInfo::tasks, cpp_doc("vjit::FsmPolicyInfo::tasks"))
      .def_readonly("lower_bound", &FsmPolicyInfo::lower_bound, cpp_doc("vjit::FsmPolicyInfo::lower_bound"))
      .def_readonly("departures", &FsmPolicyInfo::departures, cpp_doc("vjit::FsmPolicyInfo::departures"));

  // Held by shared_ptr<const FsmPolicy>, as the Engine takes and returns it.
  py::class_<FsmPolicy, std::shared_ptr<FsmPolicy>>(m, "FsmPolicy", cpp_doc("vjit::FsmPolicy"))
      .def_static(
          "learn",
          [](const GraphBatch& batch, int num_types) {
            py::gil_scoped_release unlocked;
            return std::make_shared<FsmPolicy>(FsmPolicy::learn(batch, num_types));
          },
          py::arg("batch"), py::arg("num_types"), cpp_doc("vjit::FsmPolicy::learn"))
      .def_static(
          "load",
          [](const std::string& path, const std::string& signature) {
            return std::make_shared<FsmPolicy>(FsmPolicy::load(path, signature));
          },
          py::arg("path"), py::arg("signature"), cpp_doc("vjit::FsmPolicy::load"))
      .def("save", &FsmPolicy::save, py::arg("path"), py::arg("signature"), cpp_doc("vjit::FsmPolicy::save"))
      .def("info", &FsmPolicy::info, cpp_doc("vjit::FsmPolicy::info"))
      .def("describe", &FsmPolicy::describe, cpp_doc("vjit::FsmPolicy::describe"))
      .def("__str__", &FsmPolicy::describe);

  py::class_<ScheduleSummary>(m, "ScheduleSummary", cpp_doc("vjit::ScheduleSummary"))
      .def_readonly("tasks", &ScheduleSummary::tasks, cpp_doc("vjit::ScheduleSummary::tasks"))
      .def_readonly("lower_bound", &ScheduleSummary::lower_bound, cpp_doc("vjit::ScheduleSummary::lower_bound"))
      .def_readonly("fsm_fallbacks", &ScheduleSummary::fsm_fallbacks, cpp_doc("vjit::ScheduleSummary::fsm_fallbacks"))
      .def_readonly("schedule_seconds", &ScheduleSummary::schedule_seconds,
                    cpp_doc("vjit::ScheduleSummary::schedule_seconds"));
  m.def(
      "summarize_schedule",
      [](const GraphBatch& batch, int num_types, const std::string& policy, const FsmPolicy* fsm) {
        py::gil_scoped_release unlocked;
        return summarize_schedule(batch, num_types, policy, fsm);
      },
      py::arg("batch"), py::arg("num_types"), py::arg("policy"), py::arg("fsm") = nullptr,
      cpp_doc("vjit::summarize_schedule"));
}

void bind_growth_step(py::module_& m) {
  py::class_<GrowthStepRef, std::shared_ptr<GrowthStepRef>>(
      m, "GrowthStep",
      (std::string(cpp_doc("vjit::GrowthStep")) + "\n\nValid only while the growth callback it was passed to runs.")
          .c_str())
      .def_property_readonly("sample_index", [](const GrowthStepRef& s) { return s.get().sample_index(); },
                             cpp_doc("vjit::GrowthStep::sample_index"))
      .def_property_readonly("vertex", [](const GrowthStepRef& s) { return s.get().vertex(); },
                             cpp_doc("vjit::GrowthStep::vertex"))
      .def_property_readonly("sample", [](const GrowthStepRef& s) { return s.get().sample(); },
                             (std::string(cpp_doc("vjit::GrowthStep::sample")) + " (a copy)").c_str())
      .def_property_readonly("num_pushes", [](const GrowthStepRef& s) { return s.get().num_pushes(); },
                             cpp_doc("vjit::GrowthStep::num_pushes"))
      .def(
          "push",
          [](const GrowthStepRef& s, int k) {
            VJIT_USER_CHECK(k >= 0 && k < s.get().num_pushes(),
                            "GrowthStep.push: vertex " << s.get().vertex() << " pushed " << s.get().num_pushes()
                                                       << " value(s), there is no push " << k);
            std::span<const float> values = s.get().push(k);
            return py::array_t<float>(py::ssize_t(values.size()), values.data());
          },
          py::arg("k") = 0, (std::string(cpp_doc("vjit::GrowthStep::push")) + " (a copy)").c_str())
      .def(
          "add_vertex",
          [](const GrowthStepRef& s, int type, std::vector<int> children, int token, int label,
             std::vector<float> features) {
            return s.get().add_vertex(Vertex{type, std::move(children), token, label, std::move(features)});
          },
          py::arg("type"), py::arg("children") = std::vector<int>{}, py::arg("token") = -1, py::arg("label") = -1,
          py::arg("features") = std::vector<float>{},
          (std::string(cpp_doc("vjit::GrowthStep::add_vertex")) + "\n\n`features`: the vertex's feature row, as " +
           cpp_doc("vjit::GrowthStep::add_vertex", 1) + ".")
              .c_str());
}

}  // namespace

void bind_batching(py::module_& m) {
  bind_fsm_policy(m);
  bind_growth_step(m);
}

void bind_engine_batching(py::class_<Engine>& engine) {
  engine
      .def(
          "set_fsm_policy",
          [](Engine& e, std::shared_ptr<FsmPolicy> policy) { e.set_fsm_policy(std::move(policy)); },
          py::arg("policy"), cpp_doc("vjit::Engine::set_fsm_policy"))
      .def(
          "fsm_policy",
          [](const Engine& e) -> std::shared_ptr<FsmPolicy> {
            std::shared_ptr<const FsmPolicy> policy = e.fsm_policy();
            return policy ? std::make_shared<FsmPolicy>(*policy) : nullptr;
          },
          cpp_doc("vjit::Engine::fsm_policy"))
      .def(
          "learn_fsm_policy",
          [](Engine& e, const GraphBatch& batch) {
            std::shared_ptr<const FsmPolicy> policy;
            {
              py::gil_scoped_release unlocked;
              policy = e.learn_fsm_policy(batch);
            }
            return std::make_shared<FsmPolicy>(*policy);
          },
          py::arg("batch"), cpp_doc("vjit::Engine::learn_fsm_policy"))
      .def("save_fsm_policy", &Engine::save_fsm_policy, py::arg("path"), cpp_doc("vjit::Engine::save_fsm_policy"))
      .def("load_fsm_policy", &Engine::load_fsm_policy, py::arg("path"), py::call_guard<py::gil_scoped_release>(),
           cpp_doc("vjit::Engine::load_fsm_policy"))
      .def(
          "set_growth",
          [](Engine& e, int type, std::optional<py::function> callback) {
            e.set_growth(type, callback ? python_growth(std::move(*callback)) : GrowthCallback());
          },
          py::arg("type"), py::arg("callback"),
          (std::string(cpp_doc("vjit::Engine::set_growth")) +
           "\n\n`callback(step)` gets a vjit.GrowthStep; None makes the type static again. The callback runs "
           "with the GIL held; an exception it raises ends the engine's call as that exception itself, "
           "with a note naming the sample, vertex and type.")
              .c_str())
      .def("set_growth_limit", &Engine::set_growth_limit, py::arg("max_vertices_per_sample"),
           cpp_doc("vjit::Engine::set_growth_limit"))
      .def("grown_batch", &Engine::grown_batch, (std::string(cpp_doc("vjit::Engine::grown_batch")) + " (a copy)").c_str());
}

}  // namespace vjit::python
