#pragma once
// Programs over a vertex's [K, d] children block (gather_all), one per op of
// the block: what tests/test_children_ops.cpp checks on the CPU and
// tests/test_cuda_double.cpp runs on the CUDA device's host code.
#include <functional>
#include <string>
#include <vector>

#include "vjit/vjit.h"

namespace vjit::testing {

constexpr int kWidth = 3;
constexpr int kMaxChildren = 4;

struct Params {
  Param matrix;  // [kWidth, kWidth]
  Param vector;  // [kWidth]
};
using BlockBody = std::function<Value(Builder&, Value block, Params p)>;

struct BlockCase {
  std::string name;
  BlockBody body;
};

// "leaf" vertices scatter x = pull + P_x; a "node" gathers its leaves as a
// [kMaxChildren, kWidth] block and applies the op; the loss is
// Σ out ⊙ (out/2 + 0.3). The nodes have 3, 1, 0 and kMaxChildren children, so
// both the padding rows and the no-children case are exercised.
struct BlockProgram {
  Model model{5};
  Param p_x = model.add("P_x", Shape::vec(kWidth), Init::Uniform, 0.5f);
  Params params{model.add("P", Shape::mat(kWidth, kWidth), Init::Uniform, 0.5f),
                model.add("P_vec", Shape::vec(kWidth), Init::Uniform, 0.5f)};
  Program program{model};
  GraphBatch batch;

  explicit BlockProgram(const BlockBody& body) {
    int leaf = program.add_type("leaf", [&](Builder& b) { b.scatter(b.add(b.pull(kWidth), p_x)); });
    int node = program.add_type("node", [&](Builder& b) {
      Value out = body(b, b.gather_all(kMaxChildren, Shape::vec(kWidth)), params);
      b.add_loss(b.sum(b.mul(out, b.add_scalar(b.scale(out, 0.5), 0.3))));
      b.push(out);
    });
    int salt = 0;
    for (int children : {3, 1, 0, kMaxChildren}) {
      Sample sample;
      std::vector<int> leaves;
      for (int k = 0; k < children; ++k) {
        int v = sample.add_vertex(leaf);
        ++salt;
        // Distinct values, so no max ties within the finite differences' reach.
        for (int i = 0; i < kWidth; ++i)
          sample.vertices[size_t(v)].features.push_back(0.37f * float((salt * 7 + i * 5) % 11) - 1.6f + 0.01f * float(i));
        leaves.push_back(v);
      }
      sample.add_vertex(node, leaves);
      batch.samples.push_back(sample);
    }
  }
};

inline Value block_square(Builder& b, Value block) { return b.mul(block, block); }

inline std::vector<BlockCase> block_cases() {
  return {
      {"slice_cols", [](Builder& b, Value block, Params) {
         return b.sum_rows(b.mul(b.slice_cols(block, 1, 2), b.slice_cols(block, 0, 2)));
       }},
      {"transpose", [](Builder& b, Value block, Params) {
         Value t = b.transpose(block);  // [kWidth, K]
         return b.sum_rows(b.transpose(b.mul(t, t)));
       }},
      {"transpose_product", [](Builder& b, Value block, Params) {
         return b.sum_rows(b.matmul(b.transpose(block), block));  // a per-vertex [d, d] product
       }},
      {"block_times_param", [](Builder& b, Value block, Params p) {
         return b.sum_rows(b.sigmoid(b.add(b.matmul(block, p.matrix), p.vector)));
       }},
      {"block_times_param_twice", [](Builder& b, Value block, Params p) {
         Value once = b.tanh(b.matmul(block, p.matrix));
         return b.sum_rows(b.mul(b.matmul(once, p.matrix), block));
       }},
      {"mean_children", [](Builder& b, Value block, Params) { return b.mean_children(block_square(b, block)); }},
      {"max_children", [](Builder& b, Value block, Params p) { return b.max_children(b.mul(block, p.vector)); }},
      {"child_count", [](Builder& b, Value block, Params) {
         return b.mul(b.sum_rows(block), b.add_scalar(b.scale(b.child_count(), 0.5), 0.25));
       }},
  };
}

}  // namespace vjit::testing
