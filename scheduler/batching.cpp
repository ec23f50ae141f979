// The public face of the batching policies (include/vjit/batching.h).
#include "vjit/batching.h"

#include <sstream>
#include <utility>

#include "scheduler/fsm.h"
#include "scheduler/schedule.h"
#include "vjit/error.h"

namespace vjit {

FsmPolicy::FsmPolicy(std::shared_ptr<const scheduler::FsmPolicy> policy) : policy_(std::move(policy)) {
  VJIT_INTERNAL_CHECK(policy_, "FsmPolicy: no policy");
}

FsmPolicy FsmPolicy::learn(const GraphBatch& batch, int num_types) {
  return FsmPolicy(std::make_shared<const scheduler::FsmPolicy>(scheduler::FsmPolicy::learn(batch, num_types)));
}

void FsmPolicy::save(const std::string& path, const std::string& signature) const { policy_->save(path, signature); }

FsmPolicy FsmPolicy::load(const std::string& path, const std::string& signature) {
  return FsmPolicy(std::make_shared<const scheduler::FsmPolicy>(scheduler::FsmPolicy::load(path, signature)));
}

FsmPolicyInfo FsmPolicy::info() const {
  const scheduler::FsmTraining& t = policy_->training();
  FsmPolicyInfo info;
  info.encoding = scheduler::encoding_name(policy_->encoding());
  info.num_types = policy_->num_types();
  info.states = int64_t(policy_->num_states());
  info.learning_seconds = t.seconds;
  info.episodes = t.episodes;
  info.instances = t.instances;
  info.tasks = t.tasks;
  info.lower_bound = t.lower_bound;
  info.departures = t.departures;
  return info;
}

std::string FsmPolicy::describe() const {
  const FsmPolicyInfo i = info();
  std::ostringstream out;
  out << "fsm policy (" << i.encoding << " encoding, " << i.num_types << " types): " << i.states << " states, "
      << i.departures << " departures";
  if (i.episodes > 0)
    out << "; learned in " << i.learning_seconds << " s, " << i.episodes << " episodes on " << i.instances
        << " instances: " << i.tasks << " tasks, lower bound " << i.lower_bound;
  return out.str();
}

ScheduleSummary summarize_schedule(const GraphBatch& batch, int num_types, std::string_view policy,
                                   const FsmPolicy* fsm) {
  const scheduler::Policy parsed = scheduler::parse_policy(std::string(policy));
  const scheduler::FsmPolicy* table = fsm ? &scheduler::FsmPolicyAccess::table(*fsm) : nullptr;
  const scheduler::Schedule s = scheduler::make_schedule(batch, num_types, parsed, table);
  ScheduleSummary summary;
  summary.tasks = int(s.tasks.size());
  summary.lower_bound = s.lower_bound;
  summary.fsm_fallbacks = s.fsm_fallbacks;
  summary.schedule_seconds = s.schedule_seconds;
  return summary;
}

}  // namespace vjit
