#include "vjit/options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <span>
#include <thread>
#include <type_traits>
#include <utility>

#include "jit/options_doc.h"
#include "vjit/error.h"

namespace vjit {

namespace {

enum class Kind { Bool, Lever, Choice, Int, Bytes, String };

// One row of the options table: how an option is named, parsed and stored.
struct Spec {
  const char* name;  // field name, also the flag name
  const char* env;   // environment variable
  Kind kind;
  std::span<const std::string_view> choices = {};  // Kind::Lever and Kind::Choice: the spellings, by index
  // Bool, Lever and Choice: the value's index (a bool's is 0 or 1); Int: the value.
  int (*get)(const Options&) = nullptr;
  void (*set)(Options&, int) = nullptr;
  int64_t& (*bytes)(Options&) = nullptr;      // Kind::Bytes
  std::string& (*text)(Options&) = nullptr;   // Kind::String
  // What docs/options.md says (options_markdown): the devices that honour the
  // option, what it does, and, for a number or a string, its values and,
  // where the field's default is not what to show, the default.
  const char* devices = "";  // the devices that honour it: "cpu", "cuda" or "cpu, cuda"
  const char* doc = "";
  const char* values = nullptr;
  const char* shown_default = nullptr;
  // Kind::Lever: the devices where Auto is on (null: every device that
  // honours it; "": none). A path never measured on a device stays off there.
  const char* auto_on = nullptr;
};

// The field a member pointer names, in Options or in its Tuning.
template <class T, class Owner>
Owner owner_of(T Owner::*);
template <auto member>
auto& field(Options& options) {
  if constexpr (std::is_same_v<decltype(owner_of(member)), Options::Tuning>) return options.tuning.*member;
  else return options.*member;
}
template <auto member>
const auto& field(const Options& options) {
  if constexpr (std::is_same_v<decltype(owner_of(member)), Options::Tuning>) return options.tuning.*member;
  else return options.*member;
}

std::span<const std::string_view> spellings(Lever) { return option_values::lever; }
std::span<const std::string_view> spellings(Options::Device) { return option_values::device; }
std::span<const std::string_view> spellings(Options::Policy) { return option_values::policy; }
std::span<const std::string_view> spellings(Options::MemoryPlanner) { return option_values::memplan; }
std::span<const std::string_view> spellings(Options::RowPlacement) { return option_values::row_placement; }
std::span<const std::string_view> spellings(Options::Isa) { return option_values::isa; }
std::span<const std::string_view> spellings(Options::Gemm) { return option_values::gemm; }
std::span<const std::string_view> spellings(Options::VertexGemm) { return option_values::vertex_gemm; }
std::span<const std::string_view> spellings(Options::Log) { return option_values::log; }

template <auto member>
int index_of(const Options& options) {
  return static_cast<int>(field<member>(options));
}
template <auto member>
void set_index(Options& options, int index) {
  using T = std::remove_cvref_t<decltype(field<member>(options))>;
  field<member>(options) = static_cast<T>(index);
}

// The row of the option stored in `member` (&Options::policy, &Options::Tuning::fusion).
template <auto member>
Spec spec(const char* name, const char* env) {
  using T = std::remove_cvref_t<decltype(field<member>(std::declval<Options&>()))>;
  Spec row{name, env, Kind::String};
  if constexpr (std::is_same_v<T, bool> || std::is_enum_v<T> || std::is_same_v<T, int>) {
    row.get = &index_of<member>;
    row.set = &set_index<member>;
  }
  if constexpr (std::is_same_v<T, bool>) {
    row.kind = Kind::Bool;
  } else if constexpr (std::is_enum_v<T>) {
    row.kind = std::is_same_v<T, Lever> ? Kind::Lever : Kind::Choice;
    row.choices = spellings(T{});
  } else if constexpr (std::is_same_v<T, int>) {
    row.kind = Kind::Int;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    row.kind = Kind::Bytes;
    row.bytes = static_cast<int64_t& (*)(Options&)>(&field<member>);
  } else {
    static_assert(std::is_same_v<T, std::string>);
    row.text = static_cast<std::string& (*)(Options&)>(&field<member>);
  }
  return row;
}

Spec documented(Spec spec, const char* devices, const char* doc, const char* values = nullptr,
                const char* shown_default = nullptr) {
  spec.devices = devices;
  spec.doc = doc;
  spec.values = values;
  spec.shown_default = shown_default;
  return spec;
}

// A lever whose Auto is off on the devices that honour it.
Spec auto_off(Spec spec) {
  spec.auto_on = "";
  return spec;
}

// A lever whose Auto is on only on `devices` (off on the others that honour it).
Spec auto_on_only(Spec spec, const char* devices) {
  spec.auto_on = devices;
  return spec;
}

bool mentions(const char* devices, Options::Device device) {
  return std::string_view(devices).find(to_string(device)) != std::string_view::npos;
}

// What Auto resolves to on a device that honours the lever.
bool auto_means_on(const Spec& spec, Options::Device device) {
  return spec.auto_on == nullptr || mentions(spec.auto_on, device);
}

constexpr std::array<std::string_view, 6> kBoolValues{"0", "1", "true", "false", "on", "off"};
constexpr std::array<std::string_view, 7> kLeverValues{"auto", "on", "off", "0", "1", "true", "false"};

const std::array<Spec, 36>& specs() {
  static const std::array<Spec, 36> table{
      documented(spec<&Options::Tuning::fusion>("fusion", "VJIT_FUSION"), "cpu, cuda",
          "fuse chains of elementwise ops (union-find) into JIT kernels; an elementwise op left alone joins "
          "a kernel that already reads all its operands, as one more output (`ir/fusion.h`)"),
      documented(spec<&Options::Tuning::fuse_across_phases>("fuse_across_phases", "VJIT_FUSE_ACROSS_PHASES"), "cpu, cuda",
          "an eager elementwise node that only the tasks read (in ∂F, an activation's derivative such as "
          "`σ(1 − σ)`) moves into the tasks' fused kernel instead of a separate pass over every vertex "
          "(`ir::sink_elementwise_into_core`); needs `VJIT_FUSION`"),
      documented(spec<&Options::Tuning::lazy>("lazy", "VJIT_LAZY"), "cpu, cuda",
          "lazy batching: one GEMM per parameter gradient per batch"),
      documented(spec<&Options::Tuning::streaming>("streaming", "VJIT_STREAMING"), "cpu, cuda",
          "run the eager forward steps on a second thread while the tasks run (Cavs §3.4), on the GPU on a "
          "second stream with events for the dependencies; off by default because on two cores the GEMMs "
          "already use both and it measured no gain (docs/benchmarks.md, \"Ablation\"), nor on an H100 "
          "(docs/gpu.md)"),
      documented(spec<&Options::Tuning::merge_matmuls>("merge_matmuls", "VJIT_MERGE_MATMULS"), "cpu, cuda",
          "matmul merging: products of one operand by several parameter matrices (`W_i·x, W_f·x, ...`) "
          "become one GEMM over the stacked weights (`ir/merge_matmuls.h`)"),
      documented(spec<&Options::Tuning::inplace_concat>("inplace_concat", "VJIT_INPLACE_CONCAT"), "cpu, cuda",
          "concat in place: a value that one `concat` reads is computed straight into its columns of the "
          "concat's buffer (the gate gradients before a weight-gradient GEMM, the `h, c` a Tree-LSTM cell "
          "scatters), so the concat copies nothing; on the CPU a `concat` may itself lie in another "
          "(Lattice-LSTM's gate gradients inside `[d_gate; d_gates]`, 13 MB a training step at batch 64, "
          "hidden 256) (`runtime/memplan.h`)"),
      auto_on_only(documented(spec<&Options::Tuning::batch_gemms>("batch_gemms", "VJIT_BATCH_GEMMS"), "cpu, cuda",
          "batched GEMMs: consecutive steps of a vertex function that are products of a weight and per-vertex "
          "vectors of one shape, none reading another's output (a Tree-LSTM's `U_f1·h1` and `U_f2·h2`, and "
          "their gradients), are one primitive (`gemm_batched`) instead of one each; the CPU runs the same "
          "GEMMs one after another in it, the CUDA device one strided-batched cuBLASLt call where the "
          "products' operands lie one stride apart (otherwise one call per product); that call never ran on a "
          "GPU, so auto is on for the CPU only"), "cpu"),
      documented(spec<&Options::Tuning::epilogue>("epilogue", "VJIT_EPILOGUE"), "cpu, cuda",
          "GEMM epilogue: a bias add that follows a product of a weight and a per-vertex vector (`W·x + b`, "
          "not fused with other work) is done by the GEMM itself (its output rows start as `b`, beta = 1), "
          "saving a pass over the product (`ir::fold_bias_adds`); so is the add of a per-vertex value `y` of "
          "the product's shape (`W·x + y`, two terms of a gradient such as a Tree-LSTM's dh), no step of its "
          "own (the output rows start as `y`'s; on cuda, where `y` is laid out as the output, cuBLASLt reads "
          "it as its C operand); on the CPU also an outer product added to "
          "a per-vertex matrix (`x + u·vᵀ`, MV-RNN's matrix gradients), done by the add in one pass without "
          "writing the outer product, and where `x` is whole rows of a per-vertex matrix product read by "
          "nothing else (MV-RNN's W_Mᵀ·dP), the add computes those rows itself (a GEMM into its output, "
          "then u·vᵀ added), so the product is never written whole"),
      documented(spec<&Options::Tuning::pad_wide_rows>("pad_wide_rows", "VJIT_PAD_WIDE_ROWS"), "cpu, cuda",
          "a batched value whose rows are a multiple of 256 floats wide gets a leading dimension 16 floats "
          "longer, so consecutive rows do not share cache sets; GEMMs over such buffers (hidden 512 and up) "
          "measured up to 2× faster (`runtime/memplan.h`)"),
      documented(spec<&Options::Tuning::pretranspose>("pretranspose", "VJIT_PRETRANSPOSE"), "cpu",
          "CPU: a weight that per-task products multiply transposed (Y = X·Wᵀ, every forward product of a "
          "weight) is copied transposed once per forward pass and those GEMMs read the copy: oneDNN's sgemm "
          "runs X·Wᵀ up to 25% slower than X·B on AVX-512 CPUs. Only for products of at most 2048 rows and "
          "16 outputs or more, where the type multiplies at least 128 rows by the weight in the batch "
          "(`runtime/cpu_executor.h`); results equal to off within rounding. With "
          "`VJIT_GEMM=onednn_bf16`, whose matmul reads Wᵀ through its strides (the copies measured slower "
          "there), `auto` is off and `on` is refused"),
      documented(spec<&Options::Tuning::infer_kernels>("infer_kernels", "VJIT_INFER_KERNELS"), "cpu",
          "CPU: a forward pass that no backward follows (`Engine::infer`, `forward` with "
          "`RunOptions::backward` off) runs, for each fused kernel of F, a second kernel compiled beside it "
          "that writes only the outputs a forward step reads and computes only what they need: the values "
          "kept for the backward alone (a Tree-LSTM cell's six gate activations, written beside its `h` and "
          "`c`) are neither computed into memory nor written. `CompileInfo::inference_kernels` counts the "
          "kernels that differ (`jit/pipeline.cpp`, `ir::forward_only_part`); results equal off bitwise. "
          "The CUDA executor runs the full kernels"),
      documented(spec<&Options::Tuning::row_placement>("row_placement", "VJIT_ROW_PLACEMENT"), "cpu, cuda",
          "where the rows a vertex gathers from its children are read, and its gradients for them written, "
          "decided once per program by the plans (`runtime/row_placement.h`); each level does what the one "
          "before does, and more. Under every level the memory planner (`VJIT_MEMPLAN`) reads a gather in "
          "place where the children's rows lie at a constant stride. "
          "`copy`: every other gathered row is copied into the task's rows, and every gradient sent to "
          "children is added by its `GatherGrad`. "
          "`slices`: as copy, but a gathered child state that a vertex reads only in slices (a Tree-LSTM's "
          "`h` and `c`, MV-RNN's vector and matrix) is gathered slice by slice (`ir::gather_slices`: a "
          "`gather` with a start), and a gather that a `concat` reads is copied straight into the concat's "
          "buffer (with `VJIT_INPLACE_CONCAT`), so `[h_l; h_r]` and MV-RNN's `[A; B]` are never copied a "
          "second time; the slices' gradients of one slot are joined again into one add per row "
          "(`ir::join_gather_grads`); the objective equals copy's bit for bit. "
          "`tables`: as slices, and rows are read and written where they lie, through tables of row "
          "addresses (`KernelArgs::row_tables`), in three ways. (1) A gathered child value that only "
          "per-vertex products and fused kernels read (MV-RNN's A and B; a Tree-LSTM's children's `c`) is "
          "not copied: the products and kernels read each child's row where it lies (a `concat` of such "
          "gathers that a product takes as its right operand is read in its parts, the product splitting "
          "its inner dimension: results equal the reference to rounding, not copy's bits), and such values "
          "get no buffer (`runtime/row_pointers.h`); in the backward, a child's whole gradient that "
          "products, fused kernels or elementwise nodes compute (a Tree-LSTM's `dh` and `dc` of a child) "
          "is written straight into the child's scatter-gradient row where that row has no other "
          "contribution, and into its own row, then added by the `GatherGrad`, where it has (a shared "
          "child). (2) A part of a child's scattered row that a fused kernel computes and a parent gathers "
          "into a buffer of its own (a Tree-LSTM's `h` into the parent's `[h_l; h_r]`; the `gather_sum` of "
          "a chain's predecessor or a lattice word's start character) is written there by that kernel as "
          "well, a second output pointed row by row at the parent's row (`runtime/forwarding.h`; a child "
          "with several parents forwards to the one whose gathers take most of its row, the others copy). "
          "(3) In training, a fused kernel of ∂F that computes part of the gradient a vertex sends to its "
          "children (a lattice character's `dc`, a Tree-LSTM's `dc_l` and `dc_r`) runs a second kernel, "
          "compiled beside it, that adds that part straight into each child's scatter-gradient row "
          "(`codegen::accumulating_spec`); the `GatherGrad` adds only the rest. With tables the Tree-LSTM's "
          "and Tree-GRU's layouts copy nothing in either pass (Tree-LSTM training, batch 64, hidden 256: "
          "the layout's copies per step 9.9 MB with copy → 0) and the chains' and lattices' inference "
          "copies drop 5× and more (docs/benchmarks.md, \"Memory layout\"). "
          "`auto`: each device's best: `tables` on the CPU; `copy` on cuda, the only level the CUDA device "
          "takes (its kernels were never run on a GPU with gathers of slices or row tables: `slices` and "
          "`tables` are refused there, naming the device)"),
      auto_on_only(documented(spec<&Options::Tuning::child_rows>("child_rows", "VJIT_CHILD_ROWS"), "cpu, cuda",
          "a children block (`gather_all`) whose padding rows change no result (`ir/child_rows.h`: "
          "the Child-Sum Tree-LSTM's, forward and backward) is computed in child row space, one row per "
          "actual child instead of `max_children` rows per vertex: its products are one GEMM over the "
          "children's rows, its fused kernels run over them, `sum_rows` adds each vertex's own, so a "
          "vertex pays for the children it has; never run on a GPU, so auto is on for the CPU only. Off: every "
          "block is computed padded"), "cpu"),
      documented(spec<&Options::Tuning::param_layout>("param_layout", "VJIT_PARAM_LAYOUT"), "cpu",
          "CPU: when an engine is built, it lays the Model's parameters out in their one block of memory so "
          "that the stacked weights of merged products (`VJIT_MERGE_MATMULS`: `[W_i; W_f; W_o; W_u]`) lie "
          "one right after another in order, and the GEMMs read them there: nothing is copied for them "
          "(`runtime/param_layout.h`). Each stacked weight asks for its parameters in sequence; the "
          "sequences that agree join into runs (`layout/param_runs.h`), largest first, and one that "
          "conflicts with those before it (two types stacking the same weights in different orders) is "
          "copied every pass, as with off. `CompileInfo::stacked_weights` and `stacked_in_place` count "
          "them; vjit-bench's `stacked_weight_bytes` what is still copied. The Model is laid out only when "
          "it does not already hold the runs so; values never change, and results equal off bit for bit. "
          "Off: every stacked weight is copied into the arena once per pass. The CUDA executor stacks its "
          "own copies on the device"),
      documented(spec<&Options::policy>("policy", "VJIT_POLICY"), "cpu, cuda",
          "batching policy of the scheduler"),
      documented(spec<&Options::Tuning::memplan>("memplan", "VJIT_MEMPLAN"), "cpu, cuda",
          "the memory planner that lays out each batch (`runtime/memplan.h`): `copy` packs rows and reads a "
          "gather in place where the children's rows already lie at a constant stride in one buffer (and "
          "only the task reads the gathered value), copying the others; `padded` is a test layout (every "
          "row padded past its width, every gather a copy, slower) that proves the executor follows the "
          "layout; `pqtree` (ED-Batch's PQ-tree layout, planned per batch at run time) orders each type's "
          "rows so that a task's children in a gather slot are consecutive and in the task's order wherever "
          "the constraints allow (`layout/aligned_order.h` over a Booth–Lueker PQ-tree, "
          "`layout/pq_tree.h`): those gathers, and `gather_sum`s whose rows have one variadic child, are "
          "read in place; steps outside the tasks that read them run task by task; where the children have "
          "no other parent, the backward computes the gather's gradient straight into their "
          "scatter-gradient rows. A constraint that conflicts is dropped and costs a copy, never a wrong "
          "result. CPU executor only (with `VJIT_DEVICE=cuda` it is refused, naming the reason); what it "
          "measured is in docs/benchmarks.md, \"Memory layout\". `auto` measures instead of assuming: copy and pqtree "
          "take turns on the engine's first 8 batches (copy first; a batch's time is its planning, forward "
          "and, when it trains, backward, per vertex; each one's first batch only warms up and is not "
          "counted), then the one with the lower median lays out every later batch, copy on a tie "
          "(`Engine::memory_planner()` and vjit-bench's `memory_planner` say which); it needs "
          "`VJIT_DETERMINISTIC=0`, since a choice made by timing could change the last bits of the weight "
          "gradients from run to run (otherwise refused, saying so); with `VJIT_DEVICE=cuda` it is copy"),
      documented(spec<&Options::device>("device", "VJIT_DEVICE"), "cpu, cuda",
          "where plans run; `cuda` runs them on the GPU (the CUDA executor) or fails naming what is missing "
          "(driver library, device, NVRTC); `auto` uses the GPU when one can run them, else runs on the CPU "
          "and says why once"),
      documented(auto_off(spec<&Options::Tuning::tf32>("tf32", "VJIT_TF32")), "cuda",
          "GPU matrix products on TF32 tensor cores (10-bit mantissa: about 1e-3 relative per product; the "
          "Tree-LSTM's gradients within 2e-2 of the reference); FP32 when off"),
      documented(auto_off(spec<&Options::Tuning::cuda_graphs>("cuda_graphs", "VJIT_CUDA_GRAPHS")), "cuda",
          "each forward and backward captured on the GPU's stream and run as one CUDA graph launch; a pass "
          "whose structure (kernels, blocks, product shapes, copies and fills, in order) was seen before "
          "updates that one's executable graph in place instead of instantiating a new one "
          "(`runtime/cuda_graph.h`); checked only through the driver double, never run on a GPU, so off "
          "by default (docs/gpu.md); refused with `VJIT_STREAMING=on` (one stream is captured)"),
      documented(auto_off(spec<&Options::Tuning::cuda_resident_params>("cuda_resident_params",
                                                                       "VJIT_CUDA_RESIDENT_PARAMS")),
          "cuda",
          "parameters and the optimizer's state stay on the GPU between steps: an SGD or Adam step is one "
          "launch each for Σ g², the preview and the update over every parameter (a table of parameter "
          "rows in device memory) instead of one each per parameter group, and the Model's values are "
          "copied back only when read (`Engine::download_parameters()`, a checkpoint saved, the engine "
          "destroyed, a step run on the host); with `VJIT_CUDA_GRAPHS=on` the step's kernels run as two "
          "graph launches; checked only through the driver double, never run on a GPU, so off by default "
          "(docs/gpu.md)"),
      documented(spec<&Options::threads>("threads", "VJIT_THREADS"), "cpu, cuda",
          "CPU worker threads (with `VJIT_DEVICE=cuda`, those of the host's optimizer step); a larger value "
          "is refused, naming it, before a pool is sized by it (more "
          "threads only oversubscribe any machine), and a thread the system cannot start is an error naming "
          "it (and the limit hit), not an abort", "1 to 1024", "hardware threads (at most 1024)"),
      documented(spec<&Options::Tuning::infer_shards>("infer_shards", "VJIT_INFER_SHARDS"), "cpu",
          "`Engine::infer` on the CPU splits a batch into this many groups of consecutive samples (fewer "
          "when the batch has fewer samples) and infers them at once, each by an engine of its own (one "
          "thread, same program, model and options) on a pool of min(groups, `VJIT_THREADS`) threads; the "
          "groups' pushes, objective, grown batch and counters are put back together in sample order (times "
          "in `stats()` are then thread-seconds). Every serial part of a call (scheduling, planning, small "
          "kernels and copies, growth bookkeeping) then runs on all cores at once, where one engine splits "
          "only its larger kernels; each group's GEMMs are smaller. Each sample's result is that of its "
          "group inferred as one batch (equal to one engine's to float rounding, tested); errors name the "
          "sample by its index in the caller's batch. Growth callbacks of different groups run at the same "
          "time on different threads: they must be safe to call concurrently (`GrowthStep::sample_index` is "
          "the caller's index). `forward`, `train_step` and the GPU are never split. Measured: greedy "
          "decoding at hidden 64, batch 64, 2 threads, about 1.2× the samples/s of one engine (docs/benchmarks.md, "
          "\"Greedy decoding\")", "positive integer", "1"),
      documented(spec<&Options::max_memory>("max_memory", "VJIT_MAX_MEMORY"), "cpu, cuda",
          "bounds the buffers of a batch: the vertex values, and their gradients when it trains. A batch "
          "that needs more fails before it runs, naming the bytes it needs and the bound, and the engine "
          "runs the next (smaller) batch; on the CPU the two arenas together never hold more than the bound "
          "(their growth is capped). Parameters, their gradients and the optimizer state are the model's "
          "and not counted; the GPU executor is checked per batch but its device arenas still grow with "
          "slack (to 1.5× a batch's need, or twice their size)", "bytes, with an optional `K` `M` `G` suffix (powers of 1024), e.g. `512M`", "`0` (no bound)"),
      documented(spec<&Options::deterministic>("deterministic", "VJIT_DETERMINISTIC"), "cpu",
          "training and inference on the CPU give bitwise the same parameters, losses and outputs whatever "
          "`VJIT_THREADS` is (same seed, same data, same back end and machine): each GEMM is cut into "
          "blocks whose shape depends only on the product's size (`GemmSplit::Fixed`: one block below 0.5 "
          "MFLOP, else two, or four from 32 MFLOP; each block one single-threaded library call, the same "
          "blocks on one thread), and the per-vertex products summed into a weight gradient run in fixed "
          "row blocks added in order; off: blocks follow the thread count (a GEMM can use every thread; "
          "results change in the last bits with the thread count). Cost of on, 2 threads: see "
          "docs/benchmarks.md, \"Determinism "
          "across thread counts\""),
      documented(spec<&Options::Tuning::isa>("isa", "VJIT_ISA"), "cpu",
          "JIT target: `avx512` or `avx2` on x86-64, `neon` on AArch64, `scalar` the reference kernels "
          "(`auto`: best the CPU has)"),
      documented(spec<&Options::Tuning::gemm>("gemm", "VJIT_GEMM"), "cpu",
          "matrix-product back end (`auto`: chosen by measurement, never `onednn_bf16`); `onednn_bf16` runs "
          "every product on operands rounded to bfloat16 with float accumulation (oneDNN's matmul "
          "primitive, one per product shape with the row count left to run time, operands converted with "
          "AVX-512 BF16; CPUs with AVX-512 BF16 or AMX only, elsewhere an error that says so; "
          "`VJIT_PRETRANSPOSE` is off with it): every example model's objective and gradients stay "
          "within 5e-2 of the reference, Tree-FC's within 0.25 (tested); on a Zen 4 the SST Tree-LSTM ran "
          "1.27–1.41× the samples/s of `onednn` at hidden 256 and 1.50–1.79× at hidden 512 (docs/benchmarks.md, "
          "\"CPU speed\")"),
      documented(spec<&Options::Tuning::vertex_gemm>("vertex_gemm", "VJIT_VERTEX_GEMM"), "cpu",
          "CPU: the back end of the products run one per vertex (MV-RNN's W_M·[A; B] and the rows of "
          "W_Mᵀ·dP; not the weight gradient that sums six vertices per GEMM, nor any product over the rows "
          "of a weight): `auto` is `libxsmm` (its JIT kernels cost less per call than oneDNN's sgemm at "
          "64×64) where vjit was built with it and `VJIT_GEMM` is `auto`, else `VJIT_GEMM`'s back end; "
          "`same` is `VJIT_GEMM`'s back end; a name is that back end (an error naming the variable where it "
          "cannot be used). Measured: MV-RNN training 1.04× with libxsmm (alternating runs, docs/benchmarks.md)"),
      documented(spec<&Options::cache_dir>("cache_dir", "VJIT_CACHE_DIR"), "cpu, cuda",
          "where learned batching policies (`fsm`) are saved and loaded, per program signature (empty: not "
          "saved; written atomically and durably, `io/atomic_file.h`; a file that does not load is reported "
          "once, moved aside to `<file>.rejected` and the policy learned again; a failed save is reported "
          "and leaves nothing behind), and where compiled CUDA modules are kept (keyed by source, "
          "architecture and NVRTC version; atomic writes, checksummed; empty: the user's cache directory, "
          "`$XDG_CACHE_HOME/vjit` or `~/.cache/vjit`); the CPU JIT kernels (x86, AArch64) are cached in memory", "directory", "empty"),
      documented(spec<&Options::dist_timeout>("dist_timeout", "VJIT_DIST_TIMEOUT"), "cpu, cuda",
          "how long a collective of `vjit::Distributed` (data-parallel training over MPI) waits for the "
          "other ranks before it throws `DistributedError` naming the collective and the rank: a rank that "
          "died or hangs fails the others in bounded time instead of hanging them "
          "(`include/vjit/distributed.h`)", "seconds, positive integer", "300"),
      documented(spec<&Options::Tuning::dist_nccl>("dist_nccl", "VJIT_DIST_NCCL"), "cuda",
          "data-parallel training on GPUs (`VJIT_DEVICE=cuda`) sums the dense gradients with "
          "`ncclAllReduce` between the GPUs; off, or `auto` where vjit was built without NCCL: through "
          "host memory over MPI, as on the CPU (`jit/gradient_exchange.h`, `runtime/nccl.h`); `on` without "
          "NCCL is refused when the Engine is built"),
      documented(auto_off(spec<&Options::Tuning::dist_overlap>("dist_overlap", "VJIT_DIST_OVERLAP")), "cpu",
          "data-parallel training on the CPU starts each dense gradient bucket's sum during the backward "
          "pass, as soon as the last step that writes one of its gradients has run (the lazy "
          "weight-gradient GEMMs, type by type), polls it between the backward's steps and waits for it "
          "before the optimizer step; the same sums, bitwise (`jit/gradient_exchange.h`). The CUDA executor "
          "does not overlap"),
      documented(spec<&Options::profile>("profile", "VJIT_PROFILE"), "cpu, cuda",
          "when an Engine is destroyed, a summary table on stderr (counters since the last `reset_stats`): "
          "the wall time inside the engine's calls and the phases within it (schedule+plan, forward, "
          "backward, optimizer; gemm, elementwise and copy as parts of forward+backward), tasks issued "
          "against the ED-Batch lower bound (on with this option), kernel-cache and FSM-policy-cache hits, "
          "and the 20 costliest steps (total ms, calls, rows per call, % of the wall time; pass, vertex "
          "type, phase, op or fused kernel, with the kernel an inference pass runs beside it where "
          "`VJIT_INFER_KERNELS` makes a smaller one). CUDA: each step is timed until the GPU has run it "
          "(the host waits for the device after every step, so the run is slower and its steps' times are "
          "the GPU's plus a launch each); with `VJIT_CUDA_GRAPHS` the passes run as graphs after their steps "
          "are issued and the table says that no step was timed. See docs/guide.md, \"Profiling\""),
      documented(spec<&Options::perf_map>("perf_map", "VJIT_PERF_MAP"), "cpu",
          "append `<start hex> <size hex> vjit_<kernel>` to `/tmp/perf-<pid>.map` for every x86 JIT kernel "
          "as it is generated, and for a kernel an earlier engine of the process generated (and cached) "
          "without the option, so `perf report` names JIT code; each kernel once per process"),
      documented(spec<&Options::trace_path>("trace", "VJIT_TRACE"), "cpu, cuda",
          "write a Chrome trace-event JSON file (Perfetto, `chrome://tracing`) of the run: one event per "
          "engine call, schedule and plan, task, GEMM (M, N, K), fused kernel, copy, other kernel, "
          "optimizer step and, where a step splits its rows over the pool, row block; args vertex type, "
          "rows, cols, bytes; one track per thread. The file is written (atomically) when the Engine is "
          "built (an unwritable path is a `UserError` then), by `Engine::flush_trace()` and when the Engine "
          "is destroyed; at most 524288 events are kept (later ones are counted in "
          "`otherData.dropped_events`). CPU executor: every event; CUDA executor: the engine's events only. "
          "See docs/guide.md, \"Profiling\"", "file path (flag `--trace`)", "empty (off)"),
      documented(spec<&Options::check_finite>("check_finite", "VJIT_CHECK_FINITE"), "cpu",
          "the CPU executor checks every value each forward step writes (row by row, after the step) and "
          "throws a `UserError` at the first NaN or ±Inf in execution order, naming the sample (index and "
          "name), the vertex index in the sample, the vertex type, the op (`%12 log`) and the value; a "
          "fused kernel is named with its ops (only its outputs are stored, so an intermediate that goes "
          "non-finite and comes back finite, `tanh(log 0)`, is not seen). The engine stays usable. Off "
          "costs nothing (one branch per step); on, see docs/benchmarks.md, \"Cost of the non-finite checks\". "
          "With `VJIT_DEVICE=cuda` (or "
          "`auto` choosing the GPU) the Engine refuses it at construction. Independently of it, an "
          "optimizer step never writes a non-finite parameter or state value: SGD, Adam and AdaGrad preview "
          "the update and apply it only when every value stays finite, otherwise the step is an error "
          "naming the parameter, element, value and step, with the model and optimizer state unchanged"),
      documented(spec<&Options::log>("log", "VJIT_LOG"), "cpu, cuda",
          "to stderr: `passes` the IR after each lowering pass, `schedule` the tasks of each batch (type, "
          "vertices, policy), `kernels` each kernel compiled or found in the cache (name, ISA, code bytes), "
          "`primitives` each call's primitives (GEMMs, fused kernels, row copies, ...: kind, pass, vertex "
          "type, task, rows, what ran) after a line counting them by kind, `all` everything"),
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

// The largest value an integer option takes: a pool of more threads than
// this would be sized (and fail with std::bad_alloc) before any starts.
int upper_bound_of(const Spec& spec) {
  return std::string_view(spec.name) == "threads" ? Options::max_threads : std::numeric_limits<int>::max();
}

// The index in `choices` of `value` (any case), or -1.
int find_choice(std::span<const std::string_view> choices, std::string_view value) {
  const std::string v = lower(value);
  for (size_t i = 0; i < choices.size(); ++i)
    if (v == choices[i]) return int(i);
  return -1;
}

// 1 for 1/true/on, 0 for 0/false/off (any case), else -1.
int parse_bool(std::string_view value) {
  const std::string v = lower(value);
  if (v == "1" || v == "true" || v == "on") return 1;
  if (v == "0" || v == "false" || v == "off") return 0;
  return -1;
}

// Parses `value` into the field `spec` describes. `culprit` names where the value
// came from ("VJIT_POLICY" or "--policy") for the error message.
void set(Options& options, const Spec& spec, std::string_view value, const std::string& culprit) {
  switch (spec.kind) {
    case Kind::Bool: {
      const int parsed = parse_bool(value);
      if (parsed < 0)
        throw UserError(culprit + "='" + std::string(value) + "' is not a valid boolean; valid values: " +
                        join(kBoolValues));
      spec.set(options, parsed);
      return;
    }
    case Kind::Lever: {
      const int parsed = parse_bool(value);
      const int index = parsed == 1 ? int(Lever::On) : parsed == 0 ? int(Lever::Off) : find_choice(spec.choices, value);
      if (index < 0)
        throw UserError(culprit + "='" + std::string(value) + "' is not a valid value; valid values: " +
                        join(kLeverValues));
      spec.set(options, index);
      return;
    }
    case Kind::Int: {
      int parsed = 0;
      const char* first = value.data();
      const char* last = value.data() + value.size();
      auto [ptr, ec] = std::from_chars(first, last, parsed);
      const int bound = upper_bound_of(spec);
      VJIT_USER_CHECK(ec == std::errc() && ptr == last && parsed >= 1 && parsed <= bound && !value.empty(),
                      culprit << "='" << value << "' is not a valid value; valid values: a positive integer (1 to "
                              << bound << ")");
      spec.set(options, parsed);
      return;
    }
    case Kind::Bytes: spec.bytes(options) = parse_bytes(value, culprit); return;
    case Kind::Choice: {
      const int index = find_choice(spec.choices, value);
      if (index < 0)
        throw UserError(culprit + "='" + std::string(value) + "' is not a valid value; valid values: " +
                        join(spec.choices));
      spec.set(options, index);
      return;
    }
    case Kind::String: spec.text(options) = std::string(value); return;
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

// The value of `spec`'s field in `options` as describe() prints it.
// (`options` is a copy: the accessors of bytes and strings are those `set` writes through.)
std::string value_text(const Spec& spec, Options options) {
  switch (spec.kind) {
    case Kind::Bool: return on_off(spec.get(options) != 0);
    case Kind::Lever:
    case Kind::Choice: return std::string(spec.choices[size_t(spec.get(options))]);
    case Kind::Int: return std::to_string(spec.get(options));
    case Kind::Bytes: return spec.bytes(options) == 0 ? "unbounded" : std::to_string(spec.bytes(options));
    case Kind::String: return spec.text(options).empty() ? "(none)" : spec.text(options);
  }
  return "";
}

// The values column of docs/options.md.
std::string shown_values(const Spec& spec) {
  if (spec.kind == Kind::Bool) return "bool";
  if (spec.kind != Kind::Choice && spec.kind != Kind::Lever) return spec.values ? spec.values : "";
  std::string out;
  for (std::string_view choice : spec.choices) out += (out.empty() ? "`" : " `") + std::string(choice) + "`";
  return out;
}

// The default column of docs/options.md: the built-in default.
std::string shown_default(const Spec& spec) {
  if (spec.shown_default) return spec.shown_default;
  Options defaults = Options::defaults();
  switch (spec.kind) {
    case Kind::Bool: return on_off(spec.get(defaults) != 0);
    case Kind::Lever: {
      const std::string value = "`" + std::string(spec.choices[size_t(spec.get(defaults))]) + "`";
      if (spec.get(defaults) != int(Lever::Auto)) return value;
      if (spec.auto_on == nullptr || std::string_view(spec.auto_on) == spec.devices) return value + " (on)";
      if (*spec.auto_on == '\0') return value + " (off)";
      return value + " (on: " + spec.auto_on + "; off elsewhere)";
    }
    case Kind::Choice: return "`" + std::string(spec.choices[size_t(spec.get(defaults))]) + "`";
    case Kind::Int: return std::to_string(spec.get(defaults));
    case Kind::Bytes: return std::to_string(spec.bytes(defaults));
    case Kind::String: return spec.text(defaults).empty() ? "empty" : spec.text(defaults);
  }
  return "";
}

bool honoured_on(const Spec& spec, Options::Device device) { return mentions(spec.devices, device); }

// VJIT_ROW_PLACEMENT on `device`: auto is the device's best level; the CUDA
// device takes copy alone (the only level its kernels were checked with).
Options::RowPlacement resolve_row_placement(Options::RowPlacement placement, Options::Device device) {
  using RowPlacement = Options::RowPlacement;
  if (placement == RowPlacement::Auto) return device == Options::Device::Cpu ? RowPlacement::Tables : RowPlacement::Copy;
  VJIT_USER_CHECK(device == Options::Device::Cpu || placement == RowPlacement::Copy,
                  "VJIT_ROW_PLACEMENT=" << to_string(placement) << ": the " << to_string(device)
                                        << " device places rows by copy only; leave it auto or copy there");
  return placement;
}

}  // namespace

std::string options_markdown() {
  std::string out =
      "# Options\n\n"
      "<!-- Made by the code (jit/options.cpp, options_markdown) with `cmake --build build --target options_doc`;\n"
      "     the test OptionsDoc.MatchesTheCode fails when this file and the code differ. -->\n\n"
      "Every optimisation can be switched by an environment variable, read by\n"
      "`vjit::Options::from_env()` (`include/vjit/options.h`), or set in the `vjit::Options` field of the\n"
      "same name (the performance levers in `vjit::Options::tuning`). Programs also accept the same names\n"
      "as flags (`--policy agenda`, `--policy=agenda`, `--no-fusion`). An unknown or malformed value is an\n"
      "error that lists the valid values; an empty value counts as unset. Booleans accept\n"
      "`0/1/true/false/on/off`. The devices column names the devices that honour an option. An option\n"
      "that a device might not honour is a lever, `auto` `on` `off` (and the booleans' spellings): `auto`\n"
      "lets the device choose (the default column says what a device that honours it chooses; another\n"
      "device runs it off), and `on` with a device that does not honour it is refused when the Engine is\n"
      "built, naming the device and the option. So is any value other than the default of an option\n"
      "that is not a lever, with a device that does not honour it (`VJIT_GEMM=openblas` with\n"
      "`VJIT_DEVICE=cuda`): no value is accepted and then ignored.\n\n"
      "| variable | flag | values | default | devices | what |\n"
      "|---|---|---|---|---|---|\n";
  for (const Spec& spec : specs())
    out += std::string("| `") + spec.env + "` | `" + flag_name(spec) + "` | " + shown_values(spec) + " | " +
           shown_default(spec) + " | " + spec.devices + " | " + spec.doc + " |\n";
  return out;
}

std::string_view to_string(Lever value) { return spellings(value)[size_t(value)]; }
std::string_view to_string(Options::Device value) { return spellings(value)[size_t(value)]; }
std::string_view to_string(Options::Policy value) { return spellings(value)[size_t(value)]; }
std::string_view to_string(Options::MemoryPlanner value) { return spellings(value)[size_t(value)]; }
std::string_view to_string(Options::RowPlacement value) { return spellings(value)[size_t(value)]; }
std::string_view to_string(Options::Isa value) { return spellings(value)[size_t(value)]; }
std::string_view to_string(Options::Gemm value) { return spellings(value)[size_t(value)]; }
std::string_view to_string(Options::VertexGemm value) { return spellings(value)[size_t(value)]; }
std::string_view to_string(Options::Log value) { return spellings(value)[size_t(value)]; }

int Options::default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(std::min(n, unsigned(max_threads)));
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
    if (spec.kind != Kind::Choice && spec.kind != Kind::Lever) continue;
    const int index = spec.get(*this);
    VJIT_USER_CHECK(index >= 0 && size_t(index) < spec.choices.size(),
                    "Options: " << spec.name << " holds " << index << ", not one of its values: "
                                << join(spec.choices));
  }
  VJIT_USER_CHECK(threads >= 1 && threads <= max_threads,
                  "Options::threads=" << threads << " is not a valid value; valid values: a positive integer (1 to "
                                      << max_threads << ")");
  VJIT_USER_CHECK(tuning.infer_shards >= 1, "Options::tuning.infer_shards="
                                                << tuning.infer_shards
                                                << " is not a valid value; valid values: a positive integer");
  VJIT_USER_CHECK(dist_timeout >= 1, "Options::dist_timeout=" << dist_timeout
                                       << " is not a valid value; valid values: a positive integer (seconds)");
  VJIT_USER_CHECK(max_memory >= 0, "Options::max_memory=" << max_memory
                                                          << " is not a valid value; valid values: bytes >= 0 (0: no bound)");
}

Options Options::resolve() const {
  VJIT_INTERNAL_CHECK(device == Device::Cpu || device == Device::Cuda,
                      "Options::resolve needs the device chosen (cpu or cuda), not " << to_string(device));
  validate();
  Options resolved = *this;
  const Options defaults = Options::defaults();
  for (const Spec& spec : specs()) {
    const bool honoured = honoured_on(spec, device);
    if (spec.kind == Kind::Lever) {
      const auto lever = Lever(spec.get(*this));
      VJIT_USER_CHECK(honoured || lever != Lever::On,
                      spec.env << "=on: the " << to_string(device) << " device does not do it (only " << spec.devices
                               << " does); leave it auto or off there");
      if (lever == Lever::Auto) spec.set(resolved, int(honoured && auto_means_on(spec, device) ? Lever::On : Lever::Off));
      continue;
    }
    if (honoured) continue;
    VJIT_USER_CHECK(value_text(spec, *this) == value_text(spec, defaults),
                    spec.env << "=" << value_text(spec, *this) << ": the " << to_string(device)
                             << " device does not honour it (only " << spec.devices << " does); leave it at "
                             << value_text(spec, defaults) << " there");
  }
  resolved.tuning.row_placement = resolve_row_placement(tuning.row_placement, device);
  VJIT_USER_CHECK(resolved.tuning.cuda_graphs != Lever::On || !tuning.streaming,
                  "VJIT_CUDA_GRAPHS=on with VJIT_STREAMING=on: a pass's graph is captured from one stream; "
                  "leave one of them off");
  // oneDNN's bf16 matmul copies its operands itself, reading Wᵀ through its
  // strides as fast as W: the transposed copies only cost there (SST
  // Tree-LSTM inference, hidden 256, Zen 4: 0.38 against 0.49 of the bf16
  // peak with them).
  if (tuning.gemm == Gemm::OneDnnBf16) {
    VJIT_USER_CHECK(tuning.pretranspose != Lever::On,
                    "VJIT_PRETRANSPOSE=on: VJIT_GEMM=onednn_bf16 reads transposed weights through its strides, "
                    "there is nothing to copy; leave it auto or off");
    resolved.tuning.pretranspose = Lever::Off;
  }
  return resolved;
}

std::string Options::describe() const {
  std::string out;
  for (const Spec& spec : specs())
    out += (out.empty() ? "" : " ") + std::string(spec.name) + "=" + value_text(spec, *this);
  return out;
}

bool Options::logs(Log topic) const { return log == Log::All || (log != Log::Off && log == topic); }

std::vector<std::string> option_names() {
  std::vector<std::string> names;
  for (const Spec& spec : specs()) names.emplace_back(spec.name);
  return names;
}

namespace {

// The spec of `name`; UserError listing the valid options when there is none.
const Spec& known_spec(std::string_view name) {
  const Spec* spec = find_spec(name);
  if (spec == nullptr) {
    std::string valid;
    for (const Spec& s : specs()) valid += (valid.empty() ? "" : ", ") + flag_name(s);
    throw UserError("unknown option '" + std::string(name) + "'; valid options: " + valid);
  }
  return *spec;
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Bool: return "bool";
    case Kind::Lever: return "lever";
    case Kind::Choice: return "choice";
    case Kind::Int: return "int";
    case Kind::Bytes: return "bytes";
    case Kind::String: return "string";
  }
  return "";
}

}  // namespace

std::vector<OptionInfo> option_table() {
  std::vector<OptionInfo> table;
  for (const Spec& spec : specs())
    table.push_back(OptionInfo{spec.name, spec.env, kind_name(spec.kind),
                               std::vector<std::string>(spec.choices.begin(), spec.choices.end()), spec.doc});
  return table;
}

std::string option_value(const Options& options, std::string_view name) {
  const Spec& spec = known_spec(name);
  Options copy = options;  // the accessors of bytes and strings are those `set` writes through
  if (spec.kind == Kind::Bytes) return std::to_string(spec.bytes(copy));
  if (spec.kind == Kind::String) return spec.text(copy);
  return value_text(spec, options);
}

void apply_flag(Options& options, std::string_view name, std::string_view value) {
  const Spec& spec = known_spec(name);
  set(options, spec, value, flag_name(spec));
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
        VJIT_USER_CHECK(spec->kind == Kind::Bool || spec->kind == Kind::Lever,
                        arg << ": " << flag_name(*spec) << " is not a boolean option; write " << flag_name(*spec)
                            << " VALUE");
        set(options, *spec, "off", flag_name(*spec));
        continue;
      }
    }
    rest.emplace_back(arg);
  }
  return rest;
}

}  // namespace vjit
