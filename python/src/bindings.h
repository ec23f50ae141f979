#pragma once
// The Python module's pieces (python/src/*.cpp), one per part of the public
// API, and what they share: shapes as tuples, NumPy views that keep their
// owner alive, and the count of live views of each Model's parameters.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "vjit/vjit.h"

namespace pybind11::detail {

/// vjit::Shape as a tuple: () a scalar, (n,) a vector, (m, n) a matrix. An int
/// n is accepted as (n,).
template <>
struct type_caster<vjit::Shape> {
  PYBIND11_TYPE_CASTER(vjit::Shape, const_name("tuple[int, ...]"));

  bool load(handle src, bool) {
    if (isinstance<int_>(src)) {
      value = vjit::Shape::vec(src.cast<int>());
      return true;
    }
    if (!isinstance<sequence>(src) || isinstance<str>(src)) return false;
    const auto dims = reinterpret_borrow<sequence>(src);
    if (dims.size() > 2) throw vjit::UserError("a shape has at most 2 dimensions, got " + std::string(str(src)));
    std::vector<int> extents;
    for (handle d : dims) extents.push_back(d.cast<int>());
    value = extents.empty() ? vjit::Shape::scalar()
            : extents.size() == 1 ? vjit::Shape::vec(extents[0])
                                  : vjit::Shape::mat(extents[0], extents[1]);
    return true;
  }

  static handle cast(const vjit::Shape& shape, return_value_policy, handle) {
    tuple dims(size_t(shape.rank));
    for (int i = 0; i < shape.rank; ++i) dims[size_t(i)] = shape.dims[size_t(i)];
    return dims.release();
  }
};

}  // namespace pybind11::detail

namespace vjit::python {

namespace py = pybind11;

/// The NumPy shape of a vjit shape: () , (n,) or (m, n).
std::vector<py::ssize_t> numpy_shape(const Shape& shape);

/// A float32 array over `data` (C order) that keeps `owner` alive while it or
/// any array made from it lives.
py::array_t<float> view(float* data, std::vector<py::ssize_t> shape, py::handle owner, bool writeable = true);

/// Live NumPy views of the parameters of `model` (Model.value and friends).
int live_views(const Model& model);
/// Throws UserError when `model` has live parameter views: `what` may move
/// its one block of parameter memory, which would leave them dangling.
void check_no_live_views(const Model& model, const std::string& what);

/// The Builder of one vertex type being traced, as the Python body sees it:
/// valid only while the body runs (a Builder kept past it raises UserError).
struct BuilderRef {
  Builder* builder;
  std::string type_name;

  Builder& get() const;
};

/// A BuilderRef of `builder` for the body's call, expired when this goes out of scope.
class ScopedBuilder {
 public:
  ScopedBuilder(Builder& builder, std::string type_name);
  ~ScopedBuilder() { ref_->builder = nullptr; }
  ScopedBuilder(const ScopedBuilder&) = delete;
  ScopedBuilder& operator=(const ScopedBuilder&) = delete;
  const std::shared_ptr<BuilderRef>& ref() const { return ref_; }

 private:
  std::shared_ptr<BuilderRef> ref_;
};

/// The documentation comment of the C++ declaration `qualified`
/// ("vjit::Engine::train_step"; `overload`: its first, second, ... declaration
/// of that name in the header) as a docstring: brief, a blank line, details.
/// Made from include/vjit/*.h at build time (python/cpp_docs.py), so a
/// docstring changes with its comment. InternalError (the module fails to
/// import) when the headers document no such declaration.
const char* cpp_doc(std::string_view qualified, int overload = 0);

/// `options` with each keyword set as the option of its name (threads=2,
/// fusion=False), validated as the VJIT_* variables are.
Options with_keywords(Options options, const py::kwargs& keywords);

void bind_docs(py::module_& m);
void bind_options(py::module_& m);
void bind_errors(py::module_& m);
void bind_model(py::module_& m);
void bind_program(py::module_& m);
void bind_data(py::module_& m);
void bind_engine(py::module_& m);
void bind_recursive(py::module_& m);
void bind_batching(py::module_& m);
void bind_optimizers(py::module_& m);
/// The Engine's FSM policy and growth methods (batching.cpp).
void bind_engine_batching(py::class_<Engine>& engine);

}  // namespace vjit::python
