// Where segments come from. The allocator's policy never touches memory; a
// Backing hands out segment base addresses: NullBacking for the simulator
// (no memory, fake addresses), HostBacking for the CPU engine (real memory).
// A CUDA backing (cudaMalloc/cudaFree) implements the same interface.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>

#include "alloc/types.h"

namespace shardscope::alloc {

class Backing {
 public:
  virtual ~Backing() = default;
  /// Obtains `bytes` (cudaMalloc); std::nullopt when capacity would be
  /// exceeded or the memory is not there (cudaErrorMemoryAllocation).
  virtual std::optional<Address> reserve(uint64_t bytes) = 0;
  /// Returns a segment obtained from reserve(bytes) (cudaFree).
  virtual void release(Address base, uint64_t bytes) = 0;
  /// Capacity in bytes; 0 = unlimited. Only reported (OutOfMemory's message).
  virtual uint64_t capacity_bytes() const = 0;
  /// Sum of the bytes of the segments held now.
  virtual uint64_t reserved_bytes() const = 0;
  /// Whether reserve() hands out memory the executor uses at those
  /// addresses. Expandable segments need address ranges that grow in place
  /// (PyTorch maps pages with cuMemMap into one reserved range), which only
  /// a backing whose addresses are not used can stand for.
  virtual bool addresses_are_real() const { return true; }
};

/// No memory: addresses come from a counter starting at kBaseAddress, each
/// segment 512-byte aligned and never overlapping another (addresses are not
/// reused). reserve() fails when reserved + bytes would exceed the capacity.
class NullBacking final : public Backing {
 public:
  static constexpr Address kBaseAddress = Address{1} << 40;
  static constexpr uint64_t kAlignment = 512;

  /// capacity_bytes 0 = unlimited.
  explicit NullBacking(uint64_t capacity_bytes = 0) : capacity_(capacity_bytes) {}

  std::optional<Address> reserve(uint64_t bytes) override;
  /// Throws UsageError when more bytes are released than are held.
  void release(Address base, uint64_t bytes) override;
  uint64_t capacity_bytes() const override { return capacity_; }
  uint64_t reserved_bytes() const override { return reserved_; }
  bool addresses_are_real() const override { return false; }

 private:
  uint64_t capacity_;
  uint64_t reserved_ = 0;
  Address next_ = kBaseAddress;
};

/// Host memory from std::aligned_alloc, 512-byte aligned (the allocation is
/// rounded up to a multiple of 512 B, at least 512 B, as aligned_alloc needs;
/// capacity counts the bytes asked for). Frees what is still held on
/// destruction.
class HostBacking final : public Backing {
 public:
  static constexpr uint64_t kAlignment = 512;

  /// capacity_bytes 0 = unlimited (reserve() still fails if the host has no memory).
  explicit HostBacking(uint64_t capacity_bytes = 0) : capacity_(capacity_bytes) {}
  ~HostBacking() override;
  HostBacking(const HostBacking&) = delete;
  HostBacking& operator=(const HostBacking&) = delete;

  std::optional<Address> reserve(uint64_t bytes) override;
  /// Throws UsageError for an address it did not hand out or a size mismatch.
  void release(Address base, uint64_t bytes) override;
  uint64_t capacity_bytes() const override { return capacity_; }
  uint64_t reserved_bytes() const override { return reserved_; }

 private:
  uint64_t capacity_;
  uint64_t reserved_ = 0;
  std::unordered_map<Address, uint64_t> live_;  // base -> bytes asked for
};

}  // namespace shardscope::alloc
