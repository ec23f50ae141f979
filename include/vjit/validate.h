#pragma once
// Checking input graphs against a program's vertex types, before anything runs.
#include <vector>

#include "vjit/graph.h"

namespace vjit {

/// Checks every sample against the program's vertex types and returns, for each
/// sample, its vertices in a topological order (children before parents).
/// Throws UserError naming the sample, vertex and slot for: an unknown type, a
/// child index out of range, an arity the type cannot gather, a child scattering
/// the wrong shape (or nothing), a cycle, a missing token/label/feature row.
/// What it accepts at the edges (childless variadic vertices, repeated
/// children, empty samples, unread inputs) and what that means: vjit/graph.h.
std::vector<std::vector<int>> validate_and_order(const std::vector<TypeSignature>& types,
                                                 const GraphBatch& batch);

}  // namespace vjit
