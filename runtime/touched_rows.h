#pragma once
// Which rows of each parameter's gradient a backward wrote, the bookkeeping
// every parameter store keeps (runtime/cpu_executor.*, runtime/cuda_executor.*).
// A parameter is row-sparse when only EmbeddingGrad nodes write its gradient
// (an embedding table): its touched rows are listed, sorted after a backward,
// so that zeroing and the optimizer cost the rows a batch looked up, not the
// vocabulary. Every other parameter is dense (GradientRows::all). Room for
// every row is reserved up front and a bitmap marks the rows listed, so that
// collecting them never allocates.
#include <vector>

#include "runtime/exec_plan.h"
#include "vjit/model.h"
#include "vjit/optimizer.h"

namespace vjit::runtime {

class TouchedRows {
 public:
  TouchedRows(const Model& model, const ExecPlan& plan);

  // Notes that the backward wrote row `row` of `param` (ignored when dense).
  void touch(int param, int row) {
    GradientRows& rows = rows_[size_t(param)];
    char& written = written_[size_t(param)][size_t(row)];
    if (rows.all || written) return;
    written = 1;
    rows.rows.push_back(row);
  }
  // Sorts each parameter's touched rows, after a backward.
  void finish();
  // Calls clear_row(row) for every touched row of `param` and forgets them.
  template <typename Fn>
  void clear(int param, Fn&& clear_row) {
    GradientRows& rows = rows_[size_t(param)];
    for (int row : rows.rows) {
      clear_row(row);
      written_[size_t(param)][size_t(row)] = 0;
    }
    rows.rows.clear();
  }

  const GradientRows& of(int param) const { return rows_[size_t(param)]; }
  const std::vector<GradientRows>& all() const { return rows_; }

 private:
  std::vector<GradientRows> rows_;
  std::vector<std::vector<char>> written_;  // per row-sparse parameter, per row: listed
};

}  // namespace vjit::runtime
