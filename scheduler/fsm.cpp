#include "scheduler/fsm.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unordered_set>

#include "vjit/error.h"

namespace vjit {

namespace {
constexpr std::array<std::pair<StateEncoding, const char*>, 3> kEncodingNames{{
    {StateEncoding::Base, "base"},
    {StateEncoding::Max, "max"},
    {StateEncoding::Sort, "sort"},
}};
constexpr const char* kFormatName = "vjit-fsm-policy";

void append_int(std::string& out, int value) {
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
  throw UserError("unknown FSM state encoding '" + name + "'; valid encodings: base, max, sort");
}

// ---------------------------------------------------------------- encoding

void StateEncoder::encode(const sched::FrontierState& state, std::string& key) {
  present_.clear();
  for (int type = 0; type < state.num_types(); ++type)
    if (state.num_ready(type) > 0) present_.emplace_back(state.num_ready(type), type);
  key.clear();
  if (encoding_ == StateEncoding::Sort)  // most common first, ties by type
    std::sort(present_.begin(), present_.end(),
              [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  for (size_t i = 0; i < present_.size(); ++i) {
    if (i) key.push_back(',');
    append_int(key, present_[i].second);
  }
  if (encoding_ == StateEncoding::Max && !present_.empty()) {
    const auto most = std::max_element(present_.begin(), present_.end(),
                                       [](const auto& a, const auto& b) { return a.first < b.first; });
    key.push_back('|');
    append_int(key, most->second);  // max_element keeps the first (lowest type) on ties
  }
}

// ------------------------------------------------------------------ policy

FsmPolicy::FsmPolicy(StateEncoding encoding, int num_types, QTable q, FsmOptions options, FsmTraining training)
    : encoding_(encoding), num_types_(num_types), q_(std::move(q)), options_(options), training_(training) {
  best_.reserve(q_.size());
  for (const auto& [state, actions] : q_) {
    const ActionValue* best = nullptr;
    for (const ActionValue& action : actions)
      if (!best || action.q > best->q || (action.q == best->q && action.type < best->type)) best = &action;
    if (best) best_.emplace(state, best->type);
  }
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

// Tabular Q-learning with N-step bootstrapping on one batch, the environment
// being Algorithm 1: a state is the encoded frontier, an action a type on it.
class QLearner {
 public:
  QLearner(const GraphBatch& batch, int num_types, const FsmOptions& options)
      : options_(options), graph_(batch, num_types), state_(graph_), encoder_(options.encoding), rng_(options.seed) {
    state_.track_type_frontiers();  // the reward needs |Frontier(G_t^a)|
  }

  void run_episode();
  FsmPolicy greedy_policy() const;

  // The greedy policy run on the training batch, as make_schedule runs it.
  struct GreedyRun {
    int tasks = 0;
    int fallbacks = 0;
    std::unordered_set<std::string> states;  // states decided by the table
  };
  GreedyRun run_greedy(const FsmPolicy& policy);

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

  StateValues& current_values();
  int behaviour_action(const StateValues& values);
  double reward(int action) const;
  double max_q(const StateValues& values) const;
  void update(const Step& step, double target);

  FsmOptions options_;
  sched::FlatBatch graph_;
  sched::FrontierState state_;
  StateEncoder encoder_;
  Rng rng_;
  std::unordered_map<std::string, StateValues> table_;
  std::string key_;
  std::vector<int> batch_;
  std::vector<Step> steps_;
};

QLearner::StateValues& QLearner::current_values() {
  encoder_.encode(state_, key_);
  auto [it, inserted] = table_.try_emplace(key_);
  StateValues& values = it->second;
  if (inserted) {
    for (int type = 0; type < state_.num_types(); ++type)
      if (state_.num_ready(type) > 0) values.legal.push_back(type);
    values.q.assign(state_.num_types(), 0.0);
    values.visits.assign(state_.num_types(), 0);
  }
  return values;
}

int QLearner::behaviour_action(const StateValues& values) {
  if (rng_.uniform() < options_.epsilon) return values.legal[rng_.below(int(values.legal.size()))];
  // Greedy; equal Q values (e.g. untried actions) are broken by the ratio
  // heuristic, so exploration starts from the heuristic's choices.
  int best = -1;
  for (int type : values.legal) {
    if (state_.num_ready(type) == 0) continue;  // cannot happen: the key names the frontier's types
    if (best < 0 || values.q[type] > values.q[best]) {
      best = type;
    } else if (values.q[type] == values.q[best] &&
               int64_t(state_.num_ready(type)) * state_.type_frontier(best) >
                   int64_t(state_.num_ready(best)) * state_.type_frontier(type)) {
      best = type;
    }
  }
  return best;
}

double QLearner::reward(int action) const {
  // ED-Batch eq. 1.
  return -1.0 + options_.alpha * double(state_.num_ready(action)) / double(state_.type_frontier(action));
}

double QLearner::max_q(const StateValues& values) const {
  double best = -INFINITY;
  for (int type : values.legal) best = std::max(best, values.q[type]);
  return best;
}

void QLearner::update(const Step& step, double target) {
  double& q = step.values->q[step.action];
  q += options_.learning_rate * (target - q);
  ++step.values->visits[step.action];
}

void QLearner::run_episode() {
  const int n = options_.n_step;
  const double gamma = options_.gamma;
  state_.reset();
  steps_.clear();
  StateValues* current = state_.done() ? nullptr : &current_values();
  while (current) {
    // Now that S_t is known, the step N back gets its bootstrapped target:
    // r_{t-N} + gamma r_{t-N+1} + ... + gamma^{N-1} r_{t-1} + gamma^N max_a Q(S_t, a).
    const int t = int(steps_.size());
    if (t >= n) {
      double target = max_q(*current);
      for (int i = t - 1; i >= t - n; --i) target = steps_[i].reward + gamma * target;
      update(steps_[t - n], target);
    }
    if (!state_.has_ready()) state_.throw_cycle();
    const int action = behaviour_action(*current);
    const double r = reward(action);
    state_.take_ready(action, batch_);
    state_.execute(batch_);
    steps_.push_back(Step{current, action, r});
    current = state_.done() ? nullptr : &current_values();
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
  return FsmPolicy(options_.encoding, graph_.num_types(), std::move(q), options_);
}

QLearner::GreedyRun QLearner::run_greedy(const FsmPolicy& policy) {
  GreedyRun run;
  state_.reset();
  while (!state_.done()) {
    if (!state_.has_ready()) state_.throw_cycle();
    encoder_.encode(state_, key_);
    int type = policy.action(key_);
    if (type >= 0 && state_.num_ready(type) > 0) {
      run.states.insert(key_);
    } else {
      ++run.fallbacks;
      type = sched::choose_ratio(state_);
    }
    state_.take_ready(type, batch_);
    state_.execute(batch_);
    ++run.tasks;
  }
  return run;
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
  FsmTraining training;
  training.instances = int(batch.samples.size());
  training.lower_bound = batching_lower_bound(batch, num_types);
  std::optional<FsmPolicy> kept;
  training.tasks = INT_MAX;
  for (int episode = 1; episode <= options.episodes; ++episode) {
    learner.run_episode();
    training.episodes = episode;
    if (episode % options.check_every != 0 && episode != options.episodes) continue;
    // Keep the best greedy policy seen (on equal tasks, the later one: it has
    // seen more states); stop once no schedule can be shorter.
    FsmPolicy candidate = learner.greedy_policy();
    QLearner::GreedyRun run = learner.run_greedy(candidate);
    if (run.tasks <= training.tasks) {
      training.tasks = run.tasks;
      training.fallbacks = run.fallbacks;
      if (options.prune_to_greedy_path) {
        QTable visited = std::move(candidate.q_);
        std::erase_if(visited, [&](const auto& entry) { return !run.states.contains(entry.first); });
        candidate = FsmPolicy(options.encoding, num_types, std::move(visited), options);
      }
      kept = std::move(candidate);
    }
    if (training.tasks <= training.lower_bound) break;
  }
  training.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  kept->training_ = training;
  return std::move(*kept);
}

// ------------------------------------------------------------- save / load

namespace {
using nlohmann::json;

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
              {"seed", o.seed},
              {"prune_to_greedy_path", o.prune_to_greedy_path}};
}

FsmOptions options_from_json(const json& j, StateEncoding encoding) {
  FsmOptions o;
  o.encoding = encoding;
  o.alpha = j.at("alpha").get<double>();
  o.n_step = j.at("n_step").get<int>();
  o.epsilon = j.at("epsilon").get<double>();
  o.learning_rate = j.at("learning_rate").get<double>();
  o.gamma = j.at("gamma").get<double>();
  o.episodes = j.at("episodes").get<int>();
  o.check_every = j.at("check_every").get<int>();
  o.sample_size = j.at("sample_size").get<int>();
  o.seed = j.at("seed").get<uint64_t>();
  o.prune_to_greedy_path = j.at("prune_to_greedy_path").get<bool>();
  return o;
}

json training_to_json(const FsmTraining& t) {
  return json{{"seconds", t.seconds},         {"episodes", t.episodes}, {"instances", t.instances},
              {"tasks", t.tasks},             {"lower_bound", t.lower_bound}, {"fallbacks", t.fallbacks}};
}

FsmTraining training_from_json(const json& j) {
  FsmTraining t;
  t.seconds = j.at("seconds").get<double>();
  t.episodes = j.at("episodes").get<int>();
  t.instances = j.at("instances").get<int>();
  t.tasks = j.at("tasks").get<int>();
  t.lower_bound = j.at("lower_bound").get<int>();
  t.fallbacks = j.at("fallbacks").get<int>();
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
  std::vector<char> seen(num_types, 0);
  for (size_t pos = 0;;) {
    const size_t comma = types_part.find(',', pos);
    const std::string_view token = types_part.substr(pos, comma == std::string_view::npos ? comma : comma - pos);
    int type = -1;
    const auto r = std::from_chars(token.data(), token.data() + token.size(), type);
    if (r.ec != std::errc() || r.ptr != token.data() + token.size()) return std::nullopt;
    if (type < 0 || type >= num_types || seen[type]) return std::nullopt;
    seen[type] = 1;
    types.push_back(type);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  if (types.empty()) return std::nullopt;
  if (encoding != StateEncoding::Sort && !std::is_sorted(types.begin(), types.end())) return std::nullopt;
  if (encoding == StateEncoding::Max && (most < 0 || most >= num_types || !seen[most])) return std::nullopt;
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
    states.push_back({{"state", entry->first}, {"actions", std::move(actions)}});
  }
  const json file{{"format", kFormatName},
                  {"version", kFormatVersion},
                  {"signature", signature},
                  {"encoding", encoding_name(encoding_)},
                  {"num_types", num_types_},
                  {"options", options_to_json(options_)},
                  {"training", training_to_json(training_)},
                  {"states", std::move(states)}};

  // Write a temporary file and rename it, so a crash never leaves half a policy.
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    VJIT_USER_CHECK(out, "cannot write FSM policy file '" << temporary << "'");
    out << file.dump(1) << '\n';
    out.close();
    VJIT_USER_CHECK(out, "cannot write FSM policy file '" << temporary << "'");
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  VJIT_USER_CHECK(!error, "cannot move '" << temporary << "' to FSM policy file '" << path << "': " << error.message());
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
  if (!file.contains("version") || !file["version"].is_number_integer())
    malformed(path, "\"version\" is missing or not an integer");
  const int version = file["version"].get<int>();
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
    const int num_types = file.at("num_types").get<int>();
    if (num_types < 1) malformed(path, "\"num_types\" must be positive");
    QTable q;
    for (const json& state : file.at("states")) {
      const std::string key = state.at("state").get<std::string>();
      const auto types = parse_state_key(key, encoding, num_types);
      if (!types) malformed(path, "state '" + key + "' is not a " + encoding_name(encoding) + " state");
      std::vector<ActionValue> actions;
      for (const json& a : state.at("actions")) {
        ActionValue value{a.at("type").get<int>(), a.at("q").get<double>(), a.at("visits").get<int>()};
        if (std::find(types->begin(), types->end(), value.type) == types->end())
          malformed(path, "state '" + key + "' has action " + std::to_string(value.type) + ", not on its frontier");
        actions.push_back(value);
      }
      if (!q.emplace(key, std::move(actions)).second) malformed(path, "state '" + key + "' appears twice");
    }
    return FsmPolicy(encoding, num_types, std::move(q), options_from_json(file.at("options"), encoding),
                     training_from_json(file.at("training")));
  } catch (const json::exception& e) {
    malformed(path, e.what());
  } catch (const UserError& e) {
    if (std::string(e.what()).starts_with("FSM policy file")) throw;
    malformed(path, e.what());  // e.g. an unknown encoding name
  }
}

}  // namespace vjit
