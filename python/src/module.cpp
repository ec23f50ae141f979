// The module vjit._vjit: what every part shares, the error types, and the
// module itself.
#include <exception>
#include <string>

#include "bindings.h"

namespace vjit::python {

std::vector<py::ssize_t> numpy_shape(const Shape& shape) {
  std::vector<py::ssize_t> dims;
  for (int i = 0; i < shape.rank; ++i) dims.push_back(shape.dims[size_t(i)]);
  return dims;
}

py::array_t<float> view(float* data, std::vector<py::ssize_t> shape, py::handle owner, bool writeable) {
  py::array_t<float> array(shape, data, owner);
  if (!writeable) py::detail::array_proxy(array.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return array;
}

namespace {

// The Python exception nested (std::throw_with_nested, at any depth) in a C++
// exception, or null: what a growth callback or an optimizer's update written
// in Python raised, carried through the engine inside its UserError.
const py::error_already_set* find_python_cause(const std::exception& error, std::exception_ptr& keep) {
  const auto* nested = dynamic_cast<const std::nested_exception*>(&error);
  if (nested == nullptr || !nested->nested_ptr()) return nullptr;
  keep = nested->nested_ptr();
  try {
    std::rethrow_exception(keep);
  } catch (const py::error_already_set& python) {
    return &python;  // the object `keep` holds, not a copy
  } catch (const std::exception& inner) {
    std::exception_ptr inner_keep;
    const py::error_already_set* found = find_python_cause(inner, inner_keep);
    if (found) keep = inner_keep;
    return found;
  } catch (...) {
  }
  return nullptr;
}

// Raises the Python exception that caused `error` as it was (its type, object
// and traceback), with what the engine says about where it happened as a note
// (Python 3.11's add_note; the message without the exception's own text);
// false when a Python exception did not cause it.
bool raise_python_cause(const std::exception& error) {
  std::exception_ptr keep;
  const py::error_already_set* python = find_python_cause(error, keep);
  if (python == nullptr) return false;
  const py::object value = python->value();
  std::string where = error.what();
  const std::string own = python->what();
  if (where.size() > own.size() && where.ends_with(own)) where.resize(where.size() - own.size());
  while (!where.empty() && (where.back() == ' ' || where.back() == ':')) where.pop_back();
  if (py::hasattr(value, "add_note")) value.attr("add_note")("vjit: " + where);
  // PyErr_Restore, not PyErr_SetObject: the callback's frames stay in the traceback.
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(value.ptr()));
  Py_INCREF(type);
  PyErr_Restore(type, value.inc_ref().ptr(), python->trace().inc_ref().ptr());
  return true;
}

}  // namespace

void bind_errors(py::module_& m) {
  // The most derived type last: pybind11 tries the translators newest first.
  auto& error = py::register_exception<Error>(m, "Error", PyExc_RuntimeError);
  error.doc() = "The base of vjit's errors; the message is the C++ one.";
  auto& user = py::register_exception<UserError>(m, "UserError", error.ptr());
  user.doc() = "The caller's mistake (a bad graph, shape, file, option or argument), naming the culprit.";
  auto& internal = py::register_exception<InternalError>(m, "InternalError", error.ptr());
  internal.doc() = "A broken invariant of vjit itself.";
  auto& distributed = py::register_exception<DistributedError>(m, "DistributedError", user.ptr());
  distributed.doc() = "A collective of data-parallel training that did not complete.";
  // Registered last, so tried first: an error a Python callback caused is that
  // callback's exception again, not a vjit.UserError.
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      std::rethrow_exception(thrown);
    } catch (const Error& error) {
      if (!raise_python_cause(error)) throw;
    }
  });
}

}  // namespace vjit::python

PYBIND11_MODULE(_vjit, m) {
  namespace python = vjit::python;
  m.doc() = "vjit's C++ engine: Model, Program, GraphBatch, Engine, optimizers, checkpoints, data.";
  python::bind_docs(m);
  python::bind_errors(m);
  python::bind_options(m);
  python::bind_model(m);
  python::bind_program(m);
  python::bind_data(m);
  python::bind_batching(m);
  python::bind_optimizers(m);
  python::bind_engine(m);
  python::bind_recursive(m);
}
