#pragma once
// What vjit's own code does to a Model's block beyond the public API (the
// Model's private members, reached through this friend): lay the values out
// again so that stacked weights are one row-major block (runtime/param_layout.h),
// ask whether parameters lie one after another, and drop the parameters of a
// vertex type whose body threw (Program::add_type). Moving the values counts in
// Model::value_moves(), which users read.
#include <span>
#include <vector>

#include "vjit/model.h"

namespace vjit::ir {

class ModelLayout {
 public:
  // Model::arrange: each run's parameters consecutive, in the run's order.
  static void arrange(Model& model, const std::vector<std::vector<int>>& runs) { model.arrange(runs); }
  static bool consecutive(const Model& model, std::span<const int> params) { return model.consecutive(params); }
  static void truncate(Model& model, int size) { model.truncate(size); }
};

}  // namespace vjit::ir
