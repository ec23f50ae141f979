#pragma once
// Options are data: every optimisation vjit can switch has one field here and one
// environment variable. Defaults are the fast configuration; the environment
// overrides them (Options::from_env) and command-line flags reuse the same
// parsing and validation (apply_flag / apply_flags). An unknown or malformed value
// is a UserError naming the variable, the bad value and the valid values.
//
// `Options` holds what a user chooses (device, policy, threads, diagnostics);
// `Options::Tuning` the performance levers, each off or on without changing what
// is computed beyond float rounding. A lever that a device might not honour is a
// `Lever`: `Auto` lets the device choose, `On` and `Off` are honoured, and a
// value the chosen device cannot honour is refused when the Engine is built
// (a UserError naming the device and the option), never ignored.
//
// docs/options.md lists every option — variable, flag, values, default, the
// devices that honour it, what it does — made from the table the options are
// parsed by (jit/options.cpp), so the two agree.
//
// Bools accept 0/1/true/false/on/off (any case), levers those and auto.
// Enumerated values match case-insensitively. A variable that is set but empty
// counts as unset (the default stays).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vjit {

/// A lever that a device might not honour (see above); the environment spells
/// it auto, on or off (or 0/1/true/false). After Options::resolve() it is On or Off.
enum class Lever { Auto, On, Off };

// The environment's spelling of each enumerated value, in the order error
// messages list them: a value's index is its enumerator's.
namespace option_values {
inline constexpr std::array<std::string_view, 3> lever{"auto", "on", "off"};
inline constexpr std::array<std::string_view, 5> policy{"depth", "agenda", "frontier", "ratio", "fsm"};
inline constexpr std::array<std::string_view, 4> memplan{"copy", "padded", "pqtree", "auto"};
inline constexpr std::array<std::string_view, 4> row_placement{"copy", "slices", "tables", "auto"};
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
  // The enumerated options, each in the order of its option_values spelling.
  /// VJIT_DEVICE
  enum class Device { Cpu, Cuda, Auto };
  /// VJIT_POLICY
  enum class Policy { Depth, Agenda, Frontier, Ratio, Fsm };
  /// VJIT_MEMPLAN
  enum class MemoryPlanner { Copy, Padded, PqTree, Auto };
  /// VJIT_ROW_PLACEMENT: where a gathered row may be read and a child's
  /// gradient written, each level allowing what the one before does and more
  /// (docs/options.md). After Options::resolve() it is not Auto.
  enum class RowPlacement { Copy, Slices, Tables, Auto };
  /// VJIT_ISA
  enum class Isa { Auto, Avx512, Avx2, Neon, Scalar };
  /// VJIT_GEMM
  enum class Gemm { Auto, OneDnn, OpenBlas, Blis, Libxsmm, OneDnnBf16, Reference };
  /// VJIT_VERTEX_GEMM
  enum class VertexGemm { Auto, Same, OneDnn, OpenBlas, Blis, Libxsmm, Reference };
  /// VJIT_LOG
  enum class Log { Off, Passes, Schedule, Kernels, Primitives, All };

  /// The performance levers. Levers both devices honour are bools; the others
  /// are Levers or enumerations (docs/options.md's devices column says which
  /// device honours them, and what).
  struct Tuning {
    bool fusion = true;                           ///< VJIT_FUSION
    bool fuse_across_phases = true;               ///< VJIT_FUSE_ACROSS_PHASES
    bool lazy = true;                             ///< VJIT_LAZY
    bool streaming = false;                       ///< VJIT_STREAMING (measured: no gain on 2 cores)
    bool merge_matmuls = true;                    ///< VJIT_MERGE_MATMULS
    bool inplace_concat = true;                   ///< VJIT_INPLACE_CONCAT
    bool epilogue = true;                         ///< VJIT_EPILOGUE
    Lever batch_gemms = Lever::Auto;              ///< VJIT_BATCH_GEMMS
    bool pad_wide_rows = true;                    ///< VJIT_PAD_WIDE_ROWS
    Lever pretranspose = Lever::Auto;             ///< VJIT_PRETRANSPOSE (CPU)
    Lever infer_kernels = Lever::Auto;            ///< VJIT_INFER_KERNELS (CPU)
    RowPlacement row_placement = RowPlacement::Auto;  ///< VJIT_ROW_PLACEMENT (cuda: copy only)
    Lever child_rows = Lever::Auto;               ///< VJIT_CHILD_ROWS (CPU)
    Lever param_layout = Lever::Auto;             ///< VJIT_PARAM_LAYOUT (CPU)
    MemoryPlanner memplan = MemoryPlanner::Copy;  ///< VJIT_MEMPLAN
    Lever tf32 = Lever::Auto;                     ///< VJIT_TF32 (CUDA; auto: off)
    Lever cuda_graphs = Lever::Auto;              ///< VJIT_CUDA_GRAPHS (CUDA; auto: off; never run on a GPU)
    Lever cuda_resident_params = Lever::Auto;     ///< VJIT_CUDA_RESIDENT_PARAMS (CUDA; auto: off; never run on a GPU)
    int infer_shards = 1;                         ///< VJIT_INFER_SHARDS (CPU; infer() on groups of samples at once)
    Isa isa = Isa::Auto;                          ///< VJIT_ISA (CPU)
    Gemm gemm = Gemm::Auto;                       ///< VJIT_GEMM (CPU)
    VertexGemm vertex_gemm = VertexGemm::Auto;    ///< VJIT_VERTEX_GEMM (CPU)
    Lever dist_nccl = Lever::Auto;                ///< VJIT_DIST_NCCL (CUDA: gradients summed by NCCL)
    Lever dist_overlap = Lever::Auto;             ///< VJIT_DIST_OVERLAP (CPU; auto: off)

    bool operator==(const Tuning& other) const = default;  ///< field by field
  };

  Device device = Device::Cpu;        ///< VJIT_DEVICE
  Policy policy = Policy::Agenda;     ///< VJIT_POLICY
  static constexpr int max_threads = 1024;  ///< the most threads VJIT_THREADS may ask for
  int threads = default_threads();    ///< VJIT_THREADS, 1 to max_threads
  int64_t max_memory = 0;             ///< VJIT_MAX_MEMORY, bytes (0: no bound)
  Lever deterministic = Lever::Auto;  ///< VJIT_DETERMINISTIC (CPU: results independent of `threads`)
  std::string cache_dir;              ///< VJIT_CACHE_DIR
  int dist_timeout = 300;             ///< VJIT_DIST_TIMEOUT, seconds (vjit::Distributed collectives)
  bool profile = false;               ///< VJIT_PROFILE
  bool perf_map = false;              ///< VJIT_PERF_MAP (CPU)
  std::string trace_path;             ///< VJIT_TRACE (flag --trace); empty: no trace
  bool check_finite = false;          ///< VJIT_CHECK_FINITE (CPU)
  Log log = Log::Off;                 ///< VJIT_LOG
  Tuning tuning;  ///< the performance levers

  /// The built-in defaults, ignoring the environment.
  static Options defaults();
  /// The defaults overridden by every VJIT_* variable that is set (and non-empty).
  /// Throws UserError on an unknown or malformed value.
  static Options from_env();
  /// std::thread::hardware_concurrency(), at least 1 and at most max_threads.
  static int default_threads();

  /// Throws UserError when a field holds a value outside its range (an enum
  /// outside its enumerators, threads outside 1 to max_threads, ...);
  /// for Options filled in by code rather than parsed.
  void validate() const;

  /// These options as their device (cpu or cuda, not auto: the Engine chooses
  /// first) runs them: every Auto lever replaced by what the device does (On or
  /// Off, docs/options.md). Throws UserError, naming the device and the option,
  /// where an option asks for what the device does not do
  /// (VJIT_PRETRANSPOSE=on with VJIT_DEVICE=cuda). Resolving resolved
  /// options changes nothing.
  Options resolve() const;

  /// One line for logs: "fusion=on lazy=on streaming=on policy=agenda ...".
  std::string describe() const;

  /// True when VJIT_LOG asks for `topic`: log == topic or log == All.
  bool logs(Log topic) const;

  bool operator==(const Options& other) const = default;  ///< field by field
};

/// True for a lever of resolved options that is on (Options::resolve).
constexpr bool is_on(Lever lever) { return lever == Lever::On; }
/// On or Off: `options.tuning.pretranspose = to_lever(flag)`.
constexpr Lever to_lever(bool on) { return on ? Lever::On : Lever::Off; }

/// What a resolved row placement (Options::resolve: not Auto) lets the plans
/// do: gather the slices of a child state on their own (`slices` and `tables`),
/// and read and write children's rows through row tables (`tables`).
constexpr bool gathers_slices(Options::RowPlacement placement) {
  return placement == Options::RowPlacement::Slices || placement == Options::RowPlacement::Tables;
}
constexpr bool uses_row_tables(Options::RowPlacement placement) { return placement == Options::RowPlacement::Tables; }

/// The environment's spelling of a value: to_string(Options::Policy::Agenda) == "agenda".
std::string_view to_string(Lever value);
std::string_view to_string(Options::Device value);
std::string_view to_string(Options::Policy value);
std::string_view to_string(Options::MemoryPlanner value);
std::string_view to_string(Options::RowPlacement value);
std::string_view to_string(Options::Isa value);
std::string_view to_string(Options::Gemm value);
std::string_view to_string(Options::VertexGemm value);
std::string_view to_string(Options::Log value);

/// The option names accepted by apply_flag, in table order: "fusion", "lazy", ...
std::vector<std::string> option_names();

/// One row of the options table, for front ends that reach the options by name
/// (the Python module's vjit.Options): the name (as option_names() and
/// apply_flag spell it), the variable, the kind of value ("bool", "lever",
/// "choice", "int", "bytes" or "string"), the spellings a lever or a choice
/// takes, and what docs/options.md says it does (Markdown).
struct OptionInfo {
  std::string name;                  ///< "fusion", "policy", ...
  std::string env;                   ///< "VJIT_FUSION", ...
  std::string kind;                  ///< "bool", "lever", "choice", "int", "bytes" or "string"
  std::vector<std::string> choices;  ///< a lever's or a choice's spellings; else empty
  std::string doc;                   ///< docs/options.md's description
};
/// Every option, in table order (option_names()'s).
std::vector<OptionInfo> option_table();
/// The value of option `name` in `options`, spelled as apply_flag accepts it:
/// "on" or "off" for a bool, a lever's or a choice's spelling, an integer, a
/// number of bytes (0: no bound), or a string option's text (empty: unset).
/// UserError for an unknown name, listing the valid ones.
std::string option_value(const Options& options, std::string_view name);

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
