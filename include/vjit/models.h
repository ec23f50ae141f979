#pragma once
// The model zoo of vjit: the dynamic networks of the Cavs and ED-Batch papers,
// each a vertex program plus its data: built-in generated data by default, or
// a file of the public benchmark format named by Config::data_path. The
// examples, tests and benchmarks all build their models here; a user can start
// from one (make_model("tree_lstm", config)) and train it with an Engine:
//
//   vjit::models::Bundle tree_lstm = vjit::models::make_model("tree_lstm", {});
//   vjit::Engine engine(*tree_lstm.program);  // options from the VJIT_* variables
//   vjit::Adam adam(0.01f);
//   engine.train_step(vjit::models::make_batch(tree_lstm.train, {0, 1, 2, 3}), adam);
//
// Conventions of the parameter tables below: H = Config::hidden, E =
// Config::embed_size(), V = the vocabulary (of the data file, or of the
// built-in data). Shapes are [rows, columns], stored row-major, and a weight
// multiplies a column vector (W x). A stacked weight lists its gates top to
// bottom in the order given: rows [0, H) are the first gate, [H, 2H) the
// second, and so on; "[h1; h2]" is the concatenation of the first child's h
// over the second's. Parameters are initialised by the Model's seed
// (Config::seed): Xavier unless the table says otherwise (U ±0.1 is uniform in
// ±0.1). Every classifying vertex pushes its logits W_out h (its first push;
// the types are listed in Bundle::classifier_types) and adds the softmax
// cross-entropy against its label (none where the label is -1).
//
// tree_lstm: the binary Tree-LSTM of Tai et al. 2015 on SST-format trees
//   (built-in: the synthetic treebank), 5 classes at every node.
//   Types "leaf" (x = embedding[word], with dropout when Config::dropout > 0)
//   and "internal" (children h1, h2); each scatters [h; c], 2H floats.
//     embedding [V, E] U ±0.1 | W_iou [3H, E] | b_iou [3H] zeros (leaf and internal)
//     b_f [H] ones | W_out [5, H] | U_iou [3H, 2H] (columns: h1, then h2)
//     U_f1 [H, H], U_f2 [H, H] (one forget gate per child)
//   Gate order of W_iou, U_iou and b_iou: i, o, u.
//     leaf:     iou = W_iou x + b_iou;         c = σ(i) ⊙ tanh(u)
//     internal: iou = U_iou [h1; h2] + b_iou;  f_k = σ(U_fk h_k + b_f);
//               c = σ(i) ⊙ tanh(u) + f_1 ⊙ c1 + f_2 ⊙ c2
//     both:     h = σ(o) ⊙ tanh(c)
// tree_lstm_outputs: tree_lstm whose cells do not classify; an "output" vertex
//   over each tree node (its one child) classifies that node's h (ED-Batch,
//   Fig. 1). Same parameters.
// tree_lstm_2type: tree_lstm with two internal types, "internal_a" and
//   "internal_b", drawn per node by a fixed hash of the seed and the node
//   (ED-Batch). The internal weights come twice: U_iou_a, U_f1_a, U_f2_a and
//   U_iou_b, U_f1_b, U_f2_b (shapes as above).
// tree_gru: a Tree-GRU on the same trees, 5 classes at every node; scatters h.
//     embedding [V, E] U ±0.1 | W_leaf [H, E] | b_leaf [H] zeros
//     U_zr [3H, 2H] | b_zr [3H] zeros | U_h [H, 2H] | b_h [H] zeros | W_out [5, H]
//   Gate order of U_zr and b_zr: z (H rows), then r (2H rows: a reset gate for
//   h1's elements, then for h2's).
//     leaf:     h = tanh(W_leaf x + b_leaf)
//     internal: e = [h1; h2]; z = σ(U_zr e + b_zr)[0, H); r = σ(...)[H, 3H);
//               h̃ = tanh(U_h (r ⊙ e) + b_h); h = z ⊙ (h1 + h2) / 2 + (1 − z) ⊙ h̃
// mv_rnn: the MV-RNN of Socher et al. 2012 with n = H (Config::embed is
//   ignored), 5 classes at every node. Each node scatters [a; vec(A)], n + n²
//   floats: its vector a and its matrix A, row-major.
//     word_vectors [V, n] U ±0.1 | word_matrices [V, n·n] identity + U ±0.01
//     W [n, 2n] | b_W [n] zeros | W_M [n, 2n] | W_out [5, n]
//     leaf:     (a, A) = (word_vectors[word], word_matrices[word])
//     internal: p = tanh(W [B a; A b] + b_W), P = W_M [A; B] for children (a, A), (b, B)
// rntn: the Recursive Neural Tensor Network of Socher et al. 2013 on SST-format
//   trees (built-in: the synthetic treebank), 5 classes at every node. Each node
//   scatters h [H]; x = [h1; h2] (n = 2H) at internal nodes.
//     embedding [V, H] U ±0.1 | W [H, 2H] | b [H] zeros | W_out [5, H]
//     V_sym [H, n(n+1)/2] U ±1/(4H): row k is the k-th [n, n] matrix V_k of
//       the tensor, stored as its symmetric part packed (the upper triangle of
//       V_k + V_kᵀ, V_k's diagonal): xᵀ V_k x depends on nothing else
//     leaf:     h = embedding[word]
//     internal: h_k = tanh(xᵀ V_k x + (W x)_k + b_k), the tensor term as
//               V_sym · sym_outer(x) (Builder::sym_outer: one GEMM per task)
//   (Config::embed is ignored: the word vectors are H wide.)
// tree_rnn: the plain recursive network of the same size, rntn without V:
//   h = tanh(W [h1; h2] + b) (its baseline in the README).
// tree_fc: TensorFlow Fold's Tree-FC benchmark. Built-in: complete binary
//   trees of Config::tree_fc_leaves random tokens of a 64-word vocabulary,
//   only the root labelled, 2 classes (1 when more than half the tokens are in
//   the upper half of the vocabulary); with a data file, SST trees, 5 classes.
//   Only "internal" vertices classify. Scatters h.
//     embedding [V, E] U ±0.1 | W_leaf [H, E] | b_leaf [H] zeros
//     W [H, 2H] | b [H] zeros | W_out [classes, H]
//     leaf: h = relu(W_leaf x + b_leaf);  internal: h = relu(W [h1; h2] + b)
// var_lstm: an LSTM language model over sentences of PTB-format text
//   (built-in: sentences of a 1000-word Zipf vocabulary). One type "cell" per
//   word; a cell's child is the previous word (none for the first: gather_sum
//   gives zeros); it predicts the next word (V classes; the last word has no
//   label). Scatters [h; c].
//     embedding [V, E] U ±0.1 | W [4H, E] | U [4H, H] | b [4H] zeros | W_out [V, H]
//   Gate order of W, U and b: i, f, o, g.
//     gates = W x + U h + b;  c' = σ(f) ⊙ c + σ(i) ⊙ tanh(g);  h' = σ(o) ⊙ tanh(c')
// var_lstm_gates: var_lstm with one weight per gate, as papers write it:
//   W_i, W_f, W_o, W_u [H, E]; U_i, U_f, U_o, U_u [H, H]; b_i, b_f, b_o, b_u
//   [H] zeros (u is the g above). Matmul merging stacks them back into one
//   product each for W and U.
// fixed_lstm: var_lstm on built-in sentences of exactly 64 words
//   (Config::data_path is not read).
// bilstm_tagger: a BiLSTM tagger over WikiNER-format sentences (built-in: a
//   500-word vocabulary and 5 tags, each tag a function of a word and the one
//   before it). Per sentence of n words: "fwd" vertices (child: the previous
//   word's), "bwd" vertices (child: the next word's), each scattering [h; c],
//   and a "tag" vertex per word over its fwd and bwd that classifies it.
//     embedding [V, E] U ±0.1 | fwd_W [4H, E] | fwd_U [4H, H] | fwd_b [4H] zeros
//     bwd_W, bwd_U, bwd_b likewise | W_mlp [H, 2H] | b_mlp [H] zeros | W_out [tags, H]
//   fwd and bwd are var_lstm's cell (gate order i, f, o, g);
//     tag: logits = W_out tanh(W_mlp [h_fwd; h_bwd] + b_mlp)
// lattice_lstm: a Lattice-LSTM (after Zhang & Yang 2018, simplified) over
//   lattice files (built-in: lattices of 5 to 40 characters, 8 tags). A "word"
//   vertex per word arc j → i runs an LSTM step without output gate from node
//   j's state on the word and scatters its cell c_w; a character vertex per
//   node ("first_char" for the first, "char" after it: children node i − 1,
//   then the words ending at i) is var_lstm's cell from node i − 1 on the
//   character, plus σ(gate_W x + gate_b) ⊙ Σ c_w added to c', and classifies
//   the node's tag. Tokens are taken modulo 1000.
//     char_embedding [1000, E] U ±0.1 | word_embedding [1000, E] U ±0.1
//     char_W [4H, E] | char_U [4H, H] | char_b [4H] zeros (gate order i, f, o, g)
//     word_W [3H, E] | word_U [3H, H] | word_b [3H] zeros (gate order i, f, u)
//     gate_W [H, E] | gate_b [H] zeros | W_out [tags, H]
// child_sum_tree_lstm: the Child-Sum Tree-LSTM of Tai et al. 2015 (§3.1) over
//   trees of any fan-in, 5 classes at every node. Built-in: the synthetic
//   treebank with its internal nodes regrouped to 1–5 children each (labels
//   kept); with a data file, its SST trees as they are (binary). Types "leaf"
//   (tree_lstm's leaf cell) and "internal", whose children are variadic: it
//   reads the [K, 2H] block of their [h; c] states (gather_all, K = the largest
//   fan-in of the data); each type scatters [h; c].
//     embedding [V, E] U ±0.1 | W_iou [3H, E] | b_iou [3H] zeros | b_f [H] ones
//     W_out [5, H] | U_iou [3H, H] | U_f [H, H] (applied on the right: h_kᵀ U_f)
//   Gate order of W_iou, U_iou and b_iou: i, o, u.
//     internal: h̃ = Σ_k h_k;  iou = U_iou h̃ + b_iou;
//               f_k = σ(h_kᵀ U_f + b_f) for every child k, one product over the block;
//               c = σ(i) ⊙ tanh(u) + Σ_k f_k ⊙ c_k;  h = σ(o) ⊙ tanh(c)
// seq2seq: an encoder–decoder (Sutskever et al. 2014) on a built-in task,
//   reversing a sequence of 3 to 12 tokens (Config::data_path is not read).
//   Vocabulary kSeq2seqVocab: kSeq2seqStart, kSeq2seqEnd, then data tokens.
//   "encoder": var_lstm's cell over the source (child: the previous source
//   token; none for the first). "decoder": an LSTM step from its one child's
//   state (the encoder's last step, or the previous decoder step) on the token
//   it is fed; it classifies the next token (V classes). Both scatter [h; c].
//     source_embedding [V, E] U ±0.1 | target_embedding [V, E] U ±0.1
//     encoder_W [4H, E] | encoder_U [4H, H] | encoder_b [4H] zeros (gate order i, f, o, g)
//     decoder_W, decoder_U, decoder_b likewise | W_out [V, H]
//   Training samples use teacher forcing: decoder step j is fed the target's
//   token j − 1 (the start token for j = 0) and labelled with token j; the
//   target is the reversed source, then the end token: a static graph.
//   Greedy decoding grows the graph (vjit/growth.h): seq2seq_prompt keeps the
//   encoder and the first decoder step; seq2seq_greedy_decoder, set on an
//   Engine for "decoder", adds a step fed the arg-max of each step's logits
//   until the arg-max is the end token or the chain has max_steps steps.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "vjit/data.h"
#include "vjit/graph.h"
#include "vjit/growth.h"
#include "vjit/model.h"
#include "vjit/program.h"

namespace vjit::models {

/// The sizes and data of a model from make_model.
struct Config {
  int hidden = 64;  ///< hidden state width
  int embed = 0;               ///< 0: same as hidden
  double dropout = 0.0;  ///< dropout rate of the models that use dropout
  uint64_t seed = 1;  ///< the Model's seed and the built-in data's
  int train_samples = 1000;    ///< built-in data sizes
  int test_samples = 200;  ///< built-in test data size
  std::string data_path;       ///< empty: built-in data; else a file in the model's benchmark format
  std::string test_path;       ///< optional held-out file of the same format
  std::string dev_path;        ///< optional development file of the same format (picks the best epoch)
  int vocab_limit = 20000;     ///< largest vocabulary taken from a data file
  int tree_fc_leaves = 256;    ///< leaves of Tree-FC's complete binary trees (TensorFlow Fold uses 256)
  /// child_sum_tree_lstm: the most children its gather_all declares; 0 declares the data's
  /// most, fewer than the data's most is a UserError
  int declared_children = 0;
  int embed_size() const { return embed > 0 ? embed : hidden; }  ///< the embedding width used
};

/// A model with its data. `model` outlives `program`, which points to it.
struct Bundle {
  std::string name;  ///< the model's name, as given to make_model
  std::unique_ptr<Model> model;  ///< the parameters
  std::unique_ptr<Program> program;  ///< the vertex types
  std::vector<Sample> train;  ///< training samples
  std::vector<Sample> test;  ///< test samples
  std::vector<Sample> dev;     ///< from Config::dev_path (tree models), else empty
  /// The words of the token ids (Vertex::token) when the data has words: the
  /// tree models' treebanks (the built-in one or SST files; tree_fc only from
  /// files) and the text files of var_lstm and bilstm_tagger; empty (no
  /// `<unk>` either) where the data is generated ids with no words.
  Vocabulary vocab{false};
  /// Vertex types whose first push is class logits scored against the label.
  std::vector<int> classifier_types;
};

/// Names: tree_lstm, tree_fc, var_lstm, var_lstm_gates, fixed_lstm, bilstm_tagger, tree_gru,
/// mv_rnn, tree_lstm_2type, tree_lstm_outputs, lattice_lstm, child_sum_tree_lstm, seq2seq, rntn,
/// tree_rnn. Throws UserError listing them for an
/// unknown name.
Bundle make_model(const std::string& name, const Config& config);
/// The names make_model takes, in the order listed above.
std::vector<std::string> model_names();

/// The samples at `indices` as one batch; UserError for an index outside `samples`.
GraphBatch make_batch(const std::vector<Sample>& samples, const std::vector<int>& indices);

// --- per family (models.cpp dispatches to these) ---
Bundle make_tree_lstm(const Config& config);
Bundle make_tree_fc(const Config& config);
Bundle make_tree_gru(const Config& config);
Bundle make_mv_rnn(const Config& config);
Bundle make_rntn(const Config& config);
Bundle make_tree_rnn(const Config& config);
Bundle make_tree_lstm_2type(const Config& config);
Bundle make_tree_lstm_outputs(const Config& config);
Bundle make_var_lstm(const Config& config);
Bundle make_var_lstm_gates(const Config& config);  ///< var_lstm with one weight per gate
Bundle make_fixed_lstm(const Config& config);
Bundle make_bilstm_tagger(const Config& config);
Bundle make_lattice_lstm(const Config& config);
Bundle make_child_sum_tree_lstm(const Config& config);
Bundle make_seq2seq(const Config& config);

/// seq2seq's tokens, and its greedy decoding.
constexpr int kSeq2seqStart = 0, kSeq2seqEnd = 1, kSeq2seqFirstDataToken = 2, kSeq2seqVocab = 16;
constexpr int kSeq2seqMaxSteps = 13;  ///< the longest target, its end token included
/// A teacher-forced sample's encoder chain and first decoder step (unlabelled).
Sample seq2seq_prompt(const Program& program, const Sample& teacher_forced);
/// The growth callback of greedy decoding, for the "decoder" type.
GrowthCallback seq2seq_greedy_decoder(const Program& program, int max_steps = kSeq2seqMaxSteps);
/// The tokens a decoded (grown) sample emitted before its end token or the
/// length limit; and the target of a teacher-forced sample, in the same form.
std::vector<int> seq2seq_output(const Program& program, const Sample& decoded);
std::vector<int> seq2seq_target(const Program& program, const Sample& teacher_forced);

}  // namespace vjit::models
