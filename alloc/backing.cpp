#include "alloc/backing.h"

#include <cstdlib>
#include <string>

#include "alloc/errors.h"

namespace shardscope::alloc {

namespace {

uint64_t round_up(uint64_t bytes, uint64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

// reserved + bytes > capacity, without overflow; capacity 0 = unlimited.
bool exceeds(uint64_t reserved, uint64_t bytes, uint64_t capacity) {
  return capacity != 0 && (bytes > capacity || reserved > capacity - bytes);
}

}  // namespace

std::optional<Address> NullBacking::reserve(uint64_t bytes) {
  if (exceeds(reserved_, bytes, capacity_)) return std::nullopt;
  // A zero-byte segment still gets an address of its own.
  const uint64_t span = bytes == 0 ? kAlignment : round_up(bytes, kAlignment);
  const Address base = next_;
  next_ += span;
  reserved_ += bytes;
  return base;
}

void NullBacking::release(Address base, uint64_t bytes) {
  if (bytes > reserved_ || base < kBaseAddress || base >= next_) {
    throw UsageError("NullBacking::release: segment at " + std::to_string(base) + " of " +
                     std::to_string(bytes) + " bytes was not reserved here");
  }
  reserved_ -= bytes;
}

HostBacking::~HostBacking() {
  for (const auto& [base, bytes] : live_) std::free(reinterpret_cast<void*>(base));
}

std::optional<Address> HostBacking::reserve(uint64_t bytes) {
  if (exceeds(reserved_, bytes, capacity_)) return std::nullopt;
  const uint64_t span = bytes == 0 ? kAlignment : round_up(bytes, kAlignment);
  if (span < bytes) return std::nullopt;  // overflow
  void* memory = std::aligned_alloc(kAlignment, span);
  if (memory == nullptr) return std::nullopt;
  const Address base = reinterpret_cast<Address>(memory);
  live_.emplace(base, bytes);
  reserved_ += bytes;
  return base;
}

void HostBacking::release(Address base, uint64_t bytes) {
  const auto it = live_.find(base);
  if (it == live_.end() || it->second != bytes) {
    throw UsageError("HostBacking::release: segment at " + std::to_string(base) + " of " +
                     std::to_string(bytes) + " bytes was not reserved here");
  }
  live_.erase(it);
  reserved_ -= bytes;
  std::free(reinterpret_cast<void*>(base));
}

}  // namespace shardscope::alloc
