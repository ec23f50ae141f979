#include "scheduler/fsm.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unordered_set>

#include "io/atomic_file.h"
#include "vjit/error.h"

namespace vjit::scheduler {

namespace {
constexpr std::array<std::pair<StateEncoding, const char*>, 4> kEncodingNames{{
    {StateEncoding::Base, "base"},
    {StateEncoding::Max, "max"},
    {StateEncoding::Sort, "sort"},
    {StateEncoding::Critical, "critical"},
}};
constexpr const char* kFormatName = "vjit-fsm-policy";
// More vertex types than any program has: a loaded file's num_types is bounded by it.
constexpr int kMaxTypes = 1 << 16;

void append_int(std::string& out, int value) {
  if (value >= 0 && value < 10) {
    out.push_back(char('0' + value));
    return;
  }
  char buffer[16];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  out.append(buffer, result.ptr);
}
}  // namespace

const char* encoding_name(StateEncoding encoding) {
  for (const auto& [value, name] : kEncodingNames)
    if (value == encoding) return name;
  VJIT_INTERNAL_CHECK(false, "unknown StateEncoding value " << int(encoding));
}

StateEncoding parse_encoding(const std::string& name) {
  for (const auto& [value, known] : kEncodingNames)
    if (name == known) return value;
  throw UserError("unknown FSM state encoding '" + name + "'; valid encodings: base, max, sort, critical");
}

// ---------------------------------------------------------------- encoding

void StateEncoder::collect(const scheduler::FrontierState& state) {
  present_.clear();
  for (int type = 0; type < state.num_types(); ++type)
    if (state.num_ready(type) > 0) present_.emplace_back(state.num_ready(type), type);
  most_ = -1;
  if (encoding_ == StateEncoding::Max && !present_.empty())  // max_element keeps the first (lowest type) on ties
    most_ = std::max_element(present_.begin(), present_.end(), [](const auto& a, const auto& b) {
              return a.first < b.first;
            })->second;
  if (encoding_ == StateEncoding::Sort || encoding_ == StateEncoding::Critical) {
    // Most common first, ties by type: an insertion sort (a few types; present_
    // is already in type order).
    for (size_t i = 1; i < present_.size(); ++i) {
      const auto entry = present_[i];
      size_t j = i;
      for (; j > 0 && present_[j - 1].first < entry.first; --j) present_[j] = present_[j - 1];
      present_[j] = entry;
    }
  }
  critical_type_ = -1;
  marked_.assign(present_.size(), 0);
  if (encoding_ == StateEncoding::Critical) {
    VJIT_INTERNAL_CHECK(state.tracks_heights(), "the critical encoding needs FrontierState::track_heights");
    int top = -1;  // the greatest height among the ready vertices
    for (const auto& entry : present_) top = std::max(top, state.max_ready_height(entry.second));
    for (size_t i = 0; i < present_.size(); ++i) {
      marked_[i] = state.max_ready_height(present_[i].second) == top;
      if (marked_[i] && critical_type_ < 0) critical_type_ = present_[i].second;
    }
  }
}

void StateEncoder::encode(const scheduler::FrontierState& state, std::string& key) {
  collect(state);
  key.clear();
  for (size_t i = 0; i < present_.size(); ++i) {
    if (i) key.push_back(',');
    append_int(key, present_[i].second);
    if (marked_[i]) key.push_back('*');
  }
  if (most_ >= 0) {
    key.push_back('|');
    append_int(key, most_);
  }
}

bool StateEncoder::encode_packed(const scheduler::FrontierState& state, uint64_t& code) {
  collect(state);
  const size_t bytes = present_.size() + (most_ >= 0);
  if (bytes > 8) return false;
  code = 0;
  for (size_t i = 0; i < present_.size(); ++i) {
    if (present_[i].second > 126) return false;
    code |= uint64_t((present_[i].second + 1) * 2 + marked_[i]) << (8 * i);
  }
  if (most_ >= 0) {
    if (most_ > 126) return false;
    code |= uint64_t((most_ + 1) * 2) << (8 * present_.size());
  }
  return true;
}

std::optional<uint64_t> pack_state_key(std::string_view key) {
  uint64_t code = 0;
  size_t bytes = 0;
  int value = -1;
  bool mark = false;
  auto flush = [&]() {
    if (value < 0 || value > 126 || bytes == 8) return false;
    code |= uint64_t((value + 1) * 2 + mark) << (8 * bytes++);
    value = -1;
    mark = false;
    return true;
  };
  for (char c : key) {
    if (c >= '0' && c <= '9') {
      value = (value < 0 ? 0 : value * 10) + (c - '0');
      if (value > 126) return std::nullopt;
    } else if (c == '*') {
      mark = true;
    } else if (c == ',' || c == '|') {
      if (!flush()) return std::nullopt;
    } else {
      return std::nullopt;
    }
  }
  if (!flush()) return std::nullopt;
  return code;
}

int critical_type_of_key(std::string_view key) {
  int value = 0;
  for (char c : key) {
    if (c >= '0' && c <= '9') {
      value = value * 10 + (c - '0');
    } else if (c == '*') {
      return value;
    } else {
      value = 0;
    }
  }
  return -1;
}

// ------------------------------------------------------------------ policy

FsmPolicy::FsmPolicy(StateEncoding encoding, int num_types, QTable q, FsmOptions options, FsmTraining training)
    : encoding_(encoding), num_types_(num_types), q_(std::move(q)), options_(options), training_(training) {
  best_.reserve(q_.size());
  for (const auto& [state, actions] : q_) {
    const int preferred = encoding == StateEncoding::Critical ? critical_type_of_key(state) : -1;
    const ActionValue* best = nullptr;
    for (const ActionValue& action : actions) {
      if (!best || action.q > best->q) {
        best = &action;
      } else if (action.q == best->q && best->type != preferred &&
                 (action.type == preferred || action.type < best->type)) {
        best = &action;
      }
    }
    if (best) best_.emplace(state, best->type);
  }
  pack_transitions();
}

void FsmPolicy::pack_transitions() {
  packed_best_.reserve(best_.size());
  for (const auto& [state, type] : best_)
    if (const auto code = pack_state_key(state)) packed_best_.emplace(*code, type);
}

FsmPolicy::FsmPolicy(StateEncoding encoding, int num_types, QTable q, std::unordered_map<std::string, int> actions,
                     FsmOptions options, FsmTraining training)
    : encoding_(encoding),
      num_types_(num_types),
      q_(std::move(q)),
      best_(std::move(actions)),
      options_(options),
      training_(training) {
  for (const auto& [state, type] : best_)
    VJIT_INTERNAL_CHECK(q_.contains(state), "FSM action for state '" << state << "', which has no Q values");
  pack_transitions();
}

int fsm_step(const FsmPolicy& fsm, StateEncoder& encoder, scheduler::FrontierState& state, std::string& key,
             bool& fell_back) {
  // One type on the frontier: the choice is forced, whatever the table says.
  int only = -1;
  for (int type = 0; type < state.num_types(); ++type) {
    if (state.num_ready(type) == 0) continue;
    if (only >= 0) {
      only = -1;
      break;
    }
    only = type;
  }
  fell_back = false;
  if (only >= 0) return only;
  uint64_t code = 0;
  int type = -1;
  if (encoder.encode_packed(state, code)) {
    type = fsm.action(code);
  } else {
    encoder.encode(state, key);
    type = fsm.action(key);
  }
  fell_back = !(type >= 0 && type < state.num_types() && state.num_ready(type) > 0);
  if (!fell_back) return type;
  if (fsm.encoding() == StateEncoding::Critical) return encoder.critical_type();
  // The ratio heuristic, which the FSM's reward distils. Its statistics are
  // built only now, so a fully covered batch never pays for them.
  state.track_type_frontiers();
  return scheduler::choose_ratio(state);
}

// ----------------------------------------------------------------- learning

namespace {

// splitmix64: tiny, and the same sequence on every platform and standard
// library, so a seed names one learned policy everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int below(int n) { return int(next() % uint64_t(n)); }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

void check_options(const FsmOptions& o, int num_types) {
  VJIT_USER_CHECK(num_types >= 1, "FSM learning needs at least one vertex type (got " << num_types << ")");
  VJIT_USER_CHECK(o.alpha > 0 && std::isfinite(o.alpha), "FsmOptions::alpha must be positive (got " << o.alpha << ")");
  VJIT_USER_CHECK(o.n_step >= 1, "FsmOptions::n_step must be at least 1 (got " << o.n_step << ")");
  VJIT_USER_CHECK(o.epsilon >= 0 && o.epsilon <= 1, "FsmOptions::epsilon must be in [0, 1] (got " << o.epsilon << ")");
  VJIT_USER_CHECK(o.learning_rate > 0 && o.learning_rate <= 1,
                  "FsmOptions::learning_rate must be in (0, 1] (got " << o.learning_rate << ")");
  VJIT_USER_CHECK(o.gamma > 0 && o.gamma <= 1, "FsmOptions::gamma must be in (0, 1] (got " << o.gamma << ")");
  VJIT_USER_CHECK(o.episodes >= 1, "FsmOptions::episodes must be at least 1 (got " << o.episodes << ")");
  VJIT_USER_CHECK(o.check_every >= 1, "FsmOptions::check_every must be at least 1 (got " << o.check_every << ")");
  VJIT_USER_CHECK(o.sample_size >= 1, "FsmOptions::sample_size must be at least 1 (got " << o.sample_size << ")");
  VJIT_USER_CHECK(o.resamples >= 0, "FsmOptions::resamples must not be negative (got " << o.resamples << ")");
  VJIT_USER_CHECK(o.validation_resamples >= 0,
                  "FsmOptions::validation_resamples must not be negative (got " << o.validation_resamples << ")");
  VJIT_USER_CHECK(o.confidence >= 0 && std::isfinite(o.confidence),
                  "FsmOptions::confidence must not be negative (got " << o.confidence << ")");
}

// `size` distinct instances of `data`, in their original order.
GraphBatch sample_instances(const GraphBatch& data, int size, Rng& rng) {
  const int n = int(data.samples.size());
  std::vector<int> index(n);
  for (int i = 0; i < n; ++i) index[i] = i;
  for (int i = 0; i < size; ++i) std::swap(index[i], index[i + rng.below(n - i)]);  // partial Fisher-Yates
  index.resize(size);
  std::sort(index.begin(), index.end());
  GraphBatch batch;
  batch.samples.reserve(size);
  for (int i : index) batch.samples.push_back(data.samples[i]);
  return batch;
}

// As many instances as `batch` has, drawn with replacement from those of
// `pool` (indices into the batch): a bootstrap resample, in index order.
GraphBatch resample_instances(const GraphBatch& batch, const std::vector<int>& pool, Rng& rng) {
  const int n = int(batch.samples.size());
  std::vector<int> index(n);
  for (int& i : index) i = pool[rng.below(int(pool.size()))];
  std::sort(index.begin(), index.end());
  GraphBatch resample;
  resample.samples.reserve(n);
  for (int i : index) resample.samples.push_back(batch.samples[i]);
  return resample;
}

// A batch the learner runs: its graph and the state of a run of it.
struct Environment {
  Environment(const GraphBatch* batch_, std::unique_ptr<GraphBatch> owned_, int num_types, StateEncoding encoding)
      : owned(std::move(owned_)),
        batch(owned ? owned.get() : batch_),
        graph(*batch, num_types, encoding_uses_heights(encoding)),
        state(graph),
        lower_bound(scheduler::lower_bound(graph, scheduler::topological_order(graph))) {
    if (encoding_uses_heights(encoding)) state.track_heights(graph.heights());
  }
  std::unique_ptr<GraphBatch> owned;  // resamples
  const GraphBatch* batch;
  scheduler::FlatBatch graph;
  scheduler::FrontierState state;
  int lower_bound;
};

// The policy run on one batch, as make_schedule runs it.
struct GreedyRun {
  int tasks = 0;
  int fallbacks = 0;
  std::unordered_set<std::string> states;  // states decided by the table
};

GreedyRun run_greedy(const FsmPolicy& policy, Environment& env) {
  GreedyRun run;
  StateEncoder encoder(policy.encoding());
  std::string key;
  std::vector<int> batch;
  scheduler::FrontierState& state = env.state;
  state.reset();
  while (!state.done()) {
    if (!state.has_ready()) state.throw_cycle();
    bool fell_back = false;
    const int type = fsm_step(policy, encoder, state, key, fell_back);
    if (fell_back) {
      ++run.fallbacks;
    } else {
      encoder.encode(state, key);
      run.states.insert(key);
    }
    state.take_ready(type, batch);
    state.execute(batch);
    ++run.tasks;
  }
  return run;
}

// Tasks of `policy` on each environment.
std::vector<int> tasks_on(const FsmPolicy& policy, const std::vector<std::unique_ptr<Environment>>& envs) {
  std::vector<int> tasks;
  for (const auto& env : envs) tasks.push_back(run_greedy(policy, *env).tasks);
  return tasks;
}

int sum(const std::vector<int>& values) {
  int total = 0;
  for (int v : values) total += v;
  return total;
}

// Tabular Q-learning with N-step bootstrapping, the environment being
// Algorithm 1: a state is the encoded frontier, an action a type on it. The
// episodes cycle over the training batch and its resamples.
class QLearner {
 public:
  QLearner(const GraphBatch& batch, int num_types, const FsmOptions& options)
      : options_(options), num_types_(num_types), encoder_(options.encoding), rng_(options.seed) {
    Rng resampler(options.seed ^ 0x9E3779B97F4A7C15ull);  // separate stream from the behaviour's
    const int n = int(batch.samples.size());
    std::vector<int> all(n);
    for (int i = 0; i < n; ++i) all[i] = i;
    episodes_.push_back(std::make_unique<Environment>(&batch, nullptr, num_types, options.encoding));
    for (int i = 0; i < options.resamples; ++i)
      episodes_.push_back(std::make_unique<Environment>(
          nullptr, std::make_unique<GraphBatch>(resample_instances(batch, all, resampler)), num_types,
          options.encoding));
    // The validation resamples alternate between the two halves of the
    // instances (a random split; one group when there is one instance).
    std::vector<int> shuffled = all;
    for (int i = n - 1; i > 0; --i) std::swap(shuffled[i], shuffled[resampler.below(i + 1)]);
    std::vector<std::vector<int>> halves;
    if (n >= 2) {
      halves.emplace_back(shuffled.begin(), shuffled.begin() + n / 2);
      halves.emplace_back(shuffled.begin() + n / 2, shuffled.end());
    } else {
      halves.push_back(all);
    }
    for (int i = 0; i < options.validation_resamples; ++i) {
      const int half = i % int(halves.size());
      validation_.push_back(std::make_unique<Environment>(
          nullptr, std::make_unique<GraphBatch>(resample_instances(batch, halves[half], resampler)), num_types,
          options.encoding));
      validation_half_.push_back(half);
    }
    for (auto& env : episodes_) env->state.track_type_frontiers();  // the reward needs |Frontier(G_t^a)|
  }

  void run_episode(int episode);
  // The greedy policy: each state's action is argmax_a Q over the actions
  // tried (ties: the fallback's choice where the state names it, else the
  // lowest type).
  FsmPolicy greedy_policy() const;

  Environment& training_batch() { return *episodes_.front(); }
  const std::vector<std::unique_ptr<Environment>>& validation() const { return validation_; }
  // Which half of the instances each validation resample was drawn from.
  const std::vector<int>& validation_half() const { return validation_half_; }

 private:
  struct StateValues {
    std::vector<int> legal;  // the types on the frontier in this state
    std::vector<double> q;   // per type; 0 until tried (optimistic: rewards are < 0 mostly)
    std::vector<int> visits;
  };
  struct Step {
    StateValues* values;
    int action;
    double reward;
  };

  StateValues& current_values(const scheduler::FrontierState& state);
  int behaviour_action(const StateValues& values, const scheduler::FrontierState& state);
  void update(const Step& step, double target);

  FsmOptions options_;
  int num_types_;
  std::vector<std::unique_ptr<Environment>> episodes_, validation_;
  std::vector<int> validation_half_;
  StateEncoder encoder_;
  Rng rng_;
  std::unordered_map<std::string, StateValues> table_;
  std::string key_;
  std::vector<int> batch_;
  std::vector<Step> steps_;
};

QLearner::StateValues& QLearner::current_values(const scheduler::FrontierState& state) {
  encoder_.encode(state, key_);
  auto [it, inserted] = table_.try_emplace(key_);
  StateValues& values = it->second;
  if (inserted) {
    for (int type = 0; type < state.num_types(); ++type)
      if (state.num_ready(type) > 0) values.legal.push_back(type);
    values.q.assign(state.num_types(), 0.0);
    values.visits.assign(state.num_types(), 0);
  }
  return values;
}

int QLearner::behaviour_action(const StateValues& values, const scheduler::FrontierState& state) {
  if (rng_.uniform() < options_.epsilon) return values.legal[rng_.below(int(values.legal.size()))];
  // Greedy; equal Q values (e.g. untried actions) are broken by the fallback's
  // choice, so exploration starts from the policy the FSM falls back to.
  if (options_.encoding == StateEncoding::Critical) {
    int best = encoder_.critical_type();  // of the state just encoded
    for (int type : values.legal)
      if (values.q[type] > values.q[best]) best = type;
    return best;
  }
  int best = -1;
  for (int type : values.legal) {
    if (best < 0 || values.q[type] > values.q[best]) {
      best = type;
    } else if (values.q[type] == values.q[best] &&
               int64_t(state.num_ready(type)) * state.type_frontier(best) >
                   int64_t(state.num_ready(best)) * state.type_frontier(type)) {
      best = type;
    }
  }
  return best;
}

void QLearner::update(const Step& step, double target) {
  double& q = step.values->q[step.action];
  q += options_.learning_rate * (target - q);
  ++step.values->visits[step.action];
}

void QLearner::run_episode(int episode) {
  const int n = options_.n_step;
  const double gamma = options_.gamma;
  scheduler::FrontierState& state = episodes_[size_t(episode) % episodes_.size()]->state;
  state.reset();
  steps_.clear();
  StateValues* current = state.done() ? nullptr : &current_values(state);
  while (current) {
    // Now that S_t is known, the step N back gets its bootstrapped target:
    // r_{t-N} + gamma r_{t-N+1} + ... + gamma^{N-1} r_{t-1} + gamma^N max_a Q(S_t, a).
    const int t = int(steps_.size());
    if (t >= n) {
      double target = -INFINITY;
      for (int type : current->legal) target = std::max(target, current->q[type]);
      for (int i = t - 1; i >= t - n; --i) target = steps_[i].reward + gamma * target;
      update(steps_[t - n], target);
    }
    if (!state.has_ready()) state.throw_cycle();
    const int action = behaviour_action(*current, state);
    // ED-Batch eq. 1.
    const double r = -1.0 + options_.alpha * double(state.num_ready(action)) / double(state.type_frontier(action));
    state.take_ready(action, batch_);
    state.execute(batch_);
    steps_.push_back(Step{current, action, r});
    current = state.done() ? nullptr : &current_values(state);
  }
  // The end state has value 0: the last N steps get their plain returns.
  const int end = int(steps_.size());
  double target = 0.0;
  for (int i = end - 1; i >= std::max(0, end - n); --i) {
    target = steps_[i].reward + gamma * target;
    update(steps_[i], target);
  }
}

FsmPolicy QLearner::greedy_policy() const {
  FsmPolicy::QTable q;
  q.reserve(table_.size());
  for (const auto& [key, values] : table_) {
    std::vector<FsmPolicy::ActionValue> actions;
    for (int type : values.legal)
      if (values.visits[type] > 0) actions.push_back({type, values.q[type], values.visits[type]});
    if (!actions.empty()) q.emplace(key, std::move(actions));
  }
  return FsmPolicy(options_.encoding, num_types_, std::move(q), options_);
}

}  // namespace

FsmPolicy FsmPolicy::learn(const GraphBatch& data, int num_types, const FsmOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  check_options(options, num_types);
  VJIT_USER_CHECK(!data.samples.empty(), "FSM learning needs training data (the batch has no instances)");
  Rng sampler(options.seed ^ 0x5DEECE66Dull);  // separate stream from the learner's
  std::optional<GraphBatch> sampled;
  if (int(data.samples.size()) > options.sample_size) sampled = sample_instances(data, options.sample_size, sampler);
  const GraphBatch& batch = sampled ? *sampled : data;

  QLearner learner(batch, num_types, options);
  const auto& validation = learner.validation();
  const bool validating = !validation.empty();
  FsmTraining training;
  training.instances = int(batch.samples.size());
  training.lower_bound = learner.training_batch().lower_bound;
  for (const auto& env : validation) training.validation_lower_bound += env->lower_bound;
  // A policy's score: its tasks over the validation resamples, or on the
  // training batch when there are none.
  auto score = [&](const FsmPolicy& policy, std::vector<int>& per_batch) {
    if (validating) {
      per_batch = tasks_on(policy, validation);
    } else {
      per_batch = {run_greedy(policy, learner.training_batch()).tasks};
    }
    return sum(per_batch);
  };
  const int bound = validating ? training.validation_lower_bound : training.lower_bound;
  const FsmPolicy fallback_only(options.encoding, num_types, {}, options);
  std::vector<int> fallback_tasks;
  const int fallback_score = score(fallback_only, fallback_tasks);
  if (validating) training.validation_fallback_tasks = fallback_score;

  // Keep the best greedy policy seen (on equal scores, the later one: it has
  // seen more states); stop once no schedule can be shorter.
  std::optional<FsmPolicy> kept;
  std::vector<int> kept_tasks;
  int kept_score = INT_MAX;
  for (int episode = 1; episode <= options.episodes; ++episode) {
    learner.run_episode(episode - 1);
    training.episodes = episode;
    if (episode % options.check_every != 0 && episode != options.episodes) continue;
    FsmPolicy candidate = learner.greedy_policy();
    std::vector<int> tasks;
    const int candidate_score = score(candidate, tasks);
    if (candidate_score <= kept_score) {
      kept_score = candidate_score;
      kept_tasks = std::move(tasks);
      kept = std::move(candidate);
    }
    if (kept_score <= bound) break;
  }

  std::unordered_map<std::string, int> actions = kept->best_;
  if (options.encoding == StateEncoding::Critical && validating) {
    // The departures from the fallback (states whose action is not their
    // critical type), in key order so the result does not depend on hashing.
    std::vector<std::string> departures;
    for (const auto& [key, type] : actions)
      if (type != critical_type_of_key(key)) departures.push_back(key);
    std::sort(departures.begin(), departures.end());
    auto with = [&](const std::unordered_map<std::string, int>& a) {
      return FsmPolicy(options.encoding, num_types, kept->q_, a, options, {});
    };
    // Drop each departure whose removal costs no validation task (repeat, as
    // dropping one can make another useless).
    for (bool dropped = true; dropped;) {
      dropped = false;
      for (auto it = departures.begin(); it != departures.end(); ++it) {
        auto trial = actions;
        trial[*it] = critical_type_of_key(*it);
        std::vector<int> tasks;
        const int trial_score = score(with(trial), tasks);
        if (trial_score <= kept_score) {
          actions = std::move(trial);
          kept_score = trial_score;
          kept_tasks = std::move(tasks);
          departures.erase(it);
          dropped = true;
          break;
        }
      }
    }
    // Keep the rest only if, on the resamples of each half of the instances
    // alike, they beat the fallback by `confidence` standard errors of the
    // paired per-resample differences: a departure that only some instances
    // favour is a trait of the sample, not of the program.
    const std::vector<int>& half_of = learner.validation_half();
    bool confident = true;
    for (int half = 0; !departures.empty() && half <= *std::max_element(half_of.begin(), half_of.end()); ++half) {
      std::vector<double> gain;
      for (size_t i = 0; i < kept_tasks.size(); ++i)
        if (half_of[i] == half) gain.push_back(fallback_tasks[i] - kept_tasks[i]);
      const int n = int(gain.size());
      double mean = 0, variance = 0;
      for (double g : gain) mean += g;
      mean /= n;
      for (double g : gain) variance += (g - mean) * (g - mean);
      const double standard_error = n > 1 ? std::sqrt(variance / (n - 1) / n) : 0.0;
      confident = confident && mean > 0 && mean > options.confidence * standard_error;
    }
    if (!confident) {
      for (const std::string& key : departures) actions[key] = critical_type_of_key(key);
      departures.clear();
      kept_score = fallback_score;
    }
    training.departures = int(departures.size());
  }
  if (validating) training.validation_tasks = kept_score;

  QTable q = std::move(kept->q_);
  if (options.prune_to_greedy_path) {
    const GreedyRun run = run_greedy(FsmPolicy(options.encoding, num_types, q, actions, options, {}),
                                     learner.training_batch());
    std::erase_if(q, [&](const auto& entry) { return !run.states.contains(entry.first); });
    std::erase_if(actions, [&](const auto& entry) { return !run.states.contains(entry.first); });
  }
  FsmPolicy result(options.encoding, num_types, std::move(q), std::move(actions), options, {});
  const GreedyRun run = run_greedy(result, learner.training_batch());
  training.tasks = run.tasks;
  training.fallbacks = run.fallbacks;
  training.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.training_ = training;
  return result;
}

// ------------------------------------------------------------- save / load

namespace {
using nlohmann::json;

// nlohmann's get<int>() converts a float or an out-of-range integer with a
// plain cast: undefined behaviour for 1e300, a wrapped value for 2^32 + 2. An
// integer field must hold an integer within its type's range.
template <typename Int>
std::optional<Int> exact_integer(const json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v <= uint64_t(std::numeric_limits<Int>::max())) return Int(v);
  } else if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v >= int64_t(std::numeric_limits<Int>::min()) && (v < 0 || uint64_t(v) <= uint64_t(std::numeric_limits<Int>::max())))
      return Int(v);
  }
  return std::nullopt;
}

// object[key] as an Int; a UserError naming the key otherwise (load() reports it as malformed).
template <typename Int>
Int integer_at(const json& object, const char* key) {
  const json& value = object.at(key);
  const std::optional<Int> v = exact_integer<Int>(value);
  VJIT_USER_CHECK(v, "\"" << key << "\" must be an integer from " << std::numeric_limits<Int>::min() << " to "
                                << std::numeric_limits<Int>::max() << ", got " << value.dump());
  return *v;
}

json options_to_json(const FsmOptions& o) {
  return json{{"encoding", encoding_name(o.encoding)},
              {"alpha", o.alpha},
              {"n_step", o.n_step},
              {"epsilon", o.epsilon},
              {"learning_rate", o.learning_rate},
              {"gamma", o.gamma},
              {"episodes", o.episodes},
              {"check_every", o.check_every},
              {"sample_size", o.sample_size},
              {"resamples", o.resamples},
              {"validation_resamples", o.validation_resamples},
              {"confidence", o.confidence},
              {"seed", o.seed},
              {"prune_to_greedy_path", o.prune_to_greedy_path}};
}

FsmOptions options_from_json(const json& j, StateEncoding encoding) {
  FsmOptions o;
  o.encoding = encoding;
  o.alpha = j.at("alpha").get<double>();
  o.n_step = integer_at<int>(j, "n_step");
  o.epsilon = j.at("epsilon").get<double>();
  o.learning_rate = j.at("learning_rate").get<double>();
  o.gamma = j.at("gamma").get<double>();
  o.episodes = integer_at<int>(j, "episodes");
  o.check_every = integer_at<int>(j, "check_every");
  o.sample_size = integer_at<int>(j, "sample_size");
  o.resamples = integer_at<int>(j, "resamples");
  o.validation_resamples = integer_at<int>(j, "validation_resamples");
  o.confidence = j.at("confidence").get<double>();
  o.seed = integer_at<uint64_t>(j, "seed");
  o.prune_to_greedy_path = j.at("prune_to_greedy_path").get<bool>();
  return o;
}

json training_to_json(const FsmTraining& t) {
  return json{{"seconds", t.seconds},
              {"episodes", t.episodes},
              {"instances", t.instances},
              {"tasks", t.tasks},
              {"lower_bound", t.lower_bound},
              {"fallbacks", t.fallbacks},
              {"validation_tasks", t.validation_tasks},
              {"validation_fallback_tasks", t.validation_fallback_tasks},
              {"validation_lower_bound", t.validation_lower_bound},
              {"departures", t.departures}};
}

FsmTraining training_from_json(const json& j) {
  FsmTraining t;
  t.seconds = j.at("seconds").get<double>();
  t.episodes = integer_at<int>(j, "episodes");
  t.instances = integer_at<int>(j, "instances");
  t.tasks = integer_at<int>(j, "tasks");
  t.lower_bound = integer_at<int>(j, "lower_bound");
  t.fallbacks = integer_at<int>(j, "fallbacks");
  t.validation_tasks = integer_at<int>(j, "validation_tasks");
  t.validation_fallback_tasks = integer_at<int>(j, "validation_fallback_tasks");
  t.validation_lower_bound = integer_at<int>(j, "validation_lower_bound");
  t.departures = integer_at<int>(j, "departures");
  return t;
}

// The types a state key names (in key order), or an empty optional when the
// key is not one the encoder could have written.
std::optional<std::vector<int>> parse_state_key(const std::string& key, StateEncoding encoding, int num_types) {
  std::string_view types_part = key;
  int most = -1;
  const size_t bar = key.find('|');
  if (encoding == StateEncoding::Max) {
    if (bar == std::string::npos) return std::nullopt;
    types_part = std::string_view(key).substr(0, bar);
    const std::string_view tail = std::string_view(key).substr(bar + 1);
    const auto r = std::from_chars(tail.data(), tail.data() + tail.size(), most);
    if (r.ec != std::errc() || r.ptr != tail.data() + tail.size()) return std::nullopt;
  } else if (bar != std::string::npos) {
    return std::nullopt;
  }
  std::vector<int> types;
  int marked = 0;
  for (size_t pos = 0;;) {
    const size_t comma = types_part.find(',', pos);
    std::string_view token = types_part.substr(pos, comma == std::string_view::npos ? comma : comma - pos);
    if (encoding == StateEncoding::Critical && token.ends_with('*')) {
      token.remove_suffix(1);
      ++marked;
    }
    int type = -1;
    const auto r = std::from_chars(token.data(), token.data() + token.size(), type);
    if (r.ec != std::errc() || r.ptr != token.data() + token.size()) return std::nullopt;
    if (type < 0 || type >= num_types) return std::nullopt;
    types.push_back(type);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  if (types.empty()) return std::nullopt;
  std::vector<int> sorted = types;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return std::nullopt;  // a type twice
  if (encoding == StateEncoding::Critical && marked == 0) return std::nullopt;
  const bool by_count = encoding == StateEncoding::Sort || encoding == StateEncoding::Critical;
  if (!by_count && !std::is_sorted(types.begin(), types.end())) return std::nullopt;
  if (encoding == StateEncoding::Max && !std::binary_search(sorted.begin(), sorted.end(), most)) return std::nullopt;
  return types;
}

[[noreturn]] void malformed(const std::string& path, const std::string& what) {
  throw UserError("FSM policy file '" + path + "' is malformed: " + what);
}

}  // namespace

void FsmPolicy::save(const std::string& path, const std::string& signature) const {
  // States sorted by key, so the same policy always writes the same file.
  std::vector<const QTable::value_type*> entries;
  entries.reserve(q_.size());
  for (const auto& entry : q_) entries.push_back(&entry);
  std::sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
  json states = json::array();
  for (const auto* entry : entries) {
    json actions = json::array();
    for (const ActionValue& a : entry->second) actions.push_back({{"type", a.type}, {"q", a.q}, {"visits", a.visits}});
    json state{{"state", entry->first}, {"actions", std::move(actions)}};
    if (const int type = action(entry->first); type >= 0) state["action"] = type;  // none: the state falls back
    states.push_back(std::move(state));
  }
  const json file{{"format", kFormatName},
                  {"version", kFormatVersion},
                  {"signature", signature},
                  {"encoding", encoding_name(encoding_)},
                  {"num_types", num_types_},
                  {"options", options_to_json(options_)},
                  {"training", training_to_json(training_)},
                  {"states", std::move(states)}};

  // All of the old file or all of the new one, whatever happens during the write.
  const std::string text = file.dump(1) + '\n';
  const std::string_view pieces[] = {text};
  io::write_file_atomically(path, pieces, "FSM policy file");
}

FsmPolicy FsmPolicy::load(const std::string& path, const std::string& expected_signature) {
  std::ifstream in(path);
  VJIT_USER_CHECK(in, "cannot open FSM policy file '" << path << "'");
  std::stringstream text;
  text << in.rdbuf();

  json file;
  try {
    file = json::parse(text.str());
  } catch (const json::exception& e) {
    malformed(path, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!file.is_object() || !file.contains("format") || file["format"] != kFormatName)
    malformed(path, std::string("it is not a vjit FSM policy (no \"format\": \"") + kFormatName + "\")");
  const std::optional<int> parsed_version =
      file.contains("version") ? exact_integer<int>(file["version"]) : std::nullopt;
  if (!parsed_version) malformed(path, "\"version\" is missing or not an integer");
  const int version = *parsed_version;
  VJIT_USER_CHECK(version == kFormatVersion, "FSM policy file '" << path << "' has format version " << version
                                                 << ", but this build reads version " << kFormatVersion
                                                 << "; learn the policy again");
  if (!file.contains("signature") || !file["signature"].is_string())
    malformed(path, "\"signature\" is missing or not a string");
  const std::string signature = file["signature"].get<std::string>();
  VJIT_USER_CHECK(signature == expected_signature,
                  "FSM policy file '" << path << "' was learned for a different program: its signature is '"
                                      << signature << "', the program's is '" << expected_signature
                                      << "'; learn the policy again");

  try {
    const StateEncoding encoding = parse_encoding(file.at("encoding").get<std::string>());
    const int num_types = integer_at<int>(file, "num_types");
    // Bounded before anything is sized by it (a program has far fewer types).
    if (num_types < 1 || num_types > kMaxTypes)
      malformed(path, "\"num_types\" is " + std::to_string(num_types) + ", not in [1, " + std::to_string(kMaxTypes) + "]");
    QTable q;
    std::unordered_map<std::string, int> transitions;
    for (const json& state : file.at("states")) {
      const std::string key = state.at("state").get<std::string>();
      const auto types = parse_state_key(key, encoding, num_types);
      if (!types) malformed(path, "state '" + key + "' is not a " + encoding_name(encoding) + " state");
      std::vector<ActionValue> actions;
      for (const json& a : state.at("actions")) {
        ActionValue value{integer_at<int>(a, "type"), a.at("q").get<double>(), integer_at<int>(a, "visits")};
        if (!std::isfinite(value.q) || value.visits < 0)
          malformed(path, "state '" + key + "' has an action with q " + std::to_string(value.q) + " and visits " +
                              std::to_string(value.visits) + " (q must be finite, visits >= 0)");
        if (std::find(types->begin(), types->end(), value.type) == types->end())
          malformed(path, "state '" + key + "' has action " + std::to_string(value.type) + ", not on its frontier");
        actions.push_back(value);
      }
      if (state.contains("action")) {
        const int type = integer_at<int>(state, "action");
        if (std::find(types->begin(), types->end(), type) == types->end())
          malformed(path, "state '" + key + "' goes to type " + std::to_string(type) + ", not on its frontier");
        transitions.emplace(key, type);
      }
      if (!q.emplace(key, std::move(actions)).second) malformed(path, "state '" + key + "' appears twice");
    }
    const FsmOptions options = options_from_json(file.at("options"), encoding);
    check_options(options, num_types);
    return FsmPolicy(encoding, num_types, std::move(q), std::move(transitions), options,
                     training_from_json(file.at("training")));
  } catch (const json::exception& e) {
    malformed(path, e.what());
  } catch (const UserError& e) {
    if (std::string(e.what()).starts_with("FSM policy file")) throw;
    malformed(path, e.what());  // e.g. an unknown encoding name
  }
}

}  // namespace vjit::scheduler
