#include <stdexcept>
#include <string>

#include "engine/cuda/ops/element.cuh"

namespace shardscope::engine::cuda {

ElemType elem_type(plan::DType dt, const char* what) {
  switch (dt) {
    case plan::DType::f32:
      return ElemType::f32;
    case plan::DType::bf16:
      return ElemType::bf16;
    case plan::DType::f16:
      return ElemType::f16;
    default:
      throw std::invalid_argument(std::string(what) + ": dtype " + plan::dtype_name(dt) +
                                  " is not a float type the CUDA ops store (f32, bf16, f16)");
  }
}

}  // namespace shardscope::engine::cuda
