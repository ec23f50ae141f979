#include "vjit/optimizer.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <typeinfo>

#include "ir/vector_clones.h"
#include "runtime/kernels.h"
#include "runtime/optimizer_access.h"
#include "runtime/optimizer_checks.h"
#include "vjit/error.h"

// How an optimizer's step runs: chunks of work over the engine's threads, the
// clipping norm, the previews and the undo log that keep a failed step from
// writing anything, and what the executors use (runtime/optimizer_access.h).
// The rules themselves (SGD, Adam, AdaGrad) are runtime/optimizer_rules.cpp.
// sum_of_squares carries VJIT_VECTOR_CLONES (ir/vector_clones.h); this file
// is also compiled with -fno-math-errno (CMakeLists.txt).

namespace vjit {

using runtime::bias_correction;
using runtime::check_hyper;
using runtime::finite;

namespace {

// Elements per chunk of work: large enough that a thread's share pays for
// waking it (about 64 KB of gradient), small enough to balance.
constexpr int64_t kChunkElements = 16384;

int64_t rows_per_chunk(int64_t cols) { return std::max<int64_t>(1, kChunkElements / std::max<int64_t>(1, cols)); }

// "[row,col]" of element k of a matrix, "[k]" of a vector.
std::string element_name(const Shape& shape, int64_t k) {
  detail::Message where;
  if (shape.rank == 2) where << "[" << k / shape.cols() << "," << k % shape.cols() << "]";
  else where << "[" << k << "]";
  return where.str();
}

// --- vectorised kernels over contiguous ranges ---

// Σ g² in double with independent partial sums, so the loop vectorises instead
// of waiting on one long chain of dependent additions; the lanes are fixed by
// the source, so every ISA adds in the same order. Non-finite when any element
// is (float values cannot overflow a double square).
VJIT_VECTOR_CLONES double sum_of_squares(const float* __restrict g, int64_t n) {
  constexpr int64_t kLanes = 8;
  double partial[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) partial[l] += double(g[k + l]) * double(g[k + l]);
  for (; k < n; ++k) partial[0] += double(g[k]) * double(g[k]);
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace

// --- how a step runs ---

class Optimizer::Runner {
 public:
  explicit Runner(Optimizer& rule) : rule_(rule) {}

  /// The step of Optimizer::step (vjit/optimizer.h), with `state`, its chunks
  /// on `parallel` when given.
  void step(Model& model, const std::vector<std::vector<float>>& grads, const std::vector<GradientRows>& rows,
            runtime::ParallelFor* parallel, OptimizerState& state);
  /// Makes the state when needed, counts the step, calls begin_update; remembers how to undo it.
  void begin_step(const Model& model, OptimizerState& state, double sum_of_squares);
  void undo_step(OptimizerState& state);
  /// Whether the last begin_step made the state it stepped with.
  bool made_state() const { return record_.made_state; }

 private:
  /// A unit of work: a range of a parameter's elements (dense), or a run of its
  /// listed rows (row-sparse).
  struct Chunk {
    int32_t param = 0;
    bool by_rows = false;
    int64_t begin = 0, end = 0;    ///< dense: elements; by rows: the table rows the chunk updates
    int64_t first = 0, last = 0;   ///< by rows: its listed rows, indices into GradientRows::rows
    int64_t written = 0;           ///< elements written by the chunks before it (its place in the undo log)
  };
  /// The first non-finite value a chunk's update would write (element -1:
  /// none; element in the parameter), and the value there before the step.
  struct ChunkCheck {
    NonFiniteUpdate found;
    float before = 0;
  };
  /// What a step changes besides the parameters and slots, to undo it.
  struct StepRecord {
    int64_t steps = 0;        ///< steps() before the step
    double grad_norm = 0;     ///< last_grad_norm() before the step
    bool made_state = false;  ///< the state was made by the step; replaced_state_ holds the one it replaced
    int64_t step = 0;         ///< the state's step count the step reaches
  };

  /// Fills chunks_ for this step; returns the number of elements they read or update.
  int64_t plan_chunks(const Model& model, const std::vector<GradientRows>& rows);
  /// Runs fn(c) for every chunk, on `parallel` when the work is worth it.
  void for_each_chunk(runtime::ParallelFor* parallel, int64_t work, runtime::TaskRef fn);
  double chunk_sum_of_squares(const Chunk& chunk, const std::vector<float>& g, const GradientRows* rows,
                              int64_t cols) const;
  void update_chunk(const Chunk& chunk, float* w, float* const* state, const float* g, const GradientRows* rows,
                    int64_t cols, float grad_scale);
  /// Calls fn(g, begin, end) for each range of elements the chunk's update
  /// writes, in element order: g the gradient, or null for rows updated with
  /// a zero gradient (unlisted rows under dense updates).
  template <typename Fn>
  void for_each_update(const Chunk& chunk, const float* g, const GradientRows* rows, int64_t cols, Fn&& fn) const;
  /// The preview of a chunk's update (has_preview()).
  ChunkCheck preview_chunk(const Chunk& chunk, const float* w, float* const* state, const float* g,
                           const GradientRows* rows, int64_t cols, float grad_scale) const;
  /// The index of the first chunk whose check found a non-finite value, or the number of chunks.
  size_t first_failed_chunk() const;
  /// Copies the elements the chunk writes (the weights w, then each state slot)
  /// into its place in the undo log, or back from it.
  void save_chunk(const Chunk& chunk, const float* w, float* const* state, const GradientRows* rows, int64_t cols);
  void restore_chunk(const Chunk& chunk, float* w, float* const* state, const GradientRows* rows, int64_t cols);
  /// The first non-finite value among the elements the chunk wrote (the undo log has their old values).
  ChunkCheck check_chunk(const Chunk& chunk, const float* w, float* const* state, const GradientRows* rows,
                         int64_t cols) const;
  /// The update pass of a rule with a preview, and of one checked with the undo log.
  void update_previewed(Model& model, const std::vector<std::vector<float>>& grads,
                        const std::vector<GradientRows>& rows, runtime::ParallelFor* parallel, int64_t work,
                        float scale);
  void update_with_undo_log(Model& model, const std::vector<std::vector<float>>& grads,
                            const std::vector<GradientRows>& rows, runtime::ParallelFor* parallel, int64_t work,
                            float scale);
  /// Throws the UserError for the first failed chunk, after the step was undone.
  [[noreturn]] void throw_non_finite_update(const Model& model, const ChunkCheck& check, int param) const;
  /// Throws the UserError naming the first non-finite listed gradient value.
  [[noreturn]] void throw_non_finite(const Model& model, const std::vector<std::vector<float>>& grads,
                                     const std::vector<GradientRows>& rows) const;

  Optimizer& rule_;
  std::vector<float*> slot_pointers_;  ///< scratch: [param][slot] of the step's state
  std::vector<Chunk> chunks_;          ///< scratch, capacity kept between steps
  std::vector<double> partial_;        ///< per chunk: Σ g² of its listed elements
  std::vector<ChunkCheck> checks_;     ///< per chunk: what its update left
  std::vector<float> undo_;            ///< the undo log (rules without a preview): the old values of what the step writes
  StepRecord record_;                  ///< the last step's bookkeeping, to undo it
  OptimizerState replaced_state_;      ///< the state a step made a new one over, until the step succeeds
};

// --- Optimizer ---

Optimizer::Optimizer(float lr, float clip_norm)
    : lr_(lr), clip_norm_(clip_norm), runner_(std::make_unique<Runner>(*this)) {
  check_hyper(finite(lr) && lr > 0.0f, "Optimizer", "lr", lr, "a finite value > 0");
  check_hyper(finite(clip_norm) && clip_norm >= 0.0f, "Optimizer", "clip_norm", clip_norm,
              "a finite value >= 0 (0 = no clipping)");
}

Optimizer::~Optimizer() = default;

void Optimizer::step(Model& model, const std::vector<std::vector<float>>& grads) {
  static const std::vector<GradientRows> kAllDense;
  runner_->step(model, grads, kAllDense, nullptr, own_state_);
}

void Optimizer::step(Model& model, const std::vector<std::vector<float>>& grads,
                     const std::vector<GradientRows>& rows) {
  runner_->step(model, grads, rows, nullptr, own_state_);
}

void Optimizer::set_lr(float lr) {
  check_hyper(finite(lr) && lr > 0.0f, "Optimizer", "lr", lr, "a finite value > 0");
  lr_ = lr;
}

void Optimizer::reset() {
  steps_ = 0;
  last_grad_norm_ = 0.0;
  own_state_ = {};
  ++generation_;
}

bool Optimizer::made(const OptimizerState& state) const {
  return state.owner == this && state.generation == generation_ && !state.shapes.empty();
}

void Optimizer::adopt(OptimizerState& state) const {
  const size_t slots = size_t(state_slots());
  VJIT_USER_CHECK(state_slot_names().size() == slots,
                  "Optimizer::adopt: state_slot_names() gives " << state_slot_names().size() << " names for "
                                                                << slots << " state slots");
  VJIT_USER_CHECK(state.slots.size() == state.shapes.size() && !state.shapes.empty(),
                  "Optimizer::adopt: the state holds slots for " << state.slots.size() << " parameters and "
                                                                 << state.shapes.size() << " shapes");
  VJIT_USER_CHECK(state.steps >= 0, "Optimizer::adopt: the state's step count " << state.steps << " is negative");
  for (size_t p = 0; p < state.slots.size(); ++p) {
    VJIT_USER_CHECK(state.slots[p].size() == slots, "Optimizer::adopt: parameter " << p << " has "
                                                                                   << state.slots[p].size()
                                                                                   << " state slots, this "
                                                                                   << kind() << " optimizer uses "
                                                                                   << slots);
    for (const std::vector<float>& slot : state.slots[p])
      VJIT_USER_CHECK(int64_t(slot.size()) == state.shapes[p].numel(),
                      "Optimizer::adopt: a state slot of parameter " << p << " holds " << slot.size()
                                                                     << " values, its shape "
                                                                     << state.shapes[p].str() << " needs "
                                                                     << state.shapes[p].numel());
  }
  state.owner = this;
  state.generation = generation_;
}

std::vector<std::string> Optimizer::state_slot_names() const {
  std::vector<std::string> names;
  for (int k = 0; k < state_slots(); ++k) names.push_back("slot" + std::to_string(k));
  return names;
}

std::vector<std::pair<std::string, double>> Optimizer::hyper_parameters() const {
  return {{"lr", lr_}, {"clip_norm", clip_norm_}, {"dense_updates", dense_updates_ ? 1.0 : 0.0}};
}

void Optimizer::make_state(const Model& model, OptimizerState& state) const {
  state.slots.assign(size_t(model.size()), {});
  state.shapes.clear();
  for (int i = 0; i < model.size(); ++i) {
    state.slots[size_t(i)].assign(size_t(state_slots()), std::vector<float>(size_t(model.param(i).shape.numel()), 0.0f));
    state.shapes.push_back(model.param(i).shape);
  }
  state.steps = 0;
  state.owner = this;
  state.generation = generation_;
}

void Optimizer::validate(const Model& model, const std::vector<std::vector<float>>& grads,
                         const std::vector<GradientRows>& rows, const OptimizerState& state) const {
  VJIT_USER_CHECK(int(grads.size()) == model.size(), "Optimizer::step: got " << grads.size()
                                                                             << " gradients for a model with "
                                                                             << model.size() << " parameters");
  VJIT_USER_CHECK(rows.empty() || int(rows.size()) == model.size(),
                  "Optimizer::step: got " << rows.size() << " GradientRows for a model with " << model.size()
                                          << " parameters (one per parameter, or none for all dense)");
  if (made(state)) {
    bool same = int(state.shapes.size()) == model.size();
    for (int i = 0; same && i < model.size(); ++i) same = state.shapes[size_t(i)] == model.param(i).shape;
    VJIT_USER_CHECK(same, "Optimizer::step: the optimizer state was made for a model with "
                              << state.shapes.size()
                              << " parameters of other shapes; use one optimizer per model or call reset()");
  }
  for (int i = 0; i < model.size(); ++i) {
    const ParamData& p = model.param(i);
    const std::vector<float>& g = grads[size_t(i)];
    VJIT_USER_CHECK(int64_t(g.size()) == p.shape.numel(),
                    "Optimizer::step: gradient of parameter '" << p.name << "' has " << g.size()
                                                               << " values, the parameter has shape "
                                                               << p.shape.str() << " (" << p.shape.numel()
                                                               << " values)");
    if (rows.empty() || rows[size_t(i)].all) continue;
    const std::vector<int32_t>& listed = rows[size_t(i)].rows;
    const int64_t table_rows = p.shape.rows();
    for (size_t k = 0; k < listed.size(); ++k) {
      VJIT_USER_CHECK(listed[k] >= 0 && listed[k] < table_rows,
                      "Optimizer::step: GradientRows of parameter '" << p.name << "' lists row " << listed[k]
                                                                     << ", outside [0, " << table_rows
                                                                     << ") of its shape " << p.shape.str());
      VJIT_USER_CHECK(k == 0 || listed[k - 1] < listed[k],
                      "Optimizer::step: GradientRows of parameter '"
                          << p.name << "' must be sorted and unique, but row " << listed[k] << " follows row "
                          << listed[k - 1]);
    }
  }
}

int64_t Optimizer::Runner::plan_chunks(const Model& model, const std::vector<GradientRows>& rows) {
  // The most chunks a model of these shapes can need, so that the vector
  // reaches its final capacity on the first step.
  size_t bound = 0;
  for (int i = 0; i < model.size(); ++i) {
    const Shape& shape = model.param(i).shape;
    const int64_t by_elements = (shape.numel() + kChunkElements - 1) / kChunkElements;
    const int64_t per_chunk = rows_per_chunk(shape.cols());
    const int64_t by_rows = (shape.rows() + per_chunk - 1) / per_chunk;
    bound += size_t(std::max(by_elements, by_rows) + 1);
  }
  chunks_.reserve(bound);
  partial_.reserve(bound);
  checks_.reserve(bound);

  chunks_.clear();
  int64_t work = 0;
  for (int i = 0; i < model.size(); ++i) {
    if (model.param(i).frozen) continue;  // never updated, not in the norm
    const Shape& shape = model.param(i).shape;
    if (rows.empty() || rows[size_t(i)].all) {
      const int64_t numel = shape.numel();
      for (int64_t begin = 0; begin < numel; begin += kChunkElements) {
        Chunk c;
        c.param = i;
        c.begin = begin;
        c.end = std::min(numel, begin + kChunkElements);
        chunks_.push_back(c);
      }
      work += numel;
      continue;
    }
    const std::vector<int32_t>& listed = rows[size_t(i)].rows;
    const int64_t n = int64_t(listed.size());
    const int64_t cols = shape.cols();
    const int64_t per_chunk = rows_per_chunk(cols);
    if (rule_.dense_updates_) {
      // Every row of the table, in row ranges, each with the listed rows it holds.
      const int64_t table_rows = shape.rows();
      int64_t t = 0;
      for (int64_t begin = 0; begin < table_rows; begin += per_chunk) {
        Chunk c;
        c.param = i;
        c.by_rows = true;
        c.begin = begin;
        c.end = std::min(table_rows, begin + per_chunk);
        c.first = t;
        while (t < n && listed[size_t(t)] < c.end) ++t;
        c.last = t;
        chunks_.push_back(c);
      }
      work += shape.numel();
    } else {
      for (int64_t first = 0; first < n; first += per_chunk) {
        Chunk c;
        c.param = i;
        c.by_rows = true;
        c.first = first;
        c.last = std::min(n, first + per_chunk);
        c.begin = listed[size_t(c.first)];
        c.end = int64_t(listed[size_t(c.last - 1)]) + 1;
        chunks_.push_back(c);
      }
      work += n * cols;
    }
  }
  partial_.resize(chunks_.size());
  checks_.resize(chunks_.size());
  // Each chunk's place in the undo log: the elements the chunks before it write.
  int64_t written = 0;
  for (Chunk& c : chunks_) {
    c.written = written;
    const int64_t cols = model.param(c.param).shape.cols();
    written += !c.by_rows ? c.end - c.begin : rule_.dense_updates_ ? (c.end - c.begin) * cols : (c.last - c.first) * cols;
  }
  VJIT_INTERNAL_CHECK(written == work, "the chunks write " << written << " elements, the step " << work);
  return work;
}

void Optimizer::Runner::for_each_chunk(runtime::ParallelFor* parallel, int64_t work, runtime::TaskRef fn) {
  const int64_t n = int64_t(chunks_.size());
  if (parallel && n > 1 && work >= 2 * kChunkElements) {
    parallel->run(n, fn);
  } else {
    for (int64_t c = 0; c < n; ++c) fn(c);
  }
}

double Optimizer::Runner::chunk_sum_of_squares(const Chunk& chunk, const std::vector<float>& g, const GradientRows* rows,
                                       int64_t cols) const {
  if (!chunk.by_rows) return sum_of_squares(g.data() + chunk.begin, chunk.end - chunk.begin);
  double sum = 0.0;
  for (int64_t t = chunk.first; t < chunk.last; ++t)
    sum += sum_of_squares(g.data() + int64_t(rows->rows[size_t(t)]) * cols, cols);
  return sum;
}

template <typename Fn>
void Optimizer::Runner::for_each_update(const Chunk& chunk, const float* g, const GradientRows* rows, int64_t cols,
                                Fn&& fn) const {
  if (!chunk.by_rows) {
    fn(g, chunk.begin, chunk.end);
    return;
  }
  // Runs of consecutive listed rows are one call; under dense updates the rows
  // between them are updated with a zero gradient.
  const int32_t* listed = rows->rows.data();
  int64_t next = chunk.begin;  // the first row not updated yet
  for (int64_t t = chunk.first; t < chunk.last;) {
    const int64_t run_begin = listed[t];
    int64_t run_end = run_begin + 1;
    for (++t; t < chunk.last && listed[t] == run_end; ++t) ++run_end;
    if (rule_.dense_updates_ && next < run_begin) fn(nullptr, next * cols, run_begin * cols);
    fn(g, run_begin * cols, run_end * cols);
    next = run_end;
  }
  if (rule_.dense_updates_ && next < chunk.end) fn(nullptr, next * cols, chunk.end * cols);
}

void Optimizer::Runner::update_chunk(const Chunk& chunk, float* w, float* const* state, const float* g,
                             const GradientRows* rows, int64_t cols, float grad_scale) {
  for_each_update(chunk, g, rows, cols, [&](const float* gradient, int64_t begin, int64_t end) {
    rule_.update(chunk.param, w, state, gradient, begin, end, grad_scale);
  });
}

Optimizer::Runner::ChunkCheck Optimizer::Runner::preview_chunk(const Chunk& chunk, const float* w, float* const* state,
                                               const float* g, const GradientRows* rows, int64_t cols,
                                               float grad_scale) const {
  ChunkCheck check;
  for_each_update(chunk, g, rows, cols, [&](const float* gradient, int64_t begin, int64_t end) {
    if (check.found.element >= 0) return;
    check.found = rule_.preview(chunk.param, w, state, gradient, begin, end, grad_scale);
    if (check.found.element >= 0)
      check.before = (check.found.array == 0 ? w : state[check.found.array - 1])[check.found.element];
  });
  return check;
}

size_t Optimizer::Runner::first_failed_chunk() const {
  size_t c = 0;
  while (c < chunks_.size() && checks_[c].found.element < 0) ++c;
  return c;
}

void Optimizer::Runner::throw_non_finite(const Model& model, const std::vector<std::vector<float>>& grads,
                                 const std::vector<GradientRows>& rows) const {
  for (int i = 0; i < model.size(); ++i) {
    const ParamData& p = model.param(i);
    const std::vector<float>& g = grads[size_t(i)];
    const size_t cols = size_t(p.shape.cols());
    auto check = [&](size_t k) {
      if (finite(g[k])) return;
      throw UserError((detail::Message() << "Optimizer::step: non-finite gradient " << g[k] << " for parameter '"
                                         << p.name << "' at " << element_name(p.shape, int64_t(k))
                                         << "; the model was not updated")
                          .str());
    };
    if (rows.empty() || rows[size_t(i)].all) {
      for (size_t k = 0; k < g.size(); ++k) check(k);
    } else {
      for (int32_t row : rows[size_t(i)].rows)
        for (size_t k = size_t(row) * cols; k < size_t(row + 1) * cols; ++k) check(k);
    }
  }
  VJIT_INTERNAL_CHECK(false, "Optimizer::step: the sum of squares is not finite but every gradient value is");
}

void Optimizer::Runner::step(Model& model, const std::vector<std::vector<float>>& grads,
                             const std::vector<GradientRows>& rows, runtime::ParallelFor* parallel,
                             OptimizerState& state) {
  rule_.validate(model, grads, rows, state);  // throws before anything changes
  const int64_t work = plan_chunks(model, rows);
  auto rows_of = [&](int param) { return rows.empty() ? nullptr : &rows[size_t(param)]; };

  // Pass 1: Σ g² of the listed elements per chunk; non-finite iff one of them is.
  auto sum_chunk = [&](int64_t c) {
    const Chunk& chunk = chunks_[size_t(c)];
    const int64_t cols = model.param(chunk.param).shape.cols();
    partial_[size_t(c)] = chunk_sum_of_squares(chunk, grads[size_t(chunk.param)], rows_of(chunk.param), cols);
  };
  for_each_chunk(parallel, work, sum_chunk);
  double sum = 0.0;
  for (double p : partial_) sum += p;
  if (!std::isfinite(sum)) throw_non_finite(model, grads, rows);

  const float scale = rule_.clip_scale(sum);
  begin_step(model, state, sum);
  const size_t slots = size_t(rule_.state_slots());
  slot_pointers_.resize(size_t(model.size()) * slots);
  for (size_t p = 0; p < size_t(model.size()); ++p)
    for (size_t k = 0; k < slots; ++k) slot_pointers_[p * slots + k] = state.slots[p][k].data();
  try {
    if (rule_.has_preview()) update_previewed(model, grads, rows, parallel, work, scale);
    else update_with_undo_log(model, grads, rows, parallel, work, scale);
  } catch (...) {
    undo_step(state);
    throw;
  }
  replaced_state_ = OptimizerState{};  // frees a state this step replaced; allocates nothing
}

// Pass 2: every chunk's preview; pass 3, when all values stay finite: the
// updates, each chunk writing only its own elements.
void Optimizer::Runner::update_previewed(Model& model, const std::vector<std::vector<float>>& grads,
                                 const std::vector<GradientRows>& rows, runtime::ParallelFor* parallel, int64_t work,
                                 float scale) {
  const size_t slots = size_t(rule_.state_slots());
  auto preview_one = [&](int64_t c) {
    const Chunk& chunk = chunks_[size_t(c)];
    const ParamData& param = model.param(chunk.param);
    checks_[size_t(c)] = preview_chunk(chunk, param.value.data(), slot_pointers_.data() + size_t(chunk.param) * slots,
                                       grads[size_t(chunk.param)].data(), rows.empty() ? nullptr : &rows[size_t(chunk.param)],
                                       param.shape.cols(), scale);
  };
  for_each_chunk(parallel, work, preview_one);
  if (const size_t failed = first_failed_chunk(); failed < chunks_.size())
    throw_non_finite_update(model, checks_[failed], chunks_[failed].param);
  auto update_one = [&](int64_t c) {
    const Chunk& chunk = chunks_[size_t(c)];
    ParamData& param = model.param(chunk.param);
    update_chunk(chunk, param.value.data(), slot_pointers_.data() + size_t(chunk.param) * slots,
                 grads[size_t(chunk.param)].data(), rows.empty() ? nullptr : &rows[size_t(chunk.param)],
                 param.shape.cols(), scale);
  };
  for_each_chunk(parallel, work, update_one);
}

// Pass 2: each chunk saves the elements it writes to the undo log, updates
// them, then checks them while they are still in cache; when one is
// non-finite, every chunk copies its elements back.
void Optimizer::Runner::update_with_undo_log(Model& model, const std::vector<std::vector<float>>& grads,
                                     const std::vector<GradientRows>& rows, runtime::ParallelFor* parallel, int64_t work,
                                     float scale) {
  const size_t slots = size_t(rule_.state_slots());
  size_t log_floats = 0;  // sized once for the largest step this model can take
  for (int p = 0; p < model.size(); ++p) log_floats += size_t(model.param(p).shape.numel()) * (1 + slots);
  if (undo_.size() < log_floats) undo_.resize(log_floats);
  auto rows_of = [&](int param) { return rows.empty() ? nullptr : &rows[size_t(param)]; };
  auto update_one = [&](int64_t c) {
    const Chunk& chunk = chunks_[size_t(c)];
    ParamData& param = model.param(chunk.param);
    float* const* chunk_slots = slot_pointers_.data() + size_t(chunk.param) * slots;
    const int64_t cols = param.shape.cols();
    save_chunk(chunk, param.value.data(), chunk_slots, rows_of(chunk.param), cols);
    update_chunk(chunk, param.value.data(), chunk_slots, grads[size_t(chunk.param)].data(), rows_of(chunk.param),
                 cols, scale);
    checks_[size_t(c)] = check_chunk(chunk, param.value.data(), chunk_slots, rows_of(chunk.param), cols);
  };
  for_each_chunk(parallel, work, update_one);
  const size_t failed = first_failed_chunk();
  if (failed == chunks_.size()) return;
  auto restore_one = [&](int64_t c) {
    const Chunk& chunk = chunks_[size_t(c)];
    ParamData& param = model.param(chunk.param);
    restore_chunk(chunk, param.value.data(), slot_pointers_.data() + size_t(chunk.param) * slots,
                  rows_of(chunk.param), param.shape.cols());
  };
  for_each_chunk(parallel, work, restore_one);
  throw_non_finite_update(model, checks_[failed], chunks_[failed].param);
}

void Optimizer::Runner::save_chunk(const Chunk& chunk, const float* w, float* const* state, const GradientRows* rows,
                           int64_t cols) {
  const int arrays = 1 + rule_.state_slots();
  float* log = undo_.data() + chunk.written * arrays;
  for_each_update(chunk, nullptr, rows, cols, [&](const float*, int64_t begin, int64_t end) {
    for (int a = 0; a < arrays; ++a) {
      std::memcpy(log, (a == 0 ? w : state[a - 1]) + begin, size_t(end - begin) * sizeof(float));
      log += end - begin;
    }
  });
}

void Optimizer::Runner::restore_chunk(const Chunk& chunk, float* w, float* const* state, const GradientRows* rows,
                              int64_t cols) {
  const int arrays = 1 + rule_.state_slots();
  const float* log = undo_.data() + chunk.written * arrays;
  for_each_update(chunk, nullptr, rows, cols, [&](const float*, int64_t begin, int64_t end) {
    for (int a = 0; a < arrays; ++a) {
      std::memcpy((a == 0 ? w : state[a - 1]) + begin, log, size_t(end - begin) * sizeof(float));
      log += end - begin;
    }
  });
}

Optimizer::Runner::ChunkCheck Optimizer::Runner::check_chunk(const Chunk& chunk, const float* w, float* const* state,
                                             const GradientRows* rows, int64_t cols) const {
  const int arrays = 1 + rule_.state_slots();
  const float* log = undo_.data() + chunk.written * arrays;
  ChunkCheck check;
  for_each_update(chunk, nullptr, rows, cols, [&](const float*, int64_t begin, int64_t end) {
    const int64_t n = end - begin;
    if (check.found.element < 0) {
      // The first element of the range where any array is non-finite; the weights first at a tie.
      int64_t first = n;
      for (int a = 0; a < arrays; ++a) {
        const int64_t k = runtime::first_non_finite((a == 0 ? w : state[a - 1]) + begin, first);
        if (k >= 0 && k < first) {
          first = k;
          check.found.array = a;
        }
      }
      if (first < n) {
        const float* array = check.found.array == 0 ? w : state[check.found.array - 1];
        check.found.element = begin + first;
        check.found.value = array[begin + first];
        check.before = log[check.found.array * n + first];
      }
    }
    log += arrays * n;
  });
  return check;
}

void Optimizer::Runner::begin_step(const Model& model, OptimizerState& state, double sum_of_squares) {
  record_ = StepRecord{rule_.steps_, rule_.last_grad_norm_, !rule_.made(state), 0};
  replaced_state_ = OptimizerState{};  // one a device step replaced and did not cancel
  if (record_.made_state) {
    replaced_state_ = std::move(state);
    rule_.make_state(model, state);
  }
  rule_.last_grad_norm_ = std::sqrt(sum_of_squares);
  ++rule_.steps_;
  record_.step = ++state.steps;
  rule_.begin_update(state.steps);
}

void Optimizer::Runner::undo_step(OptimizerState& state) {
  rule_.steps_ = record_.steps;
  rule_.last_grad_norm_ = record_.grad_norm;
  if (record_.made_state) {
    state = std::move(replaced_state_);
    replaced_state_ = OptimizerState{};
  } else {
    --state.steps;
    if (state.steps > 0) rule_.begin_update(state.steps);  // the per-step constants of the last step taken
  }
  record_ = {};
}

void Optimizer::Runner::throw_non_finite_update(const Model& model, const ChunkCheck& check, int param) const {
  const ParamData& p = model.param(param);
  const NonFiniteUpdate& found = check.found;
  detail::Message what;
  if (found.array > 0) what << "the " << rule_.state_slot_name(found.array - 1) << " of ";
  what << "parameter '" << p.name << "' at " << element_name(p.shape, found.element);
  throw UserError((detail::Message() << "Optimizer::step: step " << record_.step << " would make " << what.str()
                                     << " non-finite: " << found.value << " (it is " << check.before
                                     << "); nothing was changed: the model and the optimizer state are as before "
                                        "the step (lower the learning rate, clip the gradients or check the inputs)")
                      .str());
}

float Optimizer::clip_scale(double sum_of_squares) const {
  const double norm = std::sqrt(sum_of_squares);
  float scale = 1.0f;
  if (clip_norm_ > 0.0f && norm > double(clip_norm_)) {
    scale = float(double(clip_norm_) / norm);
    // Guard against float rounding pushing the clipped norm just above the bound.
    while (scale > 0.0f && double(scale) * norm > double(clip_norm_)) scale = std::nextafter(scale, 0.0f);
  }
  return scale;
}

// --- what the executors use (runtime/optimizer_access.h) ---

namespace runtime {

void OptimizerAccess::step(Optimizer& optimizer, Model& model, const std::vector<std::vector<float>>& grads,
                           const std::vector<GradientRows>& rows, ParallelFor* parallel, OptimizerState* state) {
  optimizer.runner_->step(model, grads, rows, parallel, state ? *state : optimizer.own_state_);
}

DeviceUpdate OptimizerAccess::device_rule(const Optimizer& optimizer) {
  DeviceUpdate rule;
  if (typeid(optimizer) == typeid(SGD)) {
    const auto& sgd = static_cast<const SGD&>(optimizer);
    rule.kind = sgd.momentum() > 0.0f ? DeviceUpdate::Kind::SgdMomentum : DeviceUpdate::Kind::Sgd;
    rule.lr = sgd.lr();
    rule.weight_decay = sgd.weight_decay();
    rule.momentum = sgd.momentum();
  } else if (typeid(optimizer) == typeid(Adam)) {
    const auto& adam = static_cast<const Adam&>(optimizer);
    rule.kind = DeviceUpdate::Kind::Adam;
    rule.lr = adam.lr();
    rule.weight_decay = adam.weight_decay();
    rule.beta1 = adam.beta1();
    rule.beta2 = adam.beta2();
    rule.eps = adam.eps();
    rule.decay = 1.0f - adam.lr() * adam.weight_decay();
  }
  return rule;
}

DeviceUpdate OptimizerAccess::begin_device_step(Optimizer& optimizer, const Model& model, OptimizerState& state,
                                                double sum_of_squares) {
  DeviceUpdate rule = device_rule(optimizer);
  VJIT_INTERNAL_CHECK(rule.kind != DeviceUpdate::Kind::None && std::isfinite(sum_of_squares),
                      "begin_device_step needs a rule with a device form and a finite norm");
  rule.scale = optimizer.clip_scale(sum_of_squares);
  optimizer.runner_->begin_step(model, state, sum_of_squares);
  rule.state_made = optimizer.runner_->made_state();
  if (rule.kind == DeviceUpdate::Kind::Adam) {
    rule.correction1 = bias_correction(rule.beta1, state.steps);
    rule.correction2 = bias_correction(rule.beta2, state.steps);
  }
  return rule;
}

void OptimizerAccess::cancel_device_step(Optimizer& optimizer, OptimizerState& state) {
  optimizer.runner_->undo_step(state);
}

}  // namespace runtime

}  // namespace vjit
