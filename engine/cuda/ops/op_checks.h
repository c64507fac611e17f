// Argument checks of the CUDA op launchers (internal to engine/cuda/ops).
// They run on the host before any CUDA call (no runtime, no driver needed) and
// throw std::invalid_argument naming the function and the argument.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "engine/cuda/ops/dev_ptr.h"
#include "engine/cuda/ops/element.cuh"

namespace shardscope::engine::cuda::detail {

[[noreturn]] inline void fail(const char* fn, const std::string& what) {
  throw std::invalid_argument(std::string(fn) + ": " + what);
}

inline void require(bool ok, const char* fn, const std::string& what) {
  if (!ok) fail(fn, what);
}

inline void require_nonneg(const char* fn, const char* name, int64_t value) {
  if (value < 0) fail(fn, std::string(name) + " = " + std::to_string(value) + " is negative");
}

// A pointer through which `count` elements are read or written.
inline void require_ptr(const char* fn, const char* name, const void* ptr, int64_t count) {
  if (ptr == nullptr && count > 0)
    fail(fn, std::string(name) + " is null but " + std::to_string(count) + " elements are needed");
}

// A float operand (f32, bf16 or f16) of `count` elements; returns its dtype.
inline ElemType require_operand(const char* fn, const char* name, ConstDevPtr p, int64_t count) {
  require_ptr(fn, name, p.ptr, count);
  return elem_type(p.dt, (std::string(fn) + ": " + name).c_str());
}

inline void require_workspace(const char* fn, const Workspace& ws, size_t needed) {
  if (needed == 0) return;
  if (ws.ptr == nullptr || ws.bytes < needed)
    fail(fn, "workspace of " + std::to_string(ws.bytes) + " bytes" +
                 (ws.ptr == nullptr ? " (null)" : "") + " is smaller than the " +
                 std::to_string(needed) + " bytes this call needs (see *_workspace_bytes)");
}

// True when every pointer is aligned to `bytes` (null pointers count as aligned).
inline bool aligned_to(size_t bytes, std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % bytes != 0) return false;
  return true;
}

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Grid size for a grid-stride loop over `work` items with `threads` per block.
inline unsigned grid_for(int64_t work, int threads) {
  constexpr int64_t kMaxBlocks = 16384;  // enough to fill any GPU; the loop covers the rest
  const int64_t blocks = ceil_div(work, threads);
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

}  // namespace shardscope::engine::cuda::detail
