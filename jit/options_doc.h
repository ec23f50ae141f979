#pragma once
// docs/options.md, made from the table the options are parsed by (jit/options.cpp),
// so the two cannot drift: tests/test_options.cpp compares them, and the
// build target options_doc writes the file again.
#include <string>

namespace vjit {

// Every option as a Markdown table: variable, flag, values, default, the
// devices that honour it, and what it does.
std::string options_markdown();

}  // namespace vjit
