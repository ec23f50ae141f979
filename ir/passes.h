#pragma once
// IR passes. Each is a free function from a function to a new function; value
// ids are renumbered, sinks are always kept.
#include "vjit/ir.h"

namespace vjit::ir {

// Removes every value no sink depends on.
// Precondition: the function verifies.
Function dead_code_elimination(const Function& function);

// Merges nodes with the same op, operands, shape and used attributes (see the op
// table in vjit/ir.h) into the first one. Sinks are never merged; Dropout nodes
// of distinct keys are not, since the key is an attribute.
Function common_subexpression_elimination(const Function& function);

// CSE followed by DCE; what Program runs on F and ∂F.
Function simplify(const Function& function);

}  // namespace vjit::ir
