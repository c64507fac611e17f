// CPU execution of the graph ops the Gemma, Gemma 2 and Phi-3 families add:
// gated MLPs with GELU gates or Phi-3's packed [.., 2F] gate_up input, the
// constant scale, and soft-capping (engine/cpu/ops.h). Called from
// RankExecutor::run_graph_op with the schedule op's buffer pointers.
#pragma once

#include <vector>

#include "engine/cpu/ops.h"
#include "engine/exec/graph_operands.h"

namespace shardscope::engine::exec {

// swiglu op (forward, backward or recompute, per o.backward()).
void run_gated(const GraphOperands& o, const std::vector<void*>& ptrs, cpu::GateActivation act);
// scale or softcap op. The scale is rounded to the activation dtype first,
// as Gemma's normalizer is a tensor of that dtype.
void run_scale_softcap(const GraphOperands& o, const std::vector<void*>& ptrs);

}  // namespace shardscope::engine::exec
