// What per-op selective activation checkpointing saves inside a checkpointed
// block: the policy's value (plan/policy.h holds one). Its semantics, reader
// and presets are plan/op_checkpointing.h; this header has no dependencies,
// so that policy.h does not include the code that uses policies.
#pragma once

#include <string>
#include <vector>

namespace shardscope::plan {

struct OpCheckpointing {
  std::string preset;                 // "" or "torchtitan" (then the two below are its)
  std::vector<std::string> save_ops;  // as written (unique); the preset's when preset is set
  bool save_every_other_matmul = false;
};

}  // namespace shardscope::plan
