// Errors of the alloc library. Every one derives from alloc::Error, so a caller
// can catch the family; OutOfMemory carries the figures of its message.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "alloc/types.h"

namespace shardscope::alloc {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// The backing refused a segment even after the cache was released.
class OutOfMemory : public Error {
 public:
  struct Info {
    uint64_t requested_bytes = 0;  // what the caller asked for
    uint64_t rounded_bytes = 0;    // block size (= requested in exact mode)
    uint64_t segment_bytes = 0;    // segment the backing refused
    uint64_t allocated_bytes = 0;  // counters at the time of the failure
    uint64_t reserved_bytes = 0;
    uint64_t capacity_bytes = 0;  // the backing's capacity, 0 = unlimited
    StreamId stream = 0;
  };
  explicit OutOfMemory(const Info& info);
  const Info& info() const { return info_; }

 private:
  Info info_;
};

/// A handle that is not live: never issued, or already freed (double free,
/// use after free in the caller's bookkeeping).
class InvalidHandle : public Error {
 public:
  using Error::Error;
};

/// A configuration the library does not implement (expandable_segments).
class UnsupportedConfig : public Error {
 public:
  using Error::Error;
};

/// An API call that breaks a documented precondition (record_stream without
/// an EventSource, releasing an address a backing never handed out, ...).
class UsageError : public Error {
 public:
  using Error::Error;
};

/// "13631488 B (13.00 MiB)": exact bytes, then a readable size.
std::string format_bytes(uint64_t bytes);

}  // namespace shardscope::alloc
