#pragma once
// Optimizers update a Model's parameters from their gradients. grads[i] is the
// gradient of parameter i (Model::param(i)), row-major, numel() floats.
//
// Every step, before anything is updated:
//   1. the gradients are checked: one per parameter, each of the parameter's size,
//      all finite — otherwise UserError naming the parameter (and [row,col]), and
//      the model and the optimizer state are left unchanged;
//   2. with clip_norm > 0, all gradients are scaled by min(1, clip_norm / ‖g‖),
//      ‖g‖ the global L2 norm over every parameter, so the norm used is ≤ clip_norm.
// Then each parameter is updated by the rule of the subclass, and
//   3. no weight or state value is left NaN or ±Inf. An update that would
//      overflow (huge weights, gradients or lr) is a UserError naming the
//      parameter (or its state slot, e.g. Adam's second moment v), the first
//      such element [row,col] in parameter and element order, the value it
//      would have had and the one it has, and the step (the state's step count
//      it would have reached). The model and the state (moments, step count,
//      steps(), last_grad_norm(); a state the step would have made) are then
//      bitwise as before the step, and a later step goes on from there.
// How: SGD and Adam preview the step — a pass of the same float operations as
// the update, storing nothing, that checks every value it would store — and
// update only when every value stays finite (validate, then apply: nothing to
// undo, no extra memory). A rule of the user's own (no preview()) is checked
// after its update against an undo log: each chunk copies the elements it
// writes (weights and state slots) into the log, updates them, and checks
// them while they are in cache; on a failure every chunk copies its elements
// back. The log holds (1 + state slots) floats per parameter element, kept
// between steps. Cost: the preview reads the weights, state and gradients once
// more, and the update is memory-bound. perf/optimizer_bench (Adam, a 20000 ×
// 256 table and four 256 × 512 matrices; 2-core Zen 3, medians of 7
// alternating runs): dense steps 7.48 → 12.30 ms on one thread (1.65×), 4.70 →
// 8.06 ms on two; the 1280 rows a batch touches 1.37 → 2.07 ms (1.52×), 0.58 →
// 0.89 ms. In an SST Tree-LSTM training step (hidden 256, batch 64) the
// optimizer went from 1.12 to 1.90 ms of 64–67 ms (README "Non-finite values").

// Row-sparse gradients. An embedding table's gradient is non-zero only in the
// rows of the tokens a batch looked up, a few hundred of tens of thousands. The
// second step() overload takes, per parameter, a GradientRows saying which rows
// may be non-zero; the check, the norm and the update then touch only those rows,
// so a step costs what the batch touched, not the vocabulary. The Engine passes
// them for every table read by pull_embedding (Engine::train_step).
//
// Untouched rows: lazy by default. A row that is not listed is not updated at
// all: its weights, its momentum / Adam moments stay as they are, and weight
// decay is not applied to it — TensorFlow's LazyAdam, DyNet's lookup parameters.
// set_dense_updates(true) instead updates every element of every parameter as if
// the unlisted rows had a zero gradient (their moments decay, their weights keep
// moving and decay), exactly torch.optim.Adam / torch.optim.SGD on the dense
// gradient; the check and the norm still read only the listed rows.
//
// Threads. A step splits its work into chunks of about 16k elements (ranges of a
// parameter, or groups of listed rows), the same chunks however many threads run
// them; in Engine::train_step the chunks run on the engine's threads
// (VJIT_THREADS), in a step() of the user's on the calling thread. Results do
// not depend on the number of threads: every element is updated by the same
// float operations, and the norm is summed in double, per chunk, the chunk
// partials then added in chunk order.
//
// State. What an optimizer remembers between steps (momentum, Adam moments,
// the step count t) is an OptimizerState. A standalone step() uses the
// optimizer's own; an Engine keeps one in its executor's parameter store, next
// to the parameters and gradients it belongs to, and steps with it — so one
// optimizer object driving two engines keeps two separate states. A
// state is made (zeros, t = 0) on the first step an optimizer takes with it, and
// made again after reset() or when another optimizer used it last. State and
// scratch are allocated on that first step; later steps allocate nothing
// (unless they throw). A later step with a model of other parameter shapes is a
// UserError (call reset() to start over).
//
// Update loops are vectorised for the CPU they run on (AVX-512, AVX2 or SSE2,
// chosen at load time). On a GPU (VJIT_DEVICE=cuda) the engine updates with
// SGD and Adam on the device, with the same float operations; every other rule,
// a subclass of SGD or Adam included, runs on the host (docs/gpu.md).
//
// A rule of your own derives from Optimizer and implements update() (and, to be
// checked before it writes, preview()); state_slots(), state_slot_names() and
// kind() describe its state for errors and checkpoints.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "vjit/model.h"

namespace vjit {

namespace runtime {
class OptimizerAccess;  // runtime/optimizer_access.h: the engine's executors step on their threads and devices
}  // namespace runtime

/// Which rows of one parameter's gradient may be non-zero. The parameter is read
/// as a Shape::rows() × Shape::cols() matrix (a vector is one row). all = true
/// (the default): every element may be. all = false: only the rows listed in
/// `rows`, which must be sorted, unique and in [0, rows()); every other row of the
/// gradient is taken to be zero and is never read.
struct GradientRows {
  bool all = true;            ///< every row may be non-zero
  std::vector<int32_t> rows;  ///< when !all: the rows that may be
};

/// An optimizer's memory between steps: per parameter, its state slots (Adam: m
/// and v; SGD with momentum: the velocity), each as many floats as the
/// parameter; the number of steps taken with it (Adam's t); the shapes it was
/// made for; and which optimizer made it (its identity and reset count), so a
/// state left by another optimizer or before a reset() is made again.
struct OptimizerState {
  std::vector<std::vector<std::vector<float>>> slots;  ///< [param][slot]
  std::vector<Shape> shapes;   ///< the parameters' shapes it was made for
  int64_t steps = 0;           ///< steps taken with it
  const void* owner = nullptr; ///< the optimizer that made it
  uint64_t generation = 0;     ///< that optimizer's reset() count when it made it
};

/// What a preview found: the first element whose update would leave a
/// non-finite value (element -1: none), which array holds it (0: the weights,
/// 1 + k: state slot k) and the value it would have.
struct NonFiniteUpdate {
  int64_t element = -1;  ///< in the parameter; -1: none
  int array = 0;         ///< 0: the weights, 1 + k: state slot k
  float value = 0;       ///< the non-finite value it would have
};

/// The base class of every optimizer: the checks, clipping, state and threads
/// of a step (above); a rule implements update() (and, to be checked before
/// writing, preview()).
class Optimizer {
 public:
  virtual ~Optimizer();
  /// Not copied: a state remembers the optimizer that made it (made(), adopt()).
  /// @{
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  /// @}

  /// One dense update on the calling thread: every element of every parameter.
  /// Throws UserError (leaving the model and the state untouched) on a mismatch
  /// in count or size, a non-finite gradient, or an update that would leave a
  /// non-finite weight or state value (above).
  void step(Model& model, const std::vector<std::vector<float>>& grads);
  /// One update where rows[i] says which rows of grads[i] may be non-zero (see
  /// GradientRows; an empty `rows` means every parameter is dense), on the
  /// calling thread with the optimizer's own state: Engine::gradients() and
  /// Engine::gradient_rows() after a backward() of your own. Also throws
  /// UserError for rows that are not one per parameter, not sorted and unique,
  /// or out of range.
  void step(Model& model, const std::vector<std::vector<float>>& grads, const std::vector<GradientRows>& rows);

  /// Forgets the state (moments, step count): its own, and every state it used
  /// before, which is made again on its next step.
  void reset();

  /// Whether this optimizer made `state` since its last reset(): its next step
  /// with it continues it instead of making it again.
  bool made(const OptimizerState& state) const;
  /// Makes `state` this optimizer's as if it had made it, so that its next step
  /// continues from state.steps and the slots as they are (a loaded checkpoint,
  /// vjit/checkpoint.h). Throws UserError, leaving `state` unchanged, unless it
  /// holds state_slot_names().size() slots per parameter, each of its shape's size.
  void adopt(OptimizerState& state) const;

  /// What a checkpoint records of the optimizer. kind(): "sgd", "adam",
  /// "adagrad", or "custom" (a subclass of the user's may name itself). state_slot_names():
  /// one name per state slot, PyTorch's where it has one ("momentum_buffer";
  /// "exp_avg", "exp_avg_sq"; "sum"), else "slot0", "slot1", ... hyper_parameters():
  /// name and value of every setting of the rule (lr, clip_norm, dense_updates
  /// as 0 or 1, and the subclass's).
  /// @{
  virtual std::string kind() const { return "custom"; }
  virtual std::vector<std::string> state_slot_names() const;
  virtual std::vector<std::pair<std::string, double>> hyper_parameters() const;
  /// @}

  float lr() const { return lr_; }  ///< the learning rate
  void set_lr(float lr);  ///< for schedules; must be finite and > 0
  float clip_norm() const { return clip_norm_; }  ///< the global gradient norm clipped to (0: no clipping)
  /// Steps taken since construction or reset(), with any state.
  int64_t steps() const { return steps_; }
  /// The global L2 norm of the last step's gradients, before clipping.
  double last_grad_norm() const { return last_grad_norm_; }

  /// false (the default): rows a step's GradientRows leaves out are not updated
  /// (lazy: weights, moments, no decay). true: every element of every parameter
  /// is updated, the unlisted rows with a zero gradient (torch.optim semantics).
  /// @{
  bool dense_updates() const { return dense_updates_; }
  void set_dense_updates(bool dense) { dense_updates_ = dense; }
  /// @}

 protected:
  Optimizer(float lr, float clip_norm);  ///< throws UserError unless lr is finite and > 0 and clip_norm >= 0

  /// How many state slots (arrays of the parameter's size) each parameter needs.
  virtual int state_slots() const { return 0; }
  /// What state slot `slot` holds, for error messages ("velocity", "second moment v").
  virtual const char* state_slot_name(int /*slot*/) const { return "state slot"; }
  /// Called once per step after the check, before any update(); t counts this
  /// step in the state being updated (1 on its first). For per-step constants
  /// (Adam's bias corrections).
  virtual void begin_update(int64_t /*t*/) {}
  /// Updates elements [begin, end) of parameter `index`, whose values are w[0,
  /// numel) and whose state slots are state[0..state_slots()), with the gradient
  /// g[begin, end) times `grad_scale` (the clipping factor, 1 when not clipped)
  /// — or with a zero gradient when g is null (rows a GradientRows leaves out,
  /// under dense_updates()). Called concurrently from several threads for
  /// disjoint ranges: it must touch only those elements of w and of its state,
  /// and must not allocate.
  virtual void update(int index, float* w, float* const* state, const float* g, int64_t begin, int64_t end,
                      float grad_scale) = 0;
  /// A rule whose has_preview() is true is checked before anything is written:
  /// preview() computes what update() would write for the same arguments (the
  /// same float operations), writes nothing, and returns the first element of
  /// [begin, end) where a weight or state value would be non-finite. A rule
  /// without one (the default: a rule of the user's own) is checked after its
  /// update instead, against an undo log of the old values. Called
  /// concurrently like update(); must not allocate.
  /// @{
  virtual bool has_preview() const { return false; }
  virtual NonFiniteUpdate preview(int /*index*/, const float* /*w*/, float* const* /*state*/, const float* /*g*/,
                                  int64_t /*begin*/, int64_t /*end*/, float /*grad_scale*/) const {
    return {};
  }
  /// @}

 private:
  friend class runtime::OptimizerAccess;
  /// How a step runs: its chunks of work, their checks, the undo log, and
  /// what the last step changed besides the parameters (runtime/optimizer.cpp).
  class Runner;

  /// Throws UserError on a wrong count, size or state shape, or bad rows.
  void validate(const Model& model, const std::vector<std::vector<float>>& grads,
                const std::vector<GradientRows>& rows, const OptimizerState& state) const;
  /// The clipping factor for gradients of this squared norm (1 when not clipped).
  float clip_scale(double sum_of_squares) const;
  /// Makes `state` for `model`: zeros, t = 0, owned by this optimizer.
  void make_state(const Model& model, OptimizerState& state) const;

  float lr_;
  float clip_norm_;
  bool dense_updates_ = false;
  int64_t steps_ = 0;
  double last_grad_norm_ = 0.0;
  OptimizerState own_state_;      ///< a standalone step's
  uint64_t generation_ = 0;       ///< reset() count: states made before are made again
  std::unique_ptr<Runner> runner_;
};

/// Stochastic gradient descent with optional (heavy-ball) momentum:
///   g ← g + weight_decay·w          (classic L2 penalty, coupled to the gradient)
///   v ← momentum·v + g              (v = g when momentum = 0)
///   w ← w − lr·v
/// Rows a step's GradientRows leaves out keep their weights and their velocity
/// (no momentum step, no decay) unless dense_updates() is set, which applies the
/// rule to them with g = 0 like torch.optim.SGD.
class SGD : public Optimizer {
 public:
  /// Throws UserError for a setting out of range, naming it.
  explicit SGD(float lr, float momentum = 0.0f, float weight_decay = 0.0f, float clip_norm = 0.0f);
  std::string kind() const override { return "sgd"; }
  std::vector<std::string> state_slot_names() const override;  ///< "momentum_buffer" with momentum
  std::vector<std::pair<std::string, double>> hyper_parameters() const override;  ///< lr, clip_norm, dense_updates, momentum, weight_decay

  /// The settings given to the constructor.
  /// @{
  float momentum() const { return momentum_; }
  float weight_decay() const { return weight_decay_; }
  /// @}

 protected:
  int state_slots() const override { return momentum_ > 0.0f ? 1 : 0; }  ///< the velocity
  const char* state_slot_name(int) const override { return "velocity"; }
  void update(int index, float* w, float* const* state, const float* g, int64_t begin, int64_t end,
              float grad_scale) override;
  bool has_preview() const override { return true; }
  /// The rule's preview (see Optimizer::preview).
  NonFiniteUpdate preview(int index, const float* w, float* const* state, const float* g, int64_t begin, int64_t end,
                          float grad_scale) const override;

 private:
  float momentum_;
  float weight_decay_;
};

/// Adam with decoupled weight decay (AdamW, Loshchilov & Hutter): the decay is not
/// added to the gradient, so it is not rescaled by the adaptive denominator:
///   w ← w − lr·weight_decay·w
///   m ← β1·m + (1−β1)·g,   v ← β2·v + (1−β2)·g²
///   w ← w − lr·m̂/(√v̂ + eps),  m̂ = m/(1−β1ᵗ), v̂ = v/(1−β2ᵗ)
/// With weight_decay = 0 this is plain Adam. The first step moves every weight with
/// a non-zero gradient by lr·|g|/(|g|+eps) ≈ lr.
///
/// For row-sparse gradients this is LazyAdam (TensorFlow Addons): a row a step's
/// GradientRows leaves out keeps its weights and its moments m, v unchanged, and
/// is not decayed; t still counts every step. With dense_updates() set, those
/// rows are updated with g = 0 instead (m, v decay, the weights keep moving by the
/// remaining momentum and decay): torch.optim.AdamW on the dense gradient.
class Adam : public Optimizer {
 public:
  /// Throws UserError for a setting out of range, naming it.
  explicit Adam(float lr = 1e-3f, float beta1 = 0.9f, float beta2 = 0.999f, float eps = 1e-8f,
                float weight_decay = 0.0f, float clip_norm = 0.0f);
  std::string kind() const override { return "adam"; }
  std::vector<std::string> state_slot_names() const override;  ///< "exp_avg", "exp_avg_sq"
  std::vector<std::pair<std::string, double>> hyper_parameters() const override;  ///< lr, clip_norm, dense_updates, beta1, beta2, eps, weight_decay

  /// The settings given to the constructor.
  /// @{
  float beta1() const { return beta1_; }
  float beta2() const { return beta2_; }
  float eps() const { return eps_; }
  float weight_decay() const { return weight_decay_; }
  /// @}

 protected:
  int state_slots() const override { return 2; }  ///< m, v
  const char* state_slot_name(int slot) const override { return slot == 0 ? "first moment m" : "second moment v"; }
  void begin_update(int64_t t) override;
  void update(int index, float* w, float* const* state, const float* g, int64_t begin, int64_t end,
              float grad_scale) override;
  bool has_preview() const override { return true; }
  /// The rule's preview (see Optimizer::preview).
  NonFiniteUpdate preview(int index, const float* w, float* const* state, const float* g, int64_t begin, int64_t end,
                          float grad_scale) const override;

 private:
  float beta1_;
  float beta2_;
  float eps_;
  float weight_decay_;
  float correction1_ = 1.0f, correction2_ = 1.0f;  ///< 1 − β1ᵗ, 1 − β2ᵗ of the current step
};

/// AdaGrad (Duchi et al. 2011), as torch.optim.Adagrad with lr_decay 0 and
/// initial_accumulator_value 0:
///   g ← g + weight_decay·w          (classic L2 penalty, coupled to the gradient)
///   G ← G + g²                       (the state slot "sum", per element)
///   w ← w − lr·g/(√G + eps)
/// The first step moves every weight with a non-zero gradient by about lr.
/// Rows a step's GradientRows leaves out keep their weights and G (lazy, like
/// LazyAdam) unless dense_updates() is set, which applies the rule with g = 0.
/// No device form: the CUDA executor updates with it on the host.
class AdaGrad : public Optimizer {
 public:
  /// Throws UserError for a setting out of range, naming it.
  explicit AdaGrad(float lr = 1e-2f, float eps = 1e-10f, float weight_decay = 0.0f, float clip_norm = 0.0f);
  std::string kind() const override { return "adagrad"; }
  std::vector<std::string> state_slot_names() const override;  ///< "sum"
  std::vector<std::pair<std::string, double>> hyper_parameters() const override;  ///< lr, clip_norm, dense_updates, eps, weight_decay

  /// The settings given to the constructor.
  /// @{
  float eps() const { return eps_; }
  float weight_decay() const { return weight_decay_; }
  /// @}

 protected:
  int state_slots() const override { return 1; }  ///< G
  const char* state_slot_name(int) const override { return "sum of squares G"; }
  void update(int index, float* w, float* const* state, const float* g, int64_t begin, int64_t end,
              float grad_scale) override;
  bool has_preview() const override { return true; }
  /// The rule's preview (see Optimizer::preview).
  NonFiniteUpdate preview(int index, const float* w, float* const* state, const float* g, int64_t begin, int64_t end,
                          float grad_scale) const override;

 private:
  float eps_;
  float weight_decay_;
};

}  // namespace vjit
