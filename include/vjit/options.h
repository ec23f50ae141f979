#pragma once
// Options are data: every optimisation vjit can switch has one field here and one
// environment variable. Defaults are the fast configuration; the environment
// overrides them (Options::from_env) and command-line flags reuse the same
// parsing and validation (apply_flag / apply_flags). An unknown or malformed value
// is a UserError naming the variable, the bad value and the valid values; nothing
// is ever silently ignored.
//
// | variable         | field       | values                                     | default      |
// |------------------|-------------|--------------------------------------------|--------------|
// | VJIT_FUSION      | fusion      | bool: fuse elementwise ops (union-find)     | on           |
// | VJIT_FUSE_ACROSS_PHASES | fuse_across_phases | bool: eager elementwise | on        |
// |                  |             | nodes only tasks read fuse into the tasks'  |              |
// |                  |             | kernels (ir/fusion.h)                       |              |
// | VJIT_LAZY        | lazy        | bool: lazy batching of parameter-gradient   | on           |
// |                  |             | ops (one GEMM per parameter per batch)      |              |
// | VJIT_STREAMING   | streaming   | bool: eager forward steps on a second thread| off          |
// |                  |             | (CPU) or CUDA stream (GPU) while the tasks  |              |
// |                  |             | run (off by default: no gain measured on    |              |
// |                  |             | either; README)                             |              |
// | VJIT_MERGE_MATMULS | merge_matmuls | bool: matmul merging: products of one | on         |
// |                  |             | operand by several parameters become one    |              |
// |                  |             | GEMM over the stacked weights (ir/          |              |
// |                  |             | merge_matmuls.h)                            |              |
// | VJIT_INPLACE_CONCAT | inplace_concat | bool: values a Concat reads are | on      |
// |                  |             | written into its buffer, so it copies       |              |
// |                  |             | nothing (runtime/memplan.h)                 |              |
// | VJIT_PAD_WIDE_ROWS | pad_wide_rows | bool: rows of a multiple of 256  | on           |
// |                  |             | floats get 16 floats of padding (no cache-  |              |
// |                  |             | set conflicts in GEMMs; runtime/memplan.h)  |              |
// | VJIT_PRETRANSPOSE | pretranspose | bool: CPU: a weight that multiplies   | on           |
// |                  |             | many rows transposed (X·Wᵀ) is copied       |              |
// |                  |             | transposed once per forward pass, and the   |              |
// |                  |             | GEMMs read the copy (runtime/cpu_executor.h)|              |
// |                  |             | not with gemm = onednn_bf16                 |              |
// | VJIT_INFER_KERNELS | infer_kernels | bool: CPU: a forward pass that no | on         |
// |                  |             | backward follows runs fused kernels that    |              |
// |                  |             | write only what the forward reads (not the  |              |
// |                  |             | values kept for the backward; jit/pipeline) |              |
// | VJIT_GATHER_SLICES | gather_slices | bool: CPU: slices of a gathered  | on           |
// |                  |             | child state are gathered on their own, so   |              |
// |                  |             | a concat of them is gathered in place       |              |
// |                  |             | (ir/passes.h gather_slices)                 |              |
// | VJIT_GATHER_POINTERS | gather_pointers | bool: CPU: a gathered matrix  | on           |
// |                  |             | that only per-vertex products read (and a   |              |
// |                  |             | concat of such) is read where each child's  |              |
// |                  |             | row lies, a pointer per row, not copied     |              |
// |                  |             | (runtime/row_pointers.h)                    |              |
// | VJIT_FORWARD_GATHERS | forward_gathers | bool: CPU: a part of a child's  | on           |
// |                  |             | scattered row that a fused kernel computes  |              |
// |                  |             | and its parent gathers into a buffer is     |              |
// |                  |             | written there by that kernel as well; the   |              |
// |                  |             | gather copies nothing for it                |              |
// |                  |             | (runtime/forwarding.h)                      |              |
// | VJIT_ACCUMULATE_GRADIENTS | accumulate_gradients | bool: CPU: a fused | on           |
// |                  |             | kernel that computes part of a gradient     |              |
// |                  |             | sent to children adds it straight into      |              |
// |                  |             | their scatter-gradient rows; the GatherGrad |              |
// |                  |             | adds nothing for it (runtime/row_pointers.h)|              |
// | VJIT_PARAM_LAYOUT | param_layout | bool: CPU: the engine lays the Model's  | on           |
// |                  |             | parameters out so that the stacked weights  |              |
// |                  |             | of merged products lie as one block, read   |              |
// |                  |             | in place, not copied every pass             |              |
// |                  |             | (runtime/param_layout.h)                    |              |
// | VJIT_EPILOGUE    | epilogue    | bool: a bias add that follows a product | on           |
// |                  |             | is done by the GEMM (output rows start as   |              |
// |                  |             | the bias, beta = 1), not by another pass;   |              |
// |                  |             | CPU: x + outer(u, v) in one pass too        |              |
// | VJIT_POLICY      | policy      | depth | agenda | frontier | ratio | fsm     | agenda       |
// |                  |             | (batching policy of the scheduler)          |              |
// | VJIT_MEMPLAN     | memplan     | copy | padded | pqtree | auto (the    | copy         |
// |                  |             | memory planner, runtime/memplan.h: copy     |              |
// |                  |             | gathers unless the rows lie in place;       |              |
// |                  |             | padded is a test layout; pqtree orders rows |              |
// |                  |             | by a PQ-tree so gathers are read in place,  |              |
// |                  |             | CPU only; auto times copy and pqtree on the |              |
// |                  |             | first 8 batches and keeps the faster, needs |              |
// |                  |             | VJIT_DETERMINISTIC=0; copy on the GPU)      |              |
// | VJIT_DEVICE      | device      | cpu | cuda | auto (cuda: fail unless a   | cpu          |
// |                  |             | CUDA device runs the plan, naming what is   |              |
// |                  |             | missing; auto: the GPU when one runs it,    |              |
// |                  |             | else the CPU, saying why once)              |              |
// | VJIT_TF32        | tf32        | bool: GPU matrix products on TF32 tensor    | off          |
// |                  |             | cores (10-bit mantissa: products agree with |              |
// |                  |             | FP32 to about 1e-3 relative; gradients of   |              |
// |                  |             | the example models to about 1e-2)           |              |
// | VJIT_THREADS     | threads     | positive integer (CPU worker threads)       | hardware     |
// |                  |             |                                             | concurrency  |
// | VJIT_INFER_SHARDS | infer_shards | positive integer: Engine::infer on the | 1            |
// |                  |             | CPU splits a batch into this many groups of |              |
// |                  |             | consecutive samples (at most one per        |              |
// |                  |             | sample), run at once, each by an engine of  |              |
// |                  |             | its own on one of min(groups, threads)      |              |
// |                  |             | threads; growth callbacks then run on       |              |
// |                  |             | several threads at once (README)            |              |
// | VJIT_MAX_MEMORY  | max_memory  | bytes, with an optional K, M or G suffix   | 0 (no bound) |
// |                  |             | (powers of 1024): bounds the buffers of a   |              |
// |                  |             | batch (vertex values and their gradients); |              |
// |                  |             | a batch that needs more fails before it    |              |
// |                  |             | runs, naming both (Engine::forward)        |              |
// | VJIT_DETERMINISTIC | deterministic | bool: CPU results bitwise independent | on         |
// |                  |             | of VJIT_THREADS (GEMMs cut into blocks that |              |
// |                  |             | depend on the shape only, at most four; row |              |
// |                  |             | sums in fixed blocks); off: one block per   |              |
// |                  |             | thread. Measured cost of on, 2 threads: none|              |
// |                  |             | beyond the noise (on/off samples/s 0.98-1.06|              |
// |                  |             | over 4 model/mode lines, README "Determinism|              |
// |                  |             | across thread counts"); a GEMM uses at most |              |
// |                  |             | four threads                                |              |
// | VJIT_ISA         | isa         | auto | avx512 | avx2 | scalar (x86 JIT      | auto         |
// |                  |             | target; auto = best the CPU supports)       |              |
// | VJIT_GEMM        | gemm        | auto | onednn | openblas | blis | libxsmm  | auto         |
// |                  |             | | onednn_bf16 | reference (matrix-product |              |
// |                  |             | back end; auto = chosen by measurement;     |              |
// |                  |             | onednn_bf16 = bf16 operands, AVX-512 BF16   |              |
// |                  |             | or AMX only)                                |              |
// | VJIT_VERTEX_GEMM | vertex_gemm | auto | same | onednn | openblas | blis | auto         |
// |                  |             | | libxsmm | reference (back end of the  |              |
// |                  |             | products run one per vertex, MV-RNN's;      |              |
// |                  |             | auto = libxsmm where built and gemm is auto,|              |
// |                  |             | else gemm's; same = gemm's)                 |              |
// | VJIT_CACHE_DIR   | cache_dir   | directory for learned policies and compiled | ""           |
// |                  |             | CUDA modules; empty = policies not saved,   |              |
// |                  |             | CUDA modules in the user's cache directory  |              |
// |                  |             | ($XDG_CACHE_HOME/vjit or ~/.cache/vjit); x86|              |
// |                  |             | kernels are always cached in memory only    |              |
// | VJIT_DIST_TIMEOUT | dist_timeout | positive integer, seconds: how long a   | 300          |
// |                  |             | collective of vjit::Distributed waits for   |              |
// |                  |             | the other ranks before it throws            |              |
// |                  |             | DistributedError (a rank died or hangs;     |              |
// |                  |             | vjit/distributed.h)                         |              |
// | VJIT_DIST_NCCL   | dist_nccl   | bool: data-parallel training on GPUs sums   | on           |
// |                  |             | the dense gradients with NCCL between the   |              |
// |                  |             | GPUs (when built with NCCL); off: through   |              |
// |                  |             | host memory over MPI, as on the CPU         |              |
// | VJIT_DIST_OVERLAP | dist_overlap | bool: data-parallel training on the CPU   | off          |
// |                  |             | starts each dense gradient bucket's sum     |              |
// |                  |             | during the backward pass, once the bucket's |              |
// |                  |             | gradients are final (jit/gradient_exchange.h)|             |
// | VJIT_PROFILE     | profile     | bool: time every pipeline stage and kernel  | off          |
// |                  |             | (at Engine destruction, a summary table on  |              |
// |                  |             | stderr: phases, tasks against the lower     |              |
// |                  |             | bound, cache hits, the costliest steps)     |              |
// | VJIT_PERF_MAP    | perf_map    | bool: name JIT code in /tmp/perf-<pid>.map  | off          |
// |                  |             | for `perf report`                           |              |
// | VJIT_TRACE       | trace_path  | file: a Chrome trace-event JSON file (for   | "" (off)     |
// |                  |             | Perfetto) of every engine call, task, GEMM, |              |
// |                  |             | fused kernel, copy and optimizer step, per  |              |
// |                  |             | thread; written when the Engine is          |              |
// |                  |             | destroyed (flag --trace)                    |              |
// | VJIT_CHECK_FINITE | check_finite | bool: the CPU executor checks every   | off          |
// |                  |             | value a forward step writes and reports the |              |
// |                  |             | first NaN/Inf (sample, vertex, type, op);   |              |
// |                  |             | an error with VJIT_DEVICE=cuda              |              |
// | VJIT_LOG         | log         | off | passes | schedule | kernels |      | off          |
// |                  |             | primitives | all                          |              |
// |                  |             | passes: the IR after each lowering pass;    |              |
// |                  |             | schedule: the tasks chosen per batch;       |              |
// |                  |             | kernels: each kernel compiled or found in   |              |
// |                  |             | the cache (name, ISA, bytes);               |              |
// |                  |             | primitives: each call's primitives (kind,   |              |
// |                  |             | pass, vertex type, task, rows, what ran);   |              |
// |                  |             | all: everything                             |              |
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
inline constexpr std::array<std::string_view, 4> isa{"auto", "avx512", "avx2", "scalar"};
inline constexpr std::array<std::string_view, 7> gemm{"auto",    "onednn",      "openblas", "blis",
                                                      "libxsmm", "onednn_bf16", "reference"};
inline constexpr std::array<std::string_view, 7> vertex_gemm{"auto",    "same", "onednn",   "openblas",
                                                             "blis",    "libxsmm", "reference"};
inline constexpr std::array<std::string_view, 6> log{"off", "passes", "schedule", "kernels", "primitives", "all"};
}  // namespace option_values

struct Options {
  bool fusion = true;               // VJIT_FUSION
  bool fuse_across_phases = true;   // VJIT_FUSE_ACROSS_PHASES
  bool lazy = true;                 // VJIT_LAZY
  bool streaming = false;           // VJIT_STREAMING (measured: no gain on 2 cores; README)
  bool merge_matmuls = true;        // VJIT_MERGE_MATMULS
  bool inplace_concat = true;       // VJIT_INPLACE_CONCAT
  bool epilogue = true;             // VJIT_EPILOGUE
  bool pad_wide_rows = true;        // VJIT_PAD_WIDE_ROWS
  bool pretranspose = true;         // VJIT_PRETRANSPOSE
  bool infer_kernels = true;        // VJIT_INFER_KERNELS
  bool gather_slices = true;        // VJIT_GATHER_SLICES
  bool gather_pointers = true;      // VJIT_GATHER_POINTERS
  bool forward_gathers = true;      // VJIT_FORWARD_GATHERS
  bool accumulate_gradients = true; // VJIT_ACCUMULATE_GRADIENTS
  bool param_layout = true;         // VJIT_PARAM_LAYOUT
  std::string policy = "agenda";    // VJIT_POLICY
  std::string memplan = "copy";     // VJIT_MEMPLAN
  std::string device = "cpu";       // VJIT_DEVICE
  bool tf32 = false;                // VJIT_TF32
  int threads = default_threads();  // VJIT_THREADS
  int infer_shards = 1;             // VJIT_INFER_SHARDS (infer() on groups of samples at once, one thread each)
  int64_t max_memory = 0;           // VJIT_MAX_MEMORY, bytes (0: no bound)
  bool deterministic = true;        // VJIT_DETERMINISTIC (results independent of `threads`)
  std::string isa = "auto";         // VJIT_ISA
  std::string gemm = "auto";        // VJIT_GEMM
  std::string vertex_gemm = "auto"; // VJIT_VERTEX_GEMM
  std::string cache_dir;            // VJIT_CACHE_DIR
  int dist_timeout = 300;           // VJIT_DIST_TIMEOUT, seconds (vjit::Distributed collectives)
  bool dist_nccl = true;            // VJIT_DIST_NCCL (GPU gradients summed by NCCL; jit/gradient_exchange.h)
  bool dist_overlap = false;        // VJIT_DIST_OVERLAP (gradient sums overlapped with the backward pass)
  bool profile = false;             // VJIT_PROFILE
  bool perf_map = false;            // VJIT_PERF_MAP
  std::string trace_path;           // VJIT_TRACE (flag --trace); empty: no trace
  bool check_finite = false;        // VJIT_CHECK_FINITE (CPU executor only)
  std::string log = "off";          // VJIT_LOG

  // The built-in defaults, ignoring the environment.
  static Options defaults();
  // The defaults overridden by every VJIT_* variable that is set (and non-empty).
  // Throws UserError on an unknown or malformed value.
  static Options from_env();
  // std::thread::hardware_concurrency(), at least 1.
  static int default_threads();

  // Throws UserError when a field holds a value outside its list (or threads < 1);
  // for Options filled in by code rather than parsed.
  void validate() const;

  // One line for logs: "fusion=on lazy=on streaming=on policy=agenda ...".
  std::string describe() const;

  // True when VJIT_LOG asks for `topic` ("passes", "schedule", "kernels", "primitives"):
  // log == topic or log == "all".
  bool logs(std::string_view topic) const;

  bool operator==(const Options& other) const = default;
};

// The option names accepted by apply_flag, in table order: "fusion", "lazy", ...
std::vector<std::string> option_names();

// Sets one option from a flag, with the same validation as the environment.
// `name` is the field name, optionally with leading dashes, '-' or '_' between
// words, or the variable itself: "policy", "--policy", "--cache-dir",
// "VJIT_CACHE_DIR". Throws UserError naming the flag, the value and the valid
// values; an unknown name lists the valid names.
void apply_flag(Options& options, std::string_view name, std::string_view value);

// Consumes the option flags in argv[1..argc) — "--policy agenda", "--policy=agenda",
// and "--no-fusion" for bools — and returns the other arguments, in order, for
// the program's own parsing. "--" stops option parsing (it and what follows are
// returned as they are).
std::vector<std::string> apply_flags(Options& options, int argc, const char* const* argv);

}  // namespace vjit
