#include "engine/exec/graph_operands.h"

#include <cmath>
#include <initializer_list>

#include "engine/exec/schedule_info.h"

namespace shardscope::engine::exec {

using plan::BufferRole;

namespace {
bool is(BufferRole role, std::initializer_list<BufferRole> roles) {
  for (BufferRole r : roles)
    if (role == r) return true;
  return false;
}
}  // namespace

GraphOperands::GraphOperands(const plan::Graph& graph, const plan::UnitPlan& units,
                             const std::vector<UnitLayout>& layouts, const plan::Schedule& schedule,
                             const plan::ScheduleOp& sop)
    : g_(graph),
      up_(units),
      layouts_(layouts),
      s_(schedule),
      sop_(sop),
      op_(graph.ops[static_cast<size_t>(sop.graph_op)]) {}

template <typename Pred>
int GraphOperands::find(Pred pred) const {
  for (size_t i = 0; i < sop_.buffers.size(); ++i)
    if (pred(s_.buffers[static_cast<size_t>(sop_.buffers[i])])) return static_cast<int>(i);
  return -1;
}

Operand GraphOperands::operand(int slot, int64_t offset, int64_t n) const {
  const plan::Buffer& b = s_.buffers[static_cast<size_t>(sop_.buffers[static_cast<size_t>(slot)])];
  return Operand{slot, b.dtype, offset, n};
}

int64_t GraphOperands::numel(int t) const {
  return g_.tensors[static_cast<size_t>(t)].numel_at(s_.workload);
}

int64_t GraphOperands::last_dim(int t) const {
  return g_.tensors[static_cast<size_t>(t)].shape.back().eval(s_.workload);
}

const std::string& GraphOperands::tensor_name(int t) const {
  return g_.tensors[static_cast<size_t>(t)].name;
}

ExecError GraphOperands::missing(const std::string& what) const {
  return ExecError("op '" + op_.name + "' (" + plan::op_kind_name(sop_.kind) + ", micro-step " +
                   std::to_string(sop_.micro_step) + "): no buffer for " + what);
}

Operand GraphOperands::value(int t, bool output) const {
  if (numel(t) == 0) return Operand{-1, g_.tensors[static_cast<size_t>(t)].dtype, 0, 0};
  const int i = find([&](const plan::Buffer& b) {
    return b.tensor == t &&
           (output
                ? is(b.role, {BufferRole::activation, BufferRole::recomputed})
                : is(b.role, {BufferRole::activation, BufferRole::recomputed, BufferRole::input}));
  });
  if (i < 0) throw missing("tensor '" + tensor_name(t) + "'");
  return operand(i, 0, numel(t));
}

int GraphOperands::ids(int t) const {
  const int i = find([&](const plan::Buffer& b) {
    return b.tensor == t && is(b.role, {BufferRole::input, BufferRole::activation});
  });
  if (i < 0) throw missing("input '" + tensor_name(t) + "'");
  return i;
}

std::optional<Operand> GraphOperands::grad(int t) const {
  if (numel(t) == 0) return Operand{-1, g_.tensors[static_cast<size_t>(t)].dtype, 0, 0};
  const int i = find([&](const plan::Buffer& b) {
    return b.tensor == t && b.role == BufferRole::activation_grad;
  });
  if (i < 0) return std::nullopt;
  return operand(i, 0, numel(t));
}

Operand GraphOperands::param(int p, bool gradient) const {
  const int u = up_.param_unit[static_cast<size_t>(p)];
  if (gradient) {
    // fsdp2: the parameter's own unsharded gradient (plan::Buffer::param).
    const int own = find([&](const plan::Buffer& b) {
      return b.role == BufferRole::unsharded_grad && b.param == p;
    });
    if (own >= 0) return operand(own, 0, g_.params[static_cast<size_t>(p)].numel());
  }
  const int i = find([&](const plan::Buffer& b) {
    return b.unit == u &&
           (gradient
                ? b.param < 0 && is(b.role, {BufferRole::unsharded_grad, BufferRole::grad_shard})
                : is(b.role,
                     {BufferRole::unsharded, BufferRole::param_shard, BufferRole::h2d_shard}));
  });
  const plan::Param& param = g_.params[static_cast<size_t>(p)];
  if (i < 0) throw missing((gradient ? "the gradient of " : "") + param.name);
  const ParamPlace* pp = layouts_[static_cast<size_t>(u)].find(p);
  return operand(i, pp->unsharded, pp->numel);
}

Operand GraphOperands::kernel_saved(int64_t n) const {
  const int i = find([&](const plan::Buffer& b) {
    return b.role == BufferRole::kernel_saved && b.graph_op == sop_.graph_op;
  });
  const std::string what = "the kernel's saved tensors (" + std::to_string(n) + " elements)";
  if (i < 0) throw missing(what);
  const plan::Buffer& b = s_.buffers[static_cast<size_t>(sop_.buffers[static_cast<size_t>(i)])];
  if (b.bytes / plan::dtype_bytes(b.dtype) < n) throw missing(what);
  return operand(i, 0, n);
}

int64_t GraphOperands::attr_i(const std::optional<int64_t>& value, const char* key) const {
  if (!value) throw missing(std::string("attribute ") + key);
  return *value;
}

cpu::AttentionShape attention_shape(const GraphOperands& o, const plan::Workload& w,
                                    const char* engine) {
  const plan::Op& op = o.op();
  // Both engines run windows and softcap; neither scales RoPE frequencies.
  if (op.attrs.rope_scaling)
    throw ExecError("op '" + op.name + "': the " + engine + " engine has no RoPE scaling");
  cpu::AttentionShape s;
  s.batch = w.batch;
  s.seq = w.seq;
  s.n_head = o.attr_i(op.attrs.n_head, "n_head");
  s.n_kv_head = o.attr_i(op.attrs.n_kv_head, "n_kv_head");
  s.head_dim = o.attr_i(op.attrs.head_dim, "head_dim");
  s.scale = op.attrs.scale.value_or(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  s.rope = op.attrs.rope.value_or(false);
  s.rope_theta = op.attrs.rope_theta.value_or(10000.0);
  s.softcap = op.attrs.softcap.value_or(0.0);
  s.sliding_window = op.attrs.sliding_window.value_or(0);
  s.rotary_dim = op.attrs.rotary_dim.value_or(0);  // 0: the whole head
  return s;
}

}  // namespace shardscope::engine::exec
