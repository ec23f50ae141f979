// Models written as recursion (vjit/recursive.h) over the user's own Python
// objects: branches are vertex types whose bodies read call(i), the result on
// child i; the graphs come from walking the objects with the user's functions.
#include <memory>

#include "bindings.h"
#include "vjit/recursive.h"

namespace vjit::python {

namespace {

// The walk over Python objects: RecursiveProgram's, with its functions calling
// the user's. A node is its PyObject (identity: a node reached twice is one
// vertex); the children a function returns are kept alive through the walk.
class PythonRecursive : public RecursiveProgram {
 public:
  using RecursiveProgram::RecursiveProgram;

  py::object children, branch, token, label, features, describe;

  Sample sample(const py::list& roots, std::string name) const {
    std::vector<py::object> alive;
    NodeAccess access;
    if (!children.is_none())
      access.children = [&](const void* node, std::vector<const void*>& out) {
        for (py::handle child : children(object(node))) {
          alive.push_back(py::reinterpret_borrow<py::object>(child));
          out.push_back(child.ptr());
        }
      };
    access.branch = int_function(branch);
    access.token = int_function(token);
    access.label = int_function(label);
    if (!features.is_none())
      access.features = [this](const void* node) { return features(object(node)).cast<std::vector<float>>(); };
    if (!describe.is_none())
      access.describe = [this](const void* node) { return py::str(describe(object(node))).cast<std::string>(); };
    std::vector<const void*> erased;
    for (py::handle root : roots) erased.push_back(root.ptr());
    return walk(erased, std::move(name), access, nullptr);
  }

 private:
  static py::handle object(const void* node) { return py::handle(static_cast<PyObject*>(const_cast<void*>(node))); }
  static std::function<int(const void*)> int_function(const py::object& f) {
    if (f.is_none()) return {};
    return [f](const void* node) { return f(object(node)).cast<int>(); };
  }
};

// The Calls of one branch body, valid while it runs (as BuilderRef is).
struct CallsRef {
  Calls* calls;
  Calls& get() const {
    VJIT_USER_CHECK(calls != nullptr, "Recursive: the calls of a branch are used after add_branch returned");
    return *calls;
  }
};

}  // namespace

void bind_recursive(py::module_& m) {
  py::class_<Arity>(m, "Arity", cpp_doc("vjit::Arity"))
      .def_static("exactly", &Arity::exactly, py::arg("children"), cpp_doc("vjit::Arity::exactly"))
      .def_static("any", &Arity::any, py::arg("max_children") = -1, cpp_doc("vjit::Arity::any"))
      .def_static("at_least", &Arity::at_least, py::arg("fixed"), py::arg("max_more") = -1,
                  cpp_doc("vjit::Arity::at_least"))
      .def("__str__", &Arity::str);

  py::class_<CallsRef, std::shared_ptr<CallsRef>>(m, "Calls", cpp_doc("vjit::Calls"))
      .def("call", [](const CallsRef& c, int child) { return c.get().call(child); }, py::arg("child"),
           cpp_doc("vjit::Calls::call"))
      .def("call_sum", [](const CallsRef& c) { return c.get().call_sum(); },
           "Σ of the results on the variadic children (zeros without any).")
      .def("call_all", [](const CallsRef& c, int max_children) { return c.get().call_all(max_children); },
           py::arg("max_children"), "[max_children, n]: their results row by row, zero rows after.");

  py::class_<PythonRecursive>(
      m, "Recursive",
      (std::string(cpp_doc("vjit::Recursive")) +
       "\n\nIn Python, a model written as recursion over your own objects: each branch is\n"
      "a vertex type whose body(f, calls) returns the node's result, calls.call(i) standing for the\n"
      "result on child i. Recursive(program, result_shape, children=, branch=, token=, label=,\n"
      "features=, describe=): functions of a node; children returns its child objects.")
          .c_str())
      .def(py::init([](Program& program, Shape result, py::object children, py::object branch, py::object token,
                       py::object label, py::object features, py::object describe) {
             auto recursive = std::make_unique<PythonRecursive>(program, result);
             recursive->children = std::move(children);
             recursive->branch = std::move(branch);
             recursive->token = std::move(token);
             recursive->label = std::move(label);
             recursive->features = std::move(features);
             recursive->describe = std::move(describe);
             return recursive;
           }),
           py::arg("program"), py::arg("result"), py::arg("children") = py::none(), py::arg("branch") = py::none(),
           py::arg("token") = py::none(), py::arg("label") = py::none(), py::arg("features") = py::none(),
           py::arg("describe") = py::none(), py::keep_alive<1, 2>())
      .def(
          "add_branch",
          [](PythonRecursive& r, const std::string& name, Arity arity, const py::function& body) {
            check_no_live_views(r.program().model(), "Recursive.add_branch");
            return r.add_branch(name, arity, [&](Builder& b, Calls& calls) {
              ScopedBuilder builder(b, name);
              auto call_ref = std::make_shared<CallsRef>(CallsRef{&calls});
              struct Expire {
                CallsRef& calls;
                ~Expire() { calls.calls = nullptr; }
              } expire{*call_ref};
              return body(builder.ref(), call_ref).cast<Value>();
            });
          },
          py::arg("name"), py::arg("arity"), py::arg("body"),
          "Adds a branch, a vertex type traced from body(f, calls) once; returns its index.")
      .def("vertex_type", &PythonRecursive::vertex_type, py::arg("branch"), cpp_doc("vjit::RecursiveProgram::vertex_type"))
      .def_property_readonly("num_branches", &PythonRecursive::num_branches,
                             cpp_doc("vjit::RecursiveProgram::num_branches"))
      .def("sample", &PythonRecursive::sample, py::arg("roots"), py::arg("name") = "",
           (std::string(cpp_doc("vjit::Recursive::sample", 1)) + " `roots`: a list of nodes; shared nodes become one vertex.")
               .c_str())
      .def(
          "batch",
          [](const PythonRecursive& r, const py::list& roots, int first_index) {
            GraphBatch batch;
            for (size_t i = 0; i < roots.size(); ++i) {
              py::list one;
              one.append(roots[i]);
              batch.samples.push_back(r.sample(one, "sample " + std::to_string(first_index + int(i))));
            }
            return batch;
          },
          py::arg("roots"), py::arg("first_index") = 0, cpp_doc("vjit::Recursive::batch"));
}

}  // namespace vjit::python
