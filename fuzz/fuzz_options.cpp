// The option parser (include/vjit/options.h, jit/options.cpp): the input's
// lines are command-line arguments for apply_flags, and its `NAME=value` lines
// are also given to apply_flag and, as VJIT_* variables, to Options::from_env.
// Anything is parsed or rejected with a UserError; what is accepted must
// validate, and a value must mean the same as a flag and as a variable.
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "vjit/options.h"

extern char** environ;

namespace {

using vjit::fuzz::finding;

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::string upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = char(c - 'a' + 'A');
  return s;
}

// Options parsed from anything must be valid and describable.
void check_valid(const vjit::Options& options, const char* how) {
  if (!vjit::fuzz::runs_or_rejects([&] { options.validate(); }))
    finding(std::string("options accepted by ") + how + " do not validate: " + options.describe());
  if (options.describe().empty()) finding("Options::describe() is empty");
}

void fuzz_flags(const std::vector<std::string>& lines) {
  std::vector<const char*> argv{"fuzz"};
  for (const std::string& line : lines) argv.push_back(line.c_str());  // a NUL inside a line ends that argument
  vjit::Options options = vjit::Options::defaults();
  std::vector<std::string> rest;
  if (!vjit::fuzz::runs_or_rejects([&] { rest = vjit::apply_flags(options, int(argv.size()), argv.data()); })) return;
  check_valid(options, "apply_flags");
  if (rest.size() > argv.size() - 1) finding("apply_flags returned more arguments than it was given");
}

// `VJIT_<NAME>=value` with a known NAME and a non-empty value: the variable and
// the flag agree (both accept with the same options, or both reject).
void fuzz_variable(const std::string& line) {
  const size_t eq = line.find('=');
  if (eq == std::string::npos || eq + 1 == line.size() || line.find('\0') != std::string::npos) return;
  const std::string name = line.substr(0, eq), value = line.substr(eq + 1);
  bool known = false;
  for (const std::string& option : vjit::option_names()) known = known || name == "VJIT_" + upper(option);
  if (!known) return;

  vjit::Options by_flag = vjit::Options::defaults();
  const bool flag_ok = vjit::fuzz::runs_or_rejects([&] { vjit::apply_flag(by_flag, name, value); });
  if (::setenv(name.c_str(), value.c_str(), 1) != 0) finding("setenv failed for " + name);
  vjit::Options by_env;
  const bool env_ok = vjit::fuzz::runs_or_rejects([&] { by_env = vjit::Options::from_env(); });
  ::unsetenv(name.c_str());
  if (flag_ok != env_ok) finding(name + "='" + value + "' is accepted as " + (flag_ok ? "a flag" : "a variable") + " only");
  if (flag_ok && !(by_flag == by_env)) finding(name + "='" + value + "' means one thing as a flag, another as a variable");
  if (flag_ok) check_valid(by_flag, "apply_flag");
}

}  // namespace

// The fuzzer's own environment must not set options: from_env would read them.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::vector<std::string> names;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (entry.rfind("VJIT_", 0) == 0) names.push_back(entry.substr(0, entry.find('=')));
  }
  for (const std::string& name : names) ::unsetenv(name.c_str());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> lines = split_lines(vjit::fuzz::as_text(data, size));
  fuzz_flags(lines);
  for (const std::string& line : lines) {
    vjit::Options options = vjit::Options::defaults();
    const size_t eq = line.find('=');
    if (eq != std::string::npos && vjit::fuzz::runs_or_rejects([&] {
          vjit::apply_flag(options, std::string_view(line).substr(0, eq), std::string_view(line).substr(eq + 1));
        }))
      check_valid(options, "apply_flag");
    fuzz_variable(line);
  }
  return 0;
}
