#include "alloc/errors.h"

#include <cstdio>

#include "alloc/policy.h"

namespace shardscope::alloc {

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%llu B (%.2f %s)", static_cast<unsigned long long>(bytes),
                value, kUnits[unit]);
  return buffer;
}

namespace {

std::string oom_message(const OutOfMemory::Info& info) {
  if (info.requested_bytes >= kMaxRequest) {
    // Refused by size alone, before any segment was sought: capacity and
    // counters do not enter into it (they may well be larger).
    return "out of memory: tried to allocate " + format_bytes(info.requested_bytes) +
           " on stream " + std::to_string(info.stream) +
           ", at or above the largest request the caching allocator serves, " +
           format_bytes(kMaxRequest) + " (PyTorch refuses \"more than 1EB\" whatever the " +
           "capacity); allocated " + format_bytes(info.allocated_bytes) + ", reserved " +
           format_bytes(info.reserved_bytes);
  }
  std::string message = "out of memory: tried to allocate " + format_bytes(info.requested_bytes) +
                        " on stream " + std::to_string(info.stream) + " (block " +
                        format_bytes(info.rounded_bytes) + ", new segment " +
                        format_bytes(info.segment_bytes) + "); allocated " +
                        format_bytes(info.allocated_bytes) + ", reserved " +
                        format_bytes(info.reserved_bytes) + ", capacity ";
  message += info.capacity_bytes == 0 ? std::string("unlimited (the backing refused)")
                                      : format_bytes(info.capacity_bytes);
  return message;
}

}  // namespace

OutOfMemory::OutOfMemory(const Info& info) : Error(oom_message(info)), info_(info) {}

}  // namespace shardscope::alloc
