#include "vjit/options.h"

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <span>
#include <thread>

#include "vjit/error.h"

namespace vjit {

namespace {

enum class Kind { Bool, Int, Bytes, Choice, String };

// One row of the options table: how an option is named, parsed and stored.
struct Spec {
  const char* name;  // field name, also the flag name
  const char* env;   // environment variable
  Kind kind;
  std::span<const std::string_view> choices;  // Kind::Choice only
  bool Options::*bool_field;
  int Options::*int_field;
  std::string Options::*string_field;
  int64_t Options::*bytes_field;
};

constexpr Spec bool_spec(const char* name, const char* env, bool Options::*field) {
  return Spec{name, env, Kind::Bool, {}, field, nullptr, nullptr, nullptr};
}
constexpr Spec choice_spec(const char* name, const char* env, std::span<const std::string_view> choices,
                           std::string Options::*field) {
  return Spec{name, env, Kind::Choice, choices, nullptr, nullptr, field, nullptr};
}

constexpr std::array<std::string_view, 6> kBoolValues{"0", "1", "true", "false", "on", "off"};

const std::array<Spec, 35>& specs() {
  static const std::array<Spec, 35> table{
      bool_spec("fusion", "VJIT_FUSION", &Options::fusion),
      bool_spec("fuse_across_phases", "VJIT_FUSE_ACROSS_PHASES", &Options::fuse_across_phases),
      bool_spec("lazy", "VJIT_LAZY", &Options::lazy),
      bool_spec("streaming", "VJIT_STREAMING", &Options::streaming),
      bool_spec("merge_matmuls", "VJIT_MERGE_MATMULS", &Options::merge_matmuls),
      bool_spec("inplace_concat", "VJIT_INPLACE_CONCAT", &Options::inplace_concat),
      bool_spec("epilogue", "VJIT_EPILOGUE", &Options::epilogue),
      bool_spec("pad_wide_rows", "VJIT_PAD_WIDE_ROWS", &Options::pad_wide_rows),
      bool_spec("pretranspose", "VJIT_PRETRANSPOSE", &Options::pretranspose),
      bool_spec("infer_kernels", "VJIT_INFER_KERNELS", &Options::infer_kernels),
      bool_spec("gather_slices", "VJIT_GATHER_SLICES", &Options::gather_slices),
      bool_spec("gather_pointers", "VJIT_GATHER_POINTERS", &Options::gather_pointers),
      bool_spec("forward_gathers", "VJIT_FORWARD_GATHERS", &Options::forward_gathers),
      bool_spec("accumulate_gradients", "VJIT_ACCUMULATE_GRADIENTS", &Options::accumulate_gradients),
      bool_spec("param_layout", "VJIT_PARAM_LAYOUT", &Options::param_layout),
      choice_spec("policy", "VJIT_POLICY", option_values::policy, &Options::policy),
      choice_spec("memplan", "VJIT_MEMPLAN", option_values::memplan, &Options::memplan),
      choice_spec("device", "VJIT_DEVICE", option_values::device, &Options::device),
      bool_spec("tf32", "VJIT_TF32", &Options::tf32),
      Spec{"threads", "VJIT_THREADS", Kind::Int, {}, nullptr, &Options::threads, nullptr, nullptr},
      Spec{"infer_shards", "VJIT_INFER_SHARDS", Kind::Int, {}, nullptr, &Options::infer_shards, nullptr, nullptr},
      Spec{"max_memory", "VJIT_MAX_MEMORY", Kind::Bytes, {}, nullptr, nullptr, nullptr, &Options::max_memory},
      bool_spec("deterministic", "VJIT_DETERMINISTIC", &Options::deterministic),
      choice_spec("isa", "VJIT_ISA", option_values::isa, &Options::isa),
      choice_spec("gemm", "VJIT_GEMM", option_values::gemm, &Options::gemm),
      choice_spec("vertex_gemm", "VJIT_VERTEX_GEMM", option_values::vertex_gemm, &Options::vertex_gemm),
      Spec{"cache_dir", "VJIT_CACHE_DIR", Kind::String, {}, nullptr, nullptr, &Options::cache_dir, nullptr},
      Spec{"dist_timeout", "VJIT_DIST_TIMEOUT", Kind::Int, {}, nullptr, &Options::dist_timeout, nullptr, nullptr},
      bool_spec("dist_nccl", "VJIT_DIST_NCCL", &Options::dist_nccl),
      bool_spec("dist_overlap", "VJIT_DIST_OVERLAP", &Options::dist_overlap),
      bool_spec("profile", "VJIT_PROFILE", &Options::profile),
      bool_spec("perf_map", "VJIT_PERF_MAP", &Options::perf_map),
      Spec{"trace", "VJIT_TRACE", Kind::String, {}, nullptr, nullptr, &Options::trace_path, nullptr},
      bool_spec("check_finite", "VJIT_CHECK_FINITE", &Options::check_finite),
      choice_spec("log", "VJIT_LOG", option_values::log, &Options::log),
  };
  return table;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string join(std::span<const std::string_view> values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ", ";
    out += values[i];
  }
  return out;
}

// A byte count: digits with an optional K, M or G (powers of 1024, any case,
// an optional trailing B or iB: "512M", "2GiB"); 0 means no bound.
int64_t parse_bytes(std::string_view value, const std::string& culprit) {
  int64_t number = 0;
  const char* last = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), last, number);
  std::string unit = lower(std::string_view(ptr, size_t(last - ptr)));
  if (unit.ends_with("ib")) unit.resize(unit.size() - 2);
  else if (unit.ends_with("b")) unit.resize(unit.size() - 1);
  const int shift = unit.empty() ? 0 : unit == "k" ? 10 : unit == "m" ? 20 : unit == "g" ? 30 : -1;
  const bool valid = !value.empty() && ec == std::errc() && number >= 0 && shift >= 0 &&
                     number <= (std::numeric_limits<int64_t>::max() >> shift);
  VJIT_USER_CHECK(valid, culprit << "='" << value
                                 << "' is not a valid value; valid values: a number of bytes with an optional K, M or "
                                    "G suffix (powers of 1024), e.g. 512M; 0 for no bound");
  return number << shift;
}

// Parses `value` into the field `spec` describes. `culprit` names where the value
// came from ("VJIT_POLICY" or "--policy") for the error message.
void set(Options& options, const Spec& spec, std::string_view value, const std::string& culprit) {
  switch (spec.kind) {
    case Kind::Bool: {
      const std::string v = lower(value);
      if (v == "1" || v == "true" || v == "on") {
        options.*spec.bool_field = true;
      } else if (v == "0" || v == "false" || v == "off") {
        options.*spec.bool_field = false;
      } else {
        throw UserError(culprit + "='" + std::string(value) + "' is not a valid boolean; valid values: " +
                        join(kBoolValues));
      }
      return;
    }
    case Kind::Int: {
      int parsed = 0;
      const char* first = value.data();
      const char* last = value.data() + value.size();
      auto [ptr, ec] = std::from_chars(first, last, parsed);
      VJIT_USER_CHECK(ec == std::errc() && ptr == last && parsed >= 1 && !value.empty(),
                      culprit << "='" << value << "' is not a valid value; valid values: a positive integer (1 to "
                              << std::numeric_limits<int>::max() << ")");
      options.*spec.int_field = parsed;
      return;
    }
    case Kind::Bytes: options.*spec.bytes_field = parse_bytes(value, culprit); return;
    case Kind::Choice: {
      const std::string v = lower(value);
      for (std::string_view choice : spec.choices) {
        if (v == choice) {
          options.*spec.string_field = std::string(choice);
          return;
        }
      }
      throw UserError(culprit + "='" + std::string(value) + "' is not a valid value; valid values: " +
                      join(spec.choices));
    }
    case Kind::String: options.*spec.string_field = std::string(value); return;
  }
  VJIT_INTERNAL_CHECK(false, "unhandled option kind for " << spec.name);
}

// Finds the spec for a flag or variable name; nullptr when there is none.
const Spec* find_spec(std::string_view name) {
  while (!name.empty() && name.front() == '-') name.remove_prefix(1);
  std::string key = lower(name);
  for (char& c : key)
    if (c == '-') c = '_';
  if (key.rfind("vjit_", 0) == 0) key.erase(0, 5);
  for (const Spec& spec : specs())
    if (key == spec.name) return &spec;
  return nullptr;
}

std::string flag_name(const Spec& spec) {
  std::string out = std::string("--") + spec.name;
  for (char& c : out)
    if (c == '_') c = '-';
  return out;
}

const char* on_off(bool b) { return b ? "on" : "off"; }

}  // namespace

int Options::default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

Options Options::defaults() { return Options{}; }

Options Options::from_env() {
  Options options;
  for (const Spec& spec : specs()) {
    const char* value = std::getenv(spec.env);
    if (value == nullptr || value[0] == '\0') continue;
    set(options, spec, value, spec.env);
  }
  return options;
}

void Options::validate() const {
  for (const Spec& spec : specs()) {
    if (spec.kind != Kind::Choice) continue;
    const std::string& value = this->*spec.string_field;
    bool valid = false;
    for (std::string_view choice : spec.choices) valid = valid || value == choice;
    VJIT_USER_CHECK(valid, "Options::" << spec.name << "='" << value << "' is not a valid value; valid values: "
                                       << join(spec.choices));
  }
  VJIT_USER_CHECK(threads >= 1, "Options::threads=" << threads
                                                    << " is not a valid value; valid values: a positive integer");
  VJIT_USER_CHECK(infer_shards >= 1,
                  "Options::infer_shards=" << infer_shards << " is not a valid value; valid values: a positive integer");
  VJIT_USER_CHECK(dist_timeout >= 1, "Options::dist_timeout=" << dist_timeout
                                       << " is not a valid value; valid values: a positive integer (seconds)");
  VJIT_USER_CHECK(max_memory >= 0, "Options::max_memory=" << max_memory
                                                          << " is not a valid value; valid values: bytes >= 0 (0: no bound)");
}

std::string Options::describe() const {
  std::string out;
  out += "fusion=" + std::string(on_off(fusion));
  out += " fuse_across_phases=" + std::string(on_off(fuse_across_phases));
  out += " lazy=" + std::string(on_off(lazy));
  out += " streaming=" + std::string(on_off(streaming));
  out += " merge_matmuls=" + std::string(on_off(merge_matmuls));
  out += " inplace_concat=" + std::string(on_off(inplace_concat));
  out += " epilogue=" + std::string(on_off(epilogue));
  out += " pad_wide_rows=" + std::string(on_off(pad_wide_rows));
  out += " pretranspose=" + std::string(on_off(pretranspose));
  out += " infer_kernels=" + std::string(on_off(infer_kernels));
  out += " gather_slices=" + std::string(on_off(gather_slices));
  out += " gather_pointers=" + std::string(on_off(gather_pointers));
  out += " forward_gathers=" + std::string(on_off(forward_gathers));
  out += " accumulate_gradients=" + std::string(on_off(accumulate_gradients));
  out += " param_layout=" + std::string(on_off(param_layout));
  out += " policy=" + policy;
  out += " memplan=" + memplan;
  out += " device=" + device;
  out += " tf32=" + std::string(on_off(tf32));
  out += " threads=" + std::to_string(threads);
  out += " infer_shards=" + std::to_string(infer_shards);
  out += " max_memory=" + (max_memory == 0 ? std::string("unbounded") : std::to_string(max_memory));
  out += " deterministic=" + std::string(on_off(deterministic));
  out += " isa=" + isa;
  out += " gemm=" + gemm;
  out += " vertex_gemm=" + vertex_gemm;
  // Empty: policies are not saved, CUDA modules go to the user's cache directory.
  out += " cache_dir=" + (cache_dir.empty() ? std::string("(default)") : cache_dir);
  out += " dist_timeout=" + std::to_string(dist_timeout);
  out += " dist_nccl=" + std::string(on_off(dist_nccl));
  out += " dist_overlap=" + std::string(on_off(dist_overlap));
  out += " profile=" + std::string(on_off(profile));
  out += " perf_map=" + std::string(on_off(perf_map));
  out += " trace=" + (trace_path.empty() ? std::string("off") : trace_path);
  out += " check_finite=" + std::string(on_off(check_finite));
  out += " log=" + log;
  return out;
}

bool Options::logs(std::string_view topic) const { return log == "all" || (log != "off" && log == topic); }

std::vector<std::string> option_names() {
  std::vector<std::string> names;
  for (const Spec& spec : specs()) names.emplace_back(spec.name);
  return names;
}

void apply_flag(Options& options, std::string_view name, std::string_view value) {
  const Spec* spec = find_spec(name);
  if (spec == nullptr) {
    std::string valid;
    for (const Spec& s : specs()) valid += (valid.empty() ? "" : ", ") + flag_name(s);
    throw UserError("unknown option '" + std::string(name) + "'; valid options: " + valid);
  }
  set(options, *spec, value, flag_name(*spec));
}

std::vector<std::string> apply_flags(Options& options, int argc, const char* const* argv) {
  std::vector<std::string> rest;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") {
      for (; i < argc; ++i) rest.emplace_back(argv[i]);
      break;
    }
    if (arg.size() < 3 || arg.substr(0, 2) != "--") {
      rest.emplace_back(arg);
      continue;
    }
    const size_t eq = arg.find('=');
    const std::string_view name = arg.substr(0, eq);
    if (const Spec* spec = find_spec(name); spec != nullptr) {
      if (eq != std::string_view::npos) {
        set(options, *spec, arg.substr(eq + 1), flag_name(*spec));
      } else {
        VJIT_USER_CHECK(i + 1 < argc, flag_name(*spec) << " needs a value");
        set(options, *spec, argv[++i], flag_name(*spec));
      }
      continue;
    }
    if (eq == std::string_view::npos && name.substr(2, 3) == "no-") {
      if (const Spec* spec = find_spec(name.substr(5)); spec != nullptr) {
        VJIT_USER_CHECK(spec->kind == Kind::Bool,
                        arg << ": " << flag_name(*spec) << " is not a boolean option; write " << flag_name(*spec)
                            << " VALUE");
        options.*spec->bool_field = false;
        continue;
      }
    }
    rest.emplace_back(arg);
  }
  return rest;
}

}  // namespace vjit
