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
      // Per-head RMSNorm (dim), (offset + w) norms, OPT's position_offset and
      // padding_idx, the scale and softcap ops: engine/cuda/ops (norm.cu,
      // embedding.cu, gated.cu).
      case plan::OpType::rmsnorm:
      case plan::OpType::embedding:
      case plan::OpType::scale:
      case plan::OpType::softcap:
      case plan::OpType::linear:
      case plan::OpType::layernorm:
      case plan::OpType::gelu:
      case plan::OpType::relu:
      case plan::OpType::residual:
      case plan::OpType::cross_entropy:
      case plan::OpType::moe_router:  // forced and top-k routing
                                      // (engine/cuda/exec/cuda_moe_ops.cpp)
      case plan::OpType::moe_dispatch:
      case plan::OpType::moe_combine:
      case plan::OpType::sigmoid_gate:
        break;
      case plan::OpType::attention:
        // Windows, softcap, partial rotary, the packed and per-head qkv
        // layouts and repeated k/v run as on the CPU engine
        // (engine/cuda/exec/cuda_graph_ops.cpp). RoPE scaling has no CPU twin.
        if (op.attrs.rope_scaling)
          refuse(op, "attribute rope_scaling (the CPU engine has none either)");
        break;
      case plan::OpType::swiglu: {  // packed gate|up too (gated.cu)
        const std::string act = op.attrs.activation.value_or("silu");
        if (act != "silu" && act != "gelu" && act != "gelu_tanh")
          refuse(op, "activation '" + act + "' (silu, gelu, gelu_tanh)");
        break;
      }
      case plan::OpType::rope:
        refuse(op, "a standalone rope op");
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
