// The module vjit._vjit: what every part shares, the error types, and the
// module itself.
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
