#pragma once
// Eager / core / lazy classification (Cavs, Proposition 1).
//
// In F, the recurrence enters through Gather* and leaves through Scatter; in ∂F
// it enters through ScatterGrad and leaves through GatherGrad. A node that does
// not depend on the recurrence is *eager*: it can run once over every vertex of
// its type before any task (e.g. the input projection W·x of every LSTM step).
// A node that depends on it and feeds the outgoing recurrence is *core*: it runs
// task by task. Everything else is *lazy*: it runs once over every vertex after
// the last task (pushes, losses, parameter gradients, embedding gradients).
#include <vector>

#include "ir/ops.h"

namespace vjit::ir {

enum class Phase : uint8_t { Eager, Core, Lazy };

const char* phase_name(Phase phase);

// One phase per node. With `batch_across_tasks` false every node is Core (the
// per-task baseline that the lazy-batching ablation compares against).
std::vector<Phase> classify_phases(const Function& function, bool batch_across_tasks = true);

}  // namespace vjit::ir
