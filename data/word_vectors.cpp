// Pretrained word vectors (GloVe, word2vec text) into an embedding table by
// the vocabulary (vjit/data.h). The file is streamed through zlib, which reads
// plain files as they are, so GloVe's 5 GB files need no memory of their size.
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/text.h"
#include "vjit/data.h"
#include "vjit/error.h"

namespace vjit {

namespace {

constexpr const char* kWhat = "word vectors";

// Lines of a plain or gzip file, one at a time, of any length.
class LineStream {
 public:
  explicit LineStream(const std::string& path) : path_(path) {
    VJIT_USER_CHECK(!std::filesystem::is_directory(path), "cannot read " << kWhat << " '" << path
                                                                          << "': it is a directory");
    file_.reset(gzopen(path.c_str(), "rb"));
    VJIT_USER_CHECK(file_ != nullptr, "cannot open " << kWhat << " '" << path << "'");
  }

  // The next line without its '\n' (and a '\r' before it); false at the end.
  bool next(std::string& line) {
    line.clear();
    char chunk[1 << 14];
    while (gzgets(file_.get(), chunk, int(sizeof chunk)) != nullptr) {
      line += chunk;
      if (!line.empty() && line.back() == '\n') break;
    }
    check_read();
    if (line.empty() && gzeof(file_.get())) return false;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    ++number_;
    return true;
  }
  int number() const { return number_; }

 private:
  void check_read() {
    int code = Z_OK;
    const char* message = gzerror(file_.get(), &code);
    VJIT_USER_CHECK(code == Z_OK,
                    "cannot read " << kWhat << " '" << path_ << "' after line " << number_ << ": " << message);
  }
  struct Close {
    void operator()(gzFile f) const { gzclose(f); }
  };
  std::string path_;
  std::unique_ptr<gzFile_s, Close> file_;
  int number_ = 0;
};

// word2vec's first line: exactly two integers, the second the width.
bool is_word2vec_header(const std::vector<data::Field>& fields) {
  int count = 0, width = 0;
  return fields.size() == 2 && data::parse_int(fields[0].text, count) && data::parse_int(fields[1].text, width);
}

// Where each vocabulary word's vector goes, by the spelling the file may hold.
struct Targets {
  explicit Targets(const Vocabulary& vocab) {
    for (int id = 0; id < vocab.size(); ++id) {
      const std::string& word = vocab.word(id);
      exact.emplace(word, id);
      std::string lower = word;
      for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
      if (lower != word) lowercase[lower].push_back(id);
    }
  }
  std::unordered_map<std::string, int> exact;
  std::unordered_map<std::string, std::vector<int>> lowercase;  // only words that differ from their lower case
};

enum class Found : uint8_t { None, Lowercase, Exact };

void read_vector(const std::string& path, int line, std::span<const data::Field> values, float* row) {
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string_view text = values[i].text;
    float value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value))
      data::fail_at(path, line, values[i].column,
                    "value " + std::to_string(i + 1) + " must be a finite number, got '" + std::string(text) + "'");
    row[i] = value;
  }
}

}  // namespace

WordVectorCounts load_word_vectors(const std::string& path, const Vocabulary& vocab, std::span<float> table,
                                   int dim) {
  VJIT_USER_CHECK(dim > 0 && int64_t(table.size()) == int64_t(vocab.size()) * dim,
                  "load_word_vectors: the table holds " << table.size() << " floats, not " << vocab.size()
                                                        << " words × " << dim);
  const Targets targets(vocab);
  std::vector<Found> found(size_t(vocab.size()), Found::None);
  std::vector<float> parsed(static_cast<size_t>(dim));
  WordVectorCounts counts;
  LineStream lines(path);
  std::string line;
  while (lines.next(line)) {
    const std::vector<data::Field> fields = data::split_fields(line);
    if (fields.empty()) continue;
    if (lines.number() == 1 && is_word2vec_header(fields)) {
      const int width = std::stoi(std::string(fields[1].text));
      if (width != dim)
        data::fail_at(path, 1, fields[1].column,
                      "the vectors have " + std::to_string(width) + " values, the embedding " + std::to_string(dim));
      continue;
    }
    if (int64_t(fields.size()) < int64_t(dim) + 1)
      data::fail_at(path, lines.number(), 1,
                    "expected a word and " + std::to_string(dim) + " values, got " +
                        std::to_string(fields.size()) + " fields");
    const std::span<const data::Field> values(fields.end() - dim, fields.end());
    read_vector(path, lines.number(), values, parsed.data());
    ++counts.vectors;
    // The word is everything before the vector (GloVe 840B holds words with spaces).
    const size_t word_end = size_t(values.front().text.data() - line.data());
    std::string_view word(line.data(), word_end);
    while (!word.empty() && data::is_blank(word.back())) word.remove_suffix(1);
    const std::string key(word);
    auto write = [&](int id, Found how) {
      if (found[size_t(id)] >= how) return;  // the first exact spelling wins, and beats a lower case one
      found[size_t(id)] = how;
      std::copy(parsed.begin(), parsed.end(), table.begin() + int64_t(id) * dim);
    };
    if (auto it = targets.exact.find(key); it != targets.exact.end()) write(it->second, Found::Exact);
    if (auto it = targets.lowercase.find(key); it != targets.lowercase.end())
      for (int id : it->second) write(id, Found::Lowercase);
  }
  for (Found f : found) {
    if (f == Found::Exact) ++counts.exact;
    else if (f == Found::Lowercase) ++counts.lowercase;
    else ++counts.missing;
  }
  return counts;
}

}  // namespace vjit
