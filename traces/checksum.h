// 64-bit checksum of the binary trace sections: XXH64 (seed 0), written out
// from the published algorithm. Several GB/s, so it costs little next to the
// read itself.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardscope::traces {

uint64_t checksum64(const void* data, size_t size);

}  // namespace shardscope::traces
