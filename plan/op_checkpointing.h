// Per-op selective activation checkpointing (PyTorch's
// torch.utils.checkpoint.create_selective_checkpoint_contexts): inside each
// checkpointed block the outputs of the chosen ops are saved in forward
// (CheckpointPolicy.MUST_SAVE) and everything else is recomputed in backward
// (PREFER_RECOMPUTE); in the recompute a saved op is a cache hit: it does not
// run, its forward outputs are handed out again.
//
// Policy form (key activation_checkpointing, read strictly, errors name the key):
//   {"save_ops": [NAME, ...], "save_every_other_matmul": bool,
//    "every": k, "offset": o}             every/offset choose the blocks as in
//                                         {"every": k, "offset": o} (default 1, 0)
//   {"preset": "torchtitan", "every": k, "offset": o}
// NAME is a graph op type ("linear", "attention", "rmsnorm", ...; see
// plan/graph.h) or one of the two aten kernels a linear op dispatches:
//   "mm"     a linear op without bias (nn.Linear(bias=False) on a 2-D or
//            contiguous 3-D input: aten.mm),
//   "addmm"  a linear op with a bias (nn.Linear on such an input folds it to
//            2-D and calls aten.addmm; GPT-2's Conv1D calls torch.addmm);
// "linear" is both. save_every_other_matmul counts the mm ops of each block
// in forward order from 1 and recomputes the even ones (needs "mm" or
// "linear"); addmm ops are not counted.
// Aten ops of exported graphs (type aten) are named by their overload
// ("aten.mm.default") or its packet ("aten.mm"); "mm", "addmm" and "linear"
// name aten.mm / aten.addmm ops as they name linear ops (aten.mm ops are the
// ones save_every_other_matmul counts), and "attention" names every aten op
// of kind attention (the _scaled_dot_product_* kernels). An "aten." name that
// matches no op of a checkpointed block is an error like any other.
//
// The torchtitan preset is torchtitan v0.2.2's op-level policy (--activation_
// checkpoint.mode selective --activation_checkpoint.selective_ac_option op):
// torchtitan/distributed/activation_checkpoint.py, _apply_op_sac ->
// _get_custom_policy(meta)._custom_policy, with the save list _op_sac_save_list
// of torchtitan/models/llama3/infra/parallelize.py: aten.mm, the SDPA kernels
// (_scaled_dot_product_{flash,efficient,cudnn}_attention,
// _scaled_dot_product_attention_math, _fused_attention_overrideable),
// _c10d_functional.reduce_scatter_tensor, aten.max, flex_attention,
// torch_attn._varlen_attn, inductor_compiled_code. `meta` is a fresh
// defaultdict(int) per checkpointed call (selective_checkpointing_context_fn),
// so the mm count restarts at every block; the policy increments
// meta["forward_mm_count"] before deciding and saves unless the count is
// even: the 1st, 3rd, 5th ... mm of a block are saved. In shardscope's graphs
// this is save_ops ["mm", "attention"] with save_every_other_matmul: no graph
// op is a reduce_scatter (tensor parallelism), an aten.max (float8) or a flex
// attention, and addmm is not in the list. Assumption: the GPU kernels. On CPU
// SDPA dispatches _scaled_dot_product_flash_attention_for_cpu, which the list
// does not name, so torchtitan's policy run on CPU recomputes attention;
// torchtitan trains on GPUs, which is what the preset models.
// Checked on CPU with torch 2.9.1 / transformers 4.57.6 by
// bench/torch_reference/sac_dispatch.py: a Llama block dispatches mm x7 (q, k,
// v, o, gate, up, down: q, v, gate, down saved), a Qwen2 block addmm x3 (q/k/v
// with bias) then mm x4 (o, gate, up, down: o and up saved), a GPT-2 block
// addmm x4 (Conv1D: none saved).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/graph.h"
#include "plan/op_checkpointing_spec.h"
#include "plan/policy.h"
#include "plan/units.h"

namespace shardscope::plan {

// The named presets.
OpCheckpointing op_checkpointing_preset(const std::string& name, const std::string& key);

// Reads the object form into `policy` (activation_checkpointing = ops,
// checkpoint_every / checkpoint_offset, op_checkpointing). `key` is the
// policy key ("activation_checkpointing"). Throws plan::Error naming the key.
void read_op_checkpointing(const nlohmann::json& v, const std::string& key, Policy& policy);
nlohmann::json op_checkpointing_to_json(const Policy& policy);

// Per graph op: true when per-op checkpointing saves its outputs (a cache hit
// in the recompute). Only ops inside checkpointed units (`checkpointed`,
// indexed like UnitPlan::units) can be; all false unless the policy's mode is
// per-op.
std::vector<bool> cached_ops(const Policy& policy, const Graph& graph, const UnitPlan& units,
                             const std::vector<bool>& checkpointed);

}  // namespace shardscope::plan
