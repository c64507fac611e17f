#include "engine/cuda/comm/collective_args.h"

#include <string>

namespace shardscope::engine::cuda {

namespace {

std::string prefix(const char* kind, const char* collective, int rank) {
  return std::string(kind) + " " + collective + ": rank " + std::to_string(rank);
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

}  // namespace

void validate_groups(const std::vector<comm::Group>& groups, int world_size, int rank,
                     const char* kind) {
  const std::string where = prefix(kind, "communicator", rank);
  if (world_size < 1) {
    throw comm::CommError(where + ": world size " + std::to_string(world_size) + " is < 1");
  }
  if (rank < 0 || rank >= world_size) {
    throw comm::CommError(where + ": rank is outside the world of " + std::to_string(world_size));
  }
  for (const comm::Group& group : groups) {
    if (group.ranks.empty()) {
      throw comm::CommError(where + ": group '" + group.name + "' has no ranks");
    }
    for (size_t i = 0; i < group.ranks.size(); ++i) {
      const int member = group.ranks[i];
      if (member < 0 || member >= world_size) {
        throw comm::CommError(where + ": group '" + group.name + "' names rank " +
                              std::to_string(member) + ", outside the world of " +
                              std::to_string(world_size));
      }
      if (i > 0 && member <= group.ranks[i - 1]) {
        throw comm::CommError(where + ": group '" + group.name +
                              "' ranks are not ascending and distinct (" + rank_list(group.ranks) +
                              ")");
      }
    }
  }
}

int member_index(const std::vector<comm::Group>& groups, int group, int rank, const char* kind,
                 const char* collective) {
  if (group < 0 || static_cast<size_t>(group) >= groups.size()) {
    throw comm::CommError(prefix(kind, collective, rank) + ": group index " +
                          std::to_string(group) + " is out of range (" +
                          std::to_string(groups.size()) + " groups)");
  }
  const comm::Group& g = groups[static_cast<size_t>(group)];
  for (size_t i = 0; i < g.ranks.size(); ++i) {
    if (g.ranks[i] == rank) return static_cast<int>(i);
  }
  throw comm::CommError(prefix(kind, collective, rank) + ": not a member of group '" + g.name +
                        "' (ranks " + rank_list(g.ranks) + ")");
}

int root_index(const std::vector<comm::Group>& groups, int group, int root, int rank,
               const char* kind, const char* collective) {
  member_index(groups, group, rank, kind, collective);
  const comm::Group& g = groups[static_cast<size_t>(group)];
  for (size_t i = 0; i < g.ranks.size(); ++i) {
    if (g.ranks[i] == root) return static_cast<int>(i);
  }
  throw comm::CommError(prefix(kind, collective, rank) + ": root " + std::to_string(root) +
                        " is not a member of group '" + g.name + "' (ranks " + rank_list(g.ranks) +
                        ")");
}

void require_collective_dtype(plan::DType dtype, int rank, const char* kind,
                              const char* collective) {
  if (dtype == plan::DType::f32 || dtype == plan::DType::bf16 || dtype == plan::DType::f16) return;
  throw comm::CommError(prefix(kind, collective, rank) + ": dtype " + plan::dtype_name(dtype) +
                        " is not supported (f32, bf16, f16)");
}

uint64_t collective_bytes(size_t count, plan::DType dtype, int rank, const char* kind,
                          const char* collective) {
  const auto element = static_cast<uint64_t>(plan::dtype_bytes(dtype));
  if (count > UINT64_MAX / element) {
    throw comm::CommError(prefix(kind, collective, rank) + ": count " + std::to_string(count) +
                          " overflows a byte count");
  }
  return static_cast<uint64_t>(count) * element;
}

}  // namespace shardscope::engine::cuda
