#pragma once
// Fusion of elementwise operators (Cavs §3.4): union-find over directly linked
// elementwise nodes of one phase and one shape; then a node left alone joins a
// group that already reads every one of its operands (sibling fusion). A group
// may have several inputs and several outputs; it never contains a gather,
// scatter, GEMM, dropout or a node of another phase, and never two nodes
// linked through a node outside the group (which would make the group depend
// on itself).
#include <string>
#include <vector>

#include "ir/classify.h"
#include "ir/ops.h"

namespace vjit::ir {

struct FusionGroup {
  std::vector<ValueId> nodes;    // in function order
  std::vector<ValueId> inputs;   // values read by the group and made outside it
  std::vector<ValueId> outputs;  // group values read outside it (or kept for ∂F)
};

// Whether a node may join a fusion group.
bool is_fusable(const Function& function, ValueId id);

// Moves eager elementwise nodes whose every reader runs in the tasks (core)
// into the core phase, so that they fuse into the task's kernel instead of
// making one more pass over every vertex and a buffer the kernel then reads:
// in ∂F, the activations' derivatives (σ(1 − σ), 1 − tanh²) that only the
// task's gradient kernel uses. A chain moves as a whole (reverse order). Values
// in `keep` (read by ∂F) stay. Returns how many nodes moved.
int sink_elementwise_into_core(const Function& function, std::vector<Phase>& phases, const std::vector<bool>& keep);

// Groups of two or more nodes. `keep[id]` marks values that must be written to
// memory even when nothing in `function` reads them (forward values ∂F reads).
std::vector<FusionGroup> find_fusion_groups(const Function& function, const std::vector<Phase>& phases,
                                            const std::vector<bool>& keep);

// The part of `group` a forward pass that no backward follows needs: its
// outputs that a node of `function` outside the group reads (not those kept
// for ∂F alone), the group's nodes they depend on and the inputs those read,
// each in the group's order. No outputs when nothing outside reads the group.
FusionGroup forward_only_part(const Function& function, const FusionGroup& group);

// The groups in the IR text form: `group 0 (core): %4 %5 %7 <- %2 %3 -> %7`.
std::string to_string(const Function& function, const std::vector<FusionGroup>& groups);

}  // namespace vjit::ir
