// Where the operands of a graph op (forward, backward, recompute) live among
// the schedule op's buffers (plan/'s compute_op): parameters in their unit's
// unsharded buffer (or the shard itself for in-place DDP), activation tensors
// by tensor id ("act", "rc", "input"), gradients of tensors ("grad") and of
// parameters ("unsharded_grad", or the gradient shard for in-place DDP).
// Shared by the CPU and CUDA executors: each turns an Operand into its own
// view (an fp32 view of host memory, a typed device pointer).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/cpu/ops.h"
#include "engine/exec/exec_error.h"
#include "engine/exec/layout.h"
#include "plan/graph.h"
#include "plan/policy.h"
#include "plan/schedule.h"
#include "plan/units.h"

namespace shardscope::engine::exec {

// A region of one of the op's buffers.
struct Operand {
  int slot = -1;  // index into ScheduleOp::buffers; -1: an empty tensor (no buffer)
  plan::DType dtype = plan::DType::f32;
  int64_t offset = 0;  // first element (in elements of dtype)
  int64_t numel = 0;
};

class GraphOperands {
 public:
  // References must outlive this object. `sop` is a forward, backward or
  // recompute op of `schedule`.
  GraphOperands(const plan::Graph& graph, const plan::UnitPlan& units,
                const std::vector<UnitLayout>& layouts, const plan::Schedule& schedule,
                const plan::ScheduleOp& sop);

  const plan::Op& op() const { return op_; }
  bool backward() const { return sop_.kind == plan::OpKind::backward; }
  int64_t numel(int tensor) const;     // at the schedule's workload
  int64_t last_dim(int tensor) const;  // size of the last dimension
  const std::string& tensor_name(int tensor) const;
  // ExecError "op 'NAME' (KIND, micro-step M): no buffer for WHAT".
  ExecError missing(const std::string& what) const;

  // Tensor t's value: an input ("act", "rc" or "input") or a new output ("act", "rc").
  // A tensor of no elements (an expert no token reaches) has no buffer: its
  // operand is empty (slot -1), as is its gradient's.
  Operand value(int tensor, bool output) const;
  // Slot of an integer input (token ids, labels).
  int ids(int tensor) const;
  // Gradient of tensor t (accumulated into); nullopt when the plan has none.
  std::optional<Operand> grad(int tensor) const;
  // Parameter p (or its gradient) inside its unit's unsharded buffer.
  Operand param(int param, bool gradient) const;
  // The first `numel` elements of the op's kernel_saved buffer (what its
  // kernel keeps for backward that is no graph tensor: plan/sdpa.h);
  // missing("...") when the plan has none or it is smaller.
  Operand kernel_saved(int64_t numel) const;

  // A required integer attribute of the op, e.g. attr_i(op().attrs.classes, "classes");
  // missing("attribute KEY") when absent.
  int64_t attr_i(const std::optional<int64_t>& value, const char* key) const;

 private:
  template <typename Pred>
  int find(Pred pred) const;
  Operand operand(int slot, int64_t offset, int64_t numel) const;

  const plan::Graph& g_;
  const plan::UnitPlan& up_;
  const std::vector<UnitLayout>& layouts_;
  const plan::Schedule& s_;
  const plan::ScheduleOp& sop_;
  const plan::Op& op_;
};

// The address an operand starts at (its buffer's), or null for an empty one.
inline void* operand_base(const std::vector<void*>& ptrs, const Operand& x) {
  return x.slot < 0 ? nullptr : ptrs[static_cast<size_t>(x.slot)];
}

// Attention geometry of an attention op at the schedule's workload (heads,
// head_dim, scale, RoPE, soft-capping, sliding window). Throws ExecError naming
// `engine` for attributes it does not implement: RoPE scaling (every engine).
cpu::AttentionShape attention_shape(const GraphOperands& operands, const plan::Workload& workload,
                                    const char* engine);

}  // namespace shardscope::engine::exec
