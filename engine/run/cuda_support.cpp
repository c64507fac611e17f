#include "engine/run/cuda_support.h"

#include <stdexcept>
#include <string>

#include "engine/run/aten_support.h"

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
      case plan::OpType::rmsnorm: {
        if (op.attrs.weight_offset) refuse(op, "attribute weight_offset");
        const plan::Tensor& x = graph.tensors[static_cast<size_t>(op.inputs.at(0))];
        if (op.attrs.dim &&
            (x.shape.empty() || x.shape.back() != plan::Poly::constant(*op.attrs.dim)))
          refuse(op, "normalizing groups of dim " + std::to_string(*op.attrs.dim) +
                         " narrower than the last dim (per-head RMSNorm)");
        break;
      }
      case plan::OpType::embedding:
        if (op.attrs.position_offset) refuse(op, "attribute position_offset (OPT positions)");
        if (op.attrs.padding_idx) refuse(op, "attribute padding_idx");
        break;
      case plan::OpType::linear:
      case plan::OpType::layernorm:
      case plan::OpType::gelu:
      case plan::OpType::relu:
      case plan::OpType::residual:
      case plan::OpType::cross_entropy:
        break;
      case plan::OpType::attention:
        // Windows, softcap, partial rotary, the packed and per-head qkv
        // layouts and repeated k/v run as on the CPU engine
        // (engine/cuda/exec/cuda_graph_ops.cpp). RoPE scaling has no CPU twin.
        if (op.attrs.rope_scaling)
          refuse(op, "attribute rope_scaling (the CPU engine has none either)");
        break;
      case plan::OpType::swiglu:
        if (op.attrs.activation.value_or("silu") != "silu")
          refuse(op, "activation '" + *op.attrs.activation + "' (SiLU only)");
        if (op.attrs.packed) refuse(op, "attribute packed");
        break;
      case plan::OpType::scale:
        refuse(op, "the scale op");
      case plan::OpType::softcap:
        refuse(op, "the softcap op");
      case plan::OpType::rope:
        refuse(op, "a standalone rope op");
      case plan::OpType::moe_router:
      case plan::OpType::moe_dispatch:
      case plan::OpType::moe_combine:
      case plan::OpType::sigmoid_gate:
        refuse(op, "mixture-of-experts routing");
      case plan::OpType::aten:  // exported graphs: engine/run/aten_support.h
        check_engine_runs_aten(graph, "CUDA");
        break;
    }
  }
}

void check_cuda_supports(const plan::Policy& policy) {
  for (size_t i = 0; i < policy.overrides.size(); ++i) {
    const auto& mp = policy.overrides[i].mixed_precision;
    if (mp && (mp->param_dtype != policy.mixed_precision.param_dtype ||
               mp->reduce_dtype != policy.mixed_precision.reduce_dtype))
      throw std::invalid_argument(
          "policy overrides[" + std::to_string(i) +
          "].mixed_precision: per-unit dtypes (ops reading another unit's dtype) are not "
          "implemented by the CUDA engine (use --backend cpu)");
  }
}

}  // namespace shardscope::engine::run
