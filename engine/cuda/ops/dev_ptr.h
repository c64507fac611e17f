// Typed device pointers for the CUDA ops: a device array whose elements are
// stored as f32, bf16 or f16 (plan::DType); every kernel computes in fp32 and
// rounds to nearest even when it stores 16-bit values. Offsets are in
// elements of the pointer's own dtype.
#pragma once

#include <cstddef>
#include <cstdint>

#include "plan/graph.h"

namespace shardscope::engine::cuda {

struct DevPtr {
  void* ptr = nullptr;
  plan::DType dt = plan::DType::f32;
  DevPtr at(int64_t elems) const {
    return {static_cast<char*>(ptr) + elems * plan::dtype_bytes(dt), dt};
  }
};

struct ConstDevPtr {
  const void* ptr = nullptr;
  plan::DType dt = plan::DType::f32;
  ConstDevPtr() = default;
  ConstDevPtr(const void* p, plan::DType d) : ptr(p), dt(d) {}
  ConstDevPtr(DevPtr p) : ptr(p.ptr), dt(p.dt) {}  // NOLINT: implicit by design
  ConstDevPtr at(int64_t elems) const {
    return {static_cast<const char*>(ptr) + elems * plan::dtype_bytes(dt), dt};
  }
};

// Device scratch handed to an op by its caller (the executor owns one per
// stream, outside the caching allocator, sized by the ops' *_workspace_bytes
// functions at start-up). Ops never allocate memory themselves.
struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

}  // namespace shardscope::engine::cuda
