#pragma once
// ED-Batch's learned batching policy (ICML'23, section 2): a finite-state
// machine whose state is an encoding of the frontier's vertex types and whose
// transition is the type to run next, learned per program by tabular Q-learning
// on one sampled batch of its training data.
//
// Reward (eq. 1): r(S_t, a_t) = -1 + alpha * |Frontier_a(G_t)| / |Frontier(G_t^a)|
// (definitions in scheduler/schedule.h). The -1 charges every task; the second
// term prefers a type all of whose "next level" is already ready.
//
// At scheduling time a step costs one encoding of the frontier's types and one
// hash lookup. A state the learner never saw (or an action that is not on the
// frontier, from a hand-edited file) falls back to the ratio heuristic: the
// learner's reward is that heuristic's score, so the FSM is its distillation and
// the fallback decides as the FSM would most likely have; it is counted in
// Schedule::fsm_fallbacks. The ratio statistics are built at a schedule's first
// fallback, over the vertices not yet run, so a schedule without fallbacks
// pays nothing for them (and is faster than agenda, which needs every depth).
//
// Learning: Q starts at 0 (optimistic: rewards are below 0 for alpha < 1);
// the behaviour policy is epsilon-greedy, breaking equal Q values by the ratio
// heuristic; N-step targets bootstrap with max_a Q(S_{t+N}, a); the deployed
// policy is argmax over the actions tried in each state (ties: lowest type).
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "scheduler/schedule.h"

namespace vjit {

// How the frontier G_t is encoded into a state (ED-Batch section 2.3):
//   base  the set of types on the frontier;
//   max   base plus the most common type on the frontier (ties: lowest index);
//   sort  the types on the frontier ordered by their count, most common first
//         (ties: lowest index). The paper finds sort the best.
enum class StateEncoding { Base, Max, Sort };

const char* encoding_name(StateEncoding encoding);
StateEncoding parse_encoding(const std::string& name);  // UserError lists valid names

// Writes a frontier's state key as text: types in decimal, comma separated;
// `max` appends "|<type>". E.g. sort "1,0" (more 1s than 0s on the frontier).
class StateEncoder {
 public:
  explicit StateEncoder(StateEncoding encoding) : encoding_(encoding) {}
  // Reuses key's storage, so a scheduling loop does not allocate per step.
  void encode(const sched::FrontierState& state, std::string& key);

 private:
  StateEncoding encoding_;
  std::vector<std::pair<int, int>> present_;  // (count, type) of the frontier's types
};

struct FsmOptions {
  StateEncoding encoding = StateEncoding::Sort;
  double alpha = 0.5;          // weight of the sufficient-condition term of eq. 1 (> 0)
  int n_step = 4;              // N-step bootstrapping: a reward reaches N earlier decisions
  double epsilon = 0.1;        // exploration probability of the epsilon-greedy behaviour
  double learning_rate = 0.2;  // Q-learning step size
  double gamma = 1.0;          // discount; 1 minimises the plain number of tasks
  int episodes = 1000;         // most training episodes (full runs of the batch)
  int check_every = 50;        // greedy evaluation period; learning stops at the lower bound
  int sample_size = 32;        // instances drawn from the training data to learn on
  uint64_t seed = 1;           // learning is deterministic given the seed
  // Keep only the states the kept greedy policy visits on the training batch,
  // dropping those only exploration reached, whose values come from a few
  // noisy returns: another batch reaching them then falls back to the ratio
  // heuristic. Off by default, as in the paper (the whole Q table is kept),
  // because fallbacks cost scheduling time (the ratio statistics, about the
  // cost of the ratio policy itself). On TreeLSTM-like trees with per-node
  // outputs it saves ~3% of the tasks on unseen batches and removes the
  // batches where the fsm lost to agenda (tests/test_fsm.cpp).
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
};

class FsmPolicy {
 public:
  // Learns on `sample_size` instances of `data` drawn with the seed (all of
  // them when there are fewer). Every `check_every` episodes the greedy policy
  // is run on the training batch; the best one is kept (see
  // FsmOptions::prune_to_greedy_path), and learning stops when it reaches the
  // lower bound.
  static FsmPolicy learn(const GraphBatch& data, int num_types, const FsmOptions& options = {});

  // A small versioned JSON file. `signature` identifies the program (vertex
  // types, arities, shapes); load() rejects a file whose signature or format
  // version differs, or that is malformed, naming the file and what differs.
  void save(const std::string& path, const std::string& signature) const;
  static FsmPolicy load(const std::string& path, const std::string& expected_signature);

  static constexpr int kFormatVersion = 1;

  StateEncoding encoding() const { return encoding_; }
  int num_types() const { return num_types_; }
  size_t num_states() const { return q_.size(); }
  const FsmOptions& options() const { return options_; }
  const FsmTraining& training() const { return training_; }
  double learning_seconds() const { return training_.seconds; }

  // argmax_a Q(state, a) over the actions tried in that state; -1 for a state
  // never seen.
  int action(const std::string& state_key) const {
    const auto it = best_.find(state_key);
    return it == best_.end() ? -1 : it->second;
  }

  struct ActionValue {
    int type = 0;
    double q = 0.0;
    int visits = 0;  // updates this Q value received while learning
  };
  using QTable = std::unordered_map<std::string, std::vector<ActionValue>>;
  const QTable& q_table() const { return q_; }

  // A policy from a Q table (used by the learner and by load()).
  FsmPolicy(StateEncoding encoding, int num_types, QTable q, FsmOptions options = {}, FsmTraining training = {});

 private:
  StateEncoding encoding_;
  int num_types_;
  QTable q_;
  std::unordered_map<std::string, int> best_;  // argmax of q_, built once
  FsmOptions options_;
  FsmTraining training_;
};

}  // namespace vjit
