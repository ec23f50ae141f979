// Readers of the PTB text, WikiNER and ED-Batch lattice formats (see
// /work/shared/data/README.md and vjit/data.h).
#include "data/text.h"
#include "vjit/data.h"
#include "vjit/error.h"

namespace vjit {

namespace {

int word_id(Vocabulary& vocab, const std::string& word, bool add_new_words) {
  return add_new_words ? vocab.add(word) : vocab.id(word);
}

// ---- WikiNER

void read_tagged_token(const std::string& source, int line, const data::Field& field, Vocabulary& words,
                       Vocabulary& tags, bool add_new_words, TaggedSentence& sentence) {
  size_t bar = field.text.rfind('|');
  if (bar == std::string_view::npos)
    data::fail_at(source, line, field.column,
                  "token '" + std::string(field.text) + "' is not of the form word|TAG");
  if (bar == 0)
    data::fail_at(source, line, field.column, "token '" + std::string(field.text) + "' has an empty word");
  if (bar + 1 == field.text.size())
    data::fail_at(source, line, field.column + int(bar) + 1,
                  "token '" + std::string(field.text) + "' has an empty tag");
  std::string tag(field.text.substr(bar + 1));
  int tag_id = word_id(tags, tag, add_new_words);
  if (tag_id < 0) data::fail_at(source, line, field.column + int(bar) + 1, "unknown tag '" + tag + "'");
  sentence.words.push_back(word_id(words, std::string(field.text.substr(0, bar)), add_new_words));
  sentence.tags.push_back(tag_id);
}

// ---- lattices

// Walks the lines of a lattice file, skipping blank lines where the format allows them.
class LatticeReader {
 public:
  LatticeReader(const std::string& text, const std::string& source)
      : source_(source), lines_(data::split_lines(text)) {}

  std::vector<Lattice> read() {
    const data::Line& header = next_line("the number of lattices", true);
    int count = single_int(header, "the number of lattices");
    std::vector<Lattice> lattices;
    for (int i = 0; i < count; ++i) lattices.push_back(lattice(i, count));
    skip_blank_lines();
    if (pos_ < lines_.size())
      data::fail_at(source_, lines_[pos_].number, 1,
                    "unexpected text after the last lattice (the header says " + std::to_string(count) + ")");
    return lattices;
  }

 private:
  void skip_blank_lines() {
    while (pos_ < lines_.size() && data::is_blank_line(lines_[pos_].text)) ++pos_;
  }

  const data::Line& next_line(const std::string& expected, bool skip_blanks) {
    if (skip_blanks) skip_blank_lines();
    if (pos_ >= lines_.size()) {
      int line = lines_.empty() ? 1 : lines_.back().number + 1;
      data::fail_at(source_, line, 1, "unexpected end of file: expected " + expected);
    }
    return lines_[pos_++];
  }

  int single_int(const data::Line& line, const char* what) {
    std::vector<data::Field> fields = data::split_fields(line.text);
    if (fields.size() != 1)
      data::fail_at(source_, line.number, fields.empty() ? 1 : fields[1].column,
                    std::string("expected ") + what + " alone on the line");
    int value = data::field_int(source_, line.number, fields[0], what);
    if (value < 0) data::fail_at(source_, line.number, fields[0].column, std::string(what) + " must be >= 0");
    return value;
  }

  Lattice lattice(int index, int count) {
    std::string which = "lattice " + std::to_string(index + 1) + " of " + std::to_string(count);
    int n = single_int(next_line("the node count of " + which, true), "the node count");
    Lattice lattice;
    lattice.tags = tags(next_line("the tags of " + which, false), n);
    lattice.incoming.resize(size_t(n));
    for (int node = 0; node < n; ++node)
      lattice.incoming[size_t(node)] =
          arcs(next_line("node " + std::to_string(node) + " of " + which, false), node);
    return lattice;
  }

  std::vector<int> tags(const data::Line& line, int n) {
    std::vector<data::Field> fields = data::split_fields(line.text);
    if (int(fields.size()) != n)
      data::fail_at(source_, line.number, 1,
                    "expected " + std::to_string(n) + " node tags, got " + std::to_string(fields.size()));
    std::vector<int> tags;
    for (const data::Field& field : fields) {
      tags.push_back(data::field_int(source_, line.number, field, "a tag"));
      if (tags.back() < 0) data::fail_at(source_, line.number, field.column, "a tag must be >= 0");
    }
    return tags;
  }

  std::vector<Lattice::Arc> arcs(const data::Line& line, int node) {
    std::vector<data::Field> fields = data::split_fields(line.text);
    if (fields.empty())
      data::fail_at(source_, line.number, 1, "expected the arc count of node " + std::to_string(node));
    int k = data::field_int(source_, line.number, fields[0], "the arc count");
    if (k < 0 || size_t(k) * 2 + 1 != fields.size())
      data::fail_at(source_, line.number, fields[0].column,
                    "node " + std::to_string(node) + " announces " + std::to_string(k) +
                        " arcs but the line holds " + std::to_string(fields.size() - 1) +
                        " numbers (expected 2 per arc)");
    std::vector<Lattice::Arc> arcs;
    for (int j = 0; j < k; ++j)
      arcs.push_back(arc(line, fields[size_t(2 * j + 1)], fields[size_t(2 * j + 2)], node));
    return arcs;
  }

  Lattice::Arc arc(const data::Line& line, const data::Field& from, const data::Field& token, int node) {
    Lattice::Arc arc;
    arc.from = data::field_int(source_, line.number, from, "an arc's source node");
    arc.token = data::field_int(source_, line.number, token, "an arc's token");
    if (arc.from < 0 || arc.from >= node)
      data::fail_at(source_, line.number, from.column,
                    "an arc into node " + std::to_string(node) + " comes from node " +
                        std::to_string(arc.from) + " (it must come from an earlier node)");
    if (arc.token < 0) data::fail_at(source_, line.number, token.column, "an arc's token must be >= 0");
    arc.word = arc.from != node - 1;
    return arc;
  }

  const std::string& source_;
  std::vector<data::Line> lines_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<std::vector<int>> parse_ptb_text(const std::string& text, const std::string& source_name,
                                             Vocabulary& vocab, bool add_new_words) {
  std::vector<std::vector<int>> sentences;
  for (const data::Line& line : data::split_lines(text)) {
    std::vector<data::Field> fields = data::split_fields(line.text);
    if (fields.empty()) continue;
    std::vector<int>& sentence = sentences.emplace_back();
    for (const data::Field& field : fields)
      sentence.push_back(word_id(vocab, std::string(field.text), add_new_words));
  }
  return sentences;
}

std::vector<std::vector<int>> read_ptb_file(const std::string& path, Vocabulary& vocab, bool add_new_words) {
  return parse_ptb_text(data::read_text_file(path, "PTB text file"), path, vocab, add_new_words);
}

std::vector<TaggedSentence> parse_wikiner(const std::string& text, const std::string& source_name,
                                          Vocabulary& words, Vocabulary& tags, bool add_new_words) {
  std::vector<TaggedSentence> sentences;
  for (const data::Line& line : data::split_lines(text)) {
    std::vector<data::Field> fields = data::split_fields(line.text);
    if (fields.empty()) continue;
    TaggedSentence& sentence = sentences.emplace_back();
    for (const data::Field& field : fields)
      read_tagged_token(source_name, line.number, field, words, tags, add_new_words, sentence);
  }
  return sentences;
}

std::vector<TaggedSentence> read_wikiner_file(const std::string& path, Vocabulary& words, Vocabulary& tags,
                                              bool add_new_words) {
  return parse_wikiner(data::read_text_file(path, "WikiNER file"), path, words, tags, add_new_words);
}

std::vector<Lattice> parse_lattices(const std::string& text, const std::string& source_name) {
  return LatticeReader(text, source_name).read();
}

std::vector<Lattice> read_lattice_file(const std::string& path) {
  return parse_lattices(data::read_text_file(path, "lattice file"), path);
}

std::string format_lattices(std::span<const Lattice> lattices) {
  std::string out = std::to_string(lattices.size()) + "\n";
  for (const Lattice& lattice : lattices) {
    VJIT_USER_CHECK(lattice.incoming.size() == lattice.tags.size(),
                    "format_lattices: a lattice has " << lattice.tags.size() << " tags but "
                                                      << lattice.incoming.size() << " arc lists");
    out += std::to_string(lattice.num_nodes()) + "\n";
    for (size_t i = 0; i < lattice.tags.size(); ++i) out += (i ? " " : "") + std::to_string(lattice.tags[i]);
    out += "\n";
    for (const std::vector<Lattice::Arc>& arcs : lattice.incoming) {
      out += std::to_string(arcs.size());
      for (const Lattice::Arc& arc : arcs)
        out += " " + std::to_string(arc.from) + " " + std::to_string(arc.token);
      out += "\n";
    }
    out += "\n";
  }
  return out;
}

}  // namespace vjit
