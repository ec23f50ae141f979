#pragma once
// ED-Batch's learned batching policy (ICML'23, section 2): a finite-state
// machine whose state is an encoding of the frontier's vertex types and whose
// transition is the type to run next, learned per program by tabular Q-learning
// on a sampled batch of its training data.
//
// Reward (eq. 1): r(S_t, a_t) = -1 + alpha * |Frontier_a(G_t)| / |Frontier(G_t^a)|
// (definitions in scheduler/schedule.h). The -1 charges every task; the second
// term prefers a type all of whose "next level" is already ready.
//
// State encodings. The paper's (base, max, sort) name only which types are on
// the frontier and in what proportion. Measured here, that is too little to
// beat the ratio heuristic on TreeLSTM-2type and lattices at all: an FSM
// learned on the very batch it then schedules (sort, 2000 episodes) needs 31.1
// tasks per SST batch of 64 against ratio's 30.4, and 176.1 against 174.6 on
// the real lattices, because states that need different choices share one key
// (appendix A.4 suggests adding graph information to the state). The default
// encoding, `critical`, is sort plus one cheap bit per type: whether the type
// holds a ready vertex of the greatest height, i.e. lies on the critical path
// of what remains (scheduler/schedule.h). The heights come out of the pass
// that lists each vertex's parents (agenda needs a pass of its own for its
// depths), and the rest of a step is as cheap as with sort.
//
// At scheduling time a step with one type on the frontier is forced; any other
// costs one encoding of the frontier's types (packed into 64 bits) and one hash
// lookup. A state the table does not decide (never seen, or an action not on
// the frontier, from a hand-edited file) falls back, counted in
// Schedule::fsm_fallbacks:
//   critical          to the state's critical type: the first marked type of
//                     its key (the most common of the types holding a ready
//                     vertex of the greatest height). This is "highest level
//                     first" with ED-Batch's "majority type" on ties; it costs
//                     nothing more, and it is also the policy the learner
//                     starts from and deviates from only where that is
//                     validated (below).
//   base, max, sort   to the ratio heuristic, which the reward distils. Its
//                     statistics are built at a schedule's first fallback over
//                     the vertices not yet run, so a schedule without fallbacks
//                     does not pay for them.
//
// Learning: Q starts at 0 (optimistic: rewards are below 0 for alpha < 1); the
// behaviour policy is epsilon-greedy, breaking equal Q values by the fallback
// (so exploration starts from it); N-step targets bootstrap with
// max_a Q(S_{t+N}, a). Episodes cycle over the training batch and `resamples`
// bootstrap resamples of it (instances drawn with replacement), so the values
// average over batch compositions instead of fitting one batch's exact
// sequence of frontiers. Every `check_every` episodes the greedy policy
// (argmax over the actions tried; ties: the fallback's choice, else the lowest
// type) is run on `validation_resamples` other resamples, drawn in turn from
// the two halves of the instances (a random split), and the one with the
// fewest tasks in total is kept. For the critical encoding the kept policy's
// departures from the fallback are then checked one by one, and dropped unless
// removing them costs validation tasks; and all are dropped unless, on the
// resamples of each half alike, they beat the fallback alone by `confidence`
// standard errors of the paired per-resample differences. Measured: a
// departure that saves a task on the one training batch loses as often as not
// on unseen batches (SST trees); one that only some of the 32 instances favour
// lost on unseen batches too (2 of 20 training sets of the built-in two-type
// trees, until the halves were checked separately); those kept save ~4 tasks
// per batch of 64 on the real lattices (18 of 20 training sets).
// With resamples = validation_resamples = 0 this is the paper's learner: every
// episode on the training batch, the best greedy policy on it kept.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "scheduler/schedule.h"
#include "vjit/batching.h"

namespace vjit::scheduler {

// How the frontier G_t is encoded into a state (ED-Batch section 2.3):
//   base      the set of types on the frontier;
//   max       base plus the most common type on the frontier (ties: lowest index);
//   sort      the types on the frontier ordered by their count, most common first
//             (ties: lowest index). The paper finds sort the best of these three;
//   critical  sort, each type marked when it holds a ready vertex of the
//             greatest height among the ready vertices (see the top of this file).
enum class StateEncoding { Base, Max, Sort, Critical };

const char* encoding_name(StateEncoding encoding);
StateEncoding parse_encoding(const std::string& name);  // UserError lists valid names
// Whether the encoding needs FrontierState::track_heights.
inline bool encoding_uses_heights(StateEncoding encoding) { return encoding == StateEncoding::Critical; }

// Writes a frontier's state key as text: types in decimal, comma separated;
// `max` appends "|<type>", `critical` appends "*" to each marked type. E.g.
// sort "1,0" (more 1s than 0s on the frontier); critical "1,0*" (and only type 0
// holds a ready vertex of the greatest height).
class StateEncoder {
 public:
  explicit StateEncoder(StateEncoding encoding) : encoding_(encoding) {}
  // Reuses key's storage, so a scheduling loop does not allocate per step.
  void encode(const scheduler::FrontierState& state, std::string& key);
  // The same state packed into 64 bits (pack_state_key of its key), for the
  // scheduler's lookups; false when it does not fit.
  bool encode_packed(const scheduler::FrontierState& state, uint64_t& code);
  // Critical encoding: the first marked type of the state last encoded (the
  // fallback's choice); -1 for the other encodings.
  int critical_type() const { return critical_type_; }

 private:
  void collect(const scheduler::FrontierState& state);

  StateEncoding encoding_;
  std::vector<std::pair<int, int>> present_;  // (count, type) of the frontier's types, in key order
  std::vector<char> marked_;                  // critical: per entry of present_
  int most_ = -1;                             // max: the most common type
  int critical_type_ = -1;
};

// A state key packed into 64 bits: one byte per type in key order,
// (type + 1) * 2 + (1 if marked), then max's "|type" as one more byte; nullopt
// when it does not fit (more than 8 bytes, or a type above 126).
std::optional<uint64_t> pack_state_key(std::string_view key);

// The first marked type of a critical key ("2,1*,0*" -> 1); -1 if none.
int critical_type_of_key(std::string_view key);

struct FsmOptions {
  StateEncoding encoding = StateEncoding::Critical;
  double alpha = 0.5;          // weight of the sufficient-condition term of eq. 1 (> 0)
  // N-step bootstrapping: a reward reaches N earlier decisions. 16, not 4: on
  // lattices a choice between the character and word cells pays off a dozen
  // tasks later, and with N = 4 some seeds never learn it.
  int n_step = 16;
  double epsilon = 0.1;        // exploration probability of the epsilon-greedy behaviour
  double learning_rate = 0.2;  // Q-learning step size
  double gamma = 1.0;          // discount; 1 minimises the plain number of tasks
  int episodes = 1000;         // most training episodes (full runs of a batch)
  int check_every = 50;        // greedy evaluation period; learning stops at the lower bound
  int sample_size = 32;        // instances drawn from the training data to learn on
  int resamples = 7;           // bootstrap resamples the episodes cycle over, besides the batch
  int validation_resamples = 16;  // others, half from each half of the instances, to compare on (0: the batch)
  double confidence = 2.0;     // critical: standard errors by which departures must beat the fallback
  uint64_t seed = 1;           // learning is deterministic given the seed
  // Keep only the states the kept greedy policy visits on the training batch,
  // dropping those only exploration reached, whose values come from a few
  // noisy returns: another batch reaching them then falls back. Off by
  // default, as in the paper (the whole Q table is kept). For base, max and
  // sort, fallbacks cost scheduling time (the ratio statistics, about the cost
  // of the ratio policy itself); on TreeLSTM-like trees with per-node outputs
  // the pruned sort FSM saves ~3% of the tasks on unseen batches
  // (tests/test_fsm.cpp).
  bool prune_to_greedy_path = false;
};

// What learning did, for logs and benchmarks.
struct FsmTraining {
  double seconds = 0.0;   // wall time of learn()
  int episodes = 0;       // episodes run (fewer than options.episodes on early stop)
  int instances = 0;      // instances in the training batch
  int tasks = 0;          // tasks of the kept policy on the training batch
  int lower_bound = 0;    // the training batch's lower bound
  int fallbacks = 0;      // fallbacks of the kept policy on the training batch
  // Over the validation resamples (all 0 when there are none):
  int validation_tasks = 0;           // the kept policy's tasks
  int validation_fallback_tasks = 0;  // the tasks of the fallback alone (an empty table)
  int validation_lower_bound = 0;     // the sum of their lower bounds
  int departures = 0;     // critical: states whose action is not their critical type
};

class FsmPolicy {
 public:
  // Learns on `sample_size` instances of `data` drawn with the seed (all of
  // them when there are fewer); see the top of this file. Learning stops once
  // the kept policy reaches the lower bound (on every validation resample, or
  // on the batch when there are none).
  static FsmPolicy learn(const GraphBatch& data, int num_types, const FsmOptions& options = {});

  // A small versioned JSON file. `signature` identifies the program (vertex
  // types, arities, shapes); load() rejects a file whose signature or format
  // version differs, or that is malformed, naming the file and what differs.
  void save(const std::string& path, const std::string& signature) const;
  static FsmPolicy load(const std::string& path, const std::string& expected_signature);

  // 2: the critical encoding, each state's action stored explicitly, the
  // resampling options and validation results.
  static constexpr int kFormatVersion = 2;

  StateEncoding encoding() const { return encoding_; }
  int num_types() const { return num_types_; }
  size_t num_states() const { return q_.size(); }
  const FsmOptions& options() const { return options_; }
  const FsmTraining& training() const { return training_; }
  double learning_seconds() const { return training_.seconds; }

  // The FSM's transition: the type to run in that state; -1 for a state the
  // table does not hold.
  int action(const std::string& state_key) const {
    const auto it = best_.find(state_key);
    return it == best_.end() ? -1 : it->second;
  }
  // The same for a packed key (pack_state_key).
  int action(uint64_t packed_key) const {
    const auto it = packed_best_.find(packed_key);
    return it == packed_best_.end() ? -1 : it->second;
  }

  struct ActionValue {
    int type = 0;
    double q = 0.0;
    int visits = 0;  // updates this Q value received while learning
  };
  using QTable = std::unordered_map<std::string, std::vector<ActionValue>>;
  const QTable& q_table() const { return q_; }

  // A policy from a Q table: each state's action is argmax_a Q(state, a) over
  // the actions listed (ties: for critical, the state's critical type; else
  // the lowest type).
  FsmPolicy(StateEncoding encoding, int num_types, QTable q, FsmOptions options = {}, FsmTraining training = {});
  // A policy with each listed state's action given (the learner, load()); every
  // state of `actions` must be in `q`.
  FsmPolicy(StateEncoding encoding, int num_types, QTable q, std::unordered_map<std::string, int> actions,
            FsmOptions options, FsmTraining training);

 private:
  StateEncoding encoding_;
  int num_types_;
  QTable q_;
  void pack_transitions();

  std::unordered_map<std::string, int> best_;  // the transitions
  std::unordered_map<uint64_t, int> packed_best_;  // those whose keys pack
  FsmOptions options_;
  FsmTraining training_;
};

// One step of the fsm policy as make_schedule takes it: the only type on the
// frontier when there is one; else encodes `state` and returns the table's
// action, or, setting `fell_back`, the encoding's fallback
// (critical: the state's critical type; base, max, sort: the ratio heuristic,
// whose statistics this builds at the first fallback). `key` is scratch space
// for states whose key does not pack. The critical encoding needs
// state.tracks_heights().
int fsm_step(const FsmPolicy& fsm, StateEncoder& encoder, scheduler::FrontierState& state, std::string& key,
             bool& fell_back);

// The learned table inside the public handle vjit::FsmPolicy (vjit/batching.h),
// whose users do not see the scheduler's type.
class FsmPolicyAccess {
 public:
  static const FsmPolicy& table(const vjit::FsmPolicy& handle) { return *handle.policy_; }
};

}  // namespace vjit::scheduler
