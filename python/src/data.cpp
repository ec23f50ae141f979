// Input graphs (Vertex, Sample, GraphBatch) built from NumPy arrays or nested
// lists, the treebank reader and vocabulary, and the model zoo.
#include <memory>

#include "bindings.h"

namespace vjit::python {

namespace {

using IntArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;
using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

// An optional per-vertex int array: `vertices` entries, or none (a null pointer).
const int64_t* per_vertex(const std::optional<IntArray>& array, int64_t vertices, const char* name) {
  if (!array) return nullptr;
  VJIT_USER_CHECK(array->ndim() == 1 && array->size() == vertices,
                  "GraphBatch.from_arrays: " << name << " must be a vector of one entry per vertex (" << vertices
                                             << "), got " << array->ndim() << " dimension(s), " << array->size()
                                             << " entries");
  return array->data();
}

// The vertices of the batch in CSR form: sample s holds vertices
// [sample_offsets[s], sample_offsets[s+1]); vertex v's children are
// children[child_offsets[v] .. child_offsets[v+1]), indices within its sample.
GraphBatch batch_from_arrays(const IntArray& sample_offsets, const IntArray& types, const IntArray& child_offsets,
                             const IntArray& children, const std::optional<IntArray>& tokens,
                             const std::optional<IntArray>& labels, const std::optional<FloatArray>& features) {
  VJIT_USER_CHECK(sample_offsets.ndim() == 1 && sample_offsets.size() >= 1,
                  "GraphBatch.from_arrays: sample_offsets must be a vector of num_samples + 1 offsets");
  const int64_t vertices = types.size();
  VJIT_USER_CHECK(types.ndim() == 1, "GraphBatch.from_arrays: types must be a vector (one type per vertex)");
  VJIT_USER_CHECK(child_offsets.ndim() == 1 && child_offsets.size() == vertices + 1,
                  "GraphBatch.from_arrays: child_offsets must hold num_vertices + 1 = " << vertices + 1
                                                                                        << " offsets, got " << child_offsets.size());
  const int64_t* token = per_vertex(tokens, vertices, "tokens");
  const int64_t* label = per_vertex(labels, vertices, "labels");
  int64_t width = 0;
  if (features) {
    VJIT_USER_CHECK(features->ndim() == 2 && features->shape(0) == vertices,
                    "GraphBatch.from_arrays: features must be a matrix [num_vertices, width] with num_vertices = "
                        << vertices);
    width = features->shape(1);
  }
  const int64_t* offsets = sample_offsets.data();
  const int64_t* type = types.data();
  const int64_t* child_begin = child_offsets.data();
  const int64_t* child = children.data();
  const float* feature = features ? features->data() : nullptr;
  const int64_t samples = sample_offsets.size() - 1, edges = children.size();

  py::gil_scoped_release unlocked;
  VJIT_USER_CHECK(offsets[0] == 0 && offsets[samples] == vertices,
                  "GraphBatch.from_arrays: sample_offsets must start at 0 and end at num_vertices = " << vertices);
  VJIT_USER_CHECK(child_begin[0] == 0 && child_begin[vertices] == edges,
                  "GraphBatch.from_arrays: child_offsets must start at 0 and end at len(children) = " << edges);
  GraphBatch batch;
  batch.samples.resize(size_t(samples));
  for (int64_t s = 0; s < samples; ++s) {
    VJIT_USER_CHECK(offsets[s] <= offsets[s + 1], "GraphBatch.from_arrays: sample_offsets decrease at sample " << s);
    Sample& sample = batch.samples[size_t(s)];
    sample.vertices.resize(size_t(offsets[s + 1] - offsets[s]));
    for (int64_t v = offsets[s]; v < offsets[s + 1]; ++v) {
      VJIT_USER_CHECK(child_begin[v] <= child_begin[v + 1],
                      "GraphBatch.from_arrays: child_offsets decrease at vertex " << v);
      Vertex& vertex = sample.vertices[size_t(v - offsets[s])];
      vertex.type = int(type[v]);
      vertex.children.assign(child + child_begin[v], child + child_begin[v + 1]);
      if (token) vertex.token = int(token[v]);
      if (label) vertex.label = int(label[v]);
      if (feature) vertex.features.assign(feature + v * width, feature + (v + 1) * width);
    }
  }
  return batch;
}

// One vertex from a tuple (type, children[, token[, label[, features]]]) or a
// dict with those keys (type is required).
Vertex vertex_from_python(const py::handle& item, size_t s, size_t v) {
  Vertex vertex;
  auto read = [&](const char* key, size_t index) -> py::object {
    if (py::isinstance<py::dict>(item)) {
      auto d = py::reinterpret_borrow<py::dict>(item);
      return d.contains(key) ? py::object(d[key]) : py::object(py::none());
    }
    auto fields = py::reinterpret_borrow<py::sequence>(item);
    return index < fields.size() ? py::object(fields[index]) : py::object(py::none());
  };
  if (!py::isinstance<py::dict>(item) && (!py::isinstance<py::sequence>(item) || py::isinstance<py::str>(item)))
    throw UserError("GraphBatch.from_lists: sample " + std::to_string(s) + ", vertex " + std::to_string(v) +
                    ": expected a tuple (type, children, token, label, features) or a dict, got " +
                    std::string(py::str(py::type::of(item).attr("__name__"))));
  py::object type = read("type", 0);
  VJIT_USER_CHECK(!type.is_none(), "GraphBatch.from_lists: sample " << s << ", vertex " << v << " has no type");
  vertex.type = type.cast<int>();
  if (py::object children = read("children", 1); !children.is_none()) vertex.children = children.cast<std::vector<int>>();
  if (py::object token = read("token", 2); !token.is_none()) vertex.token = token.cast<int>();
  if (py::object label = read("label", 3); !label.is_none()) vertex.label = label.cast<int>();
  if (py::object features = read("features", 4); !features.is_none())
    vertex.features = features.cast<std::vector<float>>();
  return vertex;
}

GraphBatch batch_from_lists(const py::sequence& samples) {
  GraphBatch batch;
  for (size_t s = 0; s < samples.size(); ++s) {
    Sample sample;
    const auto vertices = samples[s].cast<py::sequence>();
    for (size_t v = 0; v < vertices.size(); ++v) sample.vertices.push_back(vertex_from_python(vertices[v], s, v));
    batch.samples.push_back(std::move(sample));
  }
  return batch;
}

// The inverse of batch_from_arrays (features left out): a dict of int64 arrays.
py::dict batch_to_arrays(const GraphBatch& batch) {
  const int64_t vertices = batch.num_vertices();
  int64_t edges = 0;
  for (const Sample& sample : batch.samples)
    for (const Vertex& vertex : sample.vertices) edges += int64_t(vertex.children.size());
  py::array_t<int64_t> sample_offsets(py::ssize_t(batch.samples.size() + 1)), types(vertices),
      child_offsets(vertices + 1), children(edges), tokens(vertices), labels(vertices);
  int64_t *sample_at = sample_offsets.mutable_data(), *type = types.mutable_data(),
          *child_begin = child_offsets.mutable_data(), *child = children.mutable_data(), *token = tokens.mutable_data(),
          *label = labels.mutable_data();
  {
    py::gil_scoped_release unlocked;
    int64_t v = 0, e = 0;
    sample_at[0] = 0;
    child_begin[0] = 0;
    for (size_t s = 0; s < batch.samples.size(); ++s) {
      for (const Vertex& vertex : batch.samples[s].vertices) {
        type[v] = vertex.type;
        token[v] = vertex.token;
        label[v] = vertex.label;
        for (int c : vertex.children) child[e++] = c;
        child_begin[++v] = e;
      }
      sample_at[s + 1] = v;
    }
  }
  py::dict arrays;
  arrays["sample_offsets"] = sample_offsets;
  arrays["types"] = types;
  arrays["child_offsets"] = child_offsets;
  arrays["children"] = children;
  arrays["tokens"] = tokens;
  arrays["labels"] = labels;
  return arrays;
}

void bind_graphs(py::module_& m) {
  py::class_<Vertex>(m, "Vertex", "One vertex of a sample: its type, its children and its own inputs.")
      .def(py::init([](int type, std::vector<int> children, int token, int label, std::vector<float> features) {
             return Vertex{type, std::move(children), token, label, std::move(features)};
           }),
           py::arg("type"), py::arg("children") = std::vector<int>{}, py::arg("token") = -1, py::arg("label") = -1,
           py::arg("features") = std::vector<float>{})
      .def_readwrite("type", &Vertex::type, cpp_doc("vjit::Vertex::type"))
      .def_readwrite("children", &Vertex::children, cpp_doc("vjit::Vertex::children"))
      .def_readwrite("token", &Vertex::token, cpp_doc("vjit::Vertex::token"))
      .def_readwrite("label", &Vertex::label, cpp_doc("vjit::Vertex::label"))
      .def_readwrite("features", &Vertex::features, cpp_doc("vjit::Vertex::features"));

  py::class_<Sample>(m, "Sample", cpp_doc("vjit::Sample"))
      .def(py::init<>())
      .def_readwrite("name", &Sample::name, "used in error messages; empty means \"sample <index>\"")
      .def_readwrite("vertices", &Sample::vertices,
                     (std::string(cpp_doc("vjit::Sample::vertices")) + " (a copy: assign a list to change them)").c_str())
      .def("add_vertex", &Sample::add_vertex, py::arg("type"), py::arg("children") = std::vector<int>{},
           py::arg("token") = -1, py::arg("label") = -1, "Appends a vertex and returns its index.")
      .def("__len__", [](const Sample& s) { return s.vertices.size(); });

  py::class_<GraphBatch>(m, "GraphBatch", "The samples one call of the engine runs together.")
      .def(py::init<>())
      .def(py::init([](std::vector<Sample> samples) { return GraphBatch{std::move(samples), 0}; }), py::arg("samples"))
      .def_static("from_arrays", &batch_from_arrays, py::arg("sample_offsets"), py::arg("types"),
                  py::arg("child_offsets"), py::arg("children"), py::arg("tokens") = py::none(),
                  py::arg("labels") = py::none(), py::arg("features") = py::none(),
                  "A batch from arrays over all its vertices: sample s holds vertices\n"
                  "[sample_offsets[s], sample_offsets[s+1]); vertex v has type types[v] and the children\n"
                  "children[child_offsets[v]:child_offsets[v+1]] (indices within its sample, in slot order);\n"
                  "optional tokens[v], labels[v] (-1: none) and feature rows features[v] (a [V, d] matrix).")
      .def_static("from_lists", &batch_from_lists, py::arg("samples"),
                  "A batch from nested lists: one list of vertices per sample, each vertex a tuple\n"
                  "(type, children, token, label, features) — trailing ones may be left out — or a dict.")
      .def("to_arrays", &batch_to_arrays,
           "The batch as from_arrays takes it (without features): a dict of int64 arrays sample_offsets,\n"
           "types, child_offsets, children, tokens and labels.")
      .def(
          "select",
          [](const GraphBatch& batch, const std::vector<int>& indices) {
            py::gil_scoped_release unlocked;
            return models::make_batch(batch.samples, indices);
          },
          py::arg("indices"), "The samples at `indices` as a new batch (copies).")
      .def_readwrite("first_sample", &GraphBatch::first_sample, cpp_doc("vjit::GraphBatch::first_sample"))
      .def_property_readonly("num_vertices", &GraphBatch::num_vertices, cpp_doc("vjit::GraphBatch::num_vertices"))
      .def("sample", [](const GraphBatch& b, int s) { return b.samples.at(size_t(s)); }, py::arg("index"), "A copy of sample `index`.")
      .def_property_readonly("samples", [](const GraphBatch& b) { return b.samples; },
                             (std::string(cpp_doc("vjit::GraphBatch::samples")) + " (a copy)").c_str())
      .def("__len__", [](const GraphBatch& b) { return b.samples.size(); });
}

void bind_treebanks(py::module_& m) {
  py::class_<BracketTree::Node>(m, "BracketTreeNode", cpp_doc("vjit::BracketTree::Node"))
      .def_readonly("label", &BracketTree::Node::label, cpp_doc("vjit::BracketTree::Node::label"))
      .def_readonly("word", &BracketTree::Node::word, cpp_doc("vjit::BracketTree::Node::word"))
      .def_readonly("children", &BracketTree::Node::children, cpp_doc("vjit::BracketTree::Node::children"));
  py::class_<BracketTree>(m, "BracketTree", cpp_doc("vjit::BracketTree"))
      .def_readonly("nodes", &BracketTree::nodes, cpp_doc("vjit::BracketTree::nodes"))
      .def("__str__", [](const BracketTree& t) { return format_bracket_tree(t); });
  m.def("read_bracket_file", &read_bracket_file, py::arg("path"), py::call_guard<py::gil_scoped_release>(),
        "Trees in bracket form, one per line, plain or gzip (the Stanford Sentiment Treebank's files).");
  m.def("parse_bracket_trees", &parse_bracket_trees, py::arg("text"), py::arg("source_name") = "<string>",
        cpp_doc("vjit::parse_bracket_trees"));
  m.def("make_synthetic_treebank",
        [](int n, uint64_t seed) { return make_synthetic_treebank(n, seed); }, py::arg("num_trees"), py::arg("seed"),
        "A synthetic sentiment treebank of random binary trees, the same for a seed on every platform.");

  py::class_<Vocabulary>(m, "Vocabulary", cpp_doc("vjit::Vocabulary"))
      .def(py::init<bool>(), py::arg("with_unk") = true)
      .def_static("from_trees",
                  [](const std::vector<BracketTree>& trees, int max_size) { return Vocabulary::from_trees(trees, max_size); },
                  py::arg("trees"), py::arg("max_size") = -1, cpp_doc("vjit::Vocabulary::from_trees"))
      .def("add", &Vocabulary::add, py::arg("word"), cpp_doc("vjit::Vocabulary::add"))
      .def("id", &Vocabulary::id, py::arg("word"), cpp_doc("vjit::Vocabulary::id"))
      .def("word", &Vocabulary::word, py::arg("id"), cpp_doc("vjit::Vocabulary::word"))
      .def("__contains__", &Vocabulary::contains, py::arg("word"), cpp_doc("vjit::Vocabulary::contains"))
      .def("__len__", &Vocabulary::size);

  m.def(
      "trees_to_batch",
      [](const std::vector<BracketTree>& trees, const Vocabulary& vocab, int leaf, int internal, int first_index) {
        return trees_to_batch(trees, vocab, TreeTypes{leaf, internal}, first_index);
      },
      py::arg("trees"), py::arg("vocab"), py::arg("leaf") = 0, py::arg("internal") = 1, py::arg("first_index") = 0,
      py::call_guard<py::gil_scoped_release>(),
      "One vertex per node: leaves of type `leaf` with the word's token, internal nodes of type\n"
      "`internal` with their children; every vertex carries its node's label; unary chains collapse.");
  m.def("shuffled_indices", &shuffled_indices, py::arg("n"), py::arg("seed"),
        "A permutation of 0..n-1 that depends only on (n, seed), as the C++ examples shuffle.");
}

void bind_zoo(py::module_& m) {
  auto zoo = m.def_submodule("models", "The model zoo of vjit/models.h, built in C++ (the reference for Python models).");
  py::class_<models::Bundle, std::shared_ptr<models::Bundle>>(zoo, "Bundle", cpp_doc("vjit::models::Bundle"))
      .def_readonly("name", &models::Bundle::name, cpp_doc("vjit::models::Bundle::name"))
      .def_property_readonly(
          "model", [](models::Bundle& b) -> Model& { return *b.model; }, py::return_value_policy::reference_internal,
          cpp_doc("vjit::models::Bundle::model"))
      .def_property_readonly(
          "program", [](models::Bundle& b) -> Program& { return *b.program; },
          py::return_value_policy::reference_internal, cpp_doc("vjit::models::Bundle::program"))
      .def_property_readonly(
          "train", [](const models::Bundle& b) { return GraphBatch{b.train, 0}; }, cpp_doc("vjit::models::Bundle::train"))
      .def_property_readonly(
          "test", [](const models::Bundle& b) { return GraphBatch{b.test, 0}; }, cpp_doc("vjit::models::Bundle::test"))
      .def_property_readonly(
          "dev", [](const models::Bundle& b) { return GraphBatch{b.dev, 0}; }, cpp_doc("vjit::models::Bundle::dev"))
      .def_readonly("vocab", &models::Bundle::vocab, cpp_doc("vjit::models::Bundle::vocab"))
      .def_readonly("classifier_types", &models::Bundle::classifier_types,
                    cpp_doc("vjit::models::Bundle::classifier_types"));
  zoo.def("model_names", &models::model_names, cpp_doc("vjit::models::model_names"));
  zoo.def(
      "make_model",
      [](const std::string& name, int hidden, int embed, double dropout, uint64_t seed, int train_samples,
         int test_samples, std::string data_path, std::string dev_path, std::string test_path, int vocab_limit) {
        models::Config config;
        config.hidden = hidden;
        config.embed = embed;
        config.dropout = dropout;
        config.seed = seed;
        config.train_samples = train_samples;
        config.test_samples = test_samples;
        config.data_path = std::move(data_path);
        config.dev_path = std::move(dev_path);
        config.test_path = std::move(test_path);
        config.vocab_limit = vocab_limit;
        py::gil_scoped_release unlocked;
        return std::make_shared<models::Bundle>(models::make_model(name, config));
      },
      py::arg("name"), py::arg("hidden") = 64, py::arg("embed") = 0, py::arg("dropout") = 0.0, py::arg("seed") = 1,
      py::arg("train_samples") = 1000, py::arg("test_samples") = 200, py::arg("data_path") = "",
      py::arg("dev_path") = "", py::arg("test_path") = "", py::arg("vocab_limit") = 20000,
      "A model of the zoo with its data (vjit::models::Config's fields as keywords).");
}

}  // namespace

void bind_data(py::module_& m) {
  bind_graphs(m);
  bind_treebanks(m);
  bind_zoo(m);
}

}  // namespace vjit::python
