#include "engine/exec/exec_hf_ops.h"

#include <cmath>
#include <optional>
#include <string>

#include "engine/cpu/optim.h"
#include "engine/exec/f32_view.h"
#include "engine/exec/operand_views.h"

namespace shardscope::engine::exec {

namespace {}  // namespace

void run_gated(const GraphOperands& o, const std::vector<void*>& ptrs, cpu::GateActivation act) {
  const plan::Op& op = o.op();
  const bool packed = op.attrs.packed.value_or(false);
  const int y_t = op.outputs[0];
  const int64_t width = o.last_dim(y_t), rows = o.numel(y_t) / width;
  // Packed: one [rows, 2F] input, gate = columns [0, F), up = [F, 2F).
  if (packed ? op.inputs.size() != 1 || o.last_dim(op.inputs[0]) != 2 * width
             : op.inputs.size() != 2)
    throw ExecError("op '" + op.name + "': a packed gated MLP reads one [.., 2F] input, " +
                    "an unpacked one gate and up");
  std::vector<F32View> in;
  for (int t : op.inputs) in.push_back(view_of(ptrs, o.value(t, false), true, false));
  const float* gate = in[0].data();
  const float* up = packed ? gate + width : in[1].data();
  const int64_t stride = packed ? 2 * width : rows * width;
  // Unpacked tensors are one dense row of rows * width elements.
  const int64_t r = packed ? rows : 1, w = packed ? width : rows * width;
  if (!o.backward()) {
    F32View y = view_of(ptrs, o.value(y_t, true), false, true);
    cpu::gated_forward(gate, up, y.data(), r, w, stride, act);
    return;
  }
  F32View dy = grad_of(o, ptrs, y_t);
  std::vector<F32View> gin;
  for (int t : op.inputs) gin.push_back(grad_of(o, ptrs, t));
  float* dgate = gin[0].data();
  float* dup = packed ? dgate + width : gin[1].data();
  cpu::gated_backward(gate, up, dy.data(), dgate, dup, r, w, stride, act);
}

void run_scale_softcap(const GraphOperands& o, const std::vector<void*>& ptrs) {
  const plan::Op& op = o.op();
  const int x_t = op.inputs.at(0), y_t = op.outputs.at(0);
  const int64_t n = o.numel(x_t);
  if (op.type == plan::OpType::scale) {
    if (!op.attrs.scale) throw o.missing("attribute scale");
    // torch.tensor(c, dtype=x.dtype): the constant itself is rounded to the
    // activation dtype (x's in forward; its gradient's, the same, in backward).
    auto rounded = [&](plan::DType dt) {
      const auto s = static_cast<float>(*op.attrs.scale);
      if (dt == plan::DType::bf16) return cpu::round_to_bf16(s);
      if (dt == plan::DType::f16) return cpu::round_to_fp16(s);
      return s;
    };
    if (!o.backward()) {
      const Operand xo = o.value(x_t, false);
      F32View x = view_of(ptrs, xo, true, false);
      F32View y = view_of(ptrs, o.value(y_t, true), false, true);
      cpu::scale_forward(x.data(), y.data(), n, rounded(xo.dtype));
    } else {
      const std::optional<Operand> dxo = o.grad(x_t);
      if (!dxo) throw o.missing("the gradient of " + o.tensor_name(x_t));
      F32View dy = grad_of(o, ptrs, y_t);
      F32View dx = view_of(ptrs, *dxo, true, true);
      cpu::scale_backward(dy.data(), dx.data(), n, rounded(dxo->dtype));
    }
    return;
  }
  if (!op.attrs.softcap) throw o.missing("attribute softcap");
  const float cap = static_cast<float>(*op.attrs.softcap);
  if (!o.backward()) {
    F32View x = view_of(ptrs, o.value(x_t, false), true, false);
    F32View y = view_of(ptrs, o.value(y_t, true), false, true);
    F32View th = view_of(ptrs, o.value(op.outputs.at(1), true), false, true);
    cpu::softcap_forward(x.data(), y.data(), th.data(), n, cap);
  } else {
    F32View th = view_of(ptrs, o.value(op.outputs.at(1), false), true, false);
    F32View dy = grad_of(o, ptrs, y_t);
    F32View dx = grad_of(o, ptrs, x_t);
    cpu::softcap_backward(th.data(), dy.data(), dx.data(), n);
  }
}

}  // namespace shardscope::engine::exec
