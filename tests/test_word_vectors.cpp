// Pretrained word vectors into an embedding table (vjit/data.h load_word_vectors):
// GloVe and word2vec text, plain and gzip, matched by the vocabulary; every
// malformed file is a UserError naming the file, line and column.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/user_error.h"
#include "vjit/data.h"

namespace vjit {
namespace {

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "message: " << (text)
using test_util::user_error_of;

constexpr int kDim = 3;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("vjit_test_vectors_" + name)).string();
}

std::string write_plain(const std::string& name, const std::string& text) {
  std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return path;
}

std::string write_gzip(const std::string& name, const std::string& text) {
  std::string path = temp_path(name);
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(gzwrite(f, text.data(), unsigned(text.size())), int(text.size()));
  gzclose(f);
  return path;
}

// <unk>, the, It, cat, big dog, owl: ids 0..5.
Vocabulary test_vocabulary() {
  Vocabulary vocab;
  for (const char* word : {"the", "It", "cat", "big dog", "owl"}) vocab.add(word);
  return vocab;
}

// A table whose every value is -1 (the "initialisation" a missing word keeps).
std::vector<float> fresh_table(const Vocabulary& vocab) { return std::vector<float>(size_t(vocab.size()) * kDim, -1.0f); }

std::vector<float> row(const std::vector<float>& table, int id) {
  return {table.begin() + id * kDim, table.begin() + (id + 1) * kDim};
}

const std::string kGlove =
    "the 1 2 3\n"
    "it 4 5 6\n"          // "It" only in lower case
    "cat 7 8 9\n"
    "cat 0 0 0\n"         // a second vector of a word: the first one wins
    "zebra 1 1 1\n"       // not in the vocabulary
    "big dog 2.5 -1e-3 3e2\n"  // a word with a space (GloVe 840B has such words)
    "\n";

void expect_glove_loaded(const std::vector<float>& table, const WordVectorCounts& counts) {
  EXPECT_EQ(row(table, 1), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(row(table, 2), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(row(table, 3), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(row(table, 4), (std::vector<float>{2.5f, -1e-3f, 3e2f}));
  EXPECT_EQ(row(table, 0), (std::vector<float>{-1, -1, -1}));  // <unk> is not in the file
  EXPECT_EQ(row(table, 5), (std::vector<float>{-1, -1, -1}));  // nor is "owl"
  EXPECT_EQ(counts.exact, 3);
  EXPECT_EQ(counts.lowercase, 1);
  EXPECT_EQ(counts.missing, 2);
  EXPECT_EQ(counts.vectors, 6);
}

TEST(WordVectors, GloveTextByTheVocabulary) {
  Vocabulary vocab = test_vocabulary();
  std::vector<float> table = fresh_table(vocab);
  std::string path = write_plain("glove.txt", kGlove);
  expect_glove_loaded(table, load_word_vectors(path, vocab, table, kDim));
  std::filesystem::remove(path);
}

TEST(WordVectors, GzipReadsAsPlain) {
  Vocabulary vocab = test_vocabulary();
  std::vector<float> table = fresh_table(vocab);
  std::string path = write_gzip("glove.txt.gz", kGlove);
  expect_glove_loaded(table, load_word_vectors(path, vocab, table, kDim));
  std::filesystem::remove(path);
}

TEST(WordVectors, AnExactSpellingBeatsALowerCaseOne) {
  Vocabulary vocab = test_vocabulary();
  std::vector<float> table = fresh_table(vocab);
  std::string path = write_plain("exact.txt", "it 4 5 6\nIt 9 9 9\n");
  WordVectorCounts counts = load_word_vectors(path, vocab, table, kDim);
  EXPECT_EQ(row(table, 2), (std::vector<float>{9, 9, 9}));
  EXPECT_EQ(counts.exact, 1);
  EXPECT_EQ(counts.lowercase, 0);
  std::filesystem::remove(path);
}

TEST(WordVectors, Word2VecHeaderIsCheckedAndSkipped) {
  Vocabulary vocab = test_vocabulary();
  std::vector<float> table = fresh_table(vocab);
  std::string path = write_plain("w2v.txt", "2 3\nowl 1 0 1\ncat 3 3 3\n");
  WordVectorCounts counts = load_word_vectors(path, vocab, table, kDim);
  EXPECT_EQ(row(table, 5), (std::vector<float>{1, 0, 1}));
  EXPECT_EQ(counts.vectors, 2);
  std::string wrong = write_plain("w2v_wrong.txt", "2 4\nowl 1 0 1 0\n");
  std::string msg = user_error_of([&] { load_word_vectors(wrong, vocab, table, kDim); });
  EXPECT_CONTAINS(msg, wrong + ":1:3");
  EXPECT_CONTAINS(msg, "4 values, the embedding 3");
  std::filesystem::remove(path);
  std::filesystem::remove(wrong);
}

TEST(WordVectors, MalformedLinesNameTheirPosition) {
  Vocabulary vocab = test_vocabulary();
  std::vector<float> table = fresh_table(vocab);
  struct Case {
    const char* text;
    const char* position;
    const char* says;
  };
  for (const Case& c : {Case{"the 1 2 3\ncat 1 x 3\n", ":2:7", "value 2 must be a finite number, got 'x'"},
                        Case{"the 1 2\n", ":1:1", "expected a word and 3 values, got 3 fields"},
                        Case{"the 1 2 nan\n", ":1:9", "value 3 must be a finite number"},
                        Case{"the 1 2 1e99\n", ":1:9", "value 3 must be a finite number"},
                        Case{"the 1 2 3abc\n", ":1:9", "got '3abc'"}}) {
    std::string path = write_plain("bad.txt", c.text);
    std::string msg = user_error_of([&] { load_word_vectors(path, vocab, table, kDim); });
    EXPECT_CONTAINS(msg, path + c.position);
    EXPECT_CONTAINS(msg, c.says);
    std::filesystem::remove(path);
  }
}

TEST(WordVectors, TruncatedGzipAndDirectoriesAndSizesAreRefused) {
  Vocabulary vocab = test_vocabulary();
  std::vector<float> table = fresh_table(vocab);
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "w" + std::to_string(i) + " 0.125 0.25 0.5\n";
  std::string whole = write_gzip("whole.txt.gz", text);
  std::ifstream in(whole, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string cut = write_plain("cut.txt.gz", bytes.substr(0, bytes.size() / 2));
  EXPECT_CONTAINS(user_error_of([&] { load_word_vectors(cut, vocab, table, kDim); }),
                  "cannot read word vectors '" + cut);
  EXPECT_CONTAINS(user_error_of([&] { load_word_vectors(temp_path("missing.txt"), vocab, table, kDim); }),
                  "cannot open word vectors");
  const std::string dir = std::filesystem::temp_directory_path().string();
  EXPECT_CONTAINS(user_error_of([&] { load_word_vectors(dir, vocab, table, kDim); }), "it is a directory");
  std::vector<float> small(static_cast<size_t>(kDim));
  EXPECT_CONTAINS(user_error_of([&] { load_word_vectors(whole, vocab, small, kDim); }),
                  "the table holds 3 floats, not 6 words × 3");
  std::filesystem::remove(whole);
  std::filesystem::remove(cut);
}

}  // namespace
}  // namespace vjit
