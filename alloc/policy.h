// PyTorch CUDACachingAllocator's size policy (c10/cuda/CUDACachingAllocator.cpp:
// round_size, get_pool, get_allocation_size, should_split) with its default
// configuration (no roundup_power2_divisions, max_split_size unlimited) and
// with expandable_segments. Pure functions, so the planner can use them too.
#pragma once

#include <cstdint>

namespace shardscope::alloc {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;
/// Every block is a multiple of this, and at least this big.
inline constexpr uint64_t kMinBlockSize = 512;
/// Largest rounded request served by the small pool.
inline constexpr uint64_t kSmallSize = 1 * kMiB;
/// Segment size of the small pool.
inline constexpr uint64_t kSmallBuffer = 2 * kMiB;
/// Segment size for large-pool requests under kMinLargeAlloc.
inline constexpr uint64_t kLargeBuffer = 20 * kMiB;
/// Large-pool requests from this size on get a segment of their own size,
/// rounded up to kRoundLarge.
inline constexpr uint64_t kMinLargeAlloc = 10 * kMiB;
inline constexpr uint64_t kRoundLarge = 2 * kMiB;
/// Requests of this size or more fail at once (PyTorch: "more than 1EB").
inline constexpr uint64_t kMaxRequest = uint64_t{1} << 60;

/// Block size of a request: a multiple of 512 B, at least 512 B (0 -> 512).
constexpr uint64_t round_size(uint64_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((bytes + kMinBlockSize - 1) / kMinBlockSize);
}

/// Whether a rounded size is served by the small pool (<= 1 MiB).
constexpr bool is_small_size(uint64_t rounded) {
  return rounded <= kSmallSize;
}

/// Size of the segment obtained from the backing when no cached block fits.
constexpr uint64_t allocation_size(uint64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((rounded + kRoundLarge - 1) / kRoundLarge);
}

/// Whether a free block of `block_bytes` serving `rounded` bytes is split,
/// the remainder going back to the pool: remainder >= 512 B in the small
/// pool, > 1 MiB in the large pool.
/// With expandable segments both pools split at >= 512 B.
constexpr bool should_split(bool small_pool, uint64_t block_bytes, uint64_t rounded,
                            bool expandable = false) {
  const uint64_t remaining = block_bytes - rounded;
  return small_pool || expandable ? remaining >= kMinBlockSize : remaining > kSmallSize;
}

/// Expandable segments grow by pages of this size (ExpandableSegment's
/// segment_size: kSmallBuffer in the small pool, kLargeBuffer in the large).
constexpr uint64_t expandable_page_size(bool small_pool) {
  return small_pool ? kSmallBuffer : kLargeBuffer;
}

}  // namespace shardscope::alloc
