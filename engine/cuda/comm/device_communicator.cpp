#include "engine/cuda/comm/device_communicator.h"

namespace shardscope::engine::cuda {

const char* communicator_kind_name(CommunicatorKind kind) {
  switch (kind) {
    case CommunicatorKind::nccl:
      return "nccl";
    case CommunicatorKind::emulated:
      return "emulated";
    case CommunicatorKind::none:
      return "none";
  }
  return "?";
}

}  // namespace shardscope::engine::cuda
