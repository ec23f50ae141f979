#include "vjit/reference.h"

#include "ir/interpreter.h"
#include "vjit/error.h"
#include "vjit/validate.h"

namespace vjit {

template <typename T>
Evaluation<T> reference_evaluate(const Program& program, const std::vector<std::vector<T>>& params,
                                 const GraphBatch& batch, const RunOptions& options) {
  VJIT_USER_CHECK(int(params.size()) == program.model().size(),
                  "reference_evaluate: " << params.size() << " parameter tensors given, the model has "
                                         << program.model().size());
  for (int p = 0; p < program.model().size(); ++p)
    VJIT_USER_CHECK(int64_t(params[size_t(p)].size()) == program.model().param(p).shape.numel(),
                    "reference_evaluate: parameter '" << program.model().param(p).name << "' has "
                                                      << params[size_t(p)].size() << " values, expected "
                                                      << program.model().param(p).shape.numel());
  std::vector<std::vector<int>> orders = validate_and_order(program.signatures(), batch);
  return ir::interpret(program, params, batch, orders, options);
}

template Evaluation<float> reference_evaluate(const Program&, const std::vector<std::vector<float>>&,
                                              const GraphBatch&, const RunOptions&);
template Evaluation<double> reference_evaluate(const Program&, const std::vector<std::vector<double>>&,
                                               const GraphBatch&, const RunOptions&);

Evaluation<float> reference_evaluate(const Program& program, const GraphBatch& batch, const RunOptions& options) {
  return reference_evaluate(program, parameter_values<float>(program.model()), batch, options);
}

}  // namespace vjit
