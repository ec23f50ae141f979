#pragma once
// Batching policies from outside an Engine: ED-Batch's learned FSM policy as
// an opaque handle (learn it on a batch, save it with the program's signature,
// load it back, describe it), and what a policy makes of a batch, for tools
// that compare policies without running F.
//
//   vjit::FsmPolicy fsm = vjit::FsmPolicy::learn(batch, program.num_types());
//   fsm.save("tree.fsm.json", program.signature_string());
//   vjit::ScheduleSummary s = vjit::summarize_schedule(batch, program.num_types(), "fsm", &fsm);
//
// An Engine whose options().policy is "fsm" learns, loads and saves its own
// (Engine::learn_fsm_policy, load_fsm_policy, save_fsm_policy, set_fsm_policy).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "vjit/graph.h"

namespace vjit {

namespace scheduler {
class FsmPolicy;        // the learned table, scheduler/fsm.h
class FsmPolicyAccess;  // vjit's own code reaches the table through it (scheduler/fsm.h)
}  // namespace scheduler

/// What learning a policy did (all 0 for a policy built from a table).
struct FsmPolicyInfo {
  std::string encoding;         ///< of the frontier into a state: "critical", "sort", "max" or "base"
  int num_types = 0;            ///< vertex types of the program it was learned for
  int64_t states = 0;           ///< states in its Q table
  double learning_seconds = 0;  ///< time spent learning
  int episodes = 0;             ///< learning episodes run
  int instances = 0;            ///< instances of the batch it learned on
  int tasks = 0;                ///< its tasks on that batch
  int lower_bound = 0;          ///< that batch's lower bound on tasks
  int departures = 0;           ///< states whose action is not the critical-path choice
};

/// ED-Batch's learned batching policy (ICML'23): a finite-state machine over
/// the types on the frontier, learned by Q-learning. A cheap handle: copies
/// share one immutable policy.
class FsmPolicy {
 public:
  /// Learns on up to 32 instances of `batch` (a sample of the training data),
  /// whose vertex types lie in [0, num_types) (Program::num_types()).
  static FsmPolicy learn(const GraphBatch& batch, int num_types);
  /// A small versioned JSON file. `signature` is Program::signature_string():
  /// load rejects a file saved for another program, of another format version
  /// or malformed, naming the file and what differs.
  void save(const std::string& path, const std::string& signature) const;
  static FsmPolicy load(const std::string& path, const std::string& signature);  ///< the policy save() wrote (see save)

  FsmPolicyInfo info() const;  ///< what learning it did
  /// One line, e.g. "fsm policy (critical encoding, 3 types): 41 states, 2
  /// departures; learned in 0.35 s, 300 episodes on 32 instances: 27 tasks,
  /// lower bound 25".
  std::string describe() const;

 private:
  friend class scheduler::FsmPolicyAccess;
  explicit FsmPolicy(std::shared_ptr<const scheduler::FsmPolicy> policy);
  std::shared_ptr<const scheduler::FsmPolicy> policy_;
};

/// What a batching policy makes of one batch.
struct ScheduleSummary {
  int tasks = 0;                ///< batched evaluations of F (the backward pass replays them)
  int lower_bound = 0;          ///< ED-Batch's lower bound: no schedule has fewer tasks
  int fsm_fallbacks = 0;        ///< fsm: steps its table did not decide
  double schedule_seconds = 0;  ///< time to choose the tasks
};

/// Schedules `batch` (vertex types in [0, num_types)) with `policy`, one of
/// option_values::policy (vjit/options.h); "fsm" needs `fsm`. Throws UserError
/// for an unknown policy, an out-of-range type or child, or a cycle.
ScheduleSummary summarize_schedule(const GraphBatch& batch, int num_types, std::string_view policy,
                                   const FsmPolicy* fsm = nullptr);

}  // namespace vjit
