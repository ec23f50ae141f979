#include "layout/param_runs.h"

#include <algorithm>

namespace vjit::layout {

namespace {

class Chains {
 public:
  explicit Chains(int n) : next_(size_t(n), -1), prev_(size_t(n), -1) {}

  // Links every pair of `sequence` or, where one conflicts, none.
  bool link(const std::vector<int>& sequence) {
    added_.clear();
    for (size_t i = 0; i + 1 < sequence.size(); ++i) {
      if (link(sequence[i], sequence[i + 1])) continue;
      for (auto [a, b] : added_) next_[size_t(a)] = prev_[size_t(b)] = -1;
      return false;
    }
    return true;
  }

  std::vector<std::vector<int>> runs() const {
    std::vector<std::vector<int>> out;
    for (int p = 0; p < int(next_.size()); ++p) {
      if (prev_[size_t(p)] >= 0 || next_[size_t(p)] < 0) continue;  // not a chain's head
      out.emplace_back();
      for (int q = p; q >= 0; q = next_[size_t(q)]) out.back().push_back(q);
    }
    return out;
  }

 private:
  // a → b: agrees with the links made, and closes no cycle (b heads a's chain).
  bool link(int a, int b) {
    if (next_[size_t(a)] == b) return true;
    if (next_[size_t(a)] >= 0 || prev_[size_t(b)] >= 0) return false;
    int head = a;
    while (prev_[size_t(head)] >= 0) head = prev_[size_t(head)];
    if (head == b) return false;
    next_[size_t(a)] = b;
    prev_[size_t(b)] = a;
    added_.push_back({a, b});
    return true;
  }

  std::vector<int> next_, prev_;
  std::vector<std::pair<int, int>> added_;
};

bool well_formed(int num_params, const std::vector<int>& sequence) {
  if (sequence.size() < 2) return false;
  std::vector<int> sorted = sequence;
  std::sort(sorted.begin(), sorted.end());
  return sorted.front() >= 0 && sorted.back() < num_params &&
         std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
}

}  // namespace

ParamRuns plan_param_runs(int num_params, std::span<const std::vector<int>> sequences) {
  Chains chains(num_params);
  ParamRuns out;
  out.kept.reserve(sequences.size());
  for (const std::vector<int>& sequence : sequences)
    out.kept.push_back(well_formed(num_params, sequence) && chains.link(sequence));
  out.runs = chains.runs();
  return out;
}

}  // namespace vjit::layout
