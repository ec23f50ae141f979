// ∂F against finite differences: every op alone, then every example model.
#include <gtest/gtest.h>

#include <functional>

#include "tests/gradcheck.h"
#include "vjit/models.h"
#include "vjit/vjit.h"

namespace vjit {
namespace {

using testing::GradcheckResult;
constexpr double kTolerance = 1e-6;

struct Params {
  Param matrix;  // [n, n]
  Param vector;  // [n]
  Param tensor;  // [2n, n]: two [n, n] slices for bilinear
};
using OpBody = std::function<Value(Builder&, Value x, Value y, Params p)>;

// A two-type program around one op: "leaf" vertices make x = pull + P_x (so x
// depends on a parameter), "node" vertices gather two leaves and apply the op
// to them (and to parameters where the op takes one); the loss is
// Σ out ⊙ (out/2 + 0.3), so every output element has its own gradient.
struct OpCase {
  std::string name;
  OpBody body;
  bool positive = false;  // inputs kept > 0 (log, sqrt, div)
};

constexpr int kWidth = 4;

GradcheckResult check_op(const OpCase& op) {
  Model model(3);
  const int n = kWidth;
  Param p_x = model.add("P_x", Shape::vec(n), Init::Uniform, 0.5f);
  Params params{model.add("P", Shape::mat(n, n), Init::Uniform, 0.5f),
                model.add("P_vec", Shape::vec(n), Init::Uniform, 0.5f),
                model.add("P_tensor", Shape::mat(2 * n, n), Init::Uniform, 0.5f)};
  Program program(model);
  int leaf = program.add_type("leaf", [&](Builder& b) {
    Value x = b.add(b.pull(n), p_x);
    b.scatter(op.positive ? b.add_scalar(b.mul(x, x), 0.5) : x);
  });
  int node = program.add_type("node", [&](Builder& b) {
    Value out = op.body(b, b.gather(0, Shape::vec(n)), b.gather(1, Shape::vec(n)), params);
    b.add_loss(b.sum(b.mul(out, b.add_scalar(b.scale(out, 0.5), 0.3))));
    b.push(out);
  });
  GraphBatch batch;
  for (int s = 0; s < 2; ++s) {
    Sample sample;
    for (int k = 0; k < 2; ++k) {
      int v = sample.add_vertex(leaf);
      for (int i = 0; i < n; ++i) sample.vertices[size_t(v)].features.push_back(0.3f * float(i + 1) - 0.4f * float(k + s));
    }
    sample.add_vertex(node, {0, 1}, -1, s == 0 ? 1 : -1);  // the second node has no label
    batch.samples.push_back(sample);
  }
  return testing::gradcheck(program, batch, 1000);
}

std::vector<OpCase> op_cases() {
  const int n = kWidth;
  return {
      {"add", [](Builder& b, Value x, Value y, Params) { return b.add(x, y); }},
      {"sub", [](Builder& b, Value x, Value y, Params) { return b.sub(x, y); }},
      {"mul", [](Builder& b, Value x, Value y, Params) { return b.mul(x, y); }},
      {"div", [](Builder& b, Value x, Value y, Params) { return b.div(x, y); }, true},
      {"add_param_vector", [](Builder& b, Value x, Value, Params p) { return b.add(x, p.vector); }},
      {"mul_param_vector", [](Builder& b, Value x, Value, Params p) { return b.mul(p.vector, x); }},
      {"div_by_param_matrix", [](Builder& b, Value x, Value y, Params p) {
         Value m = b.reshape(b.concat({x, y, b.mul(x, y), b.sub(x, y)}), Shape::mat(n, n));
         return b.sum_rows(b.sub(m, p.matrix));
       }},
      {"neg", [](Builder& b, Value x, Value, Params) { return b.neg(x); }},
      {"sigmoid", [](Builder& b, Value x, Value, Params) { return b.sigmoid(x); }},
      {"tanh", [](Builder& b, Value x, Value, Params) { return b.tanh(x); }},
      {"relu", [](Builder& b, Value x, Value, Params) { return b.relu(x); }},
      {"exp", [](Builder& b, Value x, Value, Params) { return b.exp(x); }},
      {"log", [](Builder& b, Value x, Value, Params) { return b.log(x); }, true},
      {"sqrt", [](Builder& b, Value x, Value, Params) { return b.sqrt(x); }, true},
      {"scale", [](Builder& b, Value x, Value, Params) { return b.scale(x, -1.7); }},
      {"add_scalar", [](Builder& b, Value x, Value, Params) { return b.add_scalar(x, 2.5); }},
      {"dropout", [](Builder& b, Value x, Value, Params) { return b.dropout(x, 0.4); }},
      {"concat_slice", [](Builder& b, Value x, Value y, Params) {
         Value c = b.concat({x, y});
         return b.mul(b.slice(c, 2, n), b.slice(c, 0, n));
       }},
      {"split_concat", [](Builder& b, Value x, Value y, Params) {
         std::vector<Value> halves = b.split(x, 2);
         return b.mul(b.concat({halves[1], halves[0]}), y);
       }},
      {"sum", [](Builder& b, Value x, Value y, Params) { return b.mul(y, b.sum(b.mul(x, x))); }},
      {"matmul_param_vector", [](Builder& b, Value x, Value, Params p) { return b.matmul(p.matrix, x); }},
      {"matmul_vector_param", [](Builder& b, Value x, Value, Params p) { return b.matmul(x, p.matrix); }},
      {"matmul_vertex_matrix_vector", [](Builder& b, Value x, Value y, Params) {
         Value m = b.reshape(b.concat({x, y, b.mul(x, y), b.sub(x, y)}), Shape::mat(n, n));
         return b.matmul(m, x);
       }},
      {"matmul_param_matrix", [](Builder& b, Value x, Value y, Params p) {
         Value m = b.reshape(b.concat({x, y, b.mul(x, y), b.sub(x, y)}), Shape::mat(n, n));
         return b.sum_rows(b.matmul(p.matrix, m));
       }},
      {"matmul_matrix_param", [](Builder& b, Value x, Value y, Params p) {
         Value m = b.reshape(b.concat({x, y, b.mul(x, y), b.sub(x, y)}), Shape::mat(n, n));
         return b.sum_rows(b.matmul(m, p.matrix));
       }},
      {"broadcast_rows", [](Builder& b, Value x, Value y, Params) {
         Value m = b.reshape(b.concat({x, y, b.mul(x, y), b.sub(x, y)}), Shape::mat(n, n));
         return b.sum_rows(b.mul(m, x));
       }},
      {"outer", [](Builder& b, Value x, Value y, Params) { return b.sum_rows(b.outer(b.tanh(x), y)); }},
      {"bilinear", [](Builder& b, Value x, Value y, Params p) {
         Value two = b.bilinear(b.mul(x, y), p.tensor);  // [2]: (x⊙y)ᵀ V_k (x⊙y)
         Value one = b.bilinear(x, p.matrix);            // [1]: k = 1
         return b.mul(b.concat({two, one, b.neg(one)}), y);
       }},
      {"sym_outer", [](Builder& b, Value x, Value y, Params) { return b.sym_outer(b.mul(b.tanh(x), y)); }},
      {"layer_norm", [](Builder& b, Value x, Value y, Params p) {
         return b.mul(b.layer_norm(b.add(x, b.tanh(y))), p.vector);
       }},
      {"softmax_cross_entropy", [](Builder& b, Value x, Value, Params) {
         Value loss = b.softmax_cross_entropy(x, b.label(n));
         return b.mul(x, loss);
       }},
      {"squared_error", [](Builder& b, Value x, Value y, Params) { return b.mul(x, b.squared_error(x, y)); }},
  };
}

class OpGradient : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpGradient, MatchesFiniteDifferences) {
  GradcheckResult r = check_op(GetParam());
  EXPECT_GT(r.checked, 0);
  EXPECT_LT(r.max_relative_error, kTolerance) << GetParam().name << ": worst " << r.worst;
}

INSTANTIATE_TEST_SUITE_P(EveryOp, OpGradient, ::testing::ValuesIn(op_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; });

struct ModelCase {
  std::string model;
  double dropout = 0.0;
  // Tree-FC's ReLUs put kinks within the default stencil's reach (±2e-3).
  double h = 1e-3;
};

class ModelGradient : public ::testing::TestWithParam<ModelCase> {};

TEST_P(ModelGradient, MatchesFiniteDifferences) {
  models::Config config;
  config.hidden = 3;
  config.embed = 2;
  config.train_samples = 3;
  config.test_samples = 0;
  config.tree_fc_leaves = 8;
  config.dropout = GetParam().dropout;
  models::Bundle bundle = models::make_model(GetParam().model, config);
  // Two samples: enough structure, and an objective small enough that rounding
  // in the finite differences stays far below the tolerance.
  GraphBatch batch = models::make_batch(bundle.train, {0, 1});
  RunOptions options;
  options.seed = 11;
  GradcheckResult r = testing::gradcheck(*bundle.program, batch, 12, GetParam().h, options);
  EXPECT_GT(r.checked, 20);
  EXPECT_LT(r.max_relative_error, kTolerance) << GetParam().model << ": worst " << r.worst;
}

std::vector<ModelCase> model_cases() {
  std::vector<ModelCase> cases;
  for (const std::string& name : models::model_names()) cases.push_back({name, 0.0, name == "tree_fc" ? 1e-4 : 1e-3});
  cases.push_back({"tree_lstm", 0.3, 1e-3});
  cases.push_back({"var_lstm", 0.3, 1e-3});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(EveryModel, ModelGradient, ::testing::ValuesIn(model_cases()),
                         [](const ::testing::TestParamInfo<ModelCase>& info) {
                           return info.param.model + (info.param.dropout > 0 ? "_dropout" : "");
                         });

}  // namespace
}  // namespace vjit
