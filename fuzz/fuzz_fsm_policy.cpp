// The learned-policy loader (vjit::FsmPolicy::load, scheduler/fsm.cpp): the
// input is written to a file in this process's scratch directory and loaded
// as a policy for a program whose signature is "fuzz" (the seed corpus's
// files carry it). Any file is loaded or rejected with a UserError; a loaded
// policy must describe itself, save and load back to the same policy, and
// schedule a batch of its program's types into at least the lower bound's
// number of tasks.
#include <algorithm>
#include <fstream>
#include <optional>
#include <string>

#include "fuzz/fuzz_util.h"
#include "vjit/batching.h"
#include "vjit/graph.h"

namespace {

using vjit::fuzz::finding;

constexpr const char* kSignature = "fuzz";
constexpr int kMaxScheduledTypes = 64;

const vjit::fuzz::ScratchDir& scratch() {
  static const vjit::fuzz::ScratchDir dir;
  return dir;
}

void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  if (!out) finding("cannot write " + path);
}

// Small trees and chains over the first (at most 4) vertex types.
vjit::GraphBatch batch_of_types(int num_types) {
  const int types = std::min(num_types, 4);
  vjit::GraphBatch batch;
  for (int s = 0; s < 3; ++s) {
    vjit::Sample sample;
    int a = sample.add_vertex(s % types);
    int b = sample.add_vertex((s + 1) % types);
    int c = sample.add_vertex((s + 2) % types, {a, b});
    int d = sample.add_vertex((s + 3) % types, {c});
    sample.add_vertex(s % types, {d, a});
    batch.samples.push_back(sample);
  }
  return batch;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = scratch().file("policy.json");
  write_file(path, data, size);
  std::optional<vjit::FsmPolicy> policy;
  if (!vjit::fuzz::runs_or_rejects([&] { policy.emplace(vjit::FsmPolicy::load(path, kSignature)); })) return 0;

  const vjit::FsmPolicyInfo info = policy->info();
  if (info.num_types < 1) finding("a loaded policy has " + std::to_string(info.num_types) + " vertex types");
  if (policy->describe().empty()) finding("FsmPolicy::describe() is empty");

  const std::string saved = scratch().file("saved.json");
  policy->save(saved, kSignature);
  const vjit::FsmPolicy again = vjit::FsmPolicy::load(saved, kSignature);
  if (again.describe() != policy->describe()) finding("a policy changes when saved and loaded again");

  // Scheduling sizes its tables by the program's type count: a file may claim
  // any count, a program has few.
  if (info.num_types > kMaxScheduledTypes) return 0;
  const vjit::GraphBatch batch = batch_of_types(info.num_types);
  const vjit::ScheduleSummary summary = vjit::summarize_schedule(batch, info.num_types, "fsm", &*policy);
  if (summary.tasks < summary.lower_bound)
    finding("the policy schedules " + std::to_string(summary.tasks) + " tasks, below the lower bound " +
            std::to_string(summary.lower_bound));
  return 0;
}
