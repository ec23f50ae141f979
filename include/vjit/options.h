#pragma once
// Options are data: every optimisation vjit can switch has one field here and one
// environment variable. Defaults are the fast configuration; the environment
// overrides them (Options::from_env) and command-line flags reuse the same
// parsing and validation (apply_flag / apply_flags). An unknown or malformed value
// is a UserError naming the variable, the bad value and the valid values. On the
// CUDA device the options only the CPU device honours (docs/options.md, the
// devices column) have no effect.
//
// docs/options.md lists every option — variable, flag, values, default, the
// devices that honour it, what it does — made from the table the options are
// parsed by (jit/options.cpp), so the two agree.
//
// Bools accept 0/1/true/false/on/off (any case). Enumerated values match case-
// insensitively and are stored in lower case. A variable that is set but empty
// counts as unset (the default stays).
//
// `policy` is kept as a validated string here, not as the scheduler's enum, so
// that options depend on nothing else of vjit; the engine converts it.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vjit {

// The valid values of each enumerated option, in the order error messages list them.
namespace option_values {
inline constexpr std::array<std::string_view, 5> policy{"depth", "agenda", "frontier", "ratio", "fsm"};
inline constexpr std::array<std::string_view, 4> memplan{"copy", "padded", "pqtree", "auto"};
inline constexpr std::array<std::string_view, 3> device{"cpu", "cuda", "auto"};
inline constexpr std::array<std::string_view, 5> isa{"auto", "avx512", "avx2", "neon", "scalar"};
inline constexpr std::array<std::string_view, 7> gemm{"auto",    "onednn",      "openblas", "blis",
                                                      "libxsmm", "onednn_bf16", "reference"};
inline constexpr std::array<std::string_view, 7> vertex_gemm{"auto",    "same", "onednn",   "openblas",
                                                             "blis",    "libxsmm", "reference"};
inline constexpr std::array<std::string_view, 6> log{"off", "passes", "schedule", "kernels", "primitives", "all"};
}  // namespace option_values

/// Every switch of vjit, each with its VJIT_* variable; docs/options.md
/// describes every field, its values and default.
struct Options {
  bool fusion = true;               ///< VJIT_FUSION
  bool fuse_across_phases = true;   ///< VJIT_FUSE_ACROSS_PHASES
  bool lazy = true;                 ///< VJIT_LAZY
  bool streaming = false;           ///< VJIT_STREAMING (measured: no gain on 2 cores; README)
  bool merge_matmuls = true;        ///< VJIT_MERGE_MATMULS
  bool inplace_concat = true;       ///< VJIT_INPLACE_CONCAT
  bool epilogue = true;             ///< VJIT_EPILOGUE
  bool pad_wide_rows = true;        ///< VJIT_PAD_WIDE_ROWS
  bool pretranspose = true;         ///< VJIT_PRETRANSPOSE
  bool infer_kernels = true;        ///< VJIT_INFER_KERNELS
  bool gather_slices = true;        ///< VJIT_GATHER_SLICES
  bool gather_pointers = true;      ///< VJIT_GATHER_POINTERS
  bool forward_gathers = true;      ///< VJIT_FORWARD_GATHERS
  bool accumulate_gradients = true; ///< VJIT_ACCUMULATE_GRADIENTS
  bool param_layout = true;         ///< VJIT_PARAM_LAYOUT
  std::string policy = "agenda";    ///< VJIT_POLICY
  std::string memplan = "copy";     ///< VJIT_MEMPLAN
  std::string device = "cpu";       ///< VJIT_DEVICE
  bool tf32 = false;                ///< VJIT_TF32
  static constexpr int max_threads = 1024;  ///< the most threads VJIT_THREADS may ask for
  int threads = default_threads();  ///< VJIT_THREADS, 1 to max_threads
  int infer_shards = 1;             ///< VJIT_INFER_SHARDS (infer() on groups of samples at once, one thread each)
  int64_t max_memory = 0;           ///< VJIT_MAX_MEMORY, bytes (0: no bound)
  bool deterministic = true;        ///< VJIT_DETERMINISTIC (results independent of `threads`)
  std::string isa = "auto";         ///< VJIT_ISA
  std::string gemm = "auto";        ///< VJIT_GEMM
  std::string vertex_gemm = "auto"; ///< VJIT_VERTEX_GEMM
  std::string cache_dir;            ///< VJIT_CACHE_DIR
  int dist_timeout = 300;           ///< VJIT_DIST_TIMEOUT, seconds (vjit::Distributed collectives)
  bool dist_nccl = true;            ///< VJIT_DIST_NCCL (GPU gradients summed by NCCL; jit/gradient_exchange.h)
  bool dist_overlap = false;        ///< VJIT_DIST_OVERLAP (gradient sums overlapped with the backward pass)
  bool profile = false;             ///< VJIT_PROFILE
  bool perf_map = false;            ///< VJIT_PERF_MAP
  std::string trace_path;           ///< VJIT_TRACE (flag --trace); empty: no trace
  bool check_finite = false;        ///< VJIT_CHECK_FINITE (CPU executor only)
  std::string log = "off";          ///< VJIT_LOG

  /// The built-in defaults, ignoring the environment.
  static Options defaults();
  /// The defaults overridden by every VJIT_* variable that is set (and non-empty).
  /// Throws UserError on an unknown or malformed value.
  static Options from_env();
  /// std::thread::hardware_concurrency(), at least 1 and at most max_threads.
  static int default_threads();

  /// Throws UserError when a field holds a value outside its list (or threads
  /// outside 1 to max_threads);
  /// for Options filled in by code rather than parsed.
  void validate() const;

  /// One line for logs: "fusion=on lazy=on streaming=on policy=agenda ...".
  std::string describe() const;

  /// True when VJIT_LOG asks for `topic` ("passes", "schedule", "kernels", "primitives"):
  /// log == topic or log == "all".
  bool logs(std::string_view topic) const;

  bool operator==(const Options& other) const = default;  ///< field by field
};

/// The option names accepted by apply_flag, in table order: "fusion", "lazy", ...
std::vector<std::string> option_names();

/// Sets one option from a flag, with the same validation as the environment.
/// `name` is the field name, optionally with leading dashes, '-' or '_' between
/// words, or the variable itself: "policy", "--policy", "--cache-dir",
/// "VJIT_CACHE_DIR". Throws UserError naming the flag, the value and the valid
/// values; an unknown name lists the valid names.
void apply_flag(Options& options, std::string_view name, std::string_view value);

/// Consumes the option flags in argv[1..argc) — "--policy agenda", "--policy=agenda",
/// and "--no-fusion" for bools — and returns the other arguments, in order, for
/// the program's own parsing. "--" stops option parsing (it and what follows are
/// returned as they are).
std::vector<std::string> apply_flags(Options& options, int argc, const char* const* argv);

}  // namespace vjit
