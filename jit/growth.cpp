#include "jit/growth.h"

#include <exception>

#include "vjit/error.h"

namespace vjit {

int GrowthStep::add_vertex(int type, std::vector<int> children, int token, int label) {
  return add_vertex(Vertex{type, std::move(children), token, label, {}});
}

int GrowthStep::add_vertex(Vertex vertex) {
  const int size = int(sample_.vertices.size());
  VJIT_USER_CHECK(vertex.type >= 0 && vertex.type < num_types_,
                  "add_vertex: vertex type " << vertex.type << " is not one of the program's " << num_types_
                                             << " types");
  for (size_t k = 0; k < vertex.children.size(); ++k)
    VJIT_USER_CHECK(vertex.children[k] >= 0 && vertex.children[k] < size,
                    "add_vertex: child " << k << " is vertex " << vertex.children[k] << ", which does not exist (the "
                                         << "sample has vertices 0.." << size - 1 << ")");
  VJIT_USER_CHECK(size < max_vertices_, "add_vertex: the sample already has " << size
                                            << " vertices, the growth limit (Engine::set_growth_limit); does the "
                                               "callback ever stop adding?");
  sample_.vertices.push_back(std::move(vertex));
  return size;
}

namespace jit {

bool GrowthRules::any() const {
  for (const GrowthCallback& callback : callbacks)
    if (callback) return true;
  return false;
}

namespace {

std::string sample_name(const Sample& sample, int index) {
  return sample.name.empty() ? "sample " + std::to_string(index) : "sample '" + sample.name + "'";
}

}  // namespace

void grow_round(const Program& program, const GrowthRules& rules, const PushedValues<float>& pushes,
                std::span<Sample* const> round, std::vector<int>& samples, std::vector<int>& first_new,
                std::span<const int> push_shift) {
  size_t grew = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    Sample& sample = *round[i];
    const int index = samples[i];
    const int evaluated = int(sample.vertices.size());
    for (int v = first_new[size_t(index)]; v < evaluated; ++v) {
      const int type = sample.vertices[size_t(v)].type;
      const GrowthCallback& callback = rules.callbacks[size_t(type)];
      if (!callback) continue;
      const int pushed_vertex = push_shift.empty() ? v : v + push_shift[i];
      GrowthStep step(sample, rules.first_sample_index + index, int(i), v, pushed_vertex, pushes, program.num_types(),
                      rules.max_vertices);
      try {
        callback(step);
      } catch (const std::exception& e) {
        // The callback's own exception stays inside (std::rethrow_if_nested):
        // a front end raises it again as it was (Python: its type and object).
        std::throw_with_nested(UserError(sample_name(sample, index) + " vertex " + std::to_string(v) + " (type '" +
                                         program.type_name(type) + "'): growth callback failed: " + e.what()));
      }
    }
    first_new[size_t(index)] = evaluated;
    if (int(sample.vertices.size()) > evaluated) samples[grew++] = index;
  }
  samples.resize(grew);
}

}  // namespace jit
}  // namespace vjit
