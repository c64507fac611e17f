// CPU execution of the mixture-of-experts graph ops (moe_router,
// moe_dispatch, moe_combine, sigmoid_gate; engine/cpu/ops.h). Called from
// RankExecutor::run_graph_op with the schedule op's buffer pointers.
//
// Routing. Under the workload's stated token balance (moe_routing "forced",
// plan/expr.h TokenBalance) the router assigns experts itself so that every
// expert gets exactly routed_tokens(T, e, E, k) tokens of each sequence, the
// sizes the plan gave its buffers: per sequence the T*k slots, taken
// choice-major (slot s = choice * T + position), go to expert 0 for the first
// n_0 slots, expert 1 for the next n_1, ... As no n_e exceeds T
// (validate_policy), a token's k slots, T apart, land on k distinct experts.
// The weights are still the softmax's probabilities of the assigned experts
// (renormalised as the family does), so gradients reach the router. Under
// all_tokens (moe_routing "topk") the router takes the real top-k, and each
// expert's buffers, sized for every token, hold the rows it got and zeros.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/exec/graph_operands.h"
#include "plan/expr.h"

namespace shardscope::engine::exec {

// Forward, backward or recompute of a mixture-of-experts op. `expert_tokens`:
// a moe_router's forward (not its recompute) adds the tokens each expert got
// into it (E entries); may be null.
void run_moe(const GraphOperands& o, const std::vector<void*>& ptrs, const plan::Workload& w,
             std::vector<int64_t>* expert_tokens);

// sigmoid_gate: y = sigmoid(g) * x (Qwen2-MoE's shared expert gate).
void run_sigmoid_gate(const GraphOperands& o, const std::vector<void*>& ptrs);

// Forced routing's cumulative per-sequence slot counts: ends[e] = n_0 + ... +
// n_e, n_e = routed_tokens(seq, e, ...), ends[E-1] = seq * k. Throws
// ExecError when an expert would get more than seq slots (a token twice).
std::vector<int64_t> forced_routing_ends(int64_t seq, int64_t experts, int64_t k,
                                         const plan::TokenBalance* balance);

// The forced assignment above for `batch` sequences of `seq` tokens: indices[batch*seq, k].
void forced_routing(int64_t batch, int64_t seq, int64_t experts, int64_t k,
                    const plan::TokenBalance* balance, int64_t* indices);

}  // namespace shardscope::engine::exec
