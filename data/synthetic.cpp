// Deterministic generators of sentences, tagged sentences and lattices, the
// stand-ins for PTB text, WikiNER and the ED-Batch lattices.
#include <algorithm>
#include <cmath>

#include "data/text.h"
#include "vjit/data.h"
#include "vjit/error.h"
#include "vjit/random.h"

namespace vjit {

namespace {

void check_lengths(const char* where, int min_length, int max_length) {
  VJIT_USER_CHECK(min_length >= 1 && min_length <= max_length,
                  where << ": need 1 <= min length <= max length, got " << min_length << ".." << max_length);
}

void check_count(const char* where, int count) {
  VJIT_USER_CHECK(count >= 0, where << ": the count must be >= 0, got " << count);
}

// Draws ranks 0..n-1 with probability ∝ 1 / (rank + 1)^exponent.
class ZipfSampler {
 public:
  ZipfSampler(int n, double exponent) : cdf_(size_t(n)) {
    double total = 0.0;
    for (int r = 0; r < n; ++r) cdf_[size_t(r)] = total += 1.0 / std::pow(double(r + 1), exponent);
    for (double& c : cdf_) c /= total;
  }
  int draw(Rng& rng) const {
    auto it = std::upper_bound(cdf_.begin(), cdf_.end(), rng.uniform());
    return std::min(int(it - cdf_.begin()), int(cdf_.size()) - 1);
  }

 private:
  std::vector<double> cdf_;
};

// Adds node `node`'s incoming arcs: its character, then maybe one word ending there.
void add_lattice_node(Rng& rng, const SyntheticLatticeOptions& o, Lattice& lattice, int node) {
  std::vector<Lattice::Arc>& arcs = lattice.incoming[size_t(node)];
  int character = rng.uniform_int(0, o.vocab_size - 1);
  arcs.push_back({node - 1, character, false});
  int span = rng.uniform_int(2, 4);
  bool word = node >= span && rng.bernoulli(o.word_rate);
  if (word) arcs.push_back({node - span, rng.uniform_int(0, o.vocab_size - 1), true});
  lattice.tags[size_t(node)] = (character + (word ? 1 : 0)) % o.num_tags;
}

}  // namespace

std::vector<std::vector<int>> make_synthetic_sentences(int num_sentences, uint64_t seed,
                                                       SyntheticTextOptions options) {
  check_count("make_synthetic_sentences", num_sentences);
  check_lengths("make_synthetic_sentences", options.min_length, options.max_length);
  VJIT_USER_CHECK(options.vocab_size >= 1, "make_synthetic_sentences: vocab_size must be >= 1");
  VJIT_USER_CHECK(options.zipf_exponent >= 0, "make_synthetic_sentences: zipf_exponent must be >= 0");
  Rng rng(seed);
  ZipfSampler zipf(options.vocab_size, options.zipf_exponent);
  std::vector<std::vector<int>> sentences(static_cast<size_t>(num_sentences));
  for (std::vector<int>& sentence : sentences) {
    sentence.resize(size_t(rng.uniform_int(options.min_length, options.max_length)));
    for (int& word : sentence) word = zipf.draw(rng);
  }
  return sentences;
}

int synthetic_tag(int word, int previous_word, int num_tags) {
  int shift = previous_word >= 0 && previous_word % 3 == 0 ? 1 : 0;
  return (word % num_tags + shift) % num_tags;
}

std::vector<TaggedSentence> make_synthetic_tagged_sentences(int num_sentences, uint64_t seed,
                                                            SyntheticTaggingOptions options) {
  check_count("make_synthetic_tagged_sentences", num_sentences);
  check_lengths("make_synthetic_tagged_sentences", options.min_length, options.max_length);
  VJIT_USER_CHECK(options.vocab_size >= 1 && options.num_tags >= 1,
                  "make_synthetic_tagged_sentences: vocab_size and num_tags must be >= 1");
  Rng rng(seed);
  std::vector<TaggedSentence> sentences(static_cast<size_t>(num_sentences));
  for (TaggedSentence& sentence : sentences) {
    int length = rng.uniform_int(options.min_length, options.max_length);
    for (int i = 0; i < length; ++i) {
      int word = rng.uniform_int(0, options.vocab_size - 1);
      int previous = i == 0 ? -1 : sentence.words.back();
      sentence.words.push_back(word);
      sentence.tags.push_back(synthetic_tag(word, previous, options.num_tags));
    }
  }
  return sentences;
}

std::vector<Lattice> make_synthetic_lattices(int num_lattices, uint64_t seed,
                                             SyntheticLatticeOptions options) {
  check_count("make_synthetic_lattices", num_lattices);
  check_lengths("make_synthetic_lattices", options.min_chars, options.max_chars);
  VJIT_USER_CHECK(options.vocab_size >= 1 && options.num_tags >= 1,
                  "make_synthetic_lattices: vocab_size and num_tags must be >= 1");
  Rng rng(seed);
  std::vector<Lattice> lattices(static_cast<size_t>(num_lattices));
  for (Lattice& lattice : lattices) {
    int nodes = rng.uniform_int(options.min_chars, options.max_chars) + 1;
    lattice.tags.assign(size_t(nodes), 0);
    lattice.incoming.resize(size_t(nodes));
    for (int node = 1; node < nodes; ++node) add_lattice_node(rng, options, lattice, node);
  }
  return lattices;
}

}  // namespace vjit
