// The corpus readers (data/corpora.cpp, data/text.cpp): PTB text, WikiNER and
// ED-Batch lattices. The first byte picks the format, the rest is the text.
// Any text is read or rejected with a UserError; what is read must hold ids
// its vocabularies know, one tag per word, and lattices that print and read
// back the same.
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "vjit/data.h"

namespace {

using vjit::fuzz::finding;

void check_ids(const std::vector<int>& ids, const vjit::Vocabulary& vocab, const char* what) {
  for (int id : ids)
    if (id < 0 || id >= vocab.size()) finding(std::string(what) + " id " + std::to_string(id) + " outside its vocabulary");
}

void fuzz_ptb(const std::string& text) {
  vjit::Vocabulary vocab;
  std::vector<std::vector<int>> sentences;
  if (!vjit::fuzz::runs_or_rejects([&] { sentences = vjit::parse_ptb_text(text, "fuzz", vocab); })) return;
  for (const std::vector<int>& sentence : sentences) {
    if (sentence.empty()) finding("parse_ptb_text returned an empty sentence");
    check_ids(sentence, vocab, "PTB word");
  }
  // A frozen vocabulary maps what it does not know to <unk>.
  vjit::Vocabulary frozen = vjit::Vocabulary::build({"the", "a"});
  const auto again = vjit::parse_ptb_text(text, "fuzz", frozen, /*add_new_words=*/false);
  if (frozen.size() != 3) finding("parse_ptb_text grew a frozen vocabulary");
  if (again.size() != sentences.size()) finding("parse_ptb_text: the sentence count depends on the vocabulary");
  for (const std::vector<int>& sentence : again) check_ids(sentence, frozen, "frozen PTB word");
}

void fuzz_wikiner(const std::string& text) {
  vjit::Vocabulary words, tags(false);
  std::vector<vjit::TaggedSentence> sentences;
  if (!vjit::fuzz::runs_or_rejects([&] { sentences = vjit::parse_wikiner(text, "fuzz", words, tags); })) return;
  for (const vjit::TaggedSentence& sentence : sentences) {
    if (sentence.words.empty() || sentence.words.size() != sentence.tags.size())
      finding("parse_wikiner: a sentence without words or with a tag count unlike its word count");
    check_ids(sentence.words, words, "WikiNER word");
    check_ids(sentence.tags, tags, "WikiNER tag");
  }
  // With the tag set frozen (no <unk>), an unknown tag is a UserError, never an id of -1.
  vjit::Vocabulary frozen_words, frozen_tags(false);
  frozen_tags.add("O");
  std::vector<vjit::TaggedSentence> again;
  if (vjit::fuzz::runs_or_rejects(
          [&] { again = vjit::parse_wikiner(text, "fuzz", frozen_words, frozen_tags, /*add_new_words=*/false); }))
    for (const vjit::TaggedSentence& sentence : again) check_ids(sentence.tags, frozen_tags, "frozen WikiNER tag");
}

bool same_lattices(const std::vector<vjit::Lattice>& a, const std::vector<vjit::Lattice>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].tags != b[i].tags || a[i].incoming.size() != b[i].incoming.size()) return false;
    for (size_t n = 0; n < a[i].incoming.size(); ++n) {
      const auto& x = a[i].incoming[n];
      const auto& y = b[i].incoming[n];
      if (x.size() != y.size()) return false;
      for (size_t k = 0; k < x.size(); ++k)
        if (x[k].from != y[k].from || x[k].token != y[k].token || x[k].word != y[k].word) return false;
    }
  }
  return true;
}

void fuzz_lattices(const std::string& text) {
  std::vector<vjit::Lattice> lattices;
  if (!vjit::fuzz::runs_or_rejects([&] { lattices = vjit::parse_lattices(text, "fuzz"); })) return;
  for (const vjit::Lattice& lattice : lattices) {
    if (lattice.incoming.size() != lattice.tags.size()) finding("parse_lattices: arc lists unlike the node count");
    for (int node = 0; node < lattice.num_nodes(); ++node)
      for (const vjit::Lattice::Arc& arc : lattice.incoming[size_t(node)])
        if (arc.from < 0 || arc.from >= node || arc.token < 0 || arc.word != (arc.from != node - 1))
          finding("parse_lattices: an arc into node " + std::to_string(node) + " breaks the format's rules");
  }
  const std::vector<vjit::Lattice> again = vjit::parse_lattices(vjit::format_lattices(lattices), "printed");
  if (!same_lattices(lattices, again)) finding("lattices change when printed and read again");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text = vjit::fuzz::as_text(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0: fuzz_ptb(text); break;
    case 1: fuzz_wikiner(text); break;
    default: fuzz_lattices(text); break;
  }
  return 0;
}
