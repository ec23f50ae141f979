#include "runtime/touched_rows.h"

#include <algorithm>

namespace vjit::runtime {

TouchedRows::TouchedRows(const Model& model, const ExecPlan& plan)
    : rows_(size_t(model.size())), written_(size_t(model.size())) {
  std::vector<char> embedding(size_t(model.size()), 0), dense(size_t(model.size()), 0);
  for (const TypePlan& type : plan.types)
    for (const ir::Node& n : type.backward.function->nodes) {
      if (n.op == ir::Op::EmbeddingGrad) embedding[size_t(n.param)] = 1;
      if (n.op == ir::Op::ParamGrad) dense[size_t(n.param)] = 1;
    }
  for (size_t p = 0; p < size_t(model.size()); ++p) {
    if (!embedding[p] || dense[p]) continue;
    rows_[p].all = false;
    rows_[p].rows.reserve(size_t(model.param(int(p)).shape.rows()));
    written_[p].assign(size_t(model.param(int(p)).shape.rows()), 0);
  }
}

void TouchedRows::finish() {
  for (GradientRows& rows : rows_) std::sort(rows.rows.begin(), rows.rows.end());
}

}  // namespace vjit::runtime
