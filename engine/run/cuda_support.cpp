#include "engine/run/cuda_support.h"

#include <stdexcept>
#include <string>

namespace shardscope::engine::run {

namespace {

[[noreturn]] void refuse(const plan::Op& op, const std::string& what) {
  throw std::invalid_argument("op '" + op.name + "' (" + plan::op_type_name(op.type) + "): " +
                              what + " is not implemented by the CUDA engine (use --backend cpu)");
}

}  // namespace

void check_cuda_supports(const plan::Graph& graph) {
  for (const plan::Op& op : graph.ops) {
    switch (op.type) {
      case plan::OpType::embedding:
        if (op.attrs.position_offset) refuse(op, "attribute position_offset (OPT positions)");
        if (op.attrs.padding_idx) refuse(op, "attribute padding_idx");
        break;
      case plan::OpType::linear:
      case plan::OpType::layernorm:
      case plan::OpType::rmsnorm:
      case plan::OpType::gelu:
      case plan::OpType::relu:
      case plan::OpType::residual:
      case plan::OpType::cross_entropy:
        break;
      case plan::OpType::attention:
        if (op.attrs.sliding_window) refuse(op, "attribute sliding_window");
        if (op.attrs.rope_scaling) refuse(op, "attribute rope_scaling");
        if (op.attrs.rotary_dim) refuse(op, "attribute rotary_dim (partial rotary)");
        if (op.attrs.qkv_per_head) refuse(op, "attribute qkv_per_head (GPT-NeoX qkv layout)");
        break;
      case plan::OpType::swiglu:
        if (op.attrs.activation.value_or("silu") != "silu")
          refuse(op, "activation '" + *op.attrs.activation + "' (SiLU only)");
        break;
      case plan::OpType::rope:
        refuse(op, "a standalone rope op");
    }
  }
}

}  // namespace shardscope::engine::run
