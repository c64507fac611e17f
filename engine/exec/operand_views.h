// fp32 views of a graph op's operands for the CPU executor's op files
// (exec_hf_ops.cpp, exec_moe_ops.cpp): an operand's region of its buffer
// through F32View (16-bit storage converted on entry, rounded back on exit
// for written views).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/exec/f32_view.h"
#include "engine/exec/graph_operands.h"

namespace shardscope::engine::exec {

inline F32View view_of(const std::vector<void*>& ptrs, const Operand& x, bool read, bool write) {
  return F32View(operand_base(ptrs, x), x.dtype, x.offset, x.numel, read, write);
}

// The gradient of `tensor` (read and accumulated into); ExecError naming it
// when the plan gives the op none.
inline F32View grad_of(const GraphOperands& o, const std::vector<void*>& ptrs, int tensor) {
  const std::optional<Operand> x = o.grad(tensor);
  if (!x) throw o.missing("the gradient of " + o.tensor_name(tensor));
  return view_of(ptrs, *x, true, true);
}

}  // namespace shardscope::engine::exec
