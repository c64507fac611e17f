// Argument checks shared by the CPU ops (internal to engine/cpu). Every failure
// throws with the function and the argument named.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace shardscope::engine::cpu::detail {

inline void require(bool ok, const char* fn, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string(fn) + ": " + what);
}

inline void require_nonneg(const char* fn, const char* name, int64_t value) {
  if (value < 0)
    throw std::invalid_argument(std::string(fn) + ": " + name + " = " + std::to_string(value) +
                                " is negative");
}

// A pointer that must be valid because `count` elements are read or written through it.
inline void require_ptr(const char* fn, const char* name, const void* ptr, int64_t count) {
  if (ptr == nullptr && count > 0)
    throw std::invalid_argument(std::string(fn) + ": " + name + " is null but " +
                                std::to_string(count) + " elements are needed");
}

// An index read from data (token id, label) that must lie in [0, limit).
inline void require_index(const char* fn, const char* what, int64_t value, int64_t index,
                          int64_t limit) {
  if (value < 0 || value >= limit)
    throw std::out_of_range(std::string(fn) + ": " + what + " " + std::to_string(value) +
                            " at index " + std::to_string(index) + " is outside [0, " +
                            std::to_string(limit) + ")");
}

}  // namespace shardscope::engine::cpu::detail
