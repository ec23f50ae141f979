// Options: every VJIT_* option as an attribute and as a keyword, generically
// from the table the options are parsed by (vjit::option_table()), so a new
// option reaches Python with no change here and every value is validated as
// the environment's is (the same UserError messages).
#include "bindings.h"

namespace vjit::python {

namespace {

// A Python value as the option's text: a bool is on or off, None an unset
// string, anything else its str().
std::string option_text(const py::handle& value) {
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>() ? "on" : "off";
  if (value.is_none()) return "";
  return py::str(value).cast<std::string>();
}

// The option's value as Python sees it: bool, int, or the spelling (str).
py::object option_object(const Options& options, const OptionInfo& info) {
  const std::string text = option_value(options, info.name);
  if (info.kind == "bool") return py::bool_(text == "on");
  if (info.kind == "int" || info.kind == "bytes") return py::int_(std::stoll(text));
  return py::str(text);
}

// An attribute's docstring: the table's text, its variable and its values.
std::string option_doc(const OptionInfo& info) {
  std::string values;
  for (const std::string& choice : info.choices) values += (values.empty() ? "" : ", ") + choice;
  return info.doc + "\n\n" + info.env + "; " + info.kind + (values.empty() ? "" : ": " + values) + ".";
}

}  // namespace

Options with_keywords(Options options, const py::kwargs& keywords) {
  for (const auto& [key, value] : keywords) apply_flag(options, key.cast<std::string>(), option_text(value));
  return options;
}

void bind_options(py::module_& m) {
  py::class_<Options> options(
      m, "Options",
      (std::string(cpp_doc("vjit::Options")) +
       "\n\nOptions(**keywords): the VJIT_* variables, then each keyword as the option of its name\n"
       "(Options(threads=2, policy=\"agenda\", fusion=False)); every option is also an attribute,\n"
       "read and set by name, with the variable's validation: a bad value raises vjit.UserError.\n"
       "Bools are True/False, integers and byte counts int, the others their spelling (str).")
          .c_str());
  options.def(py::init([](const py::kwargs& keywords) { return with_keywords(Options::from_env(), keywords); }))
      .def_static(
          "defaults", [](const py::kwargs& keywords) { return with_keywords(Options::defaults(), keywords); },
          (std::string(cpp_doc("vjit::Options::defaults")) + " Then each keyword, as Options() applies them.").c_str())
      .def_static("from_env", &Options::from_env, cpp_doc("vjit::Options::from_env"))
      .def(
          "replace", [](const Options& self, const py::kwargs& keywords) { return with_keywords(self, keywords); },
          "A copy with each keyword applied.")
      .def("validate", &Options::validate, cpp_doc("vjit::Options::validate"))
      .def("describe", &Options::describe, cpp_doc("vjit::Options::describe"))
      .def("__str__", &Options::describe)
      .def("__eq__", [](const Options& a, const Options& b) { return a == b; }, py::is_operator())
      .def(
          "to_dict",
          [](const Options& self) {
            py::dict values;
            for (const OptionInfo& info : option_table()) values[py::str(info.name)] = option_object(self, info);
            return values;
          },
          "Every option's value by name, in the table's order.")
      .def("__repr__", [](const Options& self) {
        std::string out;
        for (const OptionInfo& info : option_table())
          out += (out.empty() ? "" : ", ") + info.name + "=" + py::repr(option_object(self, info)).cast<std::string>();
        return "vjit.Options(" + out + ")";
      });
  for (const OptionInfo& info : option_table()) {
    options.def_property(
        info.name.c_str(), [info](const Options& self) { return option_object(self, info); },
        [name = info.name](Options& self, const py::object& value) { apply_flag(self, name, option_text(value)); },
        option_doc(info).c_str());
  }
  m.def("option_names", &option_names, cpp_doc("vjit::option_names"));
}

}  // namespace vjit::python
