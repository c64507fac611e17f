// Argument checks shared by the device communicators. Host-only and free of
// CUDA calls, so they run (and are tested) on machines without a device.
// Every failure is a comm::CommError whose message starts with
// "<kind> <collective>: rank R" (kind: "nccl" or "emulated").
#pragma once

#include <cstdint>
#include <vector>

#include "engine/comm/communicator.h"
#include "plan/graph.h"

namespace shardscope::engine::cuda {

// Construction: 0 <= rank < world_size, and every group non-empty, its ranks
// ascending, distinct and inside the world; the message names the group.
void validate_groups(const std::vector<comm::Group>& groups, int world_size, int rank,
                     const char* kind);

// Index of `rank` in groups[group] (its rank index in the group). Throws when
// `group` is not an index of `groups` or the rank is not a member.
int member_index(const std::vector<comm::Group>& groups, int group, int rank, const char* kind,
                 const char* collective);

// Index of global rank `root` in groups[group]; throws when it is not a member.
int root_index(const std::vector<comm::Group>& groups, int group, int root, int rank,
               const char* kind, const char* collective);

// Collectives move f32, bf16 or f16; anything else throws naming the dtype.
void require_collective_dtype(plan::DType dtype, int rank, const char* kind,
                              const char* collective);

// count * dtype_bytes(dtype), throwing on overflow of 64 bits.
uint64_t collective_bytes(size_t count, plan::DType dtype, int rank, const char* kind,
                          const char* collective);

}  // namespace shardscope::engine::cuda
