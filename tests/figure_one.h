#pragma once
// ED-Batch Fig. 1: a parse tree of I vertices (four leaves; I1 = I(leaf, leaf),
// I2 = I(I1, leaf), I3 = I(I2, leaf)), an O vertex on each I vertex, one R
// vertex gathering every O. Shared by the scheduler and FSM tests.
#include <vector>

#include "vjit/graph.h"

namespace vjit::test_graphs {

constexpr int kI = 0, kO = 1, kR = 2;

inline GraphBatch figure_one() {
  Sample s;
  s.name = "fig1";
  std::vector<int> leaves;
  for (int i = 0; i < 4; ++i) leaves.push_back(s.add_vertex(kI));
  const int i1 = s.add_vertex(kI, {leaves[0], leaves[1]});
  const int i2 = s.add_vertex(kI, {i1, leaves[2]});
  const int i3 = s.add_vertex(kI, {i2, leaves[3]});
  std::vector<int> outputs;
  for (int v : {leaves[0], leaves[1], leaves[2], leaves[3], i1, i2, i3}) outputs.push_back(s.add_vertex(kO, {v}));
  s.add_vertex(kR, outputs);
  GraphBatch batch;
  batch.samples.push_back(std::move(s));
  return batch;
}

}  // namespace vjit::test_graphs
