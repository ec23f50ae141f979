// Tree models over binary parse trees: Tree-LSTM (Tai et al. 2015), its
// two-type variant (ED-Batch), Tree-GRU, Tree-FC (TensorFlow Fold's benchmark)
// and MV-RNN (Socher et al. 2012).
#include <algorithm>
#include <optional>
#include <span>

#include "models/common.h"
#include "vjit/error.h"
#include "vjit/random.h"

namespace vjit::models {

namespace {

constexpr int kSentimentClasses = 5;

void add_tree_samples(Bundle& bundle, const TreeData& data, TreeTypes types) {
  bundle.vocab = data.vocab;
  bundle.train = trees_to_batch(data.train, data.vocab, types).samples;
  bundle.test = trees_to_batch(data.test, data.vocab, types, int(data.train.size())).samples;
  bundle.dev = trees_to_batch(data.dev, data.vocab, types, int(data.train.size() + data.test.size())).samples;
}

// The Tree-LSTM parameters one internal cell type uses.
struct TreeLstmInternal {
  Param u_iou, u_f1, u_f2;
};

// The Tree-LSTM of the benchmark: a leaf cell on x = E[word] and a binary
// internal cell; b_iou and b_f are shared by both cells; a 5-class softmax
// cross-entropy of W_out h at every node. Scatters [h; c].
struct TreeLstm {
  int hidden, embed;
  double dropout;
  Param embedding, w_iou, b_iou, b_f, w_out;

  TreeLstm(Model& m, const Config& config, int vocab)
      : hidden(config.hidden), embed(config.embed_size()), dropout(config.dropout) {
    embedding = m.add("embedding", mat(vocab, embed), Init::Uniform, 0.1f);
    w_iou = m.add("W_iou", mat(3 * hidden, embed));
    b_iou = m.add("b_iou", vec(3 * hidden), Init::Zeros);
    b_f = m.add("b_f", vec(hidden), Init::Ones);
    w_out = m.add("W_out", mat(kSentimentClasses, hidden));
  }

  TreeLstmInternal add_internal_params(Model& m, const std::string& suffix) const {
    return {m.add("U_iou" + suffix, mat(3 * hidden, 2 * hidden)), m.add("U_f1" + suffix, mat(hidden, hidden)),
            m.add("U_f2" + suffix, mat(hidden, hidden))};
  }

  // Classify at the cell itself, or leave it to a separate output vertex.
  bool output_vertices = false;

  // i, o, u from one product and finish the cell: c = i⊙u + extra, h = o⊙tanh(c).
  void finish(Builder& b, Value iou_product, std::optional<Value> extra_c) const {
    Value iou = b.add(iou_product, b_iou);
    Value i = b.sigmoid(b.slice(iou, 0, hidden));
    Value o = b.sigmoid(b.slice(iou, hidden, hidden));
    Value u = b.tanh(b.slice(iou, 2 * hidden, hidden));
    Value c = b.mul(i, u);
    if (extra_c) c = b.add(c, *extra_c);
    Value h = b.mul(o, b.tanh(c));
    if (!output_vertices) classify(b, w_out, h, kSentimentClasses);
    b.scatter(b.concat({h, c}));
  }

  // The output vertex of ED-Batch's Fig. 1: classifies the state of its one child.
  void output(Builder& b) const { classify(b, w_out, b.slice(b.gather(0, vec(2 * hidden)), 0, hidden), kSentimentClasses); }

  void leaf(Builder& b) const {
    Value x = b.pull_embedding(embedding);
    if (dropout > 0) x = b.dropout(x, dropout);
    finish(b, b.matmul(w_iou, x), std::nullopt);
  }

  void internal(Builder& b, const TreeLstmInternal& p) const {
    auto [h1, c1] = split_state(b, b.gather(0, vec(2 * hidden)), hidden);
    auto [h2, c2] = split_state(b, b.gather(1, vec(2 * hidden)), hidden);
    Value f1 = b.sigmoid(b.add(b.matmul(p.u_f1, h1), b_f));
    Value f2 = b.sigmoid(b.add(b.matmul(p.u_f2, h2), b_f));
    Value forget = b.add(b.mul(f1, c1), b.mul(f2, c2));
    finish(b, b.matmul(p.u_iou, b.concat({h1, h2})), forget);
  }
};

}  // namespace

namespace {

// The Tree-LSTM, classifying at each cell or, with `output_vertices`, through
// an "output" vertex over each tree node (ED-Batch's Fig. 1 shape).
Bundle tree_lstm(const Config& config, bool output_vertices) {
  Bundle bundle;
  Model& m = start_bundle(bundle, config);
  TreeData data = load_trees(config);
  TreeLstm cell(m, config, data.vocab.size());
  cell.output_vertices = output_vertices;
  TreeLstmInternal internal = cell.add_internal_params(m, "");
  TreeTypes types;
  types.leaf = bundle.program->add_type("leaf", [&](Builder& b) { cell.leaf(b); });
  types.internal = bundle.program->add_type("internal", [&](Builder& b) { cell.internal(b, internal); });
  add_tree_samples(bundle, data, types);
  bundle.classifier_types = {types.leaf, types.internal};
  if (!output_vertices) return bundle;
  int output = bundle.program->add_type("output", [&](Builder& b) { cell.output(b); });
  for (std::vector<Sample>* split : {&bundle.train, &bundle.test, &bundle.dev})
    for (Sample& sample : *split) {
      int nodes = int(sample.vertices.size());
      for (int v = 0; v < nodes; ++v) {
        int label = sample.vertices[size_t(v)].label;
        sample.vertices[size_t(v)].label = -1;
        sample.add_vertex(output, {v}, -1, label);
      }
    }
  bundle.classifier_types = {output};
  return bundle;
}

}  // namespace

Bundle make_tree_lstm(const Config& config) { return tree_lstm(config, false); }
Bundle make_tree_lstm_outputs(const Config& config) { return tree_lstm(config, true); }

Bundle make_tree_lstm_2type(const Config& config) {
  Bundle bundle;
  Model& m = start_bundle(bundle, config);
  TreeData data = load_trees(config);
  TreeLstm cell(m, config, data.vocab.size());
  TreeLstmInternal a = cell.add_internal_params(m, "_a"), b_params = cell.add_internal_params(m, "_b");
  TreeTypes types;
  types.leaf = bundle.program->add_type("leaf", [&](Builder& b) { cell.leaf(b); });
  types.internal = bundle.program->add_type("internal_a", [&](Builder& b) { cell.internal(b, a); });
  int type_b = bundle.program->add_type("internal_b", [&](Builder& b) { cell.internal(b, b_params); });
  add_tree_samples(bundle, data, types);
  // Each internal node takes type a or b at random (a fixed function of its position).
  for (std::vector<Sample>* split : {&bundle.train, &bundle.test, &bundle.dev})
    for (size_t s = 0; s < split->size(); ++s)
      for (size_t v = 0; v < (*split)[s].vertices.size(); ++v) {
        Vertex& vertex = (*split)[s].vertices[v];
        if (vertex.type == types.internal && (mix64(config.seed ^ (s << 20) ^ v) & 1)) vertex.type = type_b;
      }
  bundle.classifier_types = {types.leaf, types.internal, type_b};
  return bundle;
}

Bundle make_tree_gru(const Config& config) {
  Bundle bundle;
  Model& m = start_bundle(bundle, config);
  TreeData data = load_trees(config);
  int H = config.hidden, E = config.embed_size();
  Param embedding = m.add("embedding", mat(data.vocab.size(), E), Init::Uniform, 0.1f);
  Param w_leaf = m.add("W_leaf", mat(H, E)), b_leaf = m.add("b_leaf", vec(H), Init::Zeros);
  Param u_zr = m.add("U_zr", mat(3 * H, 2 * H)), b_zr = m.add("b_zr", vec(3 * H), Init::Zeros);
  Param u_h = m.add("U_h", mat(H, 2 * H)), b_h = m.add("b_h", vec(H), Init::Zeros);
  Param w_out = m.add("W_out", mat(kSentimentClasses, H));
  TreeTypes types;
  // Leaf: h = tanh(W x + b).
  types.leaf = bundle.program->add_type("leaf", [&](Builder& b) {
    Value h = b.tanh(b.add(b.matmul(w_leaf, b.pull_embedding(embedding)), b_leaf));
    classify(b, w_out, h, kSentimentClasses);
    b.scatter(h);
  });
  // Internal, e = [h1; h2]: z = σ(U_z e), r = σ(U_r e) (one reset gate per child),
  // h̃ = tanh(U_h (r ⊙ e)), h = z ⊙ (h1 + h2)/2 + (1 − z) ⊙ h̃.
  types.internal = bundle.program->add_type("internal", [&](Builder& b) {
    Value h1 = b.gather(0, vec(H)), h2 = b.gather(1, vec(H));
    Value e = b.concat({h1, h2});
    Value zr = b.sigmoid(b.add(b.matmul(u_zr, e), b_zr));
    Value z = b.slice(zr, 0, H), r = b.slice(zr, H, 2 * H);
    Value candidate = b.tanh(b.add(b.matmul(u_h, b.mul(r, e)), b_h));
    Value mean = b.scale(b.add(h1, h2), 0.5);
    Value h = b.add(b.mul(z, mean), b.mul(b.add_scalar(b.neg(z), 1.0), candidate));
    classify(b, w_out, h, kSentimentClasses);
    b.scatter(h);
  });
  add_tree_samples(bundle, data, types);
  bundle.classifier_types = {types.leaf, types.internal};
  return bundle;
}

Bundle make_mv_rnn(const Config& config) {
  Bundle bundle;
  Model& m = start_bundle(bundle, config);
  TreeData data = load_trees(config);
  int n = config.hidden;
  Param word_vectors = m.add("word_vectors", mat(data.vocab.size(), n), Init::Uniform, 0.1f);
  // Word matrices start near the identity (Socher et al. 2012).
  Param word_matrices = m.add("word_matrices", mat(data.vocab.size(), n * n), Init::Uniform, 0.01f);
  for (int w = 0; w < data.vocab.size(); ++w)
    for (int i = 0; i < n; ++i) m.param(word_matrices).value[size_t(w) * size_t(n * n) + size_t(i * n + i)] += 1.0f;
  Param w = m.add("W", mat(n, 2 * n)), b_w = m.add("b_W", vec(n), Init::Zeros);
  Param w_m = m.add("W_M", mat(n, 2 * n));
  Param w_out = m.add("W_out", mat(kSentimentClasses, n));
  // A node scatters its vector a [n] and its matrix A [n, n], flattened: [a; vec(A)].
  auto scatter_node = [n](Builder& b, Value a, Value A) { b.scatter(b.concat({a, b.reshape(A, vec(n * n))})); };
  auto unpack = [n](Builder& b, Value state) {
    return std::pair{b.slice(state, 0, n), b.reshape(b.slice(state, n, n * n), mat(n, n))};
  };
  TreeTypes types;
  types.leaf = bundle.program->add_type("leaf", [&](Builder& b) {
    Value a = b.pull_embedding(word_vectors);
    Value A = b.reshape(b.pull_embedding(word_matrices), mat(n, n));
    classify(b, w_out, a, kSentimentClasses);
    scatter_node(b, a, A);
  });
  // p = tanh(W [B a; A b] + b_W), P = W_M [A; B].
  types.internal = bundle.program->add_type("internal", [&](Builder& b) {
    auto [a, A] = unpack(b, b.gather(0, vec(n + n * n)));
    auto [bv, B] = unpack(b, b.gather(1, vec(n + n * n)));
    Value p = b.tanh(b.add(b.matmul(w, b.concat({b.matmul(B, a), b.matmul(A, bv)})), b_w));
    Value P = b.matmul(w_m, b.concat({A, B}));
    classify(b, w_out, p, kSentimentClasses);
    scatter_node(b, p, P);
  });
  add_tree_samples(bundle, data, types);
  bundle.classifier_types = {types.leaf, types.internal};
  return bundle;
}

namespace {

// A complete binary tree over `leaves` random tokens; the root's label is 1 when
// more than half the tokens are in the upper half of the vocabulary. Only the
// root is labelled.
Sample complete_tree(int leaves, int vocab, uint64_t seed, TreeTypes types, std::string name) {
  Sample sample;
  sample.name = std::move(name);
  std::vector<int> level;
  int upper = 0;
  for (int i = 0; i < leaves; ++i) {
    int token = int(mix64(seed * 1315423911u + uint64_t(i)) % uint64_t(vocab));
    upper += token >= vocab / 2;
    level.push_back(sample.add_vertex(types.leaf, {}, token));
  }
  while (level.size() > 1) {
    std::vector<int> next;
    for (size_t i = 0; i + 1 < level.size(); i += 2) next.push_back(sample.add_vertex(types.internal, {level[i], level[i + 1]}));
    level = std::move(next);
  }
  sample.vertices.back().label = upper * 2 > leaves ? 1 : 0;
  return sample;
}

}  // namespace

Bundle make_tree_fc(const Config& config) {
  constexpr int kVocab = 64, kClasses = 2;
  const int kLeaves = config.tree_fc_leaves;
  Bundle bundle;
  Model& m = start_bundle(bundle, config);
  std::optional<TreeData> files;
  if (!config.data_path.empty()) files = load_trees(config);
  int vocab = files ? files->vocab.size() : kVocab, H = config.hidden;
  int classes = files ? kSentimentClasses : kClasses;
  Param embedding = m.add("embedding", mat(vocab, config.embed_size()), Init::Uniform, 0.1f);
  Param w_leaf = m.add("W_leaf", mat(H, config.embed_size())), b_leaf = m.add("b_leaf", vec(H), Init::Zeros);
  Param w = m.add("W", mat(H, 2 * H)), b_w = m.add("b", vec(H), Init::Zeros);
  Param w_out = m.add("W_out", mat(classes, H));
  TreeTypes types;
  types.leaf = bundle.program->add_type("leaf", [&](Builder& b) {
    b.scatter(b.relu(b.add(b.matmul(w_leaf, b.pull_embedding(embedding)), b_leaf)));
  });
  types.internal = bundle.program->add_type("internal", [&](Builder& b) {
    Value h = b.relu(b.add(b.matmul(w, b.concat({b.gather(0, vec(H)), b.gather(1, vec(H))})), b_w));
    classify(b, w_out, h, classes);
    b.scatter(h);
  });
  if (files) {
    add_tree_samples(bundle, *files, types);
  } else {
    for (int i = 0; i < config.train_samples; ++i)
      bundle.train.push_back(complete_tree(kLeaves, vocab, config.seed * 7919 + uint64_t(i), types, "tree " + std::to_string(i)));
    for (int i = 0; i < config.test_samples; ++i)
      bundle.test.push_back(complete_tree(kLeaves, vocab, config.seed * 7919 + 1000003 + uint64_t(i), types, "test tree " + std::to_string(i)));
  }
  bundle.classifier_types = {types.internal};
  return bundle;
}

// --- Child-Sum Tree-LSTM (Tai et al. 2015, §3.1) over trees of any fan-in ---

namespace {

constexpr int kMaxFanIn = 5;  // of the built-in trees

// A binary tree sample rewritten into one whose internal nodes have 1 to
// kMaxFanIn children: an internal child is spliced into its parent (its
// children take its place) with probability 1/2 while the fan-in stays within
// kMaxFanIn, and a node is wrapped in a one-child parent of the same label
// with probability 1/10. Returns the new id of vertex v; children come first.
int vary_fan_in(const Sample& in, int v, Rng& rng, Sample& out) {
  const Vertex& vertex = in.vertices[size_t(v)];
  if (vertex.children.empty()) return out.add_vertex(vertex.type, {}, vertex.token, vertex.label);
  std::vector<int> children = vertex.children;
  for (size_t i = 0; i < children.size();) {
    const std::vector<int>& grandchildren = in.vertices[size_t(children[i])].children;
    if (!grandchildren.empty() && children.size() - 1 + grandchildren.size() <= size_t(kMaxFanIn) &&
        rng.bernoulli(0.5)) {
      std::vector<int> spliced = grandchildren;  // a copy: the insert below moves `children`
      children.erase(children.begin() + std::ptrdiff_t(i));
      children.insert(children.begin() + std::ptrdiff_t(i), spliced.begin(), spliced.end());
    } else {
      ++i;
    }
  }
  std::vector<int> new_children;
  for (int child : children) new_children.push_back(vary_fan_in(in, child, rng, out));
  int id = out.add_vertex(vertex.type, std::move(new_children), -1, vertex.label);
  if (rng.bernoulli(0.1)) id = out.add_vertex(vertex.type, {id}, -1, vertex.label);
  return id;
}

void vary_fan_in(std::vector<Sample>& samples, uint64_t seed) {
  Rng rng(mix64(seed ^ 0xC5u));
  for (Sample& sample : samples) {
    if (sample.vertices.empty()) continue;
    Sample varied;
    varied.name = sample.name;
    vary_fan_in(sample, int(sample.vertices.size()) - 1, rng, varied);
    sample = std::move(varied);
  }
}

int max_fan_in(const Bundle& bundle) {
  int most = 1;
  for (const std::vector<Sample>* split : {&bundle.train, &bundle.test, &bundle.dev})
    for (const Sample& sample : *split)
      for (const Vertex& vertex : sample.vertices) most = std::max(most, int(vertex.children.size()));
  return most;
}

// The internal cell on the [K, 2H] block of its children's [h; c] states.
void child_sum_internal(Builder& b, const TreeLstm& cell, Param u_iou, Param u_f, int max_children) {
  const int hidden = cell.hidden;
  Value block = b.gather_all(max_children, vec(2 * hidden));
  Value h = b.slice_cols(block, 0, hidden);       // [K, H], zero rows past the last child
  Value c = b.slice_cols(block, hidden, hidden);  // [K, H]
  // One product for every child's forget gate: row k is σ(h_kᵀ U_f + b_f).
  Value f = b.sigmoid(b.add(b.matmul(h, u_f), cell.b_f));
  Value forget = b.sum_rows(b.mul(f, c));  // padding rows add f ⊙ 0
  cell.finish(b, b.matmul(u_iou, b.sum_rows(h)), forget);
}

}  // namespace

Bundle make_child_sum_tree_lstm(const Config& config) {
  Bundle bundle;
  Model& m = start_bundle(bundle, config);
  TreeData data = load_trees(config);
  TreeLstm cell(m, config, data.vocab.size());
  Param u_iou = m.add("U_iou", mat(3 * cell.hidden, cell.hidden));
  Param u_f = m.add("U_f", mat(cell.hidden, cell.hidden));
  TreeTypes types{0, 1};
  add_tree_samples(bundle, data, types);
  if (config.data_path.empty())
    for (std::vector<Sample>* split : {&bundle.train, &bundle.test, &bundle.dev}) vary_fan_in(*split, config.seed);
  const int data_children = max_fan_in(bundle);
  VJIT_USER_CHECK(config.declared_children == 0 || config.declared_children >= data_children,
                  "child_sum_tree_lstm: declared_children " << config.declared_children
                      << " is fewer than the data's most children, " << data_children);
  const int max_children = config.declared_children > 0 ? config.declared_children : data_children;
  types.leaf = bundle.program->add_type("leaf", [&](Builder& b) { cell.leaf(b); });
  types.internal = bundle.program->add_type(
      "internal", [&](Builder& b) { child_sum_internal(b, cell, u_iou, u_f, max_children); });
  bundle.classifier_types = {types.leaf, types.internal};
  return bundle;
}

// --- RNTN (Socher et al. 2013) and the plain tree RNN it extends ---

namespace {

// h = tanh([xᵀ V x +] W x + b) over x = [h1; h2] at internal nodes, h =
// embedding[word] at leaves; 5 classes at every node. With `tensor` false this
// is the plain recursive network of the same size (the RNTN's baseline).
Bundle recursive_tensor_network(const Config& config, bool tensor) {
  Bundle bundle;
  Model& m = start_bundle(bundle, config);
  TreeData data = load_trees(config);
  const int H = config.hidden;
  Param embedding = m.add("embedding", mat(data.vocab.size(), H), Init::Uniform, 0.1f);
  Param w = m.add("W", mat(H, 2 * H)), b_w = m.add("b", vec(H), Init::Zeros);
  // The tensor term xᵀ V_i x depends only on V_i + V_iᵀ: stored packed, one row
  // per output of the upper triangle's n(n+1)/2 weights (Builder::sym_outer),
  // it costs half the multiply-adds of bilinear(x, V) over a full V.
  const int n = 2 * H;
  Param v;
  if (tensor) v = m.add("V_sym", mat(H, n * (n + 1) / 2), Init::Uniform, 1.0f / float(4 * H));
  Param w_out = m.add("W_out", mat(kSentimentClasses, H));
  TreeTypes types;
  types.leaf = bundle.program->add_type("leaf", [&](Builder& b) {
    Value h = b.pull_embedding(embedding);
    classify(b, w_out, h, kSentimentClasses);
    b.scatter(h);
  });
  types.internal = bundle.program->add_type("internal", [&](Builder& b) {
    Value x = b.concat({b.gather(0, vec(H)), b.gather(1, vec(H))});
    Value pre = b.add(b.matmul(w, x), b_w);
    if (tensor) pre = b.add(pre, b.matmul(v, b.sym_outer(x)));
    Value h = b.tanh(pre);
    classify(b, w_out, h, kSentimentClasses);
    b.scatter(h);
  });
  add_tree_samples(bundle, data, types);
  bundle.classifier_types = {types.leaf, types.internal};
  return bundle;
}

}  // namespace

Bundle make_rntn(const Config& config) { return recursive_tensor_network(config, true); }
Bundle make_tree_rnn(const Config& config) { return recursive_tensor_network(config, false); }

}  // namespace vjit::models
