// The parts of the safetensors layout shared by its writer and reader.
//
// File: u64 little-endian N | N bytes of JSON header, space-padded to a multiple of
// 8 | data section. Header: {"<name>": {"dtype": "F32", "shape": [...],
// "data_offsets": [b, e]}, ..., "__metadata__": {string: string}}; [b, e) are byte
// offsets in the data section. shardscope writes tensors in sorted-name order,
// contiguous from 0, and two metadata keys:
//   shardscope.data_crc32c    CRC-32C of the whole data section
//   shardscope.header_crc32c  CRC-32C of the 8 length bytes and the N header bytes,
//                             computed with this value's 8 digits set to "00000000"
// Either key present means both must be present and match.
#pragma once

#include <cstdint>

namespace shardscope::engine::checkpoint {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoint data is fp32 little-endian and copied as is");

inline constexpr const char* kSafetensorsMetadataKey = "__metadata__";
inline constexpr const char* kDataCrcKey = "shardscope.data_crc32c";
inline constexpr const char* kHeaderCrcKey = "shardscope.header_crc32c";
// The header text of the header checksum's key and value, as nlohmann::json::dump()
// writes it; exactly one occurrence in a header written by write_safetensors (a JSON
// string containing it would have its quotes escaped).
inline constexpr const char* kHeaderCrcPattern = "\"shardscope.header_crc32c\":\"";
inline constexpr const char* kCrcPlaceholder = "00000000";

}  // namespace shardscope::engine::checkpoint
