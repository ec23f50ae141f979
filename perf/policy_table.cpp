// policy-table: batches (tasks) per training step of every batching policy
// against ED-Batch's lower bound, for the models whose schedules differ, on the
// built-in data and, when given, the public benchmark files.
//
//   policy-table [--batch 64] [--batches 10] [--repeat 7] [--data-dir ../shared/data] [--markdown] [--save DIR]
//
// For each model the fsm policy is learned once (ED-Batch: 32 sampled
// instances of the training data) and then applied to `--batches` batches of
// `--batch` samples not used for learning. Prints one JSON line per model and
// data set; --markdown adds the README table; --save DIR writes each learned
// policy there (Engine::load_fsm_policy reads it back).
//
// schedule_ms is, per batch, the fastest of `--repeat` sweeps, each sweep
// timing every policy over all the batches in turn, in an order that changes
// from sweep to sweep. Timed once per batch in a fixed policy order, a policy
// paid for the caches and heap the previous one left (the fsm, run right after
// ratio, measured up to ~25% slower than after agenda), and one load burst on
// a shared machine could decide a row.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>
#include <map>

#include "bench_util.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

struct Case {
  std::string model, data;  // data: "built-in" or a file under the data directory
};

struct Args {
  int batch = 64;
  int batches = 10;
  int repeat = 7;
  std::string data_dir = VJIT_SHARED_DATA_DIR;
  bool markdown = false;
  std::string save_dir;  // where each learned policy is saved (with the program's signature)
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--markdown") { a.markdown = true; continue; }
    if (i + 1 >= argc) throw UserError("missing value for " + flag);
    std::string value = argv[++i];
    if (flag == "--batch") a.batch = bench::int_flag(flag, value);
    else if (flag == "--batches") a.batches = bench::int_flag(flag, value);
    else if (flag == "--repeat") a.repeat = bench::int_flag(flag, value);
    else if (flag == "--data-dir") a.data_dir = value;
    else if (flag == "--save") a.save_dir = value;
    else throw UserError("unknown flag " + flag);
  }
  return a;
}

nlohmann::json measure(const Case& c, const Args& args) {
  models::Config config;
  config.hidden = 4;  // schedules do not depend on sizes
  config.train_samples = 32 + args.batch * args.batches;
  config.test_samples = 0;
  if (c.data != "built-in") config.data_path = c.data;
  models::Bundle bundle = models::make_model(c.model, config);
  int types = bundle.program->num_types();
  std::vector<int> learn_indices;
  for (int i = 0; i < 32 && i < int(bundle.train.size()); ++i) learn_indices.push_back(i);
  const FsmPolicy fsm = FsmPolicy::learn(models::make_batch(bundle.train, learn_indices), types);
  if (!args.save_dir.empty()) {
    std::filesystem::create_directories(args.save_dir);
    std::string name = c.model + (c.data == "built-in" ? "" : "-" + std::filesystem::path(c.data).parent_path().filename().string());
    fsm.save(args.save_dir + "/" + name + ".fsm.json", bundle.program->signature_string());
  }
  std::map<std::string, double> tasks, seconds;
  double lower = 0, fallbacks = 0;
  std::vector<GraphBatch> batches;
  for (int b = 0; b < args.batches; ++b) {
    std::vector<int> indices;
    for (int i = 0; i < args.batch; ++i) indices.push_back(int((32 + b * args.batch + i) % bundle.train.size()));
    batches.push_back(models::make_batch(bundle.train, indices));
  }
  const int measured = int(batches.size());
  std::map<std::string, std::vector<double>> fastest;  // per policy and batch
  const auto& policies = option_values::policy;
  for (int r = 0; r < args.repeat; ++r) {
    for (size_t k = 0; k < policies.size(); ++k) {
      // Each sweep starts one policy later, every other one in reverse order,
      // so that each policy follows a different one from sweep to sweep.
      const size_t at = (k + size_t(r / 2)) % policies.size();
      const std::string policy(policies[r % 2 ? policies.size() - 1 - at : at]);
      std::vector<double>& times = fastest[policy];
      times.resize(batches.size(), INFINITY);
      for (size_t b = 0; b < batches.size(); ++b) {
        const ScheduleSummary s = summarize_schedule(batches[b], types, policy, &fsm);
        times[b] = std::min(times[b], s.schedule_seconds);
        if (r > 0) continue;
        tasks[policy] += double(s.tasks);
        if (policy == "fsm") {
          lower += s.lower_bound;
          fallbacks += s.fsm_fallbacks;
        }
      }
    }
  }
  for (const auto& [name, times] : fastest)
    for (double t : times) seconds[name] += t;
  nlohmann::json line{{"model", c.model},
                      {"data", c.data == "built-in" ? "built-in" : std::filesystem::path(c.data).parent_path().filename().string() + "/" + std::filesystem::path(c.data).filename().string()},
                      {"batch", args.batch},
                      {"batches", measured},
                      {"lower_bound", lower / measured},
                      {"repeat", args.repeat},
                      {"fsm_learning_s", fsm.info().learning_seconds},
                      {"fsm_episodes", fsm.info().episodes},
                      {"fsm_states", fsm.info().states},
                      {"fsm_departures", fsm.info().departures},
                      {"fsm_fallbacks", fallbacks / measured}};
  for (auto& [name, total] : tasks) {
    line["tasks"][name] = total / measured;
    line["schedule_ms"][name] = seconds[name] / measured * 1e3;
  }
  return line;
}

int run(int argc, char** argv) {
  Args args = parse(argc, argv);
  std::vector<Case> cases = {{"tree_lstm_outputs", "built-in"}, {"tree_lstm_2type", "built-in"},
                             {"bilstm_tagger", "built-in"},     {"lattice_lstm", "built-in"},
                             {"var_lstm", "built-in"}};
  const std::vector<std::pair<std::string, std::string>> files = {
      {"tree_lstm_outputs", "sst/train.txt"}, {"tree_lstm_2type", "sst/train.txt"},
      {"bilstm_tagger", "wikiner/dev.txt"},   {"lattice_lstm", "lattice/train.txt"},
      {"var_lstm", "ptb/dev.txt"}};
  for (const auto& [model, file] : files) {
    std::string path = args.data_dir + "/" + file;
    if (std::filesystem::exists(path)) cases.push_back({model, path});
    else std::cerr << "policy-table: " << path << " not found, real-data row for " << model << " skipped\n";
  }
  std::vector<nlohmann::json> lines;
  for (const Case& c : cases) {
    lines.push_back(measure(c, args));
    std::cout << lines.back().dump() << std::endl;
  }
  if (args.markdown) {
    std::cout << "\n| model | data | depth | agenda | frontier | ratio | fsm | lower bound | fsm learning s |\n"
                 "|---|---|---|---|---|---|---|---|---|\n";
    for (const nlohmann::json& l : lines) {
      std::cout << "| " << l["model"].get<std::string>() << " | " << l["data"].get<std::string>();
      for (const char* p : {"depth", "agenda", "frontier", "ratio", "fsm"})
        std::cout << " | " << nlohmann::json(std::round(l["tasks"][p].get<double>() * 10) / 10).dump();
      std::cout << " | " << nlohmann::json(std::round(l["lower_bound"].get<double>() * 10) / 10).dump() << " | "
                << nlohmann::json(std::round(l["fsm_learning_s"].get<double>() * 1000) / 1000).dump() << " |\n";
    }
  }
  return 0;
}

}  // namespace
}  // namespace vjit

int main(int argc, char** argv) { return vjit::bench::guarded_main("policy-table", vjit::run, argc, argv); }
