// CRC-32C (Castagnoli): reflected polynomial 0x82F63B78, initial value and final
// xor 0xFFFFFFFF, as in iSCSI and ext4; crc32c("123456789") == 0xE3069283.
// Software slicing-by-8 (about 1-2 GB/s per core).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace shardscope::engine::checkpoint {

// `crc` continues a previous value: crc32c(b, nb, crc32c(a, na)) == crc32c(a ++ b).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

std::string crc32c_hex(uint32_t crc);  // exactly 8 lowercase hex digits
// Parses exactly 8 hex digits (either case); false on anything else.
bool parse_crc32c_hex(const std::string& text, uint32_t* out);

}  // namespace shardscope::engine::checkpoint
