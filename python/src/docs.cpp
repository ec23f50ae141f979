// The docstrings: the public headers' documentation comments, by C++ name
// (cpp_docs.inc, written at build time by python/cpp_docs.py).
#include <algorithm>
#include <iterator>

#include "bindings.h"

namespace vjit::python {

namespace {

struct CppDoc {
  std::string_view name;
  int overload;
  const char* text;
};

constexpr CppDoc kCppDocs[] = {
#include "cpp_docs.inc"
};

bool before(const CppDoc& a, const CppDoc& b) { return a.name != b.name ? a.name < b.name : a.overload < b.overload; }

// The names looked up, for the test that checks them against the headers.
std::vector<std::pair<std::string, int>>& looked_up() {
  static std::vector<std::pair<std::string, int>> names;
  return names;
}

// The entry of `qualified`'s declaration `overload`, or null.
const char* find_doc(std::string_view qualified, int overload) {
  static_assert(std::size(kCppDocs) > 0, "cpp_docs.inc is empty");
  static const bool sorted = std::is_sorted(std::begin(kCppDocs), std::end(kCppDocs), before);
  VJIT_INTERNAL_CHECK(sorted, "cpp_docs.inc is not sorted");
  const CppDoc key{qualified, overload, nullptr};
  const CppDoc* found = std::lower_bound(std::begin(kCppDocs), std::end(kCppDocs), key, before);
  return found != std::end(kCppDocs) && found->name == qualified && found->overload == overload ? found->text : nullptr;
}

}  // namespace

const char* cpp_doc(std::string_view qualified, int overload) {
  const char* text = find_doc(qualified, overload);
  VJIT_INTERNAL_CHECK(text != nullptr, "the Python module binds " << qualified << " (declaration " << overload
                                                                  << "), which include/vjit/*.h does not document");
  looked_up().emplace_back(std::string(qualified), overload);
  return text;
}

void bind_docs(py::module_& m) {
  m.def(
      "_cpp_doc_table",
      [] {
        py::dict table;
        for (const CppDoc& doc : kCppDocs) {
          const py::str name(std::string(doc.name));
          if (!table.contains(name)) table[name] = py::list();
          table[name].cast<py::list>().append(doc.text);
        }
        return table;
      },
      "Every documented C++ name and the docstrings of its declarations, as the build read them.");
  m.def(
      "_cpp_docs",
      [] {
        py::list docs;
        for (const auto& [name, overload] : looked_up()) docs.append(py::make_tuple(name, overload, find_doc(name, overload)));
        return docs;
      },
      "(C++ name, declaration, docstring) of every docstring the module took from the C++ headers.");
}

}  // namespace vjit::python
