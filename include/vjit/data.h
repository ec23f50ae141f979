#pragma once
// Data sets for the dynamic-network benchmarks: a vocabulary, readers for the
// public formats (SST bracket trees, PTB text, WikiNER, ED-Batch
// lattices), deterministic generators of the same structures (so tests and jobs
// never need the files), and the conversion of bracket trees to a GraphBatch.
//
// Every reader throws UserError "<source>:<line>:<column>: <what is wrong>" on
// malformed text and a UserError naming the path when a file cannot be read.
// Every generator is a pure function of its arguments (its own PRNG, no
// std::*_distribution), so a seed gives the same data on every platform.
#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "vjit/graph.h"

namespace vjit {

/// Reads trees in PTB bracket form as in the Stanford Sentiment Treebank, one per
/// line: `(3 (2 It) (4 (2 's) (3 good)))`. Every node has a label; leaves hold a
/// word. Malformed text throws UserError with the line and column.
struct BracketTree {
  /// One node of the tree.
  struct Node {
    int label = -1;  ///< the node's sentiment label (0 to 4 in the SST)
    std::string word;           ///< non-empty only at leaves
    std::vector<int> children;  ///< node indices
  };
  std::vector<Node> nodes;  ///< children come before their parents; the root is last
};
/// The trees of `text`, one bracketed tree per non-blank line ("(3 (2 a) (4 b))");
/// UserError naming `source_name`, the line and the column of a malformed one.
std::vector<BracketTree> parse_bracket_trees(const std::string& text, const std::string& source_name);
/// parse_bracket_trees of the file at `path` (UserError naming it when it cannot be read).
std::vector<BracketTree> read_bracket_file(const std::string& path);

// ---------------------------------------------------------------- vocabulary

/// Maps words to dense ids. With an `<unk>` entry (the default) it is id 0 and
/// every unknown word maps to it; without one (e.g. for tag sets) unknown words
/// map to -1.
class Vocabulary {
 public:
  static constexpr const char* kUnk = "<unk>";  ///< the unknown word

  explicit Vocabulary(bool with_unk = true);  ///< an empty vocabulary (with `<unk>` at id 0 when with_unk)

  /// The words of `tokens`, most frequent first (ties in byte order), keeping at
  /// most `max_size` ids including `<unk>` (-1: keep all).
  static Vocabulary build(const std::vector<std::string>& tokens, int max_size = -1);
  /// Same, over the leaf words of the trees.
  static Vocabulary from_trees(std::span<const BracketTree> trees, int max_size = -1);

  int add(const std::string& word);       ///< the word's id, adding it when new
  int id(const std::string& word) const;  ///< unk_id() when unknown
  bool contains(const std::string& word) const;  ///< whether the word has an id of its own
  const std::string& word(int id) const;  ///< throws UserError when out of range
  int size() const { return int(words_.size()); }  ///< the number of ids (`<unk>` included)
  int unk_id() const { return has_unk_ ? 0 : -1; }  ///< 0 with `<unk>`, -1 without

 private:
  bool has_unk_;
  std::vector<std::string> words_;
  std::unordered_map<std::string, int> ids_;
};

// ------------------------------------------------------ pretrained vectors

/// What load_word_vectors found, by vocabulary word.
struct WordVectorCounts {
  int exact = 0;      ///< words whose vector the file holds under the same spelling
  int lowercase = 0;  ///< words found only in lower case (the file has "it", the vocabulary "It")
  int missing = 0;    ///< words the file lacks: their rows keep the values they had
  int64_t vectors = 0;  ///< vectors the file holds (lines read, a word2vec header excepted)
};

/// Reads pretrained word vectors into an embedding table by the vocabulary:
/// row `id` of `table` (vocab.size() rows of `dim` floats) becomes the vector
/// of vocab.word(id). The file is text, plain or gzip, one vector per line,
/// `word v1 ... v<dim>` (GloVe), optionally after a first line `count dim`
/// (word2vec's text format); a word may hold spaces (the last `dim` fields
/// are the vector). A word missing from the file keeps its row; one found
/// only in lower case takes that vector; the file's first vector of a word
/// wins. The file is read line by line, so a file larger than memory loads.
/// Throws UserError naming the file, line and column for a line whose vector
/// is not `dim` finite numbers, and the sizes when `table` is not
/// vocab.size() × dim; then `table` may be partly written.
WordVectorCounts load_word_vectors(const std::string& path, const Vocabulary& vocab, std::span<float> table,
                                   int dim);

// ------------------------------------------------------------- bracket trees
// (parse_bracket_trees / read_bracket_file are declared in graph.h)

/// `(3 (2 It) (4 (2 's) (3 good)))`; throws UserError for a word the format
/// cannot hold (empty, or containing a space or a parenthesis).
std::string format_bracket_tree(const BracketTree& tree);
std::string format_bracket_trees(std::span<const BracketTree> trees);  ///< one per line
void write_bracket_file(const std::string& path, std::span<const BracketTree> trees);

/// A synthetic sentiment treebank: random binary parse trees over a 40-word
/// vocabulary of positive (+1, +2), negative (−1, −2) and neutral (0) words and
/// negators ("not", "never", "hardly", "n't"). A node's score is its word's
/// polarity (0 for a negator); an internal node whose child is a negator word
/// gets minus the score of the other child, any other internal node the sum of
/// its children's scores; scores are clamped to [−2, 2] at every node and the
/// label is score + 2 (0 = very negative … 4 = very positive).
struct SyntheticTreebankOptions {
  int min_length = 3;  ///< words per sentence
  int max_length = 20;  ///< at most this many words per sentence
  double negator_rate = 0.12;  ///< share of negators among the words
  double neutral_rate = 0.40;  ///< share of neutral words (the rest are polar)
};
std::vector<BracketTree> make_synthetic_treebank(int num_trees, uint64_t seed,
                                                 SyntheticTreebankOptions options = {});

/// Vertex types of a tree model.
struct TreeTypes {
  int leaf = 0;  ///< the type of a vertex made from a leaf
  int internal = 1;  ///< the type of one made from an internal node
};

/// One vertex per node: a leaf (a node with a word) becomes a `types.leaf`
/// vertex whose token is vocab.id(word); an internal node a `types.internal`
/// vertex with its children in order. Every vertex carries its node's label.
/// A unary internal node (one child, as in unary chains) is collapsed into its
/// child, which takes the label of the topmost node of the chain. Nodes with
/// more than two children are kept as they are (a child-sum type takes them; a
/// binary type rejects them in validate_and_order). Vertices come children
/// first, the root last. Throws UserError for a malformed tree.
Sample tree_to_sample(const BracketTree& tree, const Vocabulary& vocab, TreeTypes types,
                      std::string name = {});
/// Samples named "tree <first_index + i>".
GraphBatch trees_to_batch(std::span<const BracketTree> trees, const Vocabulary& vocab, TreeTypes types,
                          int first_index = 0);

// ------------------------------------------------------------------ PTB text

/// One sentence per line, tokens separated by spaces; blank lines are skipped.
/// Words are looked up in `vocab`, which gets new words when add_new_words
/// (otherwise they map to its unk id).
std::vector<std::vector<int>> parse_ptb_text(const std::string& text, const std::string& source_name,
                                             Vocabulary& vocab, bool add_new_words = true);
std::vector<std::vector<int>> read_ptb_file(const std::string& path, Vocabulary& vocab,
                                            bool add_new_words = true);

/// Random sentences of ids in [0, vocab_size), word rank r drawn with
/// probability ∝ 1 / (r + 1)^zipf_exponent.
/// The shape of make_synthetic_sentences' data.
struct SyntheticTextOptions {
  int vocab_size = 1000;  ///< word ids lie in [0, vocab_size)
  int min_length = 5;  ///< words per sentence, at least
  int max_length = 30;  ///< and at most
  double zipf_exponent = 1.0;  ///< the exponent of the words' Zipf distribution
};
std::vector<std::vector<int>> make_synthetic_sentences(int num_sentences, uint64_t seed,
                                                       SyntheticTextOptions options = {});

// ------------------------------------------------------------------- WikiNER

/// A sentence of word ids with a tag id per word.
struct TaggedSentence {
  std::vector<int> words;  ///< word ids
  std::vector<int> tags;  ///< one per word
};

/// One sentence per line, `word|TAG` tokens separated by spaces (the last '|'
/// splits word and tag); blank lines are skipped. Words and tags get ids from
/// their vocabularies (pass Vocabulary(false) for tags), growing them when
/// add_new_words (an unknown tag of a frozen tag set without unk is an error).
std::vector<TaggedSentence> parse_wikiner(const std::string& text, const std::string& source_name,
                                          Vocabulary& words, Vocabulary& tags, bool add_new_words = true);
std::vector<TaggedSentence> read_wikiner_file(const std::string& path, Vocabulary& words, Vocabulary& tags,
                                              bool add_new_words = true);

/// Random tagged sentences whose tags a BiLSTM can learn: with w the word and p
/// the previous word (none for the first), tag = (w mod num_tags + [p exists and
/// p mod 3 = 0]) mod num_tags.
/// The shape of make_synthetic_tagged_sentences' data.
struct SyntheticTaggingOptions {
  int vocab_size = 500;  ///< word ids lie in [0, vocab_size)
  int num_tags = 5;  ///< tag ids lie in [0, num_tags)
  int min_length = 5;  ///< words per sentence, at least
  int max_length = 30;  ///< and at most
};
int synthetic_tag(int word, int previous_word, int num_tags);  ///< previous_word < 0: none
std::vector<TaggedSentence> make_synthetic_tagged_sentences(int num_sentences, uint64_t seed,
                                                            SyntheticTaggingOptions options = {});

// ------------------------------------------------------------------ lattices

/// A character/word lattice (the ED-Batch Lattice-LSTM format). Node 0 is the
/// start; node i > 0 follows character i. Arcs into node i come from earlier
/// nodes: from i − 1 a character arc, from further back a word arc. Token ids
/// may exceed a model's table: reduce them modulo its size.
struct Lattice {
  /// An arc ending at a node.
  struct Arc {
    int from = 0;  ///< the node it starts at
    int token = 0;  ///< the character's or word's token id
    bool word = false;  ///< a word arc (from < i − 1); false for a character arc
  };
  std::vector<int> tags;                   ///< one per node
  std::vector<std::vector<Arc>> incoming;  ///< incoming[i]: the arcs ending at node i
  int num_nodes() const { return int(tags.size()); }  ///< nodes, node 0 included
};

/// First line: the number of lattices. Per lattice: its node count n; a line of
/// n tags; n lines `k from_1 id_1 … from_k id_k`. Blank lines separate lattices.
std::vector<Lattice> parse_lattices(const std::string& text, const std::string& source_name);
std::vector<Lattice> read_lattice_file(const std::string& path);
std::string format_lattices(std::span<const Lattice> lattices);  ///< the same format

/// Random lattices: a chain of min_chars..max_chars characters (tokens in
/// [0, vocab_size)) plus, at each node, a word arc spanning 2–4 characters with
/// probability word_rate. The tag of node i > 0 is (its character's token +
/// [a word arc ends at i]) mod num_tags; node 0 has tag 0.
/// The shape of make_synthetic_lattices' data.
struct SyntheticLatticeOptions {
  int min_chars = 5;  ///< characters per lattice, at least
  int max_chars = 40;  ///< and at most
  int vocab_size = 1000;  ///< character tokens lie in [0, vocab_size)
  int num_tags = 8;  ///< tag ids lie in [0, num_tags)
  double word_rate = 0.3;  ///< the probability of a word arc at each node
};
std::vector<Lattice> make_synthetic_lattices(int num_lattices, uint64_t seed,
                                             SyntheticLatticeOptions options = {});

}  // namespace vjit
