#include <algorithm>
#include <map>

#include "vjit/data.h"
#include "vjit/error.h"

namespace vjit {

Vocabulary::Vocabulary(bool with_unk) : has_unk_(with_unk) {
  if (with_unk) add(kUnk);
}

Vocabulary Vocabulary::build(const std::vector<std::string>& tokens, int max_size) {
  VJIT_USER_CHECK(max_size == -1 || max_size >= 1,
                  "Vocabulary::build: max_size must be -1 (no limit) or at least 1, got " << max_size);
  std::map<std::string, int64_t> counts;  // ordered: ties break in byte order
  for (const std::string& token : tokens)
    if (token != kUnk) ++counts[token];
  std::vector<std::pair<std::string, int64_t>> ranked(counts.begin(), counts.end());
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  Vocabulary vocab;
  for (const auto& entry : ranked) {
    if (max_size != -1 && vocab.size() >= max_size) break;
    vocab.add(entry.first);
  }
  return vocab;
}

Vocabulary Vocabulary::from_trees(std::span<const BracketTree> trees, int max_size) {
  std::vector<std::string> words;
  for (const BracketTree& tree : trees)
    for (const BracketTree::Node& node : tree.nodes)
      if (!node.word.empty()) words.push_back(node.word);
  return build(words, max_size);
}

int Vocabulary::add(const std::string& word) {
  auto [it, inserted] = ids_.emplace(word, size());
  if (inserted) words_.push_back(word);
  return it->second;
}

int Vocabulary::id(const std::string& word) const {
  auto it = ids_.find(word);
  return it == ids_.end() ? unk_id() : it->second;
}

bool Vocabulary::contains(const std::string& word) const { return ids_.count(word) != 0; }

const std::string& Vocabulary::word(int id) const {
  VJIT_USER_CHECK(id >= 0 && id < size(),
                  "Vocabulary::word: id " << id << " is out of range [0, " << size() << ")");
  return words_[size_t(id)];
}

}  // namespace vjit
