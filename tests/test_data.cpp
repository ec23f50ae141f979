// Data sets: the bracket-tree parser and writer, the vocabulary, the synthetic
// generators, tree → GraphBatch conversion and the PTB / WikiNER / lattice
// readers and their PRNG (vjit/random.h); plus optional checks of the real
// files in VJIT_SHARED_DATA_DIR and the SST shipped gzip-compressed in data/sst/.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "vjit/data.h"
#include "tests/user_error.h"
#include "vjit/error.h"
#include "vjit/graph.h"
#include "vjit/validate.h"
#include "vjit/random.h"

namespace vjit {
namespace {

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "message: " << (text)

using test_util::user_error_of;

std::string bracket_error(const std::string& text) {
  return user_error_of([&] { parse_bracket_trees(text, "src"); });
}

// ---------------------------------------------------------------- bracket trees

TEST(Bracket, ParsesTheExample) {
  auto trees = parse_bracket_trees("(3 (2 It) (4 (2 's) (3 good)))", "example");
  ASSERT_EQ(trees.size(), 1u);
  const auto& n = trees[0].nodes;
  ASSERT_EQ(n.size(), 5u);
  EXPECT_EQ(n[0].word, "It");
  EXPECT_EQ(n[1].word, "'s");
  EXPECT_EQ(n[2].word, "good");
  EXPECT_EQ(n[3].label, 4);
  EXPECT_EQ(n[3].children, (std::vector<int>{1, 2}));
  EXPECT_EQ(n[4].label, 3);  // the root is last
  EXPECT_EQ(n[4].children, (std::vector<int>{0, 3}));
  EXPECT_TRUE(n[4].word.empty());
  EXPECT_EQ(n[2].label, 3);
}

TEST(Bracket, LinesBlanksAndOddWords) {
  auto trees = parse_bracket_trees("\n(2 -LRB-)\r\n  \n(1 (0 n't)\t(4 São|x``))  \n(2(1 a)(3 b))", "s");
  ASSERT_EQ(trees.size(), 3u);
  EXPECT_EQ(trees[0].nodes[0].word, "-LRB-");
  EXPECT_EQ(trees[1].nodes[0].word, "n't");
  EXPECT_EQ(trees[1].nodes[1].word, "São|x``");
  EXPECT_EQ(trees[2].nodes.size(), 3u);
}

TEST(Bracket, ErrorsCarryLineAndColumn) {
  EXPECT_CONTAINS(bracket_error("(3 (2 a) (2 b)"),
                  "src:1:15: unbalanced parentheses: the node opened at column 1");
  EXPECT_CONTAINS(bracket_error("(2 a))"), "src:1:6: unbalanced parentheses: unexpected ')'");
  EXPECT_CONTAINS(bracket_error("((2 a) (2 b))"), "src:1:2: missing label");
  EXPECT_CONTAINS(bracket_error("(x (2 a) (2 b))"), "src:1:2: label 'x' is not an integer");
  EXPECT_CONTAINS(bracket_error("(2 (2.5 a) (2 b))"), "src:1:5: label '2.5' is not an integer");
  EXPECT_CONTAINS(bracket_error("(2 a) junk"), "src:1:7: unexpected text after the tree");
  EXPECT_CONTAINS(bracket_error("(2 a) (3 b)"), "src:1:7: unexpected text after the tree");
  EXPECT_CONTAINS(bracket_error("(2 (3) (2 a))"), "src:1:6: empty node");
  EXPECT_CONTAINS(bracket_error("()"), "src:1:2: empty node");
  EXPECT_CONTAINS(bracket_error("hello (2 a)"), "src:1:1: expected '('");
  EXPECT_CONTAINS(bracket_error("(2 a (3 b))"), "src:1:6:");
  EXPECT_CONTAINS(bracket_error("(2 a b)"), "src:1:6: second word 'b'");
  EXPECT_CONTAINS(bracket_error("(2 (3 a) b)"), "src:1:10: word 'b' follows a child node");
  EXPECT_CONTAINS(bracket_error("("), "src:1:2: missing label");
  EXPECT_CONTAINS(bracket_error("(2"), "src:1:3: unbalanced parentheses");
  EXPECT_CONTAINS(bracket_error("(2 a)\n\n(3 (2 b)\n(2 c)"), "src:3:9: unbalanced parentheses");
}

TEST(Bracket, MissingFileNamesThePath) {
  std::string msg = user_error_of([] { read_bracket_file("/nonexistent/dir/trees.txt"); });
  EXPECT_CONTAINS(msg, "/nonexistent/dir/trees.txt");
}

TEST(Bracket, WriterRejectsWordsItCannotHold) {
  BracketTree tree;
  tree.nodes.push_back({2, "a b", {}});
  EXPECT_THROW(format_bracket_tree(tree), UserError);
  tree.nodes[0].word = "(x";
  EXPECT_THROW(format_bracket_tree(tree), UserError);
  EXPECT_THROW(format_bracket_tree(BracketTree{}), UserError);
}

TEST(Bracket, FileRoundTrip) {
  auto trees = make_synthetic_treebank(20, 5);
  std::string path = (std::filesystem::temp_directory_path() / "vjit_test_data_trees.txt").string();
  write_bracket_file(path, trees);
  EXPECT_EQ(format_bracket_trees(read_bracket_file(path)), format_bracket_trees(trees));
  std::filesystem::remove(path);
}

// ------------------------------------------------------------ synthetic treebank

void expect_same_trees(const std::vector<BracketTree>& a, const std::vector<BracketTree>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t t = 0; t < a.size(); ++t) {
    ASSERT_EQ(a[t].nodes.size(), b[t].nodes.size()) << "tree " << t;
    for (size_t i = 0; i < a[t].nodes.size(); ++i) {
      EXPECT_EQ(a[t].nodes[i].label, b[t].nodes[i].label);
      EXPECT_EQ(a[t].nodes[i].word, b[t].nodes[i].word);
      EXPECT_EQ(a[t].nodes[i].children, b[t].nodes[i].children);
    }
  }
}

TEST(SyntheticTreebank, RoundTripThroughText) {
  auto trees = make_synthetic_treebank(200, 42);
  std::string text = format_bracket_trees(trees);
  auto parsed = parse_bracket_trees(text, "generated");
  expect_same_trees(trees, parsed);
  EXPECT_EQ(format_bracket_trees(parsed), text);
}

TEST(SyntheticTreebank, DeterministicBySeed) {
  EXPECT_EQ(format_bracket_trees(make_synthetic_treebank(50, 1)),
            format_bracket_trees(make_synthetic_treebank(50, 1)));
  EXPECT_NE(format_bracket_trees(make_synthetic_treebank(50, 1)),
            format_bracket_trees(make_synthetic_treebank(50, 2)));
  // A fixed seed gives a fixed first tree on every platform (own PRNG, no std distributions).
  EXPECT_EQ(format_bracket_tree(make_synthetic_treebank(1, 1)[0]),
            format_bracket_tree(make_synthetic_treebank(3, 1)[0]));
}

TEST(SyntheticTreebank, ShapeAndLengths) {
  SyntheticTreebankOptions options;
  options.min_length = 3;
  options.max_length = 20;
  int shortest = 1000, longest = 0;
  for (const BracketTree& tree : make_synthetic_treebank(500, 3, options)) {
    int words = 0;
    for (const auto& node : tree.nodes) {
      if (node.word.empty())
        EXPECT_EQ(node.children.size(), 2u);
      else
        ++words;
    }
    EXPECT_EQ(int(tree.nodes.size()), 2 * words - 1);
    shortest = std::min(shortest, words);
    longest = std::max(longest, words);
  }
  EXPECT_EQ(shortest, 3);
  EXPECT_EQ(longest, 20);
  EXPECT_LE(Vocabulary::from_trees(make_synthetic_treebank(500, 3)).size(), 41);
}

TEST(SyntheticTreebank, LabelDistributionIsNotDegenerate) {
  std::map<int, int> all, roots;
  int nodes = 0;
  auto trees = make_synthetic_treebank(2000, 11);
  for (const BracketTree& tree : trees) {
    for (const auto& node : tree.nodes) ++all[node.label];
    ++roots[tree.nodes.back().label];
    nodes += int(tree.nodes.size());
  }
  auto classes_over = [](const std::map<int, int>& counts, int total, double share) {
    int n = 0;
    for (auto [label, count] : counts) {
      EXPECT_GE(label, 0);
      EXPECT_LE(label, 4);
      n += count >= share * total;
    }
    return n;
  };
  EXPECT_GE(classes_over(all, nodes, 0.10), 3);
  EXPECT_GE(classes_over(roots, int(trees.size()), 0.10), 3);
}

// Recomputes the labelling rule documented in data.h from the words.
int rule_score(const BracketTree& tree, int index, bool& negator) {
  static const std::map<std::string, int> polarity = {
      {"excellent", 2}, {"wonderful", 2}, {"brilliant", 2},  {"superb", 2},  {"delightful", 2},
      {"masterful", 2}, {"good", 1},      {"nice", 1},       {"fun", 1},     {"charming", 1},
      {"solid", 1},     {"pleasant", 1},  {"bad", -1},       {"dull", -1},   {"boring", -1},
      {"weak", -1},     {"flat", -1},     {"tedious", -1},   {"awful", -2},  {"terrible", -2},
      {"dreadful", -2}, {"horrible", -2}, {"atrocious", -2}, {"abysmal", -2}};
  const auto& node = tree.nodes[size_t(index)];
  if (!node.word.empty()) {
    negator = node.word == "not" || node.word == "never" || node.word == "hardly" || node.word == "n't";
    auto it = polarity.find(node.word);
    return it == polarity.end() ? 0 : it->second;
  }
  negator = false;
  bool na = false, nb = false;
  int a = rule_score(tree, node.children[0], na), b = rule_score(tree, node.children[1], nb);
  int score = na != nb ? (na ? -b : -a) : a + b;
  return std::clamp(score, -2, 2);
}

TEST(SyntheticTreebank, LabelsFollowPolarityAndNegation) {
  int negations = 0;
  for (const BracketTree& tree : make_synthetic_treebank(300, 9)) {
    for (int i = 0; i < int(tree.nodes.size()); ++i) {
      bool negator = false;
      EXPECT_EQ(tree.nodes[size_t(i)].label, rule_score(tree, i, negator) + 2);
      const auto& node = tree.nodes[size_t(i)];
      for (int c : node.children) negations += tree.nodes[size_t(c)].word == "not";
    }
  }
  EXPECT_GT(negations, 20);
}

TEST(SyntheticTreebank, BadOptions) {
  SyntheticTreebankOptions options;
  options.min_length = 0;
  EXPECT_THROW(make_synthetic_treebank(1, 1, options), UserError);
  options = {};
  options.negator_rate = 0.8;
  options.neutral_rate = 0.5;
  EXPECT_THROW(make_synthetic_treebank(1, 1, options), UserError);
}

// ------------------------------------------------------------------ vocabulary

TEST(Vocabulary, BuildByFrequencyWithUnk) {
  Vocabulary v = Vocabulary::build({"b", "a", "c", "a", "b", "a", "d"});
  EXPECT_EQ(v.size(), 5);
  EXPECT_EQ(v.word(0), "<unk>");
  EXPECT_EQ(v.id("a"), 1);
  EXPECT_EQ(v.id("b"), 2);
  EXPECT_EQ(v.id("c"), 3);  // ties in byte order
  EXPECT_EQ(v.id("d"), 4);
  EXPECT_EQ(v.id("zzz"), v.unk_id());
  EXPECT_EQ(v.id("<unk>"), 0);
  EXPECT_TRUE(v.contains("c"));
  EXPECT_FALSE(v.contains("zzz"));
  EXPECT_THROW(v.word(5), UserError);

  Vocabulary small = Vocabulary::build({"b", "a", "c", "a", "b", "a", "d"}, 3);
  EXPECT_EQ(small.size(), 3);
  EXPECT_EQ(small.id("c"), 0);
  EXPECT_EQ(small.id("b"), 2);
}

TEST(Vocabulary, WithoutUnkAndAdd) {
  Vocabulary tags(false);
  EXPECT_EQ(tags.unk_id(), -1);
  EXPECT_EQ(tags.add("O"), 0);
  EXPECT_EQ(tags.add("I-PER"), 1);
  EXPECT_EQ(tags.add("O"), 0);
  EXPECT_EQ(tags.id("B-X"), -1);
  EXPECT_EQ(tags.size(), 2);
}

TEST(Vocabulary, FromTrees) {
  auto trees = parse_bracket_trees("(3 (2 It) (4 (2 's) (3 good)))\n(1 (2 good) (1 bad))", "s");
  Vocabulary v = Vocabulary::from_trees(trees);
  EXPECT_EQ(v.size(), 5);
  EXPECT_EQ(v.id("good"), 1);
}

// ------------------------------------------------------------- tree → sample

TEST(TreeToSample, ExampleTree) {
  auto trees = parse_bracket_trees("(3 (2 It) (4 (2 's) (3 good)))", "s");
  Vocabulary v = Vocabulary::from_trees(trees);
  Sample s = tree_to_sample(trees[0], v, TreeTypes{5, 6}, "t");
  EXPECT_EQ(s.name, "t");
  ASSERT_EQ(s.vertices.size(), 5u);
  EXPECT_EQ(s.vertices[0].type, 5);
  EXPECT_EQ(s.vertices[0].token, v.id("It"));
  EXPECT_EQ(s.vertices[2].token, v.id("good"));
  EXPECT_EQ(s.vertices[3].type, 6);
  EXPECT_EQ(s.vertices[3].token, -1);
  EXPECT_EQ(s.vertices[3].children, (std::vector<int>{1, 2}));
  EXPECT_EQ(s.vertices[4].children, (std::vector<int>{0, 3}));
  EXPECT_EQ(s.vertices[4].label, 3);
  EXPECT_EQ(s.vertices[1].label, 2);
}

TEST(TreeToSample, UnaryNodesCollapseKeepingTheTopLabel) {
  // A unary root over an internal node, and a unary chain 0 → 1 → leaf.
  auto trees = parse_bracket_trees("(4 (3 (0 (1 a)) (2 b)))", "s");
  Vocabulary v = Vocabulary::from_trees(trees);
  Sample s = tree_to_sample(trees[0], v, TreeTypes{});
  ASSERT_EQ(s.vertices.size(), 3u);
  EXPECT_EQ(s.vertices[0].token, v.id("a"));
  EXPECT_EQ(s.vertices[0].label, 0);  // the top of the chain (0 (1 a))
  EXPECT_EQ(s.vertices[2].children, (std::vector<int>{0, 1}));
  EXPECT_EQ(s.vertices[2].label, 4);  // the unary root
}

TEST(TreeToSample, NaryNodesAndUnknownWords) {
  auto trees = parse_bracket_trees("(2 (1 x) (2 y) (3 z))", "s");
  Vocabulary v = Vocabulary::build({"x"});
  Sample s = tree_to_sample(trees[0], v, TreeTypes{});
  EXPECT_EQ(s.vertices.back().children.size(), 3u);
  EXPECT_EQ(s.vertices[1].token, v.unk_id());
}

TEST(TreeToSample, MalformedTree) {
  BracketTree tree;
  tree.nodes.push_back({2, "", {1}});  // the child comes after its parent
  tree.nodes.push_back({2, "a", {}});
  EXPECT_CONTAINS(user_error_of([&] { tree_to_sample(tree, Vocabulary(), TreeTypes{}, "bad"); }), "'bad', node 0");
  EXPECT_THROW(tree_to_sample(BracketTree{}, Vocabulary(), TreeTypes{}), UserError);
}

// Leaf and binary internal signatures as a Tree-LSTM program would export them.
std::vector<TypeSignature> tree_signatures(int vocab_size) {
  TypeSignature leaf;
  leaf.name = "leaf";
  leaf.scatters = true;
  leaf.scatter_shape = Shape::vec(4);
  leaf.vocab_size = vocab_size;
  leaf.needs_label = true;
  leaf.num_classes = 5;
  TypeSignature internal = leaf;
  internal.name = "internal";
  internal.vocab_size = -1;
  internal.fixed_arity = 2;
  internal.slot_shapes = {Shape::vec(4), Shape::vec(4)};
  return {leaf, internal};
}

TEST(TreeToSample, SyntheticBatchValidates) {
  auto trees = make_synthetic_treebank(100, 4);
  Vocabulary v = Vocabulary::from_trees(trees);
  GraphBatch batch = trees_to_batch(trees, v, TreeTypes{}, 10);
  ASSERT_EQ(batch.samples.size(), 100u);
  EXPECT_EQ(batch.samples[3].name, "tree 13");
  auto orders = validate_and_order(tree_signatures(v.size()), batch);
  EXPECT_EQ(orders.size(), 100u);
}

// ------------------------------------------------------------------ PTB text

TEST(PtbText, ReadsSentences) {
  Vocabulary v;
  auto sentences = parse_ptb_text(" the cat sat \n\n the <unk> ran \n", "ptb", v);
  ASSERT_EQ(sentences.size(), 2u);
  EXPECT_EQ(sentences[0], (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(sentences[1], (std::vector<int>{1, 0, 4}));
  auto frozen = parse_ptb_text("the dog", "ptb", v, false);
  EXPECT_EQ(frozen[0], (std::vector<int>{1, 0}));
  EXPECT_EQ(v.size(), 5);
  EXPECT_CONTAINS(user_error_of([&] { read_ptb_file("/nonexistent/ptb.txt", v); }), "/nonexistent/ptb.txt");
}

TEST(PtbText, SyntheticSentences) {
  SyntheticTextOptions options;
  options.vocab_size = 200;
  auto sentences = make_synthetic_sentences(2000, 8, options);
  EXPECT_EQ(sentences, make_synthetic_sentences(2000, 8, options));
  EXPECT_NE(sentences, make_synthetic_sentences(2000, 9, options));
  std::vector<int> counts(200);
  for (const auto& s : sentences) {
    EXPECT_GE(s.size(), 5u);
    EXPECT_LE(s.size(), 30u);
    for (int w : s) {
      ASSERT_GE(w, 0);
      ASSERT_LT(w, 200);
      ++counts[size_t(w)];
    }
  }
  EXPECT_GT(counts[0], counts[9]);  // Zipf-ish: frequent words are frequent
  EXPECT_GT(counts[9], counts[150]);
  EXPECT_GT(counts[0], 5 * counts[50]);
}

// ------------------------------------------------------------------- WikiNER

TEST(WikiNer, ReadsTaggedSentences) {
  Vocabulary words, tags(false);
  auto sentences = parse_wikiner("John|I-PER runs|O\n\nParis|I-LOC a|b|O\n", "ner", words, tags);
  ASSERT_EQ(sentences.size(), 2u);
  EXPECT_EQ(sentences[0].words, (std::vector<int>{1, 2}));
  EXPECT_EQ(sentences[0].tags, (std::vector<int>{0, 1}));
  EXPECT_EQ(sentences[1].tags, (std::vector<int>{2, 1}));
  EXPECT_EQ(words.word(sentences[1].words[1]), "a|b");  // the last '|' splits
  EXPECT_EQ(tags.size(), 3);
}

TEST(WikiNer, ErrorsCarryLineAndColumn) {
  Vocabulary words, tags(false);
  auto err = [&](const std::string& text, bool grow = true) {
    return user_error_of([&] { parse_wikiner(text, "ner", words, tags, grow); });
  };
  EXPECT_CONTAINS(err("a|O\nx|O b c|O"), "ner:2:5: token 'b' is not of the form word|TAG");
  EXPECT_CONTAINS(err("|O"), "ner:1:1: token '|O' has an empty word");
  EXPECT_CONTAINS(err("a|O  b|"), "ner:1:8: token 'b|' has an empty tag");
  EXPECT_CONTAINS(err("a|B-NEW", false), "ner:1:3: unknown tag 'B-NEW'");
}

TEST(WikiNer, SyntheticTaggedSentences) {
  SyntheticTaggingOptions options;
  auto sentences = make_synthetic_tagged_sentences(300, 5, options);
  std::vector<int> tag_counts(size_t(options.num_tags));
  for (const auto& s : sentences) {
    ASSERT_EQ(s.words.size(), s.tags.size());
    for (size_t i = 0; i < s.words.size(); ++i) {
      EXPECT_EQ(s.tags[i], synthetic_tag(s.words[i], i ? s.words[i - 1] : -1, options.num_tags));
      ++tag_counts[size_t(s.tags[i])];
    }
  }
  for (int count : tag_counts) EXPECT_GT(count, 0);
  auto again = make_synthetic_tagged_sentences(300, 5, options);
  EXPECT_EQ(again[7].words, sentences[7].words);
}

// ------------------------------------------------------------------ lattices

const char* kLatticeText =
    "2\n"
    "4\n"
    "0 7 9 3\n"
    "0 \n"
    "1 0 62\n"
    "2 1 480 0 3395\n"
    "2 2 1609 0 10130\n"
    "\n"
    "2\n"
    "0 1\n"
    "0\n"
    "1 0 5\n"
    "\n";

TEST(Lattice, ReadsTheFormat) {
  auto lattices = parse_lattices(kLatticeText, "lat");
  ASSERT_EQ(lattices.size(), 2u);
  const Lattice& a = lattices[0];
  EXPECT_EQ(a.num_nodes(), 4);
  EXPECT_EQ(a.tags, (std::vector<int>{0, 7, 9, 3}));
  EXPECT_TRUE(a.incoming[0].empty());
  ASSERT_EQ(a.incoming[2].size(), 2u);
  EXPECT_EQ(a.incoming[2][0].from, 1);
  EXPECT_EQ(a.incoming[2][0].token, 480);
  EXPECT_FALSE(a.incoming[2][0].word);  // from i - 1: a character arc
  EXPECT_EQ(a.incoming[2][1].from, 0);
  EXPECT_TRUE(a.incoming[2][1].word);
  EXPECT_EQ(a.incoming[3][1].from, 0);
  EXPECT_EQ(a.incoming[3][1].token, 10130);
  EXPECT_EQ(lattices[1].num_nodes(), 2);
  EXPECT_EQ(format_lattices(parse_lattices(format_lattices(lattices), "again")), format_lattices(lattices));
}

TEST(Lattice, ErrorsCarryLineAndColumn) {
  auto err = [](const std::string& text) { return user_error_of([&] { parse_lattices(text, "lat"); }); };
  EXPECT_CONTAINS(err("x\n"), "lat:1:1: the number of lattices must be an integer, got 'x'");
  EXPECT_CONTAINS(err("1 2\n"), "lat:1:3: expected the number of lattices alone");
  EXPECT_CONTAINS(err("1\n3\n0 1\n"), "lat:3:1: expected 3 node tags, got 2");
  EXPECT_CONTAINS(err("1\n2\n0 1\n0\n2 0 5\n"),
                  "lat:5:1: node 1 announces 2 arcs but the line holds 2 numbers");
  EXPECT_CONTAINS(err("1\n2\n0 1\n0\n1 1 5\n"), "lat:5:3: an arc into node 1 comes from node 1");
  EXPECT_CONTAINS(err("1\n2\n0 1\n0\n1 0 z\n"), "lat:5:5: an arc's token must be an integer, got 'z'");
  EXPECT_CONTAINS(err("1\n2\n0 1\n0\n"),
                  "lat:5:1: unexpected end of file: expected node 1 of lattice 1 of 1");
  EXPECT_CONTAINS(err("2\n1\n0\n0\n"),
                  "lat:5:1: unexpected end of file: expected the node count of lattice 2 of 2");
  EXPECT_CONTAINS(err("1\n1\n0\n0\n\n7\n"), "lat:6:1: unexpected text after the last lattice");
  EXPECT_CONTAINS(err(""), "lat:1:1: unexpected end of file");
  EXPECT_CONTAINS(user_error_of([] { read_lattice_file("/nonexistent/lat.txt"); }), "/nonexistent/lat.txt");
}

TEST(Lattice, SyntheticLattices) {
  SyntheticLatticeOptions options;
  auto lattices = make_synthetic_lattices(200, 3, options);
  EXPECT_EQ(format_lattices(lattices), format_lattices(make_synthetic_lattices(200, 3, options)));
  EXPECT_NE(format_lattices(lattices), format_lattices(make_synthetic_lattices(200, 4, options)));
  int word_arcs = 0, char_arcs = 0;
  for (const Lattice& l : lattices) {
    EXPECT_GE(l.num_nodes(), options.min_chars + 1);
    EXPECT_LE(l.num_nodes(), options.max_chars + 1);
    EXPECT_TRUE(l.incoming[0].empty());
    for (int i = 1; i < l.num_nodes(); ++i) {
      const auto& arcs = l.incoming[size_t(i)];
      ASSERT_GE(arcs.size(), 1u);
      EXPECT_EQ(arcs[0].from, i - 1);  // the character chain
      for (const auto& arc : arcs) {
        EXPECT_EQ(arc.word, arc.from != i - 1);
        if (arc.word) {
          EXPECT_TRUE(i - arc.from >= 2 && i - arc.from <= 4);
        }
        EXPECT_LT(arc.token, options.vocab_size);
        (arc.word ? word_arcs : char_arcs)++;
      }
      EXPECT_EQ(l.tags[size_t(i)], (arcs[0].token + (arcs.size() > 1 ? 1 : 0)) % options.num_tags);
    }
  }
  EXPECT_GT(word_arcs, char_arcs / 10);
  // The text form reads back the same.
  auto parsed = parse_lattices(format_lattices(lattices), "generated");
  EXPECT_EQ(format_lattices(parsed), format_lattices(lattices));
}

// ------------------------------------------------------------------------ PRNG

TEST(Rng, IsSplitMix64) {
  // The first outputs of SplitMix64 seeded with 0 (the reference C code).
  Rng rng(0);
  EXPECT_EQ(rng.next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(rng.next(), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(rng.next(), 0x06C45D188009454Full);
  EXPECT_EQ(mix64(0x9E3779B97F4A7C15ull), 0xE220A8397B1DCDAFull);
}

TEST(Rng, RangesAndShuffle) {
  Rng rng(7);
  bool low = false, high = false;
  for (int i = 0; i < 1000; ++i) {
    const int k = rng.uniform_int(-2, 3);
    ASSERT_GE(k, -2);
    ASSERT_LE(k, 3);
    low |= k == -2;
    high |= k == 3;
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  EXPECT_TRUE(low && high);
  std::vector<int> a(50), b(50);
  for (int i = 0; i < 50; ++i) a[size_t(i)] = b[size_t(i)] = i;
  Rng(3).shuffle(a);
  Rng(3).shuffle(b);
  EXPECT_EQ(a, b) << "the order is a function of the seed";
  std::vector<int> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sorted[size_t(i)], i);
  EXPECT_FALSE(std::is_sorted(a.begin(), a.end()));
}

// ------------------------------------------------------ the real data files

std::string shared(const std::string& relative) { return std::string(VJIT_SHARED_DATA_DIR) + "/" + relative; }

#define SKIP_UNLESS_PRESENT(folder)                                                                  \
  do {                                                                                               \
    if (!std::filesystem::is_directory(shared(folder))) {                                            \
      GTEST_SKIP() << "the public data folder " << shared(folder)                                    \
                   << " is not present on this machine (optional check; see shared/data/README.md)"; \
    }                                                                                                \
  } while (0)

TEST(RealData, SstSplits) {
  SKIP_UNLESS_PRESENT("sst");
  const std::map<std::string, size_t> expected = {{"train", 8544}, {"dev", 1101}, {"test", 2210}};
  std::vector<BracketTree> train = read_bracket_file(shared("sst/train.txt"));
  Vocabulary v = Vocabulary::from_trees(train);
  for (const auto& [split, count] : expected) {
    auto trees = split == "train" ? train : read_bracket_file(shared("sst/" + split + ".txt"));
    EXPECT_EQ(trees.size(), count) << split;
    for (const BracketTree& tree : trees)
      for (const auto& node : tree.nodes) {
        ASSERT_GE(node.label, 0) << split;
        ASSERT_LE(node.label, 4) << split;
      }
    // Every tree becomes a valid sample for a binary Tree-LSTM.
    validate_and_order(tree_signatures(v.size()), trees_to_batch(trees, v, TreeTypes{}));
  }
}

// ------------------------------------------- the SST shipped in data/sst/ (gzip)

std::string shipped(const std::string& relative) { return std::string(VJIT_SHIPPED_DATA_DIR) + "/" + relative; }

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::string write_temp(const std::string& name, const std::string& bytes) {
  std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

TEST(ShippedSst, SplitsLoadWithTheirTreeCounts) {
  const std::map<std::string, size_t> expected = {{"train", 8544}, {"dev", 1101}, {"test", 2210}};
  for (const auto& [split, count] : expected) {
    std::vector<BracketTree> trees = read_bracket_file(shipped("sst/" + split + ".txt.gz"));
    EXPECT_EQ(trees.size(), count) << split;
    for (const BracketTree& tree : trees)
      for (const auto& node : tree.nodes) ASSERT_TRUE(node.label >= 0 && node.label <= 4) << split;
  }
}

TEST(ShippedSst, SameTreesAsTheSharedCopy) {
  SKIP_UNLESS_PRESENT("sst");
  EXPECT_EQ(format_bracket_trees(read_bracket_file(shipped("sst/dev.txt.gz"))),
            format_bracket_trees(read_bracket_file(shared("sst/dev.txt"))));
}

TEST(ShippedSst, TruncatedGzipNamesTheFile) {
  std::string bytes = file_bytes(shipped("sst/dev.txt.gz"));
  ASSERT_GT(bytes.size(), 1000u);
  std::string path = write_temp("vjit_test_truncated.txt.gz", bytes.substr(0, bytes.size() / 2));
  std::string msg = user_error_of([&] { read_bracket_file(path); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "truncated");
  std::filesystem::remove(path);
}

TEST(ShippedSst, CorruptGzipNamesTheFile) {
  std::string bytes = file_bytes(shipped("sst/dev.txt.gz"));
  ASSERT_GT(bytes.size(), 1000u);
  for (size_t i = 20; i < 200; ++i) bytes[i] = char(0xff);  // deflate data after the 10-byte header
  std::string path = write_temp("vjit_test_corrupt.txt.gz", bytes);
  std::string msg = user_error_of([&] { read_bracket_file(path); });
  EXPECT_CONTAINS(msg, path);
  EXPECT_CONTAINS(msg, "corrupt gzip data");
  std::filesystem::remove(path);
}

TEST(RealData, Lattices) {
  SKIP_UNLESS_PRESENT("lattice");
  for (const char* split : {"train", "dev", "test"}) {
    auto lattices = read_lattice_file(shared(std::string("lattice/") + split + ".txt"));
    EXPECT_GT(lattices.size(), 0u) << split;
    for (const Lattice& l : lattices)
      for (int i = 1; i < l.num_nodes(); ++i) {
        bool has_char_arc = false;
        for (const auto& arc : l.incoming[size_t(i)]) has_char_arc |= !arc.word;
        ASSERT_TRUE(has_char_arc) << split << ": node " << i;
      }
  }
}

TEST(RealData, PtbText) {
  SKIP_UNLESS_PRESENT("ptb");
  Vocabulary v;
  EXPECT_EQ(read_ptb_file(shared("ptb/dev.txt"), v).size(), 3370u);
  EXPECT_EQ(read_ptb_file(shared("ptb/test.txt"), v).size(), 3761u);
  EXPECT_LE(v.size(), 10001);  // Mikolov's PTB has a 10k vocabulary, <unk> included
  EXPECT_EQ(v.id("<unk>"), 0);
}

TEST(RealData, WikiNer) {
  SKIP_UNLESS_PRESENT("wikiner");
  Vocabulary words, tags(false);
  auto sentences = read_wikiner_file(shared("wikiner/dev.txt"), words, tags);
  EXPECT_EQ(sentences.size(), 1696u);
  EXPECT_EQ(tags.size(), 5);  // O, I-PER, I-LOC, I-ORG, I-MISC
  for (const auto& s : sentences) ASSERT_EQ(s.words.size(), s.tags.size());
}

}  // namespace
}  // namespace vjit
