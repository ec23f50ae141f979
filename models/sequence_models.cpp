// Sequence models: the Var-LSTM and Fixed-LSTM language models over chains
// (and the Var-LSTM with one weight per gate),
// the BiLSTM tagger (three vertex types in one DAG) and the Lattice-LSTM.
#include <algorithm>
#include <array>
#include <optional>

#include "models/common.h"

namespace vjit::models {

namespace {

// The same LSTM step written with one weight per gate, as papers write it:
// i = σ(W_i x + U_i h + b_i), f and o likewise, u = tanh(W_u x + U_u h + b_u).
// Matmul merging (ir/merge_matmuls.h) turns the four W_k x, and the four U_k h,
// into one product each; this cell is its test and benchmark.
struct GateLstmCell {
  int hidden;
  std::array<Param, 4> w, u, b;  // gates i, f, o, u
  GateLstmCell(Model& m, const std::string& prefix, int input, int hidden_size) : hidden(hidden_size) {
    const char* gates[] = {"i", "f", "o", "u"};
    for (size_t k = 0; k < 4; ++k) {
      w[k] = m.add(prefix + "W_" + gates[k], mat(hidden, input));
      u[k] = m.add(prefix + "U_" + gates[k], mat(hidden, hidden));
      b[k] = m.add(prefix + "b_" + gates[k], vec(hidden), Init::Zeros);
    }
  }
  std::pair<Value, Value> step(Builder& bl, Value x, Value state) const {
    // Not a structured binding: the lambda captures h, which clang before 16 refuses for bindings.
    const std::pair<Value, Value> parts = split_state(bl, state, hidden);
    const Value h = parts.first, c = parts.second;
    auto gate = [&](size_t k) { return bl.add(bl.add(bl.matmul(w[k], x), bl.matmul(u[k], h)), b[k]); };
    Value i = bl.sigmoid(gate(0)), f = bl.sigmoid(gate(1)), o = bl.sigmoid(gate(2)), g = bl.tanh(gate(3));
    Value c_next = bl.add(bl.mul(f, c), bl.mul(i, g));
    return {bl.mul(o, bl.tanh(c_next)), c_next};
  }
};

// Language model: one "cell" type; gather_sum reads the previous step's state
// (zeros at the first word); each step predicts the next word. With
// `separate_gates`, the cell is a GateLstmCell.
Bundle language_model(const Config& config, std::vector<std::vector<int>> train, std::vector<std::vector<int>> test,
                      int vocab, bool separate_gates = false) {
  Bundle bundle;
  Model& m = start_bundle(bundle, config);
  int H = config.hidden;
  Param embedding = m.add("embedding", mat(vocab, config.embed_size()), Init::Uniform, 0.1f);
  std::optional<LstmCell> lstm;
  std::optional<GateLstmCell> gate_lstm;
  if (separate_gates) gate_lstm.emplace(m, "", config.embed_size(), H);
  else lstm.emplace(m, "", config.embed_size(), H);
  Param w_out = m.add("W_out", mat(vocab, H));
  int cell = bundle.program->add_type("cell", [&](Builder& b) {
    Value x = b.pull_embedding(embedding);
    if (config.dropout > 0) x = b.dropout(x, config.dropout);
    auto [h, c] = separate_gates ? gate_lstm->step(b, x, b.gather_sum(vec(2 * H)))
                                 : lstm->step(b, x, b.gather_sum(vec(2 * H)));
    classify(b, w_out, h, vocab);
    b.scatter(b.concat({h, c}));
  });
  auto to_samples = [&](const std::vector<std::vector<int>>& sentences, std::vector<Sample>& out) {
    for (size_t s = 0; s < sentences.size(); ++s) {
      const std::vector<int>& words = sentences[s];
      if (words.empty()) continue;
      std::vector<int> next(words.begin() + 1, words.end());
      next.push_back(-1);
      out.push_back(chain_sample(cell, words, next, "sentence " + std::to_string(s)));
    }
  };
  to_samples(train, bundle.train);
  to_samples(test, bundle.test);
  bundle.classifier_types = {cell};
  return bundle;
}

constexpr int kSyntheticVocab = 1000;

// The Var-LSTM on PTB-format text (Config::data_path) or built-in sentences.
Bundle var_lstm(const Config& config, bool separate_gates) {
  if (!config.data_path.empty()) {
    Vocabulary vocab;
    std::vector<std::vector<int>> train = read_ptb_file(config.data_path, vocab);
    std::vector<std::vector<int>> test;
    if (!config.test_path.empty()) test = read_ptb_file(config.test_path, vocab, false);
    Bundle bundle = language_model(config, train, test, vocab.size(), separate_gates);
    bundle.vocab = std::move(vocab);
    return bundle;
  }
  SyntheticTextOptions text;
  text.vocab_size = kSyntheticVocab;
  return language_model(config, make_synthetic_sentences(config.train_samples, config.seed, text),
                        make_synthetic_sentences(config.test_samples, config.seed + 1000003, text), kSyntheticVocab,
                        separate_gates);
}

}  // namespace

Bundle make_var_lstm(const Config& config) { return var_lstm(config, false); }
Bundle make_var_lstm_gates(const Config& config) { return var_lstm(config, true); }

Bundle make_fixed_lstm(const Config& config) {
  constexpr int kLength = 64;
  SyntheticTextOptions text;
  text.vocab_size = kSyntheticVocab;
  text.min_length = text.max_length = kLength;
  return language_model(config, make_synthetic_sentences(config.train_samples, config.seed, text),
                        make_synthetic_sentences(config.test_samples, config.seed + 1000003, text), kSyntheticVocab);
}

Bundle make_bilstm_tagger(const Config& config) {
  Vocabulary words, tags(false);
  std::vector<TaggedSentence> train, test;
  int vocab = 0, num_tags = 0;
  if (!config.data_path.empty()) {
    train = read_wikiner_file(config.data_path, words, tags);
    if (!config.test_path.empty()) test = read_wikiner_file(config.test_path, words, tags, false);
    vocab = words.size();
    num_tags = tags.size();
  } else {
    SyntheticTaggingOptions options;
    train = make_synthetic_tagged_sentences(config.train_samples, config.seed, options);
    test = make_synthetic_tagged_sentences(config.test_samples, config.seed + 1000003, options);
    vocab = options.vocab_size;
    num_tags = options.num_tags;
  }
  Bundle bundle;
  if (!config.data_path.empty()) bundle.vocab = words;
  Model& m = start_bundle(bundle, config);
  int H = config.hidden, E = config.embed_size();
  Param embedding = m.add("embedding", mat(vocab, E), Init::Uniform, 0.1f);
  LstmCell forward(m, "fwd_", E, H), backward(m, "bwd_", E, H);
  Param w_mlp = m.add("W_mlp", mat(H, 2 * H)), b_mlp = m.add("b_mlp", vec(H), Init::Zeros);
  Param w_out = m.add("W_out", mat(num_tags, H));
  auto chain_cell = [&](const LstmCell& lstm) {
    return [&](Builder& b) {
      auto [h, c] = lstm.step(b, b.pull_embedding(embedding), b.gather_sum(vec(2 * H)));
      b.scatter(b.concat({h, c}));
    };
  };
  int fwd = bundle.program->add_type("fwd", chain_cell(forward));
  int bwd = bundle.program->add_type("bwd", chain_cell(backward));
  int tag = bundle.program->add_type("tag", [&](Builder& b) {
    Value hf = b.slice(b.gather(0, vec(2 * H)), 0, H), hb = b.slice(b.gather(1, vec(2 * H)), 0, H);
    Value hidden = b.tanh(b.add(b.matmul(w_mlp, b.concat({hf, hb})), b_mlp));
    classify(b, w_out, hidden, num_tags);
  });
  // Per sentence of n words: fwd_i (child fwd_{i−1}), bwd_i (child bwd_{i+1}), tag_i (fwd_i, bwd_i).
  auto to_sample = [&](const TaggedSentence& sentence, const std::string& name) {
    Sample sample;
    sample.name = name;
    int n = int(sentence.words.size());
    std::vector<int> f(static_cast<size_t>(n)), bk(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
      f[size_t(i)] = sample.add_vertex(fwd, i ? std::vector<int>{f[size_t(i - 1)]} : std::vector<int>{}, sentence.words[size_t(i)]);
    for (int i = n - 1; i >= 0; --i)
      bk[size_t(i)] = sample.add_vertex(bwd, i < n - 1 ? std::vector<int>{bk[size_t(i + 1)]} : std::vector<int>{},
                                        sentence.words[size_t(i)]);
    for (int i = 0; i < n; ++i) sample.add_vertex(tag, {f[size_t(i)], bk[size_t(i)]}, -1, sentence.tags[size_t(i)]);
    return sample;
  };
  for (size_t s = 0; s < train.size(); ++s)
    if (!train[s].words.empty()) bundle.train.push_back(to_sample(train[s], "sentence " + std::to_string(s)));
  for (size_t s = 0; s < test.size(); ++s)
    if (!test[s].words.empty()) bundle.test.push_back(to_sample(test[s], "test sentence " + std::to_string(s)));
  bundle.classifier_types = {tag};
  return bundle;
}

// Lattice-LSTM (after Zhang & Yang 2018, simplified): a character cell per
// lattice node i ≥ 1 and a word cell per word arc j → i. The word cell runs an
// LSTM step without output gate from the state of node j (zeros for the start
// node) on the word's embedding and scatters its cell c_w. The character cell
// is an LSTM step from node i − 1 on the character's embedding, plus the sum of
// the word cells ending at i through a gate σ(W_g x + b_g). Every character
// cell predicts the node's tag.
Bundle make_lattice_lstm(const Config& config) {
  constexpr int kVocab = 1000;
  std::vector<Lattice> train, test;
  int num_tags = 8;
  if (!config.data_path.empty()) {
    train = read_lattice_file(config.data_path);
    if (!config.test_path.empty()) test = read_lattice_file(config.test_path);
    num_tags = 1;
    for (const std::vector<Lattice>* split : {&train, &test})
      for (const Lattice& l : *split)
        for (int t : l.tags) num_tags = std::max(num_tags, t + 1);
  } else {
    SyntheticLatticeOptions options;
    options.vocab_size = kVocab;
    train = make_synthetic_lattices(config.train_samples, config.seed, options);
    test = make_synthetic_lattices(config.test_samples, config.seed + 1000003, options);
    num_tags = options.num_tags;
  }
  Bundle bundle;
  Model& m = start_bundle(bundle, config);
  int H = config.hidden, E = config.embed_size();
  Param char_embedding = m.add("char_embedding", mat(kVocab, E), Init::Uniform, 0.1f);
  Param word_embedding = m.add("word_embedding", mat(kVocab, E), Init::Uniform, 0.1f);
  LstmCell char_lstm(m, "char_", E, H);
  Param w_word = m.add("word_W", mat(3 * H, E)), u_word = m.add("word_U", mat(3 * H, H));
  Param b_word = m.add("word_b", vec(3 * H), Init::Zeros);
  Param w_gate = m.add("gate_W", mat(H, E)), b_gate = m.add("gate_b", vec(H), Init::Zeros);
  Param w_out = m.add("W_out", mat(num_tags, H));
  auto char_cell = [&](Builder& b, Value state, bool has_words) {
    Value x = b.pull_embedding(char_embedding);
    std::optional<Value> words;
    if (has_words) words = b.mul(b.sigmoid(b.add(b.matmul(w_gate, x), b_gate)), b.gather_sum(vec(H)));
    auto [h, c] = char_lstm.step(b, x, state, words);
    classify(b, w_out, h, num_tags);
    b.scatter(b.concat({h, c}));
  };
  int first = bundle.program->add_type("first_char", [&](Builder& b) {
    char_cell(b, b.constant(vec(2 * H), 0.0), false);
  });
  int chr = bundle.program->add_type("char", [&](Builder& b) { char_cell(b, b.gather(0, vec(2 * H)), true); });
  int word = bundle.program->add_type("word", [&](Builder& b) {
    auto [h, c] = split_state(b, b.gather_sum(vec(2 * H)), H);
    Value gates = b.add(b.add(b.matmul(w_word, b.pull_embedding(word_embedding)), b.matmul(u_word, h)), b_word);
    Value i = b.sigmoid(b.slice(gates, 0, H)), f = b.sigmoid(b.slice(gates, H, H));
    Value u = b.tanh(b.slice(gates, 2 * H, H));
    b.scatter(b.add(b.mul(f, c), b.mul(i, u)));
  });
  auto to_sample = [&](const Lattice& lattice, const std::string& name) {
    Sample sample;
    sample.name = name;
    std::vector<int> node_vertex(size_t(lattice.num_nodes()), -1);  // node 0 (start) has none
    for (int i = 1; i < lattice.num_nodes(); ++i) {
      std::vector<int> children;
      int token = 0;
      std::vector<int> word_cells;
      for (const Lattice::Arc& arc : lattice.incoming[size_t(i)]) {
        if (!arc.word) {
          token = arc.token % kVocab;
          continue;
        }
        std::vector<int> from;
        if (node_vertex[size_t(arc.from)] >= 0) from.push_back(node_vertex[size_t(arc.from)]);
        word_cells.push_back(sample.add_vertex(word, from, arc.token % kVocab));
      }
      int type = i == 1 ? first : chr;
      if (i > 1) children.push_back(node_vertex[size_t(i - 1)]);
      if (i > 1) children.insert(children.end(), word_cells.begin(), word_cells.end());
      node_vertex[size_t(i)] = sample.add_vertex(type, children, token, lattice.tags[size_t(i)] % num_tags);
    }
    return sample;
  };
  for (size_t s = 0; s < train.size(); ++s)
    if (train[s].num_nodes() > 1) bundle.train.push_back(to_sample(train[s], "lattice " + std::to_string(s)));
  for (size_t s = 0; s < test.size(); ++s)
    if (test[s].num_nodes() > 1) bundle.test.push_back(to_sample(test[s], "test lattice " + std::to_string(s)));
  bundle.classifier_types = {chr, first};
  return bundle;
}

}  // namespace vjit::models
